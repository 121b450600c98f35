// RUN: distopt-opt %s --distopt-lower-to-gpu | FileCheck %s

// The kernel updating a conv weight (64x64x3x3) indexes its buffers with
// the thread's one index: no integer division back into four indices (the
// loops are collapsed before they become a launch), 36864 / 256 blocks.
// CHECK-DAG: %[[BLOCKS:.*]] = llvm.mlir.constant(144 : index) : i64
// CHECK-DAG: %[[THREADS:.*]] = llvm.mlir.constant(256 : index) : i64
// CHECK: gpu.launch_func <%{{.*}} : !llvm.ptr> @step_kernel::@step_kernel blocks in (%[[BLOCKS]], %{{.*}}, %{{.*}}) threads in (%[[THREADS]],
// CHECK: gpu.binary @step_kernel
// CHECK-SAME: .entry step_kernel(
// CHECK-NOT: {{rem|div}}.{{[su]}}{{32|64}}
// CHECK-SAME: ld.global.b32
// CHECK-NOT: {{rem|div}}.{{[su]}}{{32|64}}
// CHECK-SAME: st.global.b32
// CHECK-NOT: {{rem|div}}.{{[su]}}{{32|64}}
// CHECK-SAME: ret;
module attributes {distopt.world_size = 1 : i64} {
  func.func @step(
      %p: tensor<64x64x3x3xf32> {distopt.name = "w", distopt.role = "param"},
      %g: tensor<64x64x3x3xf32> {distopt.name = "w", distopt.role = "grad"},
      %m: tensor<64x64x3x3xf32> {distopt.name = "w.exp_avg", distopt.role = "state"},
      %v: tensor<64x64x3x3xf32> {distopt.name = "w.exp_avg_sq", distopt.role = "state"},
      %lr: f32 {distopt.role = "lr"}, %step: i64 {distopt.role = "step"})
      -> (tensor<64x64x3x3xf32> {distopt.name = "w", distopt.role = "param"},
          tensor<64x64x3x3xf32> {distopt.name = "w.exp_avg", distopt.role = "state"},
          tensor<64x64x3x3xf32> {distopt.name = "w.exp_avg_sq", distopt.role = "state"}) {
    %np, %ns:2 = distopt.adamw_update %p, %g state(%m, %v) lr(%lr) step(%step)
        : tensor<64x64x3x3xf32>, f32
    return %np, %ns#0, %ns#1 : tensor<64x64x3x3xf32>, tensor<64x64x3x3xf32>, tensor<64x64x3x3xf32>
  }
}
