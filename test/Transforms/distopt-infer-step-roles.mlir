// RUN: distopt-opt %s -split-input-file --distopt-infer-step-roles -verify-diagnostics | FileCheck %s

// A DDP + AdamW step without attributes: parameters from the updates'
// operands, gradients through the bucket, the all-reduce and clipping
// (slot by slot: the bucket holds them in reverse order), state by torch's
// keys, and the results that update arguments.
// CHECK-LABEL: func.func @ddp_adamw
// CHECK-SAME: %{{.*}}: tensor<8x4xf32> {distopt.name = "arg0", distopt.role = "param"}
// CHECK-SAME: %{{.*}}: tensor<8xf32> {distopt.name = "arg1", distopt.role = "param"}
// CHECK-SAME: %{{.*}}: tensor<8x4xf32> {distopt.name = "arg0", distopt.role = "grad"}
// CHECK-SAME: %{{.*}}: tensor<8xf32> {distopt.name = "arg1", distopt.role = "grad"}
// CHECK-SAME: %{{.*}}: tensor<8x4xf32> {distopt.name = "arg0.exp_avg", distopt.role = "state"}
// CHECK-SAME: %{{.*}}: tensor<8x4xf32> {distopt.name = "arg0.exp_avg_sq", distopt.role = "state"}
// CHECK-SAME: %{{.*}}: tensor<8xf32> {distopt.name = "arg1.exp_avg", distopt.role = "state"}
// CHECK-SAME: %{{.*}}: tensor<8xf32> {distopt.name = "arg1.exp_avg_sq", distopt.role = "state"}
// CHECK-SAME: %{{.*}}: f64 {distopt.role = "lr"}, %{{.*}}: i64 {distopt.role = "step"})
// CHECK-SAME: -> (tensor<8x4xf32> {distopt.name = "arg0", distopt.role = "param"},
// CHECK-SAME: tensor<8xf32> {distopt.name = "arg1", distopt.role = "param"},
// CHECK-SAME: tensor<8x4xf32> {distopt.name = "arg0.exp_avg", distopt.role = "state"},
// CHECK-SAME: tensor<8x4xf32> {distopt.name = "arg0.exp_avg_sq", distopt.role = "state"},
// CHECK-SAME: tensor<8xf32> {distopt.name = "arg1.exp_avg", distopt.role = "state"},
// CHECK-SAME: tensor<8xf32> {distopt.name = "arg1.exp_avg_sq", distopt.role = "state"}, f32)
distopt.process_group @world size 2
func.func @ddp_adamw(%w: tensor<8x4xf32>, %b: tensor<8xf32>, %gw: tensor<8x4xf32>, %gb: tensor<8xf32>,
                     %mw: tensor<8x4xf32>, %vw: tensor<8x4xf32>, %mb: tensor<8xf32>, %vb: tensor<8xf32>,
                     %lr: f64, %t: i64)
    -> (tensor<8x4xf32>, tensor<8xf32>, tensor<8x4xf32>, tensor<8x4xf32>, tensor<8xf32>, tensor<8xf32>, f32) {
  %bucket = distopt.bucket_pack %gb, %gw : tensor<8xf32>, tensor<8x4xf32> -> tensor<48xf32>
  %r = distopt.all_reduce avg %bucket on @world : tensor<48xf32>
  %rb, %rw = distopt.bucket_unpack %r : tensor<48xf32> -> tensor<8xf32>, tensor<8x4xf32>
  %cw, %cb, %norm = distopt.clip_grad_norm %rw, %rb max_norm 1.0 : tensor<8x4xf32>, tensor<8xf32> -> f32
  %w1, %mw1, %vw1 = distopt.adamw_update %w, %cw state(%mw, %vw) lr(%lr) step(%t) : tensor<8x4xf32>, f64
  %b1, %mb1, %vb1 = distopt.adamw_update %b, %cb state(%mb, %vb) lr(%lr) step(%t) : tensor<8xf32>, f64
  return %w1, %b1, %mw1, %vw1, %mb1, %vb1, %norm
      : tensor<8x4xf32>, tensor<8xf32>, tensor<8x4xf32>, tensor<8x4xf32>, tensor<8xf32>, tensor<8xf32>, f32
}

// -----

// Names and roles written out win; a named parameter names its gradient
// and state; SGD's momentum is a momentum_buffer; a mixed-precision chain
// (extf, unscale) leads back to the bf16 gradient; a select between the
// update and the argument (a skipped step) still updates the argument.
// CHECK-LABEL: func.func @mixed
// CHECK-SAME: {distopt.name = "fc", distopt.role = "main_param"}
// CHECK-SAME: tensor<16xbf16> {distopt.name = "fc", distopt.role = "grad"}
// CHECK-SAME: {distopt.name = "fc.momentum_buffer", distopt.role = "state"}
// CHECK-SAME: %{{.*}}: f32, %{{.*}}: f32 {distopt.role = "lr"}
// CHECK-SAME: -> (tensor<16xf32> {distopt.name = "fc", distopt.role = "main_param"},
// CHECK-SAME: tensor<16xf32> {distopt.name = "fc.momentum_buffer", distopt.role = "state"})
distopt.process_group @world size 4
func.func @mixed(%main: tensor<16xf32> {distopt.role = "main_param", distopt.name = "fc"},
                 %grad: tensor<16xbf16>, %mom: tensor<16xf32>, %scale: f32, %lr: f32, %t: i64)
    -> (tensor<16xf32>, tensor<16xf32>) {
  %r = distopt.all_reduce avg %grad on @world : tensor<16xbf16>
  %finite = distopt.all_finite %r on @world : tensor<16xbf16>
  %g32 = arith.extf %r : tensor<16xbf16> to tensor<16xf32>
  %g = distopt.unscale %g32 by %scale : tensor<16xf32>, f32
  %main1, %mom1 = distopt.sgd_update %main, %g state(%mom) lr(%lr) step(%t) {momentum = 0.9}
      : tensor<16xf32>, f32
  %main2 = arith.select %finite, %main1, %main : tensor<16xf32>
  %mom2 = arith.select %finite, %mom1, %mom : tensor<16xf32>
  return %main2, %mom2 : tensor<16xf32>, tensor<16xf32>
}

// -----

// Two updates that disagree about an argument: an error at the second,
// naming the argument.
func.func @conflict(%p: tensor<4xf32>, %g: tensor<4xf32>, %b: tensor<4xf32>, %lr: f32, %t: i64)
    -> (tensor<4xf32>, tensor<4xf32>) {
  // expected-note @-2 {{argument #2}}
  %p1, %b1 = distopt.sgd_update %p, %g state(%b) lr(%lr) step(%t) {momentum = 0.9} : tensor<4xf32>, f32
  // expected-error @+1 {{uses argument #2 as param, but it is already state 'arg0.momentum_buffer'; give it distopt.role and distopt.name (docs/step-abi.md)}}
  %q1, %p2 = distopt.sgd_update %b, %g state(%p) lr(%lr) step(%t) {momentum = 0.9} : tensor<4xf32>, f32
  return %p1, %q1 : tensor<4xf32>, tensor<4xf32>
}

// -----

// Several returns: a result takes a role only where every return gives the
// update of the same argument.
// CHECK-LABEL: func.func @branches
// CHECK-SAME: -> (tensor<4xf32> {distopt.name = "arg0", distopt.role = "param"}, tensor<4xf32>)
func.func @branches(%p: tensor<4xf32>, %g: tensor<4xf32>, %lr: f32, %t: i64, %c: i1)
    -> (tensor<4xf32>, tensor<4xf32>) {
  %p1 = distopt.sgd_update %p, %g lr(%lr) step(%t) : tensor<4xf32>, f32
  cf.cond_br %c, ^a, ^b
^a:
  return %p1, %p1 : tensor<4xf32>, tensor<4xf32>
^b:
  return %p1, %g : tensor<4xf32>, tensor<4xf32>
}

// -----

// Dion synced by its factors: its momentum is each rank's own, standing for
// the ranks' mean, in the argument and in the result that updates it.
// CHECK-LABEL: func.func @dion_synced
// CHECK-SAME: %{{[^:]*}}: tensor<8x6xf32> {distopt.name = "arg0.momentum", distopt.per_rank = "mean", distopt.role = "state"}
// CHECK-SAME: %{{[^:]*}}: tensor<2x6xf32> {distopt.name = "arg0.right_factor", distopt.role = "state"}
// CHECK-SAME: -> (tensor<8x6xf32> {distopt.name = "arg0", distopt.role = "param"}, tensor<8x6xf32> {distopt.name = "arg0.momentum", distopt.per_rank = "mean", distopt.role = "state"}, tensor<2x6xf32> {distopt.name = "arg0.right_factor", distopt.role = "state"})
distopt.process_group @dp size 2
func.func @dion_synced(%p: tensor<8x6xf32>, %g: tensor<8x6xf32>, %m: tensor<8x6xf32>, %q: tensor<2x6xf32>, %lr: f64, %t: i64)
    -> (tensor<8x6xf32>, tensor<8x6xf32>, tensor<2x6xf32>) {
  %p1, %m1, %q1 = distopt.dion_update %p, %g state(%m, %q) lr(%lr) step(%t) {group = @dp, rank = 2 : i64}
      : tensor<8x6xf32> [tensor<8x6xf32>, tensor<2x6xf32>], f64
  return %p1, %m1, %q1 : tensor<8x6xf32>, tensor<8x6xf32>, tensor<2x6xf32>
}
