// Description: io_uring availability is reported consistently with the build.
#include <cstdio>

#include "uring_support.h"

int main() {
  std::string reason = diskgnn::io_uring_unavailable_reason();
  if (!diskgnn::io_uring_compiled()) {
    if (reason.empty()) {
      std::printf("built without liburing but reports io_uring available\n");
      return 1;
    }
    std::printf("%s\n", reason.c_str());
    return 77;
  }
  if (!reason.empty()) {
    std::printf("io_uring compiled in but unusable here: %s\n", reason.c_str());
    return 77;
  }
  return 0;
}
