// Muon's update: one momentum loop, the Newton-Schulz products (X X^T, or
// X^T X for a tall matrix, without a transposed copy), one update loop; a
// conv weight as the matrix of its first dimension's rows; tensors with no
// elements (no rows, or no columns) lower as well, and the whole CPU
// lowering takes them.
// RUN: distopt-opt %s --distopt-lower-optimizers | FileCheck %s
// RUN: distopt-opt %s --distopt-lower-to-cpu -o /dev/null

// CHECK-LABEL: func.func @wide
// The momentum and the direction, one loop.
// CHECK: linalg.generic {{.*}} outs(%{{.*}}, %{{.*}} : tensor<4x6xf32>, tensor<4x6xf32>)
// One Newton-Schulz step: the 4x4 Gram matrix, its square, B X.
// CHECK: iterator_types = ["parallel", "parallel", "reduction"]} ins({{.*}} : tensor<4x6xf32>, tensor<4x6xf32>) outs({{.*}} : tensor<4x4xf32>)
// CHECK: iterator_types = ["parallel", "reduction", "parallel"]} ins({{.*}} : tensor<4x4xf32>, tensor<4x4xf32>) outs({{.*}} : tensor<4x4xf32>)
// CHECK: iterator_types = ["parallel", "reduction", "parallel"]} ins({{.*}} : tensor<4x4xf32>, tensor<4x6xf32>) outs({{.*}} : tensor<4x6xf32>)
// CHECK-NOT: reduction
// CHECK: return
func.func @wide(%p: tensor<4x6xf32>, %g: tensor<4x6xf32>, %b: tensor<4x6xf32>, %lr: f32, %t: i64) -> (tensor<4x6xf32>, tensor<4x6xf32>) {
  %p1, %b1 = distopt.muon_update %p, %g state(%b) lr(%lr) step(%t) {ns_steps = 1} : tensor<4x6xf32>, f32
  return %p1, %b1 : tensor<4x6xf32>, tensor<4x6xf32>
}

// CHECK-LABEL: func.func @tall
// X^T X: the sum over the rows, outermost.
// CHECK: iterator_types = ["reduction", "parallel", "parallel"]} ins({{.*}} : tensor<7x3xf32>, tensor<7x3xf32>) outs({{.*}} : tensor<3x3xf32>)
func.func @tall(%p: tensor<7x3xf32>, %g: tensor<7x3xf32>, %b: tensor<7x3xf32>, %lr: f32, %t: i64) -> (tensor<7x3xf32>, tensor<7x3xf32>) {
  %p1, %b1 = distopt.muon_update %p, %g state(%b) lr(%lr) step(%t) {ns_steps = 1} : tensor<7x3xf32>, f32
  return %p1, %b1 : tensor<7x3xf32>, tensor<7x3xf32>
}

// CHECK-LABEL: func.func @conv
// CHECK: tensor.collapse_shape {{.*}} {{\[\[}}0], [1, 2, 3]] : tensor<8x2x3x3xf32> into tensor<8x18xf32>
// CHECK: tensor.expand_shape {{.*}} : tensor<8x18xf32> into tensor<8x2x3x3xf32>
func.func @conv(%p: tensor<8x2x3x3xf32>, %g: tensor<8x2x3x3xf32>, %b: tensor<8x2x3x3xf32>, %lr: f32, %t: i64) -> (tensor<8x2x3x3xf32>, tensor<8x2x3x3xf32>) {
  %p1, %b1 = distopt.muon_update %p, %g state(%b) lr(%lr) step(%t) : tensor<8x2x3x3xf32>, f32
  return %p1, %b1 : tensor<8x2x3x3xf32>, tensor<8x2x3x3xf32>
}

// CHECK-LABEL: func.func @empty
// CHECK: tensor.collapse_shape {{.*}} : tensor<5x0x3xf32> into tensor<5x0xf32>
func.func @empty(%p: tensor<0x5xf32>, %g: tensor<0x5xf32>, %b: tensor<0x5xf32>,
                 %q: tensor<5x0x3xf32>, %h: tensor<5x0x3xf32>, %c: tensor<5x0x3xf32>,
                 %lr: f32, %t: i64) -> (tensor<0x5xf32>, tensor<0x5xf32>, tensor<5x0x3xf32>, tensor<5x0x3xf32>) {
  %p1, %b1 = distopt.muon_update %p, %g state(%b) lr(%lr) step(%t) : tensor<0x5xf32>, f32
  %q1, %c1 = distopt.muon_update %q, %h state(%c) lr(%lr) step(%t) : tensor<5x0x3xf32>, f32
  return %p1, %b1, %q1, %c1 : tensor<0x5xf32>, tensor<0x5xf32>, tensor<5x0x3xf32>, tensor<5x0x3xf32>
}
