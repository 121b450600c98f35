// Hybrid sharding: --distopt-hybrid-mesh declares the [W/S, S] mesh and its
// groups; --distopt-shard-optimizer shards over @hybrid_shard and
// all-reduces each chunk across @hybrid_replicate. Execution against the
// unsharded step: test/Integration/hybrid-shard.test.
//
// DEFINE: %{hybrid} = distopt-opt --distopt-hybrid-mesh=shard-size=2 --distopt-fuse-div-into-allreduce
// DEFINE: %{groups} = shard-group=hybrid_shard replicate-group=hybrid_replicate
// DEFINE: %{groups_sr} = shard-group=shard replicate-group=replicate
// RUN: distopt-translate --import-param-spec %S/Inputs/mixed.json \
// RUN:   | %{hybrid} --distopt-shard-optimizer="stage=2 %{groups}" --distopt-verify-collectives | FileCheck %s --check-prefix=STAGE2
// RUN: distopt-translate --import-param-spec %S/Inputs/mixed.json \
// RUN:   | %{hybrid} --distopt-shard-optimizer="stage=1 %{groups}" --distopt-verify-collectives | FileCheck %s --check-prefix=STAGE1
// RUN: distopt-translate --import-param-spec %S/Inputs/mixed.json \
// RUN:   | %{hybrid} --distopt-shard-optimizer="stage=3 %{groups}" --distopt-verify-collectives | FileCheck %s --check-prefix=STAGE3
// RUN: distopt-translate --import-param-spec %S/Inputs/mixed.json \
// RUN:   | distopt-opt --distopt-pipeline="zero-stage=2 hybrid-shard-size=4 overlap=0" | FileCheck %s --check-prefix=WHOLE
// RUN: distopt-translate --import-param-spec %S/../Integration/Inputs/composed-bf16.json \
// RUN:   | distopt-opt --distopt-pipeline="zero-stage=2 hybrid-shard-size=1 overlap=0" | FileCheck %s --check-prefix=COMPOSED
// RUN: sed 's/"world_size": 4/"world_size": 514/' %S/Inputs/mixed.json > %t.514.json
// RUN: distopt-translate --import-param-spec %t.514.json \
// RUN:   | %{hybrid} --distopt-shard-optimizer="stage=2 %{groups}" --distopt-verify-collectives | FileCheck %s --check-prefix=W514
// RUN: distopt-translate --import-param-spec %examples/specs/gpt2-small.json \
// RUN:   | distopt-opt --distopt-pipeline="zero-stage=2 hybrid-shard-size=4" --distopt-report -o /dev/null | FileCheck %s --check-prefix=REPORT
//
// RUN: distopt-opt %s -split-input-file --distopt-hybrid-mesh=shard-size=2 -verify-diagnostics | FileCheck %s --check-prefix=MESH
// RUN: distopt-translate --import-param-spec %S/Inputs/mixed.json | distopt-opt --distopt-hybrid-mesh | FileCheck %s --check-prefix=OFF
// RUN: distopt-opt %S/Inputs/hybrid-groups.mlir -split-input-file --distopt-shard-optimizer="%{groups_sr}" -verify-diagnostics
// RUN: not distopt-opt %s --distopt-shard-optimizer=shard-group=hybrid_shard 2>&1 | FileCheck %s --check-prefix=BOTH
// RUN: not distopt-opt %s --distopt-shard-optimizer="strategy=greedy shard-group=a replicate-group=b" 2>&1 | FileCheck %s --check-prefix=GREEDY
// RUN: not distopt-opt %s --distopt-pipeline=hybrid-shard-size=2 2>&1 | FileCheck %s --check-prefix=NOSTAGE

// The gradients are summed inside the shard group (2 ranks), then across
// the replicas, and divided once by the world's 4, as the runtime's avg
// divides; the chunk is gathered inside the shard group. Shards are half
// the padded buffer (shard_of = 2 parts).
// STAGE2-DAG:  distopt.mesh @hybrid shape [2, 2]
// STAGE2-DAG:  distopt.process_group @hybrid_shard size 2 over @hybrid axes [1]
// STAGE2-DAG:  distopt.process_group @hybrid_replicate size 2 over @hybrid axes [0]
// STAGE2-LABEL: func.func @step
// STAGE2-SAME: tensor<16xf32> {distopt.layout = [{name = "w", offset = 0 : i64, shape = array<i64: 8, 4>}], distopt.name = "flat0.main_param", distopt.role = "main_param", distopt.shard_of = 32 : i64}
// STAGE2:      %[[B:.*]] = distopt.bucket_pack %arg2
// STAGE2:      %[[C:.*]] = distopt.reduce_scatter sum %[[B]] on @hybrid_shard : tensor<32xbf16> -> tensor<16xbf16>
// STAGE2:      %[[R:.*]] = distopt.all_reduce sum %[[C]] on @hybrid_replicate : tensor<16xbf16>
// STAGE2:      %[[N:.*]] = arith.constant dense<4.000000e+00> : tensor<16xbf16>
// STAGE2:      arith.divf %[[R]], %[[N]] : tensor<16xbf16>
// STAGE2:      distopt.adamw_update
// STAGE2:      distopt.all_gather %{{.*}} on @hybrid_shard : tensor<16xbf16> -> tensor<32xbf16>
// STAGE2-NOT:  on @world

// On 514 ranks the bf16 chunk is divided in f32 (bf16 would divide by
// 512) and rounded once.
// W514-LABEL: func.func @step
// W514:      %[[C:.*]] = distopt.reduce_scatter sum %{{.*}} on @hybrid_shard : tensor<32xbf16> -> tensor<16xbf16>
// W514-NEXT: %[[R:.*]] = distopt.all_reduce sum %[[C]] on @hybrid_replicate : tensor<16xbf16>
// W514-NEXT: %[[E:.*]] = arith.extf %[[R]] : tensor<16xbf16> to tensor<16xf32>
// W514-NEXT: %[[N:.*]] = arith.constant dense<5.140000e+02> : tensor<16xf32>
// W514-NEXT: %[[D:.*]] = arith.divf %[[E]], %[[N]] : tensor<16xf32>
// W514-NEXT: arith.truncf %[[D]] : tensor<16xf32> to tensor<16xbf16>

// Stage 1: the world all-reduce stays; each rank slices its chunk by its
// rank in the shard group.
// STAGE1:      distopt.all_reduce avg %{{.*}} on @world
// STAGE1:      distopt.shard_slice %{{.*}} on @hybrid_shard : tensor<32xbf16> -> tensor<16xbf16>
// STAGE1-NOT:  reduce_scatter
// STAGE1:      distopt.all_gather %{{.*}} on @hybrid_shard

// Stage 3: parameters are shards of 2 parts too.
// STAGE3:      distopt.name = "flat0.param", distopt.role = "param", distopt.shard_of = 32 : i64
// STAGE3:      distopt.reduce_scatter sum %{{.*}} on @hybrid_shard
// STAGE3:      distopt.all_reduce sum %{{.*}} on @hybrid_replicate

// One shard group spanning the world: nothing to replicate across, so no
// all_reduce of the chunk; the reduce_scatter averages itself.
// WHOLE:       distopt.mesh @hybrid shape [1, 4]
// WHOLE:       distopt.reduce_scatter avg %{{.*}} on @hybrid_shard : tensor<64xbf16> -> tensor<16xbf16>
// WHOLE-NOT:   distopt.all_reduce
// WHOLE:       distopt.all_gather

// Loss scaling and clipping: the overflow check and the norm are agreed
// inside the shard group only (each element counted once), here of one
// rank, replicated across the 2 ranks of the world.
// COMPOSED:    distopt.mesh @hybrid shape [2, 1]
// COMPOSED:    distopt.all_finite {{.*}} on @hybrid_shard
// COMPOSED:    distopt.clip_grad_norm {{.*}} on @hybrid_shard

// GPT-2 small on 2 nodes of 4: only the chunk's all-reduce (1/4 of the
// gradient, 0.5 bytes per bf16 parameter) crosses the nodes; each rank
// holds 1/4 of the gradient and of the state.
// REPORT:      by process group:
// REPORT-NEXT: @hybrid_replicate (2 ranks, axes [0] of @hybrid [2, 4]) 1 62219904 62219904
// REPORT-NEXT: @hybrid_shard (4 ranks, axes [1] of @hybrid [2, 4]) 2 497759232 373319424
// REPORT:      gradients (after reduction) 62219904 0.5000
// REPORT:      optimizer state (with main params) 373319424 3.0000

// BOTH: hybrid sharding takes both shard-group and replicate-group
// GREEDY: hybrid sharding (shard-group) is built for strategy=flat
// NOSTAGE: hybrid sharding (shard-group, the pipeline's hybrid-shard-size) needs stage 1, 2 or 3 (the pipeline's zero-stage)

// By default (shard-size=0) nothing is declared.
// OFF-NOT:     distopt.mesh

// MESH-LABEL: module
// MESH-DAG:   distopt.mesh @hybrid shape [3, 2]
// MESH-DAG:   distopt.process_group @hybrid_shard size 2 over @hybrid axes [1]
// MESH-DAG:   distopt.process_group @hybrid_replicate size 3 over @hybrid axes [0]
module attributes {distopt.world_size = 6 : i64} {
}

// -----

// Without the attribute, the world is the groups spanning it; declarations
// already there are kept, not repeated.
// MESH-LABEL: module
// MESH:       distopt.mesh @hybrid shape [2, 2]
// MESH-NOT:   distopt.mesh @hybrid
distopt.process_group @dp size 4
distopt.mesh @hybrid shape [2, 2]

// -----

// expected-error @+1 {{--distopt-hybrid-mesh: shard-size=2 does not divide the world of 3 ranks into shard groups}}
distopt.process_group @dp size 3

// -----

distopt.process_group @dp size 4
// expected-error @+1 {{--distopt-hybrid-mesh declares @hybrid_shard, but the module has another symbol of that name}}
distopt.process_group @hybrid_shard size 4

// -----

distopt.process_group @dp size 4
// expected-error @+1 {{--distopt-hybrid-mesh: process groups spanning worlds of 4 and 2 ranks}}
distopt.process_group @other size 2

// -----

// expected-error @+1 {{--distopt-hybrid-mesh: the module has neither distopt.world_size nor a process group spanning the world}}
module {
}
