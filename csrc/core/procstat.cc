#include "core/procstat.h"

#include <time.h>
#include <unistd.h>

#include <cstring>

namespace dynamix {
namespace {

// Reads unsigned decimal fields separated by spaces starting at pos; returns count read.
int read_fields(std::string_view s, size_t pos, uint64_t* out, int max) {
  int n = 0;
  while (n < max) {
    while (pos < s.size() && s[pos] == ' ') ++pos;
    if (pos >= s.size() || s[pos] < '0' || s[pos] > '9') break;
    uint64_t v = 0;
    while (pos < s.size() && s[pos] >= '0' && s[pos] <= '9') v = v * 10 + static_cast<uint64_t>(s[pos++] - '0');
    out[n++] = v;
  }
  return n;
}

std::optional<uint64_t> meminfo_field(std::string_view text, std::string_view key) {
  size_t pos = 0;
  while (pos < text.size()) {
    size_t eol = text.find('\n', pos);
    if (eol == std::string_view::npos) eol = text.size();
    std::string_view line = text.substr(pos, eol - pos);
    if (line.size() > key.size() && line.substr(0, key.size()) == key && line[key.size()] == ':') {
      uint64_t v;
      size_t p = key.size() + 1;
      while (p < line.size() && line[p] == ' ') ++p;
      if (read_fields(line, p, &v, 1) == 1) return v;
      return std::nullopt;
    }
    pos = eol + 1;
  }
  return std::nullopt;
}

}  // namespace

std::optional<NodeCpu> parse_proc_stat(std::string_view text) {
  if (text.substr(0, 4) != "cpu ") return std::nullopt;
  uint64_t f[10] = {0};
  const int n = read_fields(text, 4, f, 10);
  if (n < 4) return std::nullopt;
  NodeCpu c;
  // user nice system idle iowait irq softirq steal [guest guest_nice: already in user/nice]
  for (int i = 0; i < n && i < 8; ++i) c.total += f[i];
  c.idle = f[3] + (n > 4 ? f[4] : 0);
  return c;
}

int count_cpus(std::string_view text) {
  int n = 0;
  size_t pos = 0;
  while (pos < text.size()) {
    if (text.compare(pos, 3, "cpu") == 0 && pos + 3 < text.size() && text[pos + 3] >= '0' && text[pos + 3] <= '9') ++n;
    const size_t eol = text.find('\n', pos);
    if (eol == std::string_view::npos) break;
    pos = eol + 1;
  }
  return n;
}

std::optional<ProcessStat> parse_pid_stat(std::string_view text) {
  const size_t rp = text.rfind(')');
  if (rp == std::string_view::npos || rp + 2 >= text.size()) return std::nullopt;
  // After ") ": field 3 is state (a letter), then numeric fields 4.. onward.
  size_t pos = rp + 2;
  if (pos >= text.size()) return std::nullopt;
  pos += 1;  // state character
  uint64_t f[21];
  // Fields 4..24 -> f[0..20]; utime = field 14 -> f[10], stime = 15 -> f[11], rss = 24 -> f[20].
  // Field 7 (tty_nr) and others are non-negative on Linux except priority/nice (18, 19), which
  // may be negative: handle a leading '-' by skipping it.
  int n = 0;
  while (n < 21 && pos < text.size()) {
    while (pos < text.size() && text[pos] == ' ') ++pos;
    if (pos < text.size() && text[pos] == '-') ++pos;
    if (pos >= text.size() || text[pos] < '0' || text[pos] > '9') break;
    uint64_t v = 0;
    while (pos < text.size() && text[pos] >= '0' && text[pos] <= '9') v = v * 10 + static_cast<uint64_t>(text[pos++] - '0');
    f[n++] = v;
  }
  if (n < 21) return std::nullopt;
  return ProcessStat{f[10] + f[11], f[20]};
}

std::optional<uint64_t> parse_statm_rss(std::string_view text) {
  uint64_t f[2];
  if (read_fields(text, 0, f, 2) != 2) return std::nullopt;
  return f[1];
}

std::optional<MemInfo> parse_meminfo(std::string_view text) {
  auto total = meminfo_field(text, "MemTotal");
  if (!total) return std::nullopt;
  MemInfo m;
  m.total_kb = *total;
  if (auto avail = meminfo_field(text, "MemAvailable")) {
    m.available_kb = *avail;
  } else {
    m.available_kb = meminfo_field(text, "MemFree").value_or(0) + meminfo_field(text, "Buffers").value_or(0) +
                     meminfo_field(text, "Cached").value_or(0);
  }
  return m;
}

HostReader::HostReader(const std::string& proc_root, const std::string& pid)
    : stat_(proc_root + "/stat"), meminfo_(proc_root + "/meminfo") {
  live_self_ = (proc_root == "/proc" && pid == "self");
  if (live_self_) {
    statm_ = CounterFile(proc_root + "/self/statm");
  } else {
    pid_stat_ = CounterFile(proc_root + "/" + pid + "/stat");
  }
  if (auto text = read_text_file(proc_root + "/stat")) {
    const int n = count_cpus(*text);
    if (n > 0) num_cpus_ = n;
  }
  ticks_ = ::sysconf(_SC_CLK_TCK);
  if (ticks_ <= 0) ticks_ = 100;
  page_size_ = ::sysconf(_SC_PAGESIZE);
  if (page_size_ <= 0) page_size_ = 4096;
}

HostReading HostReader::read() const {
  HostReading r;
  char buf[1024];
  // Only the first line of /proc/stat and the first lines of meminfo are needed.
  long n = stat_.read_into(buf, 256);
  if (n > 0) r.node = parse_proc_stat(std::string_view(buf, static_cast<size_t>(n)));
  if (live_self_) {
    timespec ts;
    n = statm_.read_into(buf, 128);
    auto rss = n > 0 ? parse_statm_rss(std::string_view(buf, static_cast<size_t>(n))) : std::nullopt;
    if (rss && clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts) == 0) {
      r.process = ProcessStat{0, *rss, uint64_t(ts.tv_sec) * 1000000000ull + uint64_t(ts.tv_nsec)};
    }
  } else {
    n = pid_stat_.read_into(buf, sizeof(buf));
    if (n > 0) r.process = parse_pid_stat(std::string_view(buf, static_cast<size_t>(n)));
    if (r.process) r.process->cpu_ns = r.process->cpu_ticks * (1000000000ull / uint64_t(ticks_));
  }
  n = meminfo_.read_into(buf, 256);
  if (n > 0) r.mem = parse_meminfo(std::string_view(buf, static_cast<size_t>(n)));
  return r;
}

}  // namespace dynamix
