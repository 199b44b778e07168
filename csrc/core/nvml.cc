#include "core/nvml.h"

#include <dlfcn.h>

namespace dynamix {
namespace {
// The few NVML types we need, declared here so nvml.h is not needed at build time
// (layouts from the public NVML API, stable since v2 of these entry points).
using nvmlReturn_t = int;
using nvmlDevice_t = void*;
struct nvmlUtilization_t {
  unsigned int gpu;
  unsigned int memory;
};
struct nvmlMemory_t {
  unsigned long long total;
  unsigned long long free;
  unsigned long long used;
};
}  // namespace

struct NvmlReader::Api {
  nvmlReturn_t (*init)() = nullptr;
  nvmlReturn_t (*shutdown)() = nullptr;
  nvmlReturn_t (*count)(unsigned int*) = nullptr;
  nvmlReturn_t (*handle)(unsigned int, nvmlDevice_t*) = nullptr;
  nvmlReturn_t (*util)(nvmlDevice_t, nvmlUtilization_t*) = nullptr;
  nvmlReturn_t (*memory)(nvmlDevice_t, nvmlMemory_t*) = nullptr;
  bool initialised = false;
};

NvmlReader::NvmlReader(const std::string& library, int device_index) : api_(new Api) {
  lib_ = ::dlopen(library.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!lib_) {
    status_ = "NVML library not loadable: " + library;
    return;
  }
  auto sym = [this](const char* name) { return ::dlsym(lib_, name); };
  api_->init = reinterpret_cast<nvmlReturn_t (*)()>(sym("nvmlInit_v2"));
  api_->shutdown = reinterpret_cast<nvmlReturn_t (*)()>(sym("nvmlShutdown"));
  api_->count = reinterpret_cast<nvmlReturn_t (*)(unsigned int*)>(sym("nvmlDeviceGetCount_v2"));
  api_->handle = reinterpret_cast<nvmlReturn_t (*)(unsigned int, nvmlDevice_t*)>(sym("nvmlDeviceGetHandleByIndex_v2"));
  api_->util = reinterpret_cast<nvmlReturn_t (*)(nvmlDevice_t, nvmlUtilization_t*)>(sym("nvmlDeviceGetUtilizationRates"));
  api_->memory = reinterpret_cast<nvmlReturn_t (*)(nvmlDevice_t, nvmlMemory_t*)>(sym("nvmlDeviceGetMemoryInfo"));
  if (!api_->init || !api_->count || !api_->handle || !api_->util || !api_->memory) {
    status_ = "NVML library lacks the v2 entry points";
    return;
  }
  if (api_->init() != 0) {
    status_ = "nvmlInit_v2 failed (no driver?)";
    return;
  }
  api_->initialised = true;
  unsigned int n = 0;
  if (api_->count(&n) != 0 || n == 0 || device_index < 0 || static_cast<unsigned int>(device_index) >= n) {
    status_ = "no NVML device with index " + std::to_string(device_index);
    return;
  }
  nvmlDevice_t dev = nullptr;
  if (api_->handle(static_cast<unsigned int>(device_index), &dev) != 0 || !dev) {
    status_ = "nvmlDeviceGetHandleByIndex_v2 failed";
    return;
  }
  device_ = dev;
}

NvmlReader::~NvmlReader() {
  if (api_ && api_->initialised && api_->shutdown) api_->shutdown();
  if (lib_) ::dlclose(lib_);
  delete api_;
}

std::optional<GpuReading> NvmlReader::read() const {
  if (!device_) return std::nullopt;
  nvmlUtilization_t u{};
  nvmlMemory_t m{};
  if (api_->util(device_, &u) != 0 || api_->memory(device_, &m) != 0) return std::nullopt;
  return GpuReading{u.gpu / 100.0, m.used, m.total};
}

}  // namespace dynamix
