//===- SplitReductions.h - whole-tensor reductions in two kernels -*- C++
//-*-===//

#ifndef DISTOPT_LIB_CONVERSION_DISTOPTTOGPU_SPLITREDUCTIONS_H
#define DISTOPT_LIB_CONVERSION_DISTOPTTOGPU_SPLITREDUCTIONS_H

#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/IR/PatternMatch.h"

namespace mlir::distopt {

/// Splits a linalg.generic that reduces a whole tensor to a scalar into a
/// kernel of partial results (one per thread) and one that combines them in
/// order; the result is the same on every run. Returns failure, touching
/// nothing, for any other op.
LogicalResult splitWholeReduction(IRRewriter &rewriter, linalg::GenericOp op);

} // namespace mlir::distopt

#endif // DISTOPT_LIB_CONVERSION_DISTOPTTOGPU_SPLITREDUCTIONS_H
