#pragma once
/* The C ABI between the preloaded PMPI library (libdynamix_pmpi.so, the writer) and its
 * readers (dynamix_hvd._native via dlsym(RTLD_DEFAULT, ...), or any C tool). Plain C so
 * any language can read it. Bump DYNAMIX_COMM_ABI on any layout change. */
#include <stddef.h>
#include <stdint.h>

#define DYNAMIX_COMM_ABI 1

enum dynamix_comm_op {
  DYNAMIX_OP_ALLREDUCE = 0,
  DYNAMIX_OP_IALLREDUCE = 1,
  DYNAMIX_OP_BCAST = 2,
  DYNAMIX_OP_ALLGATHER = 3,
  DYNAMIX_OP_ALLGATHERV = 4,
  DYNAMIX_OP_NCCL_ALLREDUCE = 5,
  DYNAMIX_NUM_OPS = 6
};

enum dynamix_comm_class { DYNAMIX_CLASS_DATA = 0, DYNAMIX_CLASS_CONTROL = 1, DYNAMIX_NUM_CLASSES = 2 };

/* One completed collective. start/end: CLOCK_MONOTONIC ns. For non-blocking operations end
 * is when completion was observed (MPI_Wait/Test... returned true). */
typedef struct dynamix_comm_record {
  uint64_t seq;      /* 0, 1, 2, ... in order of claiming a slot */
  uint64_t bytes;
  uint64_t start_ns;
  uint64_t end_ns;
  uint32_t op;       /* enum dynamix_comm_op */
  uint32_t cls;      /* enum dynamix_comm_class */
  uint32_t tid;      /* Linux thread id of the caller */
  uint32_t comm_size;
} dynamix_comm_record;

#ifdef __cplusplus
extern "C" {
#endif
/* Reader API exported by libdynamix_pmpi.so. */
typedef int (*dynamix_pmpi_abi_fn)(void);
typedef uint64_t (*dynamix_pmpi_head_fn)(void);
typedef size_t (*dynamix_pmpi_read_fn)(uint64_t from, dynamix_comm_record* out, size_t max, uint64_t* next,
                                       uint64_t* lost);
typedef void (*dynamix_pmpi_totals_fn)(uint32_t op, uint32_t cls, uint64_t* count, uint64_t* bytes,
                                       uint64_t* busy_ns);
typedef void (*dynamix_pmpi_set_enabled_fn)(int enabled);
typedef int (*dynamix_pmpi_enabled_fn)(void);
#ifdef __cplusplus
}
#endif
