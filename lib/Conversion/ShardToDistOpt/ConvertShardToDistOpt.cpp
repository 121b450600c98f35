//===- ConvertShardToDistOpt.cpp - upstream shard to distopt ----*- C++ -*-===//
//
// --convert-shard-to-distopt: the collectives that upstream MLIR's
// --shard-partition produces become distopt collectives on a process group
// named after the grid, or, over some of its axes (or in another order), on
// a group over those axes of a distopt.mesh shaped like the grid. Everything
// is checked before anything is rewritten.
//
//===----------------------------------------------------------------------===//

#include "distopt/Conversion/Passes.h"
#include "distopt/Conversion/ShardToDistOpt/ShardToDistOpt.h"
#include "distopt/Dialect/DistOpt/IR/DistOptOps.h"
#include "distopt/Support/Limits.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/Shard/IR/ShardDialect.h"
#include "mlir/Dialect/Shard/IR/ShardOps.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/Builders.h"
#include "mlir/Transforms/DialectConversion.h"
#include "llvm/ADT/TypeSwitch.h"

#include <numeric>

namespace mlir::distopt {
#define GEN_PASS_DEF_CONVERTSHARDTODISTOPTPASS
#include "distopt/Conversion/Passes.h.inc"
} // namespace mlir::distopt

using namespace mlir;
using namespace mlir::distopt;

namespace {

/// A grid's static shape; its processes are numbered row-major.
struct Grid {
  SmallVector<int64_t> shape;

  int64_t size() const {
    return std::accumulate(shape.begin(), shape.end(), int64_t(1),
                           std::multiplies<int64_t>());
  }
  /// The distance between processes one apart along `axis`.
  int64_t stride(int64_t axis) const {
    return std::accumulate(shape.begin() + axis + 1, shape.end(), int64_t(1),
                           std::multiplies<int64_t>());
  }
};

std::string formatShape(ArrayRef<int64_t> shape) {
  std::string text;
  llvm::raw_string_ostream os(text);
  llvm::interleave(
      shape, os,
      [&](int64_t d) {
        if (ShapedType::isDynamic(d))
          os << "?";
        else
          os << d;
      },
      "x");
  return text;
}

/// Checks every shard op before anything is rewritten, so that each
/// problem is reported at its op with what distopt would need instead (the
/// conversion patterns then assume a checked input).
struct ShardChecker {
  const ShardGridShapes &grids;

  LogicalResult check(Operation *op);

  /// That `grid` is a checked grid of the module.
  LogicalResult checkGrid(Operation *op, FlatSymbolRefAttr grid);
  LogicalResult checkStaticTensor(Operation *op, Type type, StringRef what);
};

} // namespace

LogicalResult ShardChecker::checkGrid(Operation *op,
                                      FlatSymbolRefAttr gridName) {
  if (grids.contains(gridName.getValue()))
    return success();
  return op->emitOpError("refers to ")
         << gridName << ", which is not a shard.grid of this module";
}

LogicalResult ShardChecker::checkStaticTensor(Operation *op, Type type,
                                              StringRef what) {
  auto tensor = dyn_cast<RankedTensorType>(type);
  if (!tensor)
    return op->emitOpError("has ")
           << what << " of type " << type
           << ": distopt converts collectives on tensors (before "
              "bufferization)";
  if (!tensor.hasStaticShape())
    return op->emitOpError("has ")
           << what << " of dynamic shape " << type
           << ": distopt's collectives need static shapes";
  return success();
}

static std::optional<ReductionKind> convertReduction(shard::ReductionKind k) {
  switch (k) {
  case shard::ReductionKind::Sum:
    return ReductionKind::Sum;
  case shard::ReductionKind::Average:
    return ReductionKind::Avg;
  case shard::ReductionKind::Min:
    return ReductionKind::Min;
  case shard::ReductionKind::Max:
    return ReductionKind::Max;
  case shard::ReductionKind::Product:
    return ReductionKind::Prod;
  default:
    return std::nullopt;
  }
}

LogicalResult ShardChecker::check(Operation *op) {
  auto reduction = [&](shard::ReductionKind kind) -> LogicalResult {
    if (convertReduction(kind))
      return success();
    return op->emitOpError("has reduction '")
           << shard::stringifyReductionKind(kind)
           << "', which distopt does not have (sum, average, min, max, "
              "product)";
  };
  auto tensors = [&]() -> LogicalResult {
    if (failed(
            checkStaticTensor(op, op->getOperand(0).getType(), "an operand")))
      return failure();
    return checkStaticTensor(op, op->getResult(0).getType(), "a result");
  };
  return llvm::TypeSwitch<Operation *, LogicalResult>(op)
      .Case([&](shard::AllReduceOp op) -> LogicalResult {
        if (failed(tensors()) || failed(reduction(op.getReduction())))
          return failure();
        Type from = getElementTypeOrSelf(op.getInput().getType());
        Type to = getElementTypeOrSelf(op.getResult().getType());
        if (from != to && !(isa<FloatType>(from) && isa<FloatType>(to)) &&
            !(isa<IntegerType>(from) && isa<IntegerType>(to)))
          return op.emitOpError("accumulates ")
                 << from << " in " << to
                 << ": distopt converts between float types or between "
                    "integer types only";
        return checkGrid(op, op.getGridAttr());
      })
      .Case<shard::AllGatherOp, shard::AllSliceOp>(
          [&](auto op) -> LogicalResult {
            if (failed(tensors()))
              return failure();
            return checkGrid(op, op.getGridAttr());
          })
      .Case([&](shard::ReduceScatterOp op) -> LogicalResult {
        if (failed(tensors()) || failed(reduction(op.getReduction())))
          return failure();
        return checkGrid(op, op.getGridAttr());
      })
      .Case([&](shard::BroadcastOp op) -> LogicalResult {
        if (failed(tensors()))
          return failure();
        if (!op.getRootDynamic().empty())
          return op.emitOpError("has a root computed at run time: distopt's "
                                "broadcast root is a constant");
        return checkGrid(op, op.getGridAttr());
      })
      .Case<shard::ProcessLinearIndexOp, shard::ProcessMultiIndexOp,
            shard::GridShapeOp>([&](Operation *op) -> LogicalResult {
        return checkGrid(op, op->getAttrOfType<FlatSymbolRefAttr>("grid"));
      })
      .Default([&](Operation *op) {
        return op->emitOpError("has no distopt counterpart")
               << (isa<shard::ShardingOp, shard::ShardOp>(op)
                       ? ": run --shard-partition first"
                       : "");
      });
}

/// `value` with its element type converted to `type`'s (float or integer).
static Value convertElements(OpBuilder &builder, Location loc, Value value,
                             RankedTensorType type) {
  auto from = cast<RankedTensorType>(value.getType());
  Type a = from.getElementType(), b = type.getElementType();
  if (a == b)
    return value;
  auto to = from.clone(b);
  if (isa<FloatType>(a))
    return a.getIntOrFloatBitWidth() < b.getIntOrFloatBitWidth()
               ? Value(arith::ExtFOp::create(builder, loc, to, value))
               : Value(arith::TruncFOp::create(builder, loc, to, value));
  return a.getIntOrFloatBitWidth() < b.getIntOrFloatBitWidth()
             ? Value(arith::ExtSIOp::create(builder, loc, to, value))
             : Value(arith::TruncIOp::create(builder, loc, to, value));
}

/// Moves dimension `from` of `value` to position `to` (linalg.transpose).
static Value moveDim(OpBuilder &builder, Location loc, Value value,
                     int64_t from, int64_t to) {
  auto type = cast<RankedTensorType>(value.getType());
  SmallVector<int64_t> perm(type.getRank());
  std::iota(perm.begin(), perm.end(), 0);
  perm.erase(perm.begin() + from);
  perm.insert(perm.begin() + to, from);
  SmallVector<int64_t> shape;
  for (int64_t d : perm)
    shape.push_back(type.getDimSize(d));
  Value init =
      tensor::EmptyOp::create(builder, loc, shape, type.getElementType());
  return linalg::TransposeOp::create(builder, loc, value, init, perm)
      .getResult()
      .front();
}

/// The reassociation that merges dims `first` and `first + 1` of a tensor of
/// `rank` dims (or splits one into two, for expand_shape).
static SmallVector<ReassociationIndices> mergeTwo(int64_t rank, int64_t first) {
  SmallVector<ReassociationIndices> groups;
  for (int64_t d = 0; d < rank; ++d) {
    if (d == first + 1)
      continue;
    if (d == first)
      groups.push_back({d, d + 1});
    else
      groups.push_back({d});
  }
  return groups;
}

/// Splits dim `dim` of `value` into (`outer`, size / `outer`).
static Value splitDim(OpBuilder &builder, Location loc, Value value,
                      int64_t dim, int64_t outer) {
  auto type = cast<RankedTensorType>(value.getType());
  SmallVector<int64_t> shape(type.getShape());
  shape[dim] /= outer;
  shape.insert(shape.begin() + dim, outer);
  return tensor::ExpandShapeOp::create(builder, loc, type.clone(shape), value,
                                       mergeTwo(type.getRank() + 1, dim));
}

/// Merges dims `dim` and `dim + 1` of `value`.
static Value mergeDims(OpBuilder &builder, Location loc, Value value,
                       int64_t dim) {
  auto type = cast<RankedTensorType>(value.getType());
  return tensor::CollapseShapeOp::create(builder, loc, value,
                                         mergeTwo(type.getRank(), dim));
}

namespace {

/// The base of the conversions: the checked grids, and what a collective
/// over some of their axes spans.
template <typename OpTy>
struct ShardPattern : public OpConversionPattern<OpTy> {
  ShardPattern(MLIRContext *context, const ShardGridShapes &grids,
               llvm::Statistic *converted)
      : OpConversionPattern<OpTy>(context), grids(grids), converted(converted) {
  }

  /// The grid `name`, if the module has it.
  std::optional<Grid> grid(FlatSymbolRefAttr name) const {
    auto it = grids.find(name.getValue());
    if (it == grids.end())
      return std::nullopt;
    return Grid{it->second};
  }
  /// The grid axes a collective over `axes` runs along: those of more than
  /// one process, in the order given.
  static SmallVector<int64_t> usedAxes(const Grid &grid,
                                       ArrayRef<int16_t> axes) {
    SmallVector<int64_t> used;
    for (int16_t axis : axes)
      if (grid.shape[axis] != 1)
        used.push_back(axis);
    return used;
  }
  /// The process group of a collective over `axes` of `gridName`: the
  /// grid's own group where they span the grid in its order (in any order
  /// unless `ordered`: a reduction), else a group over those axes of a mesh
  /// shaped like the grid, both declared before the grid on first use.
  FlatSymbolRefAttr groupFor(OpBuilder &builder, Operation *op,
                             FlatSymbolRefAttr gridName, const Grid &grid,
                             ArrayRef<int16_t> axes,
                             bool ordered = true) const {
    SmallVector<int64_t> used = usedAxes(grid, axes);
    SmallVector<int64_t> whole;
    for (int64_t axis = 0; axis < static_cast<int64_t>(grid.shape.size());
         ++axis)
      if (grid.shape[axis] != 1)
        whole.push_back(axis);
    SmallVector<int64_t> sorted(used);
    llvm::sort(sorted);
    if ((ordered ? used : sorted) == whole)
      return gridName;
    auto module = op->getParentOfType<ModuleOp>();
    OpBuilder::InsertionGuard guard(builder);
    builder.setInsertionPoint(module.lookupSymbol(gridName.getValue()));
    // The first free name from `base` (base, base_1, ...), or the one that
    // already declares what `matches` accepts.
    auto nameFor = [&](std::string base,
                       llvm::function_ref<bool(Operation *)> matches,
                       bool &exists) {
      std::string name = base;
      for (int i = 1;; ++i) {
        Operation *found = module.lookupSymbol(name);
        exists = found && matches(found);
        if (!found || exists)
          return name;
        name = base + "_" + std::to_string(i);
      }
    };
    bool exists = false;
    std::string meshName = nameFor(
        (gridName.getValue() + "_mesh").str(),
        [&](Operation *found) {
          auto mesh = dyn_cast<MeshOp>(found);
          return mesh && mesh.getShape() == ArrayRef<int64_t>(grid.shape);
        },
        exists);
    if (!exists)
      MeshOp::create(builder, op->getLoc(), meshName, grid.shape);
    std::string base = (gridName.getValue() + "_axes").str();
    for (int64_t axis : used)
      base += "_" + std::to_string(axis);
    std::string groupName = nameFor(
        base,
        [&](Operation *found) {
          auto group = dyn_cast<ProcessGroupOp>(found);
          return group && group.getMesh() == meshName &&
                 group.getAxes() == ArrayRef<int64_t>(used);
        },
        exists);
    if (!exists) {
      int64_t size = 1;
      for (int64_t axis : used)
        size *= grid.shape[axis];
      ProcessGroupOp::create(
          builder, op->getLoc(), builder.getStringAttr(groupName),
          builder.getI64IntegerAttr(size),
          FlatSymbolRefAttr::get(builder.getContext(), meshName),
          builder.getDenseI64ArrayAttr(used), DenseIntElementsAttr());
    }
    return FlatSymbolRefAttr::get(builder.getContext(), groupName);
  }
  /// The processes a collective over `axes` spans.
  static int64_t spanned(const Grid &grid, ArrayRef<int16_t> axes) {
    int64_t n = 1;
    for (int16_t axis : axes)
      n *= grid.shape[axis];
    return n;
  }
  /// Replaces `op` by `values`, counting it.
  void replace(ConversionPatternRewriter &rewriter, Operation *op,
               ValueRange values) const {
    rewriter.replaceOp(op, values);
    if (converted)
      ++*converted;
  }

  const ShardGridShapes &grids;
  llvm::Statistic *converted;
};

/// This process's rank in `grid`, as an index.
Value rankIn(OpBuilder &builder, Location loc, FlatSymbolRefAttr grid) {
  return RankOp::create(builder, loc, builder.getIndexType(), grid);
}

ReductionKindAttr reductionAttr(MLIRContext *context, shard::ReductionKind k) {
  return ReductionKindAttr::get(context, *convertReduction(k));
}

struct AllReducePattern : public ShardPattern<shard::AllReduceOp> {
  using ShardPattern::ShardPattern;
  LogicalResult
  matchAndRewrite(shard::AllReduceOp op, OpAdaptor adaptor,
                  ConversionPatternRewriter &rewriter) const override {
    std::optional<Grid> g = grid(op.getGridAttr());
    if (!g || !convertReduction(op.getReduction()))
      return rewriter.notifyMatchFailure(op, "unchecked input");
    Value input =
        convertElements(rewriter, op.getLoc(), adaptor.getInput(),
                        cast<RankedTensorType>(op.getResult().getType()));
    if (spanned(*g, op.getGridAxes()) != 1)
      input = AllReduceOp::create(
          rewriter, op.getLoc(), input,
          groupFor(rewriter, op, op.getGridAttr(), *g, op.getGridAxes(),
                   /*ordered=*/false),
          TypeAttr(), reductionAttr(op.getContext(), op.getReduction()),
          FloatAttr());
    replace(rewriter, op, input);
    return success();
  }
};

/// A collective over grid axes: over one process it is its input;
/// otherwise `spanning` builds the distopt form over `n` processes.
template <typename OpTy> struct CollectivePattern : public ShardPattern<OpTy> {
  using ShardPattern<OpTy>::ShardPattern;
  using OpAdaptor = typename ShardPattern<OpTy>::OpAdaptor;

  /// Whether ShardChecker accepted `op` (beyond its grid).
  virtual bool checked(OpTy op) const { return true; }
  /// Whether the ranks' order matters (gathers and scatters order data by
  /// rank); where it does not, the whole grid in any order is its group.
  virtual bool ordered() const { return true; }
  /// The distopt form over the `n` processes of `group`.
  virtual Value spanning(OpTy op, Value input, const Grid &grid, int64_t n,
                         FlatSymbolRefAttr group,
                         ConversionPatternRewriter &rewriter) const = 0;

  LogicalResult
  matchAndRewrite(OpTy op, OpAdaptor adaptor,
                  ConversionPatternRewriter &rewriter) const override {
    std::optional<Grid> g = this->grid(op.getGridAttr());
    if (!g || !checked(op))
      return rewriter.notifyMatchFailure(op, "unchecked input");
    int64_t n = this->spanned(*g, op.getGridAxes());
    Value input = adaptor.getInput();
    if (n == 1) {
      this->replace(rewriter, op, input);
      return success();
    }
    FlatSymbolRefAttr group = this->groupFor(rewriter, op, op.getGridAttr(), *g,
                                             op.getGridAxes(), ordered());
    this->replace(rewriter, op, spanning(op, input, *g, n, group, rewriter));
    return success();
  }
};

struct AllGatherPattern : public CollectivePattern<shard::AllGatherOp> {
  using CollectivePattern::CollectivePattern;
  Value spanning(shard::AllGatherOp op, Value input, const Grid &, int64_t n,
                 FlatSymbolRefAttr group,
                 ConversionPatternRewriter &rewriter) const override {
    Location loc = op.getLoc();
    auto inputType = cast<RankedTensorType>(input.getType());
    SmallVector<int64_t> shape(inputType.getShape());
    shape[0] *= n;
    Value gathered = AllGatherOp::create(rewriter, loc, inputType.clone(shape),
                                         input, group, TypeAttr());
    int64_t axis = op.getGatherAxis().getSExtValue();
    if (axis == 0)
      return gathered;
    // [n*d0, ...] -> [n, d0, ...] -> [d0, .., n, dk, ..] -> [.., n*dk, ..]
    Value split = splitDim(rewriter, loc, gathered, 0, n);
    return mergeDims(rewriter, loc, moveDim(rewriter, loc, split, 0, axis),
                     axis);
  }
};

struct ReduceScatterPattern : public CollectivePattern<shard::ReduceScatterOp> {
  using CollectivePattern::CollectivePattern;
  bool checked(shard::ReduceScatterOp op) const override {
    return convertReduction(op.getReduction()).has_value();
  }
  Value spanning(shard::ReduceScatterOp op, Value input, const Grid &,
                 int64_t n, FlatSymbolRefAttr group,
                 ConversionPatternRewriter &rewriter) const override {
    Location loc = op.getLoc();
    int64_t axis = op.getScatterAxis().getSExtValue();
    if (axis != 0) {
      // [.., n*c, ..] -> [.., n, c, ..] -> [n, d0, .., c, ..] -> [n*d0, ..]
      Value split = splitDim(rewriter, loc, input, axis, n);
      input =
          mergeDims(rewriter, loc, moveDim(rewriter, loc, split, axis, 0), 0);
    }
    return ReduceScatterOp::create(
        rewriter, loc, op.getResult().getType(), input, group, TypeAttr(),
        reductionAttr(op.getContext(), op.getReduction()), FloatAttr());
  }
};

struct AllSlicePattern : public CollectivePattern<shard::AllSliceOp> {
  using CollectivePattern::CollectivePattern;
  Value spanning(shard::AllSliceOp op, Value input, const Grid &, int64_t,
                 FlatSymbolRefAttr group,
                 ConversionPatternRewriter &rewriter) const override {
    Location loc = op.getLoc();
    int64_t axis = op.getSliceAxis().getSExtValue();
    auto type = cast<RankedTensorType>(op.getResult().getType());
    Value chunk =
        arith::ConstantIndexOp::create(rewriter, loc, type.getDimSize(axis));
    Value offset = arith::MulIOp::create(rewriter, loc,
                                         rankIn(rewriter, loc, group), chunk);
    SmallVector<OpFoldResult> offsets(type.getRank(), rewriter.getIndexAttr(0));
    offsets[axis] = offset;
    SmallVector<OpFoldResult> sizes,
        strides(type.getRank(), rewriter.getIndexAttr(1));
    for (int64_t d : type.getShape())
      sizes.push_back(rewriter.getIndexAttr(d));
    return tensor::ExtractSliceOp::create(rewriter, loc, type, input, offsets,
                                          sizes, strides);
  }
};

struct BroadcastPattern : public CollectivePattern<shard::BroadcastOp> {
  using CollectivePattern::CollectivePattern;
  bool checked(shard::BroadcastOp op) const override {
    return op.getRootDynamic().empty();
  }
  bool ordered() const override { return false; }
  Value spanning(shard::BroadcastOp op, Value input, const Grid &grid, int64_t,
                 FlatSymbolRefAttr group,
                 ConversionPatternRewriter &rewriter) const override {
    // On the grid's group, the root's rank in the grid; else its rank in the
    // group over the axes, row-major in their order.
    int64_t root = 0;
    bool wholeGrid = group == op.getGridAttr();
    for (auto [axis, index] : llvm::zip(op.getGridAxes(), op.getRoot()))
      root = wholeGrid ? root + index * grid.stride(axis)
                       : root * grid.shape[axis] + index;
    return BroadcastOp::create(rewriter, op.getLoc(), input, group, TypeAttr(),
                               rewriter.getI64IntegerAttr(root));
  }
};

struct ProcessLinearIndexPattern
    : public ShardPattern<shard::ProcessLinearIndexOp> {
  using ShardPattern::ShardPattern;
  LogicalResult
  matchAndRewrite(shard::ProcessLinearIndexOp op, OpAdaptor adaptor,
                  ConversionPatternRewriter &rewriter) const override {
    if (!grid(op.getGridAttr()))
      return rewriter.notifyMatchFailure(op, "unchecked input");
    replace(rewriter, op, rankIn(rewriter, op.getLoc(), op.getGridAttr()));
    return success();
  }
};

/// The grid axes an op with one index result per axis reports: `axes`, or
/// every axis where it is empty.
SmallVector<int64_t> reportedAxes(const Grid &grid, ArrayRef<int16_t> axes) {
  if (!axes.empty())
    return SmallVector<int64_t>(axes.begin(), axes.end());
  SmallVector<int64_t> all(grid.shape.size());
  std::iota(all.begin(), all.end(), 0);
  return all;
}

struct GridShapePattern : public ShardPattern<shard::GridShapeOp> {
  using ShardPattern::ShardPattern;
  LogicalResult
  matchAndRewrite(shard::GridShapeOp op, OpAdaptor adaptor,
                  ConversionPatternRewriter &rewriter) const override {
    std::optional<Grid> g = grid(op.getGridAttr());
    if (!g)
      return rewriter.notifyMatchFailure(op, "unchecked input");
    SmallVector<Value> sizes;
    for (int64_t axis : reportedAxes(*g, op.getAxes()))
      sizes.push_back(arith::ConstantIndexOp::create(rewriter, op.getLoc(),
                                                     g->shape[axis]));
    replace(rewriter, op, sizes);
    return success();
  }
};

struct ProcessMultiIndexPattern
    : public ShardPattern<shard::ProcessMultiIndexOp> {
  using ShardPattern::ShardPattern;
  LogicalResult
  matchAndRewrite(shard::ProcessMultiIndexOp op, OpAdaptor adaptor,
                  ConversionPatternRewriter &rewriter) const override {
    std::optional<Grid> g = grid(op.getGridAttr());
    if (!g)
      return rewriter.notifyMatchFailure(op, "unchecked input");
    Location loc = op.getLoc();
    Value linear = rankIn(rewriter, loc, op.getGridAttr());
    SmallVector<Value> indices;
    for (int64_t axis : reportedAxes(*g, op.getAxes())) {
      // (rank / stride) mod size, as the grid is row-major.
      Value stride =
          arith::ConstantIndexOp::create(rewriter, loc, g->stride(axis));
      Value size =
          arith::ConstantIndexOp::create(rewriter, loc, g->shape[axis]);
      Value quotient = arith::DivUIOp::create(rewriter, loc, linear, stride);
      indices.push_back(arith::RemUIOp::create(rewriter, loc, quotient, size));
    }
    replace(rewriter, op, indices);
    return success();
  }
};

/// A grid becomes the process group of its processes, by the same name.
struct GridPattern : public ShardPattern<shard::GridOp> {
  using ShardPattern::ShardPattern;
  LogicalResult
  matchAndRewrite(shard::GridOp op, OpAdaptor adaptor,
                  ConversionPatternRewriter &rewriter) const override {
    std::optional<Grid> g = grid(FlatSymbolRefAttr::get(op.getSymNameAttr()));
    if (!g)
      return rewriter.notifyMatchFailure(op, "a grid of dynamic size");
    rewriter.replaceOpWithNewOp<ProcessGroupOp>(op, op.getSymName(), g->size());
    return success();
  }
};

struct ConvertShardToDistOptPass
    : public mlir::distopt::impl::ConvertShardToDistOptPassBase<
          ConvertShardToDistOptPass> {
  void runOnOperation() override;
};

} // namespace

void mlir::distopt::populateShardToDistOptPatterns(RewritePatternSet &patterns,
                                                   const ShardGridShapes &grids,
                                                   llvm::Statistic *converted) {
  patterns.add<AllReducePattern, AllGatherPattern, ReduceScatterPattern,
               AllSlicePattern, BroadcastPattern, ProcessLinearIndexPattern,
               GridShapePattern, ProcessMultiIndexPattern>(
      patterns.getContext(), grids, converted);
  patterns.add<GridPattern>(patterns.getContext(), grids, nullptr);
}

void ConvertShardToDistOptPass::runOnOperation() {
  ModuleOp module = getOperation();
  bool ok = true;
  ShardGridShapes grids;
  for (auto grid : module.getOps<shard::GridOp>()) {
    if (ShapedType::isDynamicShape(grid.getShape())) {
      grid.emitOpError("has a dynamic size (")
          << formatShape(grid.getShape())
          << "): a distopt process group has a static size";
      ok = false;
      continue;
    }
    int64_t processes = 1;
    for (int64_t extent : grid.getShape())
      processes = extent <= 0 ? 0
                  : processes <= ::distopt::kMaxWorldSize / extent
                      ? processes * extent
                      : ::distopt::kMaxWorldSize + 1;
    if (processes > ::distopt::kMaxWorldSize) {
      grid.emitOpError("has more than 2^20 processes (")
          << formatShape(grid.getShape())
          << "), the most a distopt step may be compiled for";
      ok = false;
      continue;
    }
    grids[grid.getSymName()] = SmallVector<int64_t>(grid.getShape());
  }

  // Every problem is reported, at its op, before anything is rewritten.
  ShardChecker checker{grids};
  module.walk([&](Operation *op) {
    if (isa_and_present<shard::ShardDialect>(op->getDialect()) &&
        !isa<shard::GridOp>(op))
      ok &= succeeded(checker.check(op));
  });
  if (!ok)
    return signalPassFailure();

  ConversionTarget target(getContext());
  target.addIllegalDialect<shard::ShardDialect>();
  target.addLegalDialect<DistOptDialect, arith::ArithDialect,
                         linalg::LinalgDialect, tensor::TensorDialect>();
  RewritePatternSet patterns(&getContext());
  populateShardToDistOptPatterns(patterns, grids, &numConverted);
  ConversionConfig config;
  // The shard ops' own folds would bypass the checked conversions.
  config.foldingMode = DialectConversionFoldingMode::Never;
  if (failed(
          applyPartialConversion(module, target, std::move(patterns), config)))
    signalPassFailure();
}
