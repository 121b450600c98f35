//===- Passes.h - conversions out of the distopt dialect --------*- C++ -*-===//
//
// The passes that lower a step out of the distopt dialect (Passes.td), and
// the pattern sets behind them for compilers that run them inside their
// own conversions (ShardToDistOpt.h, DistOptToLoops.h).
//
//===----------------------------------------------------------------------===//

#ifndef DISTOPT_CONVERSION_PASSES_H
#define DISTOPT_CONVERSION_PASSES_H

#include "distopt/Dialect/DistOpt/IR/DistOptDialect.h"

#include "mlir/Pass/Pass.h"

namespace mlir::distopt {

#define GEN_PASS_DECL
#include "distopt/Conversion/Passes.h.inc"

#define GEN_PASS_REGISTRATION
#include "distopt/Conversion/Passes.h.inc"

} // namespace mlir::distopt

#endif // DISTOPT_CONVERSION_PASSES_H
