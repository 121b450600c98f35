//===- DistOptDialect.h - distopt dialect -----------------------*- C++ -*-===//
//
// The distopt dialect, its enums and its types.
//
//===----------------------------------------------------------------------===//

#ifndef DISTOPT_DIALECT_DISTOPT_IR_DISTOPTDIALECT_H
#define DISTOPT_DIALECT_DISTOPT_IR_DISTOPTDIALECT_H

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/Dialect.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"

#include "distopt/Dialect/DistOpt/IR/DistOptOpsDialect.h.inc"

#include "distopt/Dialect/DistOpt/IR/DistOptEnums.h.inc"

#define GET_ATTRDEF_CLASSES
#include "distopt/Dialect/DistOpt/IR/DistOptAttrs.h.inc"

#define GET_TYPEDEF_CLASSES
#include "distopt/Dialect/DistOpt/IR/DistOptOpsTypes.h.inc"

namespace mlir::distopt {

/// Bytes one element of `type` takes: ceil(bits / 8) for integers and floats,
/// 8 for index, 0 for types that hold no data.
int64_t getElementBytes(Type type);

/// Bytes of a statically shaped tensor or memref of `type`, with its elements
/// taken as `elementType` when given (a wire type); 0 when dynamic.
int64_t getShapedBytes(ShapedType type, Type elementType = {});

/// The inter-rank communicator: every op that communicates reads and writes
/// it, which keeps collectives in program order relative to each other.
struct CommunicatorResource
    : public SideEffects::Resource::Base<CommunicatorResource> {
  StringRef getName() final { return "Communicator"; }
};

} // namespace mlir::distopt

#endif // DISTOPT_DIALECT_DISTOPT_IR_DISTOPTDIALECT_H
