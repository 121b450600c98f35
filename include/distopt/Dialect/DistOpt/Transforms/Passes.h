//===- Passes.h - distopt transformation passes -----------------*- C++ -*-===//

#ifndef DISTOPT_DIALECT_DISTOPT_TRANSFORMS_PASSES_H
#define DISTOPT_DIALECT_DISTOPT_TRANSFORMS_PASSES_H

#include "distopt/Dialect/DistOpt/IR/DistOptDialect.h"

#include "mlir/Dialect/Affine/IR/AffineOps.h"
#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/Pass/Pass.h"

namespace mlir::distopt {

#define GEN_PASS_DECL
#include "distopt/Dialect/DistOpt/Transforms/Passes.h.inc"

#define GEN_PASS_REGISTRATION
#include "distopt/Dialect/DistOpt/Transforms/Passes.h.inc"

} // namespace mlir::distopt

#endif // DISTOPT_DIALECT_DISTOPT_TRANSFORMS_PASSES_H
