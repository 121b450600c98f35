//===- SplitReductions.cpp - whole-tensor reductions in two kernels -*- C++
//-*-===//
//
// Part of --distopt-offload-to-gpu: a reduction of a whole tensor to a
// scalar would be one thread's loop; it becomes a kernel of partial results
// and one that combines them in order.
//
//===----------------------------------------------------------------------===//

#include "SplitReductions.h"

#include "mlir/Dialect/Affine/IR/AffineOps.h"
#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "llvm/ADT/TypeSwitch.h"

using namespace mlir;

/// Partial results of a whole-tensor reduction: one per thread of its first
/// kernel (128 blocks of 256 threads), combined in order by one thread.
constexpr int64_t kReductionThreads = 128 * 256;

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

/// A reduction of a whole tensor to a scalar (a norm, an all-finite check,
/// a count) in two kernels: each of kReductionThreads threads combines a
/// strided share of the elements, then one thread combines those partial
/// results in order into the output. The elements are combined in another
/// order than the CPU's sequential loop (floating-point sums may round
/// differently); the result is the same on every run. Returns failure,
/// touching nothing, for any other linalg op.
LogicalResult mlir::distopt::splitWholeReduction(IRRewriter &rewriter,
                                                 linalg::GenericOp op) {
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
  Value element = combine->getOperand(combine->getOperand(0) == acc ? 1 : 0);
  SmallVector<int64_t> ranges = op.getStaticLoopRanges();
  if (llvm::any_of(ranges, ShapedType::isDynamic))
    return failure();
  int64_t count = 1;
  for (int64_t range : ranges)
    count *= range;

  Location loc = op.getLoc();
  Type accType = outType.getElementType();
  rewriter.setInsertionPoint(op);
  auto index = [&](OpBuilder &b, int64_t v) -> Value {
    return arith::ConstantIndexOp::create(b, loc, v);
  };
  Value partials = memref::AllocOp::create(
      rewriter, loc, MemRefType::get({kReductionThreads}, accType));
  Value threads = index(rewriter, kReductionThreads);
  auto perThread = scf::ParallelOp::create(
      rewriter, loc, ValueRange{index(rewriter, 0)}, ValueRange{threads},
      ValueRange{index(rewriter, 1)},
      [&](OpBuilder &b, Location, ValueRange ivs) {
        Value identity = arith::getIdentityValue(*kind, accType, b, loc);
        auto strided = scf::ForOp::create(
            b, loc, ivs[0], index(b, count), threads, ValueRange{identity},
            [&](OpBuilder &fb, Location, Value linear, ValueRange iter) {
              // The loop indices of element `linear`, row-major.
              SmallVector<Value> loopIndices(ranges.size());
              Value rest = linear;
              for (int64_t d = ranges.size() - 1; d >= 0; --d) {
                Value range = index(fb, ranges[d]);
                loopIndices[d] = arith::RemUIOp::create(fb, loc, rest, range);
                rest = arith::DivUIOp::create(fb, loc, rest, range);
              }
              IRMapping mapping;
              for (OpOperand *input : op.getDpsInputOperands()) {
                AffineMap map = op.getMatchingIndexingMap(input);
                SmallVector<Value> at;
                for (AffineExpr expr : map.getResults())
                  at.push_back(affine::AffineApplyOp::create(
                      fb, loc, AffineMap::get(map.getNumDims(), 0, expr),
                      loopIndices));
                Value arg = op.getMatchingBlockArgument(input);
                if (isa<MemRefType>(input->get().getType()))
                  mapping.map(
                      arg, memref::LoadOp::create(fb, loc, input->get(), at));
                else
                  mapping.map(arg, input->get()); // a scalar operand
              }
              for (Operation &nested : body.without_terminator())
                if (&nested != combine)
                  fb.clone(nested, mapping);
              Value next = arith::getReductionOp(
                  *kind, fb, loc, iter[0], mapping.lookupOrDefault(element));
              scf::YieldOp::create(fb, loc, next);
            });
        memref::StoreOp::create(b, loc, strided.getResult(0), partials, ivs[0]);
        scf::ReduceOp::create(b, loc);
      });
  (void)perThread;
  Value out = op.getDpsInits()[0];
  Value initial = memref::LoadOp::create(rewriter, loc, out);
  auto inOrder = scf::ForOp::create(
      rewriter, loc, index(rewriter, 0), threads, index(rewriter, 1),
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

/// Copies and linalg ops become scf.parallel nests (reductions inside as
/// scf.for), the form both the mapping and the one-thread kernels take.
