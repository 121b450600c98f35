//===- Passes.h - loop, vector and kernel tuning ----------------*- C++ -*-===//
//
// The code generation passes of distopt's lowerings that do not concern its
// ops (Passes.td): they tune the loops, vectors and kernels produced from
// linalg.
//
//===----------------------------------------------------------------------===//

#ifndef DISTOPT_CODEGEN_PASSES_H
#define DISTOPT_CODEGEN_PASSES_H

#include "mlir/Pass/Pass.h"

namespace mlir::distopt {

#define GEN_PASS_DECL
#include "distopt/Codegen/Passes.h.inc"

#define GEN_PASS_REGISTRATION
#include "distopt/Codegen/Passes.h.inc"

} // namespace mlir::distopt

#endif // DISTOPT_CODEGEN_PASSES_H
