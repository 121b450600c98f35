// RUN: distopt-opt %s --distopt-fold-splat-inputs | FileCheck %s

// A splat constant input of linalg.generic becomes a scalar in the body;
// other inputs (a non-splat constant, an argument) stay.
// CHECK-LABEL: func.func @divide
// CHECK-SAME: (%[[X:.*]]: tensor<100000000xf32>, %[[Y:.*]]: tensor<4xf32>)
// CHECK-NOT: dense<2.000000e+00>
// CHECK-DAG: %[[TWO:.*]] = arith.constant 2.000000e+00 : f32
// CHECK-DAG: %[[C:.*]] = arith.constant dense<[1.000000e+00, 2.000000e+00, 3.000000e+00, 4.000000e+00]> : tensor<4xf32>
// CHECK: linalg.generic {{.*}} ins(%[[X]] : tensor<100000000xf32>) outs(%[[X]] : tensor<100000000xf32>)
// CHECK: ^bb0(%[[IN:.*]]: f32, %{{.*}}: f32):
// CHECK: arith.divf %[[IN]], %[[TWO]] : f32
// CHECK: linalg.generic {{.*}} ins(%[[Y]], %[[C]] : tensor<4xf32>, tensor<4xf32>)
#map = affine_map<(d0) -> (d0)>
func.func @divide(%x: tensor<100000000xf32>, %y: tensor<4xf32>) -> (tensor<100000000xf32>, tensor<4xf32>) {
  %n = arith.constant dense<2.0> : tensor<100000000xf32>
  %r = linalg.generic {indexing_maps = [#map, #map, #map], iterator_types = ["parallel"]}
      ins(%x, %n : tensor<100000000xf32>, tensor<100000000xf32>) outs(%x : tensor<100000000xf32>) {
  ^bb0(%a: f32, %b: f32, %o: f32):
    %d = arith.divf %a, %b : f32
    linalg.yield %d : f32
  } -> tensor<100000000xf32>
  %c = arith.constant dense<[1.0, 2.0, 3.0, 4.0]> : tensor<4xf32>
  %s = linalg.generic {indexing_maps = [#map, #map, #map], iterator_types = ["parallel"]}
      ins(%y, %c : tensor<4xf32>, tensor<4xf32>) outs(%y : tensor<4xf32>) {
  ^bb0(%a: f32, %b: f32, %o: f32):
    %d = arith.mulf %a, %b : f32
    linalg.yield %d : f32
  } -> tensor<4xf32>
  return %r, %s : tensor<100000000xf32>, tensor<4xf32>
}
