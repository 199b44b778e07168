#pragma once
// Reads the collective records of the preloaded PMPI library (found with
// dlsym(RTLD_DEFAULT, ...)), and summarises a batch of records (pure).
#include <cstdint>
#include <string>
#include <vector>

#include "core/comm_abi.h"

namespace dynamix {

struct CommBatch {
  std::vector<dynamix_comm_record> records;
  uint64_t next = 0;  // cursor for the next read
  uint64_t lost = 0;  // records overwritten before they were read
};

// Summary of the records matching an operation mask and a class. Durations in seconds;
// NaN when count == 0 ("no data").
struct CommStats {
  uint64_t count = 0;
  uint64_t bytes = 0;
  double busy_s = 0;       // sum of durations
  double p50_s, p90_s, p99_s, max_s;
  double bandwidth_Bps;    // bytes / busy_s: effective (algorithm) bandwidth while in the collective
  double first_start_s, last_end_s;
};

// op_mask: bit (1 << dynamix_comm_op); cls: DYNAMIX_CLASS_* or -1 for both.
CommStats summarize(const std::vector<dynamix_comm_record>& records, uint32_t op_mask, int cls);

struct CommTotals {
  uint64_t count = 0, bytes = 0, busy_ns = 0;
};

class CommReader {
 public:
  // Resolves the reader API in the global symbol scope (where LD_PRELOAD puts the library).
  CommReader();
  // True when libdynamix_pmpi.so is loaded in this process with a compatible ABI.
  bool available() const { return read_ != nullptr; }
  std::string status() const { return status_; }
  uint64_t head() const;
  // Records from cursor `from` on (at most max_records). Empty batch when unavailable.
  CommBatch read(uint64_t from, size_t max_records = 1u << 20) const;
  // Exact running totals since process start (never lose records to ring overwrites).
  CommTotals totals(uint32_t op, uint32_t cls) const;
  void set_enabled(bool on) const;
  bool enabled() const;

 private:
  dynamix_pmpi_head_fn head_ = nullptr;
  dynamix_pmpi_read_fn read_ = nullptr;
  dynamix_pmpi_totals_fn totals_ = nullptr;
  dynamix_pmpi_set_enabled_fn set_enabled_ = nullptr;
  dynamix_pmpi_enabled_fn enabled_ = nullptr;
  std::string status_;
};

}  // namespace dynamix
