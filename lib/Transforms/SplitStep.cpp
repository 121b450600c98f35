//===- SplitStep.cpp - a step's reductions as entry points of their own ---===//
//
// --distopt-split-step: a training loop that reduces each gradient bucket as
// soon as backward has produced it (DDP's reducer, FSDP's reduce-scatter
// per unit) needs the step in pieces: one function per bucket that reduces
// it, and one that updates from the reduced gradients. This pass adds them
// beside @step, which stays whole:
//
//   @step_reduce<k>: the k-th reduction of gradient arguments that
//     StepStructure finds (what prepares them: a bucket's packing, a cast,
//     a scaling, the sum with the micro-batches accumulated before; its
//     collectives, synchronous or started and waited; the division that
//     makes the mean), returning the reduced gradient: as the gradient
//     argument itself when it keeps its type (an all-reduce, the averaged
//     gradient a DDP loop sees after backward), else as an argument of
//     role reduced_grad (a reduce-scatter's shard);
//   @step_update: @step with each such chain replaced by what it left;
//   @step_gather<k> (gather-params): a ZeRO-3 flat parameter shard
//     all-gathered whole into an argument of role gathered_param, for a
//     driver that holds a unit's parameters only around its forward and
//     backward (FSDP).
//
// Every entry takes @step's arguments (the new reduced_grad ones included),
// so a driver passes the same buffers to each. Gradients whose reduction is
// not such a chain (PowerSGD's compressed ones) are reduced in
// @step_update. Entries carry distopt.entry ("reduce" with
// distopt.reduces = the gradient argument, or "update").
//
//===----------------------------------------------------------------------===//

#include "distopt/Dialect/DistOpt/Analysis/StepStructure.h"
#include "distopt/Dialect/DistOpt/IR/DistOptOps.h"
#include "distopt/Dialect/DistOpt/IR/StepABI.h"
#include "distopt/Transforms/Passes.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/IRMapping.h"
#include "mlir/IR/Matchers.h"
#include "mlir/IR/PatternMatch.h"
#include "mlir/IR/SymbolTable.h"
#include "mlir/Transforms/GreedyPatternRewriteDriver.h"

namespace mlir::distopt {
#define GEN_PASS_DEF_SPLITSTEPPASS
#include "distopt/Transforms/Passes.h.inc"
} // namespace mlir::distopt

using namespace mlir;
using namespace mlir::distopt;

namespace {

/// The single user of `v`, or null.
Operation *soleUser(Value v) {
  return v.hasOneUse() ? *v.user_begin() : nullptr;
}

/// A bucket whose every tensor is scaled alike after unpacking (divided by
/// the micro-batches after an all-reduce) is scaled before: the same
/// elementwise arithmetic, and the bucket's reduction chain then ends with
/// the mean, as a lone gradient's does.
struct ScaleBeforeUnpack : public OpRewritePattern<BucketUnpackOp> {
  using OpRewritePattern::OpRewritePattern;

  LogicalResult matchAndRewrite(BucketUnpackOp unpack,
                                PatternRewriter &rewriter) const override {
    auto bucketType = cast<RankedTensorType>(unpack.getBucket().getType());
    SmallVector<Operation *> scalings;
    std::optional<APFloat> factor;
    for (Value out : unpack.getOutputs()) {
      Operation *user = soleUser(out);
      FloatAttr splat;
      if (!user || !isConstantScaling(user) || user->getOperand(0) != out ||
          user->getResult(0).getType() != out.getType() ||
          (!scalings.empty() && user->getName() != scalings[0]->getName()))
        return failure();
      DenseFPElementsAttr constant;
      if (!matchPattern(user->getOperand(1), m_Constant(&constant)) ||
          !constant.isSplat())
        return failure();
      APFloat value = constant.getSplatValue<APFloat>();
      if (factor && !factor->bitwiseIsEqual(value))
        return failure();
      factor = value;
      scalings.push_back(user);
    }
    if (scalings.empty() ||
        cast<RankedTensorType>(scalings[0]->getResult(0).getType())
                .getElementType() != bucketType.getElementType())
      return failure();
    rewriter.setInsertionPoint(unpack);
    Location loc = scalings[0]->getLoc();
    Value splat = arith::ConstantOp::create(
        rewriter, loc, DenseElementsAttr::get(bucketType, *factor));
    OperationState state(loc, scalings[0]->getName(),
                         ValueRange{unpack.getBucket(), splat},
                         TypeRange{bucketType});
    Value scaled = rewriter.create(state)->getResult(0);
    auto scaledUnpack = BucketUnpackOp::create(rewriter, unpack.getLoc(),
                                               unpack.getResultTypes(), scaled,
                                               unpack.getAlignmentAttr());
    for (auto [scaling, out] : llvm::zip(scalings, scaledUnpack.getOutputs()))
      rewriter.replaceOp(scaling, out);
    rewriter.eraseOp(unpack);
    return success();
  }
};

struct SplitStepPass : public distopt::impl::SplitStepPassBase<SplitStepPass> {
  using SplitStepPassBase::SplitStepPassBase;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    auto step = module.lookupSymbol<func::FuncOp>("step");
    if (!step || step.isExternal()) {
      module.emitError() << "--distopt-split-step: the module has no @step "
                            "to split";
      return signalPassFailure();
    }
    for (StringRef name : {"step_update", "step_reduce0"})
      if (module.lookupSymbol(name)) {
        module.emitError() << "--distopt-split-step: @" << name
                           << " exists already (the step is split)";
        return signalPassFailure();
      }
    if (!step.getBody().hasOneBlock()) {
      step.emitError() << "--distopt-split-step: @step has several blocks";
      return signalPassFailure();
    }

    {
      RewritePatternSet patterns(module.getContext());
      patterns.add<ScaleBeforeUnpack>(module.getContext());
      // Only this rewrite: @step otherwise stays as it came.
      GreedyRewriteConfig config;
      config.enableFolding(false)
          .enableConstantCSE(false)
          .setRegionSimplificationLevel(GreedySimplifyRegionLevel::Disabled);
      if (failed(applyPatternsGreedily(step, std::move(patterns), config)))
        return signalPassFailure();
    }

    // (Found after the rewrite above, which moves scalings into chains.)
    SmallVector<ReductionChain> chains(StepStructure(step).reductions());

    // A reduction that leaves the gradient in another type or shape (a
    // reduce-scatter's shard, a bucket reduced in a wider type) leaves it
    // in an argument of its own, added to @step too so that every entry
    // takes the same arguments; one of a lone gradient's type is left in
    // that gradient.
    MLIRContext *context = module.getContext();
    SmallVector<std::optional<unsigned>> leftIn;
    for (auto [k, chain] : llvm::enumerate(chains)) {
      if (chain.args.size() == 1 &&
          chain.reduced.getType() ==
              step.getArgument(chain.args[0]).getType()) {
        leftIn.push_back(std::nullopt);
        continue;
      }
      NamedAttrList attrs;
      attrs.set(abi::kRole, StringAttr::get(context, abi::kReducedGrad));
      attrs.set(abi::kName,
                StringAttr::get(context, "reduced" + std::to_string(k)));
      if (chain.shardOf)
        attrs.set(abi::kShardOf, IntegerAttr::get(IntegerType::get(context, 64),
                                                  chain.shardOf));
      unsigned index = step.getNumArguments();
      if (failed(step.insertArgument(index, chain.reduced.getType(),
                                     attrs.getDictionary(context),
                                     chain.reduced.getLoc())))
        return signalPassFailure();
      leftIn.push_back(index);
    }

    OpBuilder builder(context);
    builder.setInsertionPointAfter(step);
    for (auto [k, chain] : llvm::enumerate(chains))
      addReduceEntry(builder, step, chain, k, leftIn[k]);
    addUpdateEntry(builder, step, chains, leftIn);
    if (gatherParams && failed(addGatherEntries(builder, step)))
      return signalPassFailure();
  }

  /// The group a flat parameter shard of `parts` parts and `shardOf`
  /// elements is gathered over: the one its gradient is reduce-scattered on
  /// (a reduce-scatter of a flat buffer of that length into that many
  /// parts), or null.
  static FlatSymbolRefAttr shardGroup(func::FuncOp step, int64_t shardOf,
                                      int64_t parts) {
    // Two groups of that size reduce-scattering such buffers (a mesh's
    // two axes) would leave it ambiguous: null then too.
    FlatSymbolRefAttr found;
    bool ambiguous = false;
    step.walk([&](Operation *op) {
      if (!isa<ReduceScatterOp, ReduceScatterStartOp>(op))
        return;
      auto group = op->getAttrOfType<FlatSymbolRefAttr>("group");
      auto input = dyn_cast<RankedTensorType>(op->getOperand(0).getType());
      ProcessGroupOp groupOp = group ? lookupProcessGroup(op, group) : nullptr;
      if (!groupOp || !input || groupOp.getSize() != parts ||
          !input.hasStaticShape() || input.getNumElements() != shardOf)
        return;
      ambiguous |= found && found != group;
      found = group;
    });
    return ambiguous ? FlatSymbolRefAttr() : found;
  }

  /// @step_gather<k> for each flat parameter shard, into a new argument of
  /// role gathered_param (added to every entry: they take @step's).
  LogicalResult addGatherEntries(OpBuilder &builder, func::FuncOp step) {
    MLIRContext *context = step.getContext();
    ModuleOp module = getOperation();
    SmallVector<func::FuncOp> entries{step};
    for (auto func : module.getOps<func::FuncOp>())
      if (func->hasAttr(abi::kEntry))
        entries.push_back(func);
    struct Gather {
      unsigned shard, whole;
      FlatSymbolRefAttr group;
    };
    SmallVector<Gather> gathers;
    unsigned numArgs = step.getNumArguments();
    for (unsigned i = 0; i < numArgs; ++i) {
      auto shardOf = step.getArgAttrOfType<IntegerAttr>(i, abi::kShardOf);
      auto layout = step.getArgAttrOfType<ArrayAttr>(i, abi::kLayout);
      auto type = dyn_cast<RankedTensorType>(step.getArgumentTypes()[i]);
      if (!shardOf || !layout || !type ||
          abi::getArgRole(step, i) != abi::kParam)
        continue;
      if (type.getRank() != 1 || !type.hasStaticShape())
        return step.emitError()
               << "--distopt-split-step: parameter shard #" << i << " is "
               << type << ", not a flat buffer of static length";
      int64_t numel = type.getNumElements();
      if (numel == 0 || shardOf.getInt() % numel != 0)
        return step.emitError()
               << "--distopt-split-step: parameter shard #" << i << " of "
               << numel << " elements is not a part of its " << shardOf.getInt()
               << "-element flat buffer";
      int64_t parts = shardOf.getInt() / numel;
      FlatSymbolRefAttr group = shardGroup(step, shardOf.getInt(), parts);
      if (!group)
        return step.emitError()
               << "--distopt-split-step: cannot tell which group parameter "
                  "shard #"
               << i << " is gathered over: not one group reduce-scatters a "
               << shardOf.getInt() << "-element buffer into " << parts
               << " parts";
      NamedAttrList attrs;
      attrs.set(abi::kRole, StringAttr::get(context, abi::kGatheredParam));
      if (auto name = step.getArgAttrOfType<StringAttr>(i, abi::kName))
        attrs.set(abi::kName, name);
      attrs.set(abi::kLayout, layout);
      auto wholeType =
          RankedTensorType::get({shardOf.getInt()}, type.getElementType());
      unsigned whole = step.getNumArguments();
      for (func::FuncOp func : entries)
        if (failed(func.insertArgument(
                whole, wholeType, attrs.getDictionary(context), step.getLoc())))
          return failure();
      gathers.push_back({i, whole, group});
    }
    for (auto [k, gather] : llvm::enumerate(gathers)) {
      auto func = func::FuncOp::create(
          builder, step.getLoc(), ("step_gather" + Twine(k)).str(),
          FunctionType::get(context, step.getArgumentTypes(),
                            {step.getArgumentTypes()[gather.whole]}));
      func.setAllArgAttrs(step.getAllArgAttrs());
      func.setResultAttrs(0, step.getArgAttrDict(gather.whole));
      func->setAttr(abi::kEntry, StringAttr::get(context, "gather"));
      func->setAttr(abi::kGathers,
                    DenseI64ArrayAttr::get(context, {int64_t(gather.shard)}));
      Block *body = func.addEntryBlock();
      OpBuilder inner = OpBuilder::atBlockEnd(body);
      Value all = AllGatherOp::create(
          inner, step.getLoc(), step.getArgumentTypes()[gather.whole],
          body->getArgument(gather.shard), gather.group,
          /*wire_type=*/nullptr);
      func::ReturnOp::create(inner, step.getLoc(), all);
    }
    return success();
  }

  /// @step_reduce<k>: the chain, returning what it leaves.
  void addReduceEntry(OpBuilder &builder, func::FuncOp step,
                      const ReductionChain &chain, size_t k,
                      std::optional<unsigned> leftIn) {
    MLIRContext *context = step.getContext();
    Type reducedType = chain.reduced.getType();
    auto func = func::FuncOp::create(
        builder, step.getLoc(), ("step_reduce" + Twine(k)).str(),
        FunctionType::get(context, step.getArgumentTypes(), {reducedType}));
    func.setAllArgAttrs(step.getAllArgAttrs());
    // The result replaces the argument it is left in: its attributes.
    unsigned target = leftIn.value_or(chain.args.front());
    func.setResultAttrs(0, step.getArgAttrDict(target));
    func->setAttr(abi::kEntry, StringAttr::get(context, "reduce"));
    func->setAttr(abi::kReduces,
                  DenseI64ArrayAttr::get(
                      context, SmallVector<int64_t>(chain.args.begin(),
                                                    chain.args.end())));
    Block *body = func.addEntryBlock();
    OpBuilder inner = OpBuilder::atBlockEnd(body);
    IRMapping mapping;
    mapping.map(step.getArguments(), body->getArguments());
    for (Operation *op : chain.ops) {
      // Constants the scalings read are cloned with them.
      for (Value operand : op->getOperands())
        if (!mapping.contains(operand))
          if (Operation *def = operand.getDefiningOp();
              def && def->hasTrait<OpTrait::ConstantLike>())
            inner.clone(*def, mapping);
      inner.clone(*op, mapping);
    }
    func::ReturnOp::create(inner, step.getLoc(), mapping.lookup(chain.reduced));
  }

  /// @step_update: @step reading what the reduce entries left.
  void addUpdateEntry(OpBuilder &builder, func::FuncOp step,
                      ArrayRef<ReductionChain> chains,
                      ArrayRef<std::optional<unsigned>> leftIn) {
    IRMapping mapping;
    auto update = cast<func::FuncOp>(builder.clone(*step, mapping));
    MLIRContext *context = step.getContext();
    update.setSymName("step_update");
    update->setAttr(abi::kEntry, StringAttr::get(context, "update"));
    for (auto [chain, left] : llvm::zip_equal(chains, leftIn)) {
      Value reduced = mapping.lookup(chain.reduced);
      reduced.replaceAllUsesWith(
          update.getArgument(left.value_or(chain.args.front())));
      for (Operation *op : llvm::reverse(chain.ops))
        mapping.lookup(op)->erase();
    }
  }
};

} // namespace
