// RUN: distopt-opt %s --split-input-file --verify-diagnostics --pass-pipeline="builtin.module(func.func(distopt-verify-offload))" | FileCheck %s

// Parallel loops inside a launch (a kernel's own) are what the conversion
// leaves: accepted.
// CHECK-LABEL: func.func @mapped
func.func @mapped(%a: memref<8xf32>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c8 = arith.constant 8 : index
  %f = arith.constant 1.0 : f32
  gpu.launch blocks(%bx, %by, %bz) in (%x = %c1, %y = %c1, %z = %c1)
             threads(%tx, %ty, %tz) in (%u = %c1, %v = %c1, %w = %c1) {
    scf.parallel (%i) = (%c0) to (%c8) step (%c1) {
      memref.store %f, %a[%i] : memref<8xf32>
      scf.reduce
    }
    gpu.terminator
  }
  return
}

// -----

// A parallel loop left on the host, as convert-parallel-loops-to-gpu leaves
// a nest it cannot map without a word, would read and write device memory
// there: an error at the loop.
func.func @left(%a: memref<8xf32>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c8 = arith.constant 8 : index
  %f = arith.constant 1.0 : f32
  // expected-error @below {{a parallel loop was not mapped to the GPU; on the host it would touch device memory}}
  scf.parallel (%i) = (%c0) to (%c8) step (%c1) {
    memref.store %f, %a[%i] : memref<8xf32>
    scf.reduce
  }
  return
}
