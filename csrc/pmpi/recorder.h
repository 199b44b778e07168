#pragma once
// Process-wide recorder of libdynamix_pmpi.so: one CommRing, the enabled switch, a table of
// in-flight non-blocking collectives, and the facts the classifier needs from MPI handles.
#include <mpi.h>

#include <cstdint>

#include "core/comm_classify.h"
#include "core/comm_ring.h"

namespace dynamix::pmpi {

CommRing& ring();
bool enabled();
void set_enabled(bool on);
uint32_t thread_id();
uint64_t now();

// Facts about an MPI datatype / reduction operator used by classify_collective.
bool is_integer_type(MPI_Datatype t);
bool is_byte_type(MPI_Datatype t);
bool is_bitwise_or_logical(MPI_Op op);
uint64_t type_size(MPI_Datatype t);  // 0 for MPI_DATATYPE_NULL
uint32_t comm_size(MPI_Comm c);

// In-flight non-blocking collectives keyed by request handle (lock-free open addressing).
struct Pending {
  uint32_t op, cls, comm_size;
  uint64_t bytes, start_ns;
};
void pending_add(MPI_Request req, const Pending& p);
// Removes and returns true if req was tracked.
bool pending_take(MPI_Request req, Pending* out);
// Cheap check so completion calls skip all work when nothing is in flight.
bool pending_any();

// Records a completed collective.
inline void record(uint32_t op, uint32_t cls, uint64_t bytes, uint64_t start, uint64_t end, uint32_t csize) {
  ring().record(op, cls, bytes, start, end, thread_id(), csize);
}

}  // namespace dynamix::pmpi
