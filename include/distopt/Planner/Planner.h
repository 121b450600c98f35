//===- Planner.h - choose distopt-pipeline's options ------------*- C++ -*-===//
//
// The planner behind distopt-plan and --pipeline=auto: for a step (as the
// importer makes it, untransformed), a topology of nodes and ranks, a
// memory budget per rank and calibrated links and rates, it runs
// distopt-pipeline with each candidate configuration (ZeRO stage and
// strategy, hybrid shard size, hierarchical all-reduce, bucket cap,
// reduction dtype, PowerSGD rank), reads what the transformed step sends
// and holds (StepReport.h), predicts each one's time with the cost model
// below and picks the fastest within the budget. docs/choosing-a-pipeline.md
// gives the formulas.
//
//===----------------------------------------------------------------------===//

#ifndef DISTOPT_PLANNER_PLANNER_H
#define DISTOPT_PLANNER_PLANNER_H

#include "distopt/Transforms/StepReport.h"

#include "mlir/IR/BuiltinOps.h"
#include "llvm/Support/Error.h"
#include "llvm/Support/JSON.h"

#include <map>
#include <optional>
#include <string>
#include <vector>

namespace mlir::distopt {

/// A link's all_reduce fit (distopt-calibrate): an all_reduce of b bytes
/// over the `worldSize` ranks it was measured on takes latency + b /
/// bandwidth.
struct LinkFit {
  double latencySeconds = 0;
  double bytesPerSecond = 0;
  int64_t worldSize = 0;
};

/// What distopt-calibrate measured (docs/choosing-a-pipeline.md gives the
/// file's fields).
struct Calibration {
  /// Measured on the whole world: across nodes where it spans several.
  LinkFit world;
  /// Measured inside each node at once (--ranks-per-node), for the groups
  /// that stay inside nodes; without it the world's fit serves them too.
  std::optional<LinkFit> node;
  /// Measured over one rank of each node, the R such groups at once
  /// (--ranks-per-node R > 1), for groups whose parts hold at most one
  /// rank of a node (hybrid sharding's replicas, the hierarchical
  /// all-reduce's second stage).
  std::optional<LinkFit> acrossNodes;
  /// Per rank, while every rank runs: bytes an update loop reads and
  /// writes per second, and f32 matmul FLOPs per second.
  double memoryBytesPerSecond = 0;
  double matmulFlopsPerSecond = 0;
};

/// Reads a calibration: distopt-calibrate --json's output (one link, or
/// with --ranks-per-node both, and with --compute the rates).
llvm::Expected<Calibration> readCalibration(llvm::StringRef text);

/// readCalibration of a file's text, the file named in its errors.
llvm::Expected<Calibration> readCalibrationFile(llvm::StringRef path);

/// Where the ranks run: node k holds ranks k R .. k R + R - 1.
struct Topology {
  int64_t nodes = 1;
  int64_t ranksPerNode = 1;
  int64_t worldSize() const { return nodes * ranksPerNode; }
};

/// What the cost model predicts for one transformed step.
struct Prediction {
  /// The step's time after backward: its communication (or, with a
  /// backward window, what of it backward does not hide) and its updates;
  /// under ZeRO-3 also the parameters' all-gather before forward (the
  /// step's gather entries, --distopt-split-step's gather-params).
  double seconds = 0;
  double commSeconds = 0;    // every collective, back to back
  double exposedSeconds = 0; // the part of commSeconds not hidden
  double computeSeconds = 0; // updates, PowerSGD's products, bucket copies
  /// Model state per rank (parameters, reduced gradients, optimizer state
  /// with main parameters): the report's total.
  double memoryBytes = 0;
  /// Bytes each rank sends, inside nodes and across them.
  double intraNodeBytes = 0, interNodeBytes = 0;
  int64_t collectives = 0;
};

/// Predicts the step `report` describes on `topology` with `calibration`.
/// With `backwardSeconds` > 0 the gradients' reductions start as backward
/// makes them, in program order, and only what runs past its end counts.
Prediction predictStep(const StepReport &report, const Topology &topology,
                       const Calibration &calibration,
                       double backwardSeconds = 0);

struct PlanRequest {
  Topology topology;
  Calibration calibration;
  /// Bytes of model state one rank may hold; 0: no limit.
  double memoryPerRank = 0;
  /// Allow what changes the numbers beyond rounding: PowerSGD, and
  /// reducing 16-bit gradients in their own type rather than f32.
  bool allowLossy = false;
  double backwardSeconds = 0;
  /// distopt-pipeline options every candidate keeps ("backend=mpi
  /// split-step=true", or "zero-stage=3" to search the rest).
  std::string fixedOptions;
};

struct Candidate {
  /// Same: the pipeline makes the same step as an earlier candidate's
  /// options (`why` holds them), as bucket caps do where nothing is
  /// bucketed.
  enum class Status { Chosen, Feasible, OverBudget, Refused, Lossy, Same };
  std::string options; // distopt-pipeline's, as a string it parses
  Status status = Status::Feasible;
  bool lossy = false;
  std::string why; // the pipeline's error (Refused), the step's twin (Same)
  Prediction prediction;
};

struct Plan {
  /// Every candidate: the chosen one first, then the feasible ones by
  /// predicted time, then the rest.
  std::vector<Candidate> candidates;
  const Candidate *chosen() const {
    return !candidates.empty() &&
                   candidates.front().status == Candidate::Status::Chosen
               ? &candidates.front()
               : nullptr;
  }
};

/// Searches the configurations for `step` (untransformed, with the world
/// size of `request.topology`). Fails, with an error, when the request is
/// malformed (a topology other than the step's world, bad fixed options);
/// a plan with nothing chosen means nothing fits the budget.
llvm::Expected<Plan> planPipeline(ModuleOp step, const PlanRequest &request);

/// Why `plan` chose nothing: no candidate within the budget, or none that
/// distopt-pipeline accepts.
std::string describeNoChoice(const Plan &plan);

/// The plan as JSON (every candidate with its prediction), for benchmarks.
llvm::json::Value planToJSON(const Plan &plan);

/// The plan as a table: the best `top` candidates, why the others lost,
/// and the chosen options.
void printPlan(const Plan &plan, const PlanRequest &request,
               llvm::raw_ostream &os, size_t top = 5);

/// Whether distopt-pipeline options ask the planner (--pipeline=auto):
/// "auto" alone or followed by options every candidate keeps, which it
/// returns ("" for "auto" alone).
std::optional<std::string> getPlannedOptions(llvm::StringRef pipeline);

/// Parses "8GiB", "512MiB", "1.5GB", "1000000" (bytes).
std::optional<double> parseByteSize(llvm::StringRef text);

} // namespace mlir::distopt

#endif // DISTOPT_PLANNER_PLANNER_H
