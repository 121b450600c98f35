//===- AnnotateVectorWidth.cpp - element-wise loops' vector width -------===//
//
// --distopt-annotate-vector-width (Passes.td): the element-wise loops of a
// step lowered to loops ask LLVM's loop vectorizer for vectors of a given
// width; every other loop keeps the target's choice. Streaming updates
// and compute-bound contractions want different widths on some CPUs, and
// a target feature such as prefer-256-bit sets one for the whole object.
//
//===----------------------------------------------------------------------===//

#include "distopt/Conversion/Passes.h"

#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/OpenMP/OpenMPDialect.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Utils/StaticValueUtils.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"

namespace mlir::distopt {
#define GEN_PASS_DEF_ANNOTATEVECTORWIDTHPASS
#include "distopt/Conversion/Passes.h.inc"
} // namespace mlir::distopt

using namespace mlir;

namespace {

/// The attribute --convert-scf-to-cf carries from an scf.for to its latch
/// branch, where --convert-cf-to-llvm makes it the `llvm.br`'s property of
/// that name (its `!llvm.loop` metadata). Named `llvm.loop_annotation`, it
/// would stay a discardable attribute that the translation ignores.
constexpr StringLiteral kLoopAnnotation = "loop_annotation";

/// Whether `memref[iv]` walks `type` element by element.
bool isUnitStrideVector(MemRefType type) {
  SmallVector<int64_t> strides;
  int64_t offset;
  return type.getRank() == 1 &&
         succeeded(type.getStridesAndOffset(strides, offset)) &&
         strides.front() == 1;
}

/// The widest scalar, in bits, that a loop body over `iv` computes with,
/// when the loop is element-wise: each store writes a unit-stride 1-D
/// buffer at `iv`, each load reads one there or a 0-d buffer, and the rest
/// is free of memory effects and regions. 0 for any other loop.
unsigned elementwiseScalarBits(Block &body, Value iv) {
  unsigned widest = 0;
  bool stores = false;
  for (Operation &op : body.without_terminator()) {
    if (auto load = dyn_cast<memref::LoadOp>(op)) {
      if (load.getMemRefType().getRank() != 0 &&
          !(isUnitStrideVector(load.getMemRefType()) &&
            load.getIndices().front() == iv))
        return 0;
    } else if (auto store = dyn_cast<memref::StoreOp>(op)) {
      if (!isUnitStrideVector(store.getMemRefType()) ||
          store.getIndices().front() != iv)
        return 0;
      stores = true;
    } else if (op.getNumRegions() != 0 || !isMemoryEffectFree(&op)) {
      return 0;
    }
    for (Type type : op.getResultTypes())
      if (type.isIntOrFloat() && !type.isInteger(1))
        widest = std::max(widest, type.getIntOrFloatBitWidth());
  }
  return stores ? widest : 0;
}

struct AnnotateVectorWidthPass
    : public distopt::impl::AnnotateVectorWidthPassBase<
          AnnotateVectorWidthPass> {
  using AnnotateVectorWidthPassBase::AnnotateVectorWidthPassBase;

  /// Lanes for a loop body over `iv`; 0 when it is not element-wise or
  /// its scalars are as wide as the vector.
  unsigned lanes(Block &body, Value iv, OpFoldResult step) {
    if (getConstantIntValue(step) != 1)
      return 0;
    unsigned scalarBits = elementwiseScalarBits(body, iv);
    if (scalarBits == 0 || bits / scalarBits < 2)
      return 0;
    return bits / scalarBits;
  }

  void runOnOperation() override {
    // LLVM ignores a width that is not a power of two.
    if (!llvm::isPowerOf2_32(bits) && bits != 0) {
      getOperation()->emitError("--distopt-annotate-vector-width: bits must "
                                "be a power of two, or 0, got ")
          << static_cast<unsigned>(bits);
      return signalPassFailure();
    }
    if (bits == 0)
      return;
    MLIRContext *ctx = &getContext();
    getOperation()->walk([&](scf::ForOp loop) {
      if (loop.getNumResults() != 0 || loop->hasAttr(kLoopAnnotation))
        return;
      unsigned width =
          lanes(*loop.getBody(), loop.getInductionVar(), loop.getStep());
      if (width == 0)
        return;
      auto vectorize = LLVM::LoopVectorizeAttr::get(
          ctx, /*disable=*/{}, /*predicateEnable=*/{}, /*scalableEnable=*/{},
          IntegerAttr::get(IntegerType::get(ctx, 32), width), {}, {}, {});
      loop->setAttr(kLoopAnnotation, LLVM::LoopAnnotationAttr::get(
                                         ctx, {}, vectorize, {}, {}, {}, {}, {},
                                         {}, {}, {}, {}, {}, {}, {}, {}));
    });
    // A work-sharing loop's own, as `omp.wsloop { omp.simd simdlen(n) {
    // omp.loop_nest } }`, composite (OpenMP's `for simd`).
    getOperation()->walk([&](omp::WsloopOp wsloop) {
      auto nest = dyn_cast<omp::LoopNestOp>(wsloop.getWrappedLoop());
      if (!nest || wsloop.isComposite() || nest.getNumLoops() != 1 ||
          !nest.getRegion().hasOneBlock() ||
          !wsloop.getReductionVars().empty() ||
          !wsloop.getPrivateVars().empty())
        return;
      unsigned width = lanes(nest.getRegion().front(), nest.getIVs().front(),
                             nest.getLoopSteps().front());
      if (width == 0)
        return;
      OpBuilder builder(nest);
      omp::SimdOperands clauses;
      clauses.simdlen = builder.getI64IntegerAttr(width);
      auto simd = omp::SimdOp::create(builder, nest.getLoc(), clauses);
      Block *body = builder.createBlock(&simd.getRegion());
      nest->moveBefore(body, body->end());
      simd.setComposite(true);
      wsloop.setComposite(true);
    });
  }
};

} // namespace
