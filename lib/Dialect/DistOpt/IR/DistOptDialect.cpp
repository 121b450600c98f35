//===- DistOptDialect.cpp - distopt dialect ---------------------*- C++ -*-===//

#include "distopt/Dialect/DistOpt/IR/DistOptDialect.h"
#include "distopt/Dialect/DistOpt/IR/DistOptOps.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/DialectImplementation.h"
#include "llvm/ADT/TypeSwitch.h"

using namespace mlir;
using namespace mlir::distopt;

#include "distopt/Dialect/DistOpt/IR/DistOptOpsDialect.cpp.inc"

#include "distopt/Dialect/DistOpt/IR/DistOptEnums.cpp.inc"

#define GET_ATTRDEF_CLASSES
#include "distopt/Dialect/DistOpt/IR/DistOptAttrs.cpp.inc"

#define GET_TYPEDEF_CLASSES
#include "distopt/Dialect/DistOpt/IR/DistOptOpsTypes.cpp.inc"

void DistOptDialect::initialize() {
  addOperations<
#define GET_OP_LIST
#include "distopt/Dialect/DistOpt/IR/DistOptOps.cpp.inc"
      >();
  addTypes<
#define GET_TYPEDEF_LIST
#include "distopt/Dialect/DistOpt/IR/DistOptOpsTypes.cpp.inc"
      >();
  addAttributes<
#define GET_ATTRDEF_LIST
#include "distopt/Dialect/DistOpt/IR/DistOptAttrs.cpp.inc"
      >();
}

Operation *DistOptDialect::materializeConstant(OpBuilder &builder,
                                               Attribute value, Type type,
                                               Location loc) {
  return arith::ConstantOp::materialize(builder, value, type, loc);
}
