//===- DionLowRankSync.cpp - Dion syncs factors, not gradients -*- C++ -*-===//
//
// --distopt-dion-low-rank-sync: Dion's compressed data-parallel sync (the
// Dion paper's, PowerSGD's idea) as a transformation. A distopt.dion_update
// whose gradient is the mean over a group of the ranks' own gradients
// comes to read the rank's own gradient instead and to average its two
// low-rank factors over the group (its `group`); the gradient's all_reduce
// goes, and with it (m n) elements on the wire for (m + n) r. Each rank's
// momentum then keeps its own error, marked distopt.per_rank = "mean":
// their mean is what Dion on the averaged gradient would hold.
//
//===----------------------------------------------------------------------===//

#include "distopt/Dialect/DistOpt/Analysis/StepStructure.h"
#include "distopt/Dialect/DistOpt/IR/DistOptOps.h"
#include "distopt/Dialect/DistOpt/IR/StepABI.h"
#include "distopt/Transforms/Bucketing.h"
#include "distopt/Transforms/Passes.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/SetVector.h"

#include <cmath>

namespace mlir::distopt {
#define GEN_PASS_DEF_DIONLOWRANKSYNCPASS
#include "distopt/Transforms/Passes.h.inc"
} // namespace mlir::distopt

using namespace mlir;
using namespace mlir::distopt;

namespace {

/// What the rewrite of one update takes: the reduction (and the division
/// by the group's size that makes its mean) to remove, the rank's own
/// gradient that replaces the mean, the overflow checks that read it, and
/// the momentum argument that becomes each rank's own.
struct SyncPlan {
  DionUpdateOp update;
  AllReduceOp reduction;
  SmallVector<Operation *> division;
  Value mean, local;
  SmallVector<AllFiniteOp> checks;
  BlockArgument momentum;
};

struct DionLowRankSyncPass
    : public distopt::impl::DionLowRankSyncPassBase<DionLowRankSyncPass> {
  using DionLowRankSyncPassBase::DionLowRankSyncPassBase;

  LogicalResult initialize(MLIRContext *context) override {
    if (!std::isfinite(batchMb) || batchMb < 0)
      return emitError(UnknownLoc::get(context))
             << "--distopt-dion-low-rank-sync: batch-mb must be finite and "
                "not negative, got "
             << batchMb.getValue();
    return success();
  }

  void runOnOperation() override;

private:
  /// The plan for `update`, nullopt when its gradient is reduced nowhere
  /// (one rank, or a step that reduces it by hand), or failure with a
  /// diagnostic when it is reduced in a way this sync cannot take over.
  FailureOr<std::optional<SyncPlan>> plan(const GradientChain &chain);
  void apply(func::FuncOp func, SyncPlan &plan);
  /// Numbers the synced updates of `func`'s entry block into batches of
  /// batch-mb of gradients, per group and factor type.
  void numberBatches(func::FuncOp func);
};

} // namespace

FailureOr<std::optional<SyncPlan>>
DionLowRankSyncPass::plan(const GradientChain &chain) {
  OptimizerOpInterface updateOp = chain.update; // (a copy: not const)
  auto update = cast<DionUpdateOp>(updateOp.getOperation());
  auto fail = [&](const Twine &why) {
    return update.emitError()
           << "--distopt-dion-low-rank-sync: cannot sync Dion's factors "
              "instead of its gradient: "
           << why;
  };
  ArrayRef<GradientLink> links = chain.links;
  auto reductionAt = llvm::find_if(links, [](const GradientLink &link) {
    return link.kind == GradientLink::Kind::Reduction ||
           link.kind == GradientLink::Kind::Bucket;
  });
  if (reductionAt == links.end()) {
    // Reduced nowhere (one rank), or by what the chain does not follow.
    Operation *origin = chain.origin ? chain.origin.getDefiningOp() : nullptr;
    if (origin && communicates(origin))
      return fail("its gradient comes from '" +
                  origin->getName().getStringRef() +
                  "' (run the sync before --distopt-overlap-collectives and "
                  "--distopt-powersgd, as the pipeline does)");
    return std::optional<SyncPlan>();
  }
  if (reductionAt->kind == GradientLink::Kind::Bucket)
    return fail("its gradient is reduced in a bucket (run the sync before "
                "--distopt-bucketize, as the pipeline does)");
  SyncPlan p;
  p.update = update;
  p.reduction = dyn_cast<AllReduceOp>(reductionAt->op);
  if (!p.reduction)
    return fail("its gradient is reduced by '" +
                reductionAt->op->getName().getStringRef() +
                "', not by a distopt.all_reduce of its own (run the sync "
                "before --distopt-shard-optimizer, as the pipeline does)");
  if (llvm::any_of(links.drop_front(reductionAt - links.begin() + 1),
                   [](const GradientLink &link) {
                     return link.kind == GradientLink::Kind::Reduction;
                   }))
    return fail("its gradient is reduced more than once");
  // The factors' all-reduces run where the update runs: it must run on
  // every rank whenever the reduction does.
  auto func = update->getParentOfType<func::FuncOp>();
  Block *entry = func ? &func.getBody().front() : nullptr;
  if (update->getBlock() != entry || p.reduction->getBlock() != entry) {
    Operation *nested = update->getBlock() != entry
                            ? update.getOperation()
                            : p.reduction.getOperation();
    return fail(Twine(nested == update ? "it" : "its gradient's reduction") +
                " is nested in '" +
                nested->getParentOp()->getName().getStringRef() +
                "': the factors' all-reduces must run where both run, on "
                "every rank");
  }
  // What comes between the reduction and the update applies to the rank's
  // own gradient as well as to the mean only if it is linear in it and the
  // same on every rank: element-wise ops on scalars (a conversion, the
  // unscale), a division. A clip by the global norm needs the mean itself.
  ArrayRef<GradientLink> after = links.take_front(reductionAt - links.begin());
  if (llvm::any_of(after, [](const GradientLink &link) {
        return link.kind == GradientLink::Kind::Clip;
      }))
    return fail("its gradient is clipped by the global norm, which needs "
                "the averaged gradient that the sync never forms");
  ProcessGroupOp group =
      lookupProcessGroup(p.reduction, p.reduction.getGroupAttr());
  if (!group)
    return fail("its gradient's reduction names no process group");
  // The mean: an average, or a sum divided by the group's size next.
  p.local = p.reduction.getInput();
  p.mean = p.reduction.getResult();
  switch (p.reduction.getReduction()) {
  case ReductionKind::Avg:
    break;
  case ReductionKind::Sum: {
    const GradientLink *division = after.empty() ? nullptr : &after.back();
    if (!division || division->kind != GradientLink::Kind::Division ||
        division->divisor != static_cast<double>(group.getSize()))
      return fail("its gradient is a sum over @" + group.getSymName() +
                  ", not divided by the group's " + Twine(group.getSize()) +
                  " ranks next: the sync averages");
    if (!p.mean.hasOneUse())
      return fail("the sum of its gradient has other uses");
    p.division.assign(division->ops.begin(), division->ops.end());
    p.mean = division->op->getResult(0);
    after = after.drop_back();
    break;
  }
  default:
    return fail("its gradient is reduced by '" +
                stringifyReductionKind(p.reduction.getReduction()) +
                "', not by an average or a sum");
  }
  if (p.reduction.getWireType())
    return fail("its gradient's reduction sends another type on the wire "
                "(run the sync before --distopt-widen-reductions)");
  // The momentum becomes each rank's own: the step's state argument says so.
  p.momentum = dyn_cast<BlockArgument>(update.getState()[0]);
  if (!p.momentum || p.momentum.getOwner() != entry ||
      abi::getArgRole(func, p.momentum.getArgNumber()) != abi::kState)
    return fail("its momentum is not a state argument of the step, which "
                "it must be to become each rank's own");
  // Every value from the mean to the update becomes the rank's own: besides
  // the next link (or the update), only overflow checks may read one, and
  // they come to check the rank's own, agreed over the group.
  for (int64_t j = after.size() - 1; j >= -1; --j) {
    Value value = j >= 0 ? after[j].input : update.getGrad();
    for (Operation *user : value.getUsers()) {
      if (auto check = dyn_cast<AllFiniteOp>(user)) {
        if (check.getGroupAttr() &&
            check.getGroupAttr() != p.reduction.getGroupAttr())
          return fail("an overflow check reads its averaged gradient over "
                      "another group");
        if (!llvm::is_contained(p.checks, check))
          p.checks.push_back(check);
        continue;
      }
      bool next =
          j >= 0 ? user == after[j].op || llvm::is_contained(after[j].ops, user)
                 : user == update.getOperation();
      if (!next)
        return fail("its averaged gradient, or what the step makes of it on "
                    "the way to the update, is also read by '" +
                    user->getName().getStringRef() + "'");
    }
  }
  return std::optional<SyncPlan>(std::move(p));
}

void DionLowRankSyncPass::apply(func::FuncOp func, SyncPlan &p) {
  abi::markPerRankMean(func, p.momentum.getArgNumber());
  for (AllFiniteOp check : p.checks)
    check.setGroupAttr(p.reduction.getGroupAttr());
  p.update.setGroupAttr(p.reduction.getGroupAttr());
  p.mean.replaceAllUsesWith(p.local);
  // The division's ops (the quotient's first), then its divisor if no one
  // else reads it.
  llvm::SetVector<Operation *> erase(p.division.begin(), p.division.end());
  for (Operation *op : p.division)
    for (Value operand : op->getOperands())
      if (auto divisor = operand.getDefiningOp<arith::ConstantOp>())
        erase.insert(divisor);
  erase.insert(p.reduction);
  for (Operation *op : erase)
    if (op->use_empty())
      op->erase();
}

void DionLowRankSyncPass::numberBatches(func::FuncOp func) {
  int64_t next = 0;
  func.walk([&](DionUpdateOp op) {
    if (op.getBatch())
      next = std::max(next, static_cast<int64_t>(*op.getBatch()) + 1);
  });
  SmallVector<Operation *> ops;
  for (auto op : func.getBody().front().getOps<DionUpdateOp>())
    if (op.getGroupAttr() && !op.getBatch())
      ops.push_back(op);
  distopt::numberBatches(
      ops,
      [](Operation *op) -> std::pair<Attribute, Type> {
        auto dion = cast<DionUpdateOp>(op);
        return {dion.getGroupAttr(), dion.getFactorElementType()};
      },
      [](Operation *op) {
        return static_cast<double>(getShapedBytes(cast<RankedTensorType>(
            cast<DionUpdateOp>(op).getGrad().getType())));
      },
      batchMb * (1 << 20), next,
      [](Operation *op, int64_t number) {
        cast<DionUpdateOp>(op).setBatch(number);
      });
}

void DionLowRankSyncPass::runOnOperation() {
  func::FuncOp func = getOperation();
  if (func.isExternal())
    return;
  StepStructure structure(func);
  SmallVector<SyncPlan> plans;
  bool ok = true, anyDion = false;
  for (const GradientChain &chain : structure.chains()) {
    OptimizerOpInterface update = chain.update;
    auto dion = dyn_cast<DionUpdateOp>(update.getOperation());
    if (!dion)
      continue;
    anyDion = true;
    if (dion.getGroupAttr())
      continue; // synced already (--distopt-infer-step-roles marks it)
    FailureOr<std::optional<SyncPlan>> planned = plan(chain);
    if (failed(planned))
      ok = false;
    else if (*planned)
      plans.push_back(std::move(**planned));
  }
  // An overflow check two plans share must be agreed over one group.
  llvm::DenseMap<Operation *, FlatSymbolRefAttr> checkGroups;
  for (SyncPlan &p : plans)
    for (AllFiniteOp check : p.checks) {
      auto [it, fresh] =
          checkGroups.try_emplace(check, p.reduction.getGroupAttr());
      if (!fresh && it->second != p.reduction.getGroupAttr()) {
        check.emitError() << "--distopt-dion-low-rank-sync: this overflow "
                             "check reads gradients of Dion updates synced "
                             "over "
                          << it->second << " and " << p.reduction.getGroupAttr()
                          << ", which it cannot agree over at once";
        ok = false;
      }
    }
  if (!ok)
    return signalPassFailure();
  // (Only a step with updates: a module's other functions are not steps.)
  if (!anyDion && !structure.chains().empty())
    func.emitWarning() << "--distopt-dion-low-rank-sync: no "
                          "distopt.dion_update here; nothing to sync";
  for (SyncPlan &p : plans)
    apply(func, p);
  if (batchMb > 0)
    numberBatches(func);
}
