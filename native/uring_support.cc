#include "uring_support.h"

#include <cstring>

#ifdef DISKGNN_HAVE_LIBURING
#include <liburing.h>
#endif

namespace diskgnn {

bool io_uring_compiled() {
#ifdef DISKGNN_HAVE_LIBURING
  return true;
#else
  return false;
#endif
}

std::string io_uring_unavailable_reason() {
#ifdef DISKGNN_HAVE_LIBURING
  io_uring ring;
  int rc = io_uring_queue_init(2, &ring, 0);
  if (rc < 0) {
    return std::string("io_uring_queue_init failed: ") + std::strerror(-rc);
  }
  io_uring_queue_exit(&ring);
  return "";
#else
  return "built without liburing (pkg-config did not find it at build time)";
#endif
}

}  // namespace diskgnn
