//===- ContractionsToRuntime.cpp - matrix products through BLAS -*- C++ -*-===//
//
// --distopt-contractions-to-runtime: on a bufferized step, each f32 matrix
// product (a linalg.generic of three loops, one of them the sum of products)
// becomes a call of distopt_rt_matmul_f32, which runs it through the
// machine's BLAS: Muon's Newton-Schulz iterations and PowerSGD's factors at
// the library's rate instead of a loop nest's.
//
//===----------------------------------------------------------------------===//

#include "distopt/Conversion/DistOptToRuntime/RuntimeCalls.h"
#include "distopt/Conversion/Passes.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/IR/PatternMatch.h"
#include "mlir/Transforms/WalkPatternRewriteDriver.h"

namespace mlir::distopt {
#define GEN_PASS_DEF_CONTRACTIONSTORUNTIMEPASS
#include "distopt/Conversion/Passes.h.inc"
} // namespace mlir::distopt

using namespace mlir;
using namespace mlir::distopt;

namespace {

/// An f32 matrix whose rows are contiguous (the layout BLAS takes: a row
/// stride, elements one apart).
bool isRowMajorMatrix(Value value) {
  auto type = dyn_cast<MemRefType>(value.getType());
  if (!type || type.getRank() != 2 || !type.getElementType().isF32())
    return false;
  SmallVector<int64_t> strides;
  int64_t offset;
  return succeeded(type.getStridesAndOffset(strides, offset)) &&
         strides[1] == 1;
}

/// Whether the body is `out + lhs * rhs` (in either order).
bool isMultiplyAdd(linalg::GenericOp op) {
  Block &body = op.getRegion().front();
  if (body.getOperations().size() != 3)
    return false;
  auto multiply = dyn_cast<arith::MulFOp>(body.front());
  auto add = dyn_cast<arith::AddFOp>(*std::next(body.begin()));
  auto yield = cast<linalg::YieldOp>(body.getTerminator());
  if (!multiply || !add || yield.getNumOperands() != 1 ||
      yield.getOperand(0) != add.getResult())
    return false;
  auto isPair = [](Value x, Value y, Value a, Value b) {
    return (x == a && y == b) || (x == b && y == a);
  };
  return isPair(multiply.getLhs(), multiply.getRhs(), body.getArgument(0),
                body.getArgument(1)) &&
         isPair(add.getLhs(), add.getRhs(), body.getArgument(2),
                multiply.getResult());
}

struct ContractionToRuntime : public OpRewritePattern<linalg::GenericOp> {
  ContractionToRuntime(MLIRContext *context, int64_t minDim)
      : OpRewritePattern(context), minDim(minDim) {}

  LogicalResult matchAndRewrite(linalg::GenericOp op,
                                PatternRewriter &rewriter) const override {
    if (!op.hasPureBufferSemantics() || op.getNumDpsInputs() != 2 ||
        op.getNumDpsInits() != 1 || op.getNumLoops() != 3 ||
        op.getNumReductionLoops() != 1 || !isMultiplyAdd(op))
      return rewriter.notifyMatchFailure(op, "not a sum of products");
    Value out = op.getDpsInits()[0];
    if (!llvm::all_of(op->getOperands(), isRowMajorMatrix))
      return rewriter.notifyMatchFailure(op, "not f32 row-major matrices");
    SmallVector<AffineMap> maps = op.getIndexingMapsArray();
    if (!llvm::all_of(maps, [](AffineMap map) {
          return map.isProjectedPermutation(/*allowZeroInResults=*/false) &&
                 map.getNumResults() == 2;
        }))
      return rewriter.notifyMatchFailure(op, "not matrices of the loops");
    unsigned sum =
        *llvm::find_if(llvm::seq<unsigned>(0, 3), [&](unsigned loop) {
          return op.getIteratorTypesArray()[loop] ==
                 utils::IteratorType::reduction;
        });
    unsigned row = maps[2].getDimPosition(0), col = maps[2].getDimPosition(1);
    // a: the input indexed by the result's row, with the sum; b: by the sum
    // and the result's column. Each is read as it is or transposed.
    auto position = [](AffineMap map, unsigned loop) -> std::optional<bool> {
      if (map.getDimPosition(0) == loop)
        return false;
      if (map.getDimPosition(1) == loop)
        return true;
      return std::nullopt;
    };
    unsigned first = position(maps[0], row).has_value() ? 0 : 1;
    AffineMap aMap = maps[first], bMap = maps[1 - first];
    std::optional<bool> aRowAt = position(aMap, row),
                        bColAt = position(bMap, col);
    if (!aRowAt || !bColAt || position(aMap, sum) != !*aRowAt ||
        position(bMap, sum) != !*bColAt)
      return rewriter.notifyMatchFailure(op, "not a product of two matrices");
    // A thin product (PowerSGD's factors: a few columns) is a
    // matrix-vector shape the BLAS is not tuned for; the loops run it
    // faster.
    SmallVector<int64_t> loops = op.getStaticLoopRanges();
    if (llvm::any_of(loops, [&](int64_t size) {
          return ShapedType::isDynamic(size) || size < minDim;
        }))
      return rewriter.notifyMatchFailure(op, "a thin or dynamic product");
    Value a = op.getDpsInputs()[first], b = op.getDpsInputs()[1 - first];

    Location loc = op.getLoc();
    rewriter.setInsertionPoint(op);
    RuntimeCalls calls(rewriter, loc, op);
    auto size = [&](Value matrix, unsigned dim) -> Value {
      Value index = memref::DimOp::create(rewriter, loc, matrix, dim);
      return arith::IndexCastOp::create(rewriter, loc, rewriter.getI64Type(),
                                        index);
    };
    auto rowStride = [&](Value matrix) -> Value {
      auto metadata =
          memref::ExtractStridedMetadataOp::create(rewriter, loc, matrix);
      return arith::IndexCastOp::create(rewriter, loc, rewriter.getI64Type(),
                                        metadata.getStrides()[0]);
    };
    // op(a) is m x k, stored k x m when transposed (the result's row index
    // its second); op(b) is k x n, stored n x k when transposed (the
    // result's column index its first).
    bool transposeA = *aRowAt, transposeB = !*bColAt;
    calls.call("distopt_rt_matmul_f32",
               {calls.i32(transposeA), calls.i32(transposeB), size(out, 0),
                size(out, 1), size(a, transposeA ? 0 : 1), calls.pointer(a),
                rowStride(a), calls.pointer(b), rowStride(b),
                calls.pointer(out), rowStride(out)});
    rewriter.eraseOp(op);
    return success();
  }

  int64_t minDim;
};

struct ContractionsToRuntimePass
    : public distopt::impl::ContractionsToRuntimePassBase<
          ContractionsToRuntimePass> {
  using ContractionsToRuntimePassBase::ContractionsToRuntimePassBase;

  void runOnOperation() override {
    if (minDim < 1) {
      getOperation().emitError()
          << "--distopt-contractions-to-runtime: min-dim must be positive, got "
          << static_cast<int64_t>(minDim);
      return signalPassFailure();
    }
    RewritePatternSet patterns(&getContext());
    patterns.add<ContractionToRuntime>(&getContext(), minDim);
    walkAndApplyPatterns(getOperation(), std::move(patterns));
  }
};

} // namespace
