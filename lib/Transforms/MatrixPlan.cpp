//===- MatrixPlan.cpp - Owners or gathers for whole matrices ----*- C++ -*-===//
//
// matrix-plan=auto's cost model (ShardOptimizer.h says what it counts):
// which of a group's matrices ZeRO gathers onto every rank and which it
// gives to owners, from the updates' FLOP rate and the link's latency and
// bandwidth. Small matrices cost little arithmetic and one latency each on
// an owner; gathered, they share the group's few collectives.
//
//===----------------------------------------------------------------------===//

#include "ShardOptimizer.h"

#include "distopt/Dialect/DistOpt/IR/StepABI.h"

#include <numeric>

using namespace mlir;
using namespace mlir::distopt;
using namespace mlir::distopt::zero;

static double flopsOf(const Update &u) {
  return static_cast<double>(cast<OptimizerOpInterface>(u.op).getUpdateFlops());
}

static double bytesOf(const Update &u) {
  return static_cast<double>(u.numel()) *
         static_cast<double>(getElementBytes(u.paramType().getElementType()));
}

double MatrixCostModel::predict(ArrayRef<Update *> group,
                                ArrayRef<bool> gathered) const {
  auto collective = [&](double bytes) { return latencyS + bytes / bytesPerS; };
  double time = 0, gatheredFlops = 0, gatheredBytes = 0;
  SmallVector<double> owned;
  for (auto [u, gather] : llvm::zip_equal(group, gathered)) {
    if (gather) {
      gatheredFlops += flopsOf(*u);
      gatheredBytes += bytesOf(*u);
      continue;
    }
    owned.push_back(flopsOf(*u));
    // Its broadcast, and at stage 2 its reduce to the owner.
    time += collective(bytesOf(*u)) * (stage == 2 ? 2 : 1);
  }
  // The busiest owner after the sorted-greedy assignment.
  llvm::sort(owned, std::greater<double>());
  SmallVector<double> load(ranks, 0);
  for (double flops : owned)
    *llvm::min_element(load) += flops;
  time += *llvm::max_element(load) / flopsPerS;
  if (llvm::is_contained(gathered, true)) {
    // The gradient, each state and the main parameter gathered, and at
    // stage 2 the gradient reduce-scattered, every rank then computing all.
    const Update &first = *group.front();
    double buffers = 1 + static_cast<double>(first.state.size()) +
                     (first.paramIsMain ? 1 : 0) + (stage == 2 ? 1 : 0);
    double share = static_cast<double>(ranks - 1) / static_cast<double>(ranks);
    time +=
        buffers * collective(share * gatheredBytes) + gatheredFlops / flopsPerS;
  }
  return time;
}

SmallVector<bool> MatrixCostModel::choose(ArrayRef<Update *> group) const {
  SmallVector<unsigned> cheapest(group.size());
  std::iota(cheapest.begin(), cheapest.end(), 0);
  llvm::stable_sort(cheapest, [&](unsigned a, unsigned b) {
    return flopsOf(*group[a]) < flopsOf(*group[b]);
  });
  SmallVector<bool> gathered(group.size(), false), best = gathered;
  double bestTime = predict(group, gathered);
  for (unsigned i : cheapest) {
    gathered[i] = true;
    double time = predict(group, gathered);
    if (time < bestTime) {
      bestTime = time;
      best = gathered;
    }
  }
  return best;
}

DictionaryAttr MatrixCostModel::describe(MLIRContext *context,
                                         ArrayRef<Update *> group,
                                         ArrayRef<bool> gathered) const {
  Builder b(context);
  auto micros = [&](ArrayRef<bool> plan) {
    return b.getF64FloatAttr(predict(group, plan) * 1e6);
  };
  SmallVector<bool> none(group.size(), false), all(group.size(), true);
  SmallVector<Attribute> names;
  for (auto [u, gather] : llvm::zip_equal(group, gathered))
    if (gather)
      names.push_back(b.getStringAttr(u->name));
  return b.getDictionaryAttr({
      b.getNamedAttr("matrices", b.getI64IntegerAttr(group.size())),
      b.getNamedAttr("gathered", b.getArrayAttr(names)),
      b.getNamedAttr("chosen_us", micros(gathered)),
      b.getNamedAttr("all_owners_us", micros(none)),
      b.getNamedAttr("all_gathered_us", micros(all)),
  });
}
