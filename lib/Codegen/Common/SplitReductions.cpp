//===- SplitReductions.cpp - whole-tensor reductions in parallel ---------===//
//
// SplitReductions.h: the GPU lowering's two kernels (OffloadToGPU.cpp) and
// the CPU's chunks (--distopt-parallelize-loops).
//
//===----------------------------------------------------------------------===//

#include "distopt/Codegen/SplitReductions.h"
#include "distopt/Codegen/Shapes.h"

#include "mlir/Dialect/Affine/IR/AffineOps.h"
#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/MemRef/Utils/MemRefUtils.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "llvm/ADT/TypeSwitch.h"

using namespace mlir;

/// The combining op of a reduction body, `acc = combine(acc, value)`, as an
/// atomic kind (which gives its identity and rebuilds it), if it is one.
static std::optional<arith::AtomicRMWKind> combiningKind(Operation *op) {
  using K = arith::AtomicRMWKind;
  return llvm::TypeSwitch<Operation *, std::optional<K>>(op)
      .Case([](arith::AddFOp) { return K::addf; })
      .Case([](arith::AddIOp) { return K::addi; })
      .Case([](arith::MulFOp) { return K::mulf; })
      .Case([](arith::MulIOp) { return K::muli; })
      .Case([](arith::AndIOp) { return K::andi; })
      .Case([](arith::OrIOp) { return K::ori; })
      .Case([](arith::MaximumFOp) { return K::maximumf; })
      .Case([](arith::MinimumFOp) { return K::minimumf; })
      .Case([](arith::MaxNumFOp) { return K::maxnumf; })
      .Case([](arith::MinNumFOp) { return K::minnumf; })
      .Case([](arith::MaxSIOp) { return K::maxs; })
      .Case([](arith::MinSIOp) { return K::mins; })
      .Case([](arith::MaxUIOp) { return K::maxu; })
      .Case([](arith::MinUIOp) { return K::minu; })
      .Default([](Operation *) { return std::nullopt; });
}

LogicalResult mlir::distopt::splitWholeReduction(IRRewriter &rewriter,
                                                 linalg::GenericOp op,
                                                 ReductionSplit split) {
  if (op.getNumDpsInits() != 1 ||
      op.getNumReductionLoops() != op.getNumLoops() ||
      op->getParentOfType<scf::ParallelOp>() ||
      !op.getBody()->getOps<linalg::IndexOp>().empty())
    return failure();
  auto outType = dyn_cast<MemRefType>(op.getDpsInits()[0].getType());
  if (!outType || outType.getRank() != 0)
    return failure();
  Block &body = op.getRegion().front();
  Value acc = op.getRegionOutputArgs()[0];
  auto yield = cast<linalg::YieldOp>(body.getTerminator());
  Operation *combine = yield.getValues()[0].getDefiningOp();
  std::optional<arith::AtomicRMWKind> kind =
      combine ? combiningKind(combine) : std::nullopt;
  if (!kind || !acc.hasOneUse() || combine->getNumOperands() != 2 ||
      !llvm::is_contained(combine->getOperands(), acc))
    return failure();
  SmallVector<int64_t> ranges = op.getStaticLoopRanges();
  if (llvm::any_of(ranges, ShapedType::isDynamic))
    return failure();
  int64_t count = 1;
  for (int64_t range : ranges)
    count *= range;
  bool chunked = split.layout == ReductionSplit::Chunked;
  if (chunked) {
    // Sums and products in another order only where the body allows it.
    using K = arith::AtomicRMWKind;
    auto fastMath = dyn_cast<arith::ArithFastMathInterface>(combine);
    if ((*kind == K::addf || *kind == K::mulf) &&
        !(fastMath &&
          bitEnumContainsAll(fastMath.getFastMathFlagsAttr().getValue(),
                             arith::FastMathFlags::reassoc)))
      return failure();
    // In memory order: one input, read whole, contiguous.
    if (op.getNumDpsInputs() != 1)
      return failure();
    auto inType = dyn_cast<MemRefType>(op.getDpsInputs()[0].getType());
    if (!inType || inType.getRank() == 0 ||
        !memref::isStaticShapeAndContiguousRowMajor(inType) ||
        !op.getMatchingIndexingMap(op.getDpsInputOperand(0)).isIdentity())
      return failure();
  }
  int64_t partialCount =
      chunked ? llvm::divideCeil(count, split.size) : split.size;

  Location loc = op.getLoc();
  Type accType = outType.getElementType();
  rewriter.setInsertionPoint(op);
  auto index = [&](OpBuilder &b, int64_t v) -> Value {
    return arith::ConstantIndexOp::create(b, loc, v);
  };
  // Chunks read the input as the 1-d run of its elements.
  Value flatInput =
      chunked ? flatten(rewriter, loc, op.getDpsInputs()[0]) : Value();
  Value partials = memref::AllocOp::create(
      rewriter, loc, MemRefType::get({partialCount}, accType));
  Value numPartials = index(rewriter, partialCount);
  scf::ParallelOp::create(
      rewriter, loc, ValueRange{index(rewriter, 0)}, ValueRange{numPartials},
      ValueRange{index(rewriter, 1)},
      [&](OpBuilder &b, Location, ValueRange ivs) {
        Value identity = arith::getIdentityValue(*kind, accType, b, loc);
        Value begin = ivs[0], end = index(b, count), step = numPartials;
        if (chunked) {
          Value size = index(b, split.size);
          begin = arith::MulIOp::create(b, loc, ivs[0], size);
          end = arith::MinSIOp::create(
              b, loc, arith::AddIOp::create(b, loc, begin, size), end);
          step = index(b, 1);
        }
        auto partial = scf::ForOp::create(
            b, loc, begin, end, step, ValueRange{identity},
            [&](OpBuilder &fb, Location, Value linear, ValueRange iter) {
              IRMapping mapping;
              for (OpOperand *input : op.getDpsInputOperands()) {
                Value arg = op.getMatchingBlockArgument(input);
                if (!isa<MemRefType>(input->get().getType())) {
                  mapping.map(arg, input->get()); // a scalar operand
                  continue;
                }
                if (chunked) {
                  mapping.map(arg, memref::LoadOp::create(fb, loc, flatInput,
                                                          ValueRange{linear}));
                  continue;
                }
                // The loop indices of element `linear`, row-major.
                SmallVector<Value> loopIndices(ranges.size());
                Value rest = linear;
                for (int64_t d = ranges.size() - 1; d > 0; --d) {
                  Value range = index(fb, ranges[d]);
                  loopIndices[d] = arith::RemUIOp::create(fb, loc, rest, range);
                  rest = arith::DivUIOp::create(fb, loc, rest, range);
                }
                if (!ranges.empty())
                  loopIndices[0] = rest;
                AffineMap map = op.getMatchingIndexingMap(input);
                SmallVector<Value> at;
                for (AffineExpr expr : map.getResults())
                  at.push_back(affine::AffineApplyOp::create(
                      fb, loc, AffineMap::get(map.getNumDims(), 0, expr),
                      loopIndices));
                mapping.map(arg,
                            memref::LoadOp::create(fb, loc, input->get(), at));
              }
              // The body as it is, its combine (and its fast-math flags)
              // onto this partial result.
              mapping.map(acc, iter[0]);
              for (Operation &nested : body.without_terminator())
                fb.clone(nested, mapping);
              scf::YieldOp::create(fb, loc,
                                   mapping.lookup(yield.getValues()[0]));
            });
        memref::StoreOp::create(b, loc, partial.getResult(0), partials, ivs[0]);
        scf::ReduceOp::create(b, loc);
      });
  Value out = op.getDpsInits()[0];
  Value initial = memref::LoadOp::create(rewriter, loc, out);
  auto inOrder = scf::ForOp::create(
      rewriter, loc, index(rewriter, 0), numPartials, index(rewriter, 1),
      ValueRange{initial},
      [&](OpBuilder &b, Location, Value i, ValueRange iter) {
        Value partial = memref::LoadOp::create(b, loc, partials, i);
        scf::YieldOp::create(
            b, loc, arith::getReductionOp(*kind, b, loc, iter[0], partial));
      });
  memref::StoreOp::create(rewriter, loc, inOrder.getResult(0), out);
  memref::DeallocOp::create(rewriter, loc, partials);
  rewriter.eraseOp(op);
  return success();
}
