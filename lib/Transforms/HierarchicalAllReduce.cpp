//===- HierarchicalAllReduce.cpp - all-reduce within, then across nodes ---===//
//
// --distopt-hierarchical-all-reduce: a large world all_reduce becomes a
// reduce_scatter inside each node, an all_reduce of the chunks across the
// nodes and an all_gather inside the node, on groups over a [nodes, S] mesh.
//
//===----------------------------------------------------------------------===//

#include "MeshGroups.h"

#include "distopt/Dialect/DistOpt/IR/DistOptOps.h"
#include "distopt/Dialect/DistOpt/IR/ExactDivision.h"
#include "distopt/Support/Limits.h"
#include "distopt/Transforms/Passes.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/PatternMatch.h"
#include "mlir/Transforms/WalkPatternRewriteDriver.h"

namespace mlir::distopt {
#define GEN_PASS_DEF_HIERARCHICALALLREDUCEPASS
#include "distopt/Transforms/Passes.h.inc"
} // namespace mlir::distopt

using namespace mlir;
using namespace mlir::distopt;

namespace {

struct HierarchicalAllReducePass
    : public mlir::distopt::impl::HierarchicalAllReducePassBase<
          HierarchicalAllReducePass> {
  using HierarchicalAllReducePassBase::HierarchicalAllReducePassBase;
  void runOnOperation() override;
};

/// The groups of the hierarchy, declared once per module.
struct NodeGroups {
  FlatSymbolRefAttr intra, inter;
};

FailureOr<NodeGroups> declareNodeGroups(ModuleOp module, int64_t world,
                                        int64_t nodeSize) {
  FailureOr<SmallVector<FlatSymbolRefAttr>> refs = declareMeshGroups(
      module, "distopt-hierarchical-all-reduce", "nodes",
      {world / nodeSize, nodeSize}, {{"intra_node", {1}}, {"inter_node", {0}}});
  if (failed(refs))
    return failure();
  return NodeGroups{(*refs)[0], (*refs)[1]};
}

/// The world size of an all_reduce the hierarchy takes, or 0: over the
/// whole world, of `minBytes` or more, over two nodes of `nodeSize` ranks at
/// least, of floats where it averages (an integer avg stays flat: its
/// rounding is the runtime's).
int64_t hierarchicalWorld(AllReduceOp op, int64_t nodeSize, int64_t minBytes) {
  ProcessGroupOp group = lookupProcessGroup(op, op.getGroupAttr());
  auto type = cast<RankedTensorType>(op.getInput().getType());
  if (!group || !group.isWorld() || type.getRank() == 0 ||
      cast<CollectiveOpInterface>(op.getOperation()).getPayloadBytes() <
          minBytes)
    return 0;
  int64_t size = group.getSize();
  if (size % nodeSize != 0 || size / nodeSize < 2 || nodeSize < 2 ||
      size > ::distopt::kMaxWorldSize)
    return 0;
  if (op.getReduction() == ReductionKind::Avg &&
      !isa<FloatType>(type.getElementType()))
    return 0;
  return size;
}

/// A world all_reduce (over `world` ranks) as its hierarchical form: within
/// the node, across the nodes, within the node.
struct SplitAllReduce : public OpRewritePattern<AllReduceOp> {
  SplitAllReduce(MLIRContext *context, NodeGroups groups, int64_t world,
                 int64_t nodeSize, int64_t minBytes, llvm::Statistic &splits)
      : OpRewritePattern(context), groups(groups), world(world),
        nodeSize(nodeSize), minBytes(minBytes), splits(splits) {}

  LogicalResult matchAndRewrite(AllReduceOp op,
                                PatternRewriter &rewriter) const override {
    if (hierarchicalWorld(op, nodeSize, minBytes) != world)
      return rewriter.notifyMatchFailure(op, "not a world all_reduce to split");
    rewriter.setInsertionPoint(op);
    split(op, rewriter);
    ++splits;
    return success();
  }

  void split(AllReduceOp op, PatternRewriter &rewriter) const;

  NodeGroups groups;
  int64_t world, nodeSize, minBytes;
  llvm::Statistic &splits;
};

void SplitAllReduce::split(AllReduceOp op, PatternRewriter &rewriter) const {
  Location loc = op.getLoc();
  auto type = cast<RankedTensorType>(op.getInput().getType());
  Type element = type.getElementType();
  int64_t n = type.getNumElements();
  int64_t padded = llvm::divideCeil(n, nodeSize) * nodeSize;
  TypeAttr wire = op.getWireTypeAttr();

  // Flat, padded to a multiple of the node size.
  Value flat = op.getInput();
  SmallVector<ReassociationIndices> all(1);
  for (int64_t d = 0; d < type.getRank(); ++d)
    all[0].push_back(d);
  auto flatType = RankedTensorType::get({n}, element);
  if (type.getRank() != 1)
    flat = tensor::CollapseShapeOp::create(rewriter, loc, flatType, flat, all);
  if (padded != n) {
    auto paddedType = RankedTensorType::get({padded}, element);
    Value zero =
        arith::ConstantOp::create(rewriter, loc, rewriter.getZeroAttr(element));
    Value empty = tensor::EmptyOp::create(rewriter, loc, padded, element);
    Value zeros = linalg::FillOp::create(rewriter, loc, zero, empty).result();
    flat = tensor::InsertSliceOp::create(
        rewriter, loc, paddedType, flat, zeros, ValueRange{}, ValueRange{},
        ValueRange{}, rewriter.getDenseI64ArrayAttr({0}),
        rewriter.getDenseI64ArrayAttr({n}), rewriter.getDenseI64ArrayAttr({1}));
  }

  TwoStageReduction stages = splitReduction(op.getReduction());
  auto kindAttr = [&](ReductionKind kind) {
    return ReductionKindAttr::get(op.getContext(), kind);
  };
  auto chunkType = RankedTensorType::get({padded / nodeSize}, element);
  Value chunk =
      ReduceScatterOp::create(rewriter, loc, chunkType, flat, groups.intra,
                              wire, kindAttr(stages.first), op.getScaleAttr());
  chunk = AllReduceOp::create(rewriter, loc, chunk, groups.inter, wire,
                              kindAttr(stages.second), FloatAttr());
  // The world size is exact in the type the division is done in (f32 for
  // a bf16 chunk on more than 256 ranks).
  if (stages.divide)
    chunk = createDivision(rewriter, loc, chunk, static_cast<double>(world));
  auto paddedType = RankedTensorType::get({padded}, element);
  Value result =
      AllGatherOp::create(rewriter, loc, paddedType, chunk, groups.intra, wire);

  // Back to the original shape.
  if (padded != n)
    result = tensor::ExtractSliceOp::create(
        rewriter, loc, flatType, result, ValueRange{}, ValueRange{},
        ValueRange{}, rewriter.getDenseI64ArrayAttr({0}),
        rewriter.getDenseI64ArrayAttr({n}), rewriter.getDenseI64ArrayAttr({1}));
  if (type.getRank() != 1)
    result = tensor::ExpandShapeOp::create(rewriter, loc, type, result, all);
  rewriter.replaceOp(op, result);
}

void HierarchicalAllReducePass::runOnOperation() {
  if (nodeSize == 0)
    return;
  if (nodeSize < 0 || minBytes < 0) {
    getOperation().emitError()
        << "--distopt-hierarchical-all-reduce: node-size and min-bytes must "
           "not be negative, got "
        << static_cast<int64_t>(nodeSize) << " and "
        << static_cast<int64_t>(minBytes);
    return signalPassFailure();
  }
  // A node size that does not cut the world into whole nodes is an error,
  // as the hybrid shard size's is, whether or not an all_reduce is large
  // enough to split.
  Operation *source;
  FailureOr<int64_t> worldSize =
      worldSizeOf(getOperation(), "distopt-hierarchical-all-reduce",
                  /*required=*/false, source);
  if (failed(worldSize) ||
      (*worldSize != 0 &&
       failed(checkDividesWorld(source, "distopt-hierarchical-all-reduce",
                                "node-size", nodeSize, *worldSize, "nodes"))))
    return signalPassFailure();
  // The node groups are declared once, for the world of the first
  // all_reduce the hierarchy takes (the module has one world).
  int64_t world = 0;
  getOperation().walk([&](AllReduceOp op) {
    world = hierarchicalWorld(op, nodeSize, minBytes);
    return world ? WalkResult::interrupt() : WalkResult::advance();
  });
  if (world == 0)
    return;
  FailureOr<NodeGroups> groups =
      declareNodeGroups(getOperation(), world, nodeSize);
  if (failed(groups))
    return signalPassFailure();
  RewritePatternSet patterns(&getContext());
  patterns.add<SplitAllReduce>(&getContext(), *groups, world, nodeSize,
                               minBytes, numSplit);
  walkAndApplyPatterns(getOperation(), std::move(patterns));
}

} // namespace
