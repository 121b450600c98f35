//===- StepInterface.cpp - a compiled step's interface as JSON --*- C++ -*-===//

#include "distopt/StepInterface/StepInterface.h"

#include "distopt/Support/JSON.h"
#include "distopt/Support/Limits.h"
#include "distopt_rt.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/FormatVariadic.h"

#include <cmath>

using namespace llvm;

namespace distopt::step {

namespace {

constexpr std::pair<Role, StringLiteral> kRoles[] = {
    {Role::Param, "param"},
    {Role::Grad, "grad"},
    {Role::MainParam, "main_param"},
    {Role::State, "state"},
    {Role::LearningRate, "lr"},
    {Role::Step, "step"},
    {Role::Loss, "loss"},
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

constexpr std::pair<Init, StringLiteral> kInits[] = {
    {Init::Zeros, "zeros"},
    {Init::Randn, "randn"},
    {Init::RandnEachStep, "randn_each_step"},
};

/// The path of `key` in the object at `path` ("" is the root).
std::string child(const Twine &path, StringRef key) {
  std::string base = path.str();
  return base.empty() ? key.str() : base + "." + key.str();
}

/// Reads JSON with a path to every value, keeping the first error: the
/// reading goes on with defaults, and the caller asks for the error once.
class Reader {
public:
  /// Records an error at `path` (the first one wins).
  void fail(const Twine &path, const Twine &message) {
    if (error.empty())
      error = (path + ": " + message).str();
  }
  bool failed() const { return !error.empty(); }
  Error takeError() {
    return createStringError(inconvertibleErrorCode(),
                             "step interface: " + error);
  }

  const json::Object *object(const json::Value *value, const Twine &path) {
    const json::Object *o = value ? value->getAsObject() : nullptr;
    if (!o)
      fail(path, value ? "expected an object" : "missing");
    return o;
  }
  const json::Array *array(const json::Object &o, StringRef key,
                           const Twine &path, bool required = true) {
    const json::Value *value = o.get(key);
    if (!value) {
      if (required)
        fail(child(path, key), "missing");
      return nullptr;
    }
    const json::Array *a = value->getAsArray();
    if (!a)
      fail(child(path, key), "expected an array");
    return a;
  }
  /// An integer in [lo, hi]; `fallback` when the key is absent (if given).
  int64_t integer(const json::Object &o, StringRef key, const Twine &path,
                  int64_t lo, int64_t hi,
                  std::optional<int64_t> fallback = std::nullopt) {
    const json::Value *value = o.get(key);
    if (!value) {
      if (!fallback)
        fail(child(path, key), "missing");
      return fallback.value_or(lo);
    }
    return integer(*value, child(path, key), lo, hi);
  }
  int64_t integer(const json::Value &value, const Twine &path, int64_t lo,
                  int64_t hi) {
    std::optional<int64_t> v = value.getAsInteger();
    if (!v || *v < lo || *v > hi) {
      fail(path, "expected an integer from " + Twine(lo) + " to " + Twine(hi));
      return lo;
    }
    return *v;
  }
  std::string string(const json::Object &o, StringRef key, const Twine &path,
                     std::optional<StringRef> fallback = std::nullopt) {
    const json::Value *value = o.get(key);
    if (!value) {
      if (!fallback)
        fail(child(path, key), "missing");
      return fallback.value_or("").str();
    }
    std::optional<StringRef> s = value->getAsString();
    if (!s)
      fail(child(path, key), "expected a string");
    return s.value_or("").str();
  }
  bool boolean(const json::Object &o, StringRef key, const Twine &path) {
    const json::Value *value = o.get(key);
    if (!value)
      return false;
    std::optional<bool> b = value->getAsBoolean();
    if (!b)
      fail(child(path, key), "expected true or false");
    return b.value_or(false);
  }
  /// A shape: non-negative dimensions with at most kMaxElements elements.
  std::vector<int64_t> shape(const json::Array &dims, const Twine &path) {
    std::vector<int64_t> out;
    for (auto [i, d] : llvm::enumerate(dims))
      out.push_back(integer(d, path + "[" + Twine(i) + "]", 0, kMaxElements));
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
  const json::Object *o = r.object(&json, path);
  if (!o)
    return v;
  std::string role = r.string(*o, "role", path, StringRef());
  if (!role.empty()) {
    if (std::optional<Role> parsed = parseRole(role))
      v.role = *parsed;
    else
      r.fail(path + ".role", "unknown role '" + role + "'");
  }
  v.name = r.string(*o, "name", path, StringRef());
  std::string dtype = r.string(*o, "dtype", path);
  v.dtype = lookupDType(dtype);
  if (!v.dtype && !r.failed())
    r.fail(path + ".dtype", "unknown element type '" + dtype + "'");
  if (const json::Array *dims = r.array(*o, "shape", path, false))
    v.shape = r.shape(*dims, path + ".shape");
  std::string init = r.string(*o, "init", path, StringRef("zeros"));
  auto knownInit = llvm::find_if(
      kInits, [&](const auto &entry) { return entry.second == init; });
  if (knownInit == std::end(kInits))
    r.fail(path + ".init", "unknown init '" + init + "'");
  else
    v.init = knownInit->first;
  v.perRank = r.boolean(*o, "per_rank", path);
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
    for (auto [i, e] : llvm::enumerate(*entries)) {
      std::string at = path + ".layout[" + std::to_string(i) + "]";
      const json::Object *entry = r.object(&e, at);
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
  if (r.failed())
    return v;

  // Consistency: what a driver computes from the value must stay inside it.
  if (!v.isTensor()) {
    if (!v.layout.empty() || v.shardOf || v.perRank)
      r.fail(path, "a scalar has no layout, shard or per-rank copies");
    return v;
  }
  if (v.role == Role::LearningRate || v.role == Role::Step)
    r.fail(path + ".shape", "the " + roleName(v.role) + " is a scalar");
  if (v.shardOf) {
    if (v.layout.empty())
      r.fail(path + ".shard_of", "a flat shard needs its layout");
    else if (v.shardOf != v.numel() * worldSize)
      r.fail(path + ".shard_of", Twine(v.shardOf) + " elements in all, but " +
                                     Twine(worldSize) + " ranks of " +
                                     Twine(v.numel()) + " elements hold " +
                                     Twine(v.numel() * worldSize));
  }
  // A flat shard's entries lie in the whole buffer, the others' in this one;
  // entries of one owner (or without one) do not overlap.
  int64_t extent = v.shardOf ? v.shardOf : v.numel();
  std::vector<std::tuple<int64_t, int64_t, int64_t>> spans;
  for (auto [i, e] : llvm::enumerate(v.layout)) {
    std::string at = path + ".layout[" + std::to_string(i) + "]";
    if (v.shardOf && e.owner)
      r.fail(at + ".owner", "a flat shard's entries have no owner");
    if (e.offset > extent || e.numel() > extent - e.offset)
      r.fail(at, "elements [" + Twine(e.offset) + ", " +
                     Twine(e.offset + e.numel()) + ") lie outside the " +
                     Twine(extent) + " elements of the buffer");
    spans.push_back({e.owner.value_or(-1), e.offset, e.offset + e.numel()});
  }
  llvm::sort(spans);
  for (size_t i = 1; i < spans.size(); ++i)
    if (std::get<0>(spans[i]) == std::get<0>(spans[i - 1]) &&
        std::get<1>(spans[i]) < std::get<2>(spans[i - 1]))
      r.fail(path + ".layout",
             "two entries overlap at element " + Twine(std::get<1>(spans[i])));
  return v;
}

} // namespace

StringRef roleName(Role role) {
  for (const auto &[r, name] : kRoles)
    if (r == role)
      return name;
  return "";
}

std::optional<Role> parseRole(StringRef name) {
  for (const auto &[role, spelling] : kRoles)
    if (spelling == name)
      return role;
  return std::nullopt;
}

ArrayRef<DType> dtypes() { return kDTypes; }

const DType *lookupDType(StringRef name) {
  for (const DType &d : kDTypes)
    if (d.name == name)
      return &d;
  return nullptr;
}

StringRef initName(Init init) {
  for (const auto &[i, name] : kInits)
    if (i == init)
      return name;
  return "zeros";
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

Expected<Interface> parseInterface(StringRef text) {
  Expected<json::Value> parsed = parseJSON(text);
  if (!parsed)
    return createStringError(inconvertibleErrorCode(),
                             "step interface: malformed JSON: " +
                                 toString(parsed.takeError()));
  Reader r;
  Interface result;
  const json::Object *root = r.object(&*parsed, "");
  if (!root)
    return r.takeError();
  int64_t version = r.integer(*root, "version", "", 0, INT64_MAX);
  if (!r.failed() && version != Interface::kVersion)
    r.fail("version", "version " + Twine(version) + "; this distopt reads " +
                          Twine(Interface::kVersion) +
                          " (recompile the step with this distopt-compile)");
  result.device = r.string(*root, "device", "", StringRef("cpu"));
  if (result.device != "cpu" && result.device != "cuda")
    r.fail("device", "expected cpu or cuda, got '" + result.device + "'");
  result.worldSize = r.integer(*root, "world_size", "", 1, kMaxWorldSize);
  if (const json::Value *lr = root->get("lr")) {
    std::optional<double> value = lr->getAsNumber();
    if (!value || !std::isfinite(*value) || *value < 0)
      r.fail("lr", "expected a finite, non-negative number");
    result.lr = value;
  }
  result.model = r.string(*root, "model", "", StringRef());
  if (const json::Object *collectives =
          r.object(root->get("collectives"), "collectives")) {
    result.collectiveCount =
        r.integer(*collectives, "count", "collectives", 0, INT64_MAX);
    std::string fingerprint =
        r.string(*collectives, "fingerprint", "collectives");
    if (!r.failed() &&
        StringRef(fingerprint).getAsInteger(0, result.collectiveFingerprint))
      r.fail("collectives.fingerprint", "expected a number (0x...)");
  }
  const json::Array *args = r.array(*root, "args", "");
  const json::Array *results = r.array(*root, "results", "");
  if (r.failed())
    return r.takeError();
  for (auto [i, v] : llvm::enumerate(*args))
    result.args.push_back(readValue(r, v, "args[" + std::to_string(i) + "]",
                                    result.worldSize, 0, false));
  for (auto [i, v] : llvm::enumerate(*results))
    result.results.push_back(readValue(r, v,
                                       "results[" + std::to_string(i) + "]",
                                       result.worldSize, args->size(), true));
  if (r.failed())
    return r.takeError();
  return result;
}

json::Value toJSON(const Interface &interface) {
  auto value = [](const Value &v) {
    json::Object o{{"dtype", v.dtype ? StringRef(v.dtype->name) : ""}};
    if (v.role != Role::None)
      o["role"] = roleName(v.role);
    if (!v.name.empty())
      o["name"] = v.name;
    if (v.shape)
      o["shape"] = json::Array(*v.shape);
    if (v.init != Init::Zeros)
      o["init"] = initName(v.init);
    if (v.perRank)
      o["per_rank"] = true;
    if (v.shardOf)
      o["shard_of"] = v.shardOf;
    if (v.inPlaceArg)
      o["in_place_arg"] = *v.inPlaceArg;
    if (!v.layout.empty()) {
      json::Array entries;
      for (const LayoutEntry &e : v.layout) {
        json::Object entry{{"name", e.name},
                           {"offset", e.offset},
                           {"shape", json::Array(e.shape)}};
        if (e.owner)
          entry["owner"] = *e.owner;
        entries.push_back(std::move(entry));
      }
      o["layout"] = std::move(entries);
    }
    return o;
  };
  json::Array args, results;
  for (const Value &v : interface.args)
    args.push_back(value(v));
  for (const Value &v : interface.results)
    results.push_back(value(v));
  json::Object root{
      {"version", Interface::kVersion},
      {"device", interface.device},
      {"world_size", interface.worldSize},
      {"args", std::move(args)},
      {"results", std::move(results)},
      {"collectives",
       json::Object{
           {"count", interface.collectiveCount},
           {"fingerprint",
            formatv("{0:x16}", interface.collectiveFingerprint).str()}}}};
  if (interface.lr)
    root["lr"] = *interface.lr;
  if (!interface.model.empty())
    root["model"] = interface.model;
  return root;
}

} // namespace distopt::step
