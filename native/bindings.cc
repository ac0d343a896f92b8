// The only translation unit that includes pybind11: it declares what the
// native library exports to Python and holds no logic of its own.
#include <pybind11/pybind11.h>

#include "uring_support.h"

namespace py = pybind11;

PYBIND11_MODULE(_native, m) {
  m.doc() = "diskgnn native core (C++17)";
  m.def("io_uring_compiled", &diskgnn::io_uring_compiled,
        "True when built against the system liburing.");
  m.def("io_uring_unavailable_reason", &diskgnn::io_uring_unavailable_reason,
        "Empty when io_uring works on this kernel, else the reason it does not.");
}
