#pragma once
// Lock-free multi-writer ring of collective records, plus exact running totals per
// (operation, class). Writers (any thread: the user's, Horovod's background thread) claim a
// slot with one fetch_add and publish it with a per-slot sequence word (a seqlock), so a
// reader never blocks a writer and detects records overwritten while it copied them.
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>

#include "core/comm_abi.h"

namespace dynamix {

class CommRing {
 public:
  explicit CommRing(size_t capacity_pow2 = 1u << 16) : mask_(round_pow2(capacity_pow2) - 1),
      slots_(new Slot[mask_ + 1]) {}

  size_t capacity() const { return mask_ + 1; }
  uint64_t head() const { return head_.load(std::memory_order_acquire); }

  // Records one completed collective; wait-free (one fetch_add + relaxed stores).
  void record(uint32_t op, uint32_t cls, uint64_t bytes, uint64_t start_ns, uint64_t end_ns, uint32_t tid,
              uint32_t comm_size) {
    if (op < DYNAMIX_NUM_OPS && cls < DYNAMIX_NUM_CLASSES) {
      Totals& t = totals_[op][cls];
      t.count.fetch_add(1, std::memory_order_relaxed);
      t.bytes.fetch_add(bytes, std::memory_order_relaxed);
      t.busy_ns.fetch_add(end_ns - start_ns, std::memory_order_relaxed);
    }
    const uint64_t idx = head_.fetch_add(1, std::memory_order_acq_rel);
    Slot& s = slots_[idx & mask_];
    s.seq.store(2 * idx + 1, std::memory_order_relaxed);  // odd: being written
    std::atomic_thread_fence(std::memory_order_release);
    s.bytes.store(bytes, std::memory_order_relaxed);
    s.start.store(start_ns, std::memory_order_relaxed);
    s.end.store(end_ns, std::memory_order_relaxed);
    s.meta.store((uint64_t(op) & 0xff) | ((uint64_t(cls) & 0xff) << 8) | (uint64_t(comm_size) << 32),
                 std::memory_order_relaxed);
    s.tid.store(tid, std::memory_order_relaxed);
    s.seq.store(2 * idx + 2, std::memory_order_release);  // even and = 2*idx+2: complete
  }

  // Copies records with seq >= from, in order, up to `max`. Stops at the first record still
  // being written. *next = the seq to ask for next time; *lost = records that were
  // overwritten before they could be read (the reader fell more than capacity behind).
  size_t read(uint64_t from, dynamix_comm_record* out, size_t max, uint64_t* next, uint64_t* lost) const {
    const uint64_t h = head();
    uint64_t l = 0;
    if (h > capacity() && from < h - capacity()) {
      l = (h - capacity()) - from;
      from = h - capacity();
    }
    size_t n = 0;
    uint64_t idx = from;
    for (; idx < h && n < max; ++idx) {
      const Slot& s = slots_[idx & mask_];
      const uint64_t want = 2 * idx + 2;
      const uint64_t s1 = s.seq.load(std::memory_order_acquire);
      if (s1 < want) break;  // not yet published
      if (s1 > want) { ++l; continue; }  // overwritten by a newer record
      dynamix_comm_record r;
      r.seq = idx;
      r.bytes = s.bytes.load(std::memory_order_relaxed);
      r.start_ns = s.start.load(std::memory_order_relaxed);
      r.end_ns = s.end.load(std::memory_order_relaxed);
      const uint64_t meta = s.meta.load(std::memory_order_relaxed);
      r.tid = s.tid.load(std::memory_order_relaxed);
      std::atomic_thread_fence(std::memory_order_acquire);
      if (s.seq.load(std::memory_order_relaxed) != s1) { ++l; continue; }  // overwritten while copying
      r.op = uint32_t(meta & 0xff);
      r.cls = uint32_t((meta >> 8) & 0xff);
      r.comm_size = uint32_t(meta >> 32);
      out[n++] = r;
    }
    if (next) *next = idx;
    if (lost) *lost = l;
    return n;
  }

  void totals(uint32_t op, uint32_t cls, uint64_t* count, uint64_t* bytes, uint64_t* busy_ns) const {
    uint64_t c = 0, b = 0, d = 0;
    if (op < DYNAMIX_NUM_OPS && cls < DYNAMIX_NUM_CLASSES) {
      const Totals& t = totals_[op][cls];
      c = t.count.load(std::memory_order_relaxed);
      b = t.bytes.load(std::memory_order_relaxed);
      d = t.busy_ns.load(std::memory_order_relaxed);
    }
    if (count) *count = c;
    if (bytes) *bytes = b;
    if (busy_ns) *busy_ns = d;
  }

 private:
  static size_t round_pow2(size_t n) {
    size_t p = 2;
    while (p < n) p <<= 1;
    return p;
  }
  struct alignas(64) Slot {
    std::atomic<uint64_t> seq{0}, bytes{0}, start{0}, end{0}, meta{0};
    std::atomic<uint32_t> tid{0};
  };
  struct alignas(64) Totals {
    std::atomic<uint64_t> count{0}, bytes{0}, busy_ns{0};
  };
  alignas(64) std::atomic<uint64_t> head_{0};
  size_t mask_;
  std::unique_ptr<Slot[]> slots_;
  Totals totals_[DYNAMIX_NUM_OPS][DYNAMIX_NUM_CLASSES];
};

}  // namespace dynamix
