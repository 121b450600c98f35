//===- StepInterface.cpp - a compiled step's interface as JSON --*- C++ -*-===//
//
// Standard C++ only: the host step library in runtime/ compiles this file.
//
//===----------------------------------------------------------------------===//

#include "distopt/StepInterface/StepInterface.h"

#include "distopt/Support/Limits.h"
#include "distopt_rt.h"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <iterator>
#include <map>
#include <tuple>

namespace distopt::step {

namespace {

constexpr std::pair<Role, std::string_view> kRoles[] = {
    {Role::Param, "param"},
    {Role::Grad, "grad"},
    {Role::MainParam, "main_param"},
    {Role::State, "state"},
    {Role::LearningRate, "lr"},
    {Role::Step, "step"},
    {Role::Loss, "loss"},
    {Role::Skipped, "skipped"},
    {Role::GradAccum, "grad_accum"},
    {Role::Hyperparameter, "hyperparameter"},
    {Role::ReducedGrad, "reduced_grad"},
    {Role::GatheredParam, "gathered_param"},
};

constexpr DType kDTypes[] = {
    {"f32", 4, true, DISTOPT_RT_F32},
    {"f64", 8, true, DISTOPT_RT_F64},
    {"bf16", 2, true, DISTOPT_RT_BF16},
    {"f16", 2, true, DISTOPT_RT_F16},
    {"i32", 4, false, DISTOPT_RT_I32},
    {"i64", 8, false, DISTOPT_RT_I64},
    {"i1", 1, false, -1},
};

constexpr std::pair<Init, std::string_view> kInits[] = {
    {Init::Zeros, "zeros"},
    {Init::Randn, "randn"},
    {Init::RandnEachStep, "randn_each_step"},
};

/// The path of `key` in the object at `path` ("" is the root).
std::string child(const std::string &path, std::string_view key) {
  return path.empty() ? std::string(key) : path + "." + std::string(key);
}

std::string str(int64_t v) { return std::to_string(v); }

/// Reads JSON with a path to every value, keeping the first error: the
/// reading goes on with defaults, and the caller asks for the error once.
class Reader {
public:
  /// Records an error at `path` (the first one wins).
  void fail(const std::string &path, const std::string &message) {
    if (error.empty())
      error = path + ": " + message;
  }
  bool failed() const { return !error.empty(); }
  std::string takeError() { return "step interface: " + error; }

  /// `value` as an object (null, with an error, when it is not one).
  const json::Value *object(const json::Value *value, const std::string &path) {
    if (!value || !value->getObject()) {
      fail(path, value ? "expected an object" : "missing");
      return nullptr;
    }
    return value;
  }
  const json::Array *array(const json::Value &o, std::string_view key,
                           const std::string &path, bool required = true) {
    const json::Value *value = o.get(key);
    if (!value) {
      if (required)
        fail(child(path, key), "missing");
      return nullptr;
    }
    const json::Array *a = value->getArray();
    if (!a)
      fail(child(path, key), "expected an array");
    return a;
  }
  /// An integer in [lo, hi]; `fallback` when the key is absent (if given).
  int64_t integer(const json::Value &o, std::string_view key,
                  const std::string &path, int64_t lo, int64_t hi,
                  std::optional<int64_t> fallback = std::nullopt) {
    const json::Value *value = o.get(key);
    if (!value) {
      if (!fallback)
        fail(child(path, key), "missing");
      return fallback.value_or(lo);
    }
    return integer(*value, child(path, key), lo, hi);
  }
  int64_t integer(const json::Value &value, const std::string &path, int64_t lo,
                  int64_t hi) {
    std::optional<int64_t> v = value.getInteger();
    if (!v || *v < lo || *v > hi) {
      fail(path, "expected an integer from " + str(lo) + " to " + str(hi));
      return lo;
    }
    return *v;
  }
  std::string string(const json::Value &o, std::string_view key,
                     const std::string &path,
                     std::optional<std::string_view> fallback = std::nullopt) {
    const json::Value *value = o.get(key);
    if (!value) {
      if (!fallback)
        fail(child(path, key), "missing");
      return std::string(fallback.value_or(""));
    }
    const std::string *s = value->getString();
    if (!s)
      fail(child(path, key), "expected a string");
    // Every string of the interface reaches the host as a C string, where
    // "w\0a" and "w\0b" would both read "w".
    else if (s->find('\0') != std::string::npos)
      fail(child(path, key), "holds a NUL character (the host library hands "
                             "it out as a C string)");
    return s ? *s : std::string();
  }
  bool boolean(const json::Value &o, std::string_view key,
               const std::string &path) {
    const json::Value *value = o.get(key);
    if (!value)
      return false;
    std::optional<bool> b = value->getBoolean();
    if (!b)
      fail(child(path, key), "expected true or false");
    return b.value_or(false);
  }
  /// A shape: non-negative dimensions with at most kMaxElements elements.
  std::vector<int64_t> shape(const json::Array &dims, const std::string &path) {
    std::vector<int64_t> out;
    for (size_t i = 0; i < dims.size(); ++i)
      out.push_back(
          integer(dims[i], path + "[" + str(i) + "]", 0, kMaxElements));
    if (!failed() && checkedNumElements(out) < 0)
      fail(path, "more than 2^53 elements");
    return out;
  }

private:
  std::string error;
};

Value readValue(Reader &r, const json::Value &json, const std::string &path,
                int64_t worldSize, size_t numArgs, bool isResult) {
  Value v;
  const json::Value *o = r.object(&json, path);
  if (!o)
    return v;
  std::string role = r.string(*o, "role", path, "");
  if (!role.empty()) {
    if (std::optional<Role> parsed = parseRole(role))
      v.role = *parsed;
    else
      r.fail(path + ".role", "unknown role '" + role + "'");
  }
  v.name = r.string(*o, "name", path, "");
  std::string dtype = r.string(*o, "dtype", path);
  v.dtype = lookupDType(dtype);
  if (!v.dtype && !r.failed())
    r.fail(path + ".dtype", "unknown element type '" + dtype + "'");
  if (const json::Array *dims = r.array(*o, "shape", path, false))
    v.shape = r.shape(*dims, path + ".shape");
  std::string init = r.string(*o, "init", path, "zeros");
  if (std::optional<Init> parsed = parseInit(init))
    v.init = *parsed;
  else
    r.fail(path + ".init", "unknown init '" + init + "'");
  v.perRank = r.boolean(*o, "per_rank", path);
  v.rankMean = r.boolean(*o, "rank_mean", path);
  if (v.rankMean && !v.perRank)
    r.fail(path + ".rank_mean", "only per-rank state stands for its mean");
  v.shardOf = r.integer(*o, "shard_of", path, 1, kMaxElements, 0);
  if (o->get("in_place_arg")) {
    if (!isResult || numArgs == 0)
      r.fail(path + ".in_place_arg", "only a result may be in place, in an "
                                     "argument");
    else
      v.inPlaceArg = r.integer(*o, "in_place_arg", path, 0,
                               static_cast<int64_t>(numArgs) - 1);
  }
  if (const json::Array *entries = r.array(*o, "layout", path, false)) {
    for (size_t i = 0; i < entries->size(); ++i) {
      std::string at = path + ".layout[" + str(i) + "]";
      const json::Value *entry = r.object(&(*entries)[i], at);
      if (!entry)
        break;
      LayoutEntry le;
      le.name = r.string(*entry, "name", at);
      le.offset = r.integer(*entry, "offset", at, 0, kMaxElements);
      if (const json::Array *dims = r.array(*entry, "shape", at))
        le.shape = r.shape(*dims, at + ".shape");
      if (entry->get("owner"))
        le.owner = r.integer(*entry, "owner", at, 0, worldSize - 1);
      v.layout.push_back(std::move(le));
    }
  }
  if (const json::Value *initial = o->get("value")) {
    std::optional<double> number = initial->getNumber();
    if (!number || !std::isfinite(*number))
      r.fail(path + ".value", "expected a finite number");
    else
      v.initialValue = number;
  }
  if (r.failed())
    return v;

  // Consistency: what a driver computes from the value must stay inside it.
  if (v.initialValue &&
      (v.isTensor() || isResult ||
       (v.role != Role::State && v.role != Role::Hyperparameter)))
    r.fail(path + ".value", "only a scalar state or hyperparameter argument "
                            "has an initial value");
  if ((v.role == Role::Skipped || v.role == Role::Loss) && !isResult)
    r.fail(path + ".role",
           "only a result has role '" + std::string(roleName(v.role)) + "'");
  else if (v.role == Role::Skipped && (v.isTensor() || v.dtype->name != "i1"))
    r.fail(path + ".role", "a skipped flag is an i1 scalar");
  else if (v.role == Role::GradAccum && (isResult || !v.isTensor()))
    r.fail(path + ".role", "an accumulated gradient is a tensor argument");
  else if (v.role == Role::Hyperparameter &&
           (isResult || v.isTensor() || v.dtype->name != "f64"))
    r.fail(path + ".role", "a hyperparameter is an f64 scalar argument");
  if (!v.isTensor()) {
    if (!v.layout.empty() || v.shardOf || v.perRank)
      r.fail(path, "a scalar has no layout, shard or per-rank copies");
    else if (v.init != Init::Zeros)
      r.fail(path + ".init",
             "a scalar starts from its value, not from '" + init + "'");
    return v;
  }
  if (v.role == Role::LearningRate || v.role == Role::Step)
    r.fail(path + ".shape",
           "the " + std::string(roleName(v.role)) + " is a scalar");
  if (v.rankMean && (v.shardOf || !v.layout.empty()))
    r.fail(path + ".rank_mean",
           "state that stands for the ranks' mean is held whole");
  if (v.shardOf) {
    if (v.layout.empty() && v.role != Role::ReducedGrad)
      r.fail(path + ".shard_of", "a flat shard needs its layout");
    else if (v.numel() == 0 || v.shardOf % v.numel() != 0 ||
             worldSize % (v.shardOf / v.numel()) != 0)
      r.fail(path + ".shard_of",
             str(v.shardOf) + " elements in all is not a whole number of " +
                 str(v.numel()) + "-element shards dividing the " +
                 str(worldSize) + " ranks");
  }
  // A flat shard's entries lie in the whole buffer, the others' in this one;
  // entries of one owner (or without one) do not overlap.
  int64_t extent = v.shardOf ? v.shardOf : v.numel();
  std::vector<std::tuple<int64_t, int64_t, int64_t>> spans;
  for (size_t i = 0; i < v.layout.size(); ++i) {
    const LayoutEntry &e = v.layout[i];
    std::string at = path + ".layout[" + str(i) + "]";
    if (v.shardOf && e.owner)
      r.fail(at + ".owner", "a flat shard's entries have no owner");
    if (e.offset > extent || e.numel() > extent - e.offset)
      r.fail(at, "elements [" + str(e.offset) + ", " +
                     str(e.offset + e.numel()) + ") lie outside the " +
                     str(extent) + " elements of the buffer");
    spans.push_back({e.owner.value_or(-1), e.offset, e.offset + e.numel()});
  }
  std::sort(spans.begin(), spans.end());
  for (size_t i = 1; i < spans.size(); ++i)
    if (std::get<0>(spans[i]) == std::get<0>(spans[i - 1]) &&
        std::get<1>(spans[i]) < std::get<2>(spans[i - 1]))
      r.fail(path + ".layout",
             "two entries overlap at element " + str(std::get<1>(spans[i])));
  return v;
}

Entry readEntry(Reader &r, const json::Value &json, const std::string &path,
                const Interface &interface) {
  Entry e;
  const json::Value *o = r.object(&json, path);
  if (!o)
    return e;
  e.name = r.string(*o, "name", path);
  if (!r.failed() &&
      (e.name.empty() ||
       e.name.find_first_not_of("abcdefghijklmnopqrstuvwxyz0123456789_") !=
           std::string::npos))
    r.fail(path + ".name", "expected a name of [a-z0-9_]");
  std::string kind = r.string(*o, "kind", path);
  if (kind == "reduce")
    e.kind = Entry::Kind::Reduce;
  else if (kind == "gather")
    e.kind = Entry::Kind::Gather;
  else if (kind == "update")
    e.kind = Entry::Kind::Update;
  else if (!r.failed())
    r.fail(path + ".kind",
           "expected reduce, gather or update, got '" + kind + "'");
  int64_t numArgs = static_cast<int64_t>(interface.args.size());
  if (e.kind == Entry::Kind::Reduce) {
    const json::Array *reduces = r.array(*o, "reduces", path);
    for (size_t i = 0; reduces && i < reduces->size() && !r.failed(); ++i) {
      std::string at = path + ".reduces[" + str(i) + "]";
      e.reduces.push_back(r.integer((*reduces)[i], at, 0, numArgs - 1));
      if (!r.failed() && interface.args[e.reduces.back()].role != Role::Grad)
        r.fail(at, "argument #" + str(e.reduces.back()) + " is not a gradient");
    }
    if (!r.failed() && e.reduces.empty())
      r.fail(path + ".reduces", "a reduce entry reduces some gradient");
  }
  if (e.kind == Entry::Kind::Gather) {
    const json::Array *gathers = r.array(*o, "gathers", path);
    if (gathers && gathers->size() != 1 && !r.failed())
      r.fail(path + ".gathers", "a gather entry gathers one parameter shard");
    for (size_t i = 0; gathers && i < gathers->size() && !r.failed(); ++i) {
      std::string at = path + ".gathers[" + str(i) + "]";
      e.gathers.push_back(r.integer((*gathers)[i], at, 0, numArgs - 1));
      if (!r.failed() &&
          (interface.args[e.gathers.back()].role != Role::Param ||
           !interface.args[e.gathers.back()].shardOf))
        r.fail(at, "argument #" + str(e.gathers.back()) +
                       " is not a parameter shard");
    }
  }
  if (const json::Array *results = r.array(*o, "results", path))
    for (size_t i = 0; i < results->size() && !r.failed(); ++i)
      e.results.push_back(readValue(r, (*results)[i],
                                    path + ".results[" + str(i) + "]",
                                    interface.worldSize, numArgs, true));
  return e;
}

ProcessGroup readGroup(Reader &r, const json::Value &json,
                       const std::string &path, int64_t worldSize) {
  ProcessGroup g;
  const json::Value *o = r.object(&json, path);
  if (!o)
    return g;
  g.name = r.string(*o, "name", path);
  if (!r.failed() && g.name.empty())
    r.fail(path + ".name", "empty");
  g.size = r.integer(*o, "size", path, 1, worldSize);
  const json::Array *color = r.array(*o, "color", path);
  const json::Array *key = r.array(*o, "key", path);
  if (r.failed())
    return g;
  if (static_cast<int64_t>(color->size()) != worldSize ||
      static_cast<int64_t>(key->size()) != worldSize) {
    r.fail(path, "color and key need one entry per world rank (" +
                     str(worldSize) + ")");
    return g;
  }
  std::map<int64_t, int64_t> members;
  for (int64_t rank = 0; rank < worldSize && !r.failed(); ++rank) {
    std::string at = "[" + str(rank) + "]";
    g.color.push_back(
        r.integer((*color)[rank], path + ".color" + at, 0, INT32_MAX));
    g.key.push_back(r.integer((*key)[rank], path + ".key" + at, 0, g.size - 1));
    ++members[g.color.back()];
  }
  for (auto [part, count] : members)
    if (!r.failed() && count != g.size)
      r.fail(path + ".color", "part " + str(part) + " has " + str(count) +
                                  " ranks, expected " + str(g.size));
  return g;
}

} // namespace

std::string_view roleName(Role role) {
  for (const auto &[r, name] : kRoles)
    if (r == role)
      return name;
  return "";
}

std::string_view entryKindName(Entry::Kind kind) {
  switch (kind) {
  case Entry::Kind::Reduce:
    return "reduce";
  case Entry::Kind::Gather:
    return "gather";
  case Entry::Kind::Update:
    return "update";
  }
  return "update";
}

std::string knownRoles() {
  std::string roles;
  for (const auto &[role, spelling] : kRoles)
    roles += (roles.empty() ? "" : ", ") + std::string(spelling);
  return roles;
}

std::optional<Role> parseRole(std::string_view name) {
  for (const auto &[role, spelling] : kRoles)
    if (spelling == name)
      return role;
  return std::nullopt;
}

const DType *lookupDType(std::string_view name) {
  for (const DType &d : kDTypes)
    if (d.name == name)
      return &d;
  return nullptr;
}

std::string_view initName(Init init) {
  for (const auto &[i, name] : kInits)
    if (i == init)
      return name;
  return "zeros";
}

std::optional<Init> parseInit(std::string_view name) {
  for (const auto &[init, spelling] : kInits)
    if (spelling == name)
      return init;
  return std::nullopt;
}

int64_t LayoutEntry::numel() const {
  int64_t n = 1;
  for (int64_t d : shape)
    n *= d;
  return n;
}

int64_t Value::numel() const {
  int64_t n = 1;
  for (int64_t d : shape.value_or(std::vector<int64_t>{}))
    n *= d;
  return n;
}

uint64_t Value::bytes() const {
  return static_cast<uint64_t>(numel()) * (dtype ? dtype->bytes : 0);
}

json::Expected<Interface> parseInterface(std::string_view text) {
  using Result = json::Expected<Interface>;
  json::Expected<json::Value> parsed = json::parse(text);
  if (!parsed)
    return Result::failure("step interface: malformed JSON: " + parsed.error());
  Reader r;
  Interface result;
  const json::Value *root = r.object(&*parsed, "");
  if (!root)
    return Result::failure(r.takeError());
  int64_t version = r.integer(*root, "version", "", 0, INT64_MAX);
  if (!r.failed() && version != Interface::kVersion)
    r.fail("version", "version " + str(version) + "; this distopt reads " +
                          str(Interface::kVersion) +
                          " (recompile the step with this distopt-compile)");
  result.device = r.string(*root, "device", "", "cpu");
  if (result.device != "cpu" && result.device != "cuda")
    r.fail("device", "expected cpu or cuda, got '" + result.device + "'");
  result.worldSize = r.integer(*root, "world_size", "", 1, kMaxWorldSize);
  if (const json::Value *lr = root->get("lr")) {
    std::optional<double> value = lr->getNumber();
    if (!value || !std::isfinite(*value) || *value < 0)
      r.fail("lr", "expected a finite, non-negative number");
    result.lr = value;
  }
  result.model = r.string(*root, "model", "", "");
  if (root->get("grad_accumulation"))
    result.gradAccumulation =
        r.integer(*root, "grad_accumulation", "", 1, int64_t(1) << 30);
  if (root->get("seed"))
    result.seed = static_cast<uint64_t>(
        r.integer(*root, "seed", "", 0, (int64_t(1) << 53)));
  if (const json::Value *collectives =
          r.object(root->get("collectives"), "collectives")) {
    result.collectiveCount =
        r.integer(*collectives, "count", "collectives", 0, INT64_MAX);
    std::string fingerprint =
        r.string(*collectives, "fingerprint", "collectives");
    char *end = nullptr;
    errno = 0;
    unsigned long long value = std::strtoull(fingerprint.c_str(), &end, 0);
    if (!r.failed() &&
        (fingerprint.empty() || *end || errno || fingerprint[0] == '-' ||
         fingerprint[0] == '+' ||
         std::isspace(static_cast<unsigned char>(fingerprint[0]))))
      r.fail("collectives.fingerprint", "expected a number (0x...)");
    result.collectiveFingerprint = value;
  }
  if (const json::Array *groups = r.array(*root, "groups", "", false))
    for (size_t i = 0; i < groups->size() && !r.failed(); ++i)
      result.groups.push_back(readGroup(
          r, (*groups)[i], "groups[" + str(i) + "]", result.worldSize));
  const json::Array *args = r.array(*root, "args", "");
  const json::Array *results = r.array(*root, "results", "");
  if (r.failed())
    return Result::failure(r.takeError());
  for (size_t i = 0; i < args->size(); ++i)
    result.args.push_back(readValue(r, (*args)[i], "args[" + str(i) + "]",
                                    result.worldSize, 0, false));
  for (size_t i = 0; i < results->size(); ++i)
    result.results.push_back(readValue(r, (*results)[i],
                                       "results[" + str(i) + "]",
                                       result.worldSize, args->size(), true));
  if (const json::Array *entries = r.array(*root, "entries", "", false))
    for (size_t i = 0; i < entries->size() && !r.failed(); ++i)
      result.entries.push_back(
          readEntry(r, (*entries)[i], "entries[" + str(i) + "]", result));
  if (r.failed())
    return Result::failure(r.takeError());
  size_t offender = 0;
  for (size_t i = 0; i < result.entries.size(); ++i)
    if (std::string error =
            checkResults(result, result.entries[i].results, &offender);
        !error.empty()) {
      r.fail("entries[" + str(i) + "].results[" + str(offender) + "]", error);
      return Result::failure(r.takeError());
    }
  if (std::string error = checkStateArguments(result, &offender);
      !error.empty()) {
    r.fail("args[" + str(offender) + "]", error);
    return Result::failure(r.takeError());
  }
  if (std::string error = checkResults(result, &offender); !error.empty()) {
    r.fail("results[" + str(offender) + "]", error);
    return Result::failure(r.takeError());
  }
  return result;
}

std::string checkResults(const Interface &interface, size_t *result) {
  return checkResults(interface, interface.results, result);
}

std::string checkResults(const Interface &interface,
                         const std::vector<Value> &results, size_t *result) {
  auto describe = [](const Value &v) {
    std::string text(v.dtype ? v.dtype->name : "?");
    if (!v.isTensor())
      return text + " scalar";
    text += "[";
    for (size_t d = 0; d < v.shape->size(); ++d)
      text += (d ? "x" : "") + str((*v.shape)[d]);
    return text + "]";
  };
  for (size_t k = 0; k < results.size(); ++k) {
    const Value &r = results[k];
    if (r.role == Role::None)
      continue;
    for (size_t i = 0; i < interface.args.size(); ++i) {
      const Value &a = interface.args[i];
      if (a.role != r.role || a.name != r.name)
        continue;
      // The result is written back into the argument's buffer.
      if (a.dtype != r.dtype || a.shape != r.shape) {
        *result = k;
        return "result '" + r.name + "' (" + describe(r) +
               ") replaces argument #" + str(i) + ", which is " + describe(a) +
               ": the two must have one type";
      }
    }
  }
  return "";
}

std::string checkStateArguments(const Interface &interface, size_t *arg) {
  // torch.optim's state keys (and Dion's momentum), which name tensors of
  // the parameter's shape (Dion's right_factor has one of its own).
  static const char *const kKeys[] = {
      "exp_avg",         "exp_avg_sq", "max_exp_avg_sq", "momentum",
      "momentum_buffer", "square_avg", "grad_avg",       "sum"};
  std::map<std::string, int64_t, std::less<>> params;
  for (const Value &v : interface.args) {
    if (v.role != Role::Param && v.role != Role::MainParam)
      continue;
    params.emplace(v.name, v.numel());
    for (const LayoutEntry &e : v.layout)
      params.emplace(e.name, e.numel());
  }
  for (size_t i = 0; i < interface.args.size(); ++i) {
    const Value &v = interface.args[i];
    if (v.role != Role::State || v.savedPerRank() || !v.layout.empty() ||
        !v.isTensor())
      continue;
    size_t dot = v.name.rfind('.');
    std::string_view key = dot == std::string::npos
                               ? std::string_view(v.name)
                               : std::string_view(v.name).substr(dot + 1);
    if (std::find(std::begin(kKeys), std::end(kKeys), key) == std::end(kKeys))
      continue;
    std::string_view param =
        std::string_view(v.name).substr(0, dot == std::string::npos ? 0 : dot);
    auto it = params.find(param);
    std::string what =
        "state argument '" + v.name + "' (" + str(v.numel()) + " elements)";
    *arg = i;
    if (it == params.end())
      return what + " belongs to no parameter '" + std::string(param) +
             "': name it <parameter>." + std::string(key) +
             ", or give it the distopt.layout of the parameters it holds "
             "(and distopt.shard_of, for a ZeRO shard)";
    if (it->second != v.numel())
      return what + " is not the size of parameter '" + std::string(param) +
             "' (" + str(it->second) +
             "): a ZeRO shard needs distopt.layout and distopt.shard_of "
             "(docs/step-abi.md), or a checkpoint would keep one rank's "
             "part as the whole";
  }
  return "";
}

} // namespace distopt::step
