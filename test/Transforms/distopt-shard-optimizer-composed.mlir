// Loss scaling and clipping under ZeRO: the overflow check and the global
// norm are rebuilt from the gradient chunks (each agreed over the group
// with one scalar reduction), the updates keep their old chunks on a
// skipped step, and the loss scale's update reads the sharded check.
// RUN: distopt-translate --import-param-spec %S/Inputs/composed.json \
// RUN:   | distopt-opt --distopt-fuse-div-into-allreduce --distopt-shard-optimizer=stage=2 --distopt-verify-collectives \
// RUN:   | FileCheck %s
// RUN: distopt-translate --import-param-spec %S/Inputs/composed.json \
// RUN:   | distopt-opt --distopt-fuse-div-into-allreduce --distopt-shard-optimizer=stage=1 \
// RUN:   | FileCheck %s --check-prefix=STAGE1
// RUN: distopt-opt %s -split-input-file --distopt-shard-optimizer=stage=2 -verify-diagnostics
// RUN: distopt-translate --import-param-spec %examples/specs/gpt2-small-recipe.json \
// RUN:   | distopt-opt --distopt-pipeline=zero-stage=2 --distopt-report -o /dev/null \
// RUN:   | FileCheck %s --check-prefix=GPT2
// RUN: distopt-translate --import-param-spec %S/Inputs/composed.json \
// RUN:   | distopt-opt --distopt-fuse-div-into-allreduce --distopt-shard-optimizer=stage=2 --distopt-report -o /dev/null \
// RUN:   | FileCheck %s --check-prefix=REPORT
// RUN: distopt-translate --import-param-spec %S/Inputs/composed.json \
// RUN:   | distopt-opt --distopt-pipeline=zero-stage=2 | FileCheck %s --check-prefix=OVERLAP
// A bf16 gradient on 257 ranks is divided in f32 (257 is not a bf16
// number) and rounded back; left unfused, that division is rebuilt on the
// chunk as it was, and the check reads the divided chunk, as unsharded.
// RUN: sed 's/"world_size": 4/"world_size": 257/' %S/Inputs/composed.json > %t.257.json
// RUN: distopt-translate --import-param-spec %t.257.json \
// RUN:   | distopt-opt --distopt-shard-optimizer=stage=2 --distopt-verify-collectives \
// RUN:   | FileCheck %s --check-prefix=W257
// RUN: distopt-translate --import-param-spec %S/Inputs/composed-greedy.json \
// RUN:   | distopt-opt --distopt-fuse-div-into-allreduce --distopt-shard-optimizer="stage=2 strategy=greedy" --distopt-verify-collectives \
// RUN:   | FileCheck %s --check-prefix=GREEDY
//
// W257-LABEL: func.func @step
// W257:      %[[C:.*]] = distopt.reduce_scatter sum %{{.*}} on @world : tensor<4112xbf16> -> tensor<16xbf16>
// W257:      %[[E:.*]] = arith.extf %[[C]] : tensor<16xbf16> to tensor<16xf32>
// W257-NEXT: %[[N:.*]] = arith.constant dense<2.570000e+02> : tensor<16xf32>
// W257-NEXT: %[[D:.*]] = arith.divf %[[E]], %[[N]] : tensor<16xf32>
// W257-NEXT: %[[T:.*]] = arith.truncf %[[D]] : tensor<16xf32> to tensor<16xbf16>
// W257:      distopt.all_finite %[[T]], %{{.*}} on @world
// W257-NEXT: %[[M:.*]] = arith.extf %[[T]] : tensor<16xbf16> to tensor<16xf32>
// W257-NEXT: distopt.unscale %[[M]]
//
// Greedy at stage 2, 3 ranks: b (40 elements) goes to rank 0, w (8x4) to
// rank 1, c (8) and the 0-d s to rank 2. Each gradient is reduced to its
// owner, who copies it into its rank's buffer of reduced gradients (40
// elements, the most loaded rank's; zeros after its last tensor). The check
// and the norm read those buffers, the norm placing each tensor at owner x
// 40 + offset; each owner updates from its slot of the clipped buffer.
// GREEDY-LABEL: func.func @step
// GREEDY-NOT: distopt.all_reduce
// GREEDY: %[[RW:.*]] = distopt.reduce avg %{{.*}} on @world root 1 : tensor<8x4xf32>
// GREEDY: %[[RB:.*]] = distopt.reduce avg %{{.*}} on @world root 0 : tensor<40xf32>
// GREEDY: %[[RC:.*]] = distopt.reduce avg %{{.*}} on @world root 2 : tensor<8xf32>
// GREEDY: %[[RS:.*]] = distopt.reduce avg %{{.*}} on @world root 2 : tensor<f32>
// GREEDY: %[[E:.*]] = tensor.empty() : tensor<40xf32>
// GREEDY: %[[G1:.*]] = distopt.owned_by @world rank 1 otherwise(%[[E]])
// GREEDY-NEXT: %[[FW:.*]] = tensor.collapse_shape %[[RW]] {{\[\[}}0, 1]] : tensor<8x4xf32> into tensor<32xf32>
// GREEDY-NEXT: tensor.insert_slice %[[FW]] into %[[E]][0] [32] [1]
// GREEDY: %[[G2:.*]] = distopt.owned_by @world rank 0 otherwise(%[[G1]])
// GREEDY-NEXT: tensor.insert_slice %[[RB]] into %[[G1]][0] [40] [1]
// GREEDY: %[[G3:.*]] = distopt.owned_by @world rank 2 otherwise(%[[G2]])
// GREEDY-NEXT: tensor.insert_slice %[[RC]] into %[[G2]][0] [8] [1]
// GREEDY: %[[G4:.*]] = distopt.owned_by @world rank 2 otherwise(%[[G3]])
// GREEDY-NEXT: %[[FS:.*]] = tensor.expand_shape %[[RS]] [] output_shape [1] : tensor<f32> into tensor<1xf32>
// GREEDY-NEXT: tensor.insert_slice %[[FS]] into %[[G3]][8] [1] [1]
// GREEDY: %[[G5:.*]] = distopt.owned_by @world rank 1 otherwise(%[[G4]])
// GREEDY-NEXT: %[[Z1:.*]] = arith.constant dense<0.000000e+00> : tensor<8xf32>
// GREEDY-NEXT: tensor.insert_slice %[[Z1]] into %[[G4]][32] [8] [1]
// GREEDY: %[[G6:.*]] = distopt.owned_by @world rank 2 otherwise(%[[G5]])
// GREEDY-NEXT: %[[Z2:.*]] = arith.constant dense<0.000000e+00> : tensor<31xf32>
// GREEDY-NEXT: tensor.insert_slice %[[Z2]] into %[[G5]][9] [31] [1]
// GREEDY: %[[OK:.*]] = distopt.all_finite %[[G6]] on @world : tensor<40xf32>
// GREEDY-NEXT: %[[U:.*]] = distopt.unscale %[[G6]]
// GREEDY-NEXT: %[[C:.*]], %[[NORM:.*]] = distopt.clip_grad_norm %[[U]] max_norm 1.000000e+00 on @world {tensor_bounds = [array<i64: 0, 40, 40, 72, 80, 88, 88, 89>]}
// GREEDY-NEXT: distopt.owned_by @world rank 1
// GREEDY-NEXT: tensor.extract_slice %[[C]][0] [32] [1]
// GREEDY: distopt.adamw_update
// GREEDY: arith.select %[[OK]]
// GREEDY: distopt.broadcast %{{.*}} on @world root 1 : tensor<8x4xf32>
// GREEDY-NEXT: distopt.owned_by @world rank 0
// GREEDY-NEXT: tensor.extract_slice %[[C]][0] [40] [1]
// GREEDY: distopt.owned_by @world rank 2
// GREEDY-NEXT: tensor.extract_slice %[[C]][0] [8] [1]
// GREEDY: distopt.owned_by @world rank 2
// GREEDY-NEXT: tensor.extract_slice %[[C]][8] [1] [1]
// GREEDY: distopt.loss_scale_update %{{.*}}, %{{.*}}, %[[OK]]
// GREEDY: return {{.*}}%[[NORM]]

// CHECK-LABEL: func.func @step
// CHECK-NOT: distopt.all_reduce
// CHECK: %[[GW:.*]] = distopt.reduce_scatter avg %{{.*}} on @world : tensor<64xbf16> -> tensor<16xbf16>
// CHECK: %[[GB:.*]] = distopt.reduce_scatter avg %{{.*}} on @world : tensor<64xf32> -> tensor<16xf32>
// CHECK: %[[OK:.*]] = distopt.all_finite %[[GW]], %[[GB]] on @world : tensor<16xbf16>, tensor<16xf32>
// CHECK: %[[EW:.*]] = arith.extf %[[GW]] : tensor<16xbf16> to tensor<16xf32>
// CHECK: %[[UW:.*]] = distopt.unscale %[[EW]] by %[[SCALE:[^ ]*]] : tensor<16xf32>, f32
// CHECK: %[[UB:.*]] = distopt.unscale %[[GB]] by %[[SCALE]]
// CHECK: %[[C:.*]]:2, %[[NORM:.*]] = distopt.clip_grad_norm %[[UW]], %[[UB]] max_norm 1.000000e+00 on @world
// CHECK: %[[NEW:.*]], %{{.*}}:2 = distopt.adamw_update %[[MAIN:[^,]*]], %[[C]]#0
// CHECK: %[[KEPT:.*]] = arith.select %[[OK]], %[[NEW]], %[[MAIN]] : tensor<16xf32>
// CHECK: arith.truncf %[[KEPT]] : tensor<16xf32> to tensor<16xbf16>
// CHECK: distopt.adamw_update %{{.*}}, %[[C]]#1
// CHECK: distopt.loss_scale_update %[[SCALE]], %{{.*}}, %[[OK]]
// CHECK: return {{.*}}%[[NORM]]
//
// What composing costs on the wire: one reduction beside the gradients'
// reduce-scatters, of an f64 partial sum per tensor and the overflow
// check's f64 flag (the lowering fuses the check into the norm's).
// REPORT: reduce_scatter 2 384
// REPORT-NEXT: clip_grad_norm 1 24
// REPORT-NOT: all_finite
//
// GPT-2's recipe: two layouts (the decayed matrices, the rest), one norm
// over all 148 tensors.
// GPT2: reduce_scatter 2
// GPT2-NEXT: clip_grad_norm 1 1184
//
// The parameters are packed before the check and the norm read the
// reduced chunks: the packing is work for both reduce-scatters to overlap
// with (--distopt-overlap-collectives), as in the step without them.
// OVERLAP: distopt.reduce_scatter_start
// OVERLAP: distopt.reduce_scatter_start
// OVERLAP: distopt.bucket_pack
// OVERLAP: distopt.wait
// OVERLAP: distopt.wait
// OVERLAP: distopt.all_finite
// OVERLAP: distopt.clip_grad_norm
//
// Stage 1: the chunks are slices of the all-reduced gradients.
// STAGE1: distopt.all_reduce avg
// STAGE1: distopt.all_reduce avg
// STAGE1: distopt.shard_slice
// STAGE1: distopt.shard_slice
// STAGE1: distopt.all_finite {{.*}} on @world
// STAGE1: distopt.clip_grad_norm {{.*}} on @world

distopt.process_group @dp size 2
// Clipping over a gradient that no update being sharded reads: its norm
// cannot be rebuilt from the chunks.
func.func @clip_foreign(%p: tensor<4xf32> {distopt.role = "param", distopt.name = "p"},
                        %g: tensor<4xf32> {distopt.role = "grad", distopt.name = "p"},
                        %x: tensor<4xf32>, %lr: f32, %t: i64) -> (tensor<4xf32>, tensor<4xf32>) {
  %r = distopt.all_reduce avg %g on @dp : tensor<4xf32>
  // expected-error @+1 {{cannot shard 'distopt.clip_grad_norm': 1 of its 2 inputs are not gradients of the updates being sharded}}
  %c:2, %n = distopt.clip_grad_norm %r, %x max_norm 1.0 : tensor<4xf32>, tensor<4xf32> -> f32
  %p1 = distopt.sgd_update %p, %c#0 lr(%lr) step(%t) : tensor<4xf32>, f32
  return %p1, %c#1 : tensor<4xf32>, tensor<4xf32>
}

// -----

distopt.process_group @dp size 2
// Kept under a condition other than the gradient's overflow check.
func.func @other_condition(%p: tensor<4xf32> {distopt.role = "param", distopt.name = "p"},
                           %g: tensor<4xf32> {distopt.role = "grad", distopt.name = "p"},
                           %keep: i1, %lr: f32, %t: i64) -> tensor<4xf32> {
  %r = distopt.all_reduce avg %g on @dp : tensor<4xf32>
  // expected-error @+1 {{cannot shard 'distopt.sgd_update': its results are kept by arith.select under a condition other than the distopt.all_finite of its gradient}}
  %p1 = distopt.sgd_update %p, %r lr(%lr) step(%t) : tensor<4xf32>, f32
  %p2 = arith.select %keep, %p1, %p : tensor<4xf32>
  return %p2 : tensor<4xf32>
}

// -----

distopt.process_group @dp size 2
// Unscaled by a value computed in the step: sharding moves the unscaling
// to the end, where that value may not be available.
func.func @computed_scale(%p: tensor<4xf32> {distopt.role = "param", distopt.name = "p"},
                          %g: tensor<4xf32> {distopt.role = "grad", distopt.name = "p"},
                          %s: f32, %lr: f32, %t: i64) -> tensor<4xf32> {
  %r = distopt.all_reduce avg %g on @dp : tensor<4xf32>
  %s2 = arith.mulf %s, %s : f32
  %u = distopt.unscale %r by %s2 : tensor<4xf32>, f32
  // expected-error @+1 {{cannot shard 'distopt.sgd_update': its gradient passes through 'distopt.unscale', whose operand #1 is neither a step argument nor a constant}}
  %p1 = distopt.sgd_update %p, %u lr(%lr) step(%t) : tensor<4xf32>, f32
  return %p1 : tensor<4xf32>
}

// -----

distopt.process_group @dp size 2
// The overflow check reads a value no update reduces: its rebuilt form
// would no longer check it.
func.func @finite_foreign(%p: tensor<4xf32> {distopt.role = "param", distopt.name = "p"},
                          %gp: tensor<4xf32> {distopt.role = "grad", distopt.name = "p"},
                          %x: tensor<8xf32>, %lr: f32, %t: i64) -> (tensor<4xf32>, i1) {
  %rp = distopt.all_reduce avg %gp on @dp : tensor<4xf32>
  // expected-error @+1 {{cannot shard 'distopt.all_finite': 1 of its 2 inputs are not gradients of the updates being sharded}}
  %ok = distopt.all_finite %rp, %x : tensor<4xf32>, tensor<8xf32>
  %p1 = distopt.sgd_update %p, %rp lr(%lr) step(%t) : tensor<4xf32>, f32
  %p2 = arith.select %ok, %p1, %p : tensor<4xf32>
  return %p2, %ok : tensor<4xf32>, i1
}

// -----

distopt.process_group @dp size 2
// Two updates of one reduction (through one clipping): each would pack it.
func.func @shared_reduction(%p: tensor<4xf32> {distopt.role = "param", distopt.name = "p"},
                            %q: tensor<4xf32> {distopt.role = "param", distopt.name = "q"},
                            %gp: tensor<4xf32> {distopt.role = "grad", distopt.name = "p"},
                            %lr: f32, %t: i64) -> (tensor<4xf32>, tensor<4xf32>, f32) {
  %rp = distopt.all_reduce avg %gp on @dp : tensor<4xf32>
  %c:2, %n = distopt.clip_grad_norm %rp, %rp max_norm 1.0 : tensor<4xf32>, tensor<4xf32> -> f32
  %p1 = distopt.sgd_update %p, %c#0 lr(%lr) step(%t) : tensor<4xf32>, f32
  // expected-error @+1 {{cannot shard 'distopt.sgd_update': its gradient comes from the same distopt.all_reduce as another update's}}
  %q1 = distopt.sgd_update %q, %c#1 lr(%lr) step(%t) : tensor<4xf32>, f32
  return %p1, %q1, %n : tensor<4xf32>, tensor<4xf32>, f32
}

// -----

distopt.process_group @a size 2
distopt.process_group @b size 4
// One norm over gradients reduced over different groups: the chunks of
// each are spread over other ranks.
func.func @two_groups(%p: tensor<4xf32> {distopt.role = "param", distopt.name = "p"},
                      %q: tensor<64xf32> {distopt.role = "param", distopt.name = "q"},
                      %gp: tensor<4xf32> {distopt.role = "grad", distopt.name = "p"},
                      %gq: tensor<64xf32> {distopt.role = "grad", distopt.name = "q"},
                      %lr: f32, %t: i64) -> (tensor<4xf32>, tensor<64xf32>, f32) {
  %rp = distopt.all_reduce avg %gp on @a : tensor<4xf32>
  %rq = distopt.all_reduce avg %gq on @b : tensor<64xf32>
  // expected-error @+1 {{cannot shard 'distopt.clip_grad_norm': it spans gradients reduced over different process groups (@a and @b)}}
  %c:2, %n = distopt.clip_grad_norm %rp, %rq max_norm 1.0 : tensor<4xf32>, tensor<64xf32> -> f32
  %p1 = distopt.sgd_update %p, %c#0 lr(%lr) step(%t) : tensor<4xf32>, f32
  %q1 = distopt.sgd_update %q, %c#1 lr(%lr) step(%t) : tensor<64xf32>, f32
  return %p1, %q1, %n : tensor<4xf32>, tensor<64xf32>, f32
}

// -----

distopt.process_group @dp size 2
// expected-error @+1 {{cannot shard: @blocks has 2 blocks; --distopt-shard-optimizer takes a step of one block}}
func.func @blocks(%p: tensor<4xf32> {distopt.role = "param", distopt.name = "p"},
                  %gp: tensor<4xf32> {distopt.role = "grad", distopt.name = "p"},
                  %lr: f32, %t: i64) -> tensor<4xf32> {
  %rp = distopt.all_reduce avg %gp on @dp : tensor<4xf32>
  %p1 = distopt.sgd_update %p, %rp lr(%lr) step(%t) : tensor<4xf32>, f32
  cf.br ^next
^next:
  return %p1 : tensor<4xf32>
}

// -----

distopt.process_group @dp size 2
// The unscaled gradient is read besides the clip: the clip's chunk would
// not be what the other reader sees.
func.func @clipped_other_use(%p: tensor<4xf32> {distopt.role = "param", distopt.name = "p"},
                             %g: tensor<4xf32> {distopt.role = "grad", distopt.name = "p"},
                             %s: f32, %lr: f32, %t: i64) -> (tensor<4xf32>, tensor<4xf32>) {
  %r = distopt.all_reduce avg %g on @dp : tensor<4xf32>
  %u = distopt.unscale %r by %s : tensor<4xf32>, f32
  %c, %n = distopt.clip_grad_norm %u max_norm 1.0 : tensor<4xf32> -> f32
  // expected-error @+1 {{cannot shard 'distopt.sgd_update': the gradient it clips has other uses than the clipping}}
  %p1 = distopt.sgd_update %p, %c lr(%lr) step(%t) : tensor<4xf32>, f32
  return %p1, %u : tensor<4xf32>, tensor<4xf32>
}

// -----

distopt.process_group @dp size 2
// A conversion between the clip and the update: the chain is reduction,
// division, element-wise ops, clip, in this order, or it is not sharded.
func.func @converted_after_clip(%p: tensor<4xf32> {distopt.role = "param", distopt.name = "p"},
                                %g: tensor<4xbf16> {distopt.role = "grad", distopt.name = "p"},
                                %lr: f32, %t: i64) -> tensor<4xf32> {
  %r = distopt.all_reduce avg %g on @dp : tensor<4xbf16>
  %c, %n = distopt.clip_grad_norm %r max_norm 1.0 : tensor<4xbf16> -> f32
  %e = arith.extf %c : tensor<4xbf16> to tensor<4xf32>
  // expected-error @+1 {{cannot shard 'distopt.sgd_update': its gradient comes from 'distopt.clip_grad_norm'}}
  %p1 = distopt.sgd_update %p, %e lr(%lr) step(%t) : tensor<4xf32>, f32
  return %p1 : tensor<4xf32>
}
