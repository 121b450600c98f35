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
#include "distopt/Dialect/DistOpt/IR/DistOptOps.h"
#include "distopt/Dialect/DistOpt/IR/StepABI.h"

#include "distopt/Transforms/Passes.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/IRMapping.h"
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

namespace mlir::distopt::zero {

RankedTensorType flatType(int64_t size, Type element) {
  return RankedTensorType::get({size}, element);
}

/// `value` converted, as Update::convert does, to `type`'s element type.
Value convertGradient(OpBuilder &b, Location loc, Value value,
                      RankedTensorType type) {
  Type from = getElementTypeOrSelf(value.getType());
  auto target =
      cast<RankedTensorType>(value.getType()).clone(type.getElementType());
  if (from.getIntOrFloatBitWidth() < type.getElementTypeBitWidth())
    return arith::ExtFOp::create(b, loc, target, value);
  return arith::TruncFOp::create(b, loc, target, value);
}

/// The attribute describing where each tensor of a group lives.
ArrayAttr layoutAttr(Builder &builder, ArrayRef<Update *> group,
                     ArrayRef<int64_t> offsets, ArrayRef<int64_t> owners) {
  SmallVector<Attribute> entries;
  for (auto [i, u] : llvm::enumerate(group))
    entries.push_back(abi::layoutEntry(
        builder, u->name, offsets[i], u->paramType().getShape(),
        owners.empty() ? std::nullopt : std::optional<int64_t>(owners[i])));
  return builder.getArrayAttr(entries);
}

/// The torch state key of a state argument ("exp_avg" of "w.exp_avg").
std::string stateKey(func::FuncOp func, const Update &u, unsigned k) {
  StringRef name = abi::getArgName(func, u.state[k].getArgNumber());
  if (name.consume_front(u.name) && name.consume_front("."))
    return name.str();
  return ("state" + Twine(k)).str();
}

BlockArgument Sharder::addArgument(func::FuncOp func, Type type, StringRef role,
                                   StringRef name,
                                   ArrayRef<NamedAttribute> extra) {
  Builder builder(func.getContext());
  NamedAttrList attrs;
  attrs.set(abi::kRole, builder.getStringAttr(role));
  attrs.set(abi::kName, builder.getStringAttr(name));
  for (NamedAttribute attr : extra)
    attrs.set(attr.getName(), attr.getValue());
  unsigned index = func.getNumArguments();
  (void)func.insertArgument(index, type, attrs.getDictionary(func.getContext()),
                            func.getLoc());
  return func.getArgument(index);
}

} // namespace mlir::distopt::zero

namespace {

struct ShardOptimizerPass
    : public distopt::impl::ShardOptimizerPassBase<ShardOptimizerPass> {
  using ShardOptimizerPassBase::ShardOptimizerPassBase;

  LogicalResult initialize(MLIRContext *context) override {
    Location loc = UnknownLoc::get(context);
    if (stage < 1 || stage > 3)
      return emitError(loc) << "--distopt-shard-optimizer: stage must be 1, 2 "
                               "or 3, got "
                            << stage.getValue();
    if (strategy == ZeroStrategy::Greedy && stage == 3)
      return emitError(loc) << "--distopt-shard-optimizer: strategy=greedy "
                               "shards stages 1 and 2; use strategy=flat for "
                               "stage 3";
    if (alignment < 1 || !llvm::isPowerOf2_64(alignment) || alignment % 4 != 0)
      return emitError(loc) << "--distopt-shard-optimizer: alignment must be "
                               "a power of two of at least 4 bytes, got "
                            << alignment.getValue();
    return success();
  }

  void runOnOperation() override;

private:
  FailureOr<Update> analyze(func::FuncOp func, Operation *op);
};

} // namespace

static bool isUpdate(Operation *op) {
  return isa<SGDUpdateOp, AdamUpdateOp, AdamWUpdateOp, RMSpropUpdateOp,
             AdagradUpdateOp>(op);
}

/// Whether every use of `value` is the function's return.
static bool onlyReturned(Value value) {
  return llvm::all_of(value.getUsers(), [](Operation *user) {
    return isa<func::ReturnOp>(user);
  });
}

FailureOr<Update> ShardOptimizerPass::analyze(func::FuncOp func,
                                              Operation *op) {
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
  // A main parameter is optimizer state; a model parameter may have other
  // uses (at stage 3 they are given the parameter gathered from its shards).
  if (u.paramIsMain && !u.param.hasOneUse())
    return fail("its main parameter has other uses than the update");

  Value grad = op->getOperand(1);
  if (isa_and_present<arith::ExtFOp, arith::TruncFOp>(grad.getDefiningOp())) {
    u.convert = grad.getDefiningOp();
    grad = u.convert->getOperand(0);
  }
  u.reduction = grad.getDefiningOp<AllReduceOp>();
  if (!u.reduction)
    return fail("its gradient must come straight from a distopt.all_reduce "
                "(possibly through arith.extf or arith.truncf): run "
                "--distopt-fuse-div-into-allreduce before this pass and "
                "--distopt-bucketize after it");
  if (!u.reduction->hasOneUse() || (u.convert && !u.convert->hasOneUse()))
    return fail("its reduced gradient has other uses than the update");

  unsigned numState = op->getNumOperands() - 4;
  for (unsigned k = 0; k < numState; ++k) {
    Value state = op->getOperand(2 + k);
    if (!isEntryArg(state) ||
        abi::getArgRole(func, cast<BlockArgument>(state).getArgNumber()) !=
            abi::kState ||
        !state.hasOneUse())
      return fail("state operand #" + Twine(k) +
                  " must be a step argument with role state used only by "
                  "this update");
    u.state.push_back(cast<BlockArgument>(state));
  }
  for (unsigned k = 1; k < op->getNumResults(); ++k)
    if (!onlyReturned(op->getResult(k)))
      return fail("its new state must only be returned");

  for (Operation *user : op->getResult(0).getUsers()) {
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

void ShardOptimizerPass::runOnOperation() {
  func::FuncOp func = getOperation();
  if (func.isExternal())
    return;
  SmallVector<Operation *> ops;
  func.walk([&](Operation *op) {
    if (isUpdate(op))
      ops.push_back(op);
  });
  if (ops.empty())
    return;
  // One rank holds everything: nothing to shard (and the reductions have
  // folded away). Say so rather than do nothing silently.
  auto module = func->getParentOfType<ModuleOp>();
  auto world = module ? module->getAttrOfType<IntegerAttr>(abi::kWorldSize)
                      : IntegerAttr();
  if (world && world.getInt() == 1) {
    func.emitWarning() << "--distopt-shard-optimizer: the step is compiled "
                          "for one rank; nothing to shard";
    return;
  }

  SmallVector<Update> updates;
  bool ok = true;
  for (Operation *op : ops) {
    if (op->getParentOp() != func) {
      op->emitError() << "cannot shard '" << op->getName()
                      << "': it is nested in '" << op->getParentOp()->getName()
                      << "'";
      ok = false;
      continue;
    }
    FailureOr<Update> update = analyze(func, op);
    if (failed(update))
      ok = false;
    else
      updates.push_back(*update);
  }
  if (!ok)
    return signalPassFailure();

  // Group like updates: same optimizer and hyperparameters, learning rate
  // and step, element types and reduction.
  auto sameGroup = [](Update a, Update b) {
    Operation *x = a.op, *y = b.op;
    return x->getName() == y->getName() &&
           x->getAttrDictionary() == y->getAttrDictionary() &&
           x->getPropertiesAsAttribute() == y->getPropertiesAsAttribute() &&
           x->getOperand(x->getNumOperands() - 2) ==
               y->getOperand(y->getNumOperands() - 2) &&
           x->getOperand(x->getNumOperands() - 1) ==
               y->getOperand(y->getNumOperands() - 1) &&
           a.paramType().getElementType() == b.paramType().getElementType() &&
           a.reduction.getType().getElementType() ==
               b.reduction.getType().getElementType() &&
           a.paramIsMain == b.paramIsMain &&
           bool(a.convert) == bool(b.convert) &&
           a.downcasts.size() == b.downcasts.size() &&
           a.reduction.getGroupAttr() == b.reduction.getGroupAttr() &&
           a.reduction.getReductionAttr() == b.reduction.getReductionAttr() &&
           a.reduction.getScaleAttr() == b.reduction.getScaleAttr() &&
           a.reduction.getWireTypeAttr() == b.reduction.getWireTypeAttr();
  };
  SmallVector<SmallVector<Update *>> groups;
  for (Update &u : updates) {
    auto it = llvm::find_if(groups, [&](const SmallVector<Update *> &g) {
      return sameGroup(*g.front(), u);
    });
    if (it == groups.end())
      groups.push_back({&u});
    else
      it->push_back(&u);
  }

  Sharder sharder(stage, alignment);
  unsigned firstNewArg = func.getNumArguments();
  for (auto [index, group] : llvm::enumerate(groups)) {
    LogicalResult result = strategy == ZeroStrategy::Flat
                               ? sharder.shardFlat(func, group, index)
                               : sharder.shardGreedy(func, group, index);
    if (failed(result))
      return signalPassFailure();
  }

  // The old per-parameter results, and arguments that nothing uses anymore.
  auto ret = cast<func::ReturnOp>(func.getBody().front().getTerminator());
  llvm::BitVector deadResults(ret.getNumOperands());
  for (Update &u : updates) {
    for (Value v : u.op->getResults())
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
  (void)func.eraseResults(deadResults);
  for (Sharder::NewResult &r : sharder.newResults)
    (void)func.insertResult(func.getNumResults(), r.value.getType(), r.attrs);

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
    if (!func.getArgument(i).use_empty()) {
      func.emitError() << "cannot shard: argument #" << i
                       << " is still used after sharding";
      return signalPassFailure();
    }
  (void)func.eraseArguments(deadArgs);
}
