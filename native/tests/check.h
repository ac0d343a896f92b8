// The assertion every native test program uses: report and count, keep going,
// so one run lists every failed check. main() ends with `return test_result();`.
#pragma once

#include <cstdio>

namespace test_check {
inline int failures = 0;
}

#define CHECK(cond)                                                          \
  do {                                                                       \
    if (!(cond)) {                                                           \
      std::printf("%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond); \
      ++test_check::failures;                                                \
    }                                                                        \
  } while (0)

/// @return the exit code: 0 when every check passed, 1 otherwise.
inline int test_result() {
  if (test_check::failures) std::printf("%d checks failed\n", test_check::failures);
  return test_check::failures ? 1 : 0;
}
