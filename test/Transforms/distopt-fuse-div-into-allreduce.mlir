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

// -----

// Exact division at every size. The importer divides by a world size that
// the gradient's type cannot hold in f32 and rounds once (bf16 at 257 and
// 2049, f16 at 2049 and 2^20: ExactDivision.h); that division is the
// average. f16 is split against overflow where N has a power-of-two factor
// to pre-divide by (2^20 = 1024 x 1024, 4098 = 2 x 2049, the rest in f32);
// an odd N is not split (3, 2049).
distopt.process_group @w3 size 3
distopt.process_group @w6 size 6
distopt.process_group @w257 size 257
distopt.process_group @w2049 size 2049
distopt.process_group @w4098 size 4098
distopt.process_group @w2p20 size 1048576

// CHECK-LABEL: func.func @bf16_257
// CHECK-SAME: (%[[G:.*]]: tensor<8xbf16>)
// CHECK-NEXT: %[[R:.*]] = distopt.all_reduce avg %[[G]] on @w257 : tensor<8xbf16>
// CHECK-NEXT: return %[[R]]
func.func @bf16_257(%g: tensor<8xbf16>) -> tensor<8xbf16> {
  %s = distopt.all_reduce sum %g on @w257 : tensor<8xbf16>
  %e = arith.extf %s : tensor<8xbf16> to tensor<8xf32>
  %n = arith.constant dense<257.0> : tensor<8xf32>
  %d = arith.divf %e, %n : tensor<8xf32>
  %r = arith.truncf %d : tensor<8xf32> to tensor<8xbf16>
  return %r : tensor<8xbf16>
}

// The same division producing the input.
// CHECK-LABEL: func.func @bf16_2049_before
// CHECK-SAME: (%[[G:.*]]: tensor<8xbf16>)
// CHECK-NEXT: %[[R:.*]] = distopt.all_reduce avg %[[G]] on @w2049 : tensor<8xbf16>
// CHECK-NEXT: return %[[R]]
func.func @bf16_2049_before(%g: tensor<8xbf16>) -> tensor<8xbf16> {
  %e = arith.extf %g : tensor<8xbf16> to tensor<8xf32>
  %n = arith.constant dense<2049.0> : tensor<8xf32>
  %d = arith.divf %e, %n : tensor<8xf32>
  %r = arith.truncf %d : tensor<8xf32> to tensor<8xbf16>
  %s = distopt.all_reduce sum %r on @w2049 : tensor<8xbf16>
  return %s : tensor<8xbf16>
}

// CHECK-LABEL: func.func @f16_2049
// CHECK-NEXT: %[[R:.*]] = distopt.all_reduce avg %{{.*}} on @w2049 : tensor<8xf16>
// CHECK-NEXT: return %[[R]]
func.func @f16_2049(%g: tensor<8xf16>) -> tensor<8xf16> {
  %s = distopt.all_reduce sum %g on @w2049 : tensor<8xf16>
  %e = arith.extf %s : tensor<8xf16> to tensor<8xf32>
  %n = arith.constant dense<2049.0> : tensor<8xf32>
  %d = arith.divf %e, %n : tensor<8xf32>
  %r = arith.truncf %d : tensor<8xf32> to tensor<8xf16>
  return %r : tensor<8xf16>
}

// CHECK-LABEL: func.func @f16_2p20
// CHECK-NEXT: %[[R:.*]] = distopt.all_reduce premul_sum(9.765625E-4) %{{.*}} on @w2p20 : tensor<8xf16>
// CHECK-NEXT: %[[B:.*]] = arith.constant dense<1.024000e+03> : tensor<8xf16>
// CHECK-NEXT: %[[D:.*]] = arith.divf %[[R]], %[[B]] : tensor<8xf16>
// CHECK-NEXT: return %[[D]]
func.func @f16_2p20(%g: tensor<8xf16>) -> tensor<8xf16> {
  %s = distopt.all_reduce sum %g on @w2p20 : tensor<8xf16>
  %e = arith.extf %s : tensor<8xf16> to tensor<8xf32>
  %n = arith.constant dense<1048576.0> : tensor<8xf32>
  %d = arith.divf %e, %n : tensor<8xf32>
  %r = arith.truncf %d : tensor<8xf32> to tensor<8xf16>
  return %r : tensor<8xf16>
}

// 4098 = 2 x 2049: 1/2 before, / 2049 after, in f32.
// CHECK-LABEL: func.func @f16_4098
// CHECK-NEXT: %[[R:.*]] = distopt.all_reduce premul_sum(5.000000e-01) %{{.*}} on @w4098 : tensor<8xf16>
// CHECK-NEXT: %[[E:.*]] = arith.extf %[[R]] : tensor<8xf16> to tensor<8xf32>
// CHECK-NEXT: %[[B:.*]] = arith.constant dense<2.049000e+03> : tensor<8xf32>
// CHECK-NEXT: %[[D:.*]] = arith.divf %[[E]], %[[B]] : tensor<8xf32>
// CHECK-NEXT: %[[T:.*]] = arith.truncf %[[D]] : tensor<8xf32> to tensor<8xf16>
// CHECK-NEXT: return %[[T]]
func.func @f16_4098(%g: tensor<8xf16>) -> tensor<8xf16> {
  %s = distopt.all_reduce sum %g on @w4098 : tensor<8xf16>
  %e = arith.extf %s : tensor<8xf16> to tensor<8xf32>
  %n = arith.constant dense<4098.0> : tensor<8xf32>
  %d = arith.divf %e, %n : tensor<8xf32>
  %r = arith.truncf %d : tensor<8xf32> to tensor<8xf16>
  return %r : tensor<8xf16>
}

// An odd N has no power of two to pre-divide by: f16 on 3 ranks is an
// average (not premul_sum(1/2) alone, a mean 50% too large); on 6 ranks
// 1/2 before and / 3 after (not premul_sum(1/4) alone).
// CHECK-LABEL: func.func @f16_three
// CHECK-NEXT: %[[R:.*]] = distopt.all_reduce avg %{{.*}} on @w3 : tensor<8xf16>
// CHECK-NEXT: return %[[R]]
func.func @f16_three(%g: tensor<8xf16>) -> tensor<8xf16> {
  %s = distopt.all_reduce sum %g on @w3 : tensor<8xf16>
  %n = arith.constant dense<3.0> : tensor<8xf16>
  %r = arith.divf %s, %n : tensor<8xf16>
  return %r : tensor<8xf16>
}

// CHECK-LABEL: func.func @f16_six
// CHECK-NEXT: %[[R:.*]] = distopt.all_reduce premul_sum(5.000000e-01) %{{.*}} on @w6 : tensor<8xf16>
// CHECK-NEXT: %[[B:.*]] = arith.constant dense<3.000000e+00> : tensor<8xf16>
// CHECK-NEXT: %[[D:.*]] = arith.divf %[[R]], %[[B]] : tensor<8xf16>
// CHECK-NEXT: return %[[D]]
func.func @f16_six(%g: tensor<8xf16>) -> tensor<8xf16> {
  %s = distopt.all_reduce sum %g on @w6 : tensor<8xf16>
  %n = arith.constant dense<6.0> : tensor<8xf16>
  %r = arith.divf %s, %n : tensor<8xf16>
  return %r : tensor<8xf16>
}

// A multiplication by 1/3 rounded to bf16 (0.333984375) is that product,
// not the average: a premul_sum by exactly that factor.
// CHECK-LABEL: func.func @bf16_rounded_third
// CHECK-NEXT: %[[R:.*]] = distopt.all_reduce premul_sum(0.333984375) %{{.*}} on @w3 : tensor<8xbf16>
// CHECK-NEXT: return %[[R]]
func.func @bf16_rounded_third(%g: tensor<8xbf16>) -> tensor<8xbf16> {
  %s = distopt.all_reduce sum %g on @w3 : tensor<8xbf16>
  %n = arith.constant dense<0.333984375> : tensor<8xbf16>
  %r = arith.mulf %s, %n : tensor<8xbf16>
  return %r : tensor<8xbf16>
}

// -----

distopt.process_group @dp size 4
distopt.process_group @huge size 16777217

// Left alone: a division by 3 that is not the group size (1/3 is exact in
// no float type, so premul_sum(1/3) would scale by another number), a
// factor exact in f32 but not in the wire type, and a group size that f32,
// the type the runtime's avg divides f32 data in, cannot hold.
// CHECK-LABEL: func.func @inexact_reciprocal
// CHECK-NEXT: distopt.all_reduce sum
// CHECK-NEXT: arith.constant
// CHECK-NEXT: arith.divf
func.func @inexact_reciprocal(%g: tensor<8xf32>) -> tensor<8xf32> {
  %s = distopt.all_reduce sum %g on @dp : tensor<8xf32>
  %n = arith.constant dense<3.0> : tensor<8xf32>
  %r = arith.divf %s, %n : tensor<8xf32>
  return %r : tensor<8xf32>
}

// CHECK-LABEL: func.func @inexact_in_wire
// CHECK-NEXT: distopt.all_reduce sum %{{.*}} on @dp wire bf16
// CHECK-NEXT: arith.constant
// CHECK-NEXT: arith.mulf
func.func @inexact_in_wire(%g: tensor<8xf32>) -> tensor<8xf32> {
  %s = distopt.all_reduce sum %g on @dp wire bf16 : tensor<8xf32>
  %n = arith.constant dense<0.1> : tensor<8xf32>
  %r = arith.mulf %s, %n : tensor<8xf32>
  return %r : tensor<8xf32>
}

// CHECK-LABEL: func.func @size_beyond_f32
// CHECK-NEXT: distopt.all_reduce sum
// CHECK-NEXT: arith.extf
// CHECK-NEXT: arith.constant
// CHECK-NEXT: arith.divf
// CHECK-NEXT: arith.truncf
func.func @size_beyond_f32(%g: tensor<8xf32>) -> tensor<8xf32> {
  %s = distopt.all_reduce sum %g on @huge : tensor<8xf32>
  %e = arith.extf %s : tensor<8xf32> to tensor<8xf64>
  %n = arith.constant dense<16777217.0> : tensor<8xf64>
  %d = arith.divf %e, %n : tensor<8xf64>
  %r = arith.truncf %d : tensor<8xf64> to tensor<8xf32>
  return %r : tensor<8xf32>
}
