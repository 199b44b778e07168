#pragma once
// The sampler: owns every counter source, a thread that samples them every `period_s`,
// and a bounded ring of snapshots. Readers get the latest snapshot or rates computed in
// place over a window of the ring (the ring is never copied out).
#include <array>
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "core/link.h"
#include "core/nvml.h"
#include "core/procstat.h"

namespace dynamix {

struct SamplerConfig {
  std::string proc_root = "/proc";
  std::string sys_root = "/sys";
  std::string pid = "self";
  std::vector<std::string> interfaces;  // empty -> default_interfaces(sys_root)
  bool infiniband = true;               // every InfiniBand port found under sys_root
  bool nvml = true;
  std::string nvml_library = "libnvidia-ml.so.1";
  int gpu_index = 0;
  double period_s = 0.1;
  size_t capacity = 600;        // snapshots kept (60 s at the default period)
  double max_link_Bps = 50e9;   // above this a delta is treated as a counter reset
};

struct Snapshot {
  uint64_t seq = 0;     // 0 for the first sample ever taken
  uint64_t t_ns = 0;    // CLOCK_MONOTONIC
  uint64_t cost_ns = 0; // time reading every source took
  std::vector<LinkReading> links;  // same order as Sampler::link_names()
  HostReading host;
  std::optional<GpuReading> gpu;
};

// Rates and gauges over a window; NaN = no data (fewer than two samples, counter absent,
// reset or wrap that cannot be trusted).
struct LinkRates {
  std::string name, kind;
  std::array<double, kNumLinkCounters> per_s;  // bytes/s for the byte counters, events/s otherwise
  std::array<double, kNumLinkCounters> delta;  // total counted over the window (sum of trusted deltas)
};
struct WindowRates {
  double start_s = kNaN, end_s = kNaN;  // monotonic seconds of the first and last sample used
  int samples = 0;
  std::vector<LinkRates> links;
  double node_cpu_util = kNaN;      // 0..1 over all CPUs of the node
  double process_cpu_cores = kNaN;  // CPUs' worth of time used by the process
  double process_cpu_util = kNaN;   // process_cpu_cores / number of CPUs
  double mem_total_bytes = kNaN, mem_available_bytes = kNaN, mem_headroom = kNaN, rss_bytes = kNaN;
  double gpu_util = kNaN, gpu_mem_used_bytes = kNaN, gpu_mem_total_bytes = kNaN, gpu_mem_headroom = kNaN;
};

// Per-source health, node_exporter style.
struct SourceStats {
  std::string name;
  uint64_t reads = 0, failures = 0, total_ns = 0;
};

class Sampler {
 public:
  // Opens every source. Throws std::invalid_argument on a bad configuration (unknown
  // interface, period <= 0, capacity < 2).
  explicit Sampler(const SamplerConfig& config);
  ~Sampler();
  Sampler(const Sampler&) = delete;
  Sampler& operator=(const Sampler&) = delete;

  // Starts / stops the sampling thread (idempotent). stop() joins it.
  void start();
  void stop();
  bool running() const { return running_.load(); }

  // Takes one sample now and pushes it into the ring (works with or without the thread).
  Snapshot sample_once();
  // Reads every source n times without touching the ring; returns each sample's cost in ns.
  std::vector<uint64_t> bench(int n);

  std::optional<Snapshot> latest() const;
  // Rates over the newest `window_s` seconds of the ring (<= 0: the whole ring).
  WindowRates rates(double window_s) const;
  // Rates between two monotonic times: from the last sample at or before t0_ns (or the
  // oldest) to the last sample at or before t1_ns.
  WindowRates rates_between(uint64_t t0_ns, uint64_t t1_ns) const;

  size_t size() const;
  size_t capacity() const { return capacity_; }
  uint64_t total_samples() const;
  std::vector<std::string> link_names() const;
  std::vector<std::string> link_kinds() const;
  int num_cpus() const { return host_.num_cpus(); }
  bool gpu_available() const { return nvml_ && nvml_->available(); }
  std::string gpu_status() const { return nvml_ ? nvml_->status() : "disabled"; }
  std::vector<SourceStats> source_stats() const;
  const SamplerConfig& config() const { return config_; }

 private:
  enum Source { kNet = 0, kIb, kHost, kGpu, kNumSources };
  void read_all(Snapshot& s);
  void push(const Snapshot& s);
  void loop();
  WindowRates window_locked(size_t first, size_t last) const;  // ring indices (logical, oldest = 0)
  const Snapshot& at_locked(size_t logical) const;

  SamplerConfig config_;
  std::vector<std::unique_ptr<LinkReader>> links_;
  HostReader host_;
  std::unique_ptr<NvmlReader> nvml_;
  size_t capacity_;

  mutable std::mutex mu_;  // guards ring_, head_
  std::vector<Snapshot> ring_;
  uint64_t head_ = 0;       // samples pushed so far
  Snapshot scratch_;        // used by the sampling thread only

  std::atomic<bool> running_{false};
  std::mutex run_mu_;
  std::condition_variable cv_;
  bool stop_requested_ = false;
  std::thread thread_;

  std::array<std::atomic<uint64_t>, kNumSources> reads_{}, failures_{}, ns_{};
};

}  // namespace dynamix
