// RUN: distopt-opt %s -split-input-file --distopt-param-as-bucket-view | FileCheck %s
// Idempotent: a second run finds no pack of parameter arguments.
// RUN: distopt-opt %s -split-input-file --distopt-param-as-bucket-view --distopt-param-as-bucket-view | FileCheck %s
// Lowered, the ZeRO-2 step updates the flat parameter where it lies and
// gathers straight into it: the parameter result stays in its argument.
// RUN: distopt-opt %s -split-input-file --distopt-param-as-bucket-view --distopt-lower-to-cpu | FileCheck %s --check-prefix=LOWERED

distopt.process_group @dp size 2

// ZeRO-2, flat: the parameters packed for this rank's shard become one flat
// argument in the first parameter's place, with the pack's layout; the
// gathered buffer is returned as it, and the unpack goes.
// CHECK-LABEL: func.func @zero2
// CHECK-SAME: (%[[FLAT:[^:]*]]: tensor<64xf32> {distopt.layout = [{name = "w", offset = 0 : i64, shape = array<i64: 8, 4>}, {name = "b", offset = 32 : i64, shape = array<i64: 5>}], distopt.name = "flat_param0", distopt.role = "param"},
// CHECK-SAME: -> (tensor<64xf32> {distopt.layout = [{name = "w", offset = 0 : i64, shape = array<i64: 8, 4>}, {name = "b", offset = 32 : i64, shape = array<i64: 5>}], distopt.name = "flat_param0", distopt.role = "param"},
// CHECK-NOT: distopt.bucket_pack
// CHECK: %[[MINE:.*]] = distopt.shard_slice %[[FLAT]] on @dp : tensor<64xf32> -> tensor<32xf32>
// CHECK: %[[NEW:.*]], %{{.*}}:2 = distopt.adamw_update %[[MINE]]
// CHECK: %[[ALL:.*]] = distopt.all_gather %[[NEW]]
// CHECK-NOT: distopt.bucket_unpack
// CHECK: return %[[ALL]], %{{.*}}, %{{.*}} : tensor<64xf32>, tensor<32xf32>, tensor<32xf32>
// LOWERED-LABEL: llvm.func @zero2
// LOWERED-SAME: distopt.in_place_results = array<i64: 0, 2, 3>
func.func @zero2(%w: tensor<8x4xf32> {distopt.name = "w", distopt.role = "param"},
                 %b: tensor<5xf32> {distopt.name = "b", distopt.role = "param"},
                 %grads: tensor<64xf32> {distopt.name = "bucket0", distopt.role = "grad"},
                 %m: tensor<32xf32> {distopt.name = "flat0.exp_avg", distopt.role = "state"},
                 %v: tensor<32xf32> {distopt.name = "flat0.exp_avg_sq", distopt.role = "state"},
                 %lr: f32 {distopt.role = "lr"}, %t: i64 {distopt.role = "step"})
    -> (tensor<8x4xf32> {distopt.name = "w", distopt.role = "param"},
        tensor<5xf32> {distopt.name = "b", distopt.role = "param"},
        tensor<32xf32> {distopt.name = "flat0.exp_avg", distopt.role = "state"},
        tensor<32xf32> {distopt.name = "flat0.exp_avg_sq", distopt.role = "state"}) {
  %g = distopt.reduce_scatter avg %grads on @dp : tensor<64xf32> -> tensor<32xf32>
  %params = distopt.bucket_pack %w, %b : tensor<8x4xf32>, tensor<5xf32> -> tensor<64xf32>
  %mine = distopt.shard_slice %params on @dp : tensor<64xf32> -> tensor<32xf32>
  %new, %m1, %v1 = distopt.adamw_update %mine, %g state(%m, %v) lr(%lr) step(%t) : tensor<32xf32>, f32
  %all = distopt.all_gather %new on @dp : tensor<32xf32> -> tensor<64xf32>
  %w1, %b1 = distopt.bucket_unpack %all : tensor<64xf32> -> tensor<8x4xf32>, tensor<5xf32>
  return %w1, %b1, %m1, %v1 : tensor<8x4xf32>, tensor<5xf32>, tensor<32xf32>, tensor<32xf32>
}

// -----

distopt.process_group @dp size 2

// Left alone: a pack of gradients (--distopt-grad-as-bucket-view's), of
// main parameters, of a parameter and a gradient, and of parameters of which
// only some are returned.
// CHECK-LABEL: func.func @left_alone
// CHECK-COUNT-4: distopt.bucket_pack
// CHECK-NOT: flat_param0
func.func @left_alone(%w: tensor<16xf32> {distopt.name = "w", distopt.role = "param"},
                      %gw: tensor<16xf32> {distopt.name = "w", distopt.role = "grad"},
                      %mw: tensor<16xf32> {distopt.name = "w", distopt.role = "main_param"},
                      %a: tensor<16xf32> {distopt.name = "a", distopt.role = "param"},
                      %b: tensor<16xf32> {distopt.name = "b", distopt.role = "param"})
    -> (tensor<32xf32>, tensor<32xf32>, tensor<32xf32>, tensor<32xf32>,
        tensor<16xf32> {distopt.name = "a", distopt.role = "param"}) {
  %grads = distopt.bucket_pack %gw, %gw : tensor<16xf32>, tensor<16xf32> -> tensor<32xf32>
  %main = distopt.bucket_pack %mw, %mw : tensor<16xf32>, tensor<16xf32> -> tensor<32xf32>
  %mixed = distopt.bucket_pack %w, %gw : tensor<16xf32>, tensor<16xf32> -> tensor<32xf32>
  %some = distopt.bucket_pack %a, %b : tensor<16xf32>, tensor<16xf32> -> tensor<32xf32>
  return %grads, %main, %mixed, %some, %a : tensor<32xf32>, tensor<32xf32>, tensor<32xf32>, tensor<32xf32>, tensor<16xf32>
}

// -----

distopt.process_group @dp size 2

// A parameter the step also reads elsewhere (here, a norm) reads it from the
// flat argument; returned values that are not one whole unpack are packed
// into the returned flat parameter.
// CHECK-LABEL: func.func @other_uses
// CHECK-SAME: (%[[FLAT:[^:]*]]: tensor<32xf32>
// CHECK-NEXT: %[[P:.*]]:2 = distopt.bucket_unpack %[[FLAT]] : tensor<32xf32> -> tensor<16xf32>, tensor<16xf32>
// CHECK: %[[SQ:.*]] = arith.mulf %[[P]]#0, %[[P]]#0 : tensor<16xf32>
// CHECK: %[[BACK:.*]] = distopt.bucket_pack %[[SQ]], %[[P]]#1 : tensor<16xf32>, tensor<16xf32> -> tensor<32xf32>
// CHECK: return %[[FLAT]], %[[BACK]] : tensor<32xf32>, tensor<32xf32>
func.func @other_uses(%a: tensor<16xf32> {distopt.name = "a", distopt.role = "param"},
                      %b: tensor<16xf32> {distopt.name = "b", distopt.role = "param"})
    -> (tensor<32xf32>, tensor<16xf32> {distopt.name = "a", distopt.role = "param"},
        tensor<16xf32> {distopt.name = "b", distopt.role = "param"}) {
  %sq = arith.mulf %a, %a : tensor<16xf32>
  %p = distopt.bucket_pack %a, %b : tensor<16xf32>, tensor<16xf32> -> tensor<32xf32>
  return %p, %sq, %b : tensor<32xf32>, tensor<16xf32>, tensor<16xf32>
}
