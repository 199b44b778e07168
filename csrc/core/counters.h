#pragma once
// Pure helpers shared by every counter source: parsing one counter file, turning two
// readings into a delta that is never negative or absurd, a monotonic clock, and a
// file kept open and re-read with pread.
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <string_view>

namespace dynamix {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// Monotonic clock in nanoseconds (CLOCK_MONOTONIC, same clock as the PMPI recorder).
uint64_t now_ns();

// Parses a sysfs counter ("12345\n"). "N/A", empty text or garbage -> nullopt ("no data").
std::optional<uint64_t> parse_counter(std::string_view text);

// Delta between two readings of a counter that only grows, or nullopt when the interval
// has no trustworthy value. `width_bits` is 32 or 64. A reading below the previous one is
// a wrap-around only if the wrapped delta is <= max_delta, otherwise a reset (nullopt).
// A delta above max_delta is absurd (nullopt). With `saturates`, a 32-bit counter stuck at
// 0xFFFFFFFF (InfiniBand PMA counters stop there) gives nullopt.
std::optional<uint64_t> counter_delta(uint64_t prev, uint64_t cur, int width_bits, uint64_t max_delta,
                                      bool saturates = false);

// A file opened once and re-read from offset 0 with pread on every sample.
class CounterFile {
 public:
  CounterFile() = default;
  explicit CounterFile(const std::string& path);
  CounterFile(CounterFile&& other) noexcept;
  CounterFile& operator=(CounterFile&& other) noexcept;
  CounterFile(const CounterFile&) = delete;
  CounterFile& operator=(const CounterFile&) = delete;
  ~CounterFile();

  bool is_open() const { return fd_ >= 0; }
  const std::string& path() const { return path_; }
  // Reads up to `cap` bytes into buf; returns the length or -1 on error.
  long read_into(char* buf, size_t cap) const;
  // Reads and parses one counter; nullopt when closed, unreadable or "N/A".
  std::optional<uint64_t> read_u64() const;

 private:
  int fd_ = -1;
  std::string path_;
};

// Reads a whole (small) text file; nullopt when missing.
std::optional<std::string> read_text_file(const std::string& path);

}  // namespace dynamix
