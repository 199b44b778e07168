#pragma once
// The rule that tells Horovod's control-plane collectives from data collectives. Pure: the
// PMPI wrapper maps MPI handles to these facts, the rule itself is tested without MPI.
//
// What Horovod 0.28.1 sends (horovod/common/mpi/mpi_controller.cc, ops/mpi_operations.cc):
//   control: MPI_Allreduce(MPI_IN_PLACE, bitvector, n, MPI_LONG_LONG_INT, MPI_BAND | MPI_BOR)
//            (response-cache coordination, every background cycle);
//            MPI_Bcast(&len, 1, MPI_INT) + MPI_Bcast(bytes, len, MPI_BYTE) (response list);
//            MPI_Allgather(..., 1, MPI_INT) (rank / local-size exchange at init).
//   data:    MPI_Allreduce(buf, n, <tensor dtype>, MPI_SUM or its float16 sum op),
//            MPI_Allgatherv / MPI_Bcast of tensors with their own typed datatype.
// Rule: a reduction with a bitwise or logical operator, a payload typed MPI_BYTE/MPI_PACKED,
// or a payload of exactly one integer is control; everything else is data.
#include <cstdint>

#include "core/comm_abi.h"

namespace dynamix {

struct CollectiveFacts {
  uint32_t op = DYNAMIX_OP_ALLREDUCE;
  bool bitwise_or_logical_reduction = false;  // MPI_BAND/BOR/BXOR/LAND/LOR/LXOR
  bool byte_typed = false;                    // MPI_BYTE or MPI_PACKED payload
  bool integer_typed = false;                 // C integer datatype
  uint64_t elements = 0;                      // count per rank (per-rank recvcount for gathers)
};

inline uint32_t classify_collective(const CollectiveFacts& f) {
  if ((f.op == DYNAMIX_OP_ALLREDUCE || f.op == DYNAMIX_OP_IALLREDUCE) && f.bitwise_or_logical_reduction) {
    return DYNAMIX_CLASS_CONTROL;
  }
  if (f.byte_typed) return DYNAMIX_CLASS_CONTROL;
  if (f.integer_typed && f.elements == 1) return DYNAMIX_CLASS_CONTROL;
  return DYNAMIX_CLASS_DATA;
}

}  // namespace dynamix
