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

#include <functional>
#include <numeric>

using namespace mlir;
using namespace mlir::distopt;
using namespace mlir::distopt::zero;

static double flopsOf(const Update &u) {
  return static_cast<double>(cast<OptimizerOpInterface>(u.op).getUpdateFlops());
}

/// The bytes of `u`'s tensor in the element type of `type`.
static double bytesOf(const Update &u, Type type) {
  return static_cast<double>(u.numel()) *
         static_cast<double>(
             getElementBytes(cast<RankedTensorType>(type).getElementType()));
}

double MatrixCostModel::predict(ArrayRef<Update *> group,
                                ArrayRef<bool> gathered) const {
  auto collective = [&](double bytes) { return latencyS + bytes / bytesPerS; };
  const Update &first = *group.front();
  // The buffers the gather plan moves, each one collective of the gathered
  // tensors in it: at stage 2 the gradients' reduce-scatter; the composed
  // gradient chunks' all-gather (at stage 1 only to clip: else every rank
  // holds the gradients); each state's; the main parameters'.
  SmallVector<std::function<Type(const Update &)>> buffers;
  if (stage == 2)
    buffers.push_back([](const Update &u) -> Type {
      AllReduceOp reduction = u.reduction; // (its accessors are not const)
      return reduction.getType();
    });
  if (stage == 2 || first.clip)
    buffers.push_back(
        [](const Update &u) { return u.op->getOperand(1).getType(); });
  for (unsigned k = 0; k < first.state.size(); ++k)
    buffers.push_back(
        [k](const Update &u) -> Type { return u.state[k].getType(); });
  if (first.paramIsMain)
    buffers.push_back(
        [](const Update &u) -> Type { return u.param.getType(); });
  double time = 0, gatheredFlops = 0;
  SmallVector<double> gatheredBytes(buffers.size(), 0);
  SmallVector<double> owned;
  for (auto [u, gather] : llvm::zip_equal(group, gathered)) {
    if (gather) {
      gatheredFlops += flopsOf(*u);
      for (auto [b, buffer] : llvm::enumerate(buffers))
        gatheredBytes[b] += bytesOf(*u, buffer(*u));
      continue;
    }
    owned.push_back(flopsOf(*u));
    // At stage 2 its reduce to the owner; its broadcast (of the model
    // copy with main parameters, and none where the step returns none).
    if (stage == 2)
      time += collective(bytesOf(*u, u->reduction.getType()));
    if (!u->paramIsMain)
      time += collective(bytesOf(*u, u->param.getType()));
    else if (!u->downcasts.empty())
      time += collective(bytesOf(*u, u->downcasts.front().getType()));
  }
  // The busiest owner after the sorted-greedy assignment.
  llvm::sort(owned, std::greater<double>());
  SmallVector<double> load(ranks, 0);
  for (double flops : owned)
    *llvm::min_element(load) += flops;
  time += *llvm::max_element(load) / flopsPerS;
  if (llvm::is_contained(gathered, true)) {
    // Each rank sends (N-1)/N of each buffer, then computes every matrix.
    double share = static_cast<double>(ranks - 1) / static_cast<double>(ranks);
    for (double bytes : gatheredBytes)
      time += collective(share * bytes);
    time += gatheredFlops / flopsPerS;
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
