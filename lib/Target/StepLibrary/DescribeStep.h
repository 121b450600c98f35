//===- DescribeStep.h - the interface a compiled step exports ---*- C++ -*-===//

#ifndef DISTOPT_TARGET_STEPLIBRARY_DESCRIBESTEP_H
#define DISTOPT_TARGET_STEPLIBRARY_DESCRIBESTEP_H

#include "distopt/StepInterface/StepInterface.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"

/// The interface of `step` in `module`, for a step whose buffers live on
/// `device` (cpu or cuda); a located error where its attributes cannot be
/// described (an unknown role or init, an element type no driver knows, a
/// state argument or result the driver could not fill or place).
mlir::FailureOr<distopt::step::Interface> describeStep(mlir::ModuleOp module,
                                                       mlir::func::FuncOp step,
                                                       llvm::StringRef device);

#endif // DISTOPT_TARGET_STEPLIBRARY_DESCRIBESTEP_H
