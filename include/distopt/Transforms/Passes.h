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

#include "mlir/Pass/Pass.h"

namespace mlir::distopt {

#define GEN_PASS_DECL
#include "distopt/Transforms/Passes.h.inc"

#define GEN_PASS_REGISTRATION
#include "distopt/Transforms/Passes.h.inc"

} // namespace mlir::distopt

#endif // DISTOPT_TRANSFORMS_PASSES_H
