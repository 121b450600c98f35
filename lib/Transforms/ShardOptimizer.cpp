//===- ShardOptimizer.cpp - ZeRO stages 1, 2 and 3 --------------*- C++ -*-===//
//
// --distopt-shard-optimizer: each rank keeps and updates only its part of the
// optimizer state (stage 1), receives only its part of the reduced gradients
// (stage 2), and keeps only its part of the parameters (stage 3).
//
// flat (DeepSpeed, Megatron): the tensors of a group of like updates are laid
// out in one flat buffer padded to a multiple of N chunks; rank r owns chunk r:
// reduce(-scatter) -> update the chunk -> all_gather.
// greedy (ZeroRedundancyOptimizer, OSS): whole parameters are given to ranks,
// largest first, each to the least loaded rank; the owner updates them inside
// distopt.owned_by and broadcasts the result. Each rank's state lives in one
// buffer as large as the most loaded rank's.
//
// The step's signature changes: sharded arguments and results replace the
// per-parameter ones (appended at the end, with their layout as attributes).
//
//===----------------------------------------------------------------------===//

#include "ShardOptimizer.h"
#include "MeshGroups.h"
#include "distopt/Dialect/DistOpt/Analysis/StepStructure.h"
#include "distopt/Dialect/DistOpt/IR/DistOptOps.h"
#include "distopt/Dialect/DistOpt/IR/StepABI.h"

#include "distopt/Transforms/Passes.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/IRMapping.h"
#include "mlir/IR/Matchers.h"
#include "llvm/ADT/BitVector.h"
#include "llvm/ADT/STLExtras.h"

#include <numeric>

namespace mlir::distopt {
#define GEN_PASS_DEF_SHARDOPTIMIZERPASS
#include "distopt/Transforms/Passes.h.inc"
} // namespace mlir::distopt

using namespace mlir;
using namespace mlir::distopt;
using namespace mlir::distopt::zero;

namespace {

struct ShardOptimizerPass
    : public distopt::impl::ShardOptimizerPassBase<ShardOptimizerPass> {
  using ShardOptimizerPassBase::ShardOptimizerPassBase;

  LogicalResult initialize(MLIRContext *context) override {
    Location loc = UnknownLoc::get(context);
    if (stage == 0 && !shardGroup.empty())
      return emitError(loc) << "--distopt-shard-optimizer: hybrid sharding "
                               "(shard-group, the pipeline's "
                               "hybrid-shard-size) needs stage 1, 2 or 3 "
                               "(the pipeline's zero-stage)";
    bool anyRate = updateGflops != 0 || latencyUs != 0 || bandwidthGbPerS != 0;
    if (anyRate && !(updateGflops > 0 && latencyUs > 0 && bandwidthGbPerS > 0))
      return emitError(loc) << "--distopt-shard-optimizer: update-gflops, "
                               "latency-us and bandwidth-gb-per-s are given "
                               "together, each positive";
    if (anyRate && (stage == 0 || stage == 3 || !shardGroup.empty()))
      return emitError(loc)
             << "--distopt-shard-optimizer: update-gflops, latency-us and "
                "bandwidth-gb-per-s choose between owners and gathering (or "
                "Dion's blocks of rows), "
                "which only stages 1 and 2 without hybrid sharding have (the "
                "pipeline's zero-stage, hybrid-shard-size)";
    if (anyRate && matrixPlan != MatrixPlan::Auto)
      return emitError(loc) << "--distopt-shard-optimizer: update-gflops, "
                               "latency-us and bandwidth-gb-per-s choose "
                               "matrix-plan=auto's plans; matrix-plan is "
                               "forced here";
    if (stage < 1 || stage > 3)
      return emitError(loc) << "--distopt-shard-optimizer: stage must be 1, 2 "
                               "or 3, got "
                            << stage.getValue();
    if (strategy == ZeroStrategy::Greedy && stage == 3)
      return emitError(loc) << "--distopt-shard-optimizer: strategy=greedy "
                               "shards stages 1 and 2; use strategy=flat for "
                               "stage 3";
    if (shardGroup.empty() != replicateGroup.empty())
      return emitError(loc) << "--distopt-shard-optimizer: hybrid sharding "
                               "takes both shard-group and replicate-group";
    if (!shardGroup.empty() && strategy == ZeroStrategy::Greedy)
      return emitError(loc) << "--distopt-shard-optimizer: hybrid sharding "
                               "(shard-group) is built for strategy=flat";
    if (alignment < 1 || !llvm::isPowerOf2_64(alignment) || alignment % 4 != 0)
      return emitError(loc) << "--distopt-shard-optimizer: alignment must be "
                               "a power of two of at least 4 bytes, got "
                            << alignment.getValue();
    return success();
  }

  void runOnOperation() override;

private:
  /// Every update of `func` that can be sharded, analysed; failure (with
  /// an error) where one cannot.
  LogicalResult collectUpdates(func::FuncOp func,
                               SmallVectorImpl<Update> &updates);
  FailureOr<Update> analyze(func::FuncOp func, Operation *op,
                            const StepStructure &structure);
  /// The return without the updates' old results, with the shards'.
  LogicalResult rewriteResults(func::FuncOp func,
                               MutableArrayRef<Update> updates,
                               Sharder &sharder);
  LogicalResult eraseDeadArguments(func::FuncOp func,
                                   MutableArrayRef<Update> updates,
                                   unsigned firstNewArg);
  LogicalResult checkSpanningOps(MutableArrayRef<Update> updates);
  LogicalResult restoreDominance(func::FuncOp func);
  LogicalResult lookupHybridGroups(func::FuncOp func, int64_t world,
                                   FlatSymbolRefAttr &shard,
                                   FlatSymbolRefAttr &replicate);
};

} // namespace

/// Hybrid sharding's groups, named by the options, of the gradients' world.
LogicalResult
ShardOptimizerPass::lookupHybridGroups(func::FuncOp func, int64_t world,
                                       FlatSymbolRefAttr &shard,
                                       FlatSymbolRefAttr &replicate) {
  auto lookup = [&](StringRef option, StringRef name) -> ProcessGroupOp {
    auto ref = FlatSymbolRefAttr::get(func.getContext(), name);
    ProcessGroupOp group = lookupProcessGroup(func, ref);
    if (!group)
      func.emitError() << "--distopt-shard-optimizer: " << option << "=" << name
                       << " names no distopt.process_group (run "
                          "--distopt-hybrid-mesh first)";
    else if (group.getWorldSize() != world)
      group.emitError() << "--distopt-shard-optimizer: @" << name
                        << " is part of a world of " << group.getWorldSize()
                        << " ranks, but the gradients are reduced over "
                        << world;
    else
      return group;
    return {};
  };
  ProcessGroupOp shardOp = lookup("shard-group", shardGroup);
  if (!shardOp)
    return failure();
  ProcessGroupOp replicateOp = lookup("replicate-group", replicateGroup);
  if (!replicateOp)
    return failure();
  if (failed(verifyHybridLayout(shardOp, replicateOp, world)))
    return failure();
  // One shard group: plain ZeRO over it (nothing to all-reduce across).
  shard = FlatSymbolRefAttr::get(shardOp);
  if (replicateOp.getSize() > 1)
    replicate = FlatSymbolRefAttr::get(replicateOp);
  return success();
}

/// The updates ZeRO shards: not those that communicate themselves, which
/// are sharded already or keep whole state on every rank (Dion's blocks
/// of rows; its low-rank sync, averaging what it makes of its own
/// gradient).
static bool isUpdate(Operation *op) {
  auto update = dyn_cast<OptimizerOpInterface>(op);
  return update && !communicates(op);
}

/// Whether every use of `value` is the function's return.
static bool onlyReturned(Value value) {
  return llvm::all_of(value.getUsers(), [](Operation *user) {
    return isa<func::ReturnOp>(user);
  });
}

/// Why a gradient that reaches its update from `grad` cannot be sharded:
/// what the step lacks (the pipeline has run the passes before this one).
static std::string unreducedGradient(Value grad) {
  std::string from;
  std::string advice = "reduce it with a distopt.all_reduce of its own "
                       "before its update";
  if (auto arg = dyn_cast<BlockArgument>(grad)) {
    from = "the step's argument #" + std::to_string(arg.getArgNumber()) +
           ", never reduced";
  } else if (isa<BucketUnpackOp>(grad.getDefiningOp())) {
    from = "a distopt.bucket_unpack (a bucket packed by hand)";
    advice = "reduce each gradient with a distopt.all_reduce of its own and "
             "let the pipeline bucket them (--distopt-bucketize runs after "
             "sharding)";
  } else {
    from = "'" + grad.getDefiningOp()->getName().getStringRef().str() + "'";
  }
  return "its gradient comes from " + from +
         ", not from a distopt.all_reduce of its own (which ZeRO splits into "
         "a reduce_scatter; between the two only a division by a constant, "
         "element-wise ops (" +
         describeElementwiseLinks() +
         ") and distopt.clip_grad_norm may come): " + advice;
}

FailureOr<Update> ShardOptimizerPass::analyze(func::FuncOp func, Operation *op,
                                              const StepStructure &structure) {
  Update u;
  u.op = op;
  auto fail = [&](const Twine &why) {
    return op->emitError() << "cannot shard '" << op->getName() << "': " << why;
  };
  Block &entry = func.getBody().front();
  auto isEntryArg = [&](Value v) {
    auto arg = dyn_cast<BlockArgument>(v);
    return arg && arg.getOwner() == &entry;
  };

  // An update that reads the whole matrix runs whole on one owner, on
  // every rank from gathered chunks, or (Dion) in blocks of rows
  // (matrix-plan); stage 3 and hybrid sharding keep only chunks of each
  // parameter, so no owner.
  if (!cast<OptimizerOpInterface>(op).isElementwise() &&
      (stage == 3 || !shardGroup.empty())) {
    StringRef where = stage == 3 ? "stage 3 keeps only a chunk of each "
                                   "parameter on a rank"
                                 : "hybrid sharding (shard-group) lays "
                                   "parameters out in chunks only";
    if (matrixPlan == MatrixPlan::Owner)
      return fail("its update reads the whole matrix, and " + where +
                  (rowShardable(op) ? " (matrix-plan=lowrank updates it in "
                                      "blocks of rows)"
                                    : " (matrix-plan=gather updates it "
                                      "whole on every rank)"));
    if (!statesShapedAsParam(op) && !rowShardable(op))
      return fail("its update reads the whole matrix and keeps state of "
                  "another shape, and " +
                  where +
                  " (stages 1 and 2 update each matrix whole on the rank "
                  "that owns it)");
    if (rowShardable(op) && !hasRows(op))
      return fail("its matrix has no elements to cut into blocks of rows, "
                  "and " +
                  where +
                  " (stages 1 and 2 keep it whole on an owner; or give it "
                  "a group of its own)");
  }
  Value param = op->getOperand(0);
  StringRef role =
      isEntryArg(param)
          ? abi::getArgRole(func, cast<BlockArgument>(param).getArgNumber())
          : StringRef();
  if (role != abi::kParam && role != abi::kMainParam)
    return fail("its parameter must be an argument of the step function "
                "with role param or main_param");
  u.param = cast<BlockArgument>(param);
  u.paramIsMain = role == abi::kMainParam;
  u.name = abi::getArgName(func, u.param.getArgNumber());

  // The gradient: reduced, then possibly divided, converted, unscaled and
  // clipped, in this order (its chain, nearest the update first); each
  // step on the way has no other use (the reduction's are below).
  const GradientChain &chain = *structure.chainOf(op);
  size_t at = 0;
  auto next = [&](GradientLink::Kind kind) -> const GradientLink * {
    if (at < chain.links.size() && chain.links[at].kind == kind)
      return &chain.links[at++];
    return nullptr;
  };
  Value grad = op->getOperand(1);
  // (A division right after the reduction is checked with it.)
  auto onlyLink = [](Value v) {
    return v.hasOneUse() || v.getDefiningOp<AllReduceOp>() ||
           v.getDefiningOp<arith::DivFOp>() || matchConstantDivision(v);
  };
  if (!onlyLink(grad))
    return fail("its gradient has other uses than the update");
  if (const GradientLink *clip = next(GradientLink::Kind::Clip)) {
    u.clip = cast<ClipGradNormOp>(clip->op);
    if (u.clip.getGroupAttr())
      return fail("its gradient is clipped over a group already (the "
                  "step is sharded by hand)");
    u.clipIndex = clip->index;
    grad = clip->input;
    if (!onlyLink(grad))
      return fail("the gradient it clips has other uses than the clipping");
  }
  // Element-wise ops, applied to each rank's part as they come: what
  // they read besides the gradient must not depend on what sharding moves.
  while (const GradientLink *link = next(GradientLink::Kind::Elementwise)) {
    for (OpOperand &operand : link->op->getOpOperands().drop_front())
      if (!isEntryArg(operand.get()) &&
          !matchPattern(operand.get(), m_Constant()))
        return fail("its gradient passes through '" +
                    link->op->getName().getStringRef() + "', whose operand #" +
                    Twine(operand.getOperandNumber()) +
                    " is neither a step argument nor a constant");
    u.elementwise.insert(u.elementwise.begin(), link->op);
    grad = link->input;
    if (!onlyLink(grad))
      return fail("the gradient '" + link->op->getName().getStringRef() +
                  "' reads has other uses");
  }
  // A mean over micro-batches: a division by a splat constant, possibly
  // done in a wider type (ExactDivision.h).
  if (const GradientLink *division = next(GradientLink::Kind::Division)) {
    u.divide = division->ops.front();
    u.divisionOps.assign(division->ops.begin(), division->ops.end());
    u.divisor = division->divisor;
    grad = division->input;
    if (!onlyLink(grad))
      return fail("the gradient it divides has other uses");
  }
  if (const GradientLink *reduction = next(GradientLink::Kind::Reduction))
    u.reduction = dyn_cast<AllReduceOp>(reduction->op);
  if (!u.reduction)
    return fail(unreducedGradient(grad));
  // Shards are laid out over the world's ranks (layouts, checkpoints): a
  // reduction over part of the world would be hybrid sharding.
  ProcessGroupOp group =
      lookupProcessGroup(u.reduction, u.reduction.getGroupAttr());
  if (group && !group.isWorld())
    return fail("its gradient is reduced over @" +
                Twine(u.reduction.getGroupAttr().getValue()) +
                ", part of the world: shards are laid out over the world's "
                "ranks (for hybrid sharding, reduce over the world and give "
                "shard-group and replicate-group)");
  // Besides the chain to the update, the reduced gradient may be checked
  // for overflow.
  SmallVector<Operation *> readers(u.reduction->getUsers());
  if (u.divide)
    llvm::append_range(readers, u.divide->getUsers());
  for (Operation *user : readers) {
    if (user == op || user == u.clip ||
        llvm::is_contained(u.elementwise, user) ||
        llvm::is_contained(u.divisionOps, user))
      continue;
    auto check = dyn_cast<AllFiniteOp>(user);
    if (!check || (u.finiteCheck && u.finiteCheck != check))
      return fail("its reduced gradient has other uses than the update and "
                  "one distopt.all_finite");
    u.finiteCheck = check;
  }

  // A new value, possibly kept only if `keep` holds: arith.select %keep,
  // new, old. Returns what stands for the new value afterwards.
  auto keptValue = [&](Value updated, Value old) -> FailureOr<Value> {
    if (!updated.hasOneUse())
      return updated;
    auto select = dyn_cast<arith::SelectOp>(*updated.user_begin());
    if (!select || select.getTrueValue() != updated ||
        select.getFalseValue() != old || !isa<TensorType>(select.getType()))
      return updated;
    if (u.keep && u.keep != select.getCondition())
      return failure();
    u.keep = select.getCondition();
    u.selects.push_back(select);
    return select.getResult();
  };
  // The old values are read only by the update and the selects.
  auto onlyUpdated = [&](Value old) {
    return llvm::all_of(old.getUsers(), [&](Operation *user) {
      return user == op || llvm::is_contained(u.selects, user);
    });
  };

  for (auto [k, state] :
       llvm::enumerate(cast<OptimizerOpInterface>(op).getState())) {
    if (!isEntryArg(state) ||
        abi::getArgRole(func, cast<BlockArgument>(state).getArgNumber()) !=
            abi::kState)
      return fail("state operand #" + Twine(k) +
                  " must be a step argument with role state");
    u.state.push_back(cast<BlockArgument>(state));
  }
  FailureOr<Value> newParam = keptValue(op->getResult(0), u.param);
  if (failed(newParam))
    return fail("its results are kept under different conditions");
  for (unsigned k = 1; k < op->getNumResults(); ++k) {
    FailureOr<Value> newState = keptValue(op->getResult(k), u.state[k - 1]);
    if (failed(newState))
      return fail("its results are kept under different conditions");
    if (!onlyReturned(*newState))
      return fail("its new state must only be returned (or kept by "
                  "arith.select and returned)");
    if (!onlyUpdated(u.state[k - 1]))
      return fail("state operand #" + Twine(k - 1) +
                  " has other uses than the update");
  }
  // A main parameter is optimizer state; a model parameter may have other
  // uses (at stage 3 they are given the parameter gathered from its shards).
  if (u.paramIsMain && !onlyUpdated(u.param))
    return fail("its main parameter has other uses than the update");
  if (u.keep && u.selects.size() != op->getNumResults())
    return fail("only some of its results are kept by arith.select");

  for (Operation *user : (*newParam).getUsers()) {
    if (isa<func::ReturnOp>(user))
      continue;
    auto trunc = dyn_cast<arith::TruncFOp>(user);
    if (!trunc || !onlyReturned(trunc.getResult()))
      return fail("its new parameter must only be returned, or rounded by "
                  "arith.truncf and returned");
    u.downcasts.push_back(trunc);
  }
  if (u.paramIsMain) {
    for (unsigned i = 0, e = func.getNumArguments(); i < e; ++i)
      if (abi::getArgRole(func, i) == abi::kParam &&
          abi::getArgName(func, i) == u.name)
        u.modelParam = func.getArgument(i);
    if (stage == 3 && !u.modelParam)
      return fail("stage 3 needs the model copy of main parameter '" + u.name +
                  "' (an argument with role param and that name)");
  }
  if (u.paramIsMain && !u.downcasts.empty() && !u.modelParam)
    return fail("the model copy of main parameter '" + u.name +
                "' (an argument with role param and that name) is missing");
  if (stage == 3 && !u.paramIsMain && u.downcasts.size())
    return fail("stage 3 with arith.truncf of a model parameter needs main "
                "parameters");
  return u;
}

/// What spans several updates (the overflow check, clipping by the global
/// norm) is rebuilt from the parts of the reduced gradients each rank
/// holds (ShardComposed.cpp): it must take nothing else.
LogicalResult
ShardOptimizerPass::checkSpanningOps(MutableArrayRef<Update> updates) {
  // Each operand of a spanning op is claimed by the one update whose
  // gradient it is; the updates' reductions are distinct and on one group.
  llvm::DenseMap<std::pair<Operation *, unsigned>, const Update *> claimed;
  llvm::DenseMap<Operation *, const Update *> reductionOf;
  llvm::DenseMap<Operation *, FlatSymbolRefAttr> groupOf;
  auto claim = [&](Operation *op, unsigned operand,
                   Update &u) -> LogicalResult {
    auto [it, fresh] = claimed.try_emplace({op, operand}, &u);
    auto [g, first] = groupOf.try_emplace(op, u.reduction.getGroupAttr());
    if (!first && g->second != u.reduction.getGroupAttr())
      return op->emitError()
             << "cannot shard '" << op->getName()
             << "': it spans gradients reduced over different process groups ("
             << g->second << " and " << u.reduction.getGroupAttr() << ")";
    if (!fresh)
      return op->emitError() << "cannot shard '" << op->getName()
                             << "': two updates read its input #" << operand;
    return success();
  };
  for (Update &u : updates) {
    auto [it, fresh] = reductionOf.try_emplace(u.reduction, &u);
    if (!fresh)
      return u.op->emitError()
             << "cannot shard '" << u.op->getName()
             << "': its gradient comes from the same distopt.all_reduce as "
                "another update's";
    if (u.clip && failed(claim(u.clip, u.clipIndex, u)))
      return failure();
    if (u.finiteCheck)
      for (OpOperand &input : u.finiteCheck->getOpOperands())
        if (input.get() == u.reduction.getResult() ||
            (u.divide && input.get() == u.divide->getResult(0)))
          if (failed(claim(u.finiteCheck, input.getOperandNumber(), u)))
            return failure();
    if (u.keep && (!u.finiteCheck || u.keep != u.finiteCheck->getResult(0)))
      return u.op->emitError()
             << "cannot shard '" << u.op->getName()
             << "': its results are kept by arith.select under a condition "
                "other than the distopt.all_finite of its gradient";
  }
  for (auto [op, group] : groupOf) {
    // An overflow check agreed over a group already may read more (the own
    // gradients of Dion's low-rank sync): that part stays whole, checked
    // over its group (composeChunks).
    auto check = dyn_cast<AllFiniteOp>(op);
    if (check && check.getGroupAttr())
      continue;
    unsigned unclaimed = 0;
    for (unsigned i = 0; i < op->getNumOperands(); ++i)
      unclaimed += !claimed.count({op, i});
    if (unclaimed)
      return op->emitError()
             << "cannot shard '" << op->getName() << "': " << unclaimed
             << " of its " << op->getNumOperands()
             << " inputs are not gradients of the updates "
                "being sharded";
  }
  return success();
}

/// Users of the rebuilt overflow check (the loss scale's update, the
/// skipped flag) now read a value computed at the end of the step: they
/// move there, in order. Only ops without side effects may move.
LogicalResult ShardOptimizerPass::restoreDominance(func::FuncOp func) {
  Block &entry = func.getBody().front();
  Operation *terminator = entry.getTerminator();
  SmallVector<Operation *> late;
  for (Operation &op : entry.without_terminator()) {
    // Its operands, and those of the ops nested in it.
    bool usesLater = false;
    op.walk([&](Operation *inner) {
      for (Value v : inner->getOperands()) {
        Operation *def = v.getDefiningOp();
        if (def && def->getBlock() == &entry &&
            (op.isBeforeInBlock(def) || llvm::is_contained(late, def)))
          usesLater = true;
      }
    });
    if (!usesLater)
      continue;
    if (!isMemoryEffectFree(&op))
      return op.emitError()
             << "cannot shard: '" << op.getName()
             << "' reads the sharded overflow check or norm before they "
                "are computed, and has side effects, so it cannot move "
                "after them";
    late.push_back(&op);
  }
  for (Operation *op : late)
    op->moveBefore(terminator);
  return success();
}

void ShardOptimizerPass::runOnOperation() {
  func::FuncOp func = getOperation();
  if (func.isExternal())
    return;
  SmallVector<Update, 0> updates;
  if (failed(collectUpdates(func, updates)))
    return signalPassFailure();
  if (updates.empty())
    return;
  SmallVector<SmallVector<Update *>> groups;
  for (Update &u : updates) {
    auto it = llvm::find_if(groups, [&](const SmallVector<Update *> &g) {
      return shardTogether(*g.front(), u);
    });
    if (it == groups.end())
      groups.push_back({&u});
    else
      it->push_back(&u);
  }

  if (failed(checkSpanningOps(updates)))
    return signalPassFailure();
  FlatSymbolRefAttr shardRef, replicateRef;
  if (!shardGroup.empty()) {
    int64_t world =
        lookupProcessGroup(func, updates.front().reduction.getGroupAttr())
            .getSize();
    if (failed(lookupHybridGroups(func, world, shardRef, replicateRef)))
      return signalPassFailure();
  }
  Sharder sharder(stage, alignment, shardRef, replicateRef,
                  /*balanceFlops=*/ownerBalance == OwnerBalance::Flops);
  unsigned firstNewArg = func.getNumArguments();
  SmallVector<SmallVector<Update *>> planned;
  SmallVector<Sharder::Plan> plans;
  bool hybrid = static_cast<bool>(shardRef);
  planGroups(func, groups,
             PlanOptions{strategy, matrixPlan, stage, hybrid, updateGflops,
                         latencyUs, bandwidthGbPerS,
                         ownerBalance == OwnerBalance::Flops},
             planned, plans);
  sharder.shard(func, planned, plans);
  if (failed(rewriteResults(func, updates, sharder)) ||
      failed(eraseDeadArguments(func, updates, firstNewArg)))
    return signalPassFailure();
}

LogicalResult
ShardOptimizerPass::collectUpdates(func::FuncOp func,
                                   SmallVectorImpl<Update> &updates) {
  SmallVector<Operation *> ops;
  func.walk([&](Operation *op) {
    if (isUpdate(op))
      ops.push_back(op);
  });
  if (ops.empty())
    return success();
  // The signature and the return are rewritten in one place.
  if (!func.getBody().hasOneBlock())
    return func.emitError()
           << "cannot shard: @" << func.getSymName() << " has "
           << func.getBody().getBlocks().size()
           << " blocks; --distopt-shard-optimizer takes a step of one block";
  // One rank holds everything: nothing to shard (and the reductions have
  // folded away). Say so rather than do nothing silently.
  auto module = func->getParentOfType<ModuleOp>();
  auto world = module ? module->getAttrOfType<IntegerAttr>(abi::kWorldSize)
                      : IntegerAttr();
  if (world && world.getInt() == 1) {
    func.emitWarning() << "--distopt-shard-optimizer: the step is compiled "
                          "for one rank; nothing to shard";
    return success();
  }
  bool ok = true;
  StepStructure structure(func);
  for (Operation *op : ops) {
    if (op->getParentOp() != func) {
      op->emitError() << "cannot shard '" << op->getName()
                      << "': it is nested in '" << op->getParentOp()->getName()
                      << "'";
      ok = false;
      continue;
    }
    FailureOr<Update> update = analyze(func, op, structure);
    if (failed(update))
      ok = false;
    else
      updates.push_back(*update);
  }
  if (!ok)
    updates.clear();
  return success(ok);
}

LogicalResult ShardOptimizerPass::rewriteResults(
    func::FuncOp func, MutableArrayRef<Update> updates, Sharder &sharder) {
  // The old per-parameter results go; the sharded state's are added.
  auto ret = cast<func::ReturnOp>(func.getBody().front().getTerminator());
  llvm::BitVector deadResults(ret.getNumOperands());
  for (Update &u : updates) {
    SmallVector<Value> replaced(u.op->getResults());
    for (arith::SelectOp select : u.selects)
      replaced.push_back(select.getResult());
    for (Value v : replaced)
      for (OpOperand &use : v.getUses())
        if (use.getOwner() == ret)
          deadResults.set(use.getOperandNumber());
    for (arith::TruncFOp trunc : u.downcasts)
      for (OpOperand &use : trunc.getResult().getUses())
        if (use.getOwner() == ret && stage == 3)
          deadResults.set(use.getOperandNumber());
  }
  SmallVector<Value> operands;
  for (auto [i, v] : llvm::enumerate(ret.getOperands()))
    if (!deadResults.test(i))
      operands.push_back(v);
  for (Sharder::NewResult &r : sharder.newResults)
    operands.push_back(r.value);
  OpBuilder builder(ret);
  func::ReturnOp::create(builder, ret.getLoc(), operands);
  ret.erase();
  for (Operation *op : sharder.toErase)
    op->erase();
  if (failed(restoreDominance(func)))
    return failure();
  (void)func.eraseResults(deadResults);
  for (Sharder::NewResult &r : sharder.newResults)
    (void)func.insertResult(func.getNumResults(), r.value.getType(), r.attrs);
  return success();
}

LogicalResult ShardOptimizerPass::eraseDeadArguments(
    func::FuncOp func, MutableArrayRef<Update> updates, unsigned firstNewArg) {
  // The arguments sharding replaced: state, main parameters (and, at stage
  // 3, the parameters), none of those it added.
  llvm::BitVector deadArgs(func.getNumArguments());
  for (Update &u : updates) {
    for (BlockArgument arg : u.state)
      deadArgs.set(arg.getArgNumber());
    if (u.paramIsMain || stage == 3)
      deadArgs.set(u.param.getArgNumber());
    if (stage == 3 && u.modelParam)
      deadArgs.set(u.modelParam.getArgNumber());
  }
  for (unsigned i = firstNewArg; i < func.getNumArguments(); ++i)
    deadArgs.reset(i);
  for (unsigned i : deadArgs.set_bits())
    if (!func.getArgument(i).use_empty())
      return func.emitError() << "cannot shard: argument #" << i
                              << " is still used after sharding";
  (void)func.eraseArguments(deadArgs);
  return success();
}
