#include "core/sampler.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <stdexcept>

#include "core/infiniband.h"
#include "core/netdev.h"

namespace dynamix {
namespace {
constexpr const char* kSourceNames[] = {"netdev", "infiniband", "host", "gpu"};
constexpr uint64_t kNoLimit = ~0ull;
}  // namespace

Sampler::Sampler(const SamplerConfig& config)
    : config_(config), host_(config.proc_root, config.pid), capacity_(config.capacity) {
  if (!(config.period_s > 0)) throw std::invalid_argument("sampler period_s must be > 0");
  if (config.capacity < 2) throw std::invalid_argument("sampler capacity must be >= 2");
  const auto ifaces = config.interfaces.empty() ? default_interfaces(config.sys_root) : config.interfaces;
  for (const auto& name : ifaces) links_.push_back(open_netdev(config.sys_root, name));
  if (config.infiniband) {
    for (const auto& port : list_ib_ports(config.sys_root)) links_.push_back(open_ib_port(config.sys_root, port));
  }
  if (config.nvml) nvml_ = std::make_unique<NvmlReader>(config.nvml_library, config.gpu_index);
  ring_.resize(capacity_);
  for (auto& s : ring_) s.links.resize(links_.size());
  scratch_.links.resize(links_.size());
}

Sampler::~Sampler() { stop(); }

void Sampler::read_all(Snapshot& s) {
  const uint64_t t0 = now_ns();
  s.links.resize(links_.size());
  uint64_t t = t0;
  bool net_fail = false, ib_fail = false;
  bool any_net = false, any_ib = false;
  uint64_t net_ns = 0, ib_ns = 0;
  for (size_t i = 0; i < links_.size(); ++i) {
    s.links[i] = links_[i]->read();
    const uint64_t t1 = now_ns();
    const bool ib = links_[i]->kind() == "ib";
    const bool fail = !(s.links[i].has(kRxBytes) && s.links[i].has(kTxBytes));
    if (ib) { ib_ns += t1 - t; ib_fail |= fail; any_ib = true; }
    else { net_ns += t1 - t; net_fail |= fail; any_net = true; }
    t = t1;
  }
  if (any_net) { reads_[kNet]++; failures_[kNet] += net_fail; ns_[kNet] += net_ns; }
  if (any_ib) { reads_[kIb]++; failures_[kIb] += ib_fail; ns_[kIb] += ib_ns; }
  s.host = host_.read();
  uint64_t t1 = now_ns();
  reads_[kHost]++;
  failures_[kHost] += !(s.host.node && s.host.process && s.host.mem);
  ns_[kHost] += t1 - t;
  t = t1;
  if (nvml_ && nvml_->available()) {
    s.gpu = nvml_->read();
    t1 = now_ns();
    reads_[kGpu]++;
    failures_[kGpu] += !s.gpu;
    ns_[kGpu] += t1 - t;
  } else {
    s.gpu.reset();
    t1 = now_ns();
  }
  s.t_ns = t1;
  s.cost_ns = t1 - t0;
}

void Sampler::push(const Snapshot& s) {
  std::lock_guard<std::mutex> lock(mu_);
  // Two threads sampling at once (the sampler thread and sample_once) may finish out of
  // order: keep the ring sorted by time by dropping the older straggler.
  if (head_ > 0 && s.t_ns <= ring_[(head_ - 1) % capacity_].t_ns) return;
  Snapshot& slot = ring_[head_ % capacity_];
  slot.t_ns = s.t_ns;
  slot.cost_ns = s.cost_ns;
  slot.links = s.links;  // same size: no allocation
  slot.host = s.host;
  slot.gpu = s.gpu;
  slot.seq = head_++;
}

Snapshot Sampler::sample_once() {
  Snapshot s;
  read_all(s);
  push(s);
  std::lock_guard<std::mutex> lock(mu_);
  s.seq = head_ - 1;
  return s;
}

std::vector<uint64_t> Sampler::bench(int n) {
  std::vector<uint64_t> out;
  out.reserve(static_cast<size_t>(std::max(n, 0)));
  Snapshot s;
  s.links.resize(links_.size());
  for (int i = 0; i < n; ++i) {
    read_all(s);
    out.push_back(s.cost_ns);
  }
  return out;
}

void Sampler::loop() {
  const auto period = std::chrono::nanoseconds(static_cast<int64_t>(config_.period_s * 1e9));
  auto next = std::chrono::steady_clock::now();
  std::unique_lock<std::mutex> lock(run_mu_);
  while (!stop_requested_) {
    lock.unlock();
    read_all(scratch_);
    push(scratch_);
    lock.lock();
    next += period;
    const auto now = std::chrono::steady_clock::now();
    if (next < now) next = now;  // fell behind (suspended, overloaded): do not burst
    cv_.wait_until(lock, next, [this] { return stop_requested_; });
  }
}

void Sampler::start() {
  std::lock_guard<std::mutex> lock(run_mu_);
  if (running_.load()) return;
  stop_requested_ = false;
  thread_ = std::thread([this] { loop(); });
  running_.store(true);
}

void Sampler::stop() {
  {
    std::lock_guard<std::mutex> lock(run_mu_);
    if (!running_.load()) return;
    stop_requested_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
  running_.store(false);
}

size_t Sampler::size() const {
  std::lock_guard<std::mutex> lock(mu_);
  return static_cast<size_t>(std::min<uint64_t>(head_, capacity_));
}

uint64_t Sampler::total_samples() const {
  std::lock_guard<std::mutex> lock(mu_);
  return head_;
}

const Snapshot& Sampler::at_locked(size_t logical) const {
  const uint64_t n = std::min<uint64_t>(head_, capacity_);
  const uint64_t oldest = head_ - n;
  return ring_[(oldest + logical) % capacity_];
}

std::optional<Snapshot> Sampler::latest() const {
  std::lock_guard<std::mutex> lock(mu_);
  if (head_ == 0) return std::nullopt;
  return ring_[(head_ - 1) % capacity_];
}

std::vector<std::string> Sampler::link_names() const {
  std::vector<std::string> out;
  for (const auto& l : links_) out.push_back(l->name());
  return out;
}

std::vector<std::string> Sampler::link_kinds() const {
  std::vector<std::string> out;
  for (const auto& l : links_) out.push_back(l->kind());
  return out;
}

std::vector<SourceStats> Sampler::source_stats() const {
  std::vector<SourceStats> out;
  for (int i = 0; i < kNumSources; ++i) {
    out.push_back(SourceStats{kSourceNames[i], reads_[i].load(), failures_[i].load(), ns_[i].load()});
  }
  return out;
}

WindowRates Sampler::rates(double window_s) const {
  std::lock_guard<std::mutex> lock(mu_);
  const size_t n = static_cast<size_t>(std::min<uint64_t>(head_, capacity_));
  if (n == 0) return WindowRates{};
  size_t first = 0;
  if (window_s > 0) {
    const uint64_t t_end = at_locked(n - 1).t_ns;
    const uint64_t span = static_cast<uint64_t>(window_s * 1e9);
    const uint64_t t_start = t_end > span ? t_end - span : 0;
    first = n - 1;
    while (first > 0 && at_locked(first - 1).t_ns >= t_start) --first;
  }
  return window_locked(first, n - 1);
}

WindowRates Sampler::rates_between(uint64_t t0_ns, uint64_t t1_ns) const {
  std::lock_guard<std::mutex> lock(mu_);
  const size_t n = static_cast<size_t>(std::min<uint64_t>(head_, capacity_));
  if (n == 0 || at_locked(0).t_ns > t1_ns) return WindowRates{};
  size_t last = n - 1;
  while (last > 0 && at_locked(last).t_ns > t1_ns) --last;
  size_t first = last;
  while (first > 0 && at_locked(first).t_ns > t0_ns) --first;
  return window_locked(first, last);
}

WindowRates Sampler::window_locked(size_t first, size_t last) const {
  WindowRates w;
  const Snapshot& a = at_locked(first);
  const Snapshot& b = at_locked(last);
  w.samples = static_cast<int>(last - first + 1);
  w.start_s = a.t_ns * 1e-9;
  w.end_s = b.t_ns * 1e-9;
  // Links: sum the trusted per-interval deltas and divide by the time they cover, so a
  // reset or untrusted wrap inside the window drops one interval instead of poisoning it.
  for (size_t li = 0; li < links_.size(); ++li) {
    const LinkReader& link = *links_[li];
    LinkRates r;
    r.name = link.name();
    r.kind = link.kind();
    for (int c = 0; c < kNumLinkCounters; ++c) {
      double sum = 0, covered = 0;
      bool any = false;
      for (size_t i = first; i < last; ++i) {
        const Snapshot& s0 = at_locked(i);
        const Snapshot& s1 = at_locked(i + 1);
        if (li >= s0.links.size() || li >= s1.links.size()) continue;
        const LinkReading& x = s0.links[li];
        const LinkReading& y = s1.links[li];
        if (!x.has(c) || !y.has(c)) continue;
        const double dt = (s1.t_ns - s0.t_ns) * 1e-9;
        if (dt <= 0) continue;
        const uint64_t max_delta = static_cast<uint64_t>(std::min(config_.max_link_Bps * dt / link.scale(c), 1.8e19));
        const int width = (x.value[c] > 0xFFFFFFFFull || y.value[c] > 0xFFFFFFFFull) ? 64 : link.width_bits();
        auto d = counter_delta(x.value[c], y.value[c], width, max_delta, link.saturates() && width == 32);
        if (!d) continue;
        sum += static_cast<double>(*d) * static_cast<double>(link.scale(c));
        covered += dt;
        any = true;
      }
      r.delta[c] = any ? sum : kNaN;
      r.per_s[c] = (any && covered > 0) ? sum / covered : kNaN;
    }
    w.links.push_back(std::move(r));
  }
  const double dt = (b.t_ns - a.t_ns) * 1e-9;
  if (last > first && dt > 0) {
    if (a.host.node && b.host.node) {
      auto dtot = counter_delta(a.host.node->total, b.host.node->total, 64, kNoLimit);
      auto didle = counter_delta(a.host.node->idle, b.host.node->idle, 64, kNoLimit);
      if (dtot && didle && *dtot > 0 && *didle <= *dtot) w.node_cpu_util = 1.0 - double(*didle) / double(*dtot);
    }
    if (a.host.process && b.host.process) {
      auto d = counter_delta(a.host.process->cpu_ns, b.host.process->cpu_ns, 64, kNoLimit);
      if (d) {
        w.process_cpu_cores = double(*d) * 1e-9 / dt;
        w.process_cpu_util = std::min(1.0, w.process_cpu_cores / host_.num_cpus());
      }
    }
  }
  if (b.host.mem && b.host.mem->total_kb > 0) {
    w.mem_total_bytes = b.host.mem->total_kb * 1024.0;
    w.mem_available_bytes = b.host.mem->available_kb * 1024.0;
    w.mem_headroom = w.mem_available_bytes / w.mem_total_bytes;
  }
  if (b.host.process) w.rss_bytes = double(b.host.process->rss_pages) * double(host_.page_size());
  // GPU utilisation is a gauge: mean over the window's samples; memory from the newest.
  double util_sum = 0;
  int util_n = 0;
  for (size_t i = first; i <= last; ++i) {
    const Snapshot& s = at_locked(i);
    if (s.gpu) { util_sum += s.gpu->util; ++util_n; }
  }
  if (util_n > 0) w.gpu_util = util_sum / util_n;
  if (b.gpu && b.gpu->mem_total > 0) {
    w.gpu_mem_used_bytes = double(b.gpu->mem_used);
    w.gpu_mem_total_bytes = double(b.gpu->mem_total);
    w.gpu_mem_headroom = 1.0 - w.gpu_mem_used_bytes / w.gpu_mem_total_bytes;
  }
  return w;
}

}  // namespace dynamix
