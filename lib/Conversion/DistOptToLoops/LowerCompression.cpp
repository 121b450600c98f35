//===- LowerCompression.cpp - PowerSGD, orthogonalize, top-K -*- C++ -*-===//
//
// --distopt-lower-local-ops, compression: orthogonalize (Gram-Schmidt),
// PowerSGD batches (their factors all-reduced together) and top-K
// all-reduce.
//
//===----------------------------------------------------------------------===//

#include "LocalOps.h"

#include "distopt/Conversion/DistOptToLoops/DistOptToLoops.h"

#include "distopt/Conversion/DistOptToRuntime/RuntimeCalls.h"
#include "distopt/Dialect/DistOpt/IR/DistOptOps.h"
#include "distopt/Dialect/DistOpt/IR/StepABI.h"
#include "distopt/Transforms/Bucketing.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/Builders.h"

#include <cmath>

using namespace mlir;

namespace mlir::distopt {

/// Elementwise `combine(lhs, rhs)` of two tensors of one type, into a new
/// tensor, or written over `rhs` (destination-passing style: bufferization
/// then reuses rhs's buffer where its old value is not read afterwards, as
/// for state a step updates).
static Value
elementwise(OpBuilder &b, Location loc, Value lhs, Value rhs,
            function_ref<Value(OpBuilder &, Location, Value, Value)> combine,
            bool overRhs = false) {
  auto type = cast<RankedTensorType>(lhs.getType());
  AffineMap identity = b.getMultiDimIdentityMap(type.getRank());
  SmallVector<utils::IteratorType> iterators(type.getRank(),
                                             utils::IteratorType::parallel);
  SmallVector<Value> inputs = {lhs};
  Value init = rhs;
  if (!overRhs) {
    inputs.push_back(rhs);
    init =
        tensor::EmptyOp::create(b, loc, type.getShape(), type.getElementType());
  }
  // Either way the body sees lhs then rhs: inputs come before the init.
  return linalg::GenericOp::create(
             b, loc, TypeRange{type}, inputs, ValueRange{init},
             SmallVector<AffineMap>(inputs.size() + 1, identity), iterators,
             [&](OpBuilder &nb, Location nloc, ValueRange args) {
               linalg::YieldOp::create(nb, nloc,
                                       combine(nb, nloc, args[0], args[1]));
             })
      .getResult(0);
}

Value contract(OpBuilder &b, Location loc, Value lhs, Value rhs,
               AffineMap lhsMap, AffineMap rhsMap, AffineMap outMap,
               unsigned reduction, ArrayRef<int64_t> shape, bool reassociate,
               bool rounded) {
  auto element =
      cast<FloatType>(cast<RankedTensorType>(lhs.getType()).getElementType());
  // Half types accumulate in f32, as torch's CPU matmul does.
  Type acc = element.getWidth() < 32 ? b.getF32Type() : Type(element);
  Value init = tensor::EmptyOp::create(b, loc, shape, acc);
  Value zero = arith::ConstantOp::create(b, loc, b.getZeroAttr(acc));
  init = linalg::FillOp::create(b, loc, zero, init).getResult(0);
  SmallVector<utils::IteratorType> iterators(3, utils::IteratorType::parallel);
  iterators[reduction] = utils::IteratorType::reduction;
  arith::FastMathFlags flags =
      reassociate ? arith::FastMathFlags::reassoc : arith::FastMathFlags::none;
  Value product = linalg::GenericOp::create(
                      b, loc, TypeRange{init.getType()}, ValueRange{lhs, rhs},
                      ValueRange{init},
                      SmallVector<AffineMap>{lhsMap, rhsMap, outMap}, iterators,
                      [&](OpBuilder &nb, Location nloc, ValueRange args) {
                        Value x = widen(nb, nloc, args[0], acc);
                        Value y = widen(nb, nloc, args[1], acc);
                        Value xy = arith::MulFOp::create(nb, nloc, x, y);
                        linalg::YieldOp::create(
                            nb, nloc,
                            arith::AddFOp::create(nb, nloc, args[2], xy, flags)
                                .getResult());
                      })
                      .getResult(0);
  if (acc == element || !rounded)
    return product;
  return arith::TruncFOp::create(b, loc, RankedTensorType::get(shape, element),
                                 product);
}

AffineMap dims(OpBuilder &b, unsigned row, unsigned col) {
  MLIRContext *ctx = b.getContext();
  return AffineMap::get(
      3, 0, {getAffineDimExpr(row, ctx), getAffineDimExpr(col, ctx)}, ctx);
}

/// Modified Gram-Schmidt, left to right, as the PowerSGD hook's
/// _orthogonalize_gram_schmidt: u = column i / (its 2-norm [+ epsilon]);
/// every later column c -= (u . column c) * u. The rank is small and static,
/// so the columns are unrolled; each step rewrites the whole matrix (no
/// strided column slices). Norms accumulate in f64 (torch's CPU norm of
/// f32), dot products in f32 or the element type if wider. Both sums are
/// reassociable, so that they vectorize (a serial chain of adds runs at one
/// element per add latency): a reduction's order is the library's choice,
/// torch's included, and these stay within the tests' tolerance of it.
static Value orthogonalize(OpBuilder &b, Location loc, Value matrix,
                           double epsilon) {
  auto type = cast<RankedTensorType>(matrix.getType());
  auto element = cast<FloatType>(type.getElementType());
  Type f64 = b.getF64Type();
  int64_t rows = type.getDimSize(0), rank = type.getDimSize(1);
  MLIRContext *ctx = b.getContext();
  auto parallel = utils::IteratorType::parallel;
  auto reduction = utils::IteratorType::reduction;
  auto reassoc = arith::FastMathFlags::reassoc;
  AffineExpr d0 = getAffineDimExpr(0, ctx), d1 = getAffineDimExpr(1, ctx);
  auto filled = [&](ArrayRef<int64_t> shape, Type t) -> Value {
    Value empty = tensor::EmptyOp::create(b, loc, shape, t);
    Value zero = arith::ConstantOp::create(b, loc, b.getZeroAttr(t));
    return linalg::FillOp::create(b, loc, zero, empty).getResult(0);
  };
  AffineMap identity = b.getMultiDimIdentityMap(2);
  for (int64_t i = 0; i < rank; ++i) {
    AffineExpr col = getAffineConstantExpr(i, ctx);
    // The norm of column i: rows -> scalar.
    Value sumSq =
        linalg::GenericOp::create(
            b, loc, TypeRange{RankedTensorType::get({}, f64)},
            ValueRange{matrix}, ValueRange{filled({}, f64)},
            SmallVector<AffineMap>{AffineMap::get(1, 0, {d0, col}, ctx),
                                   AffineMap::get(1, 0, {}, ctx)},
            SmallVector<utils::IteratorType>{reduction},
            [&](OpBuilder &nb, Location l, ValueRange args) {
              Value w = widen(nb, l, args[0], f64);
              Value sq = arith::MulFOp::create(nb, l, w, w);
              linalg::YieldOp::create(
                  nb, l,
                  arith::AddFOp::create(nb, l, args[1], sq, reassoc)
                      .getResult());
            })
            .getResult(0);
    Value norm = math::SqrtOp::create(
        b, loc, tensor::ExtractOp::create(b, loc, sumSq, ValueRange{}));
    if (element.getWidth() < 64)
      norm = arith::TruncFOp::create(b, loc, element, norm);
    if (epsilon > 0)
      norm = arith::AddFOp::create(
          b, loc, norm,
          arith::ConstantOp::create(b, loc, FloatAttr::get(element, epsilon)));
    // u = column i / norm, divided once per row.
    Value unit =
        linalg::GenericOp::create(
            b, loc, TypeRange{RankedTensorType::get({rows}, element)},
            ValueRange{matrix},
            ValueRange{tensor::EmptyOp::create(b, loc, {rows}, element)},
            SmallVector<AffineMap>{AffineMap::get(1, 0, {d0, col}, ctx),
                                   AffineMap::get(1, 0, {d0}, ctx)},
            SmallVector<utils::IteratorType>{parallel},
            [&](OpBuilder &nb, Location l, ValueRange args) {
              linalg::YieldOp::create(
                  nb, l,
                  arith::DivFOp::create(nb, l, args[0], norm).getResult());
            })
            .getResult(0);
    // The last column has no later columns to project u out of.
    int64_t later = rank - i - 1;
    Value dots;
    if (later > 0) {
      // dots(c) = sum over rows r of u(r) * m(r, i + 1 + c): (c, r); the
      // products rounded to the element type, summed in f32 or wider.
      Type acc = element.getWidth() < 32 ? b.getF32Type() : Type(element);
      dots =
          linalg::GenericOp::create(
              b, loc, TypeRange{RankedTensorType::get({later}, acc)},
              ValueRange{unit, matrix}, ValueRange{filled({later}, acc)},
              SmallVector<AffineMap>{
                  AffineMap::get(2, 0, {d1}, ctx),
                  AffineMap::get(2, 0, {d1, d0 + (i + 1)}, ctx),
                  AffineMap::get(2, 0, {d0}, ctx)},
              SmallVector<utils::IteratorType>{parallel, reduction},
              [&](OpBuilder &nb, Location l, ValueRange args) {
                Value product = arith::MulFOp::create(nb, l, args[0], args[1]);
                linalg::YieldOp::create(
                    nb, l,
                    arith::AddFOp::create(nb, l, args[2],
                                          widen(nb, l, product, acc), reassoc)
                        .getResult());
              })
              .getResult(0);
      if (acc != element)
        dots = arith::TruncFOp::create(
            b, loc, RankedTensorType::get({later}, element), dots);
      // Indexed by column: zeros up to column i.
      dots = tensor::InsertSliceOp::create(
          b, loc, dots, filled({rank}, element),
          ArrayRef<OpFoldResult>{b.getIndexAttr(i + 1)},
          ArrayRef<OpFoldResult>{b.getIndexAttr(later)},
          ArrayRef<OpFoldResult>{b.getIndexAttr(1)});
    }
    // Column i becomes u, later columns lose their projection on u, earlier
    // ones are kept.
    SmallVector<Value> inputs = {matrix, unit};
    SmallVector<AffineMap> maps = {identity, AffineMap::get(2, 0, {d0}, ctx)};
    if (dots) {
      inputs.push_back(dots);
      maps.push_back(AffineMap::get(2, 0, {d1}, ctx));
    }
    maps.push_back(identity);
    matrix =
        linalg::GenericOp::create(
            b, loc, TypeRange{type}, inputs,
            ValueRange{
                tensor::EmptyOp::create(b, loc, type.getShape(), element)},
            maps, SmallVector<utils::IteratorType>{parallel, parallel},
            [&](OpBuilder &nb, Location l, ValueRange args) {
              Value c = linalg::IndexOp::create(nb, l, 1);
              Value ci = arith::ConstantIndexOp::create(nb, l, i);
              Value isCol =
                  arith::CmpIOp::create(nb, l, arith::CmpIPredicate::eq, c, ci);
              Value kept = args[0];
              if (dots) {
                Value isLater = arith::CmpIOp::create(
                    nb, l, arith::CmpIPredicate::sgt, c, ci);
                Value projected = arith::SubFOp::create(
                    nb, l, args[0],
                    arith::MulFOp::create(nb, l, args[2], args[1]));
                kept =
                    arith::SelectOp::create(nb, l, isLater, projected, args[0]);
              }
              linalg::YieldOp::create(
                  nb, l,
                  arith::SelectOp::create(nb, l, isCol, args[1], kept)
                      .getResult());
            })
            .getResult(0);
  }
  return matrix;
}

void lowerOrthogonalize(RewriterBase &rewriter, OrthogonalizeOp op) {
  OpBuilder::InsertionGuard guard(rewriter);
  rewriter.setInsertionPoint(op);
  rewriter.replaceOp(op, orthogonalize(rewriter, op.getLoc(), op.getInput(),
                                       op.getEpsilon().convertToDouble()));
}

/// A matrix transposed (PowerSGD's small factors), into `init` if given.
static Value transpose(OpBuilder &b, Location loc, Value matrix,
                       Value init = {}) {
  auto type = cast<RankedTensorType>(matrix.getType());
  if (!init)
    init = tensor::EmptyOp::create(b, loc,
                                   {type.getDimSize(1), type.getDimSize(0)},
                                   type.getElementType());
  return linalg::TransposeOp::create(b, loc, matrix, init,
                                     ArrayRef<int64_t>{1, 0})
      .getResult()[0];
}

/// PowerSGD's approximation R = P Q'^T (n x r times r x m, Q'^T given) and,
/// given M, the new error E = M - R, in one pass over the n x m elements:
/// each R[i, j] sums p[i, l] * qT[l, j] over l in order from zero, as a
/// contraction would (the rank is small and static: one input per column),
/// and is rounded to the element type before E is taken. E is written over
/// M, and R over `rInit` if given, so that they can take those buffers.
static SmallVector<Value> approximate(OpBuilder &b, Location loc, Value p,
                                      Value qT, Value m, RankedTensorType type,
                                      Value rInit) {
  auto element = cast<FloatType>(type.getElementType());
  Type acc = element.getWidth() < 32 ? b.getF32Type() : Type(element);
  int64_t rank = cast<RankedTensorType>(p.getType()).getDimSize(1);
  MLIRContext *ctx = b.getContext();
  AffineExpr i = getAffineDimExpr(0, ctx), j = getAffineDimExpr(1, ctx);
  SmallVector<Value> inputs;
  SmallVector<AffineMap> maps;
  for (int64_t l = 0; l < rank; ++l) {
    AffineExpr column = getAffineConstantExpr(l, ctx);
    inputs.append({p, qT});
    maps.push_back(AffineMap::get(2, 0, {i, column}, ctx));
    maps.push_back(AffineMap::get(2, 0, {column, j}, ctx));
  }
  AffineMap identity = b.getMultiDimIdentityMap(2);
  SmallVector<Value> outputs = {
      rInit ? rInit
            : Value(tensor::EmptyOp::create(b, loc, type.getShape(), element))};
  if (m)
    outputs.push_back(m);
  maps.append(outputs.size(), identity);
  auto generic = linalg::GenericOp::create(
      b, loc, ValueRange(outputs).getTypes(), inputs, outputs, maps,
      SmallVector<utils::IteratorType>(2, utils::IteratorType::parallel),
      [&](OpBuilder &nb, Location nloc, ValueRange args) {
        Value sum = arith::ConstantOp::create(nb, nloc, nb.getZeroAttr(acc));
        for (int64_t l = 0; l < rank; ++l) {
          Value x = widen(nb, nloc, args[2 * l], acc);
          Value y = widen(nb, nloc, args[2 * l + 1], acc);
          sum = arith::AddFOp::create(nb, nloc, sum,
                                      arith::MulFOp::create(nb, nloc, x, y));
        }
        Value r = sum;
        if (acc != element)
          r = arith::TruncFOp::create(nb, nloc, element, sum);
        SmallVector<Value> yields = {r};
        if (m) // M, read as the second output's current value
          yields.push_back(
              arith::SubFOp::create(nb, nloc, args[2 * rank + 1], r));
        linalg::YieldOp::create(nb, nloc, yields);
      });
  return SmallVector<Value>(generic.getResults());
}

/// The powersgd_all_reduce ops of a batch as their description (and the
/// hook) computes them: every member's first product, the P factors summed
/// in one all_reduce, every member's second product, the Q factors averaged
/// in one all_reduce, then every member's approximation. Packing the small
/// factors costs a copy of (n + m) r elements; a collective per tensor costs
/// the link's latency twice per tensor. The members are left without uses,
/// for the caller to erase.
SmallVector<Value> allReduceTogether(OpBuilder &b, Location loc,
                                     ArrayRef<Value> factors,
                                     FlatSymbolRefAttr group,
                                     ReductionKind kind) {
  auto reduce = [&](Value value) -> Value {
    return AllReduceOp::create(b, loc, value.getType(), value, group,
                               /*wire_type=*/nullptr,
                               ReductionKindAttr::get(b.getContext(), kind),
                               /*scale=*/nullptr);
  };
  if (factors.size() == 1)
    return {reduce(factors.front())};
  // Packed into one bucket (1-D, no padding needed: the alignment is one
  // element).
  auto element =
      cast<RankedTensorType>(factors.front().getType()).getElementType();
  int64_t alignment = getElementBytes(element);
  int64_t total;
  computeBucketOffsets(ValueRange(factors).getTypes(), alignment, &total);
  auto pack =
      BucketPackOp::create(b, loc, RankedTensorType::get({total}, element),
                           factors, b.getI64IntegerAttr(alignment));
  auto unpack =
      BucketUnpackOp::create(b, loc, ValueRange(factors).getTypes(),
                             reduce(pack), b.getI64IntegerAttr(alignment));
  IRRewriter rewriter(b.getContext());
  lowerPack(rewriter, pack);
  return lowerUnpack(rewriter, unpack);
}

void lowerPowerSGD(PowerSGDBatch &batch) {
  OpBuilder b(batch.insertBefore);
  Location loc = batch.members.size() == 1
                     ? batch.members.front().getLoc()
                     : b.getFusedLoc(llvm::map_to_vector(
                           batch.members,
                           [](PowerSGDAllReduceOp op) { return op.getLoc(); }));
  PowerSGDAllReduceOp first = batch.members.front();
  auto allReduce = [&](ArrayRef<Value> factors, ReductionKind kind) {
    return allReduceTogether(b, loc, factors, first.getGroupAttr(), kind);
  };

  // Loops (i, j, k) for M (n x m, row i), P (n x r), Q^T (r x m): every
  // product walks M's rows, and Q is used transposed (small: m x r) so that
  // its columns are contiguous like M's rows.
  struct Member {
    Value m, error, rInit, qInit;
  };
  SmallVector<Member> members;
  SmallVector<Value> ps;
  for (PowerSGDAllReduceOp op : batch.members) {
    double epsilon = op.getOrthogonalizationEpsilon().convertToDouble();
    // M = G + E is written over E, the new error over M and R over G, each
    // where nothing else reads the old value: state and gradients then keep
    // their buffers from step to step (in place).
    Member &member = members.emplace_back();
    member.m = op.getGrad();
    member.error = op.getError();
    member.rInit = member.m.hasOneUse() ? member.m : Value();
    member.qInit = op.getQ().hasOneUse() ? op.getQ() : Value();
    if (member.error)
      member.m = elementwise(
          b, loc, member.m, member.error,
          [](OpBuilder &nb, Location l, Value g, Value e) -> Value {
            return arith::AddFOp::create(nb, l, g, e);
          },
          /*overRhs=*/member.error.hasOneUse());
    Value qT = transpose(b, loc, orthogonalize(b, loc, op.getQ(), epsilon));
    // P = M Q, summed (its scale is removed by the orthogonalization): dot
    // products of rows, vectorized.
    ps.push_back(contract(b, loc, member.m, qT, dims(b, 0, 2), dims(b, 1, 2),
                          dims(b, 0, 1), /*reduction=*/2,
                          op.getP().getType().getShape(),
                          /*reassociate=*/true));
  }
  ps = allReduce(ps, ReductionKind::Sum);
  SmallVector<Value> qTs;
  for (auto [op, member, p] : llvm::zip_equal(batch.members, members, ps)) {
    p = orthogonalize(b, loc, p,
                      op.getOrthogonalizationEpsilon().convertToDouble());
    // Q'^T = (M^T P)^T, averaged: row i of M scaled into each row of Q'^T,
    // rows in order.
    ArrayRef<int64_t> qShape = op.getQ().getType().getShape();
    qTs.push_back(contract(b, loc, member.m, p, dims(b, 0, 2), dims(b, 0, 1),
                           dims(b, 1, 2), /*reduction=*/0,
                           {qShape[1], qShape[0]}));
  }
  qTs = allReduce(qTs, ReductionKind::Avg);
  for (auto [op, member, p, qT] :
       llvm::zip_equal(batch.members, members, ps, qTs)) {
    // R = P Q'^T and the new error M - R, one pass.
    SmallVector<Value> approximation = approximate(
        b, loc, p, qT, member.error ? member.m : Value(),
        cast<RankedTensorType>(op.getGrad().getType()), member.rInit);
    SmallVector<Value> results = {approximation[0], p,
                                  transpose(b, loc, qT, member.qInit)};
    if (member.error)
      results.push_back(approximation[1]);
    op.replaceAllUsesWith(results);
  }
}

/// topk_all_reduce: A = G + E; the k entries of largest |A| (ties: lower
/// index first) are found without sorting: the k-th largest magnitude T is
/// built bit by bit from the top (|x|'s bits order like its value; a count
/// per bit), then one pass in index order takes every |a| > T and the first
/// of those equal to T. Each rank's (value, index) pairs are all-gathered
/// and added into a dense zero tensor in rank order, so every rank sums in
/// the same order; E' = A with the sent entries zeroed.
namespace {

/// lowerTopK's stages, in the order they emit their ops.
class TopKLowering {
public:
  TopKLowering(RewriterBase &rewriter, TopKAllReduceOp op)
      : rewriter(rewriter), b(rewriter), op(op), loc(op.getLoc()),
        type(cast<RankedTensorType>(op.getGrad().getType())),
        element(cast<FloatType>(type.getElementType())),
        width(element.getWidth()), bits(b.getIntegerType(width)),
        i64(b.getI64Type()), n(type.getNumElements()),
        ranks(lookupProcessGroup(op, op.getGroupAttr()).getSize()) {
    k = std::max<int64_t>(
        1, static_cast<int64_t>(
               std::ceil(op.getDensity().convertToDouble() * double(n))));
    k = std::min(k, n);
  }

  void run() {
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPoint(op);
    a = flatten(
        b, loc,
        elementwise(b, loc, op.getGrad(), op.getError(),
                    [](OpBuilder &nb, Location l, Value x, Value y) {
                      return arith::AddFOp::create(nb, l, x, y).getResult();
                    }));
    flatType = cast<RankedTensorType>(a.getType());
    magnitude = magnitudes();
    kValue = intConst(i64, k);
    Value threshold = searchThreshold();
    Value equalWanted = arith::SubIOp::create(
        b, loc, kValue, count(b, loc, threshold, arith::CmpIPredicate::ugt));
    scf::ForOp selected = select(threshold, equalWanted);
    Value result = addEveryRanks(selected.getResult(0), selected.getResult(1));
    rewriter.replaceOp(
        op, ValueRange{unflatten(b, loc, result, type),
                       unflatten(b, loc, selected.getResult(2), type)});
  }

private:
  Value index(int64_t v) { return arith::ConstantIndexOp::create(b, loc, v); }
  Value intConst(Type t, int64_t v) {
    return arith::ConstantOp::create(b, loc, b.getIntegerAttr(t, v));
  }

  /// |a| as an unsigned integer: the bits order like the magnitudes.
  Value magnitudes() {
    auto magType = RankedTensorType::get({n}, bits);
    AffineMap identity = b.getMultiDimIdentityMap(1);
    return linalg::GenericOp::create(
               b, loc, TypeRange{magType}, ValueRange{a},
               ValueRange{tensor::EmptyOp::create(b, loc, {n}, bits)},
               SmallVector<AffineMap>{identity, identity},
               SmallVector<utils::IteratorType>{utils::IteratorType::parallel},
               [&](OpBuilder &nb, Location l, ValueRange args) {
                 Value abs = math::AbsFOp::create(nb, l, args[0]);
                 linalg::YieldOp::create(
                     nb, l,
                     arith::BitcastOp::create(nb, l, bits, abs).getResult());
               })
        .getResult(0);
  }

  /// How many magnitudes satisfy `predicate` against `bound`.
  Value count(OpBuilder &ob, Location l, Value bound,
              arith::CmpIPredicate predicate) {
    return reduceAll(
        ob, l, magnitude,
        arith::ConstantOp::create(ob, l, ob.getI64IntegerAttr(0)),
        [&](OpBuilder &nb, Location il, Value m, Value acc) {
          Value hit = arith::CmpIOp::create(nb, il, predicate, m, bound);
          Value one = arith::ExtUIOp::create(nb, il, i64, hit);
          return arith::AddIOp::create(nb, il, acc, one).getResult();
        });
  }

  /// T: the largest bit pattern with at least k magnitudes >= it, from the
  /// top bit below the sign down.
  Value searchThreshold() {
    auto search = scf::ForOp::create(
        b, loc, index(0), index(width - 1), index(1),
        ValueRange{intConst(bits, 0)},
        [&](OpBuilder &nb, Location l, Value iv, ValueRange iter) {
          Value shift = arith::SubIOp::create(
              nb, l,
              arith::ConstantOp::create(nb, l,
                                        nb.getIntegerAttr(bits, width - 2)),
              arith::IndexCastOp::create(nb, l, bits, iv));
          Value bit = arith::ShLIOp::create(
              nb, l,
              arith::ConstantOp::create(nb, l, nb.getIntegerAttr(bits, 1)),
              shift);
          Value candidate = arith::OrIOp::create(nb, l, iter[0], bit);
          Value atLeast = count(nb, l, candidate, arith::CmpIPredicate::uge);
          Value enough = arith::CmpIOp::create(nb, l, arith::CmpIPredicate::sge,
                                               atLeast, kValue);
          scf::YieldOp::create(nb, l,
                               ValueRange{arith::SelectOp::create(
                                   nb, l, enough, candidate, iter[0])});
        });
    return search.getResult(0);
  }

  /// One pass in index order: the sent values and indices, and E' (the
  /// results of the loop, in that order).
  scf::ForOp select(Value threshold, Value equalWanted) {
    Value values = tensor::EmptyOp::create(b, loc, {k}, element);
    Value indices = tensor::EmptyOp::create(b, loc, {k}, i64);
    zero = arith::ConstantOp::create(b, loc, b.getZeroAttr(element));
    return scf::ForOp::create(
        b, loc, index(0), index(n), index(1),
        ValueRange{values, indices, a, intConst(i64, 0), intConst(i64, 0)},
        [&](OpBuilder &nb, Location l, Value iv, ValueRange iter) {
          Value x = tensor::ExtractOp::create(nb, l, a, iv);
          Value m = tensor::ExtractOp::create(nb, l, magnitude, iv);
          Value taken = iter[3], equalTaken = iter[4];
          Value greater = arith::CmpIOp::create(
              nb, l, arith::CmpIPredicate::ugt, m, threshold);
          Value equal = arith::CmpIOp::create(nb, l, arith::CmpIPredicate::eq,
                                              m, threshold);
          Value room = arith::CmpIOp::create(nb, l, arith::CmpIPredicate::slt,
                                             equalTaken, equalWanted);
          Value takeEqual = arith::AndIOp::create(nb, l, equal, room);
          Value take = arith::OrIOp::create(nb, l, greater, takeEqual);
          // Writes always go to a valid slot; a skipped entry rewrites the
          // slot's current content.
          Value slot = arith::IndexCastOp::create(
              nb, l, nb.getIndexType(),
              arith::MinSIOp::create(nb, l, taken,
                                     arith::ConstantOp::create(
                                         nb, l, nb.getI64IntegerAttr(k - 1))));
          Value oldValue = tensor::ExtractOp::create(nb, l, iter[0], slot);
          Value oldIndex = tensor::ExtractOp::create(nb, l, iter[1], slot);
          Value i = arith::IndexCastOp::create(nb, l, i64, iv);
          Value newValues = tensor::InsertOp::create(
              nb, l, arith::SelectOp::create(nb, l, take, x, oldValue), iter[0],
              slot);
          Value newIndices = tensor::InsertOp::create(
              nb, l, arith::SelectOp::create(nb, l, take, i, oldIndex), iter[1],
              slot);
          Value error = tensor::InsertOp::create(
              nb, l, arith::SelectOp::create(nb, l, take, zero, x), iter[2],
              iv);
          Value one = arith::ConstantOp::create(nb, l, nb.getI64IntegerAttr(1));
          Value none =
              arith::ConstantOp::create(nb, l, nb.getI64IntegerAttr(0));
          Value newTaken = arith::AddIOp::create(
              nb, l, taken, arith::SelectOp::create(nb, l, take, one, none));
          Value newEqualTaken = arith::AddIOp::create(
              nb, l, equalTaken,
              arith::SelectOp::create(nb, l, takeEqual, one, none));
          scf::YieldOp::create(nb, l,
                               ValueRange{newValues, newIndices, error,
                                          newTaken, newEqualTaken});
        });
  }

  /// Every rank's pairs, added into zeros in rank order, and the mean or
  /// the scaled sum as the reduction asks.
  Value addEveryRanks(Value values, Value indices) {
    FlatSymbolRefAttr group = op.getGroupAttr();
    auto gather = [&](Value v, Type t) -> Value {
      return AllGatherOp::create(b, loc, RankedTensorType::get({ranks * k}, t),
                                 v, group, /*wire_type=*/nullptr);
    };
    Value allValues = gather(values, element);
    Value allIndices = gather(indices, i64);
    Value dense =
        linalg::FillOp::create(
            b, loc, zero, Value(tensor::EmptyOp::create(b, loc, {n}, element)))
            .getResult(0);
    ReductionKind kind = op.getReduction();
    Value scale;
    if (kind == ReductionKind::PremulSum)
      scale = arith::ConstantOp::create(
          b, loc, FloatAttr::get(element, op.getScale()->convertToDouble()));
    auto scatter = scf::ForOp::create(
        b, loc, index(0), index(ranks * k), index(1), ValueRange{dense},
        [&](OpBuilder &nb, Location l, Value iv, ValueRange iter) {
          Value v = tensor::ExtractOp::create(nb, l, allValues, iv);
          if (scale)
            v = arith::MulFOp::create(nb, l, v, scale);
          Value at = arith::IndexCastOp::create(
              nb, l, nb.getIndexType(),
              tensor::ExtractOp::create(nb, l, allIndices, iv));
          Value sum = arith::AddFOp::create(
              nb, l, tensor::ExtractOp::create(nb, l, iter[0], at), v);
          scf::YieldOp::create(
              nb, l,
              ValueRange{tensor::InsertOp::create(nb, l, sum, iter[0], at)});
        });
    Value result = scatter.getResult(0);
    if (kind != ReductionKind::Avg)
      return result;
    Value size = arith::ConstantOp::create(
        b, loc, FloatAttr::get(element, double(ranks)));
    return elementwise(b, loc, result,
                       tensor::SplatOp::create(b, loc, flatType, size),
                       [](OpBuilder &nb, Location l, Value x, Value y) {
                         return arith::DivFOp::create(nb, l, x, y).getResult();
                       });
  }

  RewriterBase &rewriter;
  OpBuilder &b;
  TopKAllReduceOp op;
  Location loc;
  RankedTensorType type;
  FloatType element;
  unsigned width;
  Type bits, i64;
  int64_t n, k, ranks;
  /// a = grad + error, flattened; its magnitudes' bits.
  Value a, magnitude, kValue, zero;
  RankedTensorType flatType;
};

} // namespace

void lowerTopK(RewriterBase &rewriter, TopKAllReduceOp op) {
  TopKLowering(rewriter, op).run();
}

void populateLowerCompressionPatterns(RewritePatternSet &patterns) {
  patterns.add<LowerWith<OrthogonalizeOp, lowerOrthogonalize>,
               LowerWith<TopKAllReduceOp, lowerTopK>>(patterns.getContext());
}

} // namespace mlir::distopt
