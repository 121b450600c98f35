// RUN: distopt-opt %s --distopt-lower-to-cpu | FileCheck %s

// An AdamW step updates its parameter and state buffers in place: the
// lowered step allocates and copies nothing and returns nothing (one
// malloc + memcpy per tensor per step made it 7x slower than this).
// CHECK-LABEL: llvm.func @step(
// CHECK-SAME: distopt.in_place_results = array<i64: 0, 2, 3>
// CHECK-NOT: llvm.call @malloc
// CHECK-NOT: memcpy
// CHECK: llvm.return{{$}}
module attributes {distopt.world_size = 1 : i64} {
  func.func @step(
      %p: tensor<1024xf32> {distopt.name = "w", distopt.role = "param"},
      %g: tensor<1024xf32> {distopt.name = "w", distopt.role = "grad"},
      %m: tensor<1024xf32> {distopt.name = "w.exp_avg", distopt.role = "state"},
      %v: tensor<1024xf32> {distopt.name = "w.exp_avg_sq", distopt.role = "state"},
      %lr: f32 {distopt.role = "lr"}, %step: i64 {distopt.role = "step"})
      -> (tensor<1024xf32> {distopt.name = "w", distopt.role = "param"},
          tensor<1024xf32> {distopt.name = "w.exp_avg", distopt.role = "state"},
          tensor<1024xf32> {distopt.name = "w.exp_avg_sq", distopt.role = "state"}) {
    %np, %ns:2 = distopt.adamw_update %p, %g state(%m, %v) lr(%lr) step(%step)
        : tensor<1024xf32>, f32
    return %np, %ns#0, %ns#1 : tensor<1024xf32>, tensor<1024xf32>, tensor<1024xf32>
  }
}
