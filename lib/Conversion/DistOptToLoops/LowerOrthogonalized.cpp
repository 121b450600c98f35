//===- LowerOrthogonalized.cpp - Muon and Dion to loops ---------*- C++ -*-===//
//
// Part of --distopt-lower-optimizers: the updates that read whole matrices.
// Muon's momentum is one fused loop, its Newton-Schulz iterations and
// Dion's power iteration are products (`contract`, which
// --distopt-contractions-to-runtime may give to BLAS) and loops over the
// matrix; the parameter's update is one more fused loop.
// test/Integration/muon-vs-reference.test and dion-vs-reference.test hold
// them to torch's float32 error against the papers' equations.
//
//===----------------------------------------------------------------------===//

#include "LocalOps.h"
#include "UpdateLowering.h"

#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"

#include <deque>

using namespace mlir;
using namespace mlir::distopt;
namespace mlir::distopt::updates {
namespace {

/// The matrix `x` (rows x cols, ns dtype) orthogonalized by torch.optim.Muon's
/// Newton-Schulz iterations: normalized, then `steps` times A = X X^T, B =
/// b A + c A A, X = a X + B X; a tall matrix takes the same iterations
/// transposed (A = X^T X, X = a X + X B: the same products in the same
/// order, so no transposed copy is made). Products accumulate in f32 and
/// are rounded once with the term they are added to.
Value newtonSchulz(OpBuilder &b, Location loc, MuonUpdateOp op, Value x,
                   Value eps) {
  auto type = cast<RankedTensorType>(x.getType());
  Type ns = type.getElementType();
  Type acc = b.getF32Type();
  int64_t rows = type.getDimSize(0), cols = type.getDimSize(1);
  bool tall = rows > cols;
  int64_t gram = std::min(rows, cols);
  // X / max(||X||, eps): the norm summed in f64, rounded to the dtype.
  Value sumSq = reduceAll(
      b, loc, x, arith::ConstantOp::create(b, loc, b.getF64FloatAttr(0)),
      [&](OpBuilder &nb, Location l, Value e, Value sum) {
        Value w = widen(nb, l, e, nb.getF64Type());
        return math::FmaOp::create(nb, l, w, w, sum).getResult();
      });
  Value norm = convertTo(b, loc, math::SqrtOp::create(b, loc, sumSq), ns);
  norm = arith::MaximumFOp::create(b, loc, norm, convertTo(b, loc, eps, ns));
  Value normAcc = convertTo(b, loc, norm, acc);
  auto empty = [&](ArrayRef<int64_t> shape, Type t) -> Value {
    return tensor::EmptyOp::create(b, loc, shape, t);
  };
  x = mapElements(b, loc, {x}, empty({rows, cols}, ns),
                  [&](OpBuilder &nb, Location l, ValueRange args) {
                    Value q = arith::DivFOp::create(
                        nb, l, convertTo(nb, l, args[0], acc), normAcc);
                    return convertTo(nb, l, q, ns);
                  });
  ArrayRef<double> coefficients = op.getNsCoefficients();
  auto constant = [&](double v) -> Value {
    return arith::ConstantOp::create(b, loc, FloatAttr::get(acc, v));
  };
  Value ca = constant(coefficients[0]), cb = constant(coefficients[1]),
        cc = constant(coefficients[2]);
  for (uint64_t i = 0; i < op.getNsSteps(); ++i) {
    // A = X X^T (loops i, j, k: dot products along rows), or X^T X for a
    // tall X (loops k, i, j: rows added into A's rows).
    Value gramMatrix =
        tall ? contract(b, loc, x, x, dims(b, 0, 1), dims(b, 0, 2),
                        dims(b, 1, 2), 0, {gram, gram})
             : contract(b, loc, x, x, dims(b, 0, 2), dims(b, 1, 2),
                        dims(b, 0, 1), 2, {gram, gram},
                        /*reassociate=*/true);
    // A A (loops i, k, j), kept in f32 until B is rounded.
    Value squared =
        contract(b, loc, gramMatrix, gramMatrix, dims(b, 0, 1), dims(b, 1, 2),
                 dims(b, 0, 2), 1, {gram, gram}, false, /*rounded=*/false);
    Value update =
        mapElements(b, loc, {gramMatrix, squared}, empty({gram, gram}, ns),
                    [&](OpBuilder &nb, Location l, ValueRange args) {
                      Value scaled = arith::MulFOp::create(nb, l, cc, args[1]);
                      Value sum = math::FmaOp::create(
                          nb, l, cb, convertTo(nb, l, args[0], acc), scaled);
                      return convertTo(nb, l, sum, ns);
                    });
    // B X, or X B for a tall X (loops i, k, j).
    Value product =
        tall ? contract(b, loc, x, update, dims(b, 0, 1), dims(b, 1, 2),
                        dims(b, 0, 2), 1, {rows, cols}, false, false)
             : contract(b, loc, update, x, dims(b, 0, 1), dims(b, 1, 2),
                        dims(b, 0, 2), 1, {rows, cols}, false, false);
    x = mapElements(b, loc, {x, product}, empty({rows, cols}, ns),
                    [&](OpBuilder &nb, Location l, ValueRange args) {
                      Value sum = math::FmaOp::create(
                          nb, l, ca, convertTo(nb, l, args[0], acc), args[1]);
                      return convertTo(nb, l, sum, ns);
                    });
  }
  return x;
}

/// Muon's momentum loop: b = lerp(b, g, 1 - mu) (the new state) and the
/// direction to orthogonalize, lerp(g, b, mu) with Nesterov, else b.
linalg::GenericOp muonMomentum(UpdateBuilder &u, MuonUpdateOp op) {
  RewriterBase &builder = u.b;
  Location loc = u.loc;
  auto paramType = cast<RankedTensorType>(op.getParam().getType());
  Type element = paramType.getElementType();
  Value mu64 = u.hyper("momentum");
  Value w64 = u.oneMinus(mu64);
  auto isSmall = [&](Value weight) -> Value {
    Value magnitude = math::AbsFOp::create(builder, loc, weight);
    return arith::CmpFOp::create(builder, loc, arith::CmpFPredicate::OLT,
                                 magnitude, u.f64(0.5));
  };
  Value w = u.scalar(w64), mu = u.scalar(mu64), one = u.scalar(1.0);
  Value oneMinusW = arith::SubFOp::create(builder, loc, one, w);
  Value oneMinusMu = arith::SubFOp::create(builder, loc, one, mu);
  Value wSmall = isSmall(w64), muSmall = isSmall(mu64);
  Value zero = u.scalar(0.0);
  Value first = u.isFirstStep();
  bool maximize = op.getMaximize(), nesterov = op.getNesterov();
  SmallVector<utils::IteratorType> parallel(paramType.getRank(),
                                            utils::IteratorType::parallel);
  SmallVector<AffineMap> maps(
      3, builder.getMultiDimIdentityMap(paramType.getRank()));
  return linalg::GenericOp::create(
      builder, loc, TypeRange{paramType, paramType}, ValueRange{op.getGrad()},
      ValueRange{
          op.getState()[0],
          tensor::EmptyOp::create(builder, loc, paramType.getShape(), element)},
      maps, parallel, [&](OpBuilder &nb, Location nloc, ValueRange args) {
        Body m{nb, nloc};
        auto load = [&](Value v) { return convertTo(nb, nloc, v, u.compute); };
        Value g = load(args[0]);
        if (maximize)
          g = m.neg(g);
        // torch creates the buffer as zeros.
        Value old = m.select(first, zero, load(args[1]));
        Value stored =
            convertTo(nb, nloc, lerp(m, old, g, w, oneMinusW, wSmall), element);
        Value direction = stored;
        if (nesterov)
          direction = convertTo(
              nb, nloc, lerp(m, g, load(stored), mu, oneMinusMu, muSmall),
              element);
        linalg::YieldOp::create(nb, nloc, ValueRange{stored, direction});
      });
}

/// A parameter of an update of matrices (Muon, Dion) as the matrix of its
/// first dimension's rows (a conv weight flattened), and back.
struct MatrixView {
  explicit MatrixView(Value param)
      : shape(cast<RankedTensorType>(param.getType()).getShape()),
        rows(shape.front()),
        // (Not the elements over the rows: a tensor with no rows has
        // columns.)
        cols(ShapedType::getNumElements(shape.drop_front())),
        rowsOf({{0}, llvm::to_vector(llvm::seq<int64_t>(1, shape.size()))}) {}

  /// `v` (of the parameter's shape, any element type) as rows x cols.
  Value collapse(OpBuilder &b, Location loc, Value v) const {
    if (shape.size() == 2)
      return v;
    return tensor::CollapseShapeOp::create(
        b, loc, RankedTensorType::get({rows, cols}, elementOf(v)), v, rowsOf);
  }
  /// `v` (rows x cols) in the parameter's shape.
  Value expand(OpBuilder &b, Location loc, Value v) const {
    if (shape.size() == 2)
      return v;
    return tensor::ExpandShapeOp::create(
        b, loc, RankedTensorType::get(shape, elementOf(v)), v, rowsOf);
  }

  ArrayRef<int64_t> shape;
  int64_t rows, cols;
  SmallVector<ReassociationIndices> rowsOf;

private:
  static Type elementOf(Value v) {
    return cast<RankedTensorType>(v.getType()).getElementType();
  }
};

} // namespace

void lowerMuon(RewriterBase &builder, MuonUpdateOp op) {
  Location loc = op.getLoc();
  UpdateBuilder u(builder, loc, op);
  MatrixView matrix(op.getParam());
  int64_t rows = matrix.rows, cols = matrix.cols;
  Type element =
      cast<RankedTensorType>(op.getParam().getType()).getElementType();
  linalg::GenericOp momentum = muonMomentum(u, op);
  // Orthogonalized as a matrix of the first dimension's rows.
  Value direction = matrix.collapse(builder, loc, momentum.getResult(1));
  Type ns = op.getNsDtype() ? *op.getNsDtype() : builder.getF32Type();
  Value x = mapElements(
      builder, loc, {direction},
      tensor::EmptyOp::create(builder, loc, ArrayRef<int64_t>{rows, cols}, ns),
      [&](OpBuilder &nb, Location l, ValueRange args) {
        return convertTo(nb, l, args[0], ns);
      });
  x = matrix.expand(builder, loc,
                    newtonSchulz(builder, loc, op, x, u.hyper("eps")));
  // p = p (1 - lr wd) - lr ratio X.
  double ratio =
      op.getAdjustLrFn() == "match_rms_adamw"
          ? 0.2 * std::sqrt(static_cast<double>(std::max(rows, cols)))
          : std::sqrt(std::max(1.0, static_cast<double>(rows) /
                                        static_cast<double>(cols)));
  Value negStep = u.scalar(arith::NegFOp::create(
      builder, loc, arith::MulFOp::create(builder, loc, u.lr, u.f64(ratio))));
  Value decay = u.scalar(u.oneMinus(
      arith::MulFOp::create(builder, loc, u.lr, u.hyper("weight_decay"))));
  Value param = mapElements(
      builder, loc, {x}, op.getParam(),
      [&](OpBuilder &nb, Location l, ValueRange args) {
        Body m{nb, l};
        Value p = m.mul(convertTo(nb, l, args[1], u.compute), decay);
        Value next = m.axpy(p, negStep, convertTo(nb, l, args[0], u.compute));
        return convertTo(nb, l, next, element);
      });
  builder.replaceOp(op, ValueRange{param, momentum.getResult(0)});
}

namespace {

/// The rows of `t` (r x n) made orthonormal by modified Gram-Schmidt, top to
/// bottom: row i is divided by its norm (summed in f64) plus `eps`, and every
/// later row loses its projection on it. The rows are an scf.for (Dion's
/// rank may be hundreds: unrolled, the IR would grow with it), each
/// iteration on the rows after row i only (a slice of dynamic size: over
/// the whole matrix, masked, the loop took twice the time).
Value orthonormalizeRows(OpBuilder &b, Location loc, Value t, Value eps) {
  auto type = cast<RankedTensorType>(t.getType());
  auto element = cast<FloatType>(type.getElementType());
  int64_t rows = type.getDimSize(0), cols = type.getDimSize(1);
  if (rows == 0) // (a row slice of nothing would not verify)
    return t;
  MLIRContext *ctx = b.getContext();
  AffineExpr d0 = getAffineDimExpr(0, ctx), d1 = getAffineDimExpr(1, ctx);
  AffineMap identity = b.getMultiDimIdentityMap(2);
  auto parallel = utils::IteratorType::parallel;
  auto index = [&](OpBuilder &nb, int64_t v) -> Value {
    return arith::ConstantIndexOp::create(nb, loc, v);
  };
  Value epsilon = convertTo(b, loc, eps, element);
  auto laterType = RankedTensorType::get({ShapedType::kDynamic, cols}, element);
  auto loop = scf::ForOp::create(
      b, loc, index(b, 0), index(b, rows), index(b, 1), ValueRange{t},
      [&](OpBuilder &lb, Location l, Value i, ValueRange carried) {
        Value matrix = carried[0];
        OpFoldResult zeroIndex = lb.getIndexAttr(0), one = lb.getIndexAttr(1),
                     width = lb.getIndexAttr(cols);
        Value row = tensor::ExtractSliceOp::create(
            lb, l, RankedTensorType::get({cols}, element), matrix,
            ArrayRef<OpFoldResult>{i, zeroIndex},
            ArrayRef<OpFoldResult>{one, width},
            ArrayRef<OpFoldResult>{one, one});
        Value sumSq = reduceAll(
            lb, l, row, arith::ConstantOp::create(lb, l, lb.getF64FloatAttr(0)),
            [&](OpBuilder &nb, Location nl, Value e, Value sum) {
              Value w = widen(nb, nl, e, nb.getF64Type());
              return math::FmaOp::create(nb, nl, w, w, sum).getResult();
            });
        Value norm = arith::AddFOp::create(
            lb, l,
            convertTo(lb, l, math::SqrtOp::create(lb, l, sumSq), element),
            epsilon);
        // (A zero row stays zero, also with epsilon 0: not 0 / 0.)
        Value isZero = arith::CmpFOp::create(
            lb, l, arith::CmpFPredicate::OEQ, norm,
            arith::ConstantOp::create(lb, l, lb.getZeroAttr(element)));
        Value unit = mapElements(
            lb, l, {row}, tensor::EmptyOp::create(lb, l, {cols}, element),
            [&](OpBuilder &nb, Location nl, ValueRange args) {
              return arith::SelectOp::create(
                         nb, nl, isZero, args[0],
                         arith::DivFOp::create(nb, nl, args[0], norm))
                  .getResult();
            });
        matrix = tensor::InsertSliceOp::create(
            lb, l, unit, matrix, ArrayRef<OpFoldResult>{i, zeroIndex},
            ArrayRef<OpFoldResult>{one, width},
            ArrayRef<OpFoldResult>{one, one});
        // The rows after row i: r - i - 1 of them.
        Value first = arith::AddIOp::create(lb, l, i, index(lb, 1));
        Value count = arith::SubIOp::create(lb, l, index(lb, rows), first);
        Value later = tensor::ExtractSliceOp::create(
            lb, l, laterType, matrix, ArrayRef<OpFoldResult>{first, zeroIndex},
            ArrayRef<OpFoldResult>{count, width},
            ArrayRef<OpFoldResult>{one, one});
        // dots(j) = later row j . unit (summed in any order: it vectorizes).
        Value zero = arith::ConstantOp::create(lb, l, lb.getZeroAttr(element));
        Value zeros = linalg::FillOp::create(
                          lb, l, zero,
                          Value(tensor::EmptyOp::create(
                              lb, l, ArrayRef<int64_t>{ShapedType::kDynamic},
                              element, ValueRange{count})))
                          .getResult(0);
        Value dots =
            linalg::GenericOp::create(
                lb, l, TypeRange{zeros.getType()}, ValueRange{later, unit},
                ValueRange{zeros},
                SmallVector<AffineMap>{identity, AffineMap::get(2, 0, d1),
                                       AffineMap::get(2, 0, d0)},
                SmallVector<utils::IteratorType>{
                    parallel, utils::IteratorType::reduction},
                [&](OpBuilder &nb, Location nl, ValueRange args) {
                  Value product =
                      arith::MulFOp::create(nb, nl, args[0], args[1]);
                  linalg::YieldOp::create(
                      nb, nl,
                      arith::AddFOp::create(nb, nl, args[2], product,
                                            arith::FastMathFlags::reassoc)
                          .getResult());
                })
                .getResult(0);
        // Later rows lose their projection on the unit row (in place: the
        // loop's matrix stays one buffer).
        Value projected =
            linalg::GenericOp::create(
                lb, l, TypeRange{laterType}, ValueRange{unit, dots},
                ValueRange{later},
                SmallVector<AffineMap>{AffineMap::get(2, 0, d1),
                                       AffineMap::get(2, 0, d0), identity},
                SmallVector<utils::IteratorType>{parallel, parallel},
                [&](OpBuilder &nb, Location nl, ValueRange args) {
                  Value u = args[0], dot = args[1], old = args[2];
                  linalg::YieldOp::create(
                      nb, nl,
                      arith::SubFOp::create(
                          nb, nl, old, arith::MulFOp::create(nb, nl, dot, u))
                          .getResult());
                })
                .getResult(0);
        matrix = tensor::InsertSliceOp::create(
            lb, l, projected, matrix, ArrayRef<OpFoldResult>{first, zeroIndex},
            ArrayRef<OpFoldResult>{count, width},
            ArrayRef<OpFoldResult>{one, one});
        scf::YieldOp::create(lb, l, matrix);
      });
  return loop.getResult(0);
}

/// Dion's starting right factor (transposed, r x n), the same on every rank:
/// element (i, j) is 2 u - 1, u the top 24 bits of a 32-bit hash of
/// i n + j + seed * 0x9E3779B9, over 2^24 (exact in f32).
Value dionStartingFactor(OpBuilder &b, Location loc, DionUpdateOp op,
                         RankedTensorType type) {
  int64_t cols = type.getDimSize(1);
  uint32_t seedMix = static_cast<uint32_t>(op.getSeed()) * 0x9E3779B9u;
  Type i32 = b.getI32Type();
  Value init =
      tensor::EmptyOp::create(b, loc, type.getShape(), type.getElementType());
  return linalg::GenericOp::create(
             b, loc, TypeRange{type}, ValueRange{}, ValueRange{init},
             SmallVector<AffineMap>{b.getMultiDimIdentityMap(2)},
             SmallVector<utils::IteratorType>(2, utils::IteratorType::parallel),
             [&](OpBuilder &nb, Location l, ValueRange) {
               auto i32Constant = [&](uint32_t v) -> Value {
                 return arith::ConstantOp::create(
                     nb, l, nb.getI32IntegerAttr(static_cast<int32_t>(v)));
               };
               Value flat = arith::AddIOp::create(
                   nb, l,
                   arith::MulIOp::create(
                       nb, l, linalg::IndexOp::create(nb, l, 0),
                       arith::ConstantIndexOp::create(nb, l, cols)),
                   linalg::IndexOp::create(nb, l, 1));
               // (index_cast truncates: the index modulo 2^32.)
               Value x = arith::AddIOp::create(
                   nb, l, arith::IndexCastOp::create(nb, l, i32, flat),
                   i32Constant(seedMix));
               auto xorShift = [&](Value v, uint32_t by) -> Value {
                 return arith::XOrIOp::create(
                     nb, l, v,
                     arith::ShRUIOp::create(nb, l, v, i32Constant(by)));
               };
               x = xorShift(x, 16);
               x = arith::MulIOp::create(nb, l, x, i32Constant(0x7feb352du));
               x = xorShift(x, 15);
               x = arith::MulIOp::create(nb, l, x, i32Constant(0x846ca68bu));
               x = xorShift(x, 16);
               Type element = type.getElementType();
               Value top = arith::UIToFPOp::create(
                   nb, l, element,
                   arith::ShRUIOp::create(nb, l, x, i32Constant(8)));
               Value u = arith::MulFOp::create(
                   nb, l, top,
                   arith::ConstantOp::create(nb, l,
                                             FloatAttr::get(element, 0x1p-24)));
               Value two = arith::ConstantOp::create(
                   nb, l, FloatAttr::get(element, 2.0));
               Value one = arith::ConstantOp::create(
                   nb, l, FloatAttr::get(element, 1.0));
               linalg::YieldOp::create(
                   nb, l,
                   arith::SubFOp::create(
                       nb, l, arith::MulFOp::create(nb, l, u, two), one)
                       .getResult());
             })
      .getResult(0);
}

} // namespace

namespace {

/// `m` (a x b) transposed (b x a).
Value transposed(OpBuilder &b, Location loc, Value m) {
  auto type = cast<RankedTensorType>(m.getType());
  Value init = tensor::EmptyOp::create(
      b, loc, ArrayRef<int64_t>{type.getDimSize(1), type.getDimSize(0)},
      type.getElementType());
  return linalg::TransposeOp::create(b, loc, m, init, ArrayRef<int64_t>{1, 0})
      .getResult()
      .front();
}

/// Dion (see the op's description) on the parameter as a matrix, in the
/// compute type, in three stages so that a batch of updates synced by
/// their factors runs each stage for every member before it all-reduces
/// their factors together: the four products through `contract` (a matmul
/// each, which --distopt-contractions-to-runtime may give to BLAS), P kept
/// transposed (r x m) so that the orthonormalization walks contiguous rows.
class DionLowering {
public:
  DionLowering(RewriterBase &builder, DionUpdateOp op)
      : builder(builder), op(op), loc(op.getLoc()), u(builder, loc, op),
        matrix(op.getParam()), rows(matrix.rows), cols(matrix.cols),
        matrixRows(op.getMatrixRows()
                       ? static_cast<int64_t>(*op.getMatrixRows())
                       : rows),
        rank(cast<RankedTensorType>(op.getState()[1].getType()).getDimSize(0)),
        ct(u.compute),
        stateElement(cast<RankedTensorType>(op.getState()[1].getType())
                         .getElementType()) {}

  /// B = M + G, the old factor Q^T, and P^T = Q^T B^T (this rank's share
  /// under a group).
  Value project();
  /// From P^T (averaged under a group; under row shards every rank's
  /// columns, gathered): P^T orthonormalized (under row shards, this
  /// rank's columns of it), and R^T = P^T B (this rank's share under a
  /// group or row shards).
  Value right(Value p);
  /// From R^T (averaged under a group): the momentum, the factor and the
  /// parameter, which replace the op's results (the op stays, unused).
  void finish(Value r);

private:
  Value empty(ArrayRef<int64_t> shape, Type t) {
    return tensor::EmptyOp::create(builder, loc, shape, t);
  }

  RewriterBase &builder;
  DionUpdateOp op;
  Location loc;
  UpdateBuilder u;
  MatrixView matrix;
  /// `rows` of the parameter, of `matrixRows` of the matrix (its rows
  /// under row shards: a block of them).
  int64_t rows, cols, matrixRows, rank;
  Type ct, stateElement;
  Value b, oldFactor, p;
};

Value DionLowering::project() {
  Value first = u.isFirstStep();
  Value zero = u.scalar(0.0);
  bool maximize = op.getMaximize();
  // B = M + G (M is zero at step 1).
  b = mapElements(
      builder, loc,
      {matrix.collapse(builder, loc, op.getGrad()),
       matrix.collapse(builder, loc, op.getState()[0])},
      empty({rows, cols}, ct), [&](OpBuilder &nb, Location l, ValueRange args) {
        Body m{nb, l};
        Value g = convertTo(nb, l, args[0], ct);
        Value old = m.select(first, zero, convertTo(nb, l, args[1], ct));
        return maximize ? m.sub(old, g) : m.add(old, g);
      });
  // Q^T: the starting factor at step 1 (drawn then only), else the state.
  auto factorCompute = RankedTensorType::get({rank, cols}, ct);
  auto drawn = scf::IfOp::create(builder, loc, TypeRange{factorCompute}, first,
                                 /*withElseRegion=*/true);
  {
    OpBuilder::InsertionGuard guard(builder);
    builder.setInsertionPointToStart(&drawn.getThenRegion().front());
    scf::YieldOp::create(builder, loc,
                         dionStartingFactor(builder, loc, op, factorCompute));
    builder.setInsertionPointToStart(&drawn.getElseRegion().front());
    scf::YieldOp::create(
        builder, loc,
        mapElements(builder, loc, {op.getState()[1]}, empty({rank, cols}, ct),
                    [&](OpBuilder &nb, Location l, ValueRange args) {
                      return convertTo(nb, l, args[0], ct);
                    }));
  }
  oldFactor = drawn.getResult(0);
  // P^T = Q^T B^T (dot products along rows).
  return contract(builder, loc, oldFactor, b, dims(builder, 0, 2),
                  dims(builder, 1, 2), dims(builder, 0, 1), 2, {rank, rows},
                  /*reassociate=*/true);
}

Value DionLowering::right(Value averagedP) {
  Value eps = u.hyper("epsilon");
  // Twice: one pass of modified Gram-Schmidt leaves P^T P off the identity
  // by about eps times P's condition number (1e-3 at 1e5 in f32), and
  // Dion's update assumes orthonormal columns (Householder QR's, to
  // rounding); a second pass restores that.
  p = orthonormalizeRows(builder, loc, averagedP, eps);
  p = orthonormalizeRows(builder, loc, p, eps);
  if (FlatSymbolRefAttr group = op.getRowGroupAttr()) {
    // This rank's block of columns: (P^T)^T's chunk of rows, transposed.
    Value whole = transposed(builder, loc, p);
    auto blockType = RankedTensorType::get({rows, rank}, ct);
    p = transposed(builder, loc,
                   ShardSliceOp::create(builder, loc, blockType, whole, group));
  }
  // R^T = P^T B (loops j, i, k).
  return contract(builder, loc, p, b, dims(builder, 0, 1), dims(builder, 1, 2),
                  dims(builder, 0, 2), 1, {rank, cols});
}

void DionLowering::finish(Value r) {
  // P R^T = (P^T)^T R^T (loops i, j, k).
  auto lowRank = [&](Value factor) {
    return contract(builder, loc, p, factor, dims(builder, 1, 0),
                    dims(builder, 1, 2), dims(builder, 0, 2), 1, {rows, cols});
  };
  // M = B - (1 - mu) P R^T.
  Value negKept =
      u.scalar(arith::NegFOp::create(builder, loc, u.oneMinus(u.hyper("mu"))));
  Value momentum = mapElements(
      builder, loc, {b, lowRank(r)}, empty({rows, cols}, stateElement),
      [&](OpBuilder &nb, Location l, ValueRange args) {
        Body m{nb, l};
        return convertTo(nb, l, m.axpy(args[0], negKept, args[1]),
                         stateElement);
      });
  // Q^T = each row of R^T over its norm (summed in f64) plus epsilon; a zero
  // row keeps the old factor's.
  Value normZeros = linalg::FillOp::create(builder, loc, u.f64(0),
                                           empty({rank}, builder.getF64Type()))
                        .getResult(0);
  MLIRContext *ctx = builder.getContext();
  AffineExpr d0 = getAffineDimExpr(0, ctx);
  AffineMap identity = builder.getMultiDimIdentityMap(2);
  Value sumSq =
      linalg::GenericOp::create(
          builder, loc, TypeRange{normZeros.getType()}, ValueRange{r},
          ValueRange{normZeros},
          SmallVector<AffineMap>{identity, AffineMap::get(2, 0, d0)},
          SmallVector<utils::IteratorType>{utils::IteratorType::parallel,
                                           utils::IteratorType::reduction},
          [&](OpBuilder &nb, Location l, ValueRange args) {
            Value w = widen(nb, l, args[0], nb.getF64Type());
            linalg::YieldOp::create(
                nb, l, math::FmaOp::create(nb, l, w, w, args[1]).getResult());
          })
          .getResult(0);
  Value epsilon = u.scalar(u.hyper("epsilon"));
  Value newFactor =
      linalg::GenericOp::create(
          builder, loc, TypeRange{RankedTensorType::get({rank, cols}, ct)},
          ValueRange{r, sumSq, oldFactor}, ValueRange{empty({rank, cols}, ct)},
          SmallVector<AffineMap>{identity, AffineMap::get(2, 0, d0), identity,
                                 identity},
          SmallVector<utils::IteratorType>(2, utils::IteratorType::parallel),
          [&](OpBuilder &nb, Location l, ValueRange args) {
            Body m{nb, l};
            Value isZero = arith::CmpFOp::create(
                nb, l, arith::CmpFPredicate::OEQ, args[1],
                arith::ConstantOp::create(nb, l, nb.getF64FloatAttr(0)));
            Value norm = m.add(convertTo(nb, l, m.sqrt(args[1]), ct), epsilon);
            linalg::YieldOp::create(
                nb, l, m.select(isZero, args[2], m.div(args[0], norm)));
          })
          .getResult(0);
  // X = X (1 - lr wd) - lr sqrt(m / n) P Q^T (the whole matrix's m).
  double scale = cols == 0 ? 0.0
                           : std::sqrt(static_cast<double>(matrixRows) /
                                       static_cast<double>(cols));
  Value negStep = u.scalar(arith::NegFOp::create(
      builder, loc, arith::MulFOp::create(builder, loc, u.lr, u.f64(scale))));
  Value decay = u.scalar(u.oneMinus(
      arith::MulFOp::create(builder, loc, u.lr, u.hyper("weight_decay"))));
  Type element =
      cast<RankedTensorType>(op.getParam().getType()).getElementType();
  Value param = mapElements(
      builder, loc, {lowRank(newFactor)},
      matrix.collapse(builder, loc, op.getParam()),
      [&](OpBuilder &nb, Location l, ValueRange args) {
        Body m{nb, l};
        Value x = m.mul(convertTo(nb, l, args[1], ct), decay);
        return convertTo(nb, l, m.axpy(x, negStep, args[0]), element);
      });
  Value storedFactor =
      mapElements(builder, loc, {newFactor}, op.getState()[1],
                  [&](OpBuilder &nb, Location l, ValueRange args) {
                    return convertTo(nb, l, args[0], stateElement);
                  });
  builder.replaceAllOpUsesWith(
      op, ValueRange{matrix.expand(builder, loc, param),
                     matrix.expand(builder, loc, momentum), storedFactor});
}

} // namespace

void lowerDion(RewriterBase &builder, ArrayRef<DionUpdateOp> batch) {
  DionUpdateOp front = batch.front();
  Location loc = batch.size() == 1
                     ? front.getLoc()
                     : builder.getFusedLoc(llvm::map_to_vector(
                           batch, [](DionUpdateOp op) { return op.getLoc(); }));
  // With a group (the low-rank sync) each factor is this rank's share, made
  // from its own gradient and momentum: the group averages the batch's
  // factors together.
  auto averaged = [&](SmallVector<Value> factors) {
    if (!front.getGroupAttr())
      return factors;
    return allReduceTogether(builder, loc, factors, front.getGroupAttr(),
                             ReductionKind::Avg);
  };
  // Row shards: each rank's rows of P gathered (as the rows of P, the
  // columns of P^T), R summed over the ranks' rows.
  if (FlatSymbolRefAttr group = front.getRowGroupAttr()) {
    assert(batch.size() == 1 && "row shards are not batched");
    DionLowering member(builder, front);
    Value own = transposed(builder, loc, member.project());
    auto ownType = cast<RankedTensorType>(own.getType());
    int64_t size = lookupProcessGroup(front, group).getSize();
    auto gatheredType = RankedTensorType::get(
        {ownType.getDimSize(0) * size, ownType.getDimSize(1)},
        ownType.getElementType());
    Value gathered = AllGatherOp::create(builder, loc, gatheredType, own, group,
                                         /*wire_type=*/nullptr);
    Value r = member.right(transposed(builder, loc, gathered));
    member.finish(
        allReduceTogether(builder, loc, r, group, ReductionKind::Sum).front());
    return;
  }
  std::deque<DionLowering> members;
  for (DionUpdateOp op : batch)
    members.emplace_back(builder, op);
  SmallVector<Value> ps = averaged(llvm::map_to_vector(
      members, [](DionLowering &member) { return member.project(); }));
  SmallVector<Value> rs;
  for (auto [member, p] : llvm::zip_equal(members, ps))
    rs.push_back(member.right(p));
  rs = averaged(std::move(rs));
  for (auto [member, r] : llvm::zip_equal(members, rs))
    member.finish(r);
}

} // namespace mlir::distopt::updates
