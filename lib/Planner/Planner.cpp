//===- Planner.cpp - search distopt-pipeline's configurations ---*- C++ -*-===//
//
// Every candidate is the real pipeline run on a copy of the step, so what
// it sends and holds is the report's, exactly; the cost model
// (CostModel.cpp) turns that into a time. The search is exhaustive: a
// step's pipeline runs in milliseconds, and the dimensions are few.
//
//===----------------------------------------------------------------------===//

#include "distopt/Planner/Planner.h"
#include "distopt/Dialect/DistOpt/IR/StepABI.h"
#include "distopt/Pipelines/Pipelines.h"
#include "distopt/Transforms/Passes.h"

#include "mlir/IR/Diagnostics.h"
#include "mlir/Pass/PassManager.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/ADT/StringSet.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/xxhash.h"

#include <algorithm>

using namespace mlir;
using namespace mlir::distopt;

namespace {

/// Options as ordered key=value pairs.
using Options = std::vector<std::pair<std::string, std::string>>;

std::string join(const Options &options) {
  std::string text;
  for (auto &[key, value] : options)
    text += (text.empty() ? "" : " ") + key + "=" + value;
  return text;
}

llvm::Error planError(const llvm::Twine &message) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(), message);
}

llvm::Expected<Options> splitOptions(llvm::StringRef text) {
  Options options;
  llvm::SmallVector<llvm::StringRef> tokens;
  llvm::SplitString(text, tokens);
  for (llvm::StringRef token : tokens) {
    auto [key, value] = token.split('=');
    if (key.empty() || value.empty() || !token.contains('='))
      return planError("the options the plan keeps must be key=value, not '" +
                       token + "'");
    options.emplace_back(key.str(), value.str());
  }
  return options;
}

/// The step's entry: the first function with a body.
func::FuncOp findStep(ModuleOp module) {
  for (auto func : module.getOps<func::FuncOp>())
    if (!func.isExternal())
      return func;
  return nullptr;
}

/// Whether the step's gradients are 16-bit floats (their reduction type is
/// then a choice).
bool hasHalfGradients(func::FuncOp func) {
  for (unsigned i = 0, e = func.getNumArguments(); i < e; ++i) {
    if (abi::getArgRole(func, i) != abi::kGrad)
      continue;
    Type element = getElementTypeOrSelf(func.getArgument(i).getType());
    if (element.isBF16() || element.isF16())
      return true;
  }
  return false;
}

/// `value` to 4 significant digits, as distopt-calibrate prints options.
std::string fourDigits(double value) {
  char text[32];
  std::snprintf(text, sizeof(text), "%.4g", value);
  return text;
}

/// One choice along a dimension of the search: options, and whether they
/// change the numbers beyond rounding.
struct Generated {
  Options options;
  bool lossy = false;
};
using Dimension = std::vector<Generated>;

/// The configurations: every combination of one choice per dimension.
std::vector<Generated> generate(const PlanRequest &request, bool halfGradients,
                                const Options &fixed) {
  const Topology &topology = request.topology;
  std::string perNode = std::to_string(topology.ranksPerNode);
  bool nodesOfSeveral = topology.nodes > 1 && topology.ranksPerNode > 1;

  // ZeRO: stage and strategy, and sharding inside nodes (flat stages).
  // ZeRO-3's step leaves the parameters sharded: a training loop gathers
  // them for its forward pass through the step's gather entries, whose
  // time the planner counts.
  Dimension zero = {{{{"zero-stage", "0"}}}};
  for (const char *stage : {"1", "2", "3"})
    for (const char *strategy : {"flat", "greedy"})
      for (bool hybrid : {false, true}) {
        bool flat = llvm::StringRef(strategy) == "flat";
        if ((!flat && (hybrid || llvm::StringRef(stage) == "3")) ||
            (hybrid && !nodesOfSeveral))
          continue;
        Options options = {{"zero-stage", stage}, {"zero-strategy", strategy}};
        if (hybrid)
          options.emplace_back("hybrid-shard-size", perNode);
        if (llvm::StringRef(stage) == "3") {
          options.emplace_back("split-step", "true");
          options.emplace_back("gather-params", "true");
        }
        zero.push_back({std::move(options)});
      }
  Dimension hierarchical = {{}};
  if (nodesOfSeveral)
    hierarchical.push_back({{{"hierarchical-node-size", perNode}}});
  // Buckets: the link model's caps (the world's link), DDP's, larger; none
  // where bucketing is turned off.
  Dimension buckets = {{}};
  if (!llvm::is_contained(fixed, std::make_pair(std::string("bucketize"),
                                                std::string("false")))) {
    const LinkFit &link = request.calibration.world;
    buckets = {{{{"bucket-latency-us", fourDigits(link.latencySeconds * 1e6)},
                 {"bucket-bandwidth-gb-per-s",
                  fourDigits(link.bytesPerSecond * 1e-9)}}},
               {{{"bucket-cap-mb", "25"}}},
               {{{"bucket-cap-mb", "100"}, {"first-bucket-cap-mb", "25"}}}};
  }
  // 16-bit gradients are reduced in f32 unless rounding at every step of
  // the reduction is allowed.
  Dimension reduce = {{}};
  if (halfGradients)
    reduce = {{{{"reduce-dtype", "f32"}}}, {{{"reduce-dtype", "none"}}, true}};
  Dimension powersgd = {
      {}, {{{"powersgd-rank", "4"}}, true}, {{{"powersgd-rank", "16"}}, true}};

  std::vector<Generated> out = {{}};
  for (const Dimension *dimension :
       {&zero, &hierarchical, &buckets, &reduce, &powersgd}) {
    std::vector<Generated> next;
    for (const Generated &prefix : out)
      for (const Generated &choice : *dimension) {
        Generated combined = prefix;
        llvm::append_range(combined.options, choice.options);
        combined.lossy |= choice.lossy;
        next.push_back(std::move(combined));
      }
    out = std::move(next);
  }
  return out;
}

/// `generated` with the request's fixed options in place of its own.
Options withFixed(const Options &generated, const Options &fixed) {
  Options options;
  llvm::StringSet<> fixedKeys;
  for (auto &[key, value] : fixed)
    fixedKeys.insert(key);
  for (auto &entry : generated)
    if (!fixedKeys.contains(entry.first))
      options.push_back(entry);
  options.insert(options.end(), fixed.begin(), fixed.end());
  return options;
}

/// Runs the pipeline with `options` on a copy of `step` and predicts it;
/// a refusal's first error becomes `why`. Returns a hash of the
/// transformed step (0 when refused): options that make the same step are
/// one configuration.
uint64_t evaluate(ModuleOp step, llvm::StringRef stepName,
                  const PlanRequest &request, Candidate &candidate) {
  MLIRContext *context = step.getContext();
  std::string why;
  ScopedDiagnosticHandler capture(context, [&](Diagnostic &diag) {
    if (diag.getSeverity() == DiagnosticSeverity::Error && why.empty())
      why = diag.str();
    return success();
  });
  DistOptPipelineOptions options;
  if (failed(options.parseFromString(candidate.options))) {
    candidate.status = Candidate::Status::Refused;
    candidate.why = "distopt-pipeline does not parse these options";
    return 0;
  }
  OwningOpRef<ModuleOp> copy(cast<ModuleOp>(step->clone()));
  PassManager pm(context);
  buildDistOptPipeline(pm, options);
  if (failed(pm.run(*copy))) {
    candidate.status = Candidate::Status::Refused;
    candidate.why = why.empty() ? "the pipeline failed" : why;
    if (options.zeroStage == 3)
      candidate.why = "ZeRO-3's parameters need gather entries for a "
                      "training loop's forward pass: " +
                      candidate.why;
    return 0;
  }
  auto func = copy->lookupSymbol<func::FuncOp>(stepName);
  if (!func) {
    candidate.status = Candidate::Status::Refused;
    candidate.why = ("the pipeline left no @" + stepName).str();
    return 0;
  }
  StepReport report = analyzeStep(*copy, func);
  for (auto entry : copy->getOps<func::FuncOp>())
    if (auto kind = entry->getAttrOfType<StringAttr>(abi::kEntry);
        kind && kind.getValue() == "gather")
      llvm::append_range(report.events, analyzeStep(*copy, entry).events);
  candidate.prediction = predictStep(
      report, request.topology, request.calibration, request.backwardSeconds);
  std::string text;
  llvm::raw_string_ostream os(text);
  copy->print(os, OpPrintingFlags().elideLargeElementsAttrs());
  return llvm::xxh3_64bits(text);
}

} // namespace

llvm::Expected<Plan> mlir::distopt::planPipeline(ModuleOp step,
                                                 const PlanRequest &request) {
  const Topology &topology = request.topology;
  if (topology.nodes < 1 || topology.ranksPerNode < 1)
    return planError("the topology needs at least one node of one rank");
  // A hand-written step's roles, as the pipeline infers them, say which
  // arguments are gradients.
  OwningOpRef<ModuleOp> base(cast<ModuleOp>(step->clone()));
  PassManager infer(step.getContext());
  infer.addNestedPass<func::FuncOp>(createInferStepRolesPass());
  if (failed(infer.run(*base)))
    return planError("the step's roles cannot be inferred");
  func::FuncOp func = findStep(*base);
  if (!func)
    return planError("the module has no step function to plan");
  auto world = step->getAttrOfType<IntegerAttr>(abi::kWorldSize);
  if (world && world.getInt() != topology.worldSize())
    return planError("the step is for " + llvm::Twine(world.getInt()) +
                     " ranks, the topology has " + llvm::Twine(topology.nodes) +
                     " nodes of " + llvm::Twine(topology.ranksPerNode));
  llvm::Expected<Options> fixed = splitOptions(request.fixedOptions);
  if (!fixed)
    return fixed.takeError();
  {
    DistOptPipelineOptions check;
    if (failed(check.parseFromString(request.fixedOptions)))
      return planError("distopt-pipeline does not take '" +
                       request.fixedOptions + "'");
  }
  if (!(request.calibration.memoryBytesPerSecond > 0) ||
      !(request.calibration.matmulFlopsPerSecond > 0) ||
      !(request.calibration.world.bytesPerSecond > 0))
    return planError("the calibration lacks a link or the update rates");

  Plan plan;
  llvm::StringSet<> seen;
  llvm::DenseMap<uint64_t, std::string> steps; // hash -> first options
  for (const Generated &generated :
       generate(request, hasHalfGradients(func), *fixed)) {
    Candidate candidate;
    candidate.options = join(withFixed(generated.options, *fixed));
    if (!seen.insert(candidate.options).second)
      continue;
    candidate.lossy = generated.lossy;
    if (candidate.lossy && !request.allowLossy) {
      candidate.status = Candidate::Status::Lossy;
      plan.candidates.push_back(std::move(candidate));
      continue;
    }
    uint64_t hash = evaluate(*base, func.getSymName(), request, candidate);
    if (hash != 0) {
      auto [it, first] = steps.try_emplace(hash, candidate.options);
      if (!first) {
        candidate.status = Candidate::Status::Same;
        candidate.why = it->second;
      }
    }
    if (candidate.status == Candidate::Status::Feasible &&
        request.memoryPerRank > 0 &&
        candidate.prediction.memoryBytes > request.memoryPerRank)
      candidate.status = Candidate::Status::OverBudget;
    plan.candidates.push_back(std::move(candidate));
  }
  auto order = [](const Candidate &c) { return static_cast<int>(c.status); };
  std::stable_sort(plan.candidates.begin(), plan.candidates.end(),
                   [&](const Candidate &a, const Candidate &b) {
                     if (order(a) != order(b))
                       return order(a) < order(b);
                     if (a.status != Candidate::Status::Feasible)
                       return false;
                     // Faster first; on a tie, less memory.
                     if (a.prediction.seconds != b.prediction.seconds)
                       return a.prediction.seconds < b.prediction.seconds;
                     return a.prediction.memoryBytes < b.prediction.memoryBytes;
                   });
  if (!plan.candidates.empty() &&
      plan.candidates.front().status == Candidate::Status::Feasible)
    plan.candidates.front().status = Candidate::Status::Chosen;
  return plan;
}

static llvm::StringRef statusName(Candidate::Status status) {
  switch (status) {
  case Candidate::Status::Chosen:
    return "chosen";
  case Candidate::Status::Feasible:
    return "feasible";
  case Candidate::Status::OverBudget:
    return "over-budget";
  case Candidate::Status::Refused:
    return "refused";
  case Candidate::Status::Lossy:
    return "lossy";
  case Candidate::Status::Same:
    return "same-step";
  }
  llvm_unreachable("a candidate's status");
}

llvm::json::Value mlir::distopt::planToJSON(const Plan &plan) {
  llvm::json::Array candidates;
  for (const Candidate &c : plan.candidates) {
    llvm::json::Object entry{{"options", c.options},
                             {"status", statusName(c.status)},
                             {"lossy", c.lossy}};
    if (c.status == Candidate::Status::Refused)
      entry["why"] = c.why;
    if (c.status == Candidate::Status::Same)
      entry["same_step_as"] = c.why;
    if (c.status != Candidate::Status::Refused &&
        c.status != Candidate::Status::Lossy) {
      const Prediction &p = c.prediction;
      entry["predicted_ms"] = p.seconds * 1e3;
      entry["comm_ms"] = p.commSeconds * 1e3;
      entry["exposed_comm_ms"] = p.exposedSeconds * 1e3;
      entry["compute_ms"] = p.computeSeconds * 1e3;
      entry["memory_bytes"] = p.memoryBytes;
      entry["intra_node_bytes"] = p.intraNodeBytes;
      entry["inter_node_bytes"] = p.interNodeBytes;
      entry["collectives"] = p.collectives;
    }
    candidates.push_back(std::move(entry));
  }
  llvm::json::Object out{{"candidates", std::move(candidates)}};
  if (const Candidate *chosen = plan.chosen())
    out["chosen"] = chosen->options;
  return out;
}

static std::string mib(double bytes) {
  return llvm::formatv("{0:F1} MiB", bytes / (1 << 20)).str();
}

void mlir::distopt::printPlan(const Plan &plan, const PlanRequest &request,
                              llvm::raw_ostream &os, size_t top) {
  const Topology &t = request.topology;
  const Calibration &c = request.calibration;
  os << "distopt-plan: " << t.nodes << (t.nodes == 1 ? " node" : " nodes")
     << " of " << t.ranksPerNode << " ranks; model state budget "
     << (request.memoryPerRank > 0 ? mib(request.memoryPerRank)
                                   : std::string("unlimited"))
     << " per rank; "
     << (request.allowLossy ? "lossy choices allowed"
                            : "no lossy choices (--allow-lossy)")
     << "\n";
  auto printLink = [&](const char *name, const LinkFit &link) {
    os << llvm::format("  %-11s %8.1f us + bytes / %.3g GB/s (all_reduce "
                       "over %lld ranks)\n",
                       name, link.latencySeconds * 1e6,
                       link.bytesPerSecond * 1e-9, (long long)link.worldSize);
  };
  printLink("world", c.world);
  if (c.node)
    printLink("in a node", *c.node);
  if (c.acrossNodes)
    printLink("across", *c.acrossNodes);
  os << llvm::format("  updates     %.3g GB/s memory, %.3g GFLOP/s matmul\n",
                     c.memoryBytesPerSecond * 1e-9,
                     c.matmulFlopsPerSecond * 1e-9);
  if (request.backwardSeconds > 0)
    os << llvm::format("  reductions overlap a backward pass of %.3g ms\n",
                       request.backwardSeconds * 1e3);

  if (plan.chosen())
    os << llvm::format("\n  %-4s %10s %9s %9s %11s %11s %11s  %s\n", "#",
                       "step ms", "comm ms", "update ms", "state MiB",
                       "intra MiB", "inter MiB", "options");
  size_t shown = 0;
  for (const Candidate &cand : plan.candidates) {
    if (shown == top || (cand.status != Candidate::Status::Chosen &&
                         cand.status != Candidate::Status::Feasible))
      break;
    const Prediction &p = cand.prediction;
    os << llvm::format("  %-4zu %10.2f %9.2f %9.2f %11.1f %11.1f %11.1f  ",
                       ++shown, p.seconds * 1e3, p.exposedSeconds * 1e3,
                       p.computeSeconds * 1e3, p.memoryBytes / (1 << 20),
                       p.intraNodeBytes / (1 << 20),
                       p.interNodeBytes / (1 << 20))
       << cand.options << "\n";
  }

  // Why the others lost, by reason, with the nearest miss of each.
  const Candidate *chosen = plan.chosen();
  size_t slower = 0, over = 0, refused = 0, lossy = 0, same = 0;
  const Candidate *smallest = nullptr, *firstRefused = nullptr;
  for (const Candidate &cand : plan.candidates) {
    switch (cand.status) {
    case Candidate::Status::Chosen:
      break;
    case Candidate::Status::Feasible:
      ++slower;
      break;
    case Candidate::Status::OverBudget:
      ++over;
      if (!smallest ||
          cand.prediction.memoryBytes < smallest->prediction.memoryBytes)
        smallest = &cand;
      break;
    case Candidate::Status::Refused:
      ++refused;
      if (!firstRefused)
        firstRefused = &cand;
      break;
    case Candidate::Status::Lossy:
      ++lossy;
      break;
    case Candidate::Status::Same:
      ++same;
      break;
    }
  }
  os << "\n" << plan.candidates.size() << " configurations:\n";
  if (slower > 0 && chosen) {
    const Candidate &next = plan.candidates[1];
    os << llvm::format("  %zu slower than the chosen one (the next %.2fx its "
                       "predicted time)\n",
                       slower,
                       chosen->prediction.seconds > 0
                           ? next.prediction.seconds /
                                 chosen->prediction.seconds
                           : 1.0);
  }
  if (over > 0)
    os << "  " << over << " over the budget (the smallest holds "
       << mib(smallest->prediction.memoryBytes) << ": " << smallest->options
       << ")\n";
  if (refused > 0)
    os << "  " << refused << " refused by distopt-pipeline (as '"
       << firstRefused->options << "': " << firstRefused->why << ")\n";
  if (same > 0)
    os << "  " << same
       << " make the same step as another (options that change nothing "
          "here)\n";
  if (lossy > 0)
    os << "  " << lossy
       << " lossy (PowerSGD, or 16-bit reductions), not allowed without "
          "--allow-lossy\n";
  if (chosen)
    os << "\npipeline: " << chosen->options << "\n";
  else
    os << "\n" << describeNoChoice(plan) << "\n";
}

std::string mlir::distopt::describeNoChoice(const Plan &plan) {
  bool overBudget = llvm::any_of(plan.candidates, [](const Candidate &c) {
    return c.status == Candidate::Status::OverBudget;
  });
  if (overBudget)
    return "nothing fits: no configuration holds its model state within the "
           "budget";
  return "nothing to choose: distopt-pipeline refused every configuration "
         "(with the options kept), or every one is lossy";
}
