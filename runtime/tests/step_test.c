/*===- step_test.c - the host step library, from C ------------------------===*\
 *
 * Drives a compiled step through distopt_step.h the way a training program
 * does, in plain C (so the header stays C), and checks what the library
 * promises (test/Runtime/step-library.test):
 *
 *   step_test api STEP      interface queries, bindings refused with a
 *                           message naming the argument, zero-copy views,
 *                           save / load continuing bit for bit
 *   step_test comm STEP     sessions on communicators the caller splits
 *                           from MPI_COMM_WORLD; a world of the wrong size
 *                           comes back as a status
 *   step_test dead STEP     a peer exits before a step: the survivors' run
 *                           returns a status naming it, nothing aborts
 *   step_test values STEP   every numeric value of the API checked: NaN,
 *                           negative, out of range refused naming the
 *                           argument; the accumulation count enforced; a
 *                           first step skipped on NaN gradients runs on
 *                           (one process; STEP compiled with loss scaling,
 *                           clipping and grad_accumulation 3)
 *   step_test mpi-init STEP a program that initialised MPI with MPI_Init
 *                           (MPI_THREAD_SINGLE): its communicator is
 *                           refused, the message saying to call
 *                           MPI_Init_thread with MPI_THREAD_SERIALIZED
 *   step_test mismatch STEP save|read
 *                           rank 1 saves a checkpoint (or reads a tensor
 *                           held as shards) while the others run a step:
 *                           every rank fails at once with
 *                           DISTOPT_RT_MISMATCH naming both operations, no
 *                           parameter changes, and the session is broken
 *
 * Prints "step_test: N passed, M failed"; exits non-zero on a failure.
 *
\*===----------------------------------------------------------------------===*/

#include "distopt_step.h"

#include <mpi.h>

#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int passed, failed, worldRank;

/* LeakSanitizer's check, where liblsan is preloaded; null otherwise. */
extern int __lsan_do_recoverable_leak_check(void) __attribute__((weak));

#define CHECK(cond, ...)                                                       \
  do {                                                                         \
    if (cond) {                                                                \
      ++passed;                                                                \
    } else {                                                                   \
      ++failed;                                                                \
      fprintf(stderr, "rank %d: FAILED %s:%d: %s: ", worldRank, __FILE__,      \
              __LINE__, #cond);                                                \
      fprintf(stderr, __VA_ARGS__);                                            \
      fprintf(stderr, " [%s]\n", distopt_rt_last_error());                     \
    }                                                                          \
  } while (0)

/* Fails the test and stops: what follows depends on it. */
#define REQUIRE_OK(call)                                                       \
  do {                                                                         \
    distopt_rt_status status_ = (call);                                        \
    if (status_ != DISTOPT_RT_OK) {                                            \
      fprintf(stderr, "rank %d: FAILED %s:%d: %s returned %d: %s\n",           \
              worldRank, __FILE__, __LINE__, #call, (int)status_,              \
              distopt_rt_last_error());                                        \
      return 1;                                                                \
    }                                                                          \
  } while (0)

/* Fills every f32 parameter with a pattern and every gradient with one that
 * depends on the step and, with `perRank`, on the rank. */
static int fillTensors(distopt_session *session, const distopt_step *step,
                       const char *role, int64_t salt) {
  for (int64_t i = 0; i < distopt_step_num_tensors(step); ++i) {
    distopt_step_tensor t;
    REQUIRE_OK(distopt_step_tensor_info(step, i, &t));
    if (strcmp(t.role, role) != 0)
      continue;
    if (t.dtype_code != DISTOPT_RT_F32) {
      fprintf(stderr, "step_test: the test step must be f32 (%s)\n", t.name);
      return 1;
    }
    float *values = malloc((size_t)t.bytes + 4);
    for (int64_t e = 0; e < t.numel; ++e)
      values[e] = (float)((e * 7 + i * 13 + salt * 5) % 23 - 11) / 16.0f;
    distopt_rt_status status =
        distopt_session_write_tensor(session, i, values, t.bytes);
    free(values);
    REQUIRE_OK(status);
  }
  return 0;
}

/* Every tensor of `role` read back whole, concatenated. */
static float *readAll(distopt_session *session, const distopt_step *step,
                      const char *role, int64_t *count) {
  int64_t total = 0;
  for (int64_t i = 0; i < distopt_step_num_tensors(step); ++i) {
    distopt_step_tensor t;
    distopt_step_tensor_info(step, i, &t);
    if (strcmp(t.role, role) == 0)
      total += t.numel;
  }
  float *out = malloc((size_t)total * sizeof(float) + 4);
  int64_t at = 0;
  for (int64_t i = 0; i < distopt_step_num_tensors(step); ++i) {
    distopt_step_tensor t;
    distopt_step_tensor_info(step, i, &t);
    if (strcmp(t.role, role) != 0)
      continue;
    if (distopt_session_read_tensor(session, i, out + at, t.bytes) !=
        DISTOPT_RT_OK) {
      free(out);
      return NULL;
    }
    at += t.numel;
  }
  *count = total;
  return out;
}

/* Runs `steps` steps with gradients salted by the step number. */
static int runSteps(distopt_session *session, const distopt_step *step,
                    int steps) {
  for (int s = 0; s < steps; ++s) {
    int64_t salt =
        distopt_session_steps_done(session) * 3 + distopt_session_rank(session);
    if (fillTensors(session, step, "grad", salt))
      return 1;
    REQUIRE_OK(distopt_session_run(session));
  }
  return 0;
}

static int testApi(const char *path) {
  distopt_step *step = NULL;
  CHECK(distopt_step_open("/nonexistent/step.so", &step) ==
                DISTOPT_RT_INVALID_ARGUMENT &&
            strstr(distopt_rt_last_error(), "/nonexistent/step.so"),
        "opening a missing file");
  REQUIRE_OK(distopt_step_open(path, &step));
  CHECK(distopt_step_api_version() == DISTOPT_STEP_API_VERSION, "version");
  CHECK(strstr(distopt_step_interface(step), "\"args\"") != NULL,
        "interface JSON");

  /* Every argument described; the parameter w found by role and name. */
  int64_t numArgs = distopt_step_num_args(step);
  CHECK(numArgs > 2, "%lld arguments", (long long)numArgs);
  int64_t w = distopt_step_find_arg(step, "param", "w");
  CHECK(w >= 0, "param w");
  distopt_step_value value;
  REQUIRE_OK(distopt_step_arg(step, w, &value));
  CHECK(value.is_tensor && value.ndim == 2 && value.shape[0] == 8 &&
            value.shape[1] == 4 && value.numel == 32 && value.bytes == 128 &&
            strcmp(value.dtype, "f32") == 0,
        "w's description");
  CHECK(distopt_step_arg(step, numArgs, &value) == DISTOPT_RT_INVALID_ARGUMENT,
        "argument out of range");
  CHECK(distopt_step_find_arg(step, "param", "nope") == -1, "unknown name");

  distopt_session_options options;
  distopt_session_default_options(&options);
  options.lr = 0.01;
  distopt_session *session = NULL;
  REQUIRE_OK(distopt_session_create(step, &options, &session));
  CHECK(distopt_session_steps_done(session) == 0, "no steps yet");
  CHECK(distopt_session_threads(session) >= 1, "a default thread count");

  /* Threads: a count of the caller's is kept; a negative one is refused. */
  distopt_session_options threaded = options;
  threaded.threads = 3;
  distopt_session *three = NULL;
  REQUIRE_OK(distopt_session_create(step, &threaded, &three));
  CHECK(distopt_session_threads(three) == 3, "three threads");
  distopt_session_destroy(three);
  threaded.threads = -2;
  CHECK(distopt_session_create(step, &threaded, &three) ==
                DISTOPT_RT_INVALID_ARGUMENT &&
            strstr(distopt_rt_last_error(), "threads"),
        "a negative thread count");

  /* Bindings of the wrong size or alignment are refused, naming w. */
  float *mine = aligned_alloc(64, 256);
  memset(mine, 0, 256);
  CHECK(distopt_session_bind(session, w, mine, 64) ==
                DISTOPT_RT_INVALID_ARGUMENT &&
            strstr(distopt_rt_last_error(), "'w'") &&
            strstr(distopt_rt_last_error(), "128"),
        "a binding of the wrong size");
  CHECK(distopt_session_bind(session, w, (char *)mine + 2, 128) ==
                DISTOPT_RT_INVALID_ARGUMENT &&
            strstr(distopt_rt_last_error(), "'w'"),
        "a misaligned binding");
  CHECK(distopt_session_bind(session, numArgs + 3, mine, 128) ==
            DISTOPT_RT_INVALID_ARGUMENT,
        "a binding of no argument");

  /* Zero copy: a bound buffer is the argument; writes through either show
   * in the other. */
  REQUIRE_OK(distopt_session_bind(session, w, mine, 128));
  CHECK(distopt_session_arg_data(session, w) == mine, "bound buffer");
  if (fillTensors(session, step, "param", 0))
    return 1;
  int64_t wTensor = distopt_step_find_tensor(step, "param", "w");
  CHECK(distopt_session_tensor_data(session, wTensor) == mine &&
            mine[5] == (float)((5 * 7 + wTensor * 13) % 23 - 11) / 16.0f,
        "the view of w is the caller's buffer");

  /* Three steps, save, one more: a fresh session that loads the checkpoint
   * and takes the same fourth step ends bit for bit where this one did. */
  if (runSteps(session, step, 3))
    return 1;
  CHECK(distopt_session_steps_done(session) == 3, "three steps done");
  CHECK(distopt_session_last_seconds(session) >= 0, "timed");
  char ckpt[256];
  snprintf(ckpt, sizeof ckpt, "%s.ckpt", path);
  REQUIRE_OK(distopt_session_save(session, ckpt));
  if (runSteps(session, step, 1))
    return 1;
  int64_t count = 0, count2 = 0;
  float *params = readAll(session, step, "param", &count);
  float *state = readAll(session, step, "state", &count2);
  CHECK(params && state && count > 32, "read back");

  distopt_session *resumed = NULL;
  REQUIRE_OK(distopt_session_create(step, &options, &resumed));
  int64_t savedWorld = -1;
  REQUIRE_OK(distopt_session_load(resumed, ckpt, &savedWorld));
  CHECK(savedWorld == distopt_step_world_size(step) &&
            distopt_session_steps_done(resumed) == 3,
        "loaded at step %lld", (long long)distopt_session_steps_done(resumed));
  if (runSteps(resumed, step, 1))
    return 1;
  int64_t countB = 0, countB2 = 0;
  float *paramsB = readAll(resumed, step, "param", &countB);
  float *stateB = readAll(resumed, step, "state", &countB2);
  CHECK(paramsB && countB == count &&
            memcmp(params, paramsB, count * sizeof(float)) == 0,
        "parameters after resuming");
  CHECK(stateB && countB2 == count2 &&
            memcmp(state, stateB, count2 * sizeof(float)) == 0,
        "optimizer state after resuming");
  /* And the step moved the parameters. */
  CHECK(params[5] != (float)((5 * 7 + wTensor * 13) % 23 - 11) / 16.0f,
        "w changed");

  CHECK(distopt_session_load(resumed, "/nonexistent/ckpt", NULL) !=
                DISTOPT_RT_OK &&
            strstr(distopt_rt_last_error(), "/nonexistent/ckpt"),
        "loading a missing checkpoint");
  CHECK(distopt_session_set_lr(resumed, -1.0) == DISTOPT_RT_INVALID_ARGUMENT,
        "a negative learning rate");

  free(params);
  free(state);
  free(paramsB);
  free(stateB);
  distopt_session_destroy(resumed);
  distopt_session_destroy(session);
  free(mine);
  distopt_step_close(step);
  if (worldRank == 0)
    unlink(ckpt);
  return 0;
}

/* World of 4: two sessions of 2 ranks each on communicators the caller
 * split; both take the same steps, so their parameters agree. */
static int testComm(const char *path) {
  int worldSize;
  MPI_Comm_size(MPI_COMM_WORLD, &worldSize);
  distopt_step *step = NULL;
  REQUIRE_OK(distopt_step_open(path, &step));
  int64_t groupSize = distopt_step_world_size(step);
  if (worldSize % groupSize != 0 || worldSize == groupSize) {
    fprintf(stderr, "step_test comm: run on a multiple of %lld ranks\n",
            (long long)groupSize);
    return 1;
  }

  distopt_session_options options;
  distopt_session_default_options(&options);
  options.timeout_seconds = 20;
  MPI_Comm world = MPI_COMM_WORLD;
  options.mpi_comm = &world;
  distopt_session *session = NULL;
  CHECK(distopt_session_create(step, &options, &session) ==
                DISTOPT_RT_WORLD_SIZE_MISMATCH &&
            session == NULL && strstr(distopt_rt_last_error(), "compiled for"),
        "a communicator of the wrong size");

  MPI_Comm group;
  MPI_Comm_split(MPI_COMM_WORLD, worldRank / (int)groupSize, worldRank, &group);
  options.mpi_comm = &group;
  REQUIRE_OK(distopt_session_create(step, &options, &session));
  CHECK(distopt_session_size(session) == groupSize &&
            distopt_session_rank(session) == worldRank % groupSize,
        "rank %lld of %lld", (long long)distopt_session_rank(session),
        (long long)distopt_session_size(session));
  if (fillTensors(session, step, "param", 0) || runSteps(session, step, 3))
    return 1;
  int64_t count = 0;
  float *params = readAll(session, step, "param", &count);
  if (!params)
    REQUIRE_OK(DISTOPT_RT_FAILED);
  float *all = malloc((size_t)count * worldSize * sizeof(float));
  MPI_Allgather(params, (int)count, MPI_FLOAT, all, (int)count, MPI_FLOAT,
                MPI_COMM_WORLD);
  for (int r = 1; r < worldSize; ++r)
    CHECK(memcmp(all, all + (size_t)r * count, count * sizeof(float)) == 0,
          "rank %d's parameters differ from rank 0's", r);
  free(all);
  free(params);
  distopt_session_destroy(session);
  distopt_step_close(step);
  /* The caller's communicator outlives the session. */
  int groupRank = -1;
  CHECK(MPI_Comm_rank(group, &groupRank) == MPI_SUCCESS &&
            groupRank == worldRank % groupSize,
        "the caller's communicator still works");
  MPI_Comm_free(&group);
  return 0;
}

/* The last rank dies before the second step; the others' run returns. */
static int testDead(const char *path) {
  int worldSize;
  MPI_Comm_size(MPI_COMM_WORLD, &worldSize);
  distopt_step *step = NULL;
  REQUIRE_OK(distopt_step_open(path, &step));
  distopt_session_options options;
  distopt_session_default_options(&options);
  options.timeout_seconds = 20;
  MPI_Comm world = MPI_COMM_WORLD;
  options.mpi_comm = &world;
  distopt_session *session = NULL;
  REQUIRE_OK(distopt_session_create(step, &options, &session));
  if (fillTensors(session, step, "param", 0) || runSteps(session, step, 1))
    return 1;
  MPI_Barrier(MPI_COMM_WORLD);
  /* Killed, as a crashed rank is (mpirun keeps the others running with
   * orte_abort_on_non_zero_status 0; a clean exit without MPI_Finalize
   * would make it end them). */
  if (worldRank == worldSize - 1)
    raise(SIGKILL);
  if (fillTensors(session, step, "grad", 1))
    return 1;
  distopt_rt_status status = distopt_session_run(session);
  /* The error names this rank and the peer it was waiting for: the dead
   * one, or a survivor that has already returned and exited. */
  char expected[64];
  snprintf(expected, sizeof expected, "rank %d of %d", worldRank, worldSize);
  CHECK((status == DISTOPT_RT_PEER_DIED || status == DISTOPT_RT_TIMEOUT) &&
            strstr(distopt_rt_last_error(), expected),
        "status %d", (int)status);
  printf("rank %d: the step failed: %s\n", worldRank, distopt_rt_last_error());
  /* The session is broken; the process goes on. */
  CHECK(distopt_session_run(session) != DISTOPT_RT_OK, "a broken session");
  distopt_session_destroy(session);
  distopt_step_close(step);
  printf("step_test: rank %d: %d passed, %d failed\n", worldRank, passed,
         failed);
  fflush(stdout);
  /* MPI_Finalize would wait for the dead rank. */
  _exit(failed ? 1 : 0);
}

/* Whether `call` returned DISTOPT_RT_INVALID_ARGUMENT with a message
 * holding `needle`. */
static int refused(distopt_rt_status status, const char *needle) {
  return status == DISTOPT_RT_INVALID_ARGUMENT &&
         strstr(distopt_rt_last_error(), needle) != NULL;
}

/* Sets every gradient to `value`. */
static void fillGradients(distopt_session *session, const distopt_step *step,
                          float value) {
  for (int64_t i = 0; i < distopt_step_num_tensors(step); ++i) {
    distopt_step_tensor t;
    distopt_step_tensor_info(step, i, &t);
    if (strcmp(t.role, "grad") != 0)
      continue;
    float *g = distopt_session_tensor_data(session, i);
    for (int64_t e = 0; e < t.numel; ++e)
      g[e] = value;
  }
}

static int testValues(const char *path) {
  distopt_step *step = NULL;
  REQUIRE_OK(distopt_step_open(path, &step));
  int64_t k = distopt_step_grad_accumulation(step);
  if (k != 3 || distopt_step_world_size(step) != 1) {
    fprintf(stderr, "step_test values: compile a 1-rank step with "
                    "grad_accumulation 3\n");
    return 1;
  }
  distopt_session_options options;
  distopt_session_default_options(&options);
  options.backend = "single";
  distopt_session *session = NULL;

  /* Session options: each bad value refused, naming it, before anything. */
  double badLr[] = {NAN, -0.5, INFINITY, -INFINITY, -1e-300};
  for (int i = 0; i < 5; ++i) {
    distopt_session_options o = options;
    o.lr = badLr[i];
    CHECK(refused(distopt_session_create(step, &o, &session), "lr must be") &&
              session == NULL,
          "lr %g", badLr[i]);
  }
  double badTimeout[] = {NAN, -1, INFINITY, 2e9};
  for (int i = 0; i < 4; ++i) {
    distopt_session_options o = options;
    o.timeout_seconds = badTimeout[i];
    CHECK(
        refused(distopt_session_create(step, &o, &session), "timeout_seconds"),
        "timeout %g", badTimeout[i]);
  }
  int64_t badThreads[] = {-1, 1025, INT64_MIN};
  for (int i = 0; i < 3; ++i) {
    distopt_session_options o = options;
    o.threads = badThreads[i];
    CHECK(refused(distopt_session_create(step, &o, &session), "threads"),
          "threads %lld", (long long)badThreads[i]);
  }
  distopt_session_options o = options;
  o.lr = DISTOPT_LR_OF_STEP;
  REQUIRE_OK(distopt_session_create(step, &o, &session));
  CHECK(distopt_session_lr(session) == 0.01, "the compiled rate");
  distopt_session_destroy(session);
  options.lr = 0.5;
  REQUIRE_OK(distopt_session_create(step, &options, &session));

  for (int i = 0; i < 5; ++i)
    CHECK(refused(distopt_session_set_lr(session, badLr[i]), "learning rate") &&
              distopt_session_lr(session) == 0.5,
          "set_lr %g", badLr[i]);
  CHECK(refused(distopt_session_set_steps_done(session, -1), "steps done"),
        "negative steps done");
  CHECK(
      refused(distopt_session_set_steps_done(session, INT64_MAX), "steps done"),
      "INT64_MAX steps done");

  /* The accumulation protocol: exactly K - 1 accumulate() before run(). */
  fillGradients(session, step, 0.25f);
  CHECK(refused(distopt_session_run(session), "accumulate() was called 0 "
                                              "times"),
        "a run without accumulating");
  REQUIRE_OK(distopt_session_accumulate(session));
  CHECK(refused(distopt_session_run(session), "accumulate() was called 1 "
                                              "times"),
        "a run after one micro-batch of three");
  REQUIRE_OK(distopt_session_accumulate(session));
  CHECK(refused(distopt_session_accumulate(session), "called 2 times"),
        "a third accumulate()");
  CHECK(distopt_session_steps_done(session) == 0, "no step ran");

  /* A first step skipped on NaN gradients: its scalars read, and the next
   * step runs. */
  int64_t skipped = -1;
  for (int64_t r = 0; r < distopt_step_num_results(step); ++r) {
    distopt_step_value v;
    distopt_step_result(step, r, &v);
    if (strcmp(v.role, "skipped") == 0)
      skipped = r;
  }
  fillGradients(session, step, NAN);
  REQUIRE_OK(distopt_session_run(session));
  double value = 0;
  CHECK(distopt_session_scalar(session, skipped, &value) == DISTOPT_RT_OK &&
            value == 1 && distopt_session_steps_done(session) == 0,
        "the first step was skipped and says so");
  for (int m = 0; m < 3; ++m) {
    fillGradients(session, step, 0.25f);
    if (m < 2)
      REQUIRE_OK(distopt_session_accumulate(session));
  }
  CHECK(distopt_session_run(session) == DISTOPT_RT_OK &&
            distopt_session_scalar(session, skipped, &value) == DISTOPT_RT_OK &&
            value == 0 && distopt_session_steps_done(session) == 1,
        "the step after the skipped one [%s]", distopt_rt_last_error());

  /* The last step numbers: INT64_MAX - 1 steps done runs once, finite. */
  REQUIRE_OK(distopt_session_set_steps_done(session, INT64_MAX - 1));
  for (int m = 0; m < 3; ++m) {
    fillGradients(session, step, 0.25f);
    if (m < 2)
      REQUIRE_OK(distopt_session_accumulate(session));
  }
  REQUIRE_OK(distopt_session_run(session));
  int64_t w = distopt_step_find_tensor(step, "param", "w");
  const float *weight = distopt_session_tensor_data(session, w);
  int finite = 1;
  for (int e = 0; e < 32; ++e)
    finite &= isfinite(weight[e]) != 0;
  CHECK(finite && distopt_session_steps_done(session) == INT64_MAX,
        "step INT64_MAX: finite parameters");
  for (int m = 0; m < 2; ++m)
    REQUIRE_OK(distopt_session_accumulate(session));
  CHECK(refused(distopt_session_run(session), "no step number is left"),
        "a step after INT64_MAX");
  distopt_session_destroy(session);
  distopt_step_close(step);
  return 0;
}

/* MPI initialised with MPI_Init (by main): the session says what to call. */
static int testMpiInit(const char *path) {
  distopt_step *step = NULL;
  REQUIRE_OK(distopt_step_open(path, &step));
  distopt_session_options options;
  distopt_session_default_options(&options);
  MPI_Comm world = MPI_COMM_WORLD;
  options.mpi_comm = &world;
  distopt_session *session = NULL;
  distopt_rt_status status = distopt_session_create(step, &options, &session);
  CHECK(status == DISTOPT_RT_INVALID_ARGUMENT && session == NULL &&
            strstr(distopt_rt_last_error(),
                   "MPI_Init_thread(&argc, &argv, MPI_THREAD_SERIALIZED, "
                   "&provided)"),
        "status %d", (int)status);
  printf("step_test: %s\n", distopt_rt_last_error());
  distopt_step_close(step);
  return 0;
}

/* Rank 1 runs `other` (a save, or a read of a tensor held as shards) while
 * the others run a step: each prints how its call failed. */
static int testMismatch(const char *path, const char *other) {
  int worldSize;
  MPI_Comm_size(MPI_COMM_WORLD, &worldSize);
  distopt_step *step = NULL;
  REQUIRE_OK(distopt_step_open(path, &step));
  distopt_session_options options;
  distopt_session_default_options(&options);
  options.timeout_seconds = 30;
  MPI_Comm world = MPI_COMM_WORLD;
  options.mpi_comm = &world;
  distopt_session *session = NULL;
  REQUIRE_OK(distopt_session_create(step, &options, &session));
  if (fillTensors(session, step, "param", 0) || runSteps(session, step, 1) ||
      fillTensors(session, step, "grad", 7))
    return 1;
  /* The parameters each rank holds whole, to compare after the failure. */
  int64_t w = distopt_step_find_tensor(step, "param", "w");
  distopt_step_tensor info;
  REQUIRE_OK(distopt_step_tensor_info(step, w, &info));
  float before[64];
  CHECK(info.whole && info.bytes <= (int64_t)sizeof before, "w is whole");
  memcpy(before, distopt_session_tensor_data(session, w), info.bytes);
  /* A tensor no rank holds whole (ZeRO's state shards). */
  int64_t sharded = -1;
  for (int64_t i = 0; i < distopt_step_num_tensors(step) && sharded < 0; ++i) {
    distopt_step_tensor t;
    REQUIRE_OK(distopt_step_tensor_info(step, i, &t));
    if (!t.whole)
      sharded = i;
  }
  if (sharded < 0) {
    fprintf(stderr, "step_test mismatch: compile the step with ZeRO\n");
    return 1;
  }
  char ckpt[256];
  snprintf(ckpt, sizeof ckpt, "%s.mismatch.ckpt", path);
  MPI_Barrier(MPI_COMM_WORLD);
  uint64_t heldBefore = 0, heldAfter = 0;
  distopt_rt_memory_stats(&heldBefore, NULL);
  double start = MPI_Wtime();
  distopt_rt_status status;
  const char *what = "run";
  if (worldRank != 1) {
    status = distopt_session_run(session);
  } else if (strcmp(other, "save") == 0) {
    what = "save";
    status = distopt_session_save(session, ckpt);
  } else {
    what = "read";
    distopt_step_tensor t;
    REQUIRE_OK(distopt_step_tensor_info(step, sharded, &t));
    void *out = malloc((size_t)t.bytes);
    status = distopt_session_read_tensor(session, sharded, out, t.bytes);
    free(out);
  }
  double seconds = MPI_Wtime() - start;
  /* What the step allocated before it failed is freed (its frames, which
     would have freed it, are gone). */
  distopt_rt_memory_stats(&heldAfter, NULL);
  CHECK(heldAfter == heldBefore,
        "the failed %s left %lld bytes of the step's memory allocated", what,
        (long long)(heldAfter - heldBefore));
  /* The same, as LeakSanitizer sees it where it is preloaded
     (step-failure-leaks.test): no block is unreachable. */
  if (__lsan_do_recoverable_leak_check)
    CHECK(__lsan_do_recoverable_leak_check() == 0,
          "LeakSanitizer found blocks the failed %s lost", what);
  const char *others = strcmp(other, "save") == 0 ? "of a checkpoint save"
                                                  : "of reading a tensor";
  char me[64];
  snprintf(me, sizeof me, "rank %d of %d", worldRank, worldSize);
  const char *message = distopt_rt_last_error();
  CHECK(status == DISTOPT_RT_MISMATCH && strstr(message, me) &&
            strstr(message, "of a step") && strstr(message, others),
        "status %d", (int)status);
  CHECK(seconds < 10, "failed after %.1f s, not at once", seconds);
  printf("rank %d: %s failed with status %d: %s\n", worldRank, what,
         (int)status, message);
  CHECK(memcmp(before, distopt_session_tensor_data(session, w), info.bytes) ==
            0,
        "w changed");
  CHECK(distopt_session_run(session) == DISTOPT_RT_FAILED,
        "the session is broken");
  distopt_session_destroy(session);
  distopt_step_close(step);
  return 0;
}

int main(int argc, char **argv) {
  if (argc != 3 && !(argc == 4 && strcmp(argv[1], "mismatch") == 0)) {
    fprintf(stderr, "usage: step_test api|comm|dead|values|mpi-init STEP.so\n"
                    "       step_test mismatch STEP.so save|read\n");
    return 2;
  }
  int provided;
  if (strcmp(argv[1], "mpi-init") == 0)
    MPI_Init(&argc, &argv); /* what the test is about */
  else
    MPI_Init_thread(&argc, &argv, MPI_THREAD_SERIALIZED, &provided);
  MPI_Comm_rank(MPI_COMM_WORLD, &worldRank);
  int error;
  if (strcmp(argv[1], "api") == 0)
    error = testApi(argv[2]);
  else if (strcmp(argv[1], "comm") == 0)
    error = testComm(argv[2]);
  else if (strcmp(argv[1], "dead") == 0)
    error = testDead(argv[2]);
  else if (strcmp(argv[1], "mpi-init") == 0)
    error = testMpiInit(argv[2]);
  else if (strcmp(argv[1], "values") == 0)
    error = testValues(argv[2]);
  else if (strcmp(argv[1], "mismatch") == 0)
    error = testMismatch(argv[2], argv[3]);
  else {
    fprintf(stderr, "step_test: unknown mode '%s'\n", argv[1]);
    error = 2;
  }
  printf("step_test: rank %d: %d passed, %d failed\n", worldRank, passed,
         failed);
  MPI_Finalize();
  return error || failed ? 1 : 0;
}
