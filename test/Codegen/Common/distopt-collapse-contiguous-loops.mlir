// RUN: distopt-opt %s --split-input-file --distopt-collapse-contiguous-loops | FileCheck %s

// An element-wise update of a conv weight runs as one loop over its
// elements: every operand collapsed, no reshape of the result needed.
// CHECK-DAG: #[[$ID1:.*]] = affine_map<(d0) -> (d0)>
// CHECK-LABEL: func.func @update_4d
// CHECK-SAME: (%[[P:.*]]: memref<512x512x3x3xf32>, %[[G:.*]]: memref<512x512x3x3xf32>)
// CHECK-DAG: %[[G1:.*]] = memref.collapse_shape %[[G]] {{\[}}[0, 1, 2, 3]] : memref<512x512x3x3xf32> into memref<2359296xf32>
// CHECK-DAG: %[[P1:.*]] = memref.collapse_shape %[[P]] {{\[}}[0, 1, 2, 3]] : memref<512x512x3x3xf32> into memref<2359296xf32>
// CHECK: linalg.generic {indexing_maps = [#[[$ID1]], #[[$ID1]]], iterator_types = ["parallel"]} ins(%[[G1]] : memref<2359296xf32>) outs(%[[P1]] : memref<2359296xf32>)
// CHECK: math.fma
// CHECK-NOT: linalg.generic
#id4 = affine_map<(d0, d1, d2, d3) -> (d0, d1, d2, d3)>
func.func @update_4d(%p: memref<512x512x3x3xf32>, %g: memref<512x512x3x3xf32>) {
  %lr = arith.constant -1.0e-3 : f32
  linalg.generic {indexing_maps = [#id4, #id4],
                  iterator_types = ["parallel", "parallel", "parallel", "parallel"]}
      ins(%g : memref<512x512x3x3xf32>) outs(%p : memref<512x512x3x3xf32>) {
  ^bb0(%gi: f32, %pi: f32):
    %r = math.fma %lr, %gi, %pi : f32
    linalg.yield %r : f32
  }
  return
}

// -----

// A contiguous view of a bucket (static offset) collapses too (here back
// to the bucket's slice it was expanded from); scalar operands do not take
// part.
// CHECK-LABEL: func.func @bucket_view
// CHECK: %[[V:.*]] = memref.subview
// CHECK-NOT: expand_shape
// CHECK: linalg.generic {{.*}} iterator_types = ["parallel"]} ins(%{{.*}} : f32) outs(%[[V]] : memref<32xf32, strided<[1], offset: 64>>)
#id2 = affine_map<(d0, d1) -> (d0, d1)>
#scalar = affine_map<(d0, d1) -> ()>
func.func @bucket_view(%bucket: memref<128xf32>, %s: f32) {
  %view = memref.subview %bucket[64] [32] [1] : memref<128xf32> to memref<32xf32, strided<[1], offset: 64>>
  %m = memref.expand_shape %view [[0, 1]] output_shape [4, 8] : memref<32xf32, strided<[1], offset: 64>> into memref<4x8xf32, strided<[8, 1], offset: 64>>
  linalg.generic {indexing_maps = [#scalar, #id2], iterator_types = ["parallel", "parallel"]}
      ins(%s : f32) outs(%m : memref<4x8xf32, strided<[8, 1], offset: 64>>) {
  ^bb0(%x: f32, %o: f32):
    linalg.yield %x : f32
  }
  return
}

// -----

// A column block of a matrix is not contiguous: the loops stay.
// CHECK-LABEL: func.func @strided_view
// CHECK-NOT: collapse_shape
// CHECK: iterator_types = ["parallel", "parallel"]
#id2 = affine_map<(d0, d1) -> (d0, d1)>
func.func @strided_view(%m: memref<8x8xf32>, %s: f32) {
  %view = memref.subview %m[0, 0] [8, 4] [1, 1] : memref<8x8xf32> to memref<8x4xf32, strided<[8, 1]>>
  linalg.generic {indexing_maps = [#id2], iterator_types = ["parallel", "parallel"]}
      outs(%view : memref<8x4xf32, strided<[8, 1]>>) {
  ^bb0(%o: f32):
    linalg.yield %s : f32
  }
  return
}

// -----

// A bias broadcast over rows keeps its row loop; a transposed operand keeps
// both. Only loops that every operand walks together and in order merge.
// CHECK-LABEL: func.func @broadcast_and_transpose
// CHECK: linalg.generic {{.*}} iterator_types = ["parallel", "parallel"]} ins(%{{.*}} : memref<16xf32>) outs(%{{.*}} : memref<32x16xf32>)
// CHECK: linalg.generic {{.*}} iterator_types = ["parallel", "parallel"]} ins(%{{.*}} : memref<16x32xf32>) outs(%{{.*}} : memref<32x16xf32>)
// CHECK-NOT: collapse_shape
#id2 = affine_map<(d0, d1) -> (d0, d1)>
#row = affine_map<(d0, d1) -> (d1)>
#t = affine_map<(d0, d1) -> (d1, d0)>
func.func @broadcast_and_transpose(%b: memref<16xf32>, %t: memref<16x32xf32>, %o: memref<32x16xf32>) {
  linalg.generic {indexing_maps = [#row, #id2], iterator_types = ["parallel", "parallel"]}
      ins(%b : memref<16xf32>) outs(%o : memref<32x16xf32>) {
  ^bb0(%x: f32, %y: f32):
    linalg.yield %x : f32
  }
  linalg.generic {indexing_maps = [#t, #id2], iterator_types = ["parallel", "parallel"]}
      ins(%t : memref<16x32xf32>) outs(%o : memref<32x16xf32>) {
  ^bb0(%x: f32, %y: f32):
    linalg.yield %x : f32
  }
  return
}

// -----

// A reduction of a whole tensor to a scalar (a norm) is one loop, in the
// same order; a row-wise sum merges nothing (its loops differ in kind).
// CHECK-LABEL: func.func @reductions
// CHECK: %[[X1:.*]] = memref.collapse_shape %{{.*}} {{\[}}[0, 1, 2]] : memref<4x5x6xf64> into memref<120xf64>
// CHECK: linalg.generic {{.*}} iterator_types = ["reduction"]} ins(%[[X1]] : memref<120xf64>) outs(%{{.*}} : memref<f64>)
// CHECK: linalg.generic {{.*}} iterator_types = ["parallel", "reduction"]} ins(%{{.*}} : memref<4x30xf64>) outs(%{{.*}} : memref<4xf64>)
#id3 = affine_map<(d0, d1, d2) -> (d0, d1, d2)>
#none = affine_map<(d0, d1, d2) -> ()>
#id2 = affine_map<(d0, d1) -> (d0, d1)>
#rows = affine_map<(d0, d1) -> (d0)>
func.func @reductions(%x: memref<4x5x6xf64>, %sum: memref<f64>, %m: memref<4x30xf64>, %rows: memref<4xf64>) {
  linalg.generic {indexing_maps = [#id3, #none], iterator_types = ["reduction", "reduction", "reduction"]}
      ins(%x : memref<4x5x6xf64>) outs(%sum : memref<f64>) {
  ^bb0(%a: f64, %acc: f64):
    %sq = arith.mulf %a, %a : f64
    %r = arith.addf %acc, %sq : f64
    linalg.yield %r : f64
  }
  linalg.generic {indexing_maps = [#id2, #rows], iterator_types = ["parallel", "reduction"]}
      ins(%m : memref<4x30xf64>) outs(%rows : memref<4xf64>) {
  ^bb0(%a: f64, %acc: f64):
    %r = arith.addf %acc, %a : f64
    linalg.yield %r : f64
  }
  return
}

// -----

// A body that reads its loop indices gets them back from the one index.
// CHECK-LABEL: func.func @indices
// CHECK: linalg.generic {{.*}} iterator_types = ["parallel"]} outs(%{{.*}} : memref<24xindex>)
// CHECK: %[[I:.*]] = linalg.index 0 : index
// CHECK-DAG: arith.remsi %[[I]], %{{.*}} : index
// CHECK-DAG: arith.divsi %[[I]], %{{.*}} : index
#id2 = affine_map<(d0, d1) -> (d0, d1)>
func.func @indices(%o: memref<4x6xindex>) {
  linalg.generic {indexing_maps = [#id2], iterator_types = ["parallel", "parallel"]}
      outs(%o : memref<4x6xindex>) {
  ^bb0(%x: index):
    %i = linalg.index 0 : index
    %j = linalg.index 1 : index
    %r = arith.addi %i, %j : index
    linalg.yield %r : index
  }
  return
}

// -----

// Tensors are left to bufferization: the pass runs on buffers.
// CHECK-LABEL: func.func @tensors
// CHECK: iterator_types = ["parallel", "parallel"]
#id2 = affine_map<(d0, d1) -> (d0, d1)>
func.func @tensors(%t: tensor<4x8xf32>) -> tensor<4x8xf32> {
  %r = linalg.generic {indexing_maps = [#id2], iterator_types = ["parallel", "parallel"]}
      outs(%t : tensor<4x8xf32>) {
  ^bb0(%o: f32):
    %d = arith.addf %o, %o : f32
    linalg.yield %d : f32
  } -> tensor<4x8xf32>
  return %r : tensor<4x8xf32>
}
