// RUN: distopt-opt %s --distopt-fuse-elementwise-producers | FileCheck %s

// The clipped gradient (x * c) read only by the update is computed inside
// it: one loop, reading x; the same operations in the same order.
#id = affine_map<(d0) -> (d0)>
// CHECK-LABEL: func.func @into_update
// CHECK-COUNT-1: linalg.generic
// CHECK-NOT: linalg.generic
// CHECK: %[[C:.*]] = arith.mulf %{{.*}}, %{{.*}} : f32
// CHECK: arith.subf %{{.*}}, %[[C]] : f32
func.func @into_update(%x: tensor<64xf32>, %p: tensor<64xf32>, %c: f32) -> tensor<64xf32> {
  %clipped = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel"]}
      ins(%x : tensor<64xf32>) outs(%x : tensor<64xf32>) {
  ^bb0(%in: f32, %out: f32):
    %m = arith.mulf %in, %c : f32
    linalg.yield %m : f32
  } -> tensor<64xf32>
  %new = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel"]}
      ins(%clipped : tensor<64xf32>) outs(%p : tensor<64xf32>) {
  ^bb0(%g: f32, %old: f32):
    %n = arith.subf %old, %g : f32
    linalg.yield %n : f32
  } -> tensor<64xf32>
  return %new : tensor<64xf32>
}

// A result read twice stays a tensor: fused, it would be computed where
// the first reader is, and kept there for the other.
// CHECK-LABEL: func.func @two_readers
// CHECK-COUNT-3: linalg.generic
func.func @two_readers(%x: tensor<64xf32>, %p: tensor<64xf32>, %c: f32) -> (tensor<64xf32>, tensor<64xf32>) {
  %scaled = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel"]}
      ins(%x : tensor<64xf32>) outs(%x : tensor<64xf32>) {
  ^bb0(%in: f32, %out: f32):
    %m = arith.mulf %in, %c : f32
    linalg.yield %m : f32
  } -> tensor<64xf32>
  %a = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel"]}
      ins(%scaled : tensor<64xf32>) outs(%p : tensor<64xf32>) {
  ^bb0(%g: f32, %old: f32):
    %n = arith.subf %old, %g : f32
    linalg.yield %n : f32
  } -> tensor<64xf32>
  %b = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel"]}
      ins(%scaled : tensor<64xf32>) outs(%p : tensor<64xf32>) {
  ^bb0(%g: f32, %old: f32):
    %n = arith.addf %old, %g : f32
    linalg.yield %n : f32
  } -> tensor<64xf32>
  return %a, %b : tensor<64xf32>, tensor<64xf32>
}
