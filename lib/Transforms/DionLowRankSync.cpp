//===- DionLowRankSync.cpp - Dion averages factors, not gradients -*- C++
//-*-===//
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
#include "distopt/Transforms/Passes.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "llvm/ADT/SetVector.h"

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
  void runOnOperation() override;

private:
  /// The plan for `update`, nullopt when its gradient is reduced nowhere
  /// (one rank, or a step that reduces it by hand), or failure with a
  /// diagnostic when it is reduced in a way this sync cannot take over.
  FailureOr<std::optional<SyncPlan>> plan(const GradientChain &chain);
  void apply(func::FuncOp func, SyncPlan &plan);
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
  if (reductionAt == links.end())
    return std::optional<SyncPlan>();
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
                "before --distopt-shard-optimizer and --distopt-powersgd, as "
                "the pipeline does)");
  if (llvm::any_of(links.drop_front(reductionAt - links.begin() + 1),
                   [](const GradientLink &link) {
                     return link.kind == GradientLink::Kind::Reduction;
                   }))
    return fail("its gradient is reduced more than once");
  // What comes between the reduction and the update applies to the rank's
  // own gradient as well as to the mean only if it is linear in it and the
  // same on every rank: element-wise ops on scalars (a conversion, the
  // unscale). A clip by the global norm needs the mean itself.
  for (const GradientLink &link : links.take_front(reductionAt - links.begin()))
    if (link.kind == GradientLink::Kind::Clip)
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
    const GradientLink *division =
        reductionAt == links.begin() ? nullptr : std::prev(reductionAt);
    if (!division || division->kind != GradientLink::Kind::Division ||
        division->divisor != static_cast<double>(group.getSize()))
      return fail("its gradient is a sum over @" + group.getSymName() +
                  ", not divided by the group's " + Twine(group.getSize()) +
                  " ranks next: the sync averages");
    if (!p.mean.hasOneUse())
      return fail("the sum of its gradient has other uses");
    p.division.assign(division->ops.begin(), division->ops.end());
    p.mean = division->op->getResult(0);
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
  auto func = update->getParentOfType<func::FuncOp>();
  p.momentum = dyn_cast<BlockArgument>(update.getState()[0]);
  if (!func || !p.momentum ||
      p.momentum.getOwner() != &func.getBody().front() ||
      abi::getArgRole(func, p.momentum.getArgNumber()) != abi::kState)
    return fail("its momentum is not a state argument of the step, which "
                "it must be to become each rank's own");
  // Besides the path to the update, only overflow checks may read the mean:
  // they read the rank's own gradient instead, agreed over the group.
  for (Operation *user : p.mean.getUsers()) {
    if (auto check = dyn_cast<AllFiniteOp>(user)) {
      if (check.getGroupAttr() &&
          check.getGroupAttr() != p.reduction.getGroupAttr())
        return fail("an overflow check reads its averaged gradient over "
                    "another group");
      if (!llvm::is_contained(p.checks, check))
        p.checks.push_back(check);
      continue;
    }
    bool onPath =
        user == update || llvm::any_of(links, [&](const GradientLink &link) {
          return link.op == user || link.input == p.mean;
        });
    if (!onPath)
      return fail("its averaged gradient is also read by '" +
                  user->getName().getStringRef() + "'");
  }
  return std::optional<SyncPlan>(std::move(p));
}

void DionLowRankSyncPass::apply(func::FuncOp func, SyncPlan &p) {
  DionUpdateOp update = p.update;
  // The momentum becomes this rank's: its argument and result say so.
  Builder b(func.getContext());
  StringAttr mean = b.getStringAttr(abi::kPerRankMean);
  func.setArgAttr(p.momentum.getArgNumber(), abi::kPerRank, mean);
  Value newMomentum = update.getNewState()[0];
  auto ret = cast<func::ReturnOp>(func.getBody().front().getTerminator());
  for (OpOperand &operand : ret->getOpOperands()) {
    Value v = operand.get();
    if (auto select = v.getDefiningOp<arith::SelectOp>())
      v = select.getTrueValue();
    if (v == newMomentum)
      func.setResultAttr(operand.getOperandNumber(), abi::kPerRank, mean);
  }
  for (AllFiniteOp check : p.checks)
    check.setGroupAttr(p.reduction.getGroupAttr());
  update.setGroupAttr(p.reduction.getGroupAttr());
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
      continue; // synced already
    FailureOr<std::optional<SyncPlan>> planned = plan(chain);
    if (failed(planned))
      ok = false;
    else if (*planned)
      plans.push_back(std::move(**planned));
  }
  if (!ok)
    return signalPassFailure();
  // (Only a step with updates: a module's other functions are not steps.)
  if (!anyDion && !structure.chains().empty())
    func.emitWarning() << "--distopt-dion-low-rank-sync: no "
                          "distopt.dion_update here; nothing to sync";
  for (SyncPlan &p : plans)
    apply(func, p);
}
