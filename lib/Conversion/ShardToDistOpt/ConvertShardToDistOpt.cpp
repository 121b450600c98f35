//===- ConvertShardToDistOpt.cpp - upstream shard to distopt ----*- C++ -*-===//
//
// --convert-shard-to-distopt: the collectives that upstream MLIR's
// --shard-partition produces become distopt collectives on a process group
// named after the grid. Everything is checked before anything is rewritten.
//
//===----------------------------------------------------------------------===//

#include "distopt/Conversion/Passes.h"
#include "distopt/Dialect/DistOpt/IR/DistOptOps.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/Shard/IR/ShardDialect.h"
#include "mlir/Dialect/Shard/IR/ShardOps.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/Builders.h"
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

struct ConvertShardToDistOptPass
    : public distopt::impl::ConvertShardToDistOptPassBase<
          ConvertShardToDistOptPass> {
  void runOnOperation() override;

private:
  LogicalResult check(Operation *op);
  void convert(Operation *op);

  /// The number of processes a collective over `axes` spans: the whole
  /// grid, or 1 where the axes only have size 1. Anything in between is a
  /// sub-grid, an error; so is an axis order other than the grid's where
  /// `needGridOrder` (gathers and scatters order data by rank).
  FailureOr<int64_t> spannedProcesses(Operation *op, FlatSymbolRefAttr grid,
                                      ArrayRef<int16_t> axes,
                                      bool needGridOrder);
  LogicalResult checkStaticTensor(Operation *op, Type type, StringRef what);

  Value rank(OpBuilder &builder, Location loc, FlatSymbolRefAttr grid);

  llvm::StringMap<Grid> grids;
};

} // namespace

FailureOr<int64_t> ConvertShardToDistOptPass::spannedProcesses(
    Operation *op, FlatSymbolRefAttr gridName, ArrayRef<int16_t> axes,
    bool needGridOrder) {
  auto it = grids.find(gridName.getValue());
  if (it == grids.end())
    return op->emitOpError("refers to ")
           << gridName << ", which is not a shard.grid of this module";
  const Grid &grid = it->second;
  int64_t spanned = 1;
  int64_t lastAxis = -1;
  bool ordered = true;
  for (int16_t axis : axes) {
    if (grid.shape[axis] == 1)
      continue;
    spanned *= grid.shape[axis];
    ordered &= axis > lastAxis;
    lastAxis = axis;
  }
  if (spanned == 1)
    return spanned;
  auto describe = [&](InFlightDiagnostic diag) -> InFlightDiagnostic {
    diag << " (grid_axes = [";
    llvm::interleaveComma(axes, diag);
    diag << "] of " << gridName << " " << formatShape(grid.shape) << ")";
    return diag;
  };
  if (spanned != grid.size())
    return describe(op->emitOpError("spans ") << spanned << " of the grid's "
                                              << grid.size() << " processes")
           << ": distopt's collectives span every process (sub-groups are "
              "not supported yet)";
  if (needGridOrder && !ordered)
    return describe(op->emitOpError("orders ranks differently from the grid"))
           << ": write grid_axes in increasing order";
  return spanned;
}

LogicalResult ConvertShardToDistOptPass::checkStaticTensor(Operation *op,
                                                           Type type,
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

LogicalResult ConvertShardToDistOptPass::check(Operation *op) {
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
        return spannedProcesses(op, op.getGridAttr(), op.getGridAxes(),
                                /*needGridOrder=*/false);
      })
      .Case([&](shard::AllGatherOp op) -> LogicalResult {
        if (failed(tensors()))
          return failure();
        return spannedProcesses(op, op.getGridAttr(), op.getGridAxes(),
                                /*needGridOrder=*/true);
      })
      .Case([&](shard::ReduceScatterOp op) -> LogicalResult {
        if (failed(tensors()) || failed(reduction(op.getReduction())))
          return failure();
        return spannedProcesses(op, op.getGridAttr(), op.getGridAxes(),
                                /*needGridOrder=*/true);
      })
      .Case([&](shard::AllSliceOp op) -> LogicalResult {
        if (failed(tensors()))
          return failure();
        return spannedProcesses(op, op.getGridAttr(), op.getGridAxes(),
                                /*needGridOrder=*/true);
      })
      .Case([&](shard::BroadcastOp op) -> LogicalResult {
        if (failed(tensors()))
          return failure();
        if (!op.getRootDynamic().empty())
          return op.emitOpError("has a root computed at run time: distopt's "
                                "broadcast root is a constant");
        return spannedProcesses(op, op.getGridAttr(), op.getGridAxes(),
                                /*needGridOrder=*/false);
      })
      .Case<shard::ProcessLinearIndexOp, shard::ProcessMultiIndexOp,
            shard::GridShapeOp>([&](Operation *op) -> LogicalResult {
        auto name = op->getAttrOfType<FlatSymbolRefAttr>("grid");
        return spannedProcesses(op, name, {}, false);
      })
      .Default([&](Operation *op) {
        return op->emitOpError("has no distopt counterpart")
               << (isa<shard::ShardingOp, shard::ShardOp>(op)
                       ? ": run --shard-partition first"
                       : "");
      });
}

Value ConvertShardToDistOptPass::rank(OpBuilder &builder, Location loc,
                                      FlatSymbolRefAttr grid) {
  return RankOp::create(builder, loc, builder.getIndexType(), grid);
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

void ConvertShardToDistOptPass::convert(Operation *op) {
  OpBuilder builder(op);
  Location loc = op->getLoc();
  auto resultType = [&]() {
    return cast<RankedTensorType>(op->getResult(0).getType());
  };
  auto spanned = [&](FlatSymbolRefAttr grid, ArrayRef<int16_t> axes) {
    return *spannedProcesses(op, grid, axes, false);
  };
  Value replacement =
      llvm::TypeSwitch<Operation *, Value>(op)
          .Case([&](shard::AllReduceOp op) -> Value {
            Value input =
                convertElements(builder, loc, op.getInput(), resultType());
            if (spanned(op.getGridAttr(), op.getGridAxes()) == 1)
              return input;
            return AllReduceOp::create(
                builder, loc, input, op.getGridAttr(), TypeAttr(),
                ReductionKindAttr::get(&getContext(),
                                       *convertReduction(op.getReduction())),
                FloatAttr());
          })
          .Case([&](shard::AllGatherOp op) -> Value {
            int64_t n = spanned(op.getGridAttr(), op.getGridAxes());
            if (n == 1)
              return op.getInput();
            auto inputType = cast<RankedTensorType>(op.getInput().getType());
            SmallVector<int64_t> shape(inputType.getShape());
            shape[0] *= n;
            Value gathered = AllGatherOp::create(
                builder, loc, inputType.clone(shape), op.getInput(),
                op.getGridAttr(), TypeAttr());
            int64_t axis = op.getGatherAxis().getSExtValue();
            if (axis == 0)
              return gathered;
            // [n*d0, ...] -> [n, d0, ...] -> [d0, .., n, dk, ..] -> [.., n*dk,
            // ..]
            Value split = splitDim(builder, loc, gathered, 0, n);
            return mergeDims(builder, loc,
                             moveDim(builder, loc, split, 0, axis), axis);
          })
          .Case([&](shard::ReduceScatterOp op) -> Value {
            int64_t n = spanned(op.getGridAttr(), op.getGridAxes());
            if (n == 1)
              return op.getInput();
            int64_t axis = op.getScatterAxis().getSExtValue();
            Value input = op.getInput();
            if (axis != 0) {
              // [.., n*c, ..] -> [.., n, c, ..] -> [n, d0, .., c, ..] -> [n*d0,
              // ..]
              Value split = splitDim(builder, loc, input, axis, n);
              input = mergeDims(builder, loc,
                                moveDim(builder, loc, split, axis, 0), 0);
            }
            return ReduceScatterOp::create(
                builder, loc, resultType(), input, op.getGridAttr(), TypeAttr(),
                ReductionKindAttr::get(&getContext(),
                                       *convertReduction(op.getReduction())),
                FloatAttr());
          })
          .Case([&](shard::AllSliceOp op) -> Value {
            int64_t n = spanned(op.getGridAttr(), op.getGridAxes());
            if (n == 1)
              return op.getInput();
            int64_t axis = op.getSliceAxis().getSExtValue();
            RankedTensorType type = resultType();
            Value chunk = arith::ConstantIndexOp::create(builder, loc,
                                                         type.getDimSize(axis));
            Value offset = arith::MulIOp::create(
                builder, loc, rank(builder, loc, op.getGridAttr()), chunk);
            SmallVector<OpFoldResult> offsets(type.getRank(),
                                              builder.getIndexAttr(0));
            offsets[axis] = offset;
            SmallVector<OpFoldResult> sizes,
                strides(type.getRank(), builder.getIndexAttr(1));
            for (int64_t d : type.getShape())
              sizes.push_back(builder.getIndexAttr(d));
            return tensor::ExtractSliceOp::create(
                builder, loc, type, op.getInput(), offsets, sizes, strides);
          })
          .Case([&](shard::BroadcastOp op) -> Value {
            if (spanned(op.getGridAttr(), op.getGridAxes()) == 1)
              return op.getInput();
            const Grid &grid = grids.find(op.getGrid())->second;
            int64_t root = 0;
            for (auto [axis, index] : llvm::zip(op.getGridAxes(), op.getRoot()))
              root += index * grid.stride(axis);
            return BroadcastOp::create(builder, loc, op.getInput(),
                                       op.getGridAttr(), TypeAttr(),
                                       builder.getI64IntegerAttr(root));
          })
          .Case([&](shard::ProcessLinearIndexOp op) -> Value {
            return rank(builder, loc, op.getGridAttr());
          })
          .Default([&](Operation *) { return Value(); });
  if (replacement) {
    op->getResult(0).replaceAllUsesWith(replacement);
    op->erase();
    ++numConverted;
    return;
  }

  // Ops with one index result per grid axis.
  auto perAxis = [&](FlatSymbolRefAttr gridName, ArrayRef<int16_t> axes,
                     function_ref<Value(int64_t)> value) {
    const Grid &grid = grids.find(gridName.getValue())->second;
    SmallVector<int64_t> all(grid.shape.size());
    std::iota(all.begin(), all.end(), 0);
    SmallVector<int64_t> chosen(axes.begin(), axes.end());
    for (auto [result, axis] :
         llvm::zip(op->getResults(), axes.empty() ? all : chosen))
      result.replaceAllUsesWith(value(axis));
    op->erase();
    ++numConverted;
  };
  if (auto shape = dyn_cast<shard::GridShapeOp>(op)) {
    const Grid &grid = grids.find(shape.getGrid())->second;
    perAxis(shape.getGridAttr(), shape.getAxes(), [&](int64_t axis) -> Value {
      return arith::ConstantIndexOp::create(builder, loc, grid.shape[axis]);
    });
    return;
  }
  auto multi = cast<shard::ProcessMultiIndexOp>(op);
  const Grid &grid = grids.find(multi.getGrid())->second;
  Value linear = rank(builder, loc, multi.getGridAttr());
  perAxis(multi.getGridAttr(), multi.getAxes(), [&](int64_t axis) -> Value {
    // (rank / stride) mod size, as the grid is row-major.
    Value stride =
        arith::ConstantIndexOp::create(builder, loc, grid.stride(axis));
    Value size = arith::ConstantIndexOp::create(builder, loc, grid.shape[axis]);
    Value quotient = arith::DivUIOp::create(builder, loc, linear, stride);
    return arith::RemUIOp::create(builder, loc, quotient, size);
  });
}

void ConvertShardToDistOptPass::runOnOperation() {
  ModuleOp module = getOperation();
  bool ok = true;
  SmallVector<shard::GridOp> gridOps;
  for (auto grid : module.getOps<shard::GridOp>()) {
    if (ShapedType::isDynamicShape(grid.getShape())) {
      grid.emitOpError("has a dynamic size (")
          << formatShape(grid.getShape())
          << "): a distopt process group has a static size";
      ok = false;
      continue;
    }
    grids[grid.getSymName()] = Grid{SmallVector<int64_t>(grid.getShape())};
    gridOps.push_back(grid);
  }

  SmallVector<Operation *> shardOps;
  module.walk([&](Operation *op) {
    if (isa_and_present<shard::ShardDialect>(op->getDialect()) &&
        !isa<shard::GridOp>(op))
      shardOps.push_back(op);
  });
  for (Operation *op : shardOps)
    ok &= succeeded(check(op));
  if (!ok)
    return signalPassFailure();

  for (Operation *op : shardOps)
    convert(op);
  for (shard::GridOp grid : gridOps) {
    OpBuilder builder(grid);
    ProcessGroupOp::create(builder, grid.getLoc(), grid.getSymName(),
                           grids[grid.getSymName()].size());
    grid.erase();
  }
}
