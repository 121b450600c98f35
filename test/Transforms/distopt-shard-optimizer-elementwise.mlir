// Element-wise ops on a gradient's way (StepStructure's list: conversions,
// distopt.unscale) are applied to each rank's part as they come, in any
// order: here the unscale in the reduction's bf16, then the conversion to
// the parameter's f32.
// RUN: distopt-opt %s --distopt-shard-optimizer=stage=2 --distopt-verify-collectives | FileCheck %s
// RUN: distopt-opt %s --distopt-shard-optimizer="stage=2 strategy=greedy" --distopt-verify-collectives \
// RUN:   | FileCheck %s --check-prefix=GREEDY

distopt.process_group @dp size 2

// CHECK-LABEL: func.func @unscaled_then_converted
// CHECK-SAME: %[[P:[^:]*]]: tensor<6xf32>
// CHECK-SAME: %[[G:[^:]*]]: tensor<6xbf16>
// CHECK-SAME: %[[S:[^:]*]]: f32
// CHECK: %[[B:.*]] = distopt.bucket_pack %[[G]]
// CHECK: %[[R:.*]] = distopt.reduce_scatter avg %[[B]] on @dp : tensor<32xbf16> -> tensor<16xbf16>
// CHECK-NEXT: %[[U:.*]] = distopt.unscale %[[R]] by %[[S]] : tensor<16xbf16>, f32
// CHECK-NEXT: %[[E:.*]] = arith.extf %[[U]] : tensor<16xbf16> to tensor<16xf32>
// CHECK: distopt.sgd_update %{{.*}}, %[[E]] lr
// CHECK-NOT: distopt.unscale
// GREEDY-LABEL: func.func @unscaled_then_converted
// GREEDY: distopt.reduce avg
// GREEDY: %[[U:.*]] = distopt.unscale %{{.*}} : tensor<6xbf16>, f32
// GREEDY-NEXT: %[[E:.*]] = arith.extf %[[U]] : tensor<6xbf16> to tensor<6xf32>
// GREEDY: tensor.extract_slice %[[E]]
// GREEDY-NOT: distopt.unscale
func.func @unscaled_then_converted(%p: tensor<6xf32> {distopt.role = "param", distopt.name = "p"},
                                   %g: tensor<6xbf16> {distopt.role = "grad", distopt.name = "p"},
                                   %s: f32, %lr: f32, %t: i64) -> tensor<6xf32> {
  %r = distopt.all_reduce avg %g on @dp : tensor<6xbf16>
  %u = distopt.unscale %r by %s : tensor<6xbf16>, f32
  %e = arith.extf %u : tensor<6xbf16> to tensor<6xf32>
  %p1 = distopt.sgd_update %p, %e lr(%lr) step(%t) : tensor<6xf32>, f32
  return %p1 : tensor<6xf32>
}
