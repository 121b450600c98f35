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

// -----

distopt.process_group @dp size 2

// Mixed precision: the bf16 parameters are only written (the f32 main
// parameters hold their values), gathered and unpacked into the results. The
// unpacked buffer becomes their flat argument, and is returned as it is.
// CHECK-LABEL: func.func @written_only
// CHECK-SAME: (%{{[^:]*}}: tensor<64xbf16> {distopt.layout = [{name = "w", offset = 0 : i64, shape = array<i64: 8, 4>}, {name = "b", offset = 32 : i64, shape = array<i64: 5>}], distopt.name = "flat_param0", distopt.role = "param"},
// CHECK-SAME: -> (tensor<64xbf16> {distopt.layout = [{name = "w", offset = 0 : i64, shape = array<i64: 8, 4>}, {name = "b", offset = 32 : i64, shape = array<i64: 5>}], distopt.name = "flat_param0", distopt.role = "param"},
// CHECK: %[[ALL:.*]] = distopt.all_gather
// CHECK-NOT: distopt.bucket_unpack
// CHECK: return %[[ALL]], %{{.*}} : tensor<64xbf16>, tensor<32xf32>
// LOWERED-LABEL: llvm.func @written_only
// LOWERED-SAME: distopt.in_place_results = array<i64: 0, 1>
func.func @written_only(%w: tensor<8x4xbf16> {distopt.name = "w", distopt.role = "param"},
                        %b: tensor<5xbf16> {distopt.name = "b", distopt.role = "param"},
                        %main: tensor<32xf32> {distopt.name = "flat0.main_param", distopt.role = "main_param"},
                        %delta: tensor<32xf32>)
    -> (tensor<8x4xbf16> {distopt.name = "w", distopt.role = "param"},
        tensor<5xbf16> {distopt.name = "b", distopt.role = "param"},
        tensor<32xf32> {distopt.name = "flat0.main_param", distopt.role = "main_param"}) {
  %new = arith.addf %main, %delta : tensor<32xf32>
  %half = arith.truncf %new : tensor<32xf32> to tensor<32xbf16>
  %all = distopt.all_gather %half on @dp : tensor<32xbf16> -> tensor<64xbf16>
  %w1, %b1 = distopt.bucket_unpack %all : tensor<64xbf16> -> tensor<8x4xbf16>, tensor<5xbf16>
  return %w1, %b1, %new : tensor<8x4xbf16>, tensor<5xbf16>, tensor<32xf32>
}

// -----

distopt.process_group @dp size 2

// Left alone: an unpack whose parameters the step reads, one with an output
// used elsewhere too, and one with an output that is not a parameter.
// CHECK-LABEL: func.func @unpacked_left_alone
// CHECK-COUNT-3: distopt.bucket_unpack
// CHECK-NOT: flat_param0
func.func @unpacked_left_alone(%a: tensor<16xf32> {distopt.name = "a", distopt.role = "param"},
                               %b: tensor<16xf32> {distopt.name = "b", distopt.role = "param"},
                               %c: tensor<16xf32> {distopt.name = "c", distopt.role = "param"},
                               %x: tensor<32xf32>, %y: tensor<32xf32>, %z: tensor<32xf32>)
    -> (tensor<16xf32> {distopt.name = "a", distopt.role = "param"},
        tensor<16xf32> {distopt.name = "b", distopt.role = "param"},
        tensor<16xf32> {distopt.name = "c", distopt.role = "param"},
        tensor<16xf32>, tensor<16xf32>) {
  %read = arith.addf %a, %a : tensor<16xf32>
  %a1, %r1 = distopt.bucket_unpack %x : tensor<32xf32> -> tensor<16xf32>, tensor<16xf32>
  %b1, %b2 = distopt.bucket_unpack %y : tensor<32xf32> -> tensor<16xf32>, tensor<16xf32>
  %c1, %s1 = distopt.bucket_unpack %z : tensor<32xf32> -> tensor<16xf32>, tensor<16xf32>
  %twice = arith.addf %b1, %read : tensor<16xf32>
  return %a1, %b1, %c1, %twice, %s1 : tensor<16xf32>, tensor<16xf32>, tensor<16xf32>, tensor<16xf32>, tensor<16xf32>
}
