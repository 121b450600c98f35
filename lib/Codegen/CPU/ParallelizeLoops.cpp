//===- ParallelizeLoops.cpp - large loops and copies in parallel ---------===//
//
// --distopt-parallelize-loops (Passes.td): on a bufferized step, large
// element-wise linalg ops, whole-tensor reductions (split into fixed
// chunks) and copies become scf.parallel loops, which the CPU lowering
// turns into OpenMP work-sharing loops. Everything else is left for
// --convert-linalg-to-loops.
//
//===----------------------------------------------------------------------===//

#include "distopt/Codegen/Passes.h"
#include "distopt/Codegen/Shapes.h"
#include "distopt/Codegen/SplitReductions.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/Linalg/Transforms/Transforms.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/MemRef/Utils/MemRefUtils.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/IR/PatternMatch.h"

namespace mlir::distopt {
#define GEN_PASS_DEF_PARALLELIZELOOPSPASS
#include "distopt/Codegen/Passes.h.inc"
} // namespace mlir::distopt

using namespace mlir;

namespace {

/// Elements per chunk of a split reduction or copy. Fixed, so that a
/// reduction combines its elements in the same order whatever the number
/// of threads; large enough that a chunk's loop runs long in vector lanes.
constexpr int64_t kChunkElements = 65536;

/// Whether `op` runs inside a sequential loop, where each iteration would
/// start the threads again.
bool inSequentialLoop(Operation *op) {
  return op->getParentOfType<scf::ForOp>() ||
         op->getParentOfType<scf::WhileOp>();
}

/// The op's iteration count when every loop is static; 0 otherwise.
int64_t staticIterations(linalg::LinalgOp op) {
  if (!op.hasPureBufferSemantics() || op.getNumLoops() == 0)
    return 0;
  int64_t count = 1;
  for (int64_t size : op.getStaticLoopRanges()) {
    if (ShapedType::isDynamic(size))
      return 0;
    count *= size;
  }
  return count;
}

/// A large copy between contiguous buffers (bucket packing, mostly) as a
/// parallel loop of memcpy over fixed chunks.
void parallelCopy(IRRewriter &rewriter, memref::CopyOp copy) {
  Location loc = copy.getLoc();
  rewriter.setInsertionPoint(copy);
  Value source = distopt::flatten(rewriter, loc, copy.getSource());
  Value target = distopt::flatten(rewriter, loc, copy.getTarget());
  int64_t count = cast<MemRefType>(copy.getSource().getType()).getNumElements();
  auto index = [&](OpBuilder &b, int64_t v) -> Value {
    return arith::ConstantIndexOp::create(b, loc, v);
  };
  scf::ParallelOp::create(
      rewriter, loc, ValueRange{index(rewriter, 0)},
      ValueRange{index(rewriter, llvm::divideCeil(count, kChunkElements))},
      ValueRange{index(rewriter, 1)},
      [&](OpBuilder &b, Location, ValueRange ivs) {
        Value begin =
            arith::MulIOp::create(b, loc, ivs[0], index(b, kChunkElements));
        Value size = arith::MinSIOp::create(
            b, loc, index(b, kChunkElements),
            arith::SubIOp::create(b, loc, index(b, count), begin));
        OpFoldResult offsets[] = {begin}, sizes[] = {size},
                     strides[] = {b.getIndexAttr(1)};
        Value from =
            memref::SubViewOp::create(b, loc, source, offsets, sizes, strides);
        Value to =
            memref::SubViewOp::create(b, loc, target, offsets, sizes, strides);
        memref::CopyOp::create(b, loc, from, to);
        scf::ReduceOp::create(b, loc);
      });
  rewriter.eraseOp(copy);
}

/// The op's iteration count when every loop is parallel and static; 0
/// otherwise.
int64_t parallelIterations(linalg::LinalgOp op) {
  if (op.getNumParallelLoops() != op.getNumLoops())
    return 0;
  return staticIterations(op);
}

struct ParallelizeLoopsPass
    : public distopt::impl::ParallelizeLoopsPassBase<ParallelizeLoopsPass> {
  using ParallelizeLoopsPassBase::ParallelizeLoopsPassBase;

  void runOnOperation() override {
    SmallVector<linalg::LinalgOp> large;
    SmallVector<linalg::GenericOp> reductions;
    SmallVector<memref::CopyOp> copies;
    getOperation()->walk([&](Operation *op) {
      if (inSequentialLoop(op))
        return;
      if (auto copy = dyn_cast<memref::CopyOp>(op)) {
        auto source = dyn_cast<MemRefType>(copy.getSource().getType());
        auto target = dyn_cast<MemRefType>(copy.getTarget().getType());
        if (source && target && source.getRank() > 0 &&
            memref::isStaticShapeAndContiguousRowMajor(source) &&
            memref::isStaticShapeAndContiguousRowMajor(target) &&
            source.getNumElements() >= minIterations)
          copies.push_back(copy);
        return;
      }
      auto linalgOp = dyn_cast<linalg::LinalgOp>(op);
      if (!linalgOp)
        return;
      if (parallelIterations(linalgOp) >= minIterations)
        large.push_back(linalgOp);
      else if (auto generic = dyn_cast<linalg::GenericOp>(op))
        if (generic.getNumReductionLoops() == generic.getNumLoops() &&
            staticIterations(generic) >= minIterations)
          reductions.push_back(generic);
    });
    IRRewriter rewriter(&getContext());
    for (memref::CopyOp copy : copies)
      parallelCopy(rewriter, copy);
    // What splitWholeReduction does not take (a strict float sum, a strided
    // input) stays one sequential loop.
    for (linalg::GenericOp reduction : reductions)
      (void)distopt::splitWholeReduction(
          rewriter, reduction,
          {distopt::ReductionSplit::Chunked, kChunkElements});
    for (linalg::LinalgOp op : large) {
      rewriter.setInsertionPoint(op);
      if (failed(linalg::linalgOpToParallelLoops(rewriter, op))) {
        op->emitError("could not be lowered to parallel loops");
        return signalPassFailure();
      }
      rewriter.eraseOp(op);
    }
  }
};

} // namespace
