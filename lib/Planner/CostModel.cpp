//===- CostModel.cpp - predict a transformed step's time --------*- C++ -*-===//
//
// A collective over a group of n ranks that sends s bytes per rank (ring
// algorithms, StepReport.h) takes
//
//   latency x (n - 1) / (n_c - 1)  +  s x k / (bandwidth x 2 (n_c - 1) / n_c)
//
// (a broadcast or a reduce: latency / (2 (n_c - 1)) for each of its
// chain's steps, and s its busiest rank's bytes, about the payload)
// on the link its ring crosses: the fit distopt-calibrate made of an
// all_reduce over n_c ranks (an all_reduce of b bytes sends 2 (n_c - 1) /
// n_c b per rank, so the second factor is the wire's rate). A group whose
// rings each stay inside a node takes the fit measured inside nodes (the
// world's where there is none, or where the group is the world); one whose
// rings leave nodes takes the fit measured over one rank of each node (all
// such groups at once) where its parts are like those, else the world's,
// measured across them, k times slower where k rings leave the busiest
// node at once and share its link.
// Updates take their bytes at the measured memory rate and their FLOPs
// (whole-matrix updates, PowerSGD's products) at the measured matmul rate;
// ZeRO's owners run theirs at once, the busiest setting the time.
//
//===----------------------------------------------------------------------===//

#include "distopt/Planner/Planner.h"

#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/MemoryBuffer.h"

#include <algorithm>
#include <map>
#include <set>

using namespace mlir;
using namespace mlir::distopt;

static llvm::Error calibrationError(const llvm::Twine &message) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                 "calibration: " + message);
}

/// A link from an object with latency_us, bandwidth_gb_per_s, world_size
/// and, where distopt-calibrate wrote them, its samples.
static llvm::Expected<LinkFit> readLink(const llvm::json::Object &object,
                                        llvm::StringRef where) {
  std::optional<double> latency = object.getNumber("latency_us");
  std::optional<double> bandwidth = object.getNumber("bandwidth_gb_per_s");
  std::optional<int64_t> world = object.getInteger("world_size");
  if (!latency || !bandwidth || !(*latency >= 0) || !(*bandwidth > 0))
    return calibrationError(where +
                            " needs latency_us (>= 0) and "
                            "bandwidth_gb_per_s (> 0), as distopt-calibrate "
                            "--json prints them");
  // (The ranks it was measured on scale it to other groups.)
  if (!world || *world < 1)
    return calibrationError(where + " needs world_size (>= 1): the ranks "
                                    "its all_reduce was measured on");
  LinkFit fit{*latency * 1e-6, *bandwidth * 1e9, *world};
  // The bandwidth of the sizes from 1 MiB up, where the samples have
  // them: the slope of their times (least squares). distopt-calibrate's
  // fit weighs every size's relative error alike, which suits bucket
  // sizes; a step's time is mostly its large collectives, and on a shaped
  // TCP link the small sizes' noise would set their rate.
  double n = 0, sx = 0, sy = 0, sxx = 0, sxy = 0;
  if (const llvm::json::Array *samples = object.getArray("samples"))
    for (const llvm::json::Value &sample : *samples) {
      const llvm::json::Object *entry = sample.getAsObject();
      std::optional<double> bytes =
          entry ? entry->getNumber("bytes") : std::nullopt;
      std::optional<double> us = entry ? entry->getNumber("us") : std::nullopt;
      if (!bytes || !us || *bytes < (1 << 20) || !(*us > 0))
        continue;
      n += 1;
      sx += *bytes;
      sy += *us * 1e-6;
      sxx += *bytes * *bytes;
      sxy += *bytes * *us * 1e-6;
    }
  double det = n * sxx - sx * sx;
  if (n >= 2 && det > 0) {
    double perByte = (n * sxy - sx * sy) / det;
    if (perByte > 0)
      fit.bytesPerSecond = 1 / perByte;
  }
  return fit;
}

llvm::Expected<Calibration>
mlir::distopt::readCalibration(llvm::StringRef text) {
  llvm::Expected<llvm::json::Value> parsed = llvm::json::parse(text);
  if (!parsed)
    return calibrationError("not JSON: " + llvm::toString(parsed.takeError()));
  const llvm::json::Object *root = parsed->getAsObject();
  if (!root)
    return calibrationError("expected an object");
  llvm::Expected<LinkFit> world = readLink(*root, "the top level");
  if (!world)
    return world.takeError();
  Calibration calibration;
  calibration.world = *world;
  // With --ranks-per-node R below the world size, intra_node measured each
  // node's ranks.
  if (const llvm::json::Object *intra = root->getObject("intra_node")) {
    llvm::Expected<LinkFit> link = readLink(*intra, "intra_node");
    if (!link)
      return link.takeError();
    calibration.node = *link;
  }
  if (const llvm::json::Object *across = root->getObject("across_nodes")) {
    llvm::Expected<LinkFit> link = readLink(*across, "across_nodes");
    if (!link)
      return link.takeError();
    calibration.acrossNodes = *link;
  }
  if (calibration.node && calibration.node->worldSize >= world->worldSize &&
      world->worldSize > 0)
    return calibrationError("intra_node must be measured on fewer ranks "
                            "than the world");
  std::optional<double> memory = root->getNumber("memory_gb_per_s");
  std::optional<double> matmul = root->getNumber("matmul_gflops");
  if (!memory || !matmul || !(*memory > 0) || !(*matmul > 0))
    return calibrationError(
        "needs memory_gb_per_s and matmul_gflops (> 0): the rates updates "
        "run at, from distopt-calibrate --compute --json");
  calibration.memoryBytesPerSecond = *memory * 1e9;
  calibration.matmulFlopsPerSecond = *matmul * 1e9;
  return calibration;
}

llvm::Expected<Calibration>
mlir::distopt::readCalibrationFile(llvm::StringRef path) {
  auto text = llvm::MemoryBuffer::getFile(path);
  if (!text)
    return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                   "cannot read " + path + ": " +
                                       text.getError().message());
  llvm::Expected<Calibration> calibration =
      readCalibration((*text)->getBuffer());
  if (!calibration)
    return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                   path + ": " +
                                       llvm::toString(calibration.takeError()));
  return calibration;
}

std::optional<std::string>
mlir::distopt::getPlannedOptions(llvm::StringRef pipeline) {
  pipeline = pipeline.trim();
  if (pipeline != "auto" && !pipeline.starts_with("auto "))
    return std::nullopt;
  return pipeline.drop_front(4).trim().str();
}

std::optional<double> mlir::distopt::parseByteSize(llvm::StringRef text) {
  text = text.trim();
  static const std::pair<llvm::StringRef, double> units[] = {
      {"KiB", 1024.0},
      {"MiB", 1024.0 * 1024},
      {"GiB", 1024.0 * 1024 * 1024},
      {"TiB", 1024.0 * 1024 * 1024 * 1024},
      {"KB", 1e3},
      {"MB", 1e6},
      {"GB", 1e9},
      {"TB", 1e12},
      {"B", 1.0}};
  double scale = 1;
  for (auto [suffix, factor] : units)
    if (text.consume_back(suffix)) {
      scale = factor;
      break;
    }
  double value;
  if (text.trim().getAsDouble(value) || !(value >= 0) || value > 1e18)
    return std::nullopt;
  return value * scale;
}

namespace {

/// The link a group's rings run on, and how many of them share it.
struct LinkUse {
  const LinkFit *fit = nullptr;
  bool acrossNodes = false;
  double sharing = 1;
};

LinkUse linkOf(ProcessGroupOp group, const Topology &topology,
               const Calibration &calibration) {
  int64_t world = topology.worldSize();
  // Inside one node: the node's fit for groups smaller than the world.
  bool part = group && group.getSize() < world;
  LinkUse use{part && calibration.node ? &*calibration.node
                                       : &calibration.world,
              false, 1};
  if (topology.nodes <= 1)
    return use;
  // Each part's ring, in key order; the ring edges that leave a node.
  std::map<int64_t, std::map<int64_t, int64_t>> rings; // color -> key -> rank
  if (group) {
    ProcessGroupOp::Membership membership = group.getMembership();
    if (static_cast<int64_t>(membership.color.size()) == world)
      for (int64_t rank = 0; rank < world; ++rank)
        rings[membership.color[rank]][membership.key[rank]] = rank;
  }
  if (rings.empty()) // (undeclared: the world, in rank order)
    for (int64_t rank = 0; rank < world; ++rank)
      rings[0][rank] = rank;
  std::vector<int64_t> leaving(topology.nodes, 0);
  bool onePerNode = true; // every part holds at most one rank of a node
  for (auto &[color, ring] : rings) {
    std::set<int64_t> nodesOfPart;
    for (auto &[key, rank] : ring)
      onePerNode &= nodesOfPart.insert(rank / topology.ranksPerNode).second;
    if (ring.size() < 2)
      continue;
    std::vector<int64_t> ranks;
    for (auto &[key, rank] : ring)
      ranks.push_back(rank);
    for (size_t i = 0; i < ranks.size(); ++i) {
      int64_t from = ranks[i] / topology.ranksPerNode;
      int64_t to = ranks[(i + 1) % ranks.size()] / topology.ranksPerNode;
      if (from != to && from < topology.nodes)
        ++leaving[from];
    }
  }
  int64_t busiest = *std::max_element(leaving.begin(), leaving.end());
  if (busiest == 0)
    return use;
  use.acrossNodes = true;
  // The groups distopt-calibrate measured across nodes, all at once: their
  // sharing of the links is in the fit.
  if (onePerNode && calibration.acrossNodes) {
    use.fit = &*calibration.acrossNodes;
    return use;
  }
  use.fit = &calibration.world;
  use.sharing = static_cast<double>(busiest);
  return use;
}

/// Seconds of `event`'s collectives over `n` ranks: a ring's 2 (n - 1)
/// steps of latency and `sent` bytes on every rank, or a chain's steps and
/// its busiest rank's bytes.
double collectiveSeconds(const LinkUse &link, int64_t n,
                         const CommEvent &event) {
  if (n <= 1)
    return 0;
  const LinkFit &fit = *link.fit;
  int64_t measured = std::max<int64_t>(fit.worldSize, 2);
  double perStep =
      fit.latencySeconds / (2.0 * static_cast<double>(measured - 1));
  double steps = event.steps > 0 ? static_cast<double>(event.steps)
                                 : 2.0 * static_cast<double>(n - 1);
  double bytes = event.steps > 0 ? event.busiestSent : event.sent;
  double wire = fit.bytesPerSecond * 2.0 * static_cast<double>(measured - 1) /
                static_cast<double>(measured);
  return static_cast<double>(event.count) * perStep * steps +
         bytes * link.sharing / wire;
}

} // namespace

Prediction mlir::distopt::predictStep(const StepReport &report,
                                      const Topology &topology,
                                      const Calibration &calibration,
                                      double backwardSeconds) {
  Prediction prediction;
  prediction.memoryBytes = static_cast<double>(
      report.paramBytes + report.gradBytes + report.stateBytes);

  // Communication: each event on its group's link; the reductions also as
  // backward releases them (ready in proportion to the bytes before them).
  double reductionBytes = 0;
  for (const CommEvent &event : report.events)
    if (event.reducesGradients)
      reductionBytes += event.sent;
  double released = 0, reductionsEnd = 0, afterwards = 0;
  std::map<Operation *, LinkUse> links;
  for (const CommEvent &event : report.events) {
    ProcessGroupOp group = event.group; // (ops' accessors are not const)
    auto [it, inserted] = links.try_emplace(group.getOperation());
    if (inserted)
      it->second = linkOf(group, topology, calibration);
    const LinkUse &link = it->second;
    int64_t n = group ? group.getSize() : topology.worldSize();
    double seconds = collectiveSeconds(link, n, event);
    prediction.commSeconds += seconds;
    prediction.collectives += event.count;
    (link.acrossNodes ? prediction.interNodeBytes
                      : prediction.intraNodeBytes) += n > 1 ? event.sent : 0;
    if (!event.reducesGradients) {
      afterwards += seconds;
      continue;
    }
    released += event.sent;
    double ready = reductionBytes > 0
                       ? backwardSeconds * released / reductionBytes
                       : backwardSeconds;
    reductionsEnd = std::max(reductionsEnd, ready) + seconds;
  }
  prediction.exposedSeconds =
      std::max(0.0, reductionsEnd - backwardSeconds) + afterwards;

  // Updates: the element-wise ones at the memory rate, whole matrices at
  // the matmul rate; ZeRO's owners at once, the busiest setting the time.
  double memory = calibration.memoryBytesPerSecond;
  double matmul = calibration.matmulFlopsPerSecond;
  double busiestOwner = 0;
  for (auto &[rank, load] : report.owners)
    busiestOwner =
        std::max(busiestOwner, load.bytes / memory + load.flops / matmul);
  prediction.computeSeconds =
      (report.elementwise.bytes + report.powerSGDBytes +
       2 * report.packedBytes) /
          memory +
      (report.everyRank.flops + report.powerSGDFlops) / matmul + busiestOwner;
  prediction.seconds = prediction.exposedSeconds + prediction.computeSeconds;
  return prediction;
}
