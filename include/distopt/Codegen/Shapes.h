//===- Shapes.h - tensors and buffers as their elements ---------*- C++ -*-===//
//
// Reshapes the lowerings and the loop passes share: a tensor or a
// contiguous buffer as the 1-D run of its elements, and back.
//
//===----------------------------------------------------------------------===//

#ifndef DISTOPT_CODEGEN_SHAPES_H
#define DISTOPT_CODEGEN_SHAPES_H

#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinTypes.h"

namespace mlir::distopt {

/// `value` as a 1-D tensor of its elements, row-major; a contiguous memref
/// as a 1-D view of them.
Value flatten(OpBuilder &b, Location loc, Value value);
/// The 1-D `value` in `type`'s shape.
Value unflatten(OpBuilder &b, Location loc, Value value, RankedTensorType type);

} // namespace mlir::distopt

#endif // DISTOPT_CODEGEN_SHAPES_H
