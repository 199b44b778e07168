// The only file that knows about Python: m.def / py::class_ over the plain C++ core.
#include <pybind11/pybind11.h>

#include "core/version.h"

namespace py = pybind11;

PYBIND11_MODULE(_native, m) {
  m.doc() = "dynamix_hvd native core: metric sampler and collective-timing reader";
  m.def("version", &dynamix::native_version, "Version of the native core.");
}
