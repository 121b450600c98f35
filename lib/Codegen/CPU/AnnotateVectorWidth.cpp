//===- AnnotateVectorWidth.cpp - element-wise loops' vector width -------===//
//
// --distopt-annotate-vector-width (Passes.td): the element-wise loops of a
// step lowered to loops ask LLVM's loop vectorizer for vectors of a given
// width; every other loop keeps the target's choice. Streaming updates
// and compute-bound contractions want different widths on some CPUs, and
// a target feature such as prefer-256-bit sets one for the whole object.
//
//===----------------------------------------------------------------------===//

#include "distopt/Codegen/Passes.h"

#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/OpenMP/OpenMPDialect.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Utils/StaticValueUtils.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"

namespace mlir::distopt {
#define GEN_PASS_DEF_ANNOTATEVECTORWIDTHPASS
#include "distopt/Codegen/Passes.h.inc"
} // namespace mlir::distopt

using namespace mlir;

namespace {

/// The attribute --convert-scf-to-cf carries from an scf.for to its latch
/// branch, where --convert-cf-to-llvm makes it the `llvm.br`'s property of
/// that name (its `!llvm.loop` metadata). Named `llvm.loop_annotation`, it
/// would stay a discardable attribute that the translation ignores.
constexpr StringLiteral kLoopAnnotation = "loop_annotation";

/// Whether `memref[iv]`, with `memref` defined outside the loop `body`,
/// walks memory element by element. (A view made inside the loop could
/// move with `iv` itself.)
bool isUnitStrideVector(Value memref, Block &body) {
  auto type = cast<MemRefType>(memref.getType());
  SmallVector<int64_t> strides;
  int64_t offset;
  return type.getRank() == 1 &&
         succeeded(type.getStridesAndOffset(strides, offset)) &&
         strides.front() == 1 &&
         !body.getParent()->isAncestor(memref.getParentRegion());
}

/// The widest scalar, in bits, that a loop body over `iv` reads, writes or
/// computes floating-point arithmetic with (index arithmetic and
/// predicates do not count), when the loop is element-wise: each store
/// writes a unit-stride 1-D buffer of integers or floats at `iv`, each
/// load reads one there or a 0-d buffer, and the rest is free of memory
/// effects and regions. 0 for any other loop.
unsigned elementwiseScalarBits(Block &body, Value iv) {
  unsigned widest = 0;
  bool stores = false;
  // False for what has no width of its own (index, vectors, pointers).
  auto widen = [&](Type type) {
    if (!type.isIntOrFloat())
      return false;
    widest = std::max(widest, type.getIntOrFloatBitWidth());
    return true;
  };
  for (Operation &op : body.without_terminator()) {
    if (auto load = dyn_cast<memref::LoadOp>(op)) {
      if ((load.getMemRefType().getRank() != 0 &&
           !(isUnitStrideVector(load.getMemRef(), body) &&
             load.getIndices().front() == iv)) ||
          !widen(load.getType()))
        return 0;
    } else if (auto store = dyn_cast<memref::StoreOp>(op)) {
      if (!isUnitStrideVector(store.getMemRef(), body) ||
          store.getIndices().front() != iv ||
          !widen(store.getValueToStore().getType()))
        return 0;
      stores = true;
    } else if (op.getNumRegions() != 0 || !isMemoryEffectFree(&op)) {
      return 0;
    }
    for (Type type : op.getResultTypes())
      if (isa<FloatType>(type))
        (void)widen(type);
  }
  return stores ? widest : 0;
}

struct AnnotateVectorWidthPass
    : public distopt::impl::AnnotateVectorWidthPassBase<
          AnnotateVectorWidthPass> {
  using AnnotateVectorWidthPassBase::AnnotateVectorWidthPassBase;

  /// Lanes for a loop body over `iv`: a power of two up to LLVM's 64, as
  /// its vectorizer takes them; 0 when the loop is not element-wise or
  /// its scalars are as wide as the vector.
  unsigned lanes(Block &body, Value iv, OpFoldResult step) {
    if (getConstantIntValue(step) != 1)
      return 0;
    unsigned scalarBits = elementwiseScalarBits(body, iv);
    if (scalarBits == 0)
      return 0;
    unsigned count = llvm::bit_floor(std::min(bits / scalarBits, 64u));
    return count < 2 ? 0 : count;
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
    // omp.loop_nest } }`, composite (OpenMP's `for simd`). Its iterations
    // are independent already (the scf.parallel it came from, and OpenMP's
    // division among threads, say so); the simd construct lets LLVM rely
    // on it too.
    getOperation()->walk([&](omp::WsloopOp wsloop) {
      // No clause that takes values (reduction, private, linear, allocate,
      // a chunk size) or orders iterations: what --convert-scf-to-openmp
      // makes of a parallel loop without reductions.
      auto nest = dyn_cast<omp::LoopNestOp>(wsloop.getWrappedLoop());
      if (!nest || wsloop.isComposite() || wsloop->getNumOperands() != 0 ||
          wsloop.getOrderedAttr() || nest.getNumLoops() != 1 ||
          !nest.getRegion().hasOneBlock())
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
