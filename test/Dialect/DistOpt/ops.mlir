// Every op in its custom form. The printed module must be a fixed point, and
// the generic form and bytecode must read back to exactly the same text.
// RUN: distopt-opt %s | FileCheck %s
// RUN: distopt-opt %s > %t.custom && distopt-opt %t.custom > %t.again
// RUN: diff %t.custom %t.again
// RUN: distopt-opt %s --mlir-print-op-generic | distopt-opt > %t.generic
// RUN: diff %t.custom %t.generic
// RUN: distopt-opt %s -emit-bytecode | distopt-opt > %t.bytecode
// RUN: diff %t.custom %t.bytecode

// CHECK: distopt.process_group @dp size 4
distopt.process_group @dp size 4
// CHECK: distopt.process_group @single size 1
distopt.process_group @single size 1
// Sub-groups: over the axes of a mesh, or listed by rank.
// CHECK: distopt.mesh @cluster shape [2, 2]
distopt.mesh @cluster shape [2, 2]
// CHECK: distopt.process_group @intra size 2 over @cluster axes [1]
distopt.process_group @intra size 2 over @cluster axes [1]
// CHECK: distopt.process_group @transposed size 4 over @cluster axes [1, 0]
distopt.process_group @transposed size 4 over @cluster axes [1, 0]
// CHECK: distopt.process_group @pairs size 2 ranks dense<{{\[\[}}0, 3], [1, 2]]> : tensor<2x2xi64>
distopt.process_group @pairs size 2 ranks dense<[[0, 3], [1, 2]]> : tensor<2x2xi64>

// CHECK-LABEL: func.func @sub_group_collectives
func.func @sub_group_collectives(%g: tensor<8xf32>) -> (tensor<8xf32>, tensor<16xf32>, index) {
  // CHECK: distopt.all_reduce sum %{{.*}} on @intra
  %r = distopt.all_reduce sum %g on @intra : tensor<8xf32>
  // CHECK: distopt.all_gather %{{.*}} on @pairs
  %a = distopt.all_gather %r on @pairs : tensor<8xf32> -> tensor<16xf32>
  // CHECK: distopt.rank @intra
  %i = distopt.rank @intra : index
  return %r, %a, %i : tensor<8xf32>, tensor<16xf32>, index
}

// CHECK-LABEL: func.func @group_queries
func.func @group_queries() -> (index, index) {
  // CHECK: distopt.rank @dp : index
  %r = distopt.rank @dp : index
  // CHECK: distopt.group_size @dp : index
  %n = distopt.group_size @dp : index
  return %r, %n : index, index
}

// CHECK-LABEL: func.func @collectives
// CHECK-SAME: (%[[G:.*]]: tensor<1024xf32>, %[[I:.*]]: tensor<8x3xi32>)
func.func @collectives(%g: tensor<1024xf32>, %i: tensor<8x3xi32>) {
  // CHECK: distopt.all_reduce sum %[[G]] on @dp : tensor<1024xf32>
  %0 = distopt.all_reduce sum %g on @dp : tensor<1024xf32>
  // CHECK: distopt.all_reduce avg %[[G]] on @dp : tensor<1024xf32>
  %1 = distopt.all_reduce avg %g on @dp : tensor<1024xf32>
  // CHECK: distopt.all_reduce min %[[I]] on @dp : tensor<8x3xi32>
  %2 = distopt.all_reduce min %i on @dp : tensor<8x3xi32>
  // CHECK: distopt.all_reduce max %[[I]] on @dp : tensor<8x3xi32>
  %3 = distopt.all_reduce max %i on @dp : tensor<8x3xi32>
  // CHECK: distopt.all_reduce prod %[[G]] on @dp : tensor<1024xf32>
  %4 = distopt.all_reduce prod %g on @dp : tensor<1024xf32>
  // CHECK: distopt.all_reduce premul_sum(2.500000e-01) %[[G]] on @dp wire bf16 : tensor<1024xf32>
  %5 = distopt.all_reduce premul_sum(0.25) %g on @dp wire bf16 : tensor<1024xf32>
  // CHECK: distopt.reduce_scatter avg %[[G]] on @dp wire f16 : tensor<1024xf32> -> tensor<256xf32>
  %6 = distopt.reduce_scatter avg %g on @dp wire f16 : tensor<1024xf32> -> tensor<256xf32>
  // CHECK: distopt.reduce_scatter sum %[[I]] on @dp : tensor<8x3xi32> -> tensor<2x3xi32>
  %7 = distopt.reduce_scatter sum %i on @dp : tensor<8x3xi32> -> tensor<2x3xi32>
  // CHECK: distopt.all_gather %{{.*}} on @dp : tensor<256xf32> -> tensor<1024xf32>
  %8 = distopt.all_gather %6 on @dp : tensor<256xf32> -> tensor<1024xf32>
  // CHECK: distopt.broadcast %[[G]] on @dp root 3 : tensor<1024xf32>
  %9 = distopt.broadcast %g on @dp root 3 : tensor<1024xf32>
  // CHECK: distopt.reduce premul_sum(5.000000e-01) %[[G]] on @dp root 1 : tensor<1024xf32>
  %10 = distopt.reduce premul_sum(0.5) %g on @dp root 1 : tensor<1024xf32>
  return
}

// CHECK-LABEL: func.func @async_collectives
func.func @async_collectives(%g: tensor<1024xf32>) -> (tensor<1024xf32>, tensor<256xf32>, tensor<1024xf32>, tensor<1024xf32>, tensor<1024xf32>) {
  // CHECK: %[[T0:.*]] = distopt.all_reduce_start avg %{{.*}} on @dp : tensor<1024xf32> -> !distopt.token<tensor<1024xf32>>
  %t0 = distopt.all_reduce_start avg %g on @dp : tensor<1024xf32> -> !distopt.token<tensor<1024xf32>>
  // CHECK: distopt.reduce_scatter_start premul_sum(1.250000e-01) %{{.*}} on @dp wire bf16 : tensor<1024xf32> -> !distopt.token<tensor<256xf32>>
  %t1 = distopt.reduce_scatter_start premul_sum(0.125) %g on @dp wire bf16 : tensor<1024xf32> -> !distopt.token<tensor<256xf32>>
  // CHECK: distopt.all_gather_start %{{.*}} on @dp : tensor<256xf32> -> !distopt.token<tensor<1024xf32>>
  %s = distopt.wait %t1 : !distopt.token<tensor<256xf32>>
  %t2 = distopt.all_gather_start %s on @dp : tensor<256xf32> -> !distopt.token<tensor<1024xf32>>
  // CHECK: distopt.broadcast_start %{{.*}} on @dp root 2 : tensor<1024xf32> -> !distopt.token<tensor<1024xf32>>
  %t3 = distopt.broadcast_start %g on @dp root 2 : tensor<1024xf32> -> !distopt.token<tensor<1024xf32>>
  // CHECK: distopt.reduce_start max %{{.*}} on @dp root 0 : tensor<1024xf32> -> !distopt.token<tensor<1024xf32>>
  %t4 = distopt.reduce_start max %g on @dp root 0 : tensor<1024xf32> -> !distopt.token<tensor<1024xf32>>
  // CHECK: distopt.wait %[[T0]] : !distopt.token<tensor<1024xf32>>
  %0 = distopt.wait %t0 : !distopt.token<tensor<1024xf32>>
  %2 = distopt.wait %t2 : !distopt.token<tensor<1024xf32>>
  %3 = distopt.wait %t3 : !distopt.token<tensor<1024xf32>>
  %4 = distopt.wait %t4 : !distopt.token<tensor<1024xf32>>
  return %0, %s, %2, %3, %4 : tensor<1024xf32>, tensor<256xf32>, tensor<1024xf32>, tensor<1024xf32>, tensor<1024xf32>
}

// CHECK-LABEL: func.func @buckets
func.func @buckets(%w: tensor<10x10xf32>, %b: tensor<10xf32>, %h: tensor<3xbf16>) -> (tensor<10x10xf32>, tensor<10xf32>) {
  // CHECK: %[[B:.*]] = distopt.bucket_pack %{{.*}}, %{{.*}} : tensor<10x10xf32>, tensor<10xf32> -> tensor<128xf32>
  %bucket = distopt.bucket_pack %w, %b : tensor<10x10xf32>, tensor<10xf32> -> tensor<128xf32>
  // CHECK: distopt.bucket_unpack %[[B]] : tensor<128xf32> -> tensor<10x10xf32>, tensor<10xf32>
  %w1, %b1 = distopt.bucket_unpack %bucket : tensor<128xf32> -> tensor<10x10xf32>, tensor<10xf32>
  // CHECK: distopt.bucket_pack %{{.*}} {alignment = 2 : i64} : tensor<3xbf16> -> tensor<4xbf16>
  %hb = distopt.bucket_pack %h {alignment = 2} : tensor<3xbf16> -> tensor<4xbf16>
  return %w1, %b1 : tensor<10x10xf32>, tensor<10xf32>
}

// CHECK-LABEL: func.func @compression
func.func @compression(%g: tensor<64x32xf32>, %p: tensor<64x2xf32>, %q: tensor<32x2xf32>, %e: tensor<64x32xf32>, %v: tensor<4096xf32>, %ve: tensor<4096xf32>) {
  // CHECK: distopt.powersgd_all_reduce %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}} on @dp rank 2 : tensor<64x32xf32>, tensor<64x2xf32>, tensor<32x2xf32>
  %r:4 = distopt.powersgd_all_reduce %g, %p, %q, %e on @dp rank 2 : tensor<64x32xf32>, tensor<64x2xf32>, tensor<32x2xf32>
  // CHECK: distopt.powersgd_all_reduce %{{.*}}, %{{.*}}, %{{.*}} on @dp rank 2 {orthogonalization_epsilon = 1.000000e-08 : f64} : tensor<64x32xf32>, tensor<64x2xf32>, tensor<32x2xf32>
  %n:3 = distopt.powersgd_all_reduce %g, %p, %q on @dp rank 2 {orthogonalization_epsilon = 1.0e-8} : tensor<64x32xf32>, tensor<64x2xf32>, tensor<32x2xf32>
  // CHECK: distopt.orthogonalize %{{.*}} : tensor<64x2xf32>
  %o = distopt.orthogonalize %p : tensor<64x2xf32>
  // CHECK: distopt.orthogonalize %{{.*}} {epsilon = 1.000000e-08 : f64} : tensor<64x2xf32>
  %o2 = distopt.orthogonalize %p {epsilon = 1.0e-8} : tensor<64x2xf32>
  // CHECK: distopt.topk_all_reduce avg %{{.*}}, %{{.*}} on @dp density 5.000000e-02 : tensor<4096xf32>
  %t:2 = distopt.topk_all_reduce avg %v, %ve on @dp density 0.05 : tensor<4096xf32>
  return
}

// CHECK-LABEL: func.func @sharding
func.func @sharding(%flat: tensor<1024xf32>, %p: tensor<64xf32>, %g: tensor<64xf32>, %m: tensor<64xf32>, %lr: f32, %t: i64) -> (tensor<256xf32>, tensor<64xf32>, tensor<64xf32>) {
  // CHECK: distopt.shard_slice %{{.*}} on @dp : tensor<1024xf32> -> tensor<256xf32>
  %mine = distopt.shard_slice %flat on @dp : tensor<1024xf32> -> tensor<256xf32>
  // CHECK: distopt.owned_by @dp rank 1 otherwise(%{{.*}}, %{{.*}}) : tensor<64xf32>, tensor<64xf32> {
  // CHECK:   distopt.sgd_update
  // CHECK:   distopt.yield %{{.*}}, %{{.*}} : tensor<64xf32>, tensor<64xf32>
  // CHECK: }
  %p1, %m1 = distopt.owned_by @dp rank 1 otherwise(%p, %m) : tensor<64xf32>, tensor<64xf32> {
    %a, %b = distopt.sgd_update %p, %g state(%m) lr(%lr) step(%t) {momentum = 0.9} : tensor<64xf32>, f32
    distopt.yield %a, %b : tensor<64xf32>, tensor<64xf32>
  }
  return %mine, %p1, %m1 : tensor<256xf32>, tensor<64xf32>, tensor<64xf32>
}

// CHECK-LABEL: func.func @optimizers
func.func @optimizers(%p: tensor<1024xf32>, %g: tensor<1024xf32>, %s0: tensor<1024xf32>, %s1: tensor<1024xf32>, %s2: tensor<1024xf32>, %lr: f32, %lr64: f64, %t: i64) {
  // CHECK: distopt.sgd_update %{{.*}}, %{{.*}} lr(%{{.*}}) step(%{{.*}}) : tensor<1024xf32>, f32
  %a = distopt.sgd_update %p, %g lr(%lr) step(%t) : tensor<1024xf32>, f32
  // CHECK: distopt.sgd_update %{{.*}}, %{{.*}} state(%{{.*}}) lr(%{{.*}}) step(%{{.*}}) {momentum = 9.000000e-01 : f64, nesterov, weight_decay = 1.000000e-04 : f64} : tensor<1024xf32>, f32
  %b:2 = distopt.sgd_update %p, %g state(%s0) lr(%lr) step(%t) {momentum = 0.9, nesterov, weight_decay = 1.0e-4} : tensor<1024xf32>, f32
  // CHECK: distopt.sgd_update %{{.*}}, %{{.*}} state(%{{.*}}) lr(%{{.*}}) step(%{{.*}}) {dampening = 1.000000e-01 : f64, maximize, momentum = 5.000000e-01 : f64} : tensor<1024xf32>, f64
  %c:2 = distopt.sgd_update %p, %g state(%s0) lr(%lr64) step(%t) {momentum = 0.5, dampening = 0.1, maximize} : tensor<1024xf32>, f64
  // CHECK: distopt.adam_update %{{.*}}, %{{.*}} state(%{{.*}}, %{{.*}}) lr(%{{.*}}) step(%{{.*}}) : tensor<1024xf32>, f32
  %d:3 = distopt.adam_update %p, %g state(%s0, %s1) lr(%lr) step(%t) : tensor<1024xf32>, f32
  // CHECK: distopt.adam_update %{{.*}}, %{{.*}} state(%{{.*}}, %{{.*}}, %{{.*}}) lr(%{{.*}}) step(%{{.*}}) {amsgrad, beta1 = 8.000000e-01 : f64, weight_decay = 1.000000e-02 : f64} : tensor<1024xf32>, f32
  %e:4 = distopt.adam_update %p, %g state(%s0, %s1, %s2) lr(%lr) step(%t) {amsgrad, beta1 = 0.8, weight_decay = 0.01} : tensor<1024xf32>, f32
  // CHECK: distopt.adamw_update %{{.*}}, %{{.*}} state(%{{.*}}, %{{.*}}) lr(%{{.*}}) step(%{{.*}}) : tensor<1024xf32>, f32
  %f:3 = distopt.adamw_update %p, %g state(%s0, %s1) lr(%lr) step(%t) : tensor<1024xf32>, f32
  // CHECK: distopt.adamw_update %{{.*}}, %{{.*}} state(%{{.*}}, %{{.*}}) lr(%{{.*}}) step(%{{.*}}) {beta2 = 0.94999999999999996 : f64, eps = 9.9999999999999995E-7 : f64, weight_decay = 1.000000e-01 : f64} : tensor<1024xf32>, f32
  %f2:3 = distopt.adamw_update %p, %g state(%s0, %s1) lr(%lr) step(%t) {beta2 = 0.95, eps = 1.0e-6, weight_decay = 0.1} : tensor<1024xf32>, f32
  // CHECK: distopt.rmsprop_update %{{.*}}, %{{.*}} state(%{{.*}}) lr(%{{.*}}) step(%{{.*}}) : tensor<1024xf32>, f32
  %h:2 = distopt.rmsprop_update %p, %g state(%s0) lr(%lr) step(%t) : tensor<1024xf32>, f32
  // CHECK: distopt.rmsprop_update %{{.*}}, %{{.*}} state(%{{.*}}, %{{.*}}, %{{.*}}) lr(%{{.*}}) step(%{{.*}}) {alpha = 9.000000e-01 : f64, centered, momentum = 9.000000e-01 : f64} : tensor<1024xf32>, f32
  %i:4 = distopt.rmsprop_update %p, %g state(%s0, %s1, %s2) lr(%lr) step(%t) {alpha = 0.9, centered, momentum = 0.9} : tensor<1024xf32>, f32
  // CHECK: distopt.adagrad_update %{{.*}}, %{{.*}} state(%{{.*}}) lr(%{{.*}}) step(%{{.*}}) {lr_decay = 1.000000e-02 : f64} : tensor<1024xf32>, f32
  %j:2 = distopt.adagrad_update %p, %g state(%s0) lr(%lr) step(%t) {lr_decay = 0.01} : tensor<1024xf32>, f32
  return
}

// CHECK-LABEL: func.func @muon
func.func @muon(%p: tensor<64x3x3x3xbf16>, %g: tensor<64x3x3x3xbf16>, %b: tensor<64x3x3x3xbf16>, %lr: f32, %t: i64) {
  // CHECK: distopt.muon_update %{{.*}}, %{{.*}} state(%{{.*}}) lr(%{{.*}}) step(%{{.*}}) : tensor<64x3x3x3xbf16>, f32
  %a:2 = distopt.muon_update %p, %g state(%b) lr(%lr) step(%t) : tensor<64x3x3x3xbf16>, f32
  // CHECK: distopt.muon_update {{.*}} {adjust_lr_fn = "match_rms_adamw", nesterov = false, ns_coefficients = array<f64: 2.000000e+00, -1.500000e+00, 5.000000e-01>, ns_dtype = bf16, ns_steps = 3 : i64}
  %c:2 = distopt.muon_update %p, %g state(%b) lr(%lr) step(%t) {adjust_lr_fn = "match_rms_adamw", nesterov = false, ns_coefficients = array<f64: 2.0, -1.5, 0.5>, ns_dtype = bf16, ns_steps = 3} : tensor<64x3x3x3xbf16>, f32
  return
}

// Dion's right factor has a shape of its own (rank x columns), listed after
// the parameter's type; a square factor of full rank is the parameter's
// shape, and then not listed.
// CHECK-LABEL: func.func @dion
func.func @dion(%p: tensor<64x3x3x3xf32>, %g: tensor<64x3x3x3xf32>, %m: tensor<64x3x3x3xf32>, %q: tensor<7x27xf32>, %s: tensor<27x27xf32>, %lr: f32, %t: i64) {
  // CHECK: distopt.dion_update %{{.*}}, %{{.*}} state(%{{.*}}, %{{.*}}) lr(%{{.*}}) step(%{{.*}}) {rank_fraction = 2.500000e-01 : f64} : tensor<64x3x3x3xf32> [tensor<64x3x3x3xf32>, tensor<7x27xf32>], f32
  %a:3 = distopt.dion_update %p, %g state(%m, %q) lr(%lr) step(%t) {rank_fraction = 0.25} : tensor<64x3x3x3xf32> [tensor<64x3x3x3xf32>, tensor<7x27xf32>], f32
  // CHECK: distopt.dion_update {{.*}} {epsilon = 9.9999999999999995E-7 : f64, maximize, mu = 5.000000e-01 : f64, rank = 7 : i64, seed = 3 : i64, weight_decay = 0.000000e+00 : f64} : tensor<64x3x3x3xf32> [tensor<64x3x3x3xf32>, tensor<7x27xf32>], f32
  %b:3 = distopt.dion_update %p, %g state(%m, %q) lr(%lr) step(%t) {rank = 7, mu = 0.5, weight_decay = 0.0, epsilon = 1.0e-6, seed = 3, maximize} : tensor<64x3x3x3xf32> [tensor<64x3x3x3xf32>, tensor<7x27xf32>], f32
  // The low-rank sync: this rank's own gradient, the factors averaged over
  // @dp.
  // CHECK: distopt.dion_update {{.*}} {group = @dp, rank = 7 : i64} : tensor<64x3x3x3xf32> [tensor<64x3x3x3xf32>, tensor<7x27xf32>], f32
  %c:3 = distopt.dion_update %p, %g state(%m, %q) lr(%lr) step(%t) {rank = 7, group = @dp} : tensor<64x3x3x3xf32> [tensor<64x3x3x3xf32>, tensor<7x27xf32>], f32
  return
}

// CHECK-LABEL: func.func @dion_square
func.func @dion_square(%p: tensor<27x27xf32>, %g: tensor<27x27xf32>, %m: tensor<27x27xf32>, %q: tensor<27x27xf32>, %lr: f32, %t: i64) {
  // CHECK: distopt.dion_update {{.*}} : tensor<27x27xf32>, f32
  %a:3 = distopt.dion_update %p, %g state(%m, %q) lr(%lr) step(%t) : tensor<27x27xf32>, f32
  return
}

// Hyperparameters read at run time: f64 operands, by their torch names; the
// attributes still say which state there is.
// CHECK-LABEL: func.func @runtime_hyperparameters
func.func @runtime_hyperparameters(%p: tensor<1024xf32>, %g: tensor<1024xf32>, %s0: tensor<1024xf32>, %s1: tensor<1024xf32>, %lr: f64, %t: i64, %b1: f64, %wd: f64, %mu: f64) {
  // CHECK: distopt.adamw_update %{{.*}}, %{{.*}} state(%{{.*}}, %{{.*}}) lr(%{{.*}}) step(%{{.*}}) runtime(beta1 = %{{.*}}, weight_decay = %{{.*}}) {weight_decay = 1.000000e-01 : f64} : tensor<1024xf32>, f64
  %a:3 = distopt.adamw_update %p, %g state(%s0, %s1) lr(%lr) step(%t) runtime(beta1 = %b1, weight_decay = %wd) {weight_decay = 0.1} : tensor<1024xf32>, f64
  // CHECK: distopt.sgd_update %{{.*}}, %{{.*}} state(%{{.*}}) lr(%{{.*}}) step(%{{.*}}) runtime(momentum = %{{.*}}) {momentum = 9.000000e-01 : f64} : tensor<1024xf32>, f64
  %b:2 = distopt.sgd_update %p, %g state(%s0) lr(%lr) step(%t) runtime(momentum = %mu) {momentum = 0.9} : tensor<1024xf32>, f64
  return
}

// A rate checked before the step does anything.
// CHECK-LABEL: func.func @check_rate
func.func @check_rate(%lr: f64) {
  // CHECK: distopt.check_rate %{{.*}} param_group -1
  distopt.check_rate %lr param_group -1
  // CHECK: distopt.check_rate %{{.*}} param_group 2
  distopt.check_rate %lr param_group 2
  return
}

// CHECK-LABEL: func.func @mixed_precision
func.func @mixed_precision(%g0: tensor<1024xbf16>, %g1: tensor<64xbf16>, %g: tensor<1024xf32>, %s: f32, %n: i64) -> (i1, i1, tensor<1024xf32>, f32, i64) {
  // CHECK: distopt.all_finite %{{.*}}, %{{.*}} on @dp : tensor<1024xbf16>, tensor<64xbf16>
  %ok = distopt.all_finite %g0, %g1 on @dp : tensor<1024xbf16>, tensor<64xbf16>
  // CHECK: distopt.all_finite %{{.*}} : tensor<1024xbf16>
  %local = distopt.all_finite %g0 : tensor<1024xbf16>
  // CHECK: distopt.unscale %{{.*}} by %{{.*}} : tensor<1024xf32>, f32
  %u = distopt.unscale %g by %s : tensor<1024xf32>, f32
  // CHECK: distopt.loss_scale_update %{{.*}}, %{{.*}}, %{{.*}} {growth_interval = 100 : i64} : f32, i64
  %s1, %n1 = distopt.loss_scale_update %s, %n, %ok {growth_interval = 100} : f32, i64
  return %ok, %local, %u, %s1, %n1 : i1, i1, tensor<1024xf32>, f32, i64
}

// CHECK-LABEL: func.func @clipping
func.func @clipping(%g0: tensor<256xf32>, %g1: tensor<64xf32>) -> (tensor<256xf32>, tensor<64xf32>, f32, f32) {
  // CHECK: distopt.clip_grad_norm %{{.*}}, %{{.*}} max_norm 1.000000e+00 on @dp : tensor<256xf32>, tensor<64xf32> -> f32
  %c0, %c1, %n = distopt.clip_grad_norm %g0, %g1 max_norm 1.0 on @dp : tensor<256xf32>, tensor<64xf32> -> f32
  // CHECK: distopt.clip_grad_norm %{{.*}} max_norm 5.000000e-01 {norm_type = 0x7FF0000000000000 : f64} : tensor<256xf32> -> f32
  %d0, %m = distopt.clip_grad_norm %g0 max_norm 0.5 {norm_type = 0x7FF0000000000000 : f64} : tensor<256xf32> -> f32
  // CHECK: distopt.clip_grad_norm %{{.*}} max_norm 1.000000e+00 on @dp {tensor_bounds = [array<i64: 0, 300, 304, 500>]} : tensor<256xf32> -> f32
  %e0, %k = distopt.clip_grad_norm %g0 max_norm 1.0 on @dp {tensor_bounds = [array<i64: 0, 300, 304, 500>]} : tensor<256xf32> -> f32
  return %c0, %c1, %n, %m : tensor<256xf32>, tensor<64xf32>, f32, f32
}
