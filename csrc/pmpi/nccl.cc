// ncclAllReduce wrapper feeding the same recorder. Compiled only with
// -DDYNAMIX_WITH_NCCL=ON and nccl.h found (see docs/collector.md). NCCL calls are
// asynchronous on a CUDA stream, so the recorded duration is the enqueue time only; count
// and bytes are exact. The real function is found with dlsym(RTLD_NEXT).
#ifdef DYNAMIX_WITH_NCCL
#include <dlfcn.h>
#include <nccl.h>

#include "pmpi/recorder.h"

namespace {
size_t nccl_type_size(ncclDataType_t t) {
  switch (t) {
    case ncclInt8: case ncclUint8: return 1;
    case ncclFloat16: return 2;
#if defined(NCCL_VERSION_CODE) && NCCL_VERSION_CODE >= 21000
    case ncclBfloat16: return 2;
#endif
    case ncclInt32: case ncclUint32: case ncclFloat32: return 4;
    case ncclInt64: case ncclUint64: case ncclFloat64: return 8;
    default: return 0;
  }
}
using AllReduceFn = ncclResult_t (*)(const void*, void*, size_t, ncclDataType_t, ncclRedOp_t, ncclComm_t,
                                     cudaStream_t);
}  // namespace

extern "C" __attribute__((visibility("default"))) ncclResult_t ncclAllReduce(const void* sendbuff, void* recvbuff,
                                                                             size_t count, ncclDataType_t datatype,
                                                                             ncclRedOp_t op, ncclComm_t comm,
                                                                             cudaStream_t stream) {
  static AllReduceFn real = reinterpret_cast<AllReduceFn>(::dlsym(RTLD_NEXT, "ncclAllReduce"));
  if (!real) return ncclSystemError;
  if (!dynamix::pmpi::enabled()) return real(sendbuff, recvbuff, count, datatype, op, comm, stream);
  const uint64_t t0 = dynamix::pmpi::now();
  const ncclResult_t rc = real(sendbuff, recvbuff, count, datatype, op, comm, stream);
  const uint64_t t1 = dynamix::pmpi::now();
  using CountFn = ncclResult_t (*)(const ncclComm_t, int*);
  static CountFn count_fn = reinterpret_cast<CountFn>(::dlsym(RTLD_DEFAULT, "ncclCommCount"));
  int nranks = 0;
  if (count_fn) count_fn(comm, &nranks);
  if (rc == ncclSuccess) {
    dynamix::pmpi::record(DYNAMIX_OP_NCCL_ALLREDUCE, DYNAMIX_CLASS_DATA, count * nccl_type_size(datatype), t0, t1,
                          uint32_t(nranks));
  }
  return rc;
}
#endif  // DYNAMIX_WITH_NCCL
