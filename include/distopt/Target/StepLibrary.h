//===- StepLibrary.h - a step compiled into a loadable library --*- C++ -*-===//
//
// What distopt-compile does, for compilers that embed distopt: lowers @step
// for a CPU or an NVIDIA GPU, translates it to LLVM IR with its packed entry
// points and its interface (distopt_step_packed, distopt_step_abi;
// docs/lowering.md), optimises it for the CPU and writes an object or a
// shared library that distopt-run, the host step library and the Python
// package load. The C API's distoptCompileStep calls it.
//
//===----------------------------------------------------------------------===//

#ifndef DISTOPT_TARGET_STEPLIBRARY_H
#define DISTOPT_TARGET_STEPLIBRARY_H

#include "distopt/Pipelines/Pipelines.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/DialectRegistry.h"

#include <string>
#include <vector>

namespace mlir::distopt {

/// How a step is compiled: distopt-compile's options, under its flags'
/// names (error messages name the flags).
struct StepLibraryOptions {
  /// cpu, or cuda (kernels embedded in host code; buffers in device memory).
  std::string target = "cpu";
  /// --target=cuda: the chip; what to embed (fatbin, isa, or auto: fatbin
  /// where the toolkit's ptxas is found); the toolkit ("": $CUDA_ROOT,
  /// $CUDA_HOME, /usr/local/cuda).
  std::string gpuChip = "sm_90";
  std::string gpuFormat = "auto";
  std::string cudaToolkit;
  /// Passes (textual, without the builtin.module anchor) that lower the
  /// step to the LLVM dialect instead of the target's: for tests.
  std::string lowering;
  /// native (this machine, with all its features) or an LLVM CPU name;
  /// features to add (+name) or remove (-name) after the CPU's.
  std::string cpu = "native";
  std::vector<std::string> cpuFeatures;
  unsigned optLevel = 3;
  /// The element-wise loops' vector width: a power of two, or 0 for the
  /// CPU's choice.
  unsigned elementwiseVectorBits = kDefaultElementwiseVectorBits;
};

/// Adds the translations to LLVM IR that a step's lowering produces.
void registerStepLibraryTranslations(DialectRegistry &registry);

/// Checks `options` and `outputPath` (.o or .so) before any work: an
/// unknown target, CPU, CPU feature or GPU format, a vector width that is
/// not a power of two, an optimisation level above 3 (compileStepLibrary
/// checks them too). Errors go to `context`'s diagnostic handlers, at an
/// unknown location.
LogicalResult checkStepLibraryOptions(MLIRContext *context,
                                      const StepLibraryOptions &options,
                                      StringRef outputPath);

/// Compiles @step of `module` (after distopt-pipeline, or with the roles of
/// its arguments and results on its signature) into `outputPath`: an object
/// (.o), or a shared library (.so) linked in this process. The module is
/// lowered in place. Errors go to the context's diagnostic handlers:
/// located where they concern an op, else at an unknown location. Linking
/// runs lld's driver in this process, one link at a time; the driver
/// resets LLVM's command-line options, so read them before.
LogicalResult compileStepLibrary(ModuleOp module,
                                 const StepLibraryOptions &options,
                                 StringRef outputPath);

} // namespace mlir::distopt

#endif // DISTOPT_TARGET_STEPLIBRARY_H
