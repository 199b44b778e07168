#include "core/comm_reader.h"

#include <dlfcn.h>

#include <algorithm>
#include <cmath>
#include <limits>

namespace dynamix {
namespace {
constexpr double kNaNd = std::numeric_limits<double>::quiet_NaN();

double quantile(const std::vector<double>& sorted, double q) {
  if (sorted.empty()) return kNaNd;
  const double pos = q * double(sorted.size() - 1);
  const size_t lo = size_t(std::floor(pos));
  const size_t hi = std::min(lo + 1, sorted.size() - 1);
  const double frac = pos - double(lo);
  return sorted[lo] * (1 - frac) + sorted[hi] * frac;
}
}  // namespace

CommStats summarize(const std::vector<dynamix_comm_record>& records, uint32_t op_mask, int cls) {
  CommStats s;
  std::vector<double> d;
  uint64_t first = std::numeric_limits<uint64_t>::max(), last = 0;
  for (const auto& r : records) {
    if (r.op >= 32 || !((op_mask >> r.op) & 1u)) continue;
    if (cls >= 0 && int(r.cls) != cls) continue;
    ++s.count;
    s.bytes += r.bytes;
    const double dur = r.end_ns >= r.start_ns ? (r.end_ns - r.start_ns) * 1e-9 : 0.0;
    d.push_back(dur);
    s.busy_s += dur;
    first = std::min(first, r.start_ns);
    last = std::max(last, r.end_ns);
  }
  std::sort(d.begin(), d.end());
  s.p50_s = quantile(d, 0.5);
  s.p90_s = quantile(d, 0.9);
  s.p99_s = quantile(d, 0.99);
  s.max_s = d.empty() ? kNaNd : d.back();
  s.bandwidth_Bps = s.busy_s > 0 ? double(s.bytes) / s.busy_s : kNaNd;
  s.first_start_s = s.count ? first * 1e-9 : kNaNd;
  s.last_end_s = s.count ? last * 1e-9 : kNaNd;
  return s;
}

CommReader::CommReader() {
  auto abi = reinterpret_cast<dynamix_pmpi_abi_fn>(::dlsym(RTLD_DEFAULT, "dynamix_pmpi_abi"));
  if (!abi) {
    status_ = "libdynamix_pmpi.so is not loaded in this process (preload it: `dynamix run -- CMD` or "
              "LD_PRELOAD=$(python -m dynamix_hvd.launch --print-preload))";
    return;
  }
  if (abi() != DYNAMIX_COMM_ABI) {
    status_ = "libdynamix_pmpi.so ABI " + std::to_string(abi()) + " != expected " + std::to_string(DYNAMIX_COMM_ABI);
    return;
  }
  head_ = reinterpret_cast<dynamix_pmpi_head_fn>(::dlsym(RTLD_DEFAULT, "dynamix_pmpi_head"));
  totals_ = reinterpret_cast<dynamix_pmpi_totals_fn>(::dlsym(RTLD_DEFAULT, "dynamix_pmpi_totals"));
  set_enabled_ = reinterpret_cast<dynamix_pmpi_set_enabled_fn>(::dlsym(RTLD_DEFAULT, "dynamix_pmpi_set_enabled"));
  enabled_ = reinterpret_cast<dynamix_pmpi_enabled_fn>(::dlsym(RTLD_DEFAULT, "dynamix_pmpi_enabled"));
  auto rd = reinterpret_cast<dynamix_pmpi_read_fn>(::dlsym(RTLD_DEFAULT, "dynamix_pmpi_read"));
  if (!head_ || !totals_ || !set_enabled_ || !enabled_ || !rd) {
    status_ = "libdynamix_pmpi.so lacks part of the reader API";
    return;
  }
  read_ = rd;
  status_ = "ok";
}

uint64_t CommReader::head() const { return head_ ? head_() : 0; }

CommBatch CommReader::read(uint64_t from, size_t max_records) const {
  CommBatch b;
  b.next = from;
  if (!read_) return b;
  const uint64_t h = head_();
  const size_t want = size_t(std::min<uint64_t>(h > from ? h - from : 0, max_records));
  b.records.resize(want);
  const size_t n = want ? read_(from, b.records.data(), want, &b.next, &b.lost) : 0;
  b.records.resize(n);
  return b;
}

CommTotals CommReader::totals(uint32_t op, uint32_t cls) const {
  CommTotals t;
  if (totals_) totals_(op, cls, &t.count, &t.bytes, &t.busy_ns);
  return t;
}

void CommReader::set_enabled(bool on) const {
  if (set_enabled_) set_enabled_(on ? 1 : 0);
}

bool CommReader::enabled() const { return enabled_ ? enabled_() != 0 : false; }

}  // namespace dynamix
