//===- ExactDivision.cpp - divisions by a constant, rounded once ----------===//

#include "distopt/Dialect/DistOpt/IR/ExactDivision.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/IR/Matchers.h"
#include "mlir/IR/TypeUtilities.h"

#include <cmath>

using namespace mlir;
using namespace mlir::distopt;

bool mlir::distopt::isExactIn(double value, FloatType type) {
  llvm::APFloat converted(value);
  bool losesInfo = false;
  llvm::APFloat::opStatus status = converted.convert(
      type.getFloatSemantics(), llvm::APFloat::rmNearestTiesToEven, &losesInfo);
  return !losesInfo && (status & llvm::APFloat::opOverflow) == 0 &&
         (converted.isFinite() || !std::isfinite(value));
}

/// Whether a division done in `wide` and rounded to `narrow` rounds once:
/// `wide` has at least 2p + 2 significant bits for `narrow`'s p (Figueroa,
/// "When is double rounding innocuous?", 1995).
static bool roundsOnce(FloatType narrow, FloatType wide) {
  unsigned p = llvm::APFloat::semanticsPrecision(narrow.getFloatSemantics());
  return llvm::APFloat::semanticsPrecision(wide.getFloatSemantics()) >=
         2 * p + 2;
}

FloatType mlir::distopt::getDivisionType(FloatType type, double divisor) {
  if (isExactIn(divisor, type))
    return type;
  MLIRContext *context = type.getContext();
  for (FloatType wide : {FloatType(Float32Type::get(context)),
                         FloatType(Float64Type::get(context))})
    if (wide.getWidth() > type.getWidth() && roundsOnce(type, wide) &&
        isExactIn(divisor, wide))
      return wide;
  // f64 holds every divisor (a double) and has the precision for f32 and
  // every narrower type; f80 and f128 hold every double themselves. Not
  // reached for the builtin float types.
  return type;
}

/// `type` (a shaped type or a scalar) with `element` as its element type.
static Type withElementType(Type type, Type element) {
  if (auto shaped = dyn_cast<ShapedType>(type))
    return shaped.clone(element);
  return element;
}

Value mlir::distopt::createDivision(OpBuilder &builder, Location loc,
                                    Value value, double divisor) {
  Type type = value.getType();
  auto element = cast<FloatType>(getElementTypeOrSelf(type));
  FloatType divisionType = getDivisionType(element, divisor);
  Type wideType = withElementType(type, divisionType);
  TypedAttr constant = builder.getFloatAttr(divisionType, divisor);
  if (auto shaped = dyn_cast<ShapedType>(wideType))
    constant = DenseElementsAttr::get(shaped, constant);
  Value dividend = value;
  if (divisionType != element)
    dividend = arith::ExtFOp::create(builder, loc, wideType, value);
  Value quotient = arith::DivFOp::create(
      builder, loc, dividend,
      arith::ConstantOp::create(builder, loc, constant).getResult());
  if (divisionType != element)
    quotient = arith::TruncFOp::create(builder, loc, type, quotient);
  return quotient;
}

/// The value of a float constant (a splat or a scalar), as a double when it
/// is exactly one.
static std::optional<double> getExactConstant(Value value) {
  Attribute attr;
  if (!matchPattern(value, m_Constant(&attr)))
    return std::nullopt;
  std::optional<APFloat> constant;
  if (auto scalar = dyn_cast<FloatAttr>(attr))
    constant = scalar.getValue();
  else if (auto dense = dyn_cast<DenseFPElementsAttr>(attr);
           dense && dense.isSplat())
    constant = dense.getSplatValue<APFloat>();
  if (!constant)
    return std::nullopt;
  bool losesInfo = false;
  constant->convert(llvm::APFloat::IEEEdouble(),
                    llvm::APFloat::rmNearestTiesToEven, &losesInfo);
  if (losesInfo)
    return std::nullopt;
  return constant->convertToDouble();
}

std::optional<ConstantDivision>
mlir::distopt::matchConstantDivision(Value quotient) {
  // Rounded back from a division in a wider type.
  if (auto trunc = quotient.getDefiningOp<arith::TruncFOp>()) {
    auto divide = trunc.getIn().getDefiningOp<arith::DivFOp>();
    if (!divide || !divide->hasOneUse() || trunc.getRoundingmodeAttr())
      return std::nullopt;
    auto extend = divide.getLhs().getDefiningOp<arith::ExtFOp>();
    if (!extend || !extend->hasOneUse() ||
        extend.getIn().getType() != trunc.getType())
      return std::nullopt;
    auto narrow = cast<FloatType>(getElementTypeOrSelf(trunc.getType()));
    auto wide = cast<FloatType>(getElementTypeOrSelf(divide.getType()));
    std::optional<double> divisor = getExactConstant(divide.getRhs());
    if (!divisor || !roundsOnce(narrow, wide))
      return std::nullopt;
    return ConstantDivision{extend.getIn(), *divisor, {trunc, divide, extend}};
  }
  auto divide = quotient.getDefiningOp<arith::DivFOp>();
  if (!divide)
    return std::nullopt;
  std::optional<double> divisor = getExactConstant(divide.getRhs());
  if (!divisor)
    return std::nullopt;
  return ConstantDivision{divide.getLhs(), *divisor, {divide}};
}

std::optional<ConstantDivision> mlir::distopt::matchDivisionOf(Value dividend) {
  if (!dividend.hasOneUse())
    return std::nullopt;
  Operation *user = *dividend.getUsers().begin();
  Value quotient;
  if (isa<arith::DivFOp>(user)) {
    quotient = user->getResult(0);
  } else if (isa<arith::ExtFOp>(user) && user->getResult(0).hasOneUse()) {
    Operation *divide = *user->getResult(0).getUsers().begin();
    if (isa<arith::DivFOp>(divide) && divide->getResult(0).hasOneUse()) {
      Operation *round = *divide->getResult(0).getUsers().begin();
      if (isa<arith::TruncFOp>(round))
        quotient = round->getResult(0);
    }
  }
  if (!quotient)
    return std::nullopt;
  std::optional<ConstantDivision> division = matchConstantDivision(quotient);
  if (!division || division->dividend != dividend)
    return std::nullopt;
  return division;
}
