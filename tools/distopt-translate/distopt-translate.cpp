//===- distopt-translate.cpp - translations into distopt --------*- C++ -*-===//
//
// `distopt-translate --import-param-spec spec.json` prints the step function
// of a parameter spec.
//
//===----------------------------------------------------------------------===//

#include "distopt/Target/ParamSpec.h"

#include "mlir/Tools/mlir-translate/MlirTranslateMain.h"

int main(int argc, char **argv) {
  mlir::distopt::registerImportParamSpec();
  return mlir::failed(
      mlir::mlirTranslateMain(argc, argv, "distopt translation driver\n"));
}
