#include "pmpi/recorder.h"

#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <cstring>

#include "core/comm_abi.h"

namespace dynamix::pmpi {
namespace {

std::atomic<int> g_enabled{-1};  // -1: not yet read from DYNAMIX_PMPI

// In-flight non-blocking collectives. A small array scanned linearly: completions look here
// only while something is in flight (pending_any), and 256 compares cost ~100 ns.
constexpr size_t kPendingSlots = 256;
struct PendingSlot {
  std::atomic<uintptr_t> key{0};  // 0 = free, 1 = being filled, else the request handle
  Pending value;
};
PendingSlot g_pending[kPendingSlots];
std::atomic<int64_t> g_pending_count{0};
std::atomic<uint64_t> g_pending_dropped{0};

uintptr_t key_of(MPI_Request r) { return reinterpret_cast<uintptr_t>(r); }

size_t ring_capacity() {
  const char* env = std::getenv("DYNAMIX_PMPI_RING");
  if (env) {
    const long v = std::atol(env);
    if (v >= 64 && v <= (1l << 26)) return size_t(v);
  }
  return size_t(1) << 16;
}

}  // namespace

CommRing& ring() {
  static CommRing r(ring_capacity());  // thread-safe static init; never destroyed before MPI_Finalize users
  return r;
}

bool enabled() {
  int e = g_enabled.load(std::memory_order_relaxed);
  if (__builtin_expect(e < 0, 0)) {
    const char* env = std::getenv("DYNAMIX_PMPI");
    e = (env && (std::strcmp(env, "0") == 0 || std::strcmp(env, "off") == 0)) ? 0 : 1;
    g_enabled.store(e, std::memory_order_relaxed);
  }
  return e != 0;
}

uint32_t thread_id() {
  thread_local uint32_t tid = uint32_t(::syscall(SYS_gettid));
  return tid;
}

uint64_t now() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return uint64_t(ts.tv_sec) * 1000000000ull + uint64_t(ts.tv_nsec);
}

bool is_integer_type(MPI_Datatype t) {
  return t == MPI_INT || t == MPI_UNSIGNED || t == MPI_LONG || t == MPI_UNSIGNED_LONG || t == MPI_LONG_LONG_INT ||
         t == MPI_UNSIGNED_LONG_LONG || t == MPI_SHORT || t == MPI_UNSIGNED_SHORT || t == MPI_INT8_T ||
         t == MPI_UINT8_T || t == MPI_INT16_T || t == MPI_UINT16_T || t == MPI_INT32_T || t == MPI_UINT32_T ||
         t == MPI_INT64_T || t == MPI_UINT64_T;
}

bool is_byte_type(MPI_Datatype t) { return t == MPI_BYTE || t == MPI_PACKED; }

bool is_bitwise_or_logical(MPI_Op op) {
  return op == MPI_BAND || op == MPI_BOR || op == MPI_BXOR || op == MPI_LAND || op == MPI_LOR || op == MPI_LXOR;
}

uint64_t type_size(MPI_Datatype t) {
  if (t == MPI_DATATYPE_NULL) return 0;
  int s = 0;
  if (PMPI_Type_size(t, &s) != MPI_SUCCESS || s < 0) return 0;
  return uint64_t(s);
}

uint32_t comm_size(MPI_Comm c) {
  int s = 0;
  if (PMPI_Comm_size(c, &s) != MPI_SUCCESS || s < 0) return 0;
  return uint32_t(s);
}

void pending_add(MPI_Request req, const Pending& p) {
  const uintptr_t k = key_of(req);
  if (k <= 1) return;
  for (auto& slot : g_pending) {
    uintptr_t expected = 0;
    if (slot.key.load(std::memory_order_relaxed) == 0 &&
        slot.key.compare_exchange_strong(expected, 1, std::memory_order_acquire)) {
      slot.value = p;
      slot.key.store(k, std::memory_order_release);
      g_pending_count.fetch_add(1, std::memory_order_release);
      return;
    }
  }
  g_pending_dropped.fetch_add(1, std::memory_order_relaxed);  // over 256 in flight: unrecorded
}

bool pending_take(MPI_Request req, Pending* out) {
  const uintptr_t k = key_of(req);
  if (k <= 1) return false;
  for (auto& slot : g_pending) {
    uintptr_t cur = slot.key.load(std::memory_order_acquire);
    if (cur != k) continue;
    *out = slot.value;
    if (slot.key.compare_exchange_strong(cur, 0, std::memory_order_acq_rel)) {
      g_pending_count.fetch_sub(1, std::memory_order_release);
      return true;
    }
  }
  return false;
}

void set_enabled(bool on) { g_enabled.store(on ? 1 : 0, std::memory_order_relaxed); }

bool pending_any() { return g_pending_count.load(std::memory_order_acquire) > 0; }

}  // namespace dynamix::pmpi

// ---- the reader API (see core/comm_abi.h) ---------------------------------------------------
extern "C" {
__attribute__((visibility("default"))) int dynamix_pmpi_abi(void) { return DYNAMIX_COMM_ABI; }
__attribute__((visibility("default"))) uint64_t dynamix_pmpi_head(void) { return dynamix::pmpi::ring().head(); }
__attribute__((visibility("default"))) size_t dynamix_pmpi_read(uint64_t from, dynamix_comm_record* out, size_t max,
                                                                uint64_t* next, uint64_t* lost) {
  return dynamix::pmpi::ring().read(from, out, max, next, lost);
}
__attribute__((visibility("default"))) void dynamix_pmpi_totals(uint32_t op, uint32_t cls, uint64_t* count,
                                                                uint64_t* bytes, uint64_t* busy_ns) {
  dynamix::pmpi::ring().totals(op, cls, count, bytes, busy_ns);
}
__attribute__((visibility("default"))) void dynamix_pmpi_set_enabled(int on) {
  dynamix::pmpi::set_enabled(on != 0);
}
__attribute__((visibility("default"))) int dynamix_pmpi_enabled(void) { return dynamix::pmpi::enabled() ? 1 : 0; }
}
