// A plain parameter's new value, kept on the overflow check, also returned
// rounded to bf16 (a low-precision copy for the next forward pass): the
// rounding stays and reads the updated parameter every rank receives,
// gathered (flat, and Muon's gather plan) or broadcast (owners). It
// crashed the pass before, which erased the rounding as a main
// parameter's model copy while the return still used it.
// RUN: distopt-opt %s --split-input-file --distopt-shard-optimizer=stage=2 --distopt-verify-collectives | FileCheck %s --check-prefix=FLAT
// RUN: distopt-opt %s --split-input-file --distopt-shard-optimizer="stage=2 strategy=greedy" --distopt-verify-collectives | FileCheck %s --check-prefix=OWNERS
// RUN: distopt-opt %s --split-input-file --distopt-shard-optimizer="stage=2 matrix-plan=gather" --distopt-verify-collectives | FileCheck %s --check-prefix=GATHER

distopt.process_group @dp size 2
func.func @step(%w: tensor<4x4xf32> {distopt.name = "w", distopt.role = "param"},
                %gw: tensor<4x4xf32> {distopt.name = "w", distopt.role = "grad"},
                %mw: tensor<4x4xf32> {distopt.name = "w.momentum_buffer", distopt.role = "state"},
                %lr: f64 {distopt.role = "lr"}, %t: i64 {distopt.role = "step"})
    -> (tensor<4x4xf32> {distopt.name = "w", distopt.role = "param"},
        tensor<4x4xf32> {distopt.name = "w.momentum_buffer", distopt.role = "state"},
        tensor<4x4xbf16>) {
  %rw = distopt.all_reduce avg %gw on @dp : tensor<4x4xf32>
  %keep = distopt.all_finite %rw : tensor<4x4xf32>
  %w1, %mw1 = distopt.sgd_update %w, %rw state(%mw) lr(%lr) step(%t) {momentum = 0.9 : f64} : tensor<4x4xf32>, f64
  %w2 = arith.select %keep, %w1, %w : tensor<4x4xf32>
  %mw2 = arith.select %keep, %mw1, %mw : tensor<4x4xf32>
  %copy = arith.truncf %w2 : tensor<4x4xf32> to tensor<4x4xbf16>
  return %w2, %mw2, %copy : tensor<4x4xf32>, tensor<4x4xf32>, tensor<4x4xbf16>
}
// FLAT-LABEL: func.func @step
// FLAT: %[[ALL:.*]] = distopt.all_gather
// FLAT: %[[W:.*]] = distopt.bucket_unpack %[[ALL]]
// FLAT: %[[COPY:.*]] = arith.truncf %[[W]] : tensor<4x4xf32> to tensor<4x4xbf16>
// FLAT: return %[[W]], %[[COPY]]
// OWNERS-LABEL: func.func @step
// OWNERS: %[[W:.*]] = distopt.broadcast
// OWNERS: %[[COPY:.*]] = arith.truncf %[[W]] : tensor<4x4xf32> to tensor<4x4xbf16>
// OWNERS: return %[[W]], %[[COPY]]
// GATHER-LABEL: func.func @step
// GATHER: distopt.sgd_update

// -----

distopt.process_group @dp size 2
func.func @step(%w: tensor<4x4xf32> {distopt.name = "w", distopt.role = "param"},
                %gw: tensor<4x4xf32> {distopt.name = "w", distopt.role = "grad"},
                %mw: tensor<4x4xf32> {distopt.name = "w.momentum_buffer", distopt.role = "state"},
                %lr: f64 {distopt.role = "lr"}, %t: i64 {distopt.role = "step"})
    -> (tensor<4x4xf32> {distopt.name = "w", distopt.role = "param"},
        tensor<4x4xf32> {distopt.name = "w.momentum_buffer", distopt.role = "state"},
        tensor<4x4xbf16>) {
  %rw = distopt.all_reduce avg %gw on @dp : tensor<4x4xf32>
  %keep = distopt.all_finite %rw : tensor<4x4xf32>
  %w1, %mw1 = distopt.muon_update %w, %rw state(%mw) lr(%lr) step(%t) : tensor<4x4xf32>, f64
  %w2 = arith.select %keep, %w1, %w : tensor<4x4xf32>
  %mw2 = arith.select %keep, %mw1, %mw : tensor<4x4xf32>
  %copy = arith.truncf %w2 : tensor<4x4xf32> to tensor<4x4xbf16>
  return %w2, %mw2, %copy : tensor<4x4xf32>, tensor<4x4xf32>, tensor<4x4xbf16>
}
// OWNERS-LABEL: func.func @step
// OWNERS: %[[W:.*]] = distopt.broadcast
// OWNERS: %[[COPY:.*]] = arith.truncf %[[W]] : tensor<4x4xf32> to tensor<4x4xbf16>
// OWNERS: return %[[W]], %[[COPY]]
// GATHER-LABEL: func.func @step
// GATHER: %[[NEW:.*]], %{{.*}} = distopt.muon_update
// GATHER: %[[W:.*]] = arith.select %{{.*}}, %[[NEW]], %arg0
// GATHER: %[[COPY:.*]] = arith.truncf %[[W]] : tensor<4x4xf32> to tensor<4x4xbf16>
// GATHER: return %[[W]], %[[COPY]]
