//===- Shapes.cpp - tensors and buffers as their elements ------*- C++ -*-===//
//
// Shapes.h: the reshapes of a value to the 1-D run of its elements.
//
//===----------------------------------------------------------------------===//

#include "distopt/Codegen/Shapes.h"

#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"

using namespace mlir;

/// `value` (of `type`) as 1-D, with the reshapes of its kind.
template <typename ExpandOp, typename CollapseOp, typename ShapedT>
static Value flattenWith(OpBuilder &b, Location loc, Value value,
                         ShapedT type) {
  if (type.getRank() == 1)
    return value;
  if (type.getRank() == 0)
    return ExpandOp::create(b, loc, ShapedT::get({1}, type.getElementType()),
                            value, ArrayRef<ReassociationIndices>{});
  SmallVector<ReassociationIndices> all = {
      llvm::to_vector(llvm::seq<int64_t>(0, type.getRank()))};
  return CollapseOp::create(b, loc, value, all);
}

Value mlir::distopt::flatten(OpBuilder &b, Location loc, Value value) {
  if (auto memref = dyn_cast<MemRefType>(value.getType()))
    return flattenWith<memref::ExpandShapeOp, memref::CollapseShapeOp>(
        b, loc, value, memref);
  return flattenWith<tensor::ExpandShapeOp, tensor::CollapseShapeOp>(
      b, loc, value, cast<RankedTensorType>(value.getType()));
}

Value mlir::distopt::unflatten(OpBuilder &b, Location loc, Value value,
                               RankedTensorType type) {
  if (type.getRank() == 1)
    return value;
  if (type.getRank() == 0)
    return tensor::CollapseShapeOp::create(b, loc, type, value,
                                           ArrayRef<ReassociationIndices>{});
  SmallVector<ReassociationIndices> all = {
      llvm::to_vector(llvm::seq<int64_t>(0, type.getRank()))};
  return tensor::ExpandShapeOp::create(b, loc, type, value, all);
}
