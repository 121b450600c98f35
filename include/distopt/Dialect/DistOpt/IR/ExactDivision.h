//===- ExactDivision.h - divisions by a constant, rounded once --*- C++ -*-===//
//
// The 1/N of data parallelism (and the 1/K of gradient accumulation) in the
// IR: a float tensor divided by a constant that is exact in the type the
// division is done in, rounded once to the tensor's type. A bf16 gradient
// cannot be divided by 257 in bf16 (257 rounds to 256 there); it is divided
// in f32 and rounded back. Built by the importer and the passes that divide,
// recognised by those that fold or move a division.
//
//===----------------------------------------------------------------------===//

#ifndef DISTOPT_DIALECT_DISTOPT_IR_EXACTDIVISION_H
#define DISTOPT_DIALECT_DISTOPT_IR_EXACTDIVISION_H

#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinTypes.h"

#include <optional>

namespace mlir::distopt {

/// Whether `value` converts to `type` without rounding, overflowing or
/// underflowing.
bool isExactIn(double value, FloatType type);

/// The type in which to divide values of `type` by `divisor`: `type` itself
/// where `divisor` is exact in it, else the narrower of f32 and f64 that
/// holds `divisor` exactly and has at least 2p + 2 significant bits (p:
/// those of `type`), so that the quotient rounded to `type` is rounded once,
/// as an exact division would be.
FloatType getDivisionType(FloatType type, double divisor);

/// `value / divisor` element-wise (`value` a float tensor or scalar),
/// correctly rounded to `value`'s type: an `arith.divf` by a splat of
/// `divisor` in getDivisionType, between an `arith.extf` and an
/// `arith.truncf` when that type is wider.
Value createDivision(OpBuilder &builder, Location loc, Value value,
                     double divisor);

/// A division by a float constant, as createDivision builds it.
struct ConstantDivision {
  Value dividend;
  double divisor;
  /// Its ops, the one yielding the quotient first: the `arith.divf`, or the
  /// `arith.truncf`, `arith.divf` and `arith.extf` of a division done in a
  /// wider type.
  SmallVector<Operation *, 3> ops;
};

/// `quotient` as a ConstantDivision: an `arith.divf` by a splat (or scalar)
/// float constant, or one of an `arith.extf` of the dividend, rounded back
/// to the dividend's type by an `arith.truncf` (nearest even), where the
/// wider type has getDivisionType's precision and the values in between
/// have no other use.
std::optional<ConstantDivision> matchConstantDivision(Value quotient);

/// The ConstantDivision of `dividend`, its only use (through the
/// `arith.extf` of a division in a wider type), if there is one.
std::optional<ConstantDivision> matchDivisionOf(Value dividend);

} // namespace mlir::distopt

#endif // DISTOPT_DIALECT_DISTOPT_IR_EXACTDIVISION_H
