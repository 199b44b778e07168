#include "core/link.h"

namespace dynamix {

const char* link_counter_name(int i) {
  static const char* names[kNumLinkCounters] = {"rx_bytes",  "tx_bytes",  "rx_packets", "tx_packets",
                                                "rx_errors", "tx_errors", "rx_dropped", "tx_dropped"};
  return (i >= 0 && i < kNumLinkCounters) ? names[i] : "?";
}

LinkReader::LinkReader(std::string name, std::string kind, const std::array<std::string, kNumLinkCounters>& files,
                       const std::array<uint64_t, kNumLinkCounters>& scale, int width_bits, bool saturates)
    : name_(std::move(name)), kind_(std::move(kind)), scale_(scale), width_bits_(width_bits), saturates_(saturates) {
  for (int i = 0; i < kNumLinkCounters; ++i) {
    if (!files[i].empty()) files_[i] = CounterFile(files[i]);
  }
}

int LinkReader::open_count() const {
  int n = 0;
  for (const auto& f : files_) n += f.is_open() ? 1 : 0;
  return n;
}

LinkReading LinkReader::read() const {
  LinkReading r;
  for (int i = 0; i < kNumLinkCounters; ++i) {
    if (auto v = files_[i].read_u64()) {
      r.value[i] = *v;
      r.valid |= 1u << i;
    }
  }
  return r;
}

}  // namespace dynamix
