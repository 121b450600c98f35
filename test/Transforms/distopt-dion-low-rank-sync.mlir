// RUN: distopt-opt %s -split-input-file -verify-diagnostics --distopt-dion-low-rank-sync | FileCheck %s
// RUN: distopt-opt %s -split-input-file -verify-diagnostics --distopt-dion-low-rank-sync --distopt-verify-collectives > /dev/null
//
// From the importer, through the pipeline: the Dion group syncs its
// factors, the AdamW group's gradients are bucketed and averaged as
// before, and the report counts two all-reduces per Dion matrix of
// (rows + columns) x rank f32 elements instead of its gradient: l1.w
// (24x10, rank 5): 34 x 5 x 4 = 680 bytes; l2.w (6x24, rank 3): 360;
// conv.w (4x27, rank 2): 248; 1288 in all, where its gradients were 1968.
// RUN: distopt-translate --import-param-spec %S/../Integration/Inputs/dion.json \
// RUN:   | distopt-opt --distopt-pipeline="dion-low-rank-sync" --distopt-verify-collectives --distopt-report \
// RUN:   | FileCheck %s --check-prefix=PIPELINE
// RUN: distopt-translate --import-param-spec %S/../Integration/Inputs/dion.json \
// RUN:   | distopt-opt --distopt-pipeline="dion-low-rank-sync zero-stage=2" --distopt-verify-collectives \
// RUN:   | FileCheck %s --check-prefix=ZERO2
// RUN: distopt-translate --import-param-spec %S/../Integration/Inputs/dion-sync.json \
// RUN:   | distopt-opt --distopt-pipeline="dion-low-rank-sync zero-stage=2" --distopt-verify-collectives \
// RUN:   | FileCheck %s --check-prefix=SCALED
// Clipping by the global norm needs the averaged gradient.
// RUN: sed -e 's/"loss_scaling"/"clip_grad_norm": {"max_norm": 1.0}, "loss_scaling"/' %S/../Integration/Inputs/dion-sync.json \
// RUN:   | distopt-translate --import-param-spec | not distopt-opt --distopt-pipeline="dion-low-rank-sync" 2>&1 \
// RUN:   | FileCheck %s --check-prefix=CLIP
// Batches: with batch-mb=1 the three matrices' factors share two
// all-reduces; with a cap below l1.w's 960 bytes of gradient, l1.w is a
// batch of its own and the other two (576 and 432 bytes) share one.
// RUN: distopt-translate --import-param-spec %S/../Integration/Inputs/dion.json \
// RUN:   | distopt-opt --distopt-pipeline="dion-low-rank-sync dion-batch-mb=1" --distopt-report \
// RUN:   | FileCheck %s --check-prefix=BATCH
// RUN: distopt-translate --import-param-spec %S/../Integration/Inputs/dion.json \
// RUN:   | distopt-opt --distopt-infer-step-roles --distopt-dion-low-rank-sync=batch-mb=0.001 \
// RUN:   | FileCheck %s --check-prefix=SMALL
// RUN: not distopt-opt %s --distopt-dion-low-rank-sync=batch-mb=-1 2>&1 | FileCheck %s --check-prefix=BATCH-MB
// A step without Dion: a warning, and nothing changes.
// RUN: distopt-translate --import-param-spec %S/../Integration/Inputs/muon.json \
// RUN:   | distopt-opt --distopt-dion-low-rank-sync -o /dev/null 2>&1 | FileCheck %s --check-prefix=NO-DION

// PIPELINE: dion_update (factors)       6             1288             1288
// PIPELINE: (dion_update: 3 tensors, each all-reducing its factors P and R instead of its gradient)
// PIPELINE: {distopt.name = "l1.w.momentum", distopt.per_rank = "mean", distopt.role = "state"}
// PIPELINE-SAME: -> (
// PIPELINE-SAME: {distopt.name = "l1.w.momentum", distopt.per_rank = "mean", distopt.role = "state"}
// PIPELINE: distopt.all_reduce_start avg %{{.*}} on @world : tensor<24xf32>
// PIPELINE-NOT: arith.constant dense<2.000000e+00>
// PIPELINE: distopt.dion_update %{{.*}} {group = @world, rank_fraction = 5.000000e-01 : f64}
// PIPELINE-SAME: tensor<24x10xf32>
// ZERO2-NOT: distopt.owned_by
// ZERO2: distopt.dion_update %{{.*}} {group = @world
// ZERO2: distopt.reduce_scatter_start avg %{{.*}} on @world : tensor<32xf32>
// The overflow check over the AdamW group's chunks also takes the Dion
// matrices' own gradients, agreed over the world.
// SCALED: distopt.dion_update %{{.*}} {group = @world, rank = 4 : i64}
// SCALED: distopt.all_finite %{{[^,]*}}, %arg{{[0-9]+}}, %arg{{[0-9]+}} on @world : tensor<16xf32>, tensor<24x10xf32>, tensor<6x24xf32>
// CLIP: error: --distopt-dion-low-rank-sync: cannot sync Dion's factors instead of its gradient: its gradient is clipped by the global norm, which needs the averaged gradient that the sync never forms
// NO-DION: warning: --distopt-dion-low-rank-sync: no distopt.dion_update here; nothing to sync
// BATCH: dion_update (factors)       2             1288             1288
// BATCH: (dion_update: 3 tensors, their factors P and R all-reduced instead of their gradients, in 1 batch of 2 all_reduces)
// BATCH-COUNT-3: distopt.dion_update {{.*}}batch = 0 : i64, group = @world
// SMALL: distopt.dion_update {{.*}}{batch = 0 : i64, group = @world, rank_fraction = 5.000000e-01 : f64} : tensor<24x10xf32>
// SMALL: distopt.dion_update {{.*}}{batch = 1 : i64, group = @world, rank_fraction = 5.000000e-01 : f64} : tensor<6x24xf32>
// SMALL: distopt.dion_update {{.*}}{batch = 1 : i64, group = @world, rank_fraction = 5.000000e-01 : f64} : tensor<4x3x3x3xf32>
// BATCH-MB: --distopt-dion-low-rank-sync: batch-mb must be finite and not negative, got -1

// The importer's mean (a sum, then a division by the group's size) goes;
// the overflow check and the unscale read the rank's own gradient, and the
// check is agreed over the group. The momentum and its result are marked.
// CHECK-LABEL: func.func @scaled
// CHECK-SAME: %[[M:[^:]*]]: tensor<8x6xf32> {distopt.name = "w.momentum", distopt.per_rank = "mean", distopt.role = "state"}
// CHECK-SAME: -> (tensor<8x6xf32> {distopt.name = "w", distopt.role = "param"}, tensor<8x6xf32> {distopt.name = "w.momentum", distopt.per_rank = "mean", distopt.role = "state"}
// CHECK-NOT: distopt.all_reduce
// CHECK: %[[OK:.*]] = distopt.all_finite %[[G:[^ ]*]], %{{.*}} on @dp
// CHECK: %[[U:.*]] = distopt.unscale %[[G]] by
// CHECK: %[[P:.*]], %[[S:.*]]:2 = distopt.dion_update %{{.*}}, %[[U]] state(%[[M]], %{{.*}}) {{.*}}{group = @dp, rank = 2 : i64}
// CHECK: %[[KEPT:.*]] = arith.select %[[OK]], %[[S]]#0, %[[M]]
// CHECK: return {{.*}}%[[KEPT]]
distopt.process_group @dp size 4
func.func @scaled(%p: tensor<8x6xf32> {distopt.role = "param", distopt.name = "w"},
                  %g: tensor<8x6xf32> {distopt.role = "grad", distopt.name = "w"},
                  %m: tensor<8x6xf32> {distopt.role = "state", distopt.name = "w.momentum"},
                  %q: tensor<2x6xf32> {distopt.role = "state", distopt.name = "w.right_factor"},
                  %scale: f32, %lr: f64, %t: i64, %other: tensor<4xf32>)
    -> (tensor<8x6xf32> {distopt.role = "param", distopt.name = "w"},
        tensor<8x6xf32> {distopt.role = "state", distopt.name = "w.momentum"},
        tensor<2x6xf32> {distopt.role = "state", distopt.name = "w.right_factor"}, i1) {
  %s = distopt.all_reduce sum %g on @dp : tensor<8x6xf32>
  %n = arith.constant dense<4.0> : tensor<8x6xf32>
  %mean = arith.divf %s, %n : tensor<8x6xf32>
  %ok = distopt.all_finite %mean, %other : tensor<8x6xf32>, tensor<4xf32>
  %u = distopt.unscale %mean by %scale : tensor<8x6xf32>, f32
  %p1, %m1, %q1 = distopt.dion_update %p, %u state(%m, %q) lr(%lr) step(%t) {rank = 2 : i64}
      : tensor<8x6xf32> [tensor<8x6xf32>, tensor<2x6xf32>], f64
  %kp = arith.select %ok, %p1, %p : tensor<8x6xf32>
  %km = arith.select %ok, %m1, %m : tensor<8x6xf32>
  %kq = arith.select %ok, %q1, %q : tensor<2x6xf32>
  return %kp, %km, %kq, %ok : tensor<8x6xf32>, tensor<8x6xf32>, tensor<2x6xf32>, i1
}

// -----

// An average needs no division; a step already synced is left as it is.
// CHECK-LABEL: func.func @averaged
// CHECK-NOT: distopt.all_reduce
// CHECK: distopt.dion_update %arg0, %arg1 {{.*}}{group = @dp}
// CHECK: distopt.dion_update %arg3, %arg4 {{.*}}{group = @dp}
distopt.process_group @dp size 2
func.func @averaged(%p: tensor<8x6xf32> {distopt.role = "param", distopt.name = "w"},
                    %g: tensor<8x6xf32> {distopt.role = "grad", distopt.name = "w"},
                    %m: tensor<8x6xf32> {distopt.role = "state", distopt.name = "w.momentum"},
                    %p2: tensor<8x6xf32> {distopt.role = "param", distopt.name = "v"},
                    %g2: tensor<8x6xf32> {distopt.role = "grad", distopt.name = "v"},
                    %m2: tensor<8x6xf32> {distopt.role = "state", distopt.name = "v.momentum"},
                    %q: tensor<6x6xf32>, %lr: f64, %t: i64)
    -> (tensor<8x6xf32>, tensor<8x6xf32>) {
  %a = distopt.all_reduce avg %g on @dp : tensor<8x6xf32>
  %p1, %m1, %q1 = distopt.dion_update %p, %a state(%m, %q) lr(%lr) step(%t)
      : tensor<8x6xf32> [tensor<8x6xf32>, tensor<6x6xf32>], f64
  %p3, %m3, %q3 = distopt.dion_update %p2, %g2 state(%m2, %q) lr(%lr) step(%t) {group = @dp}
      : tensor<8x6xf32> [tensor<8x6xf32>, tensor<6x6xf32>], f64
  return %p1, %p3 : tensor<8x6xf32>, tensor<8x6xf32>
}

// -----

distopt.process_group @dp size 4
func.func @sum_not_mean(%p: tensor<8x6xf32> {distopt.role = "param", distopt.name = "w"},
                        %g: tensor<8x6xf32> {distopt.role = "grad", distopt.name = "w"},
                        %m: tensor<8x6xf32> {distopt.role = "state", distopt.name = "w.momentum"},
                        %q: tensor<6x6xf32>, %lr: f64, %t: i64) -> tensor<8x6xf32> {
  %s = distopt.all_reduce sum %g on @dp : tensor<8x6xf32>
  %n = arith.constant dense<2.0> : tensor<8x6xf32>
  %half = arith.divf %s, %n : tensor<8x6xf32>
  // expected-error @below {{--distopt-dion-low-rank-sync: cannot sync Dion's factors instead of its gradient: its gradient is a sum over @dp, not divided by the group's 4 ranks next: the sync averages}}
  %p1, %m1, %q1 = distopt.dion_update %p, %half state(%m, %q) lr(%lr) step(%t)
      : tensor<8x6xf32> [tensor<8x6xf32>, tensor<6x6xf32>], f64
  return %p1 : tensor<8x6xf32>
}

// -----

distopt.process_group @dp size 4
func.func @other_reader(%p: tensor<8x6xf32> {distopt.role = "param", distopt.name = "w"},
                        %g: tensor<8x6xf32> {distopt.role = "grad", distopt.name = "w"},
                        %m: tensor<8x6xf32> {distopt.role = "state", distopt.name = "w.momentum"},
                        %q: tensor<6x6xf32>, %lr: f64, %t: i64) -> (tensor<8x6xf32>, tensor<8x6xf32>) {
  %a = distopt.all_reduce avg %g on @dp : tensor<8x6xf32>
  %twice = arith.addf %a, %a : tensor<8x6xf32>
  // expected-error @below {{its averaged gradient, or what the step makes of it on the way to the update, is also read by 'arith.addf'}}
  %p1, %m1, %q1 = distopt.dion_update %p, %a state(%m, %q) lr(%lr) step(%t)
      : tensor<8x6xf32> [tensor<8x6xf32>, tensor<6x6xf32>], f64
  return %p1, %twice : tensor<8x6xf32>, tensor<8x6xf32>
}

// -----

distopt.process_group @dp size 4
func.func @wire(%p: tensor<8x6xf32> {distopt.role = "param", distopt.name = "w"},
                %g: tensor<8x6xf32> {distopt.role = "grad", distopt.name = "w"},
                %m: tensor<8x6xf32> {distopt.role = "state", distopt.name = "w.momentum"},
                %q: tensor<6x6xf32>, %lr: f64, %t: i64) -> tensor<8x6xf32> {
  %a = distopt.all_reduce avg %g on @dp wire bf16 : tensor<8x6xf32>
  // expected-error @below {{its gradient's reduction sends another type on the wire (run the sync before --distopt-widen-reductions)}}
  %p1, %m1, %q1 = distopt.dion_update %p, %a state(%m, %q) lr(%lr) step(%t)
      : tensor<8x6xf32> [tensor<8x6xf32>, tensor<6x6xf32>], f64
  return %p1 : tensor<8x6xf32>
}

// -----

distopt.process_group @dp size 4
func.func @bucketed(%p: tensor<8x6xf32> {distopt.role = "param", distopt.name = "w"},
                    %g: tensor<8x6xf32> {distopt.role = "grad", distopt.name = "w"},
                    %m: tensor<8x6xf32> {distopt.role = "state", distopt.name = "w.momentum"},
                    %q: tensor<6x6xf32>, %lr: f64, %t: i64) -> tensor<8x6xf32> {
  %b = distopt.bucket_pack %g : tensor<8x6xf32> -> tensor<48xf32>
  %r = distopt.all_reduce avg %b on @dp : tensor<48xf32>
  %a = distopt.bucket_unpack %r : tensor<48xf32> -> tensor<8x6xf32>
  // expected-error @below {{its gradient is reduced in a bucket (run the sync before --distopt-bucketize, as the pipeline does)}}
  %p1, %m1, %q1 = distopt.dion_update %p, %a state(%m, %q) lr(%lr) step(%t)
      : tensor<8x6xf32> [tensor<8x6xf32>, tensor<6x6xf32>], f64
  return %p1 : tensor<8x6xf32>
}

// -----

distopt.process_group @dp size 4
func.func @momentum_computed(%p: tensor<8x6xf32> {distopt.role = "param", distopt.name = "w"},
                             %g: tensor<8x6xf32> {distopt.role = "grad", distopt.name = "w"},
                             %m: tensor<8x6xf32>,
                             %q: tensor<6x6xf32>, %lr: f64, %t: i64) -> tensor<8x6xf32> {
  %a = distopt.all_reduce avg %g on @dp : tensor<8x6xf32>
  // expected-error @below {{its momentum is not a state argument of the step, which it must be to become each rank's own}}
  %p1, %m1, %q1 = distopt.dion_update %p, %a state(%m, %q) lr(%lr) step(%t)
      : tensor<8x6xf32> [tensor<8x6xf32>, tensor<6x6xf32>], f64
  return %p1 : tensor<8x6xf32>
}

// -----

// What the step makes of the mean on the way to the update is the rank's
// own too: an overflow check after the unscale reads it, agreed over the
// group (as the importer writes accumulation: a division by the
// micro-batches, then the check); another reader there is refused.
// CHECK-LABEL: func.func @check_after_link
// CHECK: %[[U:.*]] = distopt.unscale %arg1 by
// CHECK: distopt.all_finite %[[U]] on @dp
distopt.process_group @dp size 2
func.func @check_after_link(%p: tensor<8x6xf32> {distopt.role = "param", distopt.name = "w"},
                            %g: tensor<8x6xf32> {distopt.role = "grad", distopt.name = "w"},
                            %m: tensor<8x6xf32> {distopt.role = "state", distopt.name = "w.momentum"},
                            %q: tensor<6x6xf32>, %s: f32, %lr: f64, %t: i64) -> (tensor<8x6xf32>, i1) {
  %a = distopt.all_reduce avg %g on @dp : tensor<8x6xf32>
  %u = distopt.unscale %a by %s : tensor<8x6xf32>, f32
  %ok = distopt.all_finite %u : tensor<8x6xf32>
  %p1, %m1, %q1 = distopt.dion_update %p, %u state(%m, %q) lr(%lr) step(%t)
      : tensor<8x6xf32> [tensor<8x6xf32>, tensor<6x6xf32>], f64
  return %p1, %ok : tensor<8x6xf32>, i1
}

// -----

distopt.process_group @dp size 2
func.func @reader_after_link(%p: tensor<8x6xf32> {distopt.role = "param", distopt.name = "w"},
                             %g: tensor<8x6xf32> {distopt.role = "grad", distopt.name = "w"},
                             %m: tensor<8x6xf32> {distopt.role = "state", distopt.name = "w.momentum"},
                             %q: tensor<6x6xf32>, %s: f32, %lr: f64, %t: i64) -> (tensor<8x6xf32>, tensor<8x6xf32>) {
  %a = distopt.all_reduce avg %g on @dp : tensor<8x6xf32>
  %u = distopt.unscale %a by %s : tensor<8x6xf32>, f32
  %twice = arith.addf %u, %u : tensor<8x6xf32>
  // expected-error @below {{its averaged gradient, or what the step makes of it on the way to the update, is also read by 'arith.addf'}}
  %p1, %m1, %q1 = distopt.dion_update %p, %u state(%m, %q) lr(%lr) step(%t)
      : tensor<8x6xf32> [tensor<8x6xf32>, tensor<6x6xf32>], f64
  return %p1, %twice : tensor<8x6xf32>, tensor<8x6xf32>
}

// -----

// Two updates of one mean: each would make it its own.
distopt.process_group @dp size 2
func.func @shared_mean(%p: tensor<8x6xf32> {distopt.role = "param", distopt.name = "w"},
                       %g: tensor<8x6xf32> {distopt.role = "grad", distopt.name = "w"},
                       %m: tensor<8x6xf32> {distopt.role = "state", distopt.name = "w.momentum"},
                       %p2: tensor<8x6xf32> {distopt.role = "param", distopt.name = "v"},
                       %m2: tensor<8x6xf32> {distopt.role = "state", distopt.name = "v.momentum"},
                       %q: tensor<6x6xf32>, %s: f32, %lr: f64, %t: i64) -> (tensor<8x6xf32>, tensor<8x6xf32>) {
  %a = distopt.all_reduce avg %g on @dp : tensor<8x6xf32>
  %u = distopt.unscale %a by %s : tensor<8x6xf32>, f32
  // expected-error @below {{is also read by 'distopt.dion_update'}}
  %p1, %m1, %q1 = distopt.dion_update %p, %u state(%m, %q) lr(%lr) step(%t)
      : tensor<8x6xf32> [tensor<8x6xf32>, tensor<6x6xf32>], f64
  // expected-error @below {{is also read by 'distopt.dion_update'}}
  %p3, %m3, %q3 = distopt.dion_update %p2, %u state(%m2, %q) lr(%lr) step(%t)
      : tensor<8x6xf32> [tensor<8x6xf32>, tensor<6x6xf32>], f64
  return %p1, %p3 : tensor<8x6xf32>, tensor<8x6xf32>
}

// -----

distopt.process_group @dp size 2
func.func @nested(%p: tensor<8x6xf32> {distopt.role = "param", distopt.name = "w"},
                  %g: tensor<8x6xf32> {distopt.role = "grad", distopt.name = "w"},
                  %m: tensor<8x6xf32> {distopt.role = "state", distopt.name = "w.momentum"},
                  %q: tensor<6x6xf32>, %c: i1, %lr: f64, %t: i64) -> tensor<8x6xf32> {
  %a = distopt.all_reduce avg %g on @dp : tensor<8x6xf32>
  %r = scf.if %c -> tensor<8x6xf32> {
    // expected-error @below {{it is nested in 'scf.if': the factors' all-reduces must run where both run, on every rank}}
    %p1, %m1, %q1 = distopt.dion_update %p, %a state(%m, %q) lr(%lr) step(%t)
        : tensor<8x6xf32> [tensor<8x6xf32>, tensor<6x6xf32>], f64
    scf.yield %p1 : tensor<8x6xf32>
  } else {
    scf.yield %p : tensor<8x6xf32>
  }
  return %r : tensor<8x6xf32>
}

// -----

// One overflow check over updates synced over two groups.
distopt.process_group @dp size 4
distopt.process_group @pairs size 2 ranks dense<[[0, 1], [2, 3]]> : tensor<2x2xi64>
func.func @two_groups(%p: tensor<8x6xf32> {distopt.role = "param", distopt.name = "w"},
                      %g: tensor<8x6xf32> {distopt.role = "grad", distopt.name = "w"},
                      %m: tensor<8x6xf32> {distopt.role = "state", distopt.name = "w.momentum"},
                      %p2: tensor<8x6xf32> {distopt.role = "param", distopt.name = "v"},
                      %g2: tensor<8x6xf32> {distopt.role = "grad", distopt.name = "v"},
                      %m2: tensor<8x6xf32> {distopt.role = "state", distopt.name = "v.momentum"},
                      %q: tensor<6x6xf32>, %lr: f64, %t: i64) -> (tensor<8x6xf32>, tensor<8x6xf32>, i1) {
  %a = distopt.all_reduce avg %g on @dp : tensor<8x6xf32>
  %b = distopt.all_reduce avg %g2 on @pairs : tensor<8x6xf32>
  // expected-error @below {{--distopt-dion-low-rank-sync: this overflow check reads gradients of Dion updates synced over @dp and @pairs, which it cannot agree over at once}}
  %ok = distopt.all_finite %a, %b : tensor<8x6xf32>, tensor<8x6xf32>
  %p1, %m1, %q1 = distopt.dion_update %p, %a state(%m, %q) lr(%lr) step(%t)
      : tensor<8x6xf32> [tensor<8x6xf32>, tensor<6x6xf32>], f64
  %p3, %m3, %q3 = distopt.dion_update %p2, %b state(%m2, %q) lr(%lr) step(%t)
      : tensor<8x6xf32> [tensor<8x6xf32>, tensor<6x6xf32>], f64
  return %p1, %p3, %ok : tensor<8x6xf32>, tensor<8x6xf32>, i1
}

// -----

// After --distopt-overlap-collectives the reduction is started and waited:
// the sync runs first.
distopt.process_group @dp size 2
func.func @async(%p: tensor<8x6xf32> {distopt.role = "param", distopt.name = "w"},
                 %g: tensor<8x6xf32> {distopt.role = "grad", distopt.name = "w"},
                 %m: tensor<8x6xf32> {distopt.role = "state", distopt.name = "w.momentum"},
                 %q: tensor<6x6xf32>, %lr: f64, %t: i64) -> tensor<8x6xf32> {
  %token = distopt.all_reduce_start avg %g on @dp : tensor<8x6xf32> -> !distopt.token<tensor<8x6xf32>>
  %a = distopt.wait %token : !distopt.token<tensor<8x6xf32>>
  // expected-error @below {{its gradient comes from 'distopt.wait' (run the sync before --distopt-overlap-collectives and --distopt-powersgd, as the pipeline does)}}
  %p1, %m1, %q1 = distopt.dion_update %p, %a state(%m, %q) lr(%lr) step(%t)
      : tensor<8x6xf32> [tensor<8x6xf32>, tensor<6x6xf32>], f64
  return %p1 : tensor<8x6xf32>
}
