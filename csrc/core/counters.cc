#include "core/counters.h"

#include <fcntl.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <fstream>
#include <sstream>

namespace dynamix {

uint64_t now_ns() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000ull + static_cast<uint64_t>(ts.tv_nsec);
}

std::optional<uint64_t> parse_counter(std::string_view text) {
  size_t i = 0;
  while (i < text.size() && (text[i] == ' ' || text[i] == '\t')) ++i;
  if (i == text.size()) return std::nullopt;
  uint64_t v = 0;
  size_t digits = 0;
  for (; i < text.size() && text[i] >= '0' && text[i] <= '9'; ++i, ++digits) {
    const uint64_t d = static_cast<uint64_t>(text[i] - '0');
    if (v > (std::numeric_limits<uint64_t>::max() - d) / 10) return std::nullopt;  // overflow
    v = v * 10 + d;
  }
  if (digits == 0) return std::nullopt;  // "N/A", "-1", text
  for (; i < text.size(); ++i) {
    const char c = text[i];
    if (c != ' ' && c != '\n' && c != '\t' && c != '\r' && c != '\0') return std::nullopt;
  }
  return v;
}

std::optional<uint64_t> counter_delta(uint64_t prev, uint64_t cur, int width_bits, uint64_t max_delta,
                                      bool saturates) {
  constexpr uint64_t k32 = 0xFFFFFFFFull;
  if (width_bits == 32 && saturates && (cur == k32 || prev == k32)) return std::nullopt;
  if (cur >= prev) {
    const uint64_t d = cur - prev;
    if (d > max_delta) return std::nullopt;
    return d;
  }
  uint64_t wrapped;
  if (width_bits == 32) {
    if (prev > k32 || cur > k32) return std::nullopt;  // not a 32-bit counter: a reset
    wrapped = (k32 - prev) + cur + 1;
  } else {
    wrapped = (std::numeric_limits<uint64_t>::max() - prev) + cur + 1;
  }
  if (wrapped > max_delta) return std::nullopt;  // counter was reset (driver reload, perfquery -R)
  return wrapped;
}

CounterFile::CounterFile(const std::string& path) : path_(path) {
  fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
}

CounterFile::CounterFile(CounterFile&& other) noexcept : fd_(other.fd_), path_(std::move(other.path_)) {
  other.fd_ = -1;
}

CounterFile& CounterFile::operator=(CounterFile&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = other.fd_;
    path_ = std::move(other.path_);
    other.fd_ = -1;
  }
  return *this;
}

CounterFile::~CounterFile() {
  if (fd_ >= 0) ::close(fd_);
}

long CounterFile::read_into(char* buf, size_t cap) const {
  if (fd_ < 0) return -1;
  ssize_t n;
  do {
    n = ::pread(fd_, buf, cap, 0);
  } while (n < 0 && errno == EINTR);
  return static_cast<long>(n);
}

std::optional<uint64_t> CounterFile::read_u64() const {
  char buf[64];
  const long n = read_into(buf, sizeof(buf));
  if (n <= 0) return std::nullopt;
  return parse_counter(std::string_view(buf, static_cast<size_t>(n)));
}

std::optional<std::string> read_text_file(const std::string& path) {
  std::ifstream in(path);
  if (!in) return std::nullopt;
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace dynamix
