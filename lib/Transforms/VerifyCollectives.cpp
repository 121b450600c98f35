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
#include "llvm/ADT/BitVector.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/SetVector.h"
#include "llvm/ADT/SmallPtrSet.h"

#include <vector>

namespace mlir::distopt {
#define GEN_PASS_DEF_VERIFYCOLLECTIVESPASS
#include "distopt/Transforms/Passes.h.inc"
} // namespace mlir::distopt

using namespace mlir;
using namespace mlir::distopt;

namespace {

/// The process groups a gradient has been reduced over, in order (null for
/// a group the module does not declare).
using Reductions = SmallVector<ProcessGroupOp, 1>;

/// Which gradients a value carries, and over which groups each has been
/// reduced on the way. A bucket keeps one entry per packed tensor, so that
/// unpacking gives each tensor back its own history.
struct GradInfo {
  /// gradient argument index -> its reductions (the longest over paths)
  llvm::SmallDenseMap<unsigned, Reductions, 4> counts;
  /// for a bucket_pack result (and collectives of it): per packed tensor
  std::vector<GradInfo> slots;

  bool empty() const { return counts.empty() && slots.empty(); }
  /// Everything this value carries, buckets flattened.
  void flattenInto(GradInfo &out) const {
    for (const auto &[grad, reductions] : counts) {
      Reductions &known = out.counts[grad];
      if (reductions.size() >= known.size())
        known = reductions;
    }
    for (const GradInfo &slot : slots)
      slot.flattenInto(out);
  }
  GradInfo reducedOnce(ProcessGroupOp group) const {
    GradInfo out;
    for (const auto &[grad, reductions] : counts) {
      out.counts[grad] = reductions;
      out.counts[grad].push_back(group);
    }
    for (const GradInfo &slot : slots)
      out.slots.push_back(slot.reducedOnce(group));
    return out;
  }
};

/// How reductions over `groups`, one after another, cover the world: every
/// rank's result takes every rank's contribution exactly once (Exact), some
/// more than once (Repeated), or misses some (Partial). A reduction inside
/// each node followed by one across nodes is Exact.
enum class Cover { Exact, Repeated, Partial };
static Cover coverOf(ArrayRef<ProcessGroupOp> groups) {
  if (llvm::is_contained(groups, ProcessGroupOp()))
    return Cover::Partial;
  ProcessGroupOp first = groups.front();
  int64_t world = first.getWorldSize();
  if (groups.size() == 1)
    return first.getSize() == world ? Cover::Exact : Cover::Partial;
  int64_t product = 1;
  for (ProcessGroupOp group : groups) {
    if (group.getWorldSize() != world)
      return Cover::Partial;
    if (product > world)
      return Cover::Repeated;
    product *= group.getSize();
  }
  if (product != world)
    return product > world ? Cover::Repeated : Cover::Partial;
  // Which ranks each rank's result holds, stage by stage (bounded: beyond
  // this world size, the product of the sizes and distinct groups).
  if (world > (int64_t(1) << 14)) {
    llvm::SmallPtrSet<Operation *, 4> seen;
    for (ProcessGroupOp group : groups)
      if (!seen.insert(group).second)
        return Cover::Repeated;
    return Cover::Exact;
  }
  std::vector<llvm::BitVector> holds(world, llvm::BitVector(world));
  for (int64_t rank = 0; rank < world; ++rank)
    holds[rank].set(rank);
  for (ProcessGroupOp group : groups) {
    ProcessGroupOp::Membership membership = group.getMembership();
    llvm::DenseMap<int64_t, llvm::BitVector> parts;
    llvm::DenseMap<int64_t, int64_t> counted;
    for (int64_t rank = 0; rank < world; ++rank) {
      int64_t color = membership.color[rank];
      auto [it, first] = parts.try_emplace(color, world);
      it->second |= holds[rank];
      counted[color] += holds[rank].count();
    }
    for (auto &[color, part] : parts)
      if (static_cast<int64_t>(part.count()) != counted[color])
        return Cover::Repeated;
    for (int64_t rank = 0; rank < world; ++rank)
      holds[rank] = parts.find(membership.color[rank])->second;
  }
  for (const llvm::BitVector &held : holds)
    if (!held.all())
      return Cover::Partial;
  return Cover::Exact;
}

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
    info[func.getArgument(grad)].counts[grad] = {};
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
      for (const auto &[grad, reductions] : flatIn.counts)
        reduced.insert(grad);
      auto groupRef = op->getAttrOfType<FlatSymbolRefAttr>("group");
      info[op->getResult(0)] =
          out.reducedOnce(lookupProcessGroup(op, groupRef));
      return;
    }
    if (auto update = dyn_cast<OptimizerOpInterface>(op)) {
      GradInfo in = flat(update.getGrad());
      // An update that averages what it makes of its gradient (Dion's
      // low-rank sync) reduces it.
      if (FlatSymbolRefAttr group = update.getGradientGroup()) {
        for (const auto &[grad, reductions] : in.counts)
          reduced.insert(grad);
        in = in.reducedOnce(lookupProcessGroup(op, group));
      }
      for (const auto &[grad, reductions] : in.counts) {
        Cover cover = reductions.empty() ? Cover::Partial : coverOf(reductions);
        if (cover == Cover::Exact)
          continue;
        reported.insert(grad);
        InFlightDiagnostic diag = op->emitError();
        if (reductions.empty()) {
          diag << "gradient '" << describe(grad)
               << "' reaches the optimizer without being reduced across "
                  "ranks: replicas would diverge";
        } else if (cover == Cover::Repeated) {
          diag << "gradient '" << describe(grad) << "' is reduced "
               << reductions.size() << " times before the optimizer";
        } else {
          diag << "gradient '" << describe(grad)
               << "' is reduced over only part of the world (";
          llvm::interleaveComma(reductions, diag, [&](ProcessGroupOp group) {
            if (group)
              diag << "@" << group.getSymName();
            else
              diag << "an undeclared group";
          });
          diag << ") before the optimizer: replicas would diverge";
        }
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
