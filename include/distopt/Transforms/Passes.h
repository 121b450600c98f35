//===- Passes.h - distopt-to-distopt transformations ------------*- C++ -*-===//
//
// The passes that rewrite a step within the distopt dialect (Passes.td).
// Only the pass declarations: what a pass needs of other dialects is
// included by its implementation, not by every user of this header.
//
//===----------------------------------------------------------------------===//

#ifndef DISTOPT_TRANSFORMS_PASSES_H
#define DISTOPT_TRANSFORMS_PASSES_H

#include "distopt/Dialect/DistOpt/IR/DistOptDialect.h"
#include "distopt/Transforms/PassOptions.h"

#include "mlir/Pass/Pass.h"
#include "llvm/ADT/Statistic.h"

namespace mlir {
class RewritePatternSet;
} // namespace mlir

namespace mlir::distopt {

#define GEN_PASS_DECL
#include "distopt/Transforms/Passes.h.inc"

#define GEN_PASS_REGISTRATION
#include "distopt/Transforms/Passes.h.inc"

/// --distopt-fuse-div-into-allreduce's rewrites, for a compiler's own
/// greedy rewrite: a sum all_reduce or reduce_scatter next to a scaling by
/// a constant becomes avg or premul_sum. `fused`, if given, counts them.
void populateFuseDivIntoAllReducePatterns(RewritePatternSet &patterns,
                                          llvm::Statistic *fused = nullptr);

} // namespace mlir::distopt

#endif // DISTOPT_TRANSFORMS_PASSES_H
