/*===- DistOpt.h - C API of the distopt dialect and passes ----------*- C
-*-===*\
|*                                                                            *|
|* Registers the distopt dialect and passes with a context, runs pipelines   *|
|* on modules and compiles steps into loadable libraries, for compilers that *|
|* embed distopt through MLIR's C API.                                       *|
|* Everything else (contexts, parsing, printing) is MLIR's own C API, which  *|
|* libDistOptCAPI.so carries too.                                            *|
|*                                                                            *|
\*===----------------------------------------------------------------------===*/

#ifndef DISTOPT_C_DISTOPT_H
#define DISTOPT_C_DISTOPT_H

#include "mlir-c/IR.h"
#include "mlir-c/Support.h"

#ifdef __cplusplus
extern "C" {
#endif

/// The distopt dialect: mlirGetDialectHandle__distopt__().
MLIR_DECLARE_CAPI_DIALECT_REGISTRATION(DistOpt, distopt);

/// Inserts into `registry` the distopt dialect, every dialect its pipelines
/// produce (func, arith, math, tensor, linalg, memref, scf, cf,
/// bufferization, llvm), upstream's shard dialect (the input of
/// --convert-shard-to-distopt) and the interface models lowering needs.
MLIR_CAPI_EXPORTED void distoptRegisterDialects(MlirDialectRegistry registry);

/// Registers the distopt passes and the `distopt-pipeline` and
/// `distopt-lower-to-cpu` pipelines, so that textual pipelines name them.
/// Idempotent.
MLIR_CAPI_EXPORTED void distoptRegisterPasses(void);

/// Parses `pipeline`, a textual pass pipeline anchored on the module
/// ("builtin.module(distopt-pipeline{zero-stage=2})"), and runs it on
/// `module`. A malformed pipeline or a failing pass reports through the
/// context's diagnostic handlers and returns failure; the module may then be
/// partly transformed.
MLIR_CAPI_EXPORTED MlirLogicalResult distoptRunPipeline(MlirModule module,
                                                        MlirStringRef pipeline);

/// Compiles @step of `module` into what a driver loads (distopt-run, the
/// host step library, the Python package), as distopt-compile does:
/// `target` is "cpu" (this machine's CPU, with its features) or "cuda";
/// `outputPath` ends in .so (a shared library, linked in this process) or
/// .o (an object). Run distopt-pipeline on the module first
/// (distoptRunPipeline; it also infers a hand-written step's roles). The
/// module is lowered in place. Failures report through the context's
/// diagnostic handlers and return failure.
MLIR_CAPI_EXPORTED MlirLogicalResult distoptCompileStep(
    MlirModule module, MlirStringRef target, MlirStringRef outputPath);

#ifdef __cplusplus
}
#endif

#endif /* DISTOPT_C_DISTOPT_H */
