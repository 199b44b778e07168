#pragma once
// Host CPU and memory: /proc/stat (node CPU), /proc/<pid>/stat (process CPU and RSS),
// /proc/meminfo (MemTotal, MemAvailable). Parsers are pure functions over the text.
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "core/counters.h"

namespace dynamix {

struct NodeCpu {
  uint64_t total = 0;  // all jiffies of the aggregate "cpu" line
  uint64_t idle = 0;   // idle + iowait
};
struct ProcessStat {
  uint64_t cpu_ticks = 0;  // utime + stime (clock ticks; 0 on the live path, see cpu_ns)
  uint64_t rss_pages = 0;
  uint64_t cpu_ns = 0;     // process CPU time in ns
};
struct MemInfo {
  uint64_t total_kb = 0;
  uint64_t available_kb = 0;
};

// The aggregate "cpu " line of /proc/stat; nullopt when absent or malformed.
std::optional<NodeCpu> parse_proc_stat(std::string_view text);
// /proc/<pid>/stat; the command name may contain spaces and ')' so fields are counted
// after the last ')'.
std::optional<ProcessStat> parse_pid_stat(std::string_view text);
// Resident pages: the second field of /proc/<pid>/statm.
std::optional<uint64_t> parse_statm_rss(std::string_view text);
// MemTotal and MemAvailable of /proc/meminfo; nullopt when MemTotal is missing.
// MemAvailable missing (kernels < 3.14) -> MemFree + Buffers + Cached.
std::optional<MemInfo> parse_meminfo(std::string_view text);
// Number of "cpuN" lines.
int count_cpus(std::string_view proc_stat_text);

struct HostReading {
  std::optional<NodeCpu> node;
  std::optional<ProcessStat> process;
  std::optional<MemInfo> mem;
};

// Keeps the three files open; read() re-reads them with pread.
class HostReader {
 public:
  // pid "self" for this process. Missing files are no data, never an error. For this
  // process under the real /proc, CPU time comes from CLOCK_PROCESS_CPUTIME_ID (ns
  // resolution, no file) and RSS from statm (cheaper than stat); otherwise <pid>/stat.
  HostReader(const std::string& proc_root, const std::string& pid = "self");
  HostReading read() const;
  int num_cpus() const { return num_cpus_; }
  long ticks_per_second() const { return ticks_; }
  long page_size() const { return page_size_; }

 private:
  CounterFile stat_, pid_stat_, statm_, meminfo_;
  bool live_self_ = false;
  int num_cpus_ = 1;
  long ticks_ = 100;
  long page_size_ = 4096;
};

}  // namespace dynamix
