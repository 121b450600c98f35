// RUN: distopt-opt %s --split-input-file --distopt-parallelize-loops | FileCheck %s
// RUN: distopt-opt %s --split-input-file --distopt-parallelize-loops="min-iterations=8" | FileCheck %s --check-prefix=LOW

#id = affine_map<(d0) -> (d0)>
#id2 = affine_map<(d0, d1) -> (d0, d1)>
#row = affine_map<(d0, d1) -> (d0)>

// An element-wise update at the threshold (131072 iterations) becomes one
// parallel loop over its iterations; its body is the op's.
// CHECK-LABEL: func.func @large
// CHECK: scf.parallel (%[[I:.*]]) = (%{{.*}}) to (%{{.*}}) step (%{{.*}}) {
// CHECK: %[[AT:.*]] = affine.apply #{{.*}}(%[[I]])
// CHECK: memref.load %{{.*}}[%[[AT]]] : memref<131072xf32>
// CHECK: arith.mulf
// CHECK: memref.store %{{.*}}, %{{.*}}[%{{.*}}] : memref<131072xf32>
// CHECK-NOT: linalg.generic
func.func @large(%g: memref<131072xf32>, %p: memref<131072xf32>) {
  linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel"]}
      ins(%g : memref<131072xf32>) outs(%p : memref<131072xf32>) {
  ^bb0(%x: f32, %y: f32):
    %m = arith.mulf %x, %y : f32
    linalg.yield %m : f32
  }
  return
}

// -----

#id = affine_map<(d0) -> (d0)>
#id2 = affine_map<(d0, d1) -> (d0, d1)>
#row = affine_map<(d0, d1) -> (d0)>

// N-D: one parallel loop with one induction variable per dimension.
// CHECK-LABEL: func.func @two_d
// CHECK: scf.parallel (%{{.*}}, %{{.*}}) =
// CHECK-NOT: linalg.
func.func @two_d(%a: memref<300x1000xf32>, %b: memref<300x1000xf32>) {
  linalg.copy ins(%a : memref<300x1000xf32>) outs(%b : memref<300x1000xf32>)
  return
}

// -----

#id = affine_map<(d0) -> (d0)>
#id2 = affine_map<(d0, d1) -> (d0, d1)>
#row = affine_map<(d0, d1) -> (d0)>

// Below the threshold, a reduction, and an op inside a sequential loop are
// left for --convert-linalg-to-loops.
// CHECK-LABEL: func.func @left
// CHECK-NOT: scf.parallel
// CHECK: linalg.generic
// CHECK: linalg.generic
// CHECK: scf.for
// CHECK: linalg.generic
// LOW-LABEL: func.func @left
// LOW: scf.parallel
// LOW: linalg.generic {{.*}}"reduction"
// LOW: scf.for
// LOW-NEXT: linalg.generic
func.func @left(%small: memref<131071xf32>, %m: memref<512x512xf32>, %rows: memref<512xf32>) {
  linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel"]}
      ins(%small : memref<131071xf32>) outs(%small : memref<131071xf32>) {
  ^bb0(%x: f32, %y: f32):
    %s = arith.addf %x, %y : f32
    linalg.yield %s : f32
  }
  linalg.generic {indexing_maps = [#id2, #row], iterator_types = ["parallel", "reduction"]}
      ins(%m : memref<512x512xf32>) outs(%rows : memref<512xf32>) {
  ^bb0(%x: f32, %acc: f32):
    %s = arith.addf %acc, %x : f32
    linalg.yield %s : f32
  }
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c4 = arith.constant 4 : index
  scf.for %i = %c0 to %c4 step %c1 {
    linalg.generic {indexing_maps = [#id2, #id2], iterator_types = ["parallel", "parallel"]}
        ins(%m : memref<512x512xf32>) outs(%m : memref<512x512xf32>) {
    ^bb0(%x: f32, %y: f32):
      %s = arith.addf %x, %y : f32
      linalg.yield %s : f32
    }
  }
  return
}

// -----

#id = affine_map<(d0) -> (d0)>
#id2 = affine_map<(d0, d1) -> (d0, d1)>
#row = affine_map<(d0, d1) -> (d0)>

// Tensors (not bufferized): left alone.
// CHECK-LABEL: func.func @tensors
// CHECK-NOT: scf.parallel
// CHECK: linalg.generic
func.func @tensors(%a: tensor<131072xf32>) -> tensor<131072xf32> {
  %r = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel"]}
      ins(%a : tensor<131072xf32>) outs(%a : tensor<131072xf32>) {
  ^bb0(%x: f32, %y: f32):
    %s = arith.addf %x, %y : f32
    linalg.yield %s : f32
  } -> tensor<131072xf32>
  return %r : tensor<131072xf32>
}
