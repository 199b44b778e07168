// MPI profiling-interface wrappers: each one times the PMPI_ call and records operation,
// bytes, start, end and thread into the recorder. Byte counts, per rank:
//   Allreduce / Iallreduce / Bcast: count * size(datatype)
//   Allgather: recvcount * size(recvtype) * comm size (the gathered result)
//   Allgatherv: sum(recvcounts) * size(recvtype)
#include <mpi.h>

#include <vector>

#include "pmpi/recorder.h"

using dynamix::CollectiveFacts;
using dynamix::classify_collective;
namespace rec = dynamix::pmpi;

#define DYNAMIX_EXPORT extern "C" __attribute__((visibility("default")))

namespace {

uint32_t reduce_class(uint32_t op, MPI_Datatype t, MPI_Op mop, int count) {
  CollectiveFacts f;
  f.op = op;
  f.bitwise_or_logical_reduction = rec::is_bitwise_or_logical(mop);
  f.byte_typed = rec::is_byte_type(t);
  f.integer_typed = rec::is_integer_type(t);
  f.elements = count < 0 ? 0 : uint64_t(count);
  return classify_collective(f);
}

uint32_t move_class(uint32_t op, MPI_Datatype t, int per_rank_count) {
  CollectiveFacts f;
  f.op = op;
  f.byte_typed = rec::is_byte_type(t);
  f.integer_typed = rec::is_integer_type(t);
  f.elements = per_rank_count < 0 ? 0 : uint64_t(per_rank_count);
  return classify_collective(f);
}

// Completes every tracked request whose handle was in `before` and is now done.
void complete_one(MPI_Request handle, uint64_t end) {
  rec::Pending p;
  if (rec::pending_take(handle, &p)) rec::record(p.op, p.cls, p.bytes, p.start_ns, end, p.comm_size);
}

// Small-vector copy of request handles, taken before PMPI sets completed ones to NULL.
struct HandleCopy {
  MPI_Request small[16];
  std::vector<MPI_Request> big;
  MPI_Request* data = small;
  HandleCopy(int n, const MPI_Request* reqs) {
    if (n > 16) {
      big.assign(reqs, reqs + n);
      data = big.data();
    } else {
      for (int i = 0; i < n; ++i) small[i] = reqs[i];
    }
  }
};

}  // namespace

DYNAMIX_EXPORT int MPI_Allreduce(const void* sendbuf, void* recvbuf, int count, MPI_Datatype datatype, MPI_Op op,
                                 MPI_Comm comm) {
  if (!rec::enabled()) return PMPI_Allreduce(sendbuf, recvbuf, count, datatype, op, comm);
  const uint64_t t0 = rec::now();
  const int rc = PMPI_Allreduce(sendbuf, recvbuf, count, datatype, op, comm);
  const uint64_t t1 = rec::now();
  if (rc == MPI_SUCCESS) {
    rec::record(DYNAMIX_OP_ALLREDUCE, reduce_class(DYNAMIX_OP_ALLREDUCE, datatype, op, count),
                uint64_t(count) * rec::type_size(datatype), t0, t1, rec::comm_size(comm));
  }
  return rc;
}

DYNAMIX_EXPORT int MPI_Iallreduce(const void* sendbuf, void* recvbuf, int count, MPI_Datatype datatype, MPI_Op op,
                                  MPI_Comm comm, MPI_Request* request) {
  if (!rec::enabled()) return PMPI_Iallreduce(sendbuf, recvbuf, count, datatype, op, comm, request);
  const uint64_t t0 = rec::now();
  const int rc = PMPI_Iallreduce(sendbuf, recvbuf, count, datatype, op, comm, request);
  if (rc == MPI_SUCCESS && request) {
    rec::pending_add(*request, rec::Pending{DYNAMIX_OP_IALLREDUCE,
                                            reduce_class(DYNAMIX_OP_IALLREDUCE, datatype, op, count),
                                            rec::comm_size(comm), uint64_t(count) * rec::type_size(datatype), t0});
  }
  return rc;
}

DYNAMIX_EXPORT int MPI_Bcast(void* buffer, int count, MPI_Datatype datatype, int root, MPI_Comm comm) {
  if (!rec::enabled()) return PMPI_Bcast(buffer, count, datatype, root, comm);
  const uint64_t t0 = rec::now();
  const int rc = PMPI_Bcast(buffer, count, datatype, root, comm);
  const uint64_t t1 = rec::now();
  if (rc == MPI_SUCCESS) {
    rec::record(DYNAMIX_OP_BCAST, move_class(DYNAMIX_OP_BCAST, datatype, count),
                uint64_t(count) * rec::type_size(datatype), t0, t1, rec::comm_size(comm));
  }
  return rc;
}

DYNAMIX_EXPORT int MPI_Allgather(const void* sendbuf, int sendcount, MPI_Datatype sendtype, void* recvbuf,
                                 int recvcount, MPI_Datatype recvtype, MPI_Comm comm) {
  if (!rec::enabled()) return PMPI_Allgather(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, comm);
  const uint64_t t0 = rec::now();
  const int rc = PMPI_Allgather(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, comm);
  const uint64_t t1 = rec::now();
  if (rc == MPI_SUCCESS) {
    const uint32_t n = rec::comm_size(comm);
    rec::record(DYNAMIX_OP_ALLGATHER, move_class(DYNAMIX_OP_ALLGATHER, recvtype, recvcount),
                uint64_t(recvcount) * rec::type_size(recvtype) * n, t0, t1, n);
  }
  return rc;
}

DYNAMIX_EXPORT int MPI_Allgatherv(const void* sendbuf, int sendcount, MPI_Datatype sendtype, void* recvbuf,
                                  const int recvcounts[], const int displs[], MPI_Datatype recvtype, MPI_Comm comm) {
  if (!rec::enabled()) {
    return PMPI_Allgatherv(sendbuf, sendcount, sendtype, recvbuf, recvcounts, displs, recvtype, comm);
  }
  const uint64_t t0 = rec::now();
  const int rc = PMPI_Allgatherv(sendbuf, sendcount, sendtype, recvbuf, recvcounts, displs, recvtype, comm);
  const uint64_t t1 = rec::now();
  if (rc == MPI_SUCCESS) {
    const uint32_t n = rec::comm_size(comm);
    uint64_t total = 0;
    int max_count = 0;
    for (uint32_t i = 0; i < n; ++i) {
      if (recvcounts[i] > 0) total += uint64_t(recvcounts[i]);
      if (recvcounts[i] > max_count) max_count = recvcounts[i];
    }
    rec::record(DYNAMIX_OP_ALLGATHERV, move_class(DYNAMIX_OP_ALLGATHERV, recvtype, max_count),
                total * rec::type_size(recvtype), t0, t1, n);
  }
  return rc;
}

// ---- completion of non-blocking collectives ----------------------------------------------
// Each wrapper does nothing extra unless a tracked request is in flight.

DYNAMIX_EXPORT int MPI_Wait(MPI_Request* request, MPI_Status* status) {
  if (!rec::pending_any() || !request) return PMPI_Wait(request, status);
  const MPI_Request handle = *request;
  const int rc = PMPI_Wait(request, status);
  if (rc == MPI_SUCCESS) complete_one(handle, rec::now());
  return rc;
}

DYNAMIX_EXPORT int MPI_Test(MPI_Request* request, int* flag, MPI_Status* status) {
  if (!rec::pending_any() || !request) return PMPI_Test(request, flag, status);
  const MPI_Request handle = *request;
  const int rc = PMPI_Test(request, flag, status);
  if (rc == MPI_SUCCESS && flag && *flag) complete_one(handle, rec::now());
  return rc;
}

DYNAMIX_EXPORT int MPI_Waitall(int count, MPI_Request requests[], MPI_Status statuses[]) {
  if (!rec::pending_any() || count <= 0) return PMPI_Waitall(count, requests, statuses);
  HandleCopy before(count, requests);
  const int rc = PMPI_Waitall(count, requests, statuses);
  if (rc == MPI_SUCCESS) {
    const uint64_t end = rec::now();
    for (int i = 0; i < count; ++i) complete_one(before.data[i], end);
  }
  return rc;
}

DYNAMIX_EXPORT int MPI_Testall(int count, MPI_Request requests[], int* flag, MPI_Status statuses[]) {
  if (!rec::pending_any() || count <= 0) return PMPI_Testall(count, requests, flag, statuses);
  HandleCopy before(count, requests);
  const int rc = PMPI_Testall(count, requests, flag, statuses);
  if (rc == MPI_SUCCESS && flag && *flag) {
    const uint64_t end = rec::now();
    for (int i = 0; i < count; ++i) complete_one(before.data[i], end);
  }
  return rc;
}

DYNAMIX_EXPORT int MPI_Waitany(int count, MPI_Request requests[], int* index, MPI_Status* status) {
  if (!rec::pending_any() || count <= 0) return PMPI_Waitany(count, requests, index, status);
  HandleCopy before(count, requests);
  const int rc = PMPI_Waitany(count, requests, index, status);
  if (rc == MPI_SUCCESS && index && *index != MPI_UNDEFINED && *index >= 0 && *index < count) {
    complete_one(before.data[*index], rec::now());
  }
  return rc;
}

DYNAMIX_EXPORT int MPI_Testany(int count, MPI_Request requests[], int* index, int* flag, MPI_Status* status) {
  if (!rec::pending_any() || count <= 0) return PMPI_Testany(count, requests, index, flag, status);
  HandleCopy before(count, requests);
  const int rc = PMPI_Testany(count, requests, index, flag, status);
  if (rc == MPI_SUCCESS && flag && *flag && index && *index != MPI_UNDEFINED && *index >= 0 && *index < count) {
    complete_one(before.data[*index], rec::now());
  }
  return rc;
}

DYNAMIX_EXPORT int MPI_Waitsome(int incount, MPI_Request requests[], int* outcount, int indices[],
                                MPI_Status statuses[]) {
  if (!rec::pending_any() || incount <= 0) return PMPI_Waitsome(incount, requests, outcount, indices, statuses);
  HandleCopy before(incount, requests);
  const int rc = PMPI_Waitsome(incount, requests, outcount, indices, statuses);
  if (rc == MPI_SUCCESS && outcount && *outcount != MPI_UNDEFINED) {
    const uint64_t end = rec::now();
    for (int i = 0; i < *outcount; ++i) {
      if (indices[i] >= 0 && indices[i] < incount) complete_one(before.data[indices[i]], end);
    }
  }
  return rc;
}

DYNAMIX_EXPORT int MPI_Testsome(int incount, MPI_Request requests[], int* outcount, int indices[],
                                MPI_Status statuses[]) {
  if (!rec::pending_any() || incount <= 0) return PMPI_Testsome(incount, requests, outcount, indices, statuses);
  HandleCopy before(incount, requests);
  const int rc = PMPI_Testsome(incount, requests, outcount, indices, statuses);
  if (rc == MPI_SUCCESS && outcount && *outcount != MPI_UNDEFINED) {
    const uint64_t end = rec::now();
    for (int i = 0; i < *outcount; ++i) {
      if (indices[i] >= 0 && indices[i] < incount) complete_one(before.data[indices[i]], end);
    }
  }
  return rc;
}

DYNAMIX_EXPORT int MPI_Request_free(MPI_Request* request) {
  if (rec::pending_any() && request) {
    rec::Pending dropped;
    rec::pending_take(*request, &dropped);  // completion will never be observed: forget it
  }
  return PMPI_Request_free(request);
}
