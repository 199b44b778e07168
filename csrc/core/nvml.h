#pragma once
// GPU utilisation and memory through NVML, loaded with dlopen at run time: no link-time
// dependency. Absent library, failed init or absent device -> available() false and every
// reading empty ("no data"), never an error.
#include <cstdint>
#include <optional>
#include <string>

namespace dynamix {

struct GpuReading {
  double util = 0;          // 0..1 (nvmlUtilization_t.gpu / 100)
  uint64_t mem_used = 0;    // bytes
  uint64_t mem_total = 0;   // bytes
};

class NvmlReader {
 public:
  // library: a soname or path ("libnvidia-ml.so.1"); device_index: NVML index of this rank's GPU.
  NvmlReader(const std::string& library, int device_index);
  ~NvmlReader();
  NvmlReader(const NvmlReader&) = delete;
  NvmlReader& operator=(const NvmlReader&) = delete;

  bool available() const { return device_ != nullptr; }
  // Why it is unavailable ("" when available).
  const std::string& status() const { return status_; }
  std::optional<GpuReading> read() const;

 private:
  struct Api;
  void* lib_ = nullptr;
  void* device_ = nullptr;
  Api* api_ = nullptr;
  std::string status_;
};

}  // namespace dynamix
