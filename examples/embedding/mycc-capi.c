/*===- mycc-capi.c - mycc's C front end running distopt ---------*- C -*-===*\
|*                                                                          *|
|* mycc-capi FILE PIPELINE: parses FILE, runs the textual PIPELINE through  *|
|* distopt's C API and prints the module; exit status 1 on any failure.     *|
|*                                                                          *|
\*===----------------------------------------------------------------------===*/

#include "distopt-c/DistOpt.h"
#include "mlir-c/IR.h"

#include <stdio.h>
#include <stdlib.h>

static void print(MlirStringRef text, void *userData) {
  fwrite(text.data, 1, text.length, (FILE *)userData);
}

static char *readFile(const char *path) {
  FILE *file = fopen(path, "rb");
  if (!file)
    return NULL;
  fseek(file, 0, SEEK_END);
  long size = ftell(file);
  fseek(file, 0, SEEK_SET);
  char *text = malloc((size_t)size + 1);
  if (text && fread(text, 1, (size_t)size, file) != (size_t)size) {
    free(text);
    text = NULL;
  }
  if (text)
    text[size] = '\0';
  fclose(file);
  return text;
}

int main(int argc, char **argv) {
  if (argc != 3) {
    fprintf(stderr, "usage: %s FILE PIPELINE\n", argv[0]);
    return 2;
  }
  char *source = readFile(argv[1]);
  if (!source) {
    fprintf(stderr, "cannot read %s\n", argv[1]);
    return 1;
  }
  MlirDialectRegistry registry = mlirDialectRegistryCreate();
  distoptRegisterDialects(registry);
  distoptRegisterPasses();
  MlirContext context = mlirContextCreateWithRegistry(registry, false);
  mlirDialectRegistryDestroy(registry);

  /* Diagnostics go to stderr through MLIR's default handler. */
  MlirModule module =
      mlirModuleCreateParse(context, mlirStringRefCreateFromCString(source));
  free(source);
  int status = 1;
  if (!mlirModuleIsNull(module)) {
    if (mlirLogicalResultIsSuccess(distoptRunPipeline(
            module, mlirStringRefCreateFromCString(argv[2])))) {
      mlirOperationPrint(mlirModuleGetOperation(module), print, stdout);
      printf("\n");
      status = 0;
    }
    mlirModuleDestroy(module);
  }
  mlirContextDestroy(context);
  return status;
}
