#pragma once
#include <string>

namespace dynamix {
// Version and build facts of the native core, reported by `dynamix probe`.
std::string native_version();
}  // namespace dynamix
