/*===- distopt_step.h - run compiled steps from a training program -*- C
-*-===*\
 *
 * The host step library: a training loop opens a step compiled by
 * distopt-compile, reads its interface, creates a session on its own
 * communicator, hands the step its parameter and gradient buffers (or takes
 * views of buffers the session owns), runs a step after each backward pass,
 * reads the step's scalars and saves or loads checkpoints. No LLVM.
 *
 * Every function that can fail returns a distopt_rt_status; the message is
 * distopt_rt_last_error() (this thread's, "" when none). Nothing aborts
 * the process: a collective that times out, a peer that died, a world size
 * that does not match, a binding of the wrong shape or dtype all come back
 * as statuses. After a step fails part way, the session's buffers hold a
 * partly updated step: restore them from a checkpoint before going on.
 *
 * Threads: one thread at a time per session; sessions on different
 * communicators may run on different threads.
 *
 * The API is versioned: DISTOPT_STEP_API_VERSION changes when a function or
 * structure changes incompatibly; distopt_step_api_version() returns the
 * version the library was built with.
 *
\*===----------------------------------------------------------------------===*/

#ifndef DISTOPT_STEP_H
#define DISTOPT_STEP_H

#include "distopt_rt.h"

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define DISTOPT_STEP_API_VERSION 2

typedef struct distopt_step distopt_step;       /* a loaded step */
typedef struct distopt_session distopt_session; /* a step on a communicator */

/* The library (libdistopt_rt.so, which also holds the runtime compiled
 * steps call) and this header's version. */
DISTOPT_RT_API int distopt_step_api_version(void);

/*--- Steps -----------------------------------------------------------------*/

/* Loads a shared library written by distopt-compile and validates the
 * interface it carries (docs/step-abi.md). */
DISTOPT_RT_API distopt_rt_status distopt_step_open(const char *path,
                                                   distopt_step **step);
/* Frees a step; one that sessions still use is freed with the last of them
 * (the step must not be used through this handle after the call). */
DISTOPT_RT_API void distopt_step_close(distopt_step *step);

/* The interface as JSON, as distopt-compile wrote it (valid while the step
 * is open). */
DISTOPT_RT_API const char *distopt_step_interface(const distopt_step *step);
/* The number of ranks it was compiled for, and where its buffers live
 * ("cpu" or "cuda"). */
DISTOPT_RT_API int64_t distopt_step_world_size(const distopt_step *step);
DISTOPT_RT_API const char *distopt_step_device(const distopt_step *step);

/* per_rank: state that differs per rank, each rank's copy its own
 * (PowerSGD's error feedback: checkpoints keep every copy), or standing for
 * the mean of the copies (the momentum of Dion's low-rank sync: checkpoints
 * and distopt_session_read_tensor give the mean, every rank resumes from
 * it). */
#define DISTOPT_STEP_PER_RANK_OWN 1
#define DISTOPT_STEP_PER_RANK_MEAN 2

/* One argument or result of the step. Strings and arrays stay valid while
 * the step is open. */
typedef struct distopt_step_value {
  const char *role;   /* "param", "grad", "main_param", "state", "lr",
                         "step", "loss", ... or "" */
  const char *name;   /* the parameter's name, "w.exp_avg", "bucket0", ... */
  const char *dtype;  /* "f32", "f64", "bf16", "f16", "i32", "i64", "i1" */
  int32_t dtype_code; /* its distopt_rt_dtype, -1 for i1 */
  int32_t is_tensor;  /* 0: a scalar */
  int64_t ndim;       /* tensors: the number of dimensions (0 for 0-d) */
  const int64_t *shape;
  int64_t numel;
  int64_t bytes;          /* numel times the element's size */
  const char *init;       /* "zeros", "randn", "randn_each_step" */
  int32_t per_rank;       /* 0, or DISTOPT_STEP_PER_RANK_OWN or _MEAN */
  int64_t shard_of;       /* a flat ZeRO shard: the whole buffer's length, in
                             K = shard_of / numel parts; rank r holds part
                             r mod K (K < world size: hybrid sharding) */
  int64_t in_place_arg;   /* results: the argument it is left in, or -1 */
  int64_t layout_entries; /* tensors laid out in a flat buffer */
} distopt_step_value;

/* Where one tensor lies in a flat argument (a gradient bucket, a flat
 * parameter, a ZeRO shard). */
typedef struct distopt_step_layout_entry {
  const char *name;
  int64_t offset; /* elements, in the whole flat buffer */
  int64_t ndim;
  const int64_t *shape;
  int64_t numel;
  int64_t owner; /* greedy sharding: the rank that holds it; else -1 */
} distopt_step_layout_entry;

DISTOPT_RT_API int64_t distopt_step_num_args(const distopt_step *step);
DISTOPT_RT_API int64_t distopt_step_num_results(const distopt_step *step);
DISTOPT_RT_API distopt_rt_status distopt_step_arg(const distopt_step *step,
                                                  int64_t index,
                                                  distopt_step_value *value);
DISTOPT_RT_API distopt_rt_status distopt_step_result(const distopt_step *step,
                                                     int64_t index,
                                                     distopt_step_value *value);
DISTOPT_RT_API distopt_rt_status
distopt_step_layout(const distopt_step *step, int64_t arg, int64_t entry,
                    distopt_step_layout_entry *out);
/* The argument of this role and name, or -1. */
DISTOPT_RT_API int64_t distopt_step_find_arg(const distopt_step *step,
                                             const char *role,
                                             const char *name);

/* The step's tensors as a model and a checkpoint name them: each
 * parameter, gradient, main parameter and state tensor ("w", "w.exp_avg"),
 * whole, wherever the arguments hold it (an argument of its own, an entry
 * of a gradient bucket or flat parameter, ZeRO shards on every rank, one
 * owner rank). */
typedef struct distopt_step_tensor {
  const char *role; /* "param", "grad", "main_param", "state" */
  const char *name;
  const char *dtype;
  int32_t dtype_code;
  int32_t per_rank; /* 0, or DISTOPT_STEP_PER_RANK_OWN or _MEAN */
  int64_t ndim;
  const int64_t *shape;
  int64_t numel;
  int64_t bytes;
  int64_t arg;   /* the argument that holds it */
  int32_t whole; /* every rank holds all of it (no ZeRO shard or owner) */
} distopt_step_tensor;

DISTOPT_RT_API int64_t distopt_step_num_tensors(const distopt_step *step);
DISTOPT_RT_API distopt_rt_status distopt_step_tensor_info(
    const distopt_step *step, int64_t index, distopt_step_tensor *tensor);
/* The tensor of this role and name, or -1. */
DISTOPT_RT_API int64_t distopt_step_find_tensor(const distopt_step *step,
                                                const char *role,
                                                const char *name);

/*--- Sessions --------------------------------------------------------------*/

typedef struct distopt_session_options {
  /* Where the ranks come from, the first that is set:
   *   mpi_comm: a pointer to the caller's MPI_Comm (mpi4py:
   *     MPI._addressof(comm)); the caller initialised MPI;
   *   backend: "mpi" (MPI_COMM_WORLD, initialising MPI if needed), "single"
   *     (one process), or null/"" for the process's default world
   *     (DISTOPT_RT_BACKEND, else "mpi" under mpirun, else "single"). */
  const void *mpi_comm;
  const char *backend;
  /* How long a collective may wait for its peers, in seconds (at most
   * 1e9); 0: the DISTOPT_RT_TIMEOUT environment variable, else 300. NaN,
   * a negative or a larger value is refused. */
  double timeout_seconds;
  /* The learning rate the steps start with (finite, >= 0);
   * DISTOPT_LR_OF_STEP: the one the step was compiled with (its spec's),
   * else 1e-3. NaN, infinities and other negative values are refused. */
  double lr;
  /* Seed of the draws the step's interface asks for (PowerSGD's initial Q;
   * init "randn"): the same on every rank. DISTOPT_SEED_OF_STEP: the one
   * the step was compiled with (--distopt-powersgd=seed=S), else 42. */
  uint64_t seed;
  /* Threads of a CPU step's parallel loops (its large element-wise work;
   * the results do not depend on the count). 0: the DISTOPT_THREADS
   * environment variable, else the cores this process may run on divided
   * among the ranks on its node as the launcher reports them
   * (OMPI_COMM_WORLD_LOCAL_SIZE, MPI_LOCALNRANKS, SLURM_NTASKS_PER_NODE),
   * at least 1: 1 when ranks outnumber the cores. At most 1024, given or
   * from DISTOPT_THREADS: distopt_session_create refuses more. */
  int64_t threads;
} distopt_session_options;

#define DISTOPT_SEED_OF_STEP UINT64_MAX
#define DISTOPT_LR_OF_STEP (-1.0)

/* The defaults: the process's default world, DISTOPT_RT_TIMEOUT, the
 * compiled learning rate, the compiled seed (else 42), the default
 * threads. */
DISTOPT_RT_API void
distopt_session_default_options(distopt_session_options *options);

/* Collective over the ranks: every rank creates its session together. The
 * world size must be the one the step was compiled for, and every rank must
 * load the same step (their collectives are compared). Every tensor
 * argument gets a zeroed, 64-byte-aligned buffer the session owns; state
 * the interface says to draw ("randn") is drawn. */
DISTOPT_RT_API distopt_rt_status distopt_session_create(
    distopt_step *step, const distopt_session_options *options,
    distopt_session **session);
DISTOPT_RT_API void distopt_session_destroy(distopt_session *session);
DISTOPT_RT_API int64_t distopt_session_rank(const distopt_session *session);
DISTOPT_RT_API int64_t distopt_session_size(const distopt_session *session);
/* The threads a CPU step's parallel loops run on (the option, resolved). */
DISTOPT_RT_API int64_t distopt_session_threads(const distopt_session *session);

/* The buffer of tensor argument `arg` (owned or bound): the step reads it
 * and leaves its update there. Stable for the session's life unless the
 * argument is bound again. For a step compiled for cuda, device memory. */
DISTOPT_RT_API void *distopt_session_arg_data(distopt_session *session,
                                              int64_t arg);
/* Binds caller memory to argument `arg` instead of the session's buffer
 * (zero copy): `bytes` must be the argument's size, `data` aligned to its
 * element and valid until it is unbound or the session destroyed. The
 * caller's content is kept; the session's own buffer is freed. Null `data`
 * returns the argument to a zeroed buffer of the session's. */
DISTOPT_RT_API distopt_rt_status distopt_session_bind(distopt_session *session,
                                                      int64_t arg, void *data,
                                                      int64_t bytes);
/* Leaves tensor argument `arg` without a buffer (the session's is freed, a
 * bound one forgotten) until it is bound again: for the whole buffers a
 * driver holds only while they are used, a ZeRO-3 step's gathered
 * parameters (role "gathered_param") and the gradients its reduce entries
 * leave reduced in another argument (its gradient buckets). Those start
 * without buffers in a step with gather entries. Running an entry (or the
 * step) that reads or writes an argument without a buffer, or asking for
 * its data, fails with an error naming it. Other arguments cannot be
 * released. */
DISTOPT_RT_API distopt_rt_status
distopt_session_release(distopt_session *session, int64_t arg);
/* Views that outlive their session: a host that hands out views of the
 * session's buffers (distopt_session_arg_data, distopt_session_tensor_data;
 * Python's numpy and torch views) retains the buffers, and every buffer the
 * session gives up while a reference is held -- when it is destroyed, or an
 * argument is bound again -- stays allocated until the last reference is
 * released (it is then no longer the session's: writing to it changes
 * nothing the session reads). Buffers the caller bound are the caller's.
 * Null, with an error, for a null session. */
typedef struct distopt_session_buffers distopt_session_buffers;
DISTOPT_RT_API distopt_session_buffers *
distopt_session_retain_buffers(distopt_session *session);
DISTOPT_RT_API void
distopt_session_release_buffers(distopt_session_buffers *buffers);
/* Where tensor `index` (distopt_step_tensor_info) lies in this rank's
 * buffers when this rank holds all of it (`whole`): an argument of its own,
 * or its entry in a gradient bucket or flat parameter. A view the caller
 * may read and write in place (DDP's gradient_as_bucket_view, FSDP's
 * FlatParameter); null, with an error, for a tensor held as shards. */
DISTOPT_RT_API void *distopt_session_tensor_data(distopt_session *session,
                                                 int64_t index);
/* Copies a whole tensor (row-major, the step's dtype, `bytes` its size) into
 * the parts of it this rank holds: local, no communication. Every rank
 * passes the same values for a tensor that is not per rank. */
DISTOPT_RT_API distopt_rt_status distopt_session_write_tensor(
    distopt_session *session, int64_t index, const void *data, int64_t bytes);
/* Copies a whole tensor out of the ranks that hold it. Collective for a
 * tensor that is not whole here and for one that stands for the ranks'
 * mean (every rank calls it, in the same order: it gives the mean); a
 * per-rank tensor of DISTOPT_STEP_PER_RANK_OWN is this rank's copy. */
DISTOPT_RT_API distopt_rt_status distopt_session_read_tensor(
    distopt_session *session, int64_t index, void *out, int64_t bytes);

/* The learning rate of the next steps (finite, >= 0). A step compiled with
 * runtime hyperparameters has a rate per parameter group instead (the
 * hyperparameters named "<group>.lr"): this sets every group's. */
DISTOPT_RT_API distopt_rt_status
distopt_session_set_lr(distopt_session *session, double lr);
/* The learning rate the next step takes (the first group's, where each
 * group has its own; NaN for a null session). */
DISTOPT_RT_API double distopt_session_lr(const distopt_session *session);
/* Hyperparameters a step takes at run time (scalar arguments of role
 * "hyperparameter", named "<group>.<key>": "group0.lr", "group0.beta1",
 * "group1.weight_decay", ...; a spec's runtime_hyperparameters): the value
 * the next steps take, as torch.optim's param_groups hold them. Each starts
 * from the value the step was compiled with; checkpoints keep them. A value
 * must be finite (a rate also non-negative); the step's structure (which
 * state tensors exist) follows the compiled values, so a momentum compiled
 * as 0 stays without a buffer. The same on every rank. */
DISTOPT_RT_API distopt_rt_status distopt_session_set_hyperparameter(
    distopt_session *session, int64_t arg, double value);
DISTOPT_RT_API distopt_rt_status distopt_session_hyperparameter(
    const distopt_session *session, int64_t arg, double *value);
/* Scalar state a step keeps from step to step (scalar arguments of role
 * "state": the dynamic loss scale "loss_scale" and its growth tracker
 * "loss_scale_growth_tracker", a schedule's "lr_schedule.last_epoch"): the
 * value the next step takes, and setting it, for a program that restores a
 * scaler or a schedule itself (torch's GradScaler.load_state_dict).
 * Checkpoints keep them. An integer must be a whole number from 0 to
 * 2^53 (i64) or 2^31 - 1 (i32); the loss scale finite and positive;
 * another float finite. The same
 * on every rank. */
DISTOPT_RT_API distopt_rt_status distopt_session_set_scalar_state(
    distopt_session *session, int64_t arg, double value);
DISTOPT_RT_API distopt_rt_status distopt_session_scalar_state(
    const distopt_session *session, int64_t arg, double *value);
/* Runs one step on every rank (collective): the step number is one more
 * than the steps done (1 for the first). Gradients must be in place
 * (backward wrote them into the gradient arguments); results go back into
 * the buffers of the arguments they update. At a session's first step, a
 * main parameter (fp32 copy of a bf16/f16 parameter) the program did not
 * write (distopt_session_write_tensor, a view or bound memory, a
 * checkpoint) starts as its parameter's value. */
DISTOPT_RT_API distopt_rt_status distopt_session_run(distopt_session *session);
/*--- Split steps -----------------------------------------------------------*/
/* A step compiled with split-step (--distopt-split-step) has entry points
 * besides the whole step, for a driver that reduces each gradient bucket as
 * soon as its backward pass has produced it (DDP's reducer): one "reduce"
 * entry per gradient argument, which reduces it (the averaged gradient,
 * left in the gradient argument; or this rank's shard, left in an argument
 * of role "reduced_grad"), and the "update", which updates from what the
 * reductions left. Running every reduce entry, then the update, computes
 * what distopt_session_run computes. Every rank runs them in the same
 * order (their collectives are matched). Compiled with gather-params, a
 * ZeRO-3 step also has one "gather" entry per flat parameter shard, which
 * all-gathers it whole into an argument of role "gathered_param" (FSDP's
 * gather before a unit's forward and backward); the whole step and the
 * update do not read those arguments. */
typedef struct distopt_step_entry {
  const char *name;       /* "reduce0", ..., "gather0", ..., "update" */
  const char *kind;       /* "reduce", "gather" or "update" */
  int64_t num_reduces;    /* reduce: the gradient arguments it reduces; */
  const int64_t *reduces; /* gather: the parameter shard it gathers (their
                             indices); update: 0, null */
} distopt_step_entry;

DISTOPT_RT_API int64_t distopt_step_num_entries(const distopt_step *step);
DISTOPT_RT_API distopt_rt_status distopt_step_entry_info(
    const distopt_step *step, int64_t k, distopt_step_entry *entry);
/* Runs entry point k on this thread (collective). The update is a step:
 * it takes the next step number and counts as distopt_session_run does. */
DISTOPT_RT_API distopt_rt_status
distopt_session_run_entry(distopt_session *session, int64_t k);
/* Starts reduce or gather entry k on the session's communication thread and
 * returns (the driver's backward pass goes on meanwhile); entries started
 * run one after another in the order started. The buffers they read and
 * write must not be touched until distopt_session_wait returns, and the
 * program must not use the communicator meanwhile. */
DISTOPT_RT_API distopt_rt_status
distopt_session_start_entry(distopt_session *session, int64_t k);
/* Waits for every entry started; returns the first failure's status (and
 * message), after which the session is broken as after a failed step.
 * Every other call that communicates (run, run_entry, save, load, read)
 * waits first. */
DISTOPT_RT_API distopt_rt_status distopt_session_wait(distopt_session *session);
/* Entries started on the communication thread since the session was
 * created, and how many of them have finished (in the order started): the
 * n-th started is done once `finished` reaches n, which a driver polls to
 * free what it reduced. */
DISTOPT_RT_API int64_t
distopt_session_entries_started(distopt_session *session);
DISTOPT_RT_API int64_t
distopt_session_entries_finished(distopt_session *session);
/* Waits until the first `count` entries started have finished (not those
 * started after: a gather prefetched ahead of a reduction is waited for
 * alone); a failure is returned as distopt_session_wait returns it. */
DISTOPT_RT_API distopt_rt_status
distopt_session_wait_entries(distopt_session *session, int64_t count);

/* Gradient accumulation (a step compiled with grad_accumulation K): adds
 * this micro-batch's gradients (the gradient arguments) into the step's f32
 * accumulators and zeroes the gradient buffers, with no communication, as
 * under DDP's no_sync. Call it after each of the first K - 1 micro-batches'
 * backward; the K-th backward's gradients go to distopt_session_run, which
 * reduces the sum once, divided by N * K, and zeroes the accumulators.
 * The count is enforced: a K-th call before the run, or a run after fewer
 * than K - 1 calls, is DISTOPT_RT_INVALID_ARGUMENT naming the count, and
 * changes nothing. Host buffers only (not yet for a step compiled for
 * cuda). */
DISTOPT_RT_API distopt_rt_status
distopt_session_accumulate(distopt_session *session);
/* Forgets the micro-batches accumulated since the last step: zeroes the
 * accumulators and the count (a program that zeroes its gradients, or
 * drops a step that failed part way, as torch's zero_grad() drops what
 * .grad had accumulated). A no-op for a step without accumulation. */
DISTOPT_RT_API distopt_rt_status
distopt_session_discard_accumulated(distopt_session *session);
/* Micro-batches per step the step was compiled for (1: no accumulation). */
DISTOPT_RT_API int64_t distopt_step_grad_accumulation(const distopt_step *step);
/* Steps done: run, or restored from a checkpoint. At most INT64_MAX - 1
 * (the step numbers are int64): a run after that many is refused. */
DISTOPT_RT_API int64_t
distopt_session_steps_done(const distopt_session *session);
/* Sets the steps done, for a program that restores the optimizer's state
 * itself (torch.optim's state_dict): the next step is `steps` + 1, which
 * bias corrections and schedules depend on. The same on every rank. */
DISTOPT_RT_API distopt_rt_status
distopt_session_set_steps_done(distopt_session *session, int64_t steps);
/* A scalar result of the last step (its loss, gradient norm, loss scale,
 * whether it was skipped), as a double; an error before the first step
 * (skipped or not) has run. */
DISTOPT_RT_API distopt_rt_status distopt_session_scalar(
    const distopt_session *session, int64_t result, double *value);
/* Seconds the last step took (the step itself: its collectives and math). */
DISTOPT_RT_API double
distopt_session_last_seconds(const distopt_session *session);

/* Checkpoints (docs/checkpoint.md), collective: shards are gathered, rank 0
 * writes `path` atomically and every rank returns its status. Loading
 * reads `path` on every rank (a shared file system), checks that it fits
 * the step, and fills parameters, main parameters and state whatever world
 * size and layout it was saved with; steps done continue from it, and
 * *saved_world_size (if not null) receives the world size it was saved
 * at. Every rank fails if one cannot load it. */
DISTOPT_RT_API distopt_rt_status distopt_session_save(distopt_session *session,
                                                      const char *path);
DISTOPT_RT_API distopt_rt_status distopt_session_load(
    distopt_session *session, const char *path, int64_t *saved_world_size);

/* The session's host communicator (for a driver's own checks), and the
 * communicator the step's collectives run on (the same, except for a CUDA
 * step: NCCL on device buffers). */
DISTOPT_RT_API distopt_rt_comm *
distopt_session_comm(const distopt_session *session);

#ifdef __cplusplus
}
#endif

#endif /* DISTOPT_STEP_H */
