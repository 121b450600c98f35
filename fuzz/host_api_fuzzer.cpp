//===- host_api_fuzzer.cpp - libFuzzer: the host step library's calls -----===//
//
// The input is a program: a sequence of distopt_step.h calls -- create and
// destroy sessions, bind, write, read, run, accumulate, set the rate and the
// steps done, read scalars, save, load, views, retained buffers, interface
// queries -- with arguments taken from the bytes, hostile ones often (NaN,
// infinities, negative and huge counts, wrong sizes, misaligned buffers,
// indices out of range), on single-process sessions of the steps listed in
// DISTOPT_FUZZ_STEPS (colon-separated shared libraries; scripts/fuzz
// compiles them). Every call must return a status, with a message when it is
// not DISTOPT_RT_OK, and never crash, leak, or touch memory it was not
// given: every buffer handed over is exactly as large as the size claimed,
// and views are written only while the library promises them valid.
//
//===----------------------------------------------------------------------===//

#include "distopt_step.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <unistd.h>
#include <vector>

namespace {

std::vector<distopt_step *> steps;
std::string directory; // where checkpoints go (tmpfs when there is one)

/// Values drawn from the input: ordinary ones mostly, hostile ones often;
/// zeros once it runs out.
class Input {
public:
  Input(const uint8_t *data, size_t size) : data(data), size(size) {}
  bool empty() const { return at >= size; }
  uint8_t byte() { return at < size ? data[at++] : 0; }
  template <typename T> T raw() {
    T value{};
    size_t n = std::min(sizeof(T), size - std::min(at, size));
    std::memcpy(&value, data + at, n);
    at += n;
    return value;
  }
  /// Often in [0, count), sometimes anything.
  int64_t index(int64_t count) {
    uint8_t b = byte();
    if (b < 224 && count > 0)
      return b % count;
    return b < 240 ? count + (b & 3) : raw<int64_t>();
  }
  /// A size in bytes: mostly `correct`, sometimes off by one, 0, anything.
  int64_t bytes(int64_t correct) {
    switch (byte() % 8) {
    case 0:
      return raw<int64_t>();
    case 1:
      return correct - 1;
    case 2:
      return correct + 1;
    case 3:
      return 0;
    default:
      return correct;
    }
  }
  double number() {
    switch (byte() % 10) {
    case 0:
      return NAN;
    case 1:
      return INFINITY;
    case 2:
      return -INFINITY;
    case 3:
      return -byte() / 8.0;
    case 4:
      return raw<double>();
    case 5:
      return 1e308;
    case 6:
      return -1.0; // DISTOPT_LR_OF_STEP
    case 7:
      return 0;
    default:
      return byte() / 64.0;
    }
  }
  int64_t integer() {
    switch (byte() % 8) {
    case 0:
      return INT64_MAX;
    case 1:
      return INT64_MAX - 1;
    case 2:
      return INT64_MIN;
    case 3:
      return -1;
    case 4:
      return raw<int64_t>();
    default:
      return byte();
    }
  }
  std::string text() {
    static const char *const words[] = {
        "param", "grad", "state", "w", "b", "w.exp_avg", "", "lr", "step"};
    uint8_t b = byte();
    if (b < 200)
      return words[b % (sizeof(words) / sizeof(words[0]))];
    std::string s;
    for (int n = byte() % 8; n > 0; --n)
      s += static_cast<char>(byte());
    return s;
  }

private:
  const uint8_t *data;
  size_t size, at = 0;
};

/// Memory the fuzzer hands the library: exactly `bytes` (at least one),
/// 64-byte aligned, or one byte off when `misaligned`.
struct Buffer {
  Buffer(int64_t bytes, bool misaligned)
      : storage(new char[std::max<int64_t>(bytes, 1) + 64 + 1]) {
    uintptr_t p = reinterpret_cast<uintptr_t>(storage.get());
    data = reinterpret_cast<char *>((p + 63) / 64 * 64) + (misaligned ? 1 : 0);
  }
  std::unique_ptr<char[]> storage;
  char *data;
};

/// Fails the run: the library broke a promise.
[[noreturn]] void broken(const char *what) {
  std::fprintf(stderr, "host API fuzzer: %s\n", what);
  std::abort();
}

/// A status must be known, and a failure must say why.
void expect(distopt_rt_status status) {
  if (status < DISTOPT_RT_OK || status > DISTOPT_RT_MISMATCH)
    broken("an unknown status");
  if (status != DISTOPT_RT_OK && !*distopt_rt_last_error())
    broken("a failure without a message");
}

struct Session {
  distopt_session *handle = nullptr;
  distopt_step *step = nullptr;
  /// The fuzzer's memory bound to arguments: kept until the session goes.
  std::vector<std::unique_ptr<Buffer>> bound;
  std::vector<bool> isBound;
};

/// Retained buffers, and the views of them that must stay writable.
struct Retained {
  distopt_session_buffers *buffers;
  std::vector<std::pair<char *, int64_t>> views;
};

class Program {
public:
  explicit Program(Input &in) : in(in) {}
  ~Program() {
    for (Session &s : sessions)
      distopt_session_destroy(s.handle);
    for (Retained &r : retained)
      release(r);
  }
  void step();

private:
  Session *pick() {
    return sessions.empty() ? nullptr : &sessions[in.byte() % sessions.size()];
  }
  void create();
  void release(Retained &r) {
    for (auto [view, bytes] : r.views)
      std::memset(view, 0x5a, bytes); // still allocated: safe to write
    distopt_session_release_buffers(r.buffers);
  }
  void destroy(size_t i) {
    distopt_session_destroy(sessions[i].handle);
    sessions.erase(sessions.begin() + i);
  }
  void tensorCall(Session &s, int what);
  void argumentCall(Session &s, int what);
  void queries();

  Input &in;
  std::vector<Session> sessions;
  std::vector<Retained> retained;
  std::string saved; // the last checkpoint written, if any
};

void Program::create() {
  if (sessions.size() >= 2 || steps.empty())
    return;
  distopt_step *step = steps[in.byte() % steps.size()];
  distopt_session_options options;
  distopt_session_default_options(&options);
  static const char *const backends[] = {"single", "single", "single",
                                         "mpi",    "bogus",  ""};
  options.backend = backends[in.byte() % 6];
  if (in.byte() & 1)
    options.lr = in.number();
  if (in.byte() & 1)
    options.timeout_seconds = in.number();
  static const int64_t threads[] = {0, 1, 2, -1, 1025, INT64_MIN};
  options.threads = threads[in.byte() % 6];
  if (in.byte() & 1)
    options.seed = in.raw<uint64_t>();
  distopt_session *handle = nullptr;
  distopt_rt_status status = distopt_session_create(step, &options, &handle);
  expect(status);
  if (status != DISTOPT_RT_OK) {
    if (handle)
      broken("a failed create returned a session");
    return;
  }
  Session s;
  s.handle = handle;
  s.step = step;
  s.isBound.assign(distopt_step_num_args(step), false);
  sessions.push_back(std::move(s));
}

/// The most the fuzzer allocates for one buffer: larger claimed sizes are
/// refused by the library (its steps are small), so they need no memory.
constexpr int64_t kMaxBuffer = int64_t(1) << 20;

int64_t allocated(int64_t bytes) {
  return std::min(std::max<int64_t>(bytes, 1), kMaxBuffer);
}

/// Calls on a tensor of the step (write, read, view).
void Program::tensorCall(Session &s, int what) {
  int64_t index = in.index(distopt_step_num_tensors(s.step));
  distopt_step_tensor t;
  bool known = distopt_step_tensor_info(s.step, index, &t) == DISTOPT_RT_OK;
  int64_t bytes = in.bytes(known ? t.bytes : 16);
  Buffer buffer(allocated(bytes), false);
  char *data = in.byte() == 0 ? nullptr : buffer.data;
  if (what == 0) {
    for (int64_t k = 0; data && k < std::min(bytes, kMaxBuffer); ++k)
      data[k] = static_cast<char>(in.byte());
    expect(distopt_session_write_tensor(s.handle, index, data, bytes));
  } else if (what == 1) {
    expect(distopt_session_read_tensor(s.handle, index, data, bytes));
  } else {
    auto *view =
        static_cast<char *>(distopt_session_tensor_data(s.handle, index));
    if (view && !known)
      broken("a view of no tensor");
    if (view)
      std::memset(view, in.byte(), t.bytes); // the whole tensor is ours
  }
}

/// Calls on an argument (bind, unbind, its buffer).
void Program::argumentCall(Session &s, int what) {
  int64_t count = distopt_step_num_args(s.step);
  int64_t arg = in.index(count);
  distopt_step_value v;
  bool known = distopt_step_arg(s.step, arg, &v) == DISTOPT_RT_OK;
  if (what == 0) {
    int64_t bytes = in.bytes(known ? v.bytes : 16);
    auto buffer = std::make_unique<Buffer>(allocated(bytes), in.byte() < 32);
    bool unbind = in.byte() < 32;
    distopt_rt_status status = distopt_session_bind(
        s.handle, arg, unbind ? nullptr : buffer->data, bytes);
    expect(status);
    if (status == DISTOPT_RT_OK && known) {
      s.isBound[arg] = !unbind;
      if (!unbind)
        s.bound.push_back(std::move(buffer));
    }
    return;
  }
  char *data = static_cast<char *>(distopt_session_arg_data(s.handle, arg));
  if (data && (!known || !v.is_tensor))
    broken("a buffer for no tensor argument");
  if (data)
    std::memset(data, in.byte(), v.bytes);
}

void Program::queries() {
  distopt_step *step = steps[in.byte() % steps.size()];
  distopt_step_value v;
  distopt_step_layout_entry e;
  distopt_step_tensor t;
  int64_t args = distopt_step_num_args(step);
  int64_t arg = in.index(args);
  expect(distopt_step_arg(step, arg, &v));
  expect(
      distopt_step_result(step, in.index(distopt_step_num_results(step)), &v));
  expect(distopt_step_layout(step, arg, in.index(4), &e));
  expect(distopt_step_tensor_info(
      step, in.index(distopt_step_num_tensors(step)), &t));
  std::string role = in.text(), name = in.text();
  int64_t found = distopt_step_find_arg(step, role.c_str(), name.c_str());
  if (found < -1 || found >= args)
    broken("find_arg out of range");
  found = distopt_step_find_tensor(step, role.c_str(), name.c_str());
  if (found < -1 || found >= distopt_step_num_tensors(step))
    broken("find_tensor out of range");
  // Null handles are refused, not dereferenced.
  expect(distopt_session_run(nullptr));
  expect(distopt_session_set_lr(nullptr, 1));
  if (distopt_session_retain_buffers(nullptr))
    broken("buffers of no session");
}

void Program::step() {
  uint8_t op = in.byte() % 18;
  if (op == 0)
    return create();
  if (op == 1)
    return queries();
  Session *s = pick();
  if (!s)
    return create();
  switch (op) {
  case 2:
    return destroy(s - sessions.data());
  case 3:
  case 4:
  case 5:
    return tensorCall(*s, op - 3);
  case 6:
  case 7:
    return argumentCall(*s, op - 6);
  case 8:
    return expect(distopt_session_run(s->handle));
  case 9:
    return expect(distopt_session_accumulate(s->handle));
  case 10: {
    expect(distopt_session_set_lr(s->handle, in.number()));
    double lr = distopt_session_lr(s->handle);
    if (!(lr >= 0 && std::isfinite(lr)))
      broken("a learning rate that is not finite and >= 0");
    return;
  }
  case 11:
    expect(distopt_session_set_steps_done(s->handle, in.integer()));
    if (distopt_session_steps_done(s->handle) < 0)
      broken("negative steps done");
    return;
  case 12: {
    double value;
    return expect(distopt_session_scalar(
        s->handle, in.index(distopt_step_num_results(s->step)), &value));
  }
  case 13: {
    std::string path = directory + "/saved.ckpt";
    distopt_rt_status status = distopt_session_save(s->handle, path.c_str());
    expect(status);
    if (status == DISTOPT_RT_OK)
      saved = path;
    return;
  }
  case 14: {
    // The saved checkpoint, a copy with one byte changed, or no file.
    std::string path = directory + "/missing.ckpt";
    uint8_t how = in.byte() % 3;
    if (how < 2 && !saved.empty()) {
      path = saved;
      if (how == 1) {
        FILE *f = std::fopen(saved.c_str(), "rb");
        std::string bytes;
        for (int c; f && (c = std::fgetc(f)) != EOF;)
          bytes += static_cast<char>(c);
        if (f)
          std::fclose(f);
        if (!bytes.empty())
          bytes[in.raw<uint32_t>() % bytes.size()] ^= 1 + in.byte() % 255;
        path = directory + "/changed.ckpt";
        f = std::fopen(path.c_str(), "wb");
        if (f) {
          std::fwrite(bytes.data(), 1, bytes.size(), f);
          std::fclose(f);
        }
      }
    }
    int64_t world = 0;
    return expect(distopt_session_load(s->handle, path.c_str(), &world));
  }
  case 15: {
    if (retained.size() >= 4)
      return;
    Retained r{distopt_session_retain_buffers(s->handle), {}};
    if (!r.buffers)
      broken("no buffers retained for a session");
    for (int64_t i = 0; i < distopt_step_num_args(s->step); ++i) {
      distopt_step_value v;
      char *data = static_cast<char *>(distopt_session_arg_data(s->handle, i));
      if (data && !s->isBound[i] && distopt_step_arg(s->step, i, &v) == 0)
        r.views.push_back({data, v.bytes});
    }
    retained.push_back(std::move(r));
    return;
  }
  case 16:
    if (!retained.empty()) {
      size_t i = in.byte() % retained.size();
      release(retained[i]);
      retained.erase(retained.begin() + i);
    }
    return;
  default:
    // Each retained view stays writable, whatever happened since.
    for (Retained &r : retained)
      for (auto [view, bytes] : r.views)
        std::memset(view, in.byte(), bytes);
    return;
  }
}

} // namespace

extern "C" int LLVMFuzzerInitialize(int *, char ***) {
  const char *list = std::getenv("DISTOPT_FUZZ_STEPS");
  for (std::string rest = list ? list : ""; !rest.empty();) {
    size_t colon = rest.find(':');
    std::string path = rest.substr(0, colon);
    rest = colon == std::string::npos ? "" : rest.substr(colon + 1);
    distopt_step *step = nullptr;
    if (distopt_step_open(path.c_str(), &step) != DISTOPT_RT_OK) {
      std::fprintf(stderr, "host API fuzzer: %s\n", distopt_rt_last_error());
      std::exit(1);
    }
    steps.push_back(step);
  }
  if (steps.empty()) {
    std::fprintf(stderr, "host API fuzzer: set DISTOPT_FUZZ_STEPS to compiled "
                         "steps (scripts/fuzz does)\n");
    std::exit(1);
  }
  // Checkpoints are written with fsync: on tmpfs when there is one.
  static char pattern[] = "/dev/shm/distopt-fuzz-XXXXXX";
  static char fallback[] = "/tmp/distopt-fuzz-XXXXXX";
  const char *made = mkdtemp(pattern);
  directory = made ? made : mkdtemp(fallback);
  std::atexit([] {
    for (distopt_step *step : steps)
      distopt_step_close(step);
    for (const char *name : {"/saved.ckpt", "/changed.ckpt"})
      std::remove((directory + name).c_str());
    ::rmdir(directory.c_str());
  });
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  Input in(data, size);
  Program program(in);
  for (int calls = 0; !in.empty() && calls < 64; ++calls)
    program.step();
  return 0;
}
