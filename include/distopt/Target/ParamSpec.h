//===- ParamSpec.h - import a parameter spec as a step ----------*- C++ -*-===//
//
// A parameter spec (JSON: the parameters of a model with their shapes and
// element types, the optimizer and its hyperparameters, the world size)
// becomes a step function: one all_reduce per gradient, the division by the
// world size, and the optimizer update. docs/param-spec.md has the format.
//
//===----------------------------------------------------------------------===//

#ifndef DISTOPT_TARGET_PARAMSPEC_H
#define DISTOPT_TARGET_PARAMSPEC_H

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/OwningOpRef.h"

namespace llvm {
class SourceMgr;
class raw_ostream;
} // namespace llvm

namespace mlir::distopt {

/// Builds the step module for the spec in the main buffer of `sourceMgr`.
/// Errors are reported as diagnostics at the spec file's location; returns
/// null on error.
OwningOpRef<ModuleOp> importParamSpec(llvm::SourceMgr &sourceMgr,
                                      MLIRContext *context);

/// Writes to `os` the optimizer object in the main buffer of `sourceMgr`
/// (`{"type": ..., <keys>}`) with every key the spec reads, given or
/// defaulted, its state keys, runtime keys and the lowest rank it updates
/// (JSON): what a host library needs of an optimizer torch.optim has no
/// class for. Errors are diagnostics, as importParamSpec's.
LogicalResult describeOptimizer(llvm::SourceMgr &sourceMgr,
                                llvm::raw_ostream &os, MLIRContext *context);

/// Registers `--import-param-spec` and `--describe-optimizer` with
/// mlir-translate's registry.
void registerImportParamSpec();

} // namespace mlir::distopt

#endif // DISTOPT_TARGET_PARAMSPEC_H
