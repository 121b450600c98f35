//===- TestPasses.h - passes only the tests use -----------------*- C++ -*-===//

#ifndef DISTOPT_TEST_LIB_TRANSFORMS_TESTPASSES_H
#define DISTOPT_TEST_LIB_TRANSFORMS_TESTPASSES_H

#include "mlir/Pass/Pass.h"

namespace mlir::distopt::test {

#define GEN_PASS_DECL
#include "TestPasses.h.inc"

#define GEN_PASS_REGISTRATION
#include "TestPasses.h.inc"

/// Registers distopt-test-lower-to-gpu-on-host and
/// distopt-test-lower-to-cpu-runtime-shards.
void registerDistOptTestPipelines();

} // namespace mlir::distopt::test

#endif // DISTOPT_TEST_LIB_TRANSFORMS_TESTPASSES_H
