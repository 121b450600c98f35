// Dion's update: B = M + G, the four products (P^T = Q^T B^T as dot
// products along rows, R^T = P^T B, P R^T and P Q^T), the orthonormalization
// of P^T's rows as a loop whatever the rank (twice), the error feedback, the new
// factor and the parameter; a conv weight as the matrix of its first
// dimension's rows; bf16 parameters computed in f32; tensors with no
// elements lower as well, and the whole CPU lowering takes them.
// RUN: distopt-opt %s --distopt-lower-optimizers | FileCheck %s
// RUN: distopt-opt %s --distopt-lower-to-cpu -o /dev/null

// CHECK-LABEL: func.func @wide
// P^T = Q^T B^T: dot products along B's rows (the sum innermost).
// CHECK: iterator_types = ["parallel", "parallel", "reduction"]} ins({{.*}} : tensor<3x6xf32>, tensor<4x6xf32>) outs({{.*}} : tensor<3x4xf32>)
// Modified Gram-Schmidt over P^T's 3 rows, twice: a loop each, not 3 copies.
// CHECK: scf.for %{{.*}} = %c0{{.*}} to %c3{{.*}} step %c1{{.*}} iter_args(%{{.*}} = %{{.*}}) -> (tensor<3x4xf32>)
// CHECK: tensor.extract_slice {{.*}} [1, 4] [1, 1] : tensor<3x4xf32> to tensor<4xf32>
// CHECK: scf.yield
// CHECK: scf.for %{{.*}} = %c0{{.*}} to %c3{{.*}} step %c1{{.*}} iter_args(%{{.*}} = %{{.*}}) -> (tensor<3x4xf32>)
// CHECK: scf.yield
// R^T = P^T B.
// CHECK: iterator_types = ["parallel", "reduction", "parallel"]} ins({{.*}} : tensor<3x4xf32>, tensor<4x6xf32>) outs({{.*}} : tensor<3x6xf32>)
// P R^T.
// CHECK: iterator_types = ["parallel", "reduction", "parallel"]} ins({{.*}} : tensor<3x4xf32>, tensor<3x6xf32>) outs({{.*}} : tensor<4x6xf32>)
// The factor's row norms, in f64.
// CHECK: outs({{.*}} : tensor<3xf64>)
// P Q^T.
// CHECK: iterator_types = ["parallel", "reduction", "parallel"]} ins({{.*}} : tensor<3x4xf32>, tensor<3x6xf32>) outs({{.*}} : tensor<4x6xf32>)
// CHECK: return
func.func @wide(%p: tensor<4x6xf32>, %g: tensor<4x6xf32>, %m: tensor<4x6xf32>, %q: tensor<3x6xf32>, %lr: f32, %t: i64) -> (tensor<4x6xf32>, tensor<4x6xf32>, tensor<3x6xf32>) {
  %p1, %m1, %q1 = distopt.dion_update %p, %g state(%m, %q) lr(%lr) step(%t) {rank = 3} : tensor<4x6xf32> [tensor<4x6xf32>, tensor<3x6xf32>], f32
  return %p1, %m1, %q1 : tensor<4x6xf32>, tensor<4x6xf32>, tensor<3x6xf32>
}

// CHECK-LABEL: func.func @conv_bf16
// CHECK: tensor.collapse_shape {{.*}} {{\[\[}}0], [1, 2, 3]] : tensor<8x2x3x3xbf16> into tensor<8x18xbf16>
// The products in f32.
// CHECK: ins({{.*}} : tensor<2x18xf32>, tensor<8x18xf32>) outs({{.*}} : tensor<2x8xf32>)
// CHECK: tensor.expand_shape {{.*}} : tensor<8x18xbf16> into tensor<8x2x3x3xbf16>
func.func @conv_bf16(%p: tensor<8x2x3x3xbf16>, %g: tensor<8x2x3x3xbf16>, %m: tensor<8x2x3x3xbf16>, %q: tensor<2x18xbf16>, %lr: f32, %t: i64) -> (tensor<8x2x3x3xbf16>, tensor<8x2x3x3xbf16>, tensor<2x18xbf16>) {
  %p1, %m1, %q1 = distopt.dion_update %p, %g state(%m, %q) lr(%lr) step(%t) {rank_fraction = 0.25} : tensor<8x2x3x3xbf16> [tensor<8x2x3x3xbf16>, tensor<2x18xbf16>], f32
  return %p1, %m1, %q1 : tensor<8x2x3x3xbf16>, tensor<8x2x3x3xbf16>, tensor<2x18xbf16>
}

// Hyperparameters given at run time enter as the operands they are.
// CHECK-LABEL: func.func @runtime
// CHECK-SAME: %[[MU:[a-z0-9]+]]: f64
// CHECK: arith.subf %{{.*}}, %[[MU]] : f64
func.func @runtime(%p: tensor<4x4xf32>, %g: tensor<4x4xf32>, %m: tensor<4x4xf32>, %q: tensor<4x4xf32>, %lr: f32, %t: i64, %mu: f64) -> (tensor<4x4xf32>, tensor<4x4xf32>, tensor<4x4xf32>) {
  %p1, %m1, %q1 = distopt.dion_update %p, %g state(%m, %q) lr(%lr) step(%t) runtime(mu = %mu) : tensor<4x4xf32>, f32
  return %p1, %m1, %q1 : tensor<4x4xf32>, tensor<4x4xf32>, tensor<4x4xf32>
}

// The low-rank sync: P^T and R^T, made from this rank's own gradient and
// momentum, are averaged over the group as they are made (P^T before its
// orthonormalization); nothing else communicates.
// CHECK-LABEL: func.func @synced
// CHECK: %[[PT:.*]] = linalg.generic {{.*}} outs({{.*}} : tensor<3x4xf32>)
// CHECK: %[[P:.*]] = distopt.all_reduce avg %[[PT]] on @dp : tensor<3x4xf32>
// CHECK: scf.for %{{.*}} iter_args(%{{.*}} = %[[P]]) -> (tensor<3x4xf32>)
// CHECK: %[[RT:.*]] = linalg.generic {{.*}} outs({{.*}} : tensor<3x6xf32>)
// CHECK: distopt.all_reduce avg %[[RT]] on @dp : tensor<3x6xf32>
// CHECK-NOT: distopt.all_reduce
// CHECK: return
distopt.process_group @dp size 4
func.func @synced(%p: tensor<4x6xf32>, %g: tensor<4x6xf32>, %m: tensor<4x6xf32>, %q: tensor<3x6xf32>, %lr: f32, %t: i64) -> (tensor<4x6xf32>, tensor<4x6xf32>, tensor<3x6xf32>) {
  %p1, %m1, %q1 = distopt.dion_update %p, %g state(%m, %q) lr(%lr) step(%t) {rank = 3, group = @dp} : tensor<4x6xf32> [tensor<4x6xf32>, tensor<3x6xf32>], f32
  return %p1, %m1, %q1 : tensor<4x6xf32>, tensor<4x6xf32>, tensor<3x6xf32>
}

// A batch: both updates' P^T all-reduced in one collective (packed: 12 +
// 10 elements), then both R^T (18 + 10), each update's selects (a skipped
// step) after the batch.
// CHECK-LABEL: func.func @batched
// CHECK: distopt.all_reduce avg %{{.*}} on @dp : tensor<22xf32>
// CHECK-NOT: distopt.all_reduce
// CHECK: distopt.all_reduce avg %{{.*}} on @dp : tensor<28xf32>
// CHECK-NOT: distopt.all_reduce
// CHECK: arith.select %arg{{[0-9]+}}
// CHECK: return
func.func @batched(%p: tensor<4x6xf32>, %g: tensor<4x6xf32>, %m: tensor<4x6xf32>, %q: tensor<3x6xf32>,
                   %p2: tensor<5x5xf32>, %g2: tensor<5x5xf32>, %m2: tensor<5x5xf32>, %q2: tensor<2x5xf32>,
                   %ok: i1, %lr: f32, %t: i64) -> (tensor<4x6xf32>, tensor<4x6xf32>, tensor<3x6xf32>, tensor<5x5xf32>) {
  %p1, %m1, %q1 = distopt.dion_update %p, %g state(%m, %q) lr(%lr) step(%t) {rank = 3, group = @dp, batch = 0} : tensor<4x6xf32> [tensor<4x6xf32>, tensor<3x6xf32>], f32
  %kp = arith.select %ok, %p1, %p : tensor<4x6xf32>
  %p3, %m3, %q3 = distopt.dion_update %p2, %g2 state(%m2, %q2) lr(%lr) step(%t) {rank = 2, group = @dp, batch = 0} : tensor<5x5xf32> [tensor<5x5xf32>, tensor<2x5xf32>], f32
  return %kp, %m1, %q1, %p3 : tensor<4x6xf32>, tensor<4x6xf32>, tensor<3x6xf32>, tensor<5x5xf32>
}

// CHECK-LABEL: func.func @empty
func.func @empty(%p: tensor<0x5xf32>, %g: tensor<0x5xf32>, %m: tensor<0x5xf32>, %q: tensor<0x5xf32>,
                 %r: tensor<5x0x3xf32>, %h: tensor<5x0x3xf32>, %c: tensor<5x0x3xf32>, %f: tensor<0x0xf32>,
                 %lr: f32, %t: i64) -> (tensor<0x5xf32>, tensor<0x5xf32>, tensor<0x5xf32>, tensor<5x0x3xf32>, tensor<5x0x3xf32>, tensor<0x0xf32>) {
  %p1, %m1, %q1 = distopt.dion_update %p, %g state(%m, %q) lr(%lr) step(%t) : tensor<0x5xf32> [tensor<0x5xf32>, tensor<0x5xf32>], f32
  %r1, %c1, %f1 = distopt.dion_update %r, %h state(%c, %f) lr(%lr) step(%t) : tensor<5x0x3xf32> [tensor<5x0x3xf32>, tensor<0x0xf32>], f32
  return %p1, %m1, %q1, %r1, %c1, %f1 : tensor<0x5xf32>, tensor<0x5xf32>, tensor<0x5xf32>, tensor<5x0x3xf32>, tensor<5x0x3xf32>, tensor<0x0xf32>
}
