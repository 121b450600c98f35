//===- PowerSGD.cpp - low-rank gradient compression -------------*- C++ -*-===//
//
// --distopt-powersgd: PyTorch's powerSGD_hook as a transformation. Averaged
// gradients that PyTorch's rule finds worth compressing go through
// distopt.powersgd_all_reduce, with P, Q and the error as explicit step
// state; the others are batched into one plain all_reduce. After ZeRO flat
// sharding the same happens to the tensors packed into a reduce_scatter,
// each rank then keeping its chunk of the decompressed gradients.
//
//===----------------------------------------------------------------------===//

#include "distopt/Dialect/DistOpt/Analysis/StepStructure.h"
#include "distopt/Dialect/DistOpt/IR/DistOptOps.h"
#include "distopt/Dialect/DistOpt/IR/StepABI.h"
#include "distopt/Transforms/Bucketing.h"
#include "distopt/Transforms/Passes.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/Builders.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/DenseSet.h"

#include <cmath>
#include <limits>

namespace mlir::distopt {
#define GEN_PASS_DEF_POWERSGDPASS
#include "distopt/Transforms/Passes.h.inc"
} // namespace mlir::distopt

using namespace mlir;
using namespace mlir::distopt;

namespace {

struct PowerSGDPass : public distopt::impl::PowerSGDPassBase<PowerSGDPass> {
  using PowerSGDPassBase::PowerSGDPassBase;

  LogicalResult initialize(MLIRContext *context) override {
    Location loc = UnknownLoc::get(context);
    if (rank < 1)
      return emitError(loc) << "--distopt-powersgd: rank must be at least 1, "
                               "got "
                            << rank.getValue();
    if (!(orthogonalizationEpsilon >= 0) ||
        !std::isfinite(orthogonalizationEpsilon))
      return emitError(loc) << "--distopt-powersgd: orthogonalization-epsilon "
                               "must be finite and >= 0, got "
                            << orthogonalizationEpsilon.getValue();
    if (seed < -1)
      return emitError(loc) << "--distopt-powersgd: seed must be -1 (the "
                               "runtime's) or a non-negative number, got "
                            << seed.getValue();
    if (startIter < 0)
      return emitError(loc) << "--distopt-powersgd: start-iter must not be "
                               "negative, got "
                            << startIter.getValue();
    if (!(minCompressionRate > 0))
      return emitError(loc) << "--distopt-powersgd: min-compression-rate must "
                               "be positive, got "
                            << minCompressionRate.getValue();
    if (!std::isfinite(batchMb) || batchMb < 0)
      return emitError(loc) << "--distopt-powersgd: batch-mb must be finite "
                               "and not negative, got "
                            << batchMb.getValue();
    return success();
  }

  void runOnOperation() override;

private:
  /// A gradient to compress, and the state arguments planned for it.
  struct Plan {
    Value grad;
    int64_t rank;
    std::string name;
    unsigned firstArg = 0; // index of its P argument once inserted
  };

  /// The rank PyTorch would use for a gradient of `type`, or nullopt when it
  /// would send it uncompressed.
  std::optional<int64_t> compressionRank(RankedTensorType type) const;
  /// The state arguments of `plan`: P, Q and (with error feedback) the error.
  void planState(Plan &plan, SmallVectorImpl<Type> &types,
                 SmallVectorImpl<DictionaryAttr> &attrs);
  /// Replaces `plan.grad`'s average over `group` by PowerSGD's; returns the
  /// new averaged gradient, in the gradient's type.
  /// `reduction`: the collective it replaces; steps before start-iter
  /// average as it did (its group, its wire type).
  Value compress(OpBuilder &builder, Location loc, const Plan &plan,
                 Operation *reduction);
  std::string nameOf(Value grad);
  /// Numbers the PowerSGD ops this run made in `block` into batches of
  /// batch-mb.
  void numberBatches(Block &block);

  // The stages of runOnOperation, in order.
  /// The averages that may be compressed: of single gradients, and
  /// reduce-scatters of packed ones.
  void collectAverages();
  /// A plan per gradient worth compressing; the step number argument for
  /// start-iter.
  LogicalResult planCompressions();
  /// Every plan's state arguments, inserted in one go (one at a time would
  /// rewrite the signature once per gradient).
  void insertStateArguments();
  /// The averages replaced by PowerSGD's (or left in `uncompressed`).
  void compressAverages();
  void compressScatters();
  /// Each average back in shape where it is first used; batches numbered.
  void placeReshapes();
  /// The state's new values as results of the step.
  LogicalResult addStateResults();

  func::FuncOp func;
  SmallVector<AllReduceOp> averages;
  SmallVector<ReduceScatterOp> scatters;
  SmallVector<Plan> plans;
  DenseMap<Operation *, unsigned> planOf; // all_reduce -> its plan
  DenseMap<Value, unsigned> planOfPacked; // packed gradient -> its plan
  /// Averages (and those of packed gradients) left uncompressed.
  llvm::DenseSet<Operation *> uncompressed;
  /// The step number argument (role step), for start-iter.
  Value stepNumber;
  SmallVector<std::pair<Value, DictionaryAttr>> newResults;
  /// Per new result: the state argument it replaces.
  SmallVector<Value> replacedState;
  SmallVector<tensor::ExpandShapeOp> reshaped; // averages back in shape
  llvm::DenseSet<Operation *> created;         // this run's PowerSGD ops
  int64_t nextBatch = 0;
  unsigned unnamed = 0;
};

} // namespace

std::optional<int64_t>
PowerSGDPass::compressionRank(RankedTensorType type) const {
  // PyTorch views an n-d gradient as shape[0] x (the rest); vectors and
  // scalars are never compressed.
  if (type.getRank() < 2 || !isa<FloatType>(type.getElementType()))
    return std::nullopt;
  int64_t n = type.getDimSize(0), m = type.getNumElements() / n;
  int64_t r = std::min({n, m, static_cast<int64_t>(rank)});
  double compressed = static_cast<double>(n + m) * r;
  if (compressed * minCompressionRate < static_cast<double>(n) * m)
    return r;
  return std::nullopt;
}

void PowerSGDPass::planState(Plan &plan, SmallVectorImpl<Type> &types,
                             SmallVectorImpl<DictionaryAttr> &attrs) {
  auto type = cast<RankedTensorType>(plan.grad.getType());
  Type element = type.getElementType();
  int64_t n = type.getDimSize(0), m = type.getNumElements() / n;
  Builder b(func.getContext());
  auto add = [&](ArrayRef<int64_t> shape, StringRef suffix, StringRef init,
                 bool perRank = false) {
    types.push_back(RankedTensorType::get(shape, element));
    NamedAttrList list;
    list.set(abi::kRole, b.getStringAttr(abi::kState));
    list.set(abi::kName, b.getStringAttr(plan.name + suffix.str()));
    list.set(abi::kInit, b.getStringAttr(init));
    if (perRank)
      list.set(abi::kPerRank, b.getUnitAttr());
    attrs.push_back(list.getDictionary(b.getContext()));
  };
  // P is storage, Q starts as a seeded normal draw (the same on all ranks;
  // redrawn every step without warm start), the error starts at zero.
  add({n, plan.rank}, ".powersgd_p", "zeros");
  add({m, plan.rank}, ".powersgd_q", warmStart ? "randn" : "randn_each_step");
  if (errorFeedback)
    add({n, m}, ".powersgd_error", "zeros", /*perRank=*/true);
}

std::string PowerSGDPass::nameOf(Value grad) {
  if (auto arg = dyn_cast<BlockArgument>(grad))
    if (arg.getOwner()->isEntryBlock() &&
        arg.getOwner()->getParentOp() == func) {
      StringRef name = abi::getArgName(func, arg.getArgNumber());
      if (!name.empty())
        return name.str();
    }
  return ("powersgd" + Twine(unnamed++)).str();
}

Value PowerSGDPass::compress(OpBuilder &builder, Location loc, const Plan &plan,
                             Operation *reduction) {
  auto group = reduction->getAttrOfType<FlatSymbolRefAttr>("group");
  auto wire = reduction->getAttrOfType<TypeAttr>("wire_type");
  Value grad = plan.grad;
  auto type = cast<RankedTensorType>(grad.getType());
  SmallVector<ReassociationIndices> toMatrix;
  if (type.getRank() > 2) {
    toMatrix = {{0}, llvm::to_vector(llvm::seq<int64_t>(1, type.getRank()))};
    grad = tensor::CollapseShapeOp::create(builder, loc, grad, toMatrix);
  }
  unsigned numState = errorFeedback ? 3 : 2;
  SmallVector<Value> operands = {grad};
  for (unsigned k = 0; k < numState; ++k)
    operands.push_back(func.getArgument(plan.firstArg + k));
  SmallVector<Type> types;
  for (Value v : operands)
    types.push_back(v.getType());
  NamedAttrList attrs;
  attrs.set("group", group);
  attrs.set("rank", builder.getI64IntegerAttr(plan.rank));
  if (orthogonalizationEpsilon != 0)
    attrs.set("orthogonalization_epsilon",
              builder.getF64FloatAttr(orthogonalizationEpsilon));
  auto build = [&](OpBuilder &b) {
    auto op =
        PowerSGDAllReduceOp::create(b, loc, types, operands, attrs.getAttrs());
    created.insert(op);
    return op;
  };
  SmallVector<Value> outputs;
  if (startIter > 0) {
    // Steps up to start-iter average plainly and keep the state.
    Value after = arith::CmpIOp::create(
        builder, loc, arith::CmpIPredicate::sgt, stepNumber,
        arith::ConstantOp::create(builder, loc,
                                  builder.getI64IntegerAttr(startIter)));
    auto branch = scf::IfOp::create(builder, loc, TypeRange(types), after,
                                    /*withElseRegion=*/true);
    OpBuilder inThen = branch.getThenBodyBuilder();
    scf::YieldOp::create(inThen, loc, build(inThen)->getResults());
    OpBuilder inElse = branch.getElseBodyBuilder();
    SmallVector<Value> kept(operands);
    kept[0] = AllReduceOp::create(
        inElse, loc, grad.getType(), grad, group, wire,
        ReductionKindAttr::get(builder.getContext(), ReductionKind::Avg),
        /*scale=*/nullptr);
    scf::YieldOp::create(inElse, loc, kept);
    llvm::append_range(outputs, branch.getResults());
  } else {
    llvm::append_range(outputs, build(builder)->getResults());
  }
  for (unsigned k = 0; k < numState; ++k) {
    newResults.push_back(
        {outputs[1 + k], func.getArgAttrDict(plan.firstArg + k)});
    replacedState.push_back(func.getArgument(plan.firstArg + k));
  }
  Value reduced = outputs[0];
  if (type.getRank() > 2) {
    auto expand =
        tensor::ExpandShapeOp::create(builder, loc, type, reduced, toMatrix);
    reshaped.push_back(expand);
    reduced = expand;
  }
  return reduced;
}

void PowerSGDPass::numberBatches(Block &block) {
  SmallVector<Operation *> ops;
  for (auto op : block.getOps<PowerSGDAllReduceOp>())
    if (created.contains(op))
      ops.push_back(op);
  distopt::numberBatches(
      ops,
      [](Operation *op) -> std::pair<Attribute, Type> {
        auto powersgd = cast<PowerSGDAllReduceOp>(op);
        return {powersgd.getGroupAttr(),
                powersgd.getGrad().getType().getElementType()};
      },
      [](Operation *op) {
        return static_cast<double>(
            getShapedBytes(cast<PowerSGDAllReduceOp>(op).getGrad().getType()));
      },
      batchMb * (1 << 20), nextBatch,
      [](Operation *op, int64_t number) {
        cast<PowerSGDAllReduceOp>(op).setBatch(number);
      });
}

void PowerSGDPass::runOnOperation() {
  func = getOperation();
  if (func.isExternal())
    return;
  // This function's plans (a pass instance runs on one function after
  // another).
  averages.clear();
  scatters.clear();
  plans.clear();
  planOf.clear();
  planOfPacked.clear();
  uncompressed.clear();
  // New batch numbers follow any the step already has.
  nextBatch = 0;
  func.walk([&](PowerSGDAllReduceOp op) {
    if (op.getBatch())
      nextBatch = std::max(nextBatch, static_cast<int64_t>(*op.getBatch()) + 1);
  });
  collectAverages();
  if (failed(planCompressions()))
    return signalPassFailure();
  insertStateArguments();
  compressAverages();
  compressScatters();
  placeReshapes();

  // What is not worth compressing goes in one plain all_reduce per block.
  BucketingOptions batch;
  batch.capBytes = batch.firstCapBytes =
      std::numeric_limits<double>::infinity();
  SmallVector<Block *> blocks;
  func.walk([&](Block *block) { blocks.push_back(block); });
  for (Block *block : blocks)
    bucketizeBlock(
        *block, [&](AllReduceOp op) { return uncompressed.contains(op); },
        batch);
  if (failed(addStateResults()))
    signalPassFailure();
}

void PowerSGDPass::collectAverages() {
  func.walk([&](Operation *op) {
    if (auto a = dyn_cast<AllReduceOp>(op)) {
      if (a.getReduction() == ReductionKind::Avg &&
          !a.getInput().getDefiningOp<BucketPackOp>())
        averages.push_back(a);
    } else if (auto s = dyn_cast<ReduceScatterOp>(op)) {
      auto pack = s.getInput().getDefiningOp<BucketPackOp>();
      if (s.getReduction() == ReductionKind::Avg && pack && pack->hasOneUse())
        scatters.push_back(s);
    }
  });
}

LogicalResult PowerSGDPass::planCompressions() {
  for (AllReduceOp a : averages)
    if (std::optional<int64_t> r = compressionRank(a.getType())) {
      planOf[a] = plans.size();
      plans.push_back({a.getInput(), *r, nameOf(a.getInput())});
    }
  for (ReduceScatterOp scatter : scatters)
    for (Value grad :
         scatter.getInput().getDefiningOp<BucketPackOp>().getInputs())
      if (std::optional<int64_t> r =
              compressionRank(cast<RankedTensorType>(grad.getType())))
        if (planOfPacked.try_emplace(grad, plans.size()).second)
          plans.push_back({grad, *r, nameOf(grad)});
  // The seed of Q's draw is the step's: the runtime reads it from the
  // interface.
  if (seed >= 0 && !plans.empty())
    if (auto module = func->getParentOfType<ModuleOp>())
      module->setAttr(abi::kSeed,
                      IntegerAttr::get(IntegerType::get(func.getContext(), 64),
                                       seed.getValue()));
  stepNumber = Value();
  if (startIter <= 0 || plans.empty())
    return success();
  for (unsigned i = 0; i < func.getNumArguments(); ++i)
    if (abi::getArgRole(func, i) == abi::kStep &&
        func.getArgument(i).getType().isInteger(64))
      stepNumber = func.getArgument(i);
  if (!stepNumber)
    return func.emitError()
           << "--distopt-powersgd: start-iter=" << startIter.getValue()
           << " needs the step number: an i64 argument with "
              "distopt.role \"step\"";
  return success();
}

void PowerSGDPass::insertStateArguments() {
  SmallVector<Type> argTypes;
  SmallVector<DictionaryAttr> argAttrs;
  unsigned next = func.getNumArguments();
  for (Plan &plan : plans) {
    plan.firstArg = next + argTypes.size();
    planState(plan, argTypes, argAttrs);
  }
  if (plans.empty())
    return;
  SmallVector<unsigned> indices(argTypes.size(), next);
  SmallVector<Location> locs(argTypes.size(), func.getLoc());
  (void)func.insertArguments(indices, argTypes, argAttrs, locs);
}

void PowerSGDPass::compressAverages() {
  for (AllReduceOp a : averages) {
    auto it = planOf.find(a);
    if (it == planOf.end()) {
      uncompressed.insert(a);
      continue;
    }
    OpBuilder builder(a);
    Value reduced = compress(builder, a.getLoc(), plans[it->second], a);
    a.getResult().replaceAllUsesWith(reduced);
    a.erase();
  }
}

// A reduce_scatter of packed gradients: every rank reconstructs the
// averaged gradients (compressed or batched), then keeps its chunk.
void PowerSGDPass::compressScatters() {
  for (ReduceScatterOp scatter : scatters) {
    auto pack = scatter.getInput().getDefiningOp<BucketPackOp>();
    OpBuilder builder(scatter);
    Location loc = scatter.getLoc();
    SmallVector<Value> averaged;
    for (Value grad : pack.getInputs()) {
      auto it = planOfPacked.find(grad);
      if (it != planOfPacked.end()) {
        averaged.push_back(compress(builder, loc, plans[it->second], scatter));
        continue;
      }
      auto plain = AllReduceOp::create(
          builder, loc, grad.getType(), grad, scatter.getGroupAttr(),
          scatter.getWireTypeAttr(), scatter.getReductionAttr(),
          scatter.getScaleAttr());
      uncompressed.insert(plain);
      averaged.push_back(plain);
    }
    auto repacked = BucketPackOp::create(builder, loc, pack.getType(), averaged,
                                         pack.getAlignmentAttr());
    Value mine = ShardSliceOp::create(builder, loc, scatter.getType(), repacked,
                                      scatter.getGroupAttr());
    scatter.getResult().replaceAllUsesWith(mine);
    scatter.erase();
    pack.erase();
  }
}

// Each average goes back to its shape where it is first used, not right
// after its op: the lowering all-reduces the factors of a batch's PowerSGD
// ops together, which needs a place after all of them and before any use.
void PowerSGDPass::placeReshapes() {
  for (tensor::ExpandShapeOp expand : reshaped) {
    Block *block = expand->getBlock();
    Operation *first = nullptr;
    for (Operation *user : expand->getUsers())
      if (Operation *inBlock = block->findAncestorOpInBlock(*user))
        if (!first || inBlock->isBeforeInBlock(first))
          first = inBlock;
    if (first)
      expand->moveBefore(first);
  }
  reshaped.clear();
  if (batchMb > 0) {
    SmallVector<Block *> blocks;
    func.walk([&](Block *block) { blocks.push_back(block); });
    for (Block *block : blocks)
      numberBatches(*block);
  }
  created.clear();
}

LogicalResult PowerSGDPass::addStateResults() {
  if (newResults.empty())
    return success();
  auto ret = cast<func::ReturnOp>(func.getBody().front().getTerminator());
  // Under loss scaling a step with an overflow changes nothing: the
  // compression's state (the error, which would hold the inf, and Q) is
  // kept as the updates are, by the condition of the step's selects.
  // (A check in the step's own block that keeps an optimizer update.)
  SetVector<Value> keeps;
  StepStructure structure(func);
  for (const GradientChain &chain : structure.chains())
    if (Value keep = chain.keep())
      if (auto check = keep.getDefiningOp<AllFiniteOp>();
          check && check->getBlock() == &func.getBody().front())
        keeps.insert(keep);
  if (keeps.size() > 1) {
    newResults.clear();
    replacedState.clear();
    return func.emitError()
           << "--distopt-powersgd: the step has " << keeps.size()
           << " overflow checks that keep updates; which one keeps "
              "the compression's state is ambiguous";
  }
  if (!keeps.empty()) {
    OpBuilder builder(ret);
    for (auto [result, old] : llvm::zip_equal(newResults, replacedState))
      result.first = arith::SelectOp::create(builder, ret.getLoc(),
                                             keeps.front(), result.first, old);
  }
  replacedState.clear();
  SmallVector<Value> operands(ret.getOperands());
  SmallVector<Type> resultTypes;
  SmallVector<DictionaryAttr> resultAttrs;
  for (auto &[value, attrs] : newResults) {
    operands.push_back(value);
    resultTypes.push_back(value.getType());
    resultAttrs.push_back(attrs);
  }
  SmallVector<unsigned> indices(resultTypes.size(), func.getNumResults());
  (void)func.insertResults(indices, resultTypes, resultAttrs);
  ret->setOperands(operands);
  newResults.clear();
  return success();
}
