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

// -----

#all2 = affine_map<(d0, d1) -> (d0, d1)>
#none2 = affine_map<(d0, d1) -> ()>

// A whole-tensor reduction whose combine may be reassociated (a norm's
// f64 sum of squares), 300x1000 elements: partial sums of 5 chunks of
// 65536 elements (the last one shorter) over the tensor as one run of
// memory, computed in parallel, each chunk's loop the op's body with its
// fast-math flags, then combined in order into the output.
// CHECK-LABEL: func.func @norm
// CHECK: %[[FLAT:.*]] = memref.collapse_shape %{{.*}} {{\[\[}}0, 1]] : memref<300x1000xf32> into memref<300000xf32>
// CHECK: %[[PARTS:.*]] = memref.alloc() : memref<5xf64>
// CHECK: scf.parallel (%[[C:.*]]) = (%{{.*}}) to (%{{.*}}) step
// CHECK: %[[BEGIN:.*]] = arith.muli %[[C]], %{{.*}} : index
// CHECK: %[[END:.*]] = arith.minsi
// CHECK: %[[P:.*]] = scf.for %[[I:.*]] = %[[BEGIN]] to %[[END]] step %{{.*}} iter_args(%[[ACC:.*]] = %{{.*}}) -> (f64)
// CHECK: %[[X:.*]] = memref.load %[[FLAT]][%[[I]]] : memref<300000xf32>
// CHECK: %[[W:.*]] = arith.extf %[[X]]
// CHECK: %[[SQ:.*]] = arith.mulf %[[W]], %[[W]]
// CHECK: %[[SUM:.*]] = arith.addf %[[ACC]], %[[SQ]] fastmath<reassoc> : f64
// CHECK: scf.yield %[[SUM]]
// CHECK: memref.store %[[P]], %[[PARTS]][%[[C]]]
// CHECK: %[[INIT:.*]] = memref.load %[[OUT:arg1]][] : memref<f64>
// CHECK: %[[ALL:.*]] = scf.for %{{.*}} = %{{.*}} to %{{.*}} step %{{.*}} iter_args(%[[T:.*]] = %[[INIT]]) -> (f64)
// CHECK: memref.load %[[PARTS]]
// CHECK: arith.addf %[[T]]
// CHECK: memref.store %[[ALL]], %[[OUT]][] : memref<f64>
// CHECK: memref.dealloc %[[PARTS]]
// CHECK-NOT: linalg.generic
func.func @norm(%g: memref<300x1000xf32>, %out: memref<f64>) {
  linalg.generic {indexing_maps = [#all2, #none2], iterator_types = ["reduction", "reduction"]}
      ins(%g : memref<300x1000xf32>) outs(%out : memref<f64>) {
  ^bb0(%x: f32, %acc: f64):
    %w = arith.extf %x : f32 to f64
    %sq = arith.mulf %w, %w : f64
    %s = arith.addf %acc, %sq fastmath<reassoc> : f64
    linalg.yield %s : f64
  }
  return
}

// -----

#id = affine_map<(d0) -> (d0)>
#none = affine_map<(d0) -> ()>

// An exact combine (the finite check's and) is split whatever its flags;
// a strict float sum, whose order the result depends on, is not.
// CHECK-LABEL: func.func @kinds
// CHECK: memref.alloc() : memref<3xi1>
// CHECK: scf.parallel
// CHECK: arith.andi
// CHECK-NOT: scf.parallel
// CHECK: linalg.generic
func.func @kinds(%g: memref<131073xf32>, %ok: memref<i1>, %sum: memref<f32>) {
  linalg.generic {indexing_maps = [#id, #none], iterator_types = ["reduction"]}
      ins(%g : memref<131073xf32>) outs(%ok : memref<i1>) {
  ^bb0(%x: f32, %acc: i1):
    %f = math.isfinite %x : f32
    %a = arith.andi %acc, %f : i1
    linalg.yield %a : i1
  }
  linalg.generic {indexing_maps = [#id, #none], iterator_types = ["reduction"]}
      ins(%g : memref<131073xf32>) outs(%sum : memref<f32>) {
  ^bb0(%x: f32, %acc: f32):
    %s = arith.addf %acc, %x : f32
    linalg.yield %s : f32
  }
  return
}

// -----

// Large copies between contiguous buffers (bucket packing into a slot of a
// bucket): a parallel loop of copies of 65536-element chunks, on 1-d views;
// a small one stays a single copy.
// CHECK-LABEL: func.func @copies
// CHECK: %[[SRC:.*]] = memref.collapse_shape %{{.*}} {{\[\[}}0, 1]] : memref<512x300xf32> into memref<153600xf32>
// CHECK: scf.parallel (%[[C:.*]]) = (%{{.*}}) to (%{{.*}}) step
// CHECK: %[[BEGIN:.*]] = arith.muli %[[C]]
// CHECK: %[[SIZE:.*]] = arith.minsi
// CHECK: %[[FROM:.*]] = memref.subview %[[SRC]][%[[BEGIN]]] [%[[SIZE]]] [1]
// CHECK: %[[TO:.*]] = memref.subview %{{.*}}[%[[BEGIN]]] [%[[SIZE]]] [1]
// CHECK: memref.copy %[[FROM]], %[[TO]]
// CHECK: }
// CHECK: memref.copy %{{.*}}, %{{.*}} : memref<1000xf32> to memref<1000xf32
// LOW-LABEL: func.func @copies
// LOW-COUNT-2: scf.parallel
func.func @copies(%g: memref<512x300xf32>, %bucket: memref<160000xf32>, %b: memref<1000xf32>) {
  %slot = memref.subview %bucket[4096] [153600] [1] : memref<160000xf32> to memref<153600xf32, strided<[1], offset: 4096>>
  %view = memref.expand_shape %slot [[0, 1]] output_shape [512, 300] : memref<153600xf32, strided<[1], offset: 4096>> into memref<512x300xf32, strided<[300, 1], offset: 4096>>
  memref.copy %g, %view : memref<512x300xf32> to memref<512x300xf32, strided<[300, 1], offset: 4096>>
  %small = memref.subview %bucket[0] [1000] [1] : memref<160000xf32> to memref<1000xf32, strided<[1]>>
  memref.copy %b, %small : memref<1000xf32> to memref<1000xf32, strided<[1]>>
  return
}
