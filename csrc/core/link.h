#pragma once
// One network link (an Ethernet interface or an InfiniBand port) read through eight
// counter files that stay open. Missing files are "no data" for that counter only.
#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "core/counters.h"

namespace dynamix {

// Counter slots, in this order, for every link kind.
enum LinkCounter : int {
  kRxBytes = 0, kTxBytes, kRxPackets, kTxPackets, kRxErrors, kTxErrors, kRxDropped, kTxDropped,
  kNumLinkCounters
};
const char* link_counter_name(int i);

// One reading of a link's counters (already scaled to bytes); bit i of `valid` set when
// counter i was read.
struct LinkReading {
  std::array<uint64_t, kNumLinkCounters> value{};
  uint32_t valid = 0;
  bool has(int i) const { return (valid >> i) & 1u; }
};

class LinkReader {
 public:
  // files[i] is the path of counter i or "" when the source has no such counter; scale[i]
  // multiplies raw values (4 for InfiniBand data counters, which count 4-byte words).
  LinkReader(std::string name, std::string kind, const std::array<std::string, kNumLinkCounters>& files,
             const std::array<uint64_t, kNumLinkCounters>& scale, int width_bits, bool saturates);

  const std::string& name() const { return name_; }
  const std::string& kind() const { return kind_; }  // "eth" or "ib"
  int width_bits() const { return width_bits_; }
  bool saturates() const { return saturates_; }
  uint64_t scale(int i) const { return scale_[i]; }
  // Number of counter files that could be opened.
  int open_count() const;
  // Reads all counters (raw values, not scaled, so wrap-around is detected on raw width).
  LinkReading read() const;

 private:
  std::string name_, kind_;
  std::array<CounterFile, kNumLinkCounters> files_;
  std::array<uint64_t, kNumLinkCounters> scale_;
  int width_bits_;
  bool saturates_;
};

}  // namespace dynamix
