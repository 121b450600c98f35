/*===- distopt_rt.h - the distopt runtime's C ABI ------------------*- C
-*-===*\
 *
 * What compiled steps and their drivers call: communicators (MPI across
 * processes, or a single process) and the collectives of the distopt dialect.
 * Every function returns a status; on failure, distopt_rt_last_error() gives
 * a message naming the rank, the operation and the sizes. No C++ exception
 * crosses this interface. Thread safety: one thread per communicator.
 *
\*===----------------------------------------------------------------------===*/

#ifndef DISTOPT_RT_H
#define DISTOPT_RT_H

#include <stdint.h>

#if defined(DISTOPT_RT_BUILDING)
#define DISTOPT_RT_API __attribute__((visibility("default")))
#else
#define DISTOPT_RT_API
#endif

#ifdef __cplusplus
extern "C" {
#endif

typedef enum distopt_rt_status {
  DISTOPT_RT_OK = 0,
  DISTOPT_RT_INVALID_ARGUMENT = 1,    /* a null pointer, a bad count or enum */
  DISTOPT_RT_WORLD_SIZE_MISMATCH = 2, /* compiled for N ranks, run on M */
  DISTOPT_RT_TIMEOUT = 3,             /* a peer did not answer in time */
  DISTOPT_RT_BACKEND_ERROR = 4,       /* MPI reported an error */
  DISTOPT_RT_UNAVAILABLE = 5,         /* backend not built in */
  DISTOPT_RT_FAILED = 6, /* the communicator failed earlier and is unusable */
  DISTOPT_RT_PEER_DIED = 7, /* a peer process on this machine has exited */
  DISTOPT_RT_MISMATCH = 8,  /* the ranks ran different collectives (one a
                               step, another a save): every rank involved
                               fails, and the communicator is unusable */
} distopt_rt_status;

typedef enum distopt_rt_dtype {
  DISTOPT_RT_F32 = 0,
  DISTOPT_RT_F64 = 1,
  DISTOPT_RT_BF16 = 2,
  DISTOPT_RT_F16 = 3,
  DISTOPT_RT_I32 = 4,
  DISTOPT_RT_I64 = 5,
} distopt_rt_dtype;

typedef enum distopt_rt_reduction {
  DISTOPT_RT_SUM = 0,
  DISTOPT_RT_AVG = 1, /* sum / size, in the same pass */
  DISTOPT_RT_MIN = 2,
  DISTOPT_RT_MAX = 3,
  DISTOPT_RT_PROD = 4,
  DISTOPT_RT_PREMUL_SUM = 5, /* sum of scale * x_r, in the same pass */
} distopt_rt_reduction;

typedef struct distopt_rt_comm distopt_rt_comm;
typedef struct distopt_rt_request distopt_rt_request;

/* The message of the last failure on this thread ("" when none). */
DISTOPT_RT_API const char *distopt_rt_last_error(void);

/* Memory of compiled steps: distopt-compile lowers their allocations to
 * MLIR's generic allocation functions, defined by this library. Blocks of
 * 1 MiB or more are cached when freed and reused (no page faults for the
 * buffers a step allocates every time it runs). A host frees the buffers a
 * step returns with _mlir_memref_to_llvm_free, and may allocate the ones it
 * passes in with _mlir_memref_to_llvm_aligned_alloc. */
DISTOPT_RT_API void *_mlir_memref_to_llvm_alloc(uint64_t size);
DISTOPT_RT_API void *_mlir_memref_to_llvm_aligned_alloc(uint64_t alignment,
                                                        uint64_t size);
DISTOPT_RT_API void _mlir_memref_to_llvm_free(void *ptr);
/* Bytes allocated through the three functions above and not yet freed, and
 * the most at any time (cached blocks do not count): the memory a step and
 * its host hold. */
DISTOPT_RT_API void distopt_rt_memory_stats(uint64_t *in_use,
                                            uint64_t *peak_bytes);
/* MLIR's generic copy, which memref.copy calls for non-contiguous or
 * dynamically shaped buffers (also defined by MLIR's C runner utilities). */
typedef struct distopt_rt_unranked_memref {
  int64_t rank;
  void *descriptor;
} distopt_rt_unranked_memref;
DISTOPT_RT_API void memrefCopy(int64_t element_size,
                               distopt_rt_unranked_memref *source,
                               distopt_rt_unranked_memref *target);

/* CUDA (steps compiled with --target=cuda). The driver (libcuda.so.1) is
 * loaded on first use, so the runtime builds and its CPU half runs without
 * it. Kernels, copies and allocations of compiled steps run on one stream;
 * device memory comes from the driver's stream-ordered pool (kept across
 * steps). The first GPU failure is kept: later GPU work is skipped,
 * collectives fail with it, and distopt_rt_cuda_check() reports it.
 *   distopt_rt_cuda_init: picks the device (-1: $DISTOPT_RT_CUDA_DEVICE,
 *     else the launcher's local rank modulo the device count); without a
 *     driver or device it returns DISTOPT_RT_UNAVAILABLE.
 *   distopt_rt_cuda_copy: any direction (unified addressing), synchronous.
 *   distopt_rt_cuda_launches: the kernels this process has launched so far
 *     (a step's count is the difference across it).
 */
DISTOPT_RT_API distopt_rt_status distopt_rt_cuda_init(int64_t device);
DISTOPT_RT_API distopt_rt_status distopt_rt_cuda_check(void);
DISTOPT_RT_API distopt_rt_status distopt_rt_cuda_alloc(uint64_t bytes,
                                                       void **ptr);
DISTOPT_RT_API distopt_rt_status distopt_rt_cuda_free(void *ptr);
DISTOPT_RT_API distopt_rt_status distopt_rt_cuda_copy(void *dst,
                                                      const void *src,
                                                      uint64_t bytes);
DISTOPT_RT_API distopt_rt_status distopt_rt_cuda_synchronize(void);
DISTOPT_RT_API uint64_t distopt_rt_cuda_launches(void);

/* Creates a communicator over all processes of the run.
 *   backend: "mpi" (initialises MPI if needed), "single" (one process),
 *     "nccl" (buffers in device memory; NCCL, libnccl.so.2, loaded at run
 *     time and bootstrapped over MPI under mpirun, else one process) or
 *     "host-staged" (buffers in device memory, copied to the host and
 *     reduced there by the host backend: for machines without NCCL, and
 *     several ranks on one GPU, which NCCL refuses; not fast).
 *   expected_size: the world size the step was compiled for; another size
 *     is DISTOPT_RT_WORLD_SIZE_MISMATCH. 0 accepts any size.
 *   timeout_seconds: how long any collective may wait for its peers before
 *     failing with DISTOPT_RT_TIMEOUT (> 0). */
DISTOPT_RT_API distopt_rt_status distopt_rt_comm_create(const char *backend,
                                                        int64_t expected_size,
                                                        double timeout_seconds,
                                                        distopt_rt_comm **comm);
/* Waits for pending requests, then frees the communicator. With MPI, the
 * last communicator destroyed finalises MPI if the runtime initialised it. */
DISTOPT_RT_API distopt_rt_status distopt_rt_comm_destroy(distopt_rt_comm *comm);
DISTOPT_RT_API distopt_rt_status
distopt_rt_comm_rank(const distopt_rt_comm *comm, int64_t *rank);
DISTOPT_RT_API distopt_rt_status
distopt_rt_comm_size(const distopt_rt_comm *comm, int64_t *size);

/* Collectives. Counts are in elements of `dtype`; `send` and `recv` may be
 * the same buffer (in place). `scale` is used by DISTOPT_RT_PREMUL_SUM only.
 * `wire` is the element type on the wire: the data's own type, or
 * DISTOPT_RT_BF16 / DISTOPT_RT_F16 for floating-point data (compression;
 * values are rounded for transport, reductions accumulate in the data's
 * type). Every rank must issue the same collectives in the same order. */
DISTOPT_RT_API distopt_rt_status distopt_rt_all_reduce(
    distopt_rt_comm *comm, const void *send, void *recv, int64_t count,
    distopt_rt_dtype dtype, distopt_rt_reduction op, double scale,
    distopt_rt_dtype wire);
/* `recv_count` elements per rank; `send` holds size * recv_count. */
DISTOPT_RT_API distopt_rt_status distopt_rt_reduce_scatter(
    distopt_rt_comm *comm, const void *send, void *recv, int64_t recv_count,
    distopt_rt_dtype dtype, distopt_rt_reduction op, double scale,
    distopt_rt_dtype wire);
/* `send_count` elements per rank; `recv` holds size * send_count, in rank
 * order. `send` may be this rank's own slot of `recv` (in place); it must
 * not overlap `recv` anywhere else. */
DISTOPT_RT_API distopt_rt_status distopt_rt_all_gather(
    distopt_rt_comm *comm, const void *send, void *recv, int64_t send_count,
    distopt_rt_dtype dtype, distopt_rt_dtype wire);
/* Every rank's `recv` receives `root`'s `send`. */
DISTOPT_RT_API distopt_rt_status distopt_rt_broadcast(
    distopt_rt_comm *comm, const void *send, void *recv, int64_t count,
    distopt_rt_dtype dtype, int64_t root, distopt_rt_dtype wire);
/* `root`'s `recv` receives the reduction; on other ranks `recv` receives
 * their own `send` (the dialect's semantics). */
DISTOPT_RT_API distopt_rt_status distopt_rt_reduce(
    distopt_rt_comm *comm, const void *send, void *recv, int64_t count,
    distopt_rt_dtype dtype, distopt_rt_reduction op, double scale, int64_t root,
    distopt_rt_dtype wire);

/* Asynchronous forms: the same arguments, and a request to wait on. The
 * buffers must stay valid and untouched until distopt_rt_wait returns.
 * Requests complete in the order they were started. */
DISTOPT_RT_API distopt_rt_status distopt_rt_all_reduce_start(
    distopt_rt_comm *comm, const void *send, void *recv, int64_t count,
    distopt_rt_dtype dtype, distopt_rt_reduction op, double scale,
    distopt_rt_dtype wire, distopt_rt_request **request);
DISTOPT_RT_API distopt_rt_status distopt_rt_reduce_scatter_start(
    distopt_rt_comm *comm, const void *send, void *recv, int64_t recv_count,
    distopt_rt_dtype dtype, distopt_rt_reduction op, double scale,
    distopt_rt_dtype wire, distopt_rt_request **request);
DISTOPT_RT_API distopt_rt_status distopt_rt_all_gather_start(
    distopt_rt_comm *comm, const void *send, void *recv, int64_t send_count,
    distopt_rt_dtype dtype, distopt_rt_dtype wire,
    distopt_rt_request **request);
DISTOPT_RT_API distopt_rt_status
distopt_rt_broadcast_start(distopt_rt_comm *comm, const void *send, void *recv,
                           int64_t count, distopt_rt_dtype dtype, int64_t root,
                           distopt_rt_dtype wire, distopt_rt_request **request);
DISTOPT_RT_API distopt_rt_status distopt_rt_reduce_start(
    distopt_rt_comm *comm, const void *send, void *recv, int64_t count,
    distopt_rt_dtype dtype, distopt_rt_reduction op, double scale, int64_t root,
    distopt_rt_dtype wire, distopt_rt_request **request);
/* For compiled steps: the communicator of the whole run, created on first
 * use and destroyed at exit. The backend is DISTOPT_RT_BACKEND (any of
 * distopt_rt_comm_create's; by default "mpi" when launched by mpirun, else
 * "single"), the
 * timeout DISTOPT_RT_TIMEOUT seconds (default 300). After
 * distopt_rt_cuda_init, the default backend is "nccl". `expected_size` as in
 * distopt_rt_comm_create; later calls must expect the same size. */
DISTOPT_RT_API distopt_rt_status distopt_rt_world(int64_t expected_size,
                                                  distopt_rt_comm **comm);
/* For drivers of a step on the GPU, whose own exchanges (checks,
 * checkpoints) take host buffers: a new communicator over the same ranks as
 * distopt_rt_world, on the host ("mpi" when launched by mpirun, else
 * "single"; DISTOPT_RT_BACKEND does not apply), with the same timeout.
 * The caller destroys it. */
DISTOPT_RT_API distopt_rt_status distopt_rt_host_comm(int64_t expected_size,
                                                      distopt_rt_comm **comm);
/* The backend distopt_rt_host_comm uses: "mpi" or "single". */
DISTOPT_RT_API const char *distopt_rt_host_backend(void);
/* Creates a communicator over the ranks of an MPI communicator the caller
 * owns (an mpi4py communicator's MPI._addressof(comm), or &MPI_COMM_WORLD):
 * `mpi_comm` points to an MPI_Comm, which is duplicated, so the caller's
 * traffic and the runtime's never mix. MPI must be initialised by the
 * caller (with at least MPI_THREAD_SERIALIZED) and is never finalised by
 * the runtime. Other arguments as in distopt_rt_comm_create. */
DISTOPT_RT_API distopt_rt_status
distopt_rt_comm_create_mpi(const void *mpi_comm, int64_t expected_size,
                           double timeout_seconds, distopt_rt_comm **comm);
/* A communicator over some of `comm`'s ranks: those that pass the same
 * `color` (>= 0), ordered by `key`, then by rank in `comm` (MPI_Comm_split;
 * on NCCL, a NCCL communicator of its own). Every rank of `comm` calls it,
 * between the same two collectives; collectives started on `comm` complete
 * first, and a rank that never calls it makes the others fail with
 * DISTOPT_RT_TIMEOUT (host backends) rather than wait in MPI_Comm_split.
 * `name` (or null) names the group in error messages, which also give
 * each rank's world rank. The caller destroys the group before `comm`. */
DISTOPT_RT_API distopt_rt_status distopt_rt_comm_split(distopt_rt_comm *comm,
                                                       int64_t color,
                                                       int64_t key,
                                                       const char *name,
                                                       distopt_rt_comm **group);
/* For compiled steps: the communicator of a process group, split from
 * distopt_rt_world(world_size) when first used and kept with it (freed with
 * that world, or with the communicator a host bound). `layout` holds
 * 2 * world_size values: the color of every world rank (its part of the
 * group), then its key (its rank in that part). Every part has `group_size`
 * ranks; `name` is the group's symbol. */
DISTOPT_RT_API distopt_rt_status distopt_rt_group(int64_t world_size,
                                                  int64_t group_size,
                                                  const int64_t *layout,
                                                  const char *name,
                                                  distopt_rt_comm **comm);
/* For hosts of compiled steps: makes `comm` what distopt_rt_world returns on
 * this thread (a step then runs on the host's communicator rather than the
 * process's default world); null restores the default. The host keeps
 * `comm` alive while it is bound. */
DISTOPT_RT_API void distopt_rt_bind_world(distopt_rt_comm *comm);
/* For compiled code that cannot return a status (a step called from other
 * MLIR code, as under mlir-runner; an entry point returns it instead, see
 * --distopt-return-status): reports the last error of this thread on stderr
 * and ends the run (MPI_Abort when MPI is up, so no rank is left waiting). */
DISTOPT_RT_API void distopt_rt_fatal(distopt_rt_status status);
/* For compiled steps, at their start: INVALID_ARGUMENT, naming parameter
 * group `group` (-1: the optimizer's defaults) and the rate, when `rate` is
 * not finite and non-negative (a rate times lr_scale times a schedule's
 * factor that reached infinity or NaN). The host step library then returns
 * that status with the step undone: nothing has run yet. */
DISTOPT_RT_API distopt_rt_status distopt_rt_check_rate(double rate,
                                                       int64_t group);
/* Whether this thread's last step failure was distopt_rt_check_rate's (and
 * forgets it): the step changed nothing. */
DISTOPT_RT_API int distopt_rt_take_rate_refusal(void);
/* Ends the run like distopt_rt_fatal, for a driver that has printed its own
 * message: prints nothing. */
DISTOPT_RT_API void distopt_rt_abort(void);

/* Converts `count` elements between element types (rounding to nearest
 * even; the same type: a copy). `in` and `out` must not overlap. */
DISTOPT_RT_API distopt_rt_status distopt_rt_convert(const void *in,
                                                    distopt_rt_dtype in_type,
                                                    void *out,
                                                    distopt_rt_dtype out_type,
                                                    int64_t count);

/* For compiled steps: c += op(a) op(b) in f32, row-major, where op(a) is
 * m x k (a holds its transpose, k x m, when transpose_a) and op(b) is k x n;
 * lda, ldb and ldc are the rows' strides in elements. Through the BLAS the
 * machine has, found at run time (OpenBLAS, else libblas.so.3 with CBLAS;
 * on one thread, so a product's bits do not depend on a rank's threads,
 * OpenBLAS's own setting put back after it), else a loop here;
 * DISTOPT_BLAS=none asks for the loop, DISTOPT_BLAS=<library> for that
 * library (UNAVAILABLE, naming it, where it does not open or has no
 * cblas_sgemm). */
DISTOPT_RT_API distopt_rt_status
distopt_rt_matmul_f32(int32_t transpose_a, int32_t transpose_b, int64_t m,
                      int64_t n, int64_t k, const float *a, int64_t lda,
                      const float *b, int64_t ldb, float *c, int64_t ldc);
/* The library distopt_rt_matmul_f32 calls, or "none" (the loop). */
DISTOPT_RT_API const char *distopt_rt_blas(void);

/* Completes and frees the request; returns the collective's status. */
DISTOPT_RT_API distopt_rt_status distopt_rt_wait(distopt_rt_request *request);

#ifdef __cplusplus
}
#endif

#endif /* DISTOPT_RT_H */
