//===- VerifyCollectives.cpp - static cross-rank checks ---------*- C++ -*-===//
//
// --distopt-verify-collectives: errors for programs whose ranks would
// disagree (a collective under rank-dependent control flow), gradients
// reduced twice or never, async tokens not waited on exactly once, and
// groups that do not fit the world the step is compiled for.
//
//===----------------------------------------------------------------------===//

#include "distopt/Dialect/DistOpt/IR/DistOptOps.h"
#include "distopt/Dialect/DistOpt/IR/StepABI.h"
#include "distopt/Transforms/Passes.h"

#include "mlir/Analysis/SliceAnalysis.h"
#include "mlir/Dialect/ControlFlow/IR/ControlFlowOps.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/SetVector.h"

#include <vector>

namespace mlir::distopt {
#define GEN_PASS_DEF_VERIFYCOLLECTIVESPASS
#include "distopt/Transforms/Passes.h.inc"
} // namespace mlir::distopt

using namespace mlir;
using namespace mlir::distopt;

namespace {

/// Which gradients a value carries, and how often each has been reduced
/// across ranks on the way. A bucket keeps one entry per packed tensor, so
/// that unpacking gives each tensor back its own history.
struct GradInfo {
  /// gradient argument index -> number of reductions (the maximum over paths)
  llvm::SmallDenseMap<unsigned, unsigned, 4> counts;
  /// for a bucket_pack result (and collectives of it): per packed tensor
  std::vector<GradInfo> slots;

  bool empty() const { return counts.empty() && slots.empty(); }
  /// Everything this value carries, buckets flattened.
  void flattenInto(GradInfo &out) const {
    for (auto [grad, count] : counts)
      out.counts[grad] = std::max(out.counts.lookup(grad), count);
    for (const GradInfo &slot : slots)
      slot.flattenInto(out);
  }
  GradInfo reducedOnce() const {
    GradInfo out;
    for (auto [grad, count] : counts)
      out.counts[grad] = count + 1;
    for (const GradInfo &slot : slots)
      out.slots.push_back(slot.reducedOnce());
    return out;
  }
};

/// Ops that reduce their (first) operand across ranks into their result.
static bool isReduction(Operation *op) {
  if (auto collective = dyn_cast<CollectiveOpInterface>(op))
    return collective.reduces();
  return isa<PowerSGDAllReduceOp, TopKAllReduceOp>(op);
}

static bool isReduceScatter(Operation *op) {
  auto collective = dyn_cast<CollectiveOpInterface>(op);
  return collective &&
         collective.getCollectiveKind() == CollectiveKind::ReduceScatter;
}

struct VerifyCollectivesPass
    : public distopt::impl::VerifyCollectivesPassBase<VerifyCollectivesPass> {
  void runOnOperation() override {
    ModuleOp module = getOperation();
    bool ok = succeeded(checkGroups(module));
    module.walk([&](FunctionOpInterface func) {
      ok &= succeeded(checkRankDependentControl(func));
      ok &= succeeded(checkTokens(func));
      ok &= succeeded(checkGradients(func));
    });
    if (!ok)
      signalPassFailure();
  }

  LogicalResult checkGroups(ModuleOp module);
  LogicalResult checkRankDependentControl(FunctionOpInterface func);
  LogicalResult checkTokens(FunctionOpInterface func);
  LogicalResult checkGradients(FunctionOpInterface func);
};

} // namespace

LogicalResult VerifyCollectivesPass::checkGroups(ModuleOp module) {
  auto world = module->getAttrOfType<IntegerAttr>(abi::kWorldSize);
  if (!world)
    return success();
  int64_t worldSize = world.getInt();
  bool ok = true;
  module.walk([&](ProcessGroupOp group) {
    if (group.getWorldSize() != worldSize) {
      group.emitError() << "process group @" << group.getSymName()
                        << " spans a world of " << group.getWorldSize()
                        << " ranks but this step is compiled for " << worldSize;
      ok = false;
    }
  });
  return success(ok);
}

/// The operands that decide whether, or how often, `op`'s regions run.
static SmallVector<Value> getControlOperands(Operation *op) {
  if (auto ifOp = dyn_cast<scf::IfOp>(op))
    return {ifOp.getCondition()};
  if (auto forOp = dyn_cast<scf::ForOp>(op))
    return {forOp.getLowerBound(), forOp.getUpperBound(), forOp.getStep()};
  if (auto whileOp = dyn_cast<scf::WhileOp>(op))
    return {whileOp.getConditionOp().getCondition()};
  if (auto switchOp = dyn_cast<scf::IndexSwitchOp>(op))
    return {switchOp.getArg()};
  if (isa<FunctionOpInterface>(op))
    return {};
  // Unknown region ops: any operand may steer them.
  return llvm::to_vector(op->getOperands());
}

LogicalResult
VerifyCollectivesPass::checkRankDependentControl(FunctionOpInterface func) {
  // Everything computed from a rank query (data dependence).
  llvm::SetVector<Operation *> rankDependent;
  DenseMap<Operation *, RankOp> origin;
  func.walk([&](RankOp rank) {
    SetVector<Operation *> slice;
    getForwardSlice(rank.getOperation(), &slice);
    for (Operation *op : slice)
      origin.try_emplace(op, rank);
    origin.try_emplace(rank, rank);
  });
  auto dependsOnRank = [&](Value value) -> RankOp {
    if (Operation *def = value.getDefiningOp())
      return origin.lookup(def);
    return nullptr;
  };

  bool ok = true;
  func.walk([&](Operation *op) {
    if (!communicates(op))
      return;
    for (Operation *parent = op->getParentOp(); parent && parent != func;
         parent = parent->getParentOp()) {
      if (auto owned = dyn_cast<OwnedByOp>(parent)) {
        op->emitError() << "'" << op->getName()
                        << "' communicates inside distopt.owned_by: only rank "
                        << owned.getOwner()
                        << " runs it and the other ranks never join";
        ok = false;
        return;
      }
      for (Value control : getControlOperands(parent)) {
        if (RankOp rank = dependsOnRank(control)) {
          InFlightDiagnostic diag =
              op->emitError()
              << "'" << op->getName()
              << "' communicates under control flow that depends on the "
                 "rank: ranks would disagree on whether it runs";
          diag.attachNote(parent->getLoc()) << "the control flow";
          diag.attachNote(rank.getLoc()) << "the rank it depends on";
          ok = false;
          return;
        }
      }
    }
    // Unstructured control flow: a branch on the rank anywhere before.
    if (op->getBlock() != &op->getParentRegion()->front()) {
      for (Block &block : *op->getParentRegion())
        if (auto branch = dyn_cast<cf::CondBranchOp>(block.getTerminator()))
          if (RankOp rank = dependsOnRank(branch.getCondition())) {
            op->emitError() << "'" << op->getName()
                            << "' communicates after a branch that depends on "
                               "the rank: ranks would disagree on whether it "
                               "runs";
            ok = false;
            return;
          }
    }
  });
  return success(ok);
}

LogicalResult VerifyCollectivesPass::checkTokens(FunctionOpInterface func) {
  bool ok = true;
  func.walk([&](Operation *op) {
    for (Value result : op->getResults()) {
      if (!isa<TokenType>(result.getType()))
        continue;
      unsigned waits = llvm::count_if(
          result.getUsers(), [](Operation *user) { return isa<WaitOp>(user); });
      if (waits != 1 || !result.hasOneUse()) {
        op->emitError() << "the token of '" << op->getName()
                        << "' must be waited on exactly once, found " << waits
                        << " distopt.wait and "
                        << std::distance(result.use_begin(), result.use_end())
                        << " uses";
        ok = false;
      }
    }
  });
  return success(ok);
}

LogicalResult VerifyCollectivesPass::checkGradients(FunctionOpInterface func) {
  if (func.isExternal())
    return success();
  // On a single rank there is nothing to diverge from, and the reductions
  // themselves fold away (they are identities there).
  auto module = func->getParentOfType<ModuleOp>();
  auto world = module ? module->getAttrOfType<IntegerAttr>(abi::kWorldSize)
                      : IntegerAttr();
  if (world && world.getInt() == 1)
    return success();
  SmallVector<unsigned> grads;
  for (unsigned i = 0, e = func.getNumArguments(); i < e; ++i)
    if (abi::getArgRole(func, i) == abi::kGrad)
      grads.push_back(i);
  if (grads.empty())
    return success();

  DenseMap<Value, GradInfo> info;
  for (unsigned grad : grads)
    info[func.getArgument(grad)].counts[grad] = 0;
  auto flat = [&](Value value) {
    GradInfo out;
    auto it = info.find(value);
    if (it != info.end())
      it->second.flattenInto(out);
    return out;
  };

  // Gradients reduced somewhere, and those already reported.
  llvm::SmallDenseSet<unsigned> reduced, reported;
  bool ok = true;
  auto describe = [&](unsigned grad) {
    StringRef name = abi::getArgName(func, grad);
    return name.empty() ? ("#" + Twine(grad)).str() : name.str();
  };
  // A post-order walk visits definitions before their uses (a region op's
  // body before the op, which can then take what its body yields).
  func.walk<WalkOrder::PostOrder>([&](Operation *op) {
    if (op->getNumResults() == 0)
      return;
    if (auto pack = dyn_cast<BucketPackOp>(op)) {
      GradInfo bucket;
      for (Value input : pack.getInputs())
        bucket.slots.push_back(flat(input));
      info[pack.getResult()] = std::move(bucket);
      return;
    }
    if (auto unpack = dyn_cast<BucketUnpackOp>(op)) {
      auto it = info.find(unpack.getBucket());
      if (it == info.end())
        return;
      GradInfo bucket = it->second;
      bool aligned = bucket.slots.size() == unpack.getNumResults();
      for (auto [index, result] : llvm::enumerate(unpack.getResults()))
        info[result] = aligned ? bucket.slots[index] : flat(unpack.getBucket());
      return;
    }
    if (auto wait = dyn_cast<WaitOp>(op)) {
      auto it = info.find(wait.getToken());
      if (it != info.end())
        info[wait.getResult()] = it->second;
      return;
    }
    if (isReduction(op)) {
      auto it = info.find(op->getOperand(0));
      if (it == info.end())
        return;
      GradInfo out = it->second;
      if (isReduceScatter(op))
        out = flat(op->getOperand(0)); // a chunk no longer holds whole slots
      GradInfo flatIn = flat(op->getOperand(0));
      for (auto [grad, count] : flatIn.counts)
        reduced.insert(grad);
      info[op->getResult(0)] = out.reducedOnce();
      return;
    }
    if (isa<SGDUpdateOp, AdamUpdateOp, AdamWUpdateOp, RMSpropUpdateOp,
            AdagradUpdateOp>(op)) {
      for (auto [grad, count] : flat(op->getOperand(1)).counts) {
        if (count == 1)
          continue;
        reported.insert(grad);
        InFlightDiagnostic diag = op->emitError();
        if (count == 0)
          diag << "gradient '" << describe(grad)
               << "' reaches the optimizer without being reduced across "
                  "ranks: replicas would diverge";
        else
          diag << "gradient '" << describe(grad) << "' is reduced " << count
               << " times before the optimizer";
        ok = false;
      }
      return;
    }
    // Any other op: its results carry everything its operands carry, and
    // what its regions yield.
    GradInfo merged;
    auto mergeFrom = [&](ValueRange values) {
      for (Value value : values) {
        auto it = info.find(value);
        if (it != info.end())
          it->second.flattenInto(merged);
      }
    };
    mergeFrom(op->getOperands());
    for (Region &region : op->getRegions())
      for (Block &block : region)
        if (!block.empty() && block.back().hasTrait<OpTrait::IsTerminator>())
          mergeFrom(block.back().getOperands());
    if (!merged.empty())
      for (Value result : op->getResults())
        info[result] = merged;
  });

  for (unsigned grad : grads)
    if (!reduced.contains(grad) && !reported.contains(grad)) {
      func.emitError() << "gradient '" << describe(grad) << "' (argument #"
                       << grad << ") is never reduced across ranks";
      ok = false;
    }
  return success(ok);
}
