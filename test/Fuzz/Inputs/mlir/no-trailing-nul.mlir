

distopt.process_group @dp size 4
func.func @powersgd_vector(%g: tensor<8xf32>, %p: tensor<8x1xf32>, %q: tensor<8x1xf32>) {
  // expected-error @+1 {{gradient // RUN: distopt-opt %s -split-input-file --distopt-lower-local-ops -verify-diagnostics | FileCheck %s
// RUN: distopt-opt %s -split-input-file --distopt-lower-local-ops -verify-diagnoe at urn
}i