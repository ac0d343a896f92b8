// Whether io_uring can be used: compiled in (system liburing found at build
// time) and allowed by the running kernel (it may be disabled by sysctl,
// seccomp or a container runtime even when compiled in).
#pragma once

#include <string>

namespace diskgnn {

/// @brief True when the extension was built against liburing.
bool io_uring_compiled();

/// @brief Tries to set up a small ring.
/// @return Empty string when io_uring works here, otherwise why it does not.
std::string io_uring_unavailable_reason();

}  // namespace diskgnn
