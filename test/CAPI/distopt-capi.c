/*===- distopt-capi.c - the C API, end to end -------------------*- C -*-===*\
|* Registers distopt in a context through the C API, parses a step, runs a  *|
|* pipeline by name and prints the result; then a malformed pipeline and a  *|
|* failing pass, which must fail with a diagnostic. With `compile STEP.mlir *|
|* OUT.so`, runs distopt-pipeline{zero-stage=2} on a step and compiles it   *|
|* into a library that distopt-run loads. RUN lines in test/CAPI/capi.test. *|
\*===----------------------------------------------------------------------===*/

#include "distopt-c/DistOpt.h"
#include "mlir-c/Diagnostics.h"
#include "mlir-c/IR.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void printToStdout(MlirStringRef text, void *userData) {
  (void)userData;
  fwrite(text.data, 1, text.length, stdout);
}

static MlirLogicalResult printDiagnostic(MlirDiagnostic diagnostic,
                                         void *userData) {
  (void)userData;
  printf("diagnostic: ");
  mlirDiagnosticPrint(diagnostic, printToStdout, NULL);
  printf("\n");
  return mlirLogicalResultSuccess();
}

static const char *kStep =
    "module {\n"
    "distopt.process_group @dp size 4\n"
    "func.func @step(%g: tensor<1024xf32>) -> tensor<1024xf32> {\n"
    "  %s = distopt.all_reduce sum %g on @dp : tensor<1024xf32>\n"
    "  %n = arith.constant dense<4.0> : tensor<1024xf32>\n"
    "  %a = arith.divf %s, %n : tensor<1024xf32>\n"
    "  return %a : tensor<1024xf32>\n"
    "}\n"
    "}\n";

static MlirModule parse(MlirContext ctx) {
  MlirModule module =
      mlirModuleCreateParse(ctx, mlirStringRefCreateFromCString(kStep));
  if (mlirModuleIsNull(module)) {
    fprintf(stderr, "parse failed\n");
    exit(1);
  }
  return module;
}

static int run(MlirModule module, const char *pipeline) {
  MlirLogicalResult result = distoptRunPipeline(
      module, mlirStringRefCreateFromCString(pipeline));
  printf("%s: %s\n", pipeline,
         mlirLogicalResultIsSuccess(result) ? "success" : "failure");
  return mlirLogicalResultIsSuccess(result);
}

/* Reads `path` whole; exits on failure. */
static char *readFile(const char *path) {
  FILE *f = fopen(path, "rb");
  if (!f) {
    fprintf(stderr, "cannot open %s\n", path);
    exit(1);
  }
  fseek(f, 0, SEEK_END);
  long size = ftell(f);
  fseek(f, 0, SEEK_SET);
  char *text = malloc((size_t)size + 1);
  if (!text || fread(text, 1, (size_t)size, f) != (size_t)size) {
    fprintf(stderr, "cannot read %s\n", path);
    exit(1);
  }
  text[size] = 0;
  fclose(f);
  return text;
}

/* A step from `stepPath` through distopt-pipeline into `outputPath`, and
   a target that does not exist, which must fail with a diagnostic. */
static int compile(MlirContext ctx, const char *stepPath,
                   const char *outputPath) {
  char *text = readFile(stepPath);
  MlirModule module =
      mlirModuleCreateParse(ctx, mlirStringRefCreateFromCString(text));
  free(text);
  if (mlirModuleIsNull(module) ||
      !run(module, "builtin.module(distopt-pipeline{zero-stage=2})"))
    return 1;
  MlirLogicalResult compiled =
      distoptCompileStep(module, mlirStringRefCreateFromCString("cpu"),
                         mlirStringRefCreateFromCString(outputPath));
  printf("compile for cpu: %s\n",
         mlirLogicalResultIsSuccess(compiled) ? "success" : "failure");
  MlirLogicalResult refused =
      distoptCompileStep(module, mlirStringRefCreateFromCString("tpu"),
                         mlirStringRefCreateFromCString(outputPath));
  printf("compile for tpu: %s\n",
         mlirLogicalResultIsSuccess(refused) ? "success" : "failure");
  mlirModuleDestroy(module);
  return mlirLogicalResultIsSuccess(compiled) &&
                 mlirLogicalResultIsFailure(refused)
             ? 0
             : 1;
}

int main(int argc, char **argv) {
  MlirDialectRegistry registry = mlirDialectRegistryCreate();
  distoptRegisterDialects(registry);
  distoptRegisterPasses();
  distoptRegisterPasses(); /* idempotent */
  MlirContext ctx = mlirContextCreateWithRegistry(registry, false);
  mlirDialectRegistryDestroy(registry);
  mlirContextAttachDiagnosticHandler(ctx, printDiagnostic, NULL, NULL);

  if (argc == 4 && strcmp(argv[1], "compile") == 0) {
    int status = compile(ctx, argv[2], argv[3]);
    mlirContextDestroy(ctx);
    return status;
  }

  MlirDialect dialect = mlirContextGetOrLoadDialect(
      ctx, mlirStringRefCreateFromCString("distopt"));
  MlirStringRef ns = mlirDialectGetNamespace(dialect);
  printf("dialect: %.*s\n", (int)ns.length, ns.data);

  MlirModule module = parse(ctx);
  if (!run(module, "builtin.module(func.func(distopt-fuse-div-into-allreduce))"))
    return 1;
  mlirOperationPrint(mlirModuleGetOperation(module), printToStdout, NULL);
  printf("\n");
  mlirModuleDestroy(module);

  module = parse(ctx);
  if (run(module, "builtin.module(distopt-no-such-pass)"))
    return 1;
  if (run(module, "func.func(distopt-fuse-div-into-allreduce)"))
    return 1;
  if (run(module, "builtin.module(distopt-pipeline{zero-stage=7})"))
    return 1;
  mlirModuleDestroy(module);

  mlirContextDestroy(ctx);
  return 0;
}
