// Description: the io_uring engine (O_DIRECT, several rings, registered and
// plain buffers) matches a plain pread oracle on awkward sizes.
#include "options.h"
#include "reader_checks.h"
#include "uring_support.h"

int main() {
  const std::string reason = diskgnn::io_uring_unavailable_reason();
  if (!reason.empty()) {
    std::printf("io_uring unavailable: %s\n", reason.c_str());
    return 77;
  }
  const reader_checks::temp_file probe(reader_checks::random_bytes(4096, 1));
  diskgnn::reader_options options = test_options::reader("auto", diskgnn::direct_mode::automatic);
  {
    diskgnn::file_reader reader(probe.path(), options);
    if (reader.backend() != "io_uring") {
      std::printf("auto did not pick io_uring under TMPDIR: %s\n", reader.fallback_reason().c_str());
      return 77;
    }
  }
  options.backend = "io_uring";
  reader_checks::check_all(options);
  return test_result();
}
