// RUN: distopt-opt %s --distopt-lower-to-cpu \
// RUN:   --mlir-print-ir-after=distopt-fuse-elementwise-producers -o /dev/null 2>&1 | FileCheck %s

// A ZeRO-2 step with gradient accumulation, loss scaling and clipping
// (the output of --distopt-pipeline=zero-stage=2 on a spec with
// grad_accumulation 4 at 3 ranks): the reduced gradient shard is divided
// by K, unscaled and clipped, read by the norm and by the update. Neither
// the division nor the unscale is a pass over memory of its own: the norm
// and the update each read the shard the reduce-scatter wrote, and divide
// and unscale in their own loops.
// CHECK-LABEL: func.func @step(
// CHECK:       %[[SHARD:.*]] = distopt.wait %{{.*}} : !distopt.token<tensor<48xf32>>
// CHECK-NOT:   ins(%[[SHARD]] : tensor<48xf32>) outs(%{{[^,]*}} : tensor<48xf32>)
// CHECK:       %[[PART:.*]] = tensor.extract_slice %[[SHARD]]
// CHECK:       linalg.generic {{.*}} ins(%[[PART]] : tensor<?xf32>) outs(%{{.*}} : tensor<f64>)
// CHECK-NEXT:  ^bb0(%[[G:.*]]: f32, %{{.*}}: f64):
// CHECK-NEXT:    arith.divf %[[G]], %{{.*}} : f32
// CHECK:       linalg.generic {{.*}} ins(%[[SHARD]] : tensor<48xf32>) outs(%{{.*}}, %{{.*}}, %{{.*}} : tensor<48xf32>, tensor<48xf32>, tensor<48xf32>)
// CHECK-NEXT:  ^bb0(%[[U:.*]]: f32, %{{.*}}: f32, %{{.*}}: f32, %{{.*}}: f32):
// CHECK-NEXT:    %[[MEAN:.*]] = arith.divf %[[U]], %{{.*}} : f32
// CHECK-NEXT:    arith.mulf %[[MEAN]], %{{.*}} : f32
module attributes {distopt.grad_accumulation = 4 : i64, distopt.world_size = 3 : i64} {
  distopt.process_group @world size 3
  func.func @step(
      %p: tensor<40x3xf32> {distopt.name = "w", distopt.role = "param"},
      %g: tensor<40x3xf32> {distopt.name = "w", distopt.role = "grad"},
      %acc: tensor<40x3xf32> {distopt.name = "w", distopt.role = "grad_accum"},
      %scale: f32 {distopt.name = "loss_scale", distopt.role = "state", distopt.value = 6.553600e+04 : f64},
      %tracker: i64 {distopt.name = "loss_scale_growth_tracker", distopt.role = "state"},
      %lr: f64 {distopt.role = "lr"}, %step: i64 {distopt.role = "step"},
      %m: tensor<48xf32> {distopt.layout = [{name = "w", offset = 0 : i64, shape = array<i64: 40, 3>}], distopt.name = "flat0.exp_avg", distopt.role = "state", distopt.shard_of = 144 : i64},
      %v: tensor<48xf32> {distopt.layout = [{name = "w", offset = 0 : i64, shape = array<i64: 40, 3>}], distopt.name = "flat0.exp_avg_sq", distopt.role = "state", distopt.shard_of = 144 : i64})
      -> (tensor<40x3xf32> {distopt.name = "w", distopt.role = "param"},
          f32 {distopt.name = "loss_scale", distopt.role = "state"},
          i64 {distopt.name = "loss_scale_growth_tracker", distopt.role = "state"},
          f32 {distopt.name = "grad_norm"},
          i1 {distopt.name = "skipped", distopt.role = "skipped"},
          tensor<48xf32> {distopt.layout = [{name = "w", offset = 0 : i64, shape = array<i64: 40, 3>}], distopt.name = "flat0.exp_avg", distopt.role = "state", distopt.shard_of = 144 : i64},
          tensor<48xf32> {distopt.layout = [{name = "w", offset = 0 : i64, shape = array<i64: 40, 3>}], distopt.name = "flat0.exp_avg_sq", distopt.role = "state", distopt.shard_of = 144 : i64}) {
    %true = arith.constant true
    %sum = arith.addf %acc, %g : tensor<40x3xf32>
    %packed = distopt.bucket_pack %sum : tensor<40x3xf32> -> tensor<144xf32>
    %token = distopt.reduce_scatter_start avg %packed on @world : tensor<144xf32> -> !distopt.token<tensor<48xf32>>
    %params = distopt.bucket_pack %p : tensor<40x3xf32> -> tensor<144xf32>
    %own = distopt.shard_slice %params on @world : tensor<144xf32> -> tensor<48xf32>
    %shard = distopt.wait %token : !distopt.token<tensor<48xf32>>
    %ok = distopt.all_finite %shard on @world : tensor<48xf32>
    %k = arith.constant dense<4.000000e+00> : tensor<48xf32>
    %mean = arith.divf %shard, %k : tensor<48xf32>
    %unscaled = distopt.unscale %mean by %scale : tensor<48xf32>, f32
    %clipped, %norm = distopt.clip_grad_norm %unscaled max_norm 1.000000e+00 on @world {tensor_bounds = [array<i64: 0, 120>]} : tensor<48xf32> -> f32
    %np, %ns:2 = distopt.adamw_update %own, %clipped state(%m, %v) lr(%lr) step(%step) {weight_decay = 1.000000e-01 : f64} : tensor<48xf32>, f64
    %nm = arith.select %ok, %ns#0, %m : tensor<48xf32>
    %nv = arith.select %ok, %ns#1, %v : tensor<48xf32>
    %kept = arith.select %ok, %np, %own : tensor<48xf32>
    %gathered = distopt.all_gather %kept on @world : tensor<48xf32> -> tensor<144xf32>
    %newp = distopt.bucket_unpack %gathered : tensor<144xf32> -> tensor<40x3xf32>
    %ns_, %nt = distopt.loss_scale_update %scale, %tracker, %ok {growth_interval = 4 : i64} : f32, i64
    %skipped = arith.xori %ok, %true : i1
    return %newp, %ns_, %nt, %norm, %skipped, %nm, %nv : tensor<40x3xf32>, f32, i64, f32, i1, tensor<48xf32>, tensor<48xf32>
  }
}
