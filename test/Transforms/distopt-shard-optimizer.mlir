// ZeRO stages on imported steps: the structure of each stage and strategy,
// the ZeRO paper's bytes per parameter for GPT-2 small (8 ranks) and
// LLaMA-7B (64 ranks), and the diagnostics.
//
// RUN: distopt-translate --import-param-spec %S/Inputs/mixed.json \
// RUN:   | distopt-opt --distopt-fuse-div-into-allreduce --distopt-shard-optimizer=stage=1 --distopt-verify-collectives \
// RUN:   | FileCheck %s --check-prefix=FLAT1
// RUN: distopt-translate --import-param-spec %S/Inputs/mixed.json \
// RUN:   | distopt-opt --distopt-fuse-div-into-allreduce --distopt-shard-optimizer=stage=2 --distopt-verify-collectives \
// RUN:   | FileCheck %s --check-prefix=FLAT2
// RUN: distopt-translate --import-param-spec %S/Inputs/mixed.json \
// RUN:   | distopt-opt --distopt-fuse-div-into-allreduce --distopt-shard-optimizer=stage=3 --distopt-verify-collectives \
// RUN:   | FileCheck %s --check-prefix=FLAT3
// RUN: distopt-translate --import-param-spec %S/Inputs/sgd3.json \
// RUN:   | distopt-opt --distopt-fuse-div-into-allreduce --distopt-shard-optimizer="stage=1 strategy=greedy" --distopt-verify-collectives \
// RUN:   | FileCheck %s --check-prefix=GREEDY1
// RUN: distopt-translate --import-param-spec %S/Inputs/sgd3.json \
// RUN:   | distopt-opt --distopt-fuse-div-into-allreduce --distopt-shard-optimizer="stage=2 strategy=greedy" --distopt-verify-collectives \
// RUN:   | FileCheck %s --check-prefix=GREEDY2
// RUN: distopt-translate --import-param-spec %S/Inputs/mixed.json \
// RUN:   | distopt-opt --distopt-fuse-div-into-allreduce --distopt-widen-reductions=dtype=f64 --distopt-shard-optimizer=stage=2 --distopt-verify-collectives \
// RUN:   | FileCheck %s --check-prefix=F64
//
// RUN: distopt-translate --import-param-spec %examples/specs/gpt2-small.json \
// RUN:   | distopt-opt --distopt-fuse-div-into-allreduce --distopt-report -o /dev/null | FileCheck %s --check-prefix=GPT2-DP
// RUN: distopt-translate --import-param-spec %examples/specs/gpt2-small.json \
// RUN:   | distopt-opt --distopt-fuse-div-into-allreduce --distopt-shard-optimizer=stage=1 --distopt-report -o /dev/null | FileCheck %s --check-prefix=GPT2-Z1
// RUN: distopt-translate --import-param-spec %examples/specs/gpt2-small.json \
// RUN:   | distopt-opt --distopt-fuse-div-into-allreduce --distopt-shard-optimizer=stage=2 --distopt-report -o /dev/null | FileCheck %s --check-prefix=GPT2-Z2
// RUN: distopt-translate --import-param-spec %examples/specs/gpt2-small.json \
// RUN:   | distopt-opt --distopt-fuse-div-into-allreduce --distopt-shard-optimizer=stage=3 --distopt-report -o /dev/null | FileCheck %s --check-prefix=GPT2-Z3
// RUN: distopt-translate --import-param-spec %examples/specs/llama-7b.json \
// RUN:   | distopt-opt --distopt-fuse-div-into-allreduce --distopt-shard-optimizer=stage=1 --distopt-report -o /dev/null | FileCheck %s --check-prefix=LLAMA-Z1
// RUN: distopt-translate --import-param-spec %examples/specs/llama-7b.json \
// RUN:   | distopt-opt --distopt-fuse-div-into-allreduce --distopt-shard-optimizer=stage=2 --distopt-report -o /dev/null | FileCheck %s --check-prefix=LLAMA-Z2
// RUN: distopt-translate --import-param-spec %examples/specs/llama-7b.json \
// RUN:   | distopt-opt --distopt-fuse-div-into-allreduce --distopt-shard-optimizer=stage=3 --distopt-report -o /dev/null | FileCheck %s --check-prefix=LLAMA-Z3
//
// RUN: not distopt-opt %s -split-input-file --distopt-shard-optimizer=stage=4 2>&1 | FileCheck %s --check-prefix=STAGE
// RUN: not distopt-opt %s -split-input-file --distopt-shard-optimizer=strategy=random 2>&1 | FileCheck %s --check-prefix=STRATEGY
// RUN: not distopt-opt %s -split-input-file --distopt-shard-optimizer=alignment=2 2>&1 | FileCheck %s --check-prefix=ALIGN
// RUN: not distopt-opt %s -split-input-file --distopt-shard-optimizer="stage=3 strategy=greedy" 2>&1 | FileCheck %s --check-prefix=GREEDY3
// RUN: distopt-opt %s -split-input-file --distopt-shard-optimizer -verify-diagnostics
//
// Stage 3 where the step itself uses the parameters (a forward pass): they
// are gathered from the shards just before their first use.
// RUN: distopt-opt %S/Inputs/forward.mlir --distopt-shard-optimizer=stage=3 --distopt-verify-collectives | FileCheck %s --check-prefix=USE3
// USE3-LABEL: func.func @forward
// USE3-SAME: (%[[X:[^:]*]]: tensor<4xf32>, {{.*}}, %[[SHARD:[^:]*]]: tensor<16xf32> {{{.*}}distopt.name = "flat0.param"
// USE3: %[[ALL:.*]] = distopt.all_gather %[[SHARD]] on @dp : tensor<16xf32> -> tensor<32xf32>
// USE3: %[[P:.*]]:2 = distopt.bucket_unpack %[[ALL]] : tensor<32xf32> -> tensor<4x4xf32>, tensor<6xf32>
// USE3: linalg.matvec ins(%[[P]]#0, %[[X]]
// USE3: distopt.reduce_scatter avg
// USE3: distopt.sgd_update %[[SHARD]]
// USE3-NOT: distopt.all_gather
// USE3: return

// STAGE: --distopt-shard-optimizer: stage must be 1, 2 or 3, got 4
// STRATEGY: for the --strategy option: 'random' is not one of: flat, greedy
// GREEDY3: --distopt-shard-optimizer: strategy=greedy shards stages 1 and 2; use strategy=flat for stage 3
// ALIGN: --distopt-shard-optimizer: alignment must be a power of two of at least 4 bytes, got 2

// mixed.json: w (8x4 bf16, fp32 main) and b (8 f32) with AdamW on 4 ranks.
// Their updates differ (main parameters or not), so each gets a flat layout
// of 64 elements, 16 per rank.
//
// Stage 1: full gradients, this rank's chunk updated, parameters gathered
// (the model copy of w in bf16).
// Gradients reduced in f64 (--distopt-widen-reductions=dtype=f64): the
// f64 bucket is reduce-scattered and each shard rounded once, to the main
// parameter's f32 or the f32 parameter's own type.
// F64: %[[WB:.*]] = distopt.bucket_pack %{{.*}} : tensor<8x4xf64> -> tensor<64xf64>
// F64: %[[WS:.*]] = distopt.reduce_scatter avg %[[WB]] on @world : tensor<64xf64> -> tensor<16xf64>
// F64: %[[BB:.*]] = distopt.bucket_pack %{{.*}} : tensor<8xf64> -> tensor<64xf64>
// F64: %[[BS:.*]] = distopt.reduce_scatter avg %[[BB]] on @world : tensor<64xf64> -> tensor<16xf64>
// F64: %[[WT:.*]] = arith.truncf %[[WS]] : tensor<16xf64> to tensor<16xf32>
// F64: %[[BT:.*]] = arith.truncf %[[BS]] : tensor<16xf64> to tensor<16xf32>
// F64: distopt.adamw_update %{{.*}}, %[[WT]]
// F64: distopt.adamw_update %{{.*}}, %[[BT]]

// FLAT1-LABEL: func.func @step
// FLAT1-SAME: distopt.name = "flat0.main_param", distopt.role = "main_param", distopt.shard_of = 64
// FLAT1-SAME: -> (tensor<8x4xbf16> {distopt.name = "w", distopt.role = "param"}, tensor<8xf32> {distopt.name = "b", distopt.role = "param"}
// FLAT1: %[[RW:.*]] = distopt.all_reduce avg %{{.*}} : tensor<8x4xbf16>
// FLAT1: %[[PW:.*]] = distopt.bucket_pack %[[RW]] {alignment = 32 : i64} : tensor<8x4xbf16> -> tensor<64xbf16>
// FLAT1: %[[SW:.*]] = distopt.shard_slice %[[PW]] on @world : tensor<64xbf16> -> tensor<16xbf16>
// FLAT1: %[[GW:.*]] = arith.extf %[[SW]] : tensor<16xbf16> to tensor<16xf32>
// FLAT1: %[[NEW:.*]], %{{.*}}:2 = distopt.adamw_update %{{.*}}, %[[GW]] state(%{{.*}}, %{{.*}}) {{.*}} : tensor<16xf32>, f64
// FLAT1: %[[MODEL:.*]] = arith.truncf %[[NEW]] : tensor<16xf32> to tensor<16xbf16>
// FLAT1: %[[ALL:.*]] = distopt.all_gather %[[MODEL]] on @world : tensor<16xbf16> -> tensor<64xbf16>
// FLAT1: distopt.bucket_unpack %[[ALL]] {alignment = 32 : i64} : tensor<64xbf16> -> tensor<8x4xbf16>
// FLAT1: distopt.shard_slice %{{.*}} on @world : tensor<64xf32> -> tensor<16xf32>
// FLAT1: distopt.all_gather %{{.*}} on @world : tensor<16xf32> -> tensor<64xf32>
// FLAT1-NOT: distopt.all_reduce
// FLAT1: return
//
// Stage 2: one reduce_scatter of the packed local gradients per layout,
// every layout's before any update (what spans them, a global norm, needs
// them all).
// FLAT2-LABEL: func.func @step
// FLAT2-NOT: distopt.all_reduce
// FLAT2: %[[P:.*]] = distopt.bucket_pack %{{.*}} {alignment = 32 : i64} : tensor<8x4xbf16> -> tensor<64xbf16>
// FLAT2: distopt.reduce_scatter avg %[[P]] on @world : tensor<64xbf16> -> tensor<16xbf16>
// FLAT2: distopt.reduce_scatter avg %{{.*}} on @world : tensor<64xf32> -> tensor<16xf32>
// FLAT2: distopt.all_gather
// FLAT2-NOT: distopt.all_reduce
// FLAT2: return
//
// Stage 3: the parameters are shards too; nothing is gathered.
// FLAT3-LABEL: func.func @step
// FLAT3-NOT: distopt.role = "param"}
// FLAT3-SAME: tensor<16xbf16> {{{.*}}distopt.name = "flat0.param", distopt.role = "param"
// FLAT3-NOT: distopt.all_gather
// FLAT3: distopt.reduce_scatter
// FLAT3-NOT: distopt.all_gather
// FLAT3: return
//
// sgd3.json: a (4x4), b (10), c (6) with momentum SGD on 2 ranks. Largest
// first to the least loaded: a -> 0; b -> 1; c -> 1 at offset 10. Each rank
// holds a 16-element momentum buffer.
// GREEDY1-LABEL: func.func @step
// GREEDY1-SAME: %[[BUF:[^:]*]]: tensor<16xf32> {distopt.layout = [{name = "a", offset = 0 : i64, owner = 0 : i64, shape = array<i64: 4, 4>}, {name = "b", offset = 0 : i64, owner = 1 : i64, shape = array<i64: 10>}, {name = "c", offset = 10 : i64, owner = 1 : i64, shape = array<i64: 6>}], distopt.name = "owned0.momentum_buffer", distopt.role = "state"}
// GREEDY1: distopt.all_reduce avg
// GREEDY1: %[[A:.*]]:2 = distopt.owned_by @world rank 0 otherwise(%[[BUF]], %{{.*}}) : tensor<16xf32>, tensor<4x4xf32> {
// GREEDY1: tensor.extract_slice %[[BUF]][0] [16] [1]
// GREEDY1: distopt.sgd_update
// GREEDY1: distopt.broadcast %[[A]]#1 on @world root 0 : tensor<4x4xf32>
// GREEDY1: %[[B:.*]]:2 = distopt.owned_by @world rank 1 otherwise(%[[A]]#0, %{{.*}})
// GREEDY1: distopt.broadcast %[[B]]#1 on @world root 1 : tensor<10xf32>
// GREEDY1: %[[C:.*]]:2 = distopt.owned_by @world rank 1 otherwise(%[[B]]#0, %{{.*}})
// GREEDY1: tensor.extract_slice %[[B]]#0[10] [6] [1]
// GREEDY1: %[[BC:.*]] = distopt.broadcast %[[C]]#1 on @world root 1 : tensor<6xf32>
// GREEDY1: return %{{.*}}, %{{.*}}, %[[BC]], %[[C]]#0
//
// Stage 2: each gradient is reduced to its owner only.
// GREEDY2-LABEL: func.func @step
// GREEDY2-NOT: distopt.all_reduce
// GREEDY2: distopt.reduce avg %{{.*}} on @world root 0 : tensor<4x4xf32>
// GREEDY2: distopt.reduce avg %{{.*}} on @world root 1 : tensor<10xf32>
// GREEDY2: distopt.reduce avg %{{.*}} on @world root 1 : tensor<6xf32>
//
// ZeRO's model-state bytes per parameter with mixed-precision Adam:
// DP 16; stage 1 4 + 12/N; stage 2 2 + 14/N; stage 3 16/N.
// GPT2-DP: total {{[0-9]+}} 16.0000
// GPT2-Z1: total {{[0-9]+}} 5.5000
// GPT2-Z2: total {{[0-9]+}} 3.7500
// GPT2-Z3: total {{[0-9]+}} 2.0000
// LLAMA-Z1: total {{[0-9]+}} 4.1875
// LLAMA-Z2: total {{[0-9]+}} 2.2188
// LLAMA-Z3: total {{[0-9]+}} 0.2500

distopt.process_group @dp size 2
func.func @unreduced(%p: tensor<4xf32> {distopt.role = "param"}, %g: tensor<4xf32> {distopt.role = "grad"}, %lr: f32, %t: i64) -> tensor<4xf32> {
  // expected-error @+1 {{cannot shard 'distopt.sgd_update': its gradient comes from the step's argument #1, never reduced, not from a distopt.all_reduce of its own (which ZeRO splits into a reduce_scatter; between the two only a division by a constant, element-wise ops (arith.extf, arith.truncf, distopt.unscale) and distopt.clip_grad_norm may come): reduce it with a distopt.all_reduce of its own before its update}}
  %p1 = distopt.sgd_update %p, %g lr(%lr) step(%t) : tensor<4xf32>, f32
  return %p1 : tensor<4xf32>
}

// -----

// A bucket packed by hand (docs/dialect.md's step): the error says what the
// step lacks, not which passes to run (the pipeline runs them).
distopt.process_group @dp size 2
func.func @hand_bucket(%p: tensor<4xf32> {distopt.role = "param"}, %g: tensor<4xf32> {distopt.role = "grad"}, %lr: f32, %t: i64) -> tensor<4xf32> {
  %bucket = distopt.bucket_pack %g : tensor<4xf32> -> tensor<4xf32>
  %avg = distopt.all_reduce avg %bucket on @dp : tensor<4xf32>
  %r = distopt.bucket_unpack %avg : tensor<4xf32> -> tensor<4xf32>
  // expected-error @+1 {{cannot shard 'distopt.sgd_update': its gradient comes from a distopt.bucket_unpack (a bucket packed by hand), not from a distopt.all_reduce of its own (which ZeRO splits into a reduce_scatter; between the two only a division by a constant, element-wise ops (arith.extf, arith.truncf, distopt.unscale) and distopt.clip_grad_norm may come): reduce each gradient with a distopt.all_reduce of its own and let the pipeline bucket them (--distopt-bucketize runs after sharding)}}
  %p1 = distopt.sgd_update %p, %r lr(%lr) step(%t) : tensor<4xf32>, f32
  return %p1 : tensor<4xf32>
}

// -----

distopt.process_group @dp size 2
func.func @computed(%p: tensor<4xf32> {distopt.role = "param"}, %g: tensor<4xf32> {distopt.role = "grad"}, %lr: f32, %t: i64) -> tensor<4xf32> {
  %avg = distopt.all_reduce avg %g on @dp : tensor<4xf32>
  %twice = arith.addf %avg, %avg : tensor<4xf32>
  // expected-error @+1 {{cannot shard 'distopt.sgd_update': its gradient comes from 'arith.addf', not from a distopt.all_reduce of its own (which ZeRO splits into a reduce_scatter; between the two only a division by a constant, element-wise ops (arith.extf, arith.truncf, distopt.unscale) and distopt.clip_grad_norm may come): reduce it with a distopt.all_reduce of its own before its update}}
  %p1 = distopt.sgd_update %p, %twice lr(%lr) step(%t) : tensor<4xf32>, f32
  return %p1 : tensor<4xf32>
}

// -----

module attributes {distopt.world_size = 1 : i64} {
  distopt.process_group @one size 1
  // expected-warning @+1 {{--distopt-shard-optimizer: the step is compiled for one rank; nothing to shard}}
  func.func @one_rank(%p: tensor<4xf32> {distopt.role = "param"}, %g: tensor<4xf32> {distopt.role = "grad"}, %lr: f32, %t: i64) -> tensor<4xf32> {
    %p1 = distopt.sgd_update %p, %g lr(%lr) step(%t) : tensor<4xf32>, f32
    return %p1 : tensor<4xf32>
  }
}

// -----

// A reduction over part of the world is refused, not sharded as if over
// the world (hybrid sharding reduces over the world: see
// distopt-shard-optimizer-hybrid.mlir).
distopt.mesh @m shape [2, 2]
distopt.process_group @rows size 2 over @m axes [1]
func.func @sub_group(%p: tensor<4xf32> {distopt.role = "param"}, %g: tensor<4xf32> {distopt.role = "grad"}, %lr: f32, %t: i64) -> tensor<4xf32> {
  %r = distopt.all_reduce avg %g on @rows : tensor<4xf32>
  // expected-error @+1 {{cannot shard 'distopt.sgd_update': its gradient is reduced over @rows, part of the world: shards are laid out over the world's ranks (for hybrid sharding, reduce over the world and give shard-group and replicate-group)}}
  %p1 = distopt.sgd_update %p, %r lr(%lr) step(%t) : tensor<4xf32>, f32
  return %p1 : tensor<4xf32>
}

// -----

distopt.process_group @dp size 2
func.func @param_not_argument(%g: tensor<4xf32> {distopt.role = "grad"}, %lr: f32, %t: i64) -> tensor<4xf32> {
  %p = arith.constant dense<1.0> : tensor<4xf32>
  %r = distopt.all_reduce avg %g on @dp : tensor<4xf32>
  // expected-error @+1 {{cannot shard 'distopt.sgd_update': its parameter must be an argument of the step function with role param or main_param}}
  %p1 = distopt.sgd_update %p, %r lr(%lr) step(%t) : tensor<4xf32>, f32
  return %p1 : tensor<4xf32>
}

// -----

distopt.process_group @dp size 2
func.func @state_not_argument(%p: tensor<4xf32> {distopt.role = "param"}, %g: tensor<4xf32> {distopt.role = "grad"}, %lr: f32, %t: i64) -> (tensor<4xf32>, tensor<4xf32>) {
  %b = arith.constant dense<0.0> : tensor<4xf32>
  %r = distopt.all_reduce avg %g on @dp : tensor<4xf32>
  // expected-error @+1 {{cannot shard 'distopt.sgd_update': state operand #0 must be a step argument with role state}}
  %p1, %b1 = distopt.sgd_update %p, %r state(%b) lr(%lr) step(%t) {momentum = 0.9} : tensor<4xf32>, f32
  return %p1, %b1 : tensor<4xf32>, tensor<4xf32>
}

// -----

distopt.process_group @dp size 2
func.func @result_used(%p: tensor<4xf32> {distopt.role = "param"}, %g: tensor<4xf32> {distopt.role = "grad"}, %lr: f32, %t: i64) -> tensor<4xf32> {
  %r = distopt.all_reduce avg %g on @dp : tensor<4xf32>
  // expected-error @+1 {{cannot shard 'distopt.sgd_update': its new parameter must only be returned, or rounded by arith.truncf and returned}}
  %p1 = distopt.sgd_update %p, %r lr(%lr) step(%t) : tensor<4xf32>, f32
  %x = arith.addf %p1, %p1 : tensor<4xf32>
  return %x : tensor<4xf32>
}

// -----

distopt.process_group @dp size 2
func.func @nested(%c: i1, %p: tensor<4xf32> {distopt.role = "param"}, %g: tensor<4xf32> {distopt.role = "grad"}, %lr: f32, %t: i64) -> tensor<4xf32> {
  %r = distopt.all_reduce avg %g on @dp : tensor<4xf32>
  %out = scf.if %c -> tensor<4xf32> {
    // expected-error @+1 {{cannot shard 'distopt.sgd_update': it is nested in 'scf.if'}}
    %p1 = distopt.sgd_update %p, %r lr(%lr) step(%t) : tensor<4xf32>, f32
    scf.yield %p1 : tensor<4xf32>
  } else {
    scf.yield %p : tensor<4xf32>
  }
  return %out : tensor<4xf32>
}

