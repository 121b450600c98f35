//===- VerifyInput.h - verify what the tools read ---------------*- C++ -*-===//

#ifndef DISTOPT_TRANSFORMS_VERIFYINPUT_H
#define DISTOPT_TRANSFORMS_VERIFYINPUT_H

#include "mlir/IR/Operation.h"

namespace mlir::distopt {

/// mlir::verify(op), after rejecting with a diagnostic what an upstream
/// verifier would crash on instead: a shard.grid with an axis of size 0
/// (LLVM 22.1's shard collectives divide their shapes by it). The tools
/// parse without verifying and call this instead.
LogicalResult verifyInput(Operation *op);

} // namespace mlir::distopt

#endif // DISTOPT_TRANSFORMS_VERIFYINPUT_H
