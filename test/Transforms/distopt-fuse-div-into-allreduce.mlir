// RUN: distopt-opt %s -split-input-file --distopt-fuse-div-into-allreduce | FileCheck %s
// RUN: distopt-opt %s -split-input-file --distopt-fuse-div-into-allreduce=backend=mpi | FileCheck %s
// RUN: distopt-opt %s -split-input-file --distopt-fuse-div-into-allreduce=backend=sum-only | FileCheck %s --check-prefix=SUMONLY
// RUN: not distopt-opt %s -split-input-file --distopt-fuse-div-into-allreduce=backend=gloo 2>&1 | FileCheck %s --check-prefix=BACKEND

// BACKEND: for the --backend option: 'gloo' is not one of: nccl, mpi, sum-only

distopt.process_group @dp size 4

// CHECK-LABEL: func.func @post_divf
// CHECK-SAME: (%[[G:.*]]: tensor<8xf32>)
// CHECK-NEXT: %[[R:.*]] = distopt.all_reduce avg %[[G]] on @dp : tensor<8xf32>
// CHECK-NEXT: return %[[R]]
// SUMONLY-LABEL: func.func @post_divf
// SUMONLY: distopt.all_reduce sum
// SUMONLY: arith.divf
func.func @post_divf(%g: tensor<8xf32>) -> tensor<8xf32> {
  %s = distopt.all_reduce sum %g on @dp : tensor<8xf32>
  %n = arith.constant dense<4.0> : tensor<8xf32>
  %r = arith.divf %s, %n : tensor<8xf32>
  return %r : tensor<8xf32>
}

// CHECK-LABEL: func.func @post_mulf_commuted
// CHECK-NEXT: %[[R:.*]] = distopt.all_reduce avg
// CHECK-NEXT: return %[[R]]
func.func @post_mulf_commuted(%g: tensor<8xf32>) -> tensor<8xf32> {
  %s = distopt.all_reduce sum %g on @dp : tensor<8xf32>
  %n = arith.constant dense<0.25> : tensor<8xf32>
  %r = arith.mulf %n, %s : tensor<8xf32>
  return %r : tensor<8xf32>
}

// CHECK-LABEL: func.func @pre_divf
// CHECK-SAME: (%[[G:.*]]: tensor<8xf32>)
// CHECK-NEXT: %[[R:.*]] = distopt.all_reduce avg %[[G]] on @dp
// CHECK-NEXT: return %[[R]]
func.func @pre_divf(%g: tensor<8xf32>) -> tensor<8xf32> {
  %n = arith.constant dense<4.0> : tensor<8xf32>
  %d = arith.divf %g, %n : tensor<8xf32>
  %r = distopt.all_reduce sum %d on @dp : tensor<8xf32>
  return %r : tensor<8xf32>
}

// The pre-scaled value is also used elsewhere: it stays for that use only.
// CHECK-LABEL: func.func @pre_divf_shared
// CHECK-SAME: (%[[G:.*]]: tensor<8xf32>)
// CHECK: %[[D:.*]] = arith.divf %[[G]]
// CHECK: %[[R:.*]] = distopt.all_reduce avg %[[G]] on @dp
// CHECK: return %[[R]], %[[D]]
func.func @pre_divf_shared(%g: tensor<8xf32>) -> (tensor<8xf32>, tensor<8xf32>) {
  %n = arith.constant dense<4.0> : tensor<8xf32>
  %d = arith.divf %g, %n : tensor<8xf32>
  %r = distopt.all_reduce sum %d on @dp : tensor<8xf32>
  return %r, %d : tensor<8xf32>, tensor<8xf32>
}

// Not 1/N: a pre-multiplied sum with that factor.
// CHECK-LABEL: func.func @other_factor
// CHECK-NEXT: %[[R:.*]] = distopt.all_reduce premul_sum(5.000000e-01) %{{.*}} on @dp
// CHECK-NEXT: return %[[R]]
func.func @other_factor(%g: tensor<8xf32>) -> tensor<8xf32> {
  %s = distopt.all_reduce sum %g on @dp : tensor<8xf32>
  %n = arith.constant dense<2.0> : tensor<8xf32>
  %r = arith.divf %s, %n : tensor<8xf32>
  return %r : tensor<8xf32>
}

// CHECK-LABEL: func.func @bf16
// CHECK-NEXT: distopt.all_reduce avg %{{.*}} on @dp : tensor<8xbf16>
func.func @bf16(%g: tensor<8xbf16>) -> tensor<8xbf16> {
  %s = distopt.all_reduce sum %g on @dp : tensor<8xbf16>
  %n = arith.constant dense<4.0> : tensor<8xbf16>
  %r = arith.divf %s, %n : tensor<8xbf16>
  return %r : tensor<8xbf16>
}

// linalg form, divisor from linalg.fill.
// CHECK-LABEL: func.func @linalg_div
// CHECK-NOT: linalg.div
// CHECK: %[[R:.*]] = distopt.all_reduce avg
// CHECK-NOT: linalg.div
// CHECK: return %[[R]]
func.func @linalg_div(%g: tensor<8xf32>) -> tensor<8xf32> {
  %s = distopt.all_reduce sum %g on @dp : tensor<8xf32>
  %c = arith.constant 4.0 : f32
  %e = tensor.empty() : tensor<8xf32>
  %n = linalg.fill ins(%c : f32) outs(%e : tensor<8xf32>) -> tensor<8xf32>
  %r = linalg.div ins(%s, %n : tensor<8xf32>, tensor<8xf32>) outs(%e : tensor<8xf32>) -> tensor<8xf32>
  return %r : tensor<8xf32>
}

// CHECK-LABEL: func.func @linalg_mul_splat
// CHECK: %[[R:.*]] = distopt.all_reduce avg
// CHECK-NOT: linalg.mul
// CHECK: return %[[R]]
func.func @linalg_mul_splat(%g: tensor<8xf32>) -> tensor<8xf32> {
  %s = distopt.all_reduce sum %g on @dp : tensor<8xf32>
  %n = arith.constant dense<0.25> : tensor<8xf32>
  %e = tensor.empty() : tensor<8xf32>
  %r = linalg.mul ins(%n, %s : tensor<8xf32>, tensor<8xf32>) outs(%e : tensor<8xf32>) -> tensor<8xf32>
  return %r : tensor<8xf32>
}

// CHECK-LABEL: func.func @reduce_scatter
// CHECK-NEXT: %[[R:.*]] = distopt.reduce_scatter avg
// CHECK-NEXT: return %[[R]]
func.func @reduce_scatter(%g: tensor<8xf32>) -> tensor<2xf32> {
  %s = distopt.reduce_scatter sum %g on @dp : tensor<8xf32> -> tensor<2xf32>
  %n = arith.constant dense<4.0> : tensor<2xf32>
  %r = arith.divf %s, %n : tensor<2xf32>
  return %r : tensor<2xf32>
}

// -----

distopt.process_group @dp8 size 8
distopt.process_group @dp2 size 2

// f16: the 1/8 is split so that the sum cannot overflow: 1/4 before, /2 after.
// CHECK-LABEL: func.func @f16_split
// CHECK-SAME: (%[[G:.*]]: tensor<8xf16>)
// CHECK: %[[R:.*]] = distopt.all_reduce premul_sum(2.500000e-01) %[[G]] on @dp8 : tensor<8xf16>
// CHECK: %[[TWO:.*]] = arith.constant dense<2.000000e+00> : tensor<8xf16>
// CHECK: %[[D:.*]] = arith.divf %[[R]], %[[TWO]]
// CHECK: return %[[D]]
func.func @f16_split(%g: tensor<8xf16>) -> tensor<8xf16> {
  %s = distopt.all_reduce sum %g on @dp8 : tensor<8xf16>
  %n = arith.constant dense<8.0> : tensor<8xf16>
  %r = arith.divf %s, %n : tensor<8xf16>
  return %r : tensor<8xf16>
}

// The same split when the scaling came before the reduction.
// CHECK-LABEL: func.func @f16_split_pre
// CHECK-SAME: (%[[G:.*]]: tensor<8xf16>)
// CHECK: %[[R:.*]] = distopt.all_reduce premul_sum(2.500000e-01) %[[G]] on @dp8
// CHECK: %[[D:.*]] = arith.divf %[[R]], %{{.*}}
// CHECK: return %[[D]]
func.func @f16_split_pre(%g: tensor<8xf16>) -> tensor<8xf16> {
  %n = arith.constant dense<0.125> : tensor<8xf16>
  %d = arith.mulf %g, %n : tensor<8xf16>
  %r = distopt.all_reduce sum %d on @dp8 : tensor<8xf16>
  return %r : tensor<8xf16>
}

// On 2 ranks the whole 1/2 goes before the reduction.
// CHECK-LABEL: func.func @f16_two_ranks
// CHECK-NEXT: %[[R:.*]] = distopt.all_reduce premul_sum(5.000000e-01) %{{.*}} on @dp2
// CHECK-NEXT: return %[[R]]
func.func @f16_two_ranks(%g: tensor<8xf16>) -> tensor<8xf16> {
  %s = distopt.all_reduce sum %g on @dp2 : tensor<8xf16>
  %n = arith.constant dense<2.0> : tensor<8xf16>
  %r = arith.divf %s, %n : tensor<8xf16>
  return %r : tensor<8xf16>
}

// -----

distopt.process_group @dp size 4

// Left alone: a sum whose result has another use (fusing would change it).
// CHECK-LABEL: func.func @two_uses
// CHECK: distopt.all_reduce sum
// CHECK: arith.divf
func.func @two_uses(%g: tensor<8xf32>) -> (tensor<8xf32>, tensor<8xf32>) {
  %s = distopt.all_reduce sum %g on @dp : tensor<8xf32>
  %n = arith.constant dense<4.0> : tensor<8xf32>
  %r = arith.divf %s, %n : tensor<8xf32>
  return %r, %s : tensor<8xf32>, tensor<8xf32>
}

// Left alone: a divisor that is not a splat, or not a constant.
// CHECK-LABEL: func.func @not_splat
// CHECK: distopt.all_reduce sum
// CHECK: arith.divf
func.func @not_splat(%g: tensor<2xf32>) -> tensor<2xf32> {
  %s = distopt.all_reduce sum %g on @dp : tensor<2xf32>
  %n = arith.constant dense<[4.0, 2.0]> : tensor<2xf32>
  %r = arith.divf %s, %n : tensor<2xf32>
  return %r : tensor<2xf32>
}

// CHECK-LABEL: func.func @not_constant
// CHECK: distopt.all_reduce sum
// CHECK: arith.divf
func.func @not_constant(%g: tensor<8xf32>, %n: tensor<8xf32>) -> tensor<8xf32> {
  %s = distopt.all_reduce sum %g on @dp : tensor<8xf32>
  %r = arith.divf %s, %n : tensor<8xf32>
  return %r : tensor<8xf32>
}

// Left alone: a divisor on the left (n / sum is not a scaling of the sum).
// CHECK-LABEL: func.func @divisor_on_the_left
// CHECK: distopt.all_reduce sum
// CHECK: arith.divf
func.func @divisor_on_the_left(%g: tensor<8xf32>) -> tensor<8xf32> {
  %s = distopt.all_reduce sum %g on @dp : tensor<8xf32>
  %n = arith.constant dense<4.0> : tensor<8xf32>
  %r = arith.divf %n, %s : tensor<8xf32>
  return %r : tensor<8xf32>
}

// Left alone: an average is already scaled (dividing again is the user's
// business), and a factor that f16 cannot represent.
// CHECK-LABEL: func.func @already_avg
// CHECK: distopt.all_reduce avg
// CHECK: arith.divf
func.func @already_avg(%g: tensor<8xf32>) -> tensor<8xf32> {
  %s = distopt.all_reduce avg %g on @dp : tensor<8xf32>
  %n = arith.constant dense<4.0> : tensor<8xf32>
  %r = arith.divf %s, %n : tensor<8xf32>
  return %r : tensor<8xf32>
}

// CHECK-LABEL: func.func @unrepresentable
// CHECK: distopt.all_reduce sum
// CHECK: arith.mulf
func.func @unrepresentable(%g: tensor<8xf16>) -> tensor<8xf16> {
  %s = distopt.all_reduce sum %g on @dp : tensor<8xf16>
  %n = arith.constant dense<1.0e-8> : tensor<8xf16>
  %r = arith.mulf %s, %n : tensor<8xf16>
  return %r : tensor<8xf16>
}

// Left alone: integers.
// CHECK-LABEL: func.func @integers
// CHECK: distopt.all_reduce sum
// CHECK: arith.divsi
func.func @integers(%g: tensor<8xi32>) -> tensor<8xi32> {
  %s = distopt.all_reduce sum %g on @dp : tensor<8xi32>
  %n = arith.constant dense<4> : tensor<8xi32>
  %r = arith.divsi %s, %n : tensor<8xi32>
  return %r : tensor<8xi32>
}
