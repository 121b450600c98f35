//===- MatrixPlan.cpp - Groups of updates and their plans -------*- C++ -*-===//
//
// Which updates ZeRO shards together, each group's plan, and
// matrix-plan=auto's cost model (ShardOptimizer.h says what it counts):
// which of a group's matrices ZeRO gathers onto every rank (or, Dion's,
// cuts into blocks of rows) and which it gives to owners, from the updates'
// FLOP rate and the link's latency and bandwidth. Small matrices cost
// little arithmetic and one latency each on an owner; gathered, they share
// the group's few collectives.
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

double MatrixCostModel::rowShardSeconds(const Update &u) const {
  auto collective = [&](double bytes) { return latencyS + bytes / bytesPerS; };
  double share = static_cast<double>(ranks - 1) / static_cast<double>(ranks);
  auto dion = cast<DionUpdateOp>(u.op);
  ArrayRef<int64_t> shape = u.paramType().getShape();
  double m = static_cast<double>(shape.front());
  double n =
      static_cast<double>(ShapedType::getNumElements(shape.drop_front()));
  double r = static_cast<double>(
      cast<RankedTensorType>(dion.getState()[1].getType()).getDimSize(0));
  double k = static_cast<double>(ranks);
  double paddedRows = k * std::ceil(m / k);
  double width = dion.getFactorElementType().getWidth() / 8;
  // The gradient's and the parameter's collectives move the padded rows.
  double padding = m == 0 ? 1 : paddedRows / m;
  double time = 0;
  if (stage == 2) {
    AllReduceOp reduction = u.reduction; // (its accessors are not const)
    time += collective(share * padding * bytesOf(u, reduction.getType()));
  }
  if (!u.paramIsMain)
    time += collective(share * padding * bytesOf(u, u.param.getType()));
  else if (!u.downcasts.empty())
    time += collective(share * padding *
                       bytesOf(u, u.downcasts.front()->getResult(0).getType()));
  time += collective(share * paddedRows * r * width) +
          collective(2 * share * n * r * width);
  double flops = (8 * m * n * r + 10 * m * n) / k + 4 * paddedRows * r * r;
  return time + flops / flopsPerS;
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
  // The owned matrices, assigned by their weight (FLOPs or elements:
  // owner-balance) as the pass assigns them; the busiest owner's FLOPs
  // take the time.
  SmallVector<double> weights, owned;
  for (auto [u, gather] : llvm::zip_equal(group, gathered)) {
    if (gather && rowShards) {
      time += rowShardSeconds(*u);
      continue;
    }
    if (gather) {
      gatheredFlops += flopsOf(*u);
      for (auto [b, buffer] : llvm::enumerate(buffers))
        gatheredBytes[b] += bytesOf(*u, buffer(*u));
      continue;
    }
    weights.push_back(balanceFlops ? flopsOf(*u)
                                   : static_cast<double>(u->numel()));
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
  SmallVector<double> load(ranks, 0), flops(ranks, 0);
  assignSortedGreedy(weights, load, [&](unsigned i, int64_t rank) {
    flops[rank] += owned[i];
  });
  time += *llvm::max_element(flops) / flopsPerS;
  if (!rowShards && llvm::is_contained(gathered, true)) {
    // Each rank sends (N-1)/N of each buffer, then computes every matrix.
    double share = static_cast<double>(ranks - 1) / static_cast<double>(ranks);
    for (double bytes : gatheredBytes)
      time += collective(share * bytes);
    time += gatheredFlops / flopsPerS;
  }
  return time;
}

SmallVector<bool> MatrixCostModel::choose(ArrayRef<Update *> group) const {
  // Gathered: the cheapest first; in blocks of rows: the most costly.
  SmallVector<unsigned> order(group.size());
  std::iota(order.begin(), order.end(), 0);
  llvm::stable_sort(order, [&](unsigned a, unsigned b) {
    return rowShards ? flopsOf(*group[a]) > flopsOf(*group[b])
                     : flopsOf(*group[a]) < flopsOf(*group[b]);
  });
  SmallVector<bool> gathered(group.size(), false), best = gathered;
  double bestTime = predict(group, gathered);
  for (unsigned i : order) {
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
      b.getNamedAttr("plan", b.getStringAttr(rowShards ? "lowrank" : "gather")),
      b.getNamedAttr("gathered", b.getArrayAttr(names)),
      b.getNamedAttr("chosen_us", micros(gathered)),
      b.getNamedAttr("all_owners_us", micros(none)),
      b.getNamedAttr("all_gathered_us", micros(all)),
  });
}

bool mlir::distopt::zero::statesShapedAsParam(Operation *op) {
  auto update = cast<OptimizerOpInterface>(op);
  auto shape = cast<RankedTensorType>(update.getParam().getType()).getShape();
  return llvm::all_of(update.getState(), [&](Value state) {
    return cast<RankedTensorType>(state.getType()).getShape() == shape;
  });
}

/// Whether two element-wise ops on gradients' ways do the same to each
/// element: what a group's part goes through once for all its updates.
static bool sameElementwise(Operation *a, Operation *b) {
  return a->getName() == b->getName() &&
         a->getAttrDictionary() == b->getAttrDictionary() &&
         a->getPropertiesAsAttribute() == b->getPropertiesAsAttribute() &&
         llvm::equal(a->getOperands().drop_front(),
                     b->getOperands().drop_front()) &&
         getElementTypeOrSelf(a->getResult(0).getType()) ==
             getElementTypeOrSelf(b->getResult(0).getType());
}

/// The unit (distopt.unit) of the parameter `u` updates, or null.
static Attribute unitOf(const Update &u) {
  auto func = cast<FunctionOpInterface>(u.param.getOwner()->getParentOp());
  return func.getArgAttr(u.param.getArgNumber(), abi::kUnit);
}

/// Whether two updates shard together: the same unit, optimizer and
/// hyperparameters, learning rate and step, element types and reduction,
/// and the same ops on their gradients' way.

bool mlir::distopt::zero::shardTogether(Update &a, Update &b) {
  auto x = cast<OptimizerOpInterface>(a.op),
       y = cast<OptimizerOpInterface>(b.op);
  // Units (FSDP's wrapped modules) are gathered one at a time: never in
  // one flat buffer.
  return unitOf(a) == unitOf(b) && x->getName() == y->getName() &&
         x->getAttrDictionary() == y->getAttrDictionary() &&
         x->getPropertiesAsAttribute() == y->getPropertiesAsAttribute() &&
         x.getLr() == y.getLr() && x.getStep() == y.getStep() &&
         llvm::equal(x.getRuntimeHyperparameters(),
                     y.getRuntimeHyperparameters()) &&
         a.paramType().getElementType() == b.paramType().getElementType() &&
         a.reduction.getType().getElementType() ==
             b.reduction.getType().getElementType() &&
         a.paramIsMain == b.paramIsMain &&
         llvm::equal(a.elementwise, b.elementwise, sameElementwise) &&
         a.downcasts.size() == b.downcasts.size() &&
         a.reduction.getGroupAttr() == b.reduction.getGroupAttr() &&
         a.reduction.getReductionAttr() == b.reduction.getReductionAttr() &&
         a.reduction.getScaleAttr() == b.reduction.getScaleAttr() &&
         a.reduction.getWireTypeAttr() == b.reduction.getWireTypeAttr() &&
         a.clip == b.clip && a.finiteCheck == b.finiteCheck &&
         bool(a.divide) == bool(b.divide) && a.divisor == b.divisor &&
         a.keep == b.keep;
}

bool mlir::distopt::zero::rowShardable(Operation *op) {
  auto dion = dyn_cast<DionUpdateOp>(op);
  return dion && !dion.getGroupAttr() && !dion.getRowGroupAttr();
}

bool mlir::distopt::zero::hasRows(Operation *op) {
  return cast<RankedTensorType>(
             cast<OptimizerOpInterface>(op).getParam().getType())
             .getNumElements() != 0;
}

void mlir::distopt::zero::planGroups(
    func::FuncOp func, ArrayRef<SmallVector<Update *>> groups,
    const PlanOptions &options, SmallVectorImpl<SmallVector<Update *>> &planned,
    SmallVectorImpl<Sharder::Plan> &plans) {
  SmallVector<Attribute> predictions;
  // Owners keep whole parameters: stages 1 and 2 without hybrid sharding.
  bool ownersRun = options.stage < 3 && !options.hybrid;
  for (ArrayRef<Update *> group : groups) {
    Operation *first = group.front()->op;
    if (cast<OptimizerOpInterface>(first).isElementwise()) {
      planned.push_back(SmallVector<Update *>(group));
      plans.push_back(options.strategy == ZeroStrategy::Flat
                          ? Sharder::Plan::Flat
                          : Sharder::Plan::Owners);
      continue;
    }
    bool gatherable = statesShapedAsParam(first);
    bool rowShards = rowShardable(first);
    MatrixPlan plan = options.matrixPlan;
    if (!gatherable && plan == MatrixPlan::Gather) {
      first->emitWarning()
          << "matrix-plan=gather: '" << first->getName()
          << "' keeps state of another shape than its matrix, which the "
             "gather plan cannot lay out in chunks; "
          << (rowShards ? "it takes matrix-plan=auto's plan"
                        : "its matrices go to owners");
      plan = MatrixPlan::Auto;
    }
    if (!rowShards && plan == MatrixPlan::LowRank) {
      first->emitWarning()
          << "matrix-plan=lowrank is Dion's (blocks of rows whose low-rank "
             "factors move): '"
          << first->getName() << "' takes matrix-plan=auto's plan";
      plan = MatrixPlan::Auto;
    }
    // Dion: blocks of rows where owners cannot run (or where asked), each
    // matrix a flat layout of its own (its chunks whole rows); a matrix
    // without elements stays on an owner (analyze refused it where none
    // runs).
    if (rowShards && (plan == MatrixPlan::LowRank ||
                      (plan == MatrixPlan::Auto && !ownersRun))) {
      SmallVector<Update *> empty;
      for (Update *u : group) {
        if (!hasRows(u->op)) {
          empty.push_back(u);
          continue;
        }
        planned.push_back({u});
        plans.push_back(Sharder::Plan::RowShards);
      }
      if (!empty.empty()) {
        planned.push_back(empty);
        plans.push_back(Sharder::Plan::Owners);
      }
      continue;
    }
    // With the rates, auto splits the group between owners and the plan
    // off owners (gathered, or Dion's blocks of rows) by the cost model.
    bool modelled = plan == MatrixPlan::Auto && ownersRun &&
                    options.updateGflops > 0 && (gatherable || rowShards);
    if (!modelled && (!gatherable || plan == MatrixPlan::Owner ||
                      (plan == MatrixPlan::Auto && ownersRun))) {
      planned.push_back(SmallVector<Update *>(group));
      plans.push_back(Sharder::Plan::Owners);
      continue;
    }
    SmallVector<bool> gathered(group.size(), true);
    if (modelled) {
      MatrixCostModel model{
          options.updateGflops * 1e9,
          options.latencyUs * 1e-6,
          options.bandwidthGbPerS * 1e9,
          lookupProcessGroup(func, group.front()->reduction.getGroupAttr())
              .getSize(),
          options.stage,
          options.balanceFlops,
          rowShards};
      gathered = model.choose(group);
      // (A matrix without elements has no rows to cut.)
      if (rowShards)
        for (auto [u, g] : llvm::zip_equal(group, gathered))
          g = g && hasRows(u->op);
      predictions.push_back(model.describe(func.getContext(), group, gathered));
    }
    // The owners' part first: their reductions start at the gradients and
    // overlap the owners' arithmetic, where the gathered part's
    // collectives wait for the reductions started before them (the link
    // serves them in order) and hold up what follows.
    for (bool gather : {false, true}) {
      SmallVector<Update *> part;
      for (auto [u, g] : llvm::zip_equal(group, gathered))
        if (g == gather)
          part.push_back(u);
      if (part.empty())
        continue;
      if (gather && rowShards) {
        for (Update *u : part) {
          planned.push_back({u});
          plans.push_back(Sharder::Plan::RowShards);
        }
        continue;
      }
      planned.push_back(part);
      plans.push_back(gather ? Sharder::Plan::Gathered : Sharder::Plan::Owners);
    }
  }
  if (!predictions.empty())
    func->setAttr(abi::kMatrixPlans,
                  ArrayAttr::get(func.getContext(), predictions));
  else if (options.updateGflops > 0)
    func.emitWarning() << "--distopt-shard-optimizer: update-gflops, "
                          "latency-us and bandwidth-gb-per-s are unused: no "
                          "update here reads whole matrices (Muon's, "
                          "Dion's)";
}
