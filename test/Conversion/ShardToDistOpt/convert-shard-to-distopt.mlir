// RUN: distopt-opt %s -split-input-file --convert-shard-to-distopt | FileCheck %s

// What upstream's partitioning makes of a matmul whose contraction dimension
// is split over 4 processes: partial sums, all-reduced.
// RUN: distopt-opt %S/Inputs/shard-matmul.mlir \
// RUN:   --pass-pipeline='builtin.module(func.func(sharding-propagation,shard-partition),convert-shard-to-distopt,canonicalize)' \
// RUN:   | FileCheck %s --check-prefix=MATMUL

// MATMUL:      distopt.process_group @grid size 4
// MATMUL:      func.func @matmul(%{{.*}}: tensor<8x4xf32>, %{{.*}}: tensor<4x8xf32>) -> tensor<8x8xf32>
// MATMUL:        distopt.rank @grid : index
// MATMUL:        %[[M:.*]] = linalg.matmul
// MATMUL:        %[[R:.*]] = distopt.all_reduce sum %[[M]] on @grid : tensor<8x8xf32>
// MATMUL:        return %[[R]]
// MATMUL-NOT:  shard.

shard.grid @g(shape = 2x2)
// CHECK-LABEL: distopt.process_group @g size 4
// CHECK-NOT:   shard.grid
// CHECK-LABEL: func.func @reductions
func.func @reductions(%x: tensor<8xf32>, %h: tensor<2x4xf16>, %i: tensor<4xi32>)
    -> (tensor<8xf32>, tensor<8xf32>, tensor<8xf32>, tensor<8xf32>, tensor<8xf32>, tensor<2x4xf32>, tensor<4xi64>) {
  // CHECK: distopt.all_reduce sum %arg0 on @g : tensor<8xf32>
  %a = shard.all_reduce %x on @g grid_axes = [0, 1] : tensor<8xf32> -> tensor<8xf32>
  // CHECK: distopt.all_reduce avg %arg0 on @g
  %b = shard.all_reduce %x on @g grid_axes = [0, 1] reduction = average : tensor<8xf32> -> tensor<8xf32>
  // CHECK: distopt.all_reduce min %arg0 on @g
  %c = shard.all_reduce %x on @g grid_axes = [0, 1] reduction = min : tensor<8xf32> -> tensor<8xf32>
  // CHECK: distopt.all_reduce max %arg0 on @g
  %d = shard.all_reduce %x on @g grid_axes = [0, 1] reduction = max : tensor<8xf32> -> tensor<8xf32>
  // The order of the axes does not matter to a reduction.
  // CHECK: distopt.all_reduce prod %arg0 on @g
  %e = shard.all_reduce %x on @g grid_axes = [1, 0] reduction = product : tensor<8xf32> -> tensor<8xf32>
  // Accumulation in the result's type: the input is converted first.
  // CHECK: %[[W:.*]] = arith.extf %arg1 : tensor<2x4xf16> to tensor<2x4xf32>
  // CHECK: distopt.all_reduce sum %[[W]] on @g : tensor<2x4xf32>
  %f = shard.all_reduce %h on @g grid_axes = [0, 1] : tensor<2x4xf16> -> tensor<2x4xf32>
  // CHECK: %[[L:.*]] = arith.extsi %arg2 : tensor<4xi32> to tensor<4xi64>
  // CHECK: distopt.all_reduce sum %[[L]] on @g : tensor<4xi64>
  %g = shard.all_reduce %i on @g grid_axes = [0, 1] : tensor<4xi32> -> tensor<4xi64>
  return %a, %b, %c, %d, %e, %f, %g : tensor<8xf32>, tensor<8xf32>, tensor<8xf32>, tensor<8xf32>, tensor<8xf32>, tensor<2x4xf32>, tensor<4xi64>
}

// -----
shard.grid @g(shape = 2x2)
// Gathers and scatters along dim 0 map directly; along another dim, through
// a transpose (the rank-major chunks of distopt's dim 0 moved to the axis).
// CHECK-LABEL: func.func @gather_scatter
func.func @gather_scatter(%x: tensor<4x8xf32>) -> (tensor<16x8xf32>, tensor<4x32xf32>, tensor<1x8xf32>, tensor<4x2xf32>) {
  // CHECK: %[[G0:.*]] = distopt.all_gather %arg0 on @g : tensor<4x8xf32> -> tensor<16x8xf32>
  %a = shard.all_gather %x on @g grid_axes = [0, 1] gather_axis = 0 : tensor<4x8xf32> -> tensor<16x8xf32>
  // CHECK: %[[G1:.*]] = distopt.all_gather %arg0 on @g : tensor<4x8xf32> -> tensor<16x8xf32>
  // CHECK: %[[E:.*]] = tensor.expand_shape %[[G1]] {{\[}}[0, 1], [2]] output_shape [4, 4, 8] : tensor<16x8xf32> into tensor<4x4x8xf32>
  // CHECK: %[[T:.*]] = linalg.transpose ins(%[[E]] : tensor<4x4x8xf32>) outs(%{{.*}} : tensor<4x4x8xf32>) permutation = [1, 0, 2]
  // CHECK: %[[C:.*]] = tensor.collapse_shape %[[T]] {{\[}}[0], [1, 2]] : tensor<4x4x8xf32> into tensor<4x32xf32>
  %b = shard.all_gather %x on @g grid_axes = [0, 1] gather_axis = 1 : tensor<4x8xf32> -> tensor<4x32xf32>
  // CHECK: %[[RS:.*]] = distopt.reduce_scatter avg %arg0 on @g : tensor<4x8xf32> -> tensor<1x8xf32>
  %c = shard.reduce_scatter %x on @g grid_axes = [0, 1] reduction = average scatter_axis = 0 : tensor<4x8xf32> -> tensor<1x8xf32>
  // all_slice is local: this rank's chunk.
  // CHECK: %[[R:.*]] = distopt.rank @g : index
  // CHECK: %[[O:.*]] = arith.muli %[[R]], %c2 : index
  // CHECK: %[[S:.*]] = tensor.extract_slice %arg0[0, %[[O]]] [4, 2] [1, 1] : tensor<4x8xf32> to tensor<4x2xf32>
  %d = shard.all_slice %x on @g grid_axes = [0, 1] slice_axis = 1 : tensor<4x8xf32> -> tensor<4x2xf32>
  // CHECK: return %[[G0]], %[[C]], %[[RS]], %[[S]]
  return %a, %b, %c, %d : tensor<16x8xf32>, tensor<4x32xf32>, tensor<1x8xf32>, tensor<4x2xf32>
}

// -----
shard.grid @g(shape = 4)
// CHECK-LABEL: func.func @scatter_axis_1
func.func @scatter_axis_1(%x: tensor<2x8xf32>) -> tensor<2x2xf32> {
  // CHECK: %[[E:.*]] = tensor.expand_shape %arg0 {{\[}}[0], [1, 2]] output_shape [2, 4, 2] : tensor<2x8xf32> into tensor<2x4x2xf32>
  // CHECK: %[[T:.*]] = linalg.transpose ins(%[[E]] : tensor<2x4x2xf32>) outs(%{{.*}} : tensor<4x2x2xf32>) permutation = [1, 0, 2]
  // CHECK: %[[C:.*]] = tensor.collapse_shape %[[T]] {{\[}}[0, 1], [2]] : tensor<4x2x2xf32> into tensor<8x2xf32>
  // CHECK: distopt.reduce_scatter max %[[C]] on @g : tensor<8x2xf32> -> tensor<2x2xf32>
  %r = shard.reduce_scatter %x on @g grid_axes = [0] reduction = max scatter_axis = 1 : tensor<2x8xf32> -> tensor<2x2xf32>
  return %r : tensor<2x2xf32>
}

// -----
shard.grid @g(shape = 2x2)
// The root of a broadcast is a multi-index over grid_axes, in their order:
// [1, 0] over axes [1, 0] is the process at (0, 1), rank 1.
// CHECK-LABEL: func.func @broadcast
func.func @broadcast(%x: tensor<4xf32>) -> (tensor<4xf32>, tensor<4xf32>) {
  // CHECK: distopt.broadcast %arg0 on @g root 1 : tensor<4xf32>
  %a = shard.broadcast %x on @g grid_axes = [1, 0] root = [1, 0] : (tensor<4xf32>) -> tensor<4xf32>
  // CHECK: distopt.broadcast %arg0 on @g root 2 : tensor<4xf32>
  %b = shard.broadcast %x on @g grid_axes = [0, 1] root = [1, 0] : (tensor<4xf32>) -> tensor<4xf32>
  return %a, %b : tensor<4xf32>, tensor<4xf32>
}

// -----
shard.grid @g(shape = 3x4)
// Indices: the grid is row-major.
// CHECK-LABEL: func.func @indices
func.func @indices() -> (index, index, index, index, index) {
  // CHECK: %[[R:.*]] = distopt.rank @g : index
  // CHECK: %[[S0:.*]] = arith.constant 4 : index
  // CHECK: %[[N0:.*]] = arith.constant 3 : index
  // CHECK: %[[Q0:.*]] = arith.divui %[[R]], %[[S0]] : index
  // CHECK: %[[I0:.*]] = arith.remui %[[Q0]], %[[N0]] : index
  // CHECK: %[[S1:.*]] = arith.constant 1 : index
  // CHECK: %[[N1:.*]] = arith.constant 4 : index
  // CHECK: %[[Q1:.*]] = arith.divui %[[R]], %[[S1]] : index
  // CHECK: %[[I1:.*]] = arith.remui %[[Q1]], %[[N1]] : index
  %i:2 = shard.process_multi_index on @g : index, index
  // CHECK: %[[L:.*]] = distopt.rank @g : index
  %l = shard.process_linear_index on @g : index
  // CHECK: %[[D0:.*]] = arith.constant 3 : index
  // CHECK: %[[D1:.*]] = arith.constant 4 : index
  %s:2 = shard.grid_shape @g : index, index
  // CHECK: return %[[I0]], %[[I1]], %[[L]], %[[D0]], %[[D1]]
  return %i#0, %i#1, %l, %s#0, %s#1 : index, index, index, index, index
}

// -----
shard.grid @g(shape = 4x1)
// Collectives whose grid_axes only span axes of size 1 are the identity.
// CHECK-LABEL: distopt.process_group @g size 4
// CHECK-LABEL: func.func @identity
func.func @identity(%x: tensor<4xf32>, %h: tensor<4xf16>) -> (tensor<4xf32>, tensor<4xf32>, tensor<4xf32>) {
  // CHECK-NOT: distopt.all_reduce
  // CHECK-NOT: distopt.all_gather
  // CHECK: %[[W:.*]] = arith.extf %arg1
  // CHECK-NOT: distopt.
  // CHECK: return %arg0, %arg0, %[[W]]
  %a = shard.all_reduce %x on @g grid_axes = [1] : tensor<4xf32> -> tensor<4xf32>
  %b = shard.all_gather %x on @g grid_axes = [1] gather_axis = 0 : tensor<4xf32> -> tensor<4xf32>
  %c = shard.all_reduce %h on @g grid_axes = [] : tensor<4xf16> -> tensor<4xf32>
  return %a, %b, %c : tensor<4xf32>, tensor<4xf32>, tensor<4xf32>
}

// -----
// Collectives over some of the grid's axes, or over all in another order,
// run on groups over those axes of a mesh shaped like the grid; a reduction
// or broadcast over all of them, in any order, on the grid's own group.
shard.grid @g(shape = 2x3)
// CHECK-LABEL: distopt.mesh @g_mesh shape [2, 3]
// CHECK-DAG:   distopt.process_group @g_axes_1 size 3 over @g_mesh axes [1]
// CHECK-DAG:   distopt.process_group @g_axes_0 size 2 over @g_mesh axes [0]
// CHECK-DAG:   distopt.process_group @g_axes_1_0 size 6 over @g_mesh axes [1, 0]
// CHECK:       distopt.process_group @g size 6
// CHECK-LABEL: func.func @sub_grids
func.func @sub_grids(%x: tensor<6xf32>) -> (tensor<6xf32>, tensor<12xf32>, tensor<2xf32>, tensor<6xf32>, tensor<6xf32>, tensor<36xf32>, tensor<6xf32>, tensor<3xf32>) {
  // CHECK: distopt.all_reduce sum %arg0 on @g_axes_1 : tensor<6xf32>
  %a = shard.all_reduce %x on @g grid_axes = [1] : tensor<6xf32> -> tensor<6xf32>
  // CHECK: distopt.all_gather %arg0 on @g_axes_0 : tensor<6xf32> -> tensor<12xf32>
  %b = shard.all_gather %x on @g grid_axes = [0] gather_axis = 0 : tensor<6xf32> -> tensor<12xf32>
  // CHECK: distopt.reduce_scatter sum %arg0 on @g_axes_1 : tensor<6xf32> -> tensor<2xf32>
  %c = shard.reduce_scatter %x on @g grid_axes = [1] scatter_axis = 0 : tensor<6xf32> -> tensor<2xf32>
  // Root [2] of axis 1: rank 2 of this rank's row.
  // CHECK: distopt.broadcast %arg0 on @g_axes_1 root 2 : tensor<6xf32>
  %d = shard.broadcast %x on @g grid_axes = [1] root = [2] : (tensor<6xf32>) -> tensor<6xf32>
  // CHECK: distopt.all_reduce max %arg0 on @g : tensor<6xf32>
  %e = shard.all_reduce %x on @g grid_axes = [1, 0] reduction = max : tensor<6xf32> -> tensor<6xf32>
  // CHECK: distopt.all_gather %arg0 on @g_axes_1_0 : tensor<6xf32> -> tensor<36xf32>
  %f = shard.all_gather %x on @g grid_axes = [1, 0] gather_axis = 0 : tensor<6xf32> -> tensor<36xf32>
  // CHECK: distopt.broadcast %arg0 on @g root 4 : tensor<6xf32>
  %h = shard.broadcast %x on @g grid_axes = [1, 0] root = [1, 1] : (tensor<6xf32>) -> tensor<6xf32>
  // CHECK: distopt.rank @g_axes_0 : index
  %i = shard.all_slice %x on @g grid_axes = [0] slice_axis = 0 : tensor<6xf32> -> tensor<3xf32>
  return %a, %b, %c, %d, %e, %f, %h, %i : tensor<6xf32>, tensor<12xf32>, tensor<2xf32>, tensor<6xf32>, tensor<6xf32>, tensor<36xf32>, tensor<6xf32>, tensor<3xf32>
}
