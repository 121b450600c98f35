//===- WriteInterface.cpp - a compiled step's interface written as JSON ---===//
//
// The interface's writer, beside StepInterface.cpp's reader and tables.
// Standard C++ only: the host step library in runtime/ compiles this file.
//
//===----------------------------------------------------------------------===//

#include "distopt/StepInterface/StepInterface.h"

#include <cinttypes>
#include <cstdio>

namespace distopt::step {

json::Value toJSON(const Interface &interface) {
  auto value = [](const Value &v) {
    json::Value o = json::Object{};
    if (v.role != Role::None)
      o.set("role", roleName(v.role));
    if (!v.name.empty())
      o.set("name", v.name);
    o.set("dtype", v.dtype ? v.dtype->name : "");
    if (v.shape)
      o.set("shape", *v.shape);
    if (v.init != Init::Zeros)
      o.set("init", initName(v.init));
    if (v.perRank)
      o.set("per_rank", true);
    if (v.rankMean)
      o.set("rank_mean", true);
    if (v.shardOf)
      o.set("shard_of", v.shardOf);
    if (v.inPlaceArg)
      o.set("in_place_arg", *v.inPlaceArg);
    if (v.initialValue)
      o.set("value", *v.initialValue);
    if (!v.layout.empty()) {
      json::Array entries;
      for (const LayoutEntry &e : v.layout) {
        json::Value entry = json::Object{
            {"name", e.name}, {"offset", e.offset}, {"shape", e.shape}};
        if (e.owner)
          entry.set("owner", *e.owner);
        entries.push_back(std::move(entry));
      }
      o.set("layout", std::move(entries));
    }
    return o;
  };
  auto values = [&](const std::vector<Value> &list) {
    json::Array out;
    for (const Value &v : list)
      out.push_back(value(v));
    return out;
  };
  char fingerprint[24];
  std::snprintf(fingerprint, sizeof(fingerprint), "0x%016" PRIx64,
                interface.collectiveFingerprint);
  json::Value root = json::Object{{"version", Interface::kVersion},
                                  {"device", interface.device},
                                  {"world_size", interface.worldSize}};
  if (!interface.model.empty())
    root.set("model", interface.model);
  if (interface.lr)
    root.set("lr", *interface.lr);
  if (interface.seed)
    root.set("seed", static_cast<int64_t>(*interface.seed));
  if (interface.gradAccumulation != 1)
    root.set("grad_accumulation", interface.gradAccumulation);
  root.set("collectives",
           json::Object{{"count", interface.collectiveCount},
                        {"fingerprint", std::string(fingerprint)}});
  root.set("args", values(interface.args));
  root.set("results", values(interface.results));
  if (!interface.entries.empty()) {
    json::Array entries;
    for (const Entry &e : interface.entries) {
      json::Value entry = json::Object{{"name", e.name},
                                       {"kind", entryKindName(e.kind)},
                                       {"results", values(e.results)}};
      if (e.kind == Entry::Kind::Reduce)
        entry.set("reduces", e.reduces);
      if (e.kind == Entry::Kind::Gather)
        entry.set("gathers", e.gathers);
      entries.push_back(std::move(entry));
    }
    root.set("entries", std::move(entries));
  }
  if (!interface.groups.empty()) {
    json::Array groups;
    for (const ProcessGroup &g : interface.groups) {
      json::Array color, key;
      for (int64_t c : g.color)
        color.push_back(c);
      for (int64_t k : g.key)
        key.push_back(k);
      groups.push_back(json::Object{{"name", g.name},
                                    {"size", g.size},
                                    {"color", std::move(color)},
                                    {"key", std::move(key)}});
    }
    root.set("groups", std::move(groups));
  }
  return root;
}

} // namespace distopt::step
