#include "core/version.h"

namespace dynamix {
std::string native_version() { return "0.1.0"; }
}  // namespace dynamix
