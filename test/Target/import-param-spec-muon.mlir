// Muon from the spec: its keys (a flag true by default, an integer, three
// coefficients, a choice, a dtype) into the op's attributes, and an AdamW
// group of its own type for what is not a matrix (the embedding too, by
// choice here), with its own keys and the step's rate scaled.
// RUN: distopt-translate --import-param-spec %S/Inputs/muon.json | FileCheck %s
// A vector left in a Muon group is updated by torch's AdamW at the group's
// rate, in a group of its own; under runtime_hyperparameters, which would
// not know that group, it is an error naming it.
// RUN: sed -e 's/"\*.bias", //' %S/Inputs/muon.json \
// RUN:   | distopt-translate --import-param-spec | FileCheck %s --check-prefix=VECTOR
// RUN: sed -e 's/"\*.bias", //; s/"world_size": 2,/"world_size": 2, "runtime_hyperparameters": true,/' %S/Inputs/muon.json \
// RUN:   | not distopt-translate --import-param-spec 2>&1 | FileCheck %s --check-prefix=RUNTIME
// RUN: sed -e 's/"ns_steps": 4/"ns_steps": 4.5/' %S/Inputs/muon.json \
// RUN:   | not distopt-translate --import-param-spec 2>&1 | FileCheck %s --check-prefix=STEPS
// RUN: sed -e 's/\[3.0, -3.2, 1.2\]/[3.0, 1.2]/' %S/Inputs/muon.json \
// RUN:   | not distopt-translate --import-param-spec 2>&1 | FileCheck %s --check-prefix=COEFFICIENTS
// RUN: sed -e 's/"nesterov": false/"nesterov": 0/' %S/Inputs/muon.json \
// RUN:   | not distopt-translate --import-param-spec 2>&1 | FileCheck %s --check-prefix=NESTEROV
// RUN: sed -e 's/"bf16"/"float99"/' %S/Inputs/muon.json \
// RUN:   | not distopt-translate --import-param-spec 2>&1 | FileCheck %s --check-prefix=DTYPE
// Under the flat ZeRO layout, which would cut matrices across ranks, the
// AdamW group is laid out flat and Muon's matrices go whole to owners,
// balanced by the arithmetic of their orthogonalization: fc.weight (8x8,
// 13k FLOPs) to rank 0, conv.weight (4x18, 6k) to rank 1, where balancing
// elements (72 against 64) would swap them. Stage 3, which keeps only
// chunks of the parameters, refuses them.
// RUN: distopt-translate --import-param-spec %S/Inputs/muon.json \
// RUN:   | distopt-opt --distopt-shard-optimizer=stage=1 --distopt-verify-collectives | FileCheck %s --check-prefix=FLAT
// RUN: distopt-translate --import-param-spec %S/Inputs/muon.json \
// RUN:   | not distopt-opt --distopt-shard-optimizer=stage=3 2>&1 | FileCheck %s --check-prefix=STAGE3
// RUN: distopt-translate --import-param-spec %S/Inputs/muon.json \
// RUN:   | not distopt-opt --distopt-pipeline="zero-stage=2 hybrid-shard-size=1" 2>&1 | FileCheck %s --check-prefix=HYBRID
// The report shows each owner's share: 4 x (4 m^2 n + 2 m^3) + 10 m n
// FLOPs for 4 iterations on an m x n matrix (m <= n).
// RUN: distopt-translate --import-param-spec %S/Inputs/muon.json \
// RUN:   | distopt-opt --distopt-shard-optimizer=stage=1 --distopt-report -o /dev/null | FileCheck %s --check-prefix=OWNERS
// Balanced by elements instead (the pipeline's zero-owner-balance), the
// two swap; another word is refused, by the pipeline even without zero-stage.
// RUN: distopt-translate --import-param-spec %S/Inputs/muon.json \
// RUN:   | distopt-opt --distopt-pipeline="zero-stage=2 zero-owner-balance=elements" --distopt-report -o /dev/null | FileCheck %s --check-prefix=ELEMENTS
// RUN: distopt-translate --import-param-spec %S/Inputs/muon.json \
// RUN:   | not distopt-opt --distopt-shard-optimizer="stage=1 owner-balance=bytes" 2>&1 | FileCheck %s --check-prefix=BALANCE
// RUN: distopt-translate --import-param-spec %S/Inputs/muon.json \
// RUN:   | not distopt-opt --distopt-pipeline="zero-owner-balance=bytes" 2>&1 | FileCheck %s --check-prefix=PIPELINE-BALANCE
// RUN: distopt-translate --import-param-spec %S/Inputs/muon.json \
// RUN:   | distopt-opt --distopt-shard-optimizer="stage=2 strategy=greedy" --distopt-verify-collectives | FileCheck %s --check-prefix=GREEDY

// CHECK-LABEL: func.func @step
// CHECK-SAME: distopt.name = "fc.weight.momentum_buffer"
// CHECK-SAME: %[[LR:[^:]*]]: f64 {distopt.role = "lr"}
// CHECK: %[[SCALED:.*]] = arith.mulf %[[LR]], %{{.*}} : f64
// CHECK: distopt.adamw_update {{.*}} lr(%[[SCALED]]) {{.*}} {weight_decay = 0.000000e+00 : f64} : tensor<16x8xf32>, f64
// CHECK: distopt.muon_update {{.*}} lr(%[[LR]]) {{.*}} {adjust_lr_fn = "match_rms_adamw", momentum = 9.000000e-01 : f64, nesterov = false, ns_coefficients = array<f64: 3.000000e+00, -3.200000e+00, 1.200000e+00>, ns_dtype = bf16, ns_steps = 4 : i64} : tensor<8x8xf32>, f64
// CHECK: distopt.adamw_update {{.*}} lr(%[[SCALED]]) {{.*}} : tensor<8xf32>, f64
// CHECK: distopt.muon_update {{.*}} : tensor<4x2x3x3xf32>, f64
//
// VECTOR: distopt.check_rate %[[LR:[^ ]*]] param_group -1
// VECTOR: distopt.muon_update {{.*}} lr(%[[LR]]) {{.*}} : tensor<8x8xf32>, f64
// VECTOR: distopt.adamw_update {{.*}} lr(%[[LR]]) step(%{{[^)]*}}) : tensor<8xf32>, f64
// RUNTIME: param spec: optimizer: muon updates parameters of rank 2 or more, and the others ('fc.bias') would need a group of AdamW that runtime_hyperparameters does not know: give them a param group of type adamw
// STEPS: param spec: optimizer.ns_steps: expected an integer
// COEFFICIENTS: param spec: optimizer.ns_coefficients: expected [a, b, c], three finite numbers
// NESTEROV: param spec: optimizer.nesterov: expected true or false
// DTYPE: param spec: optimizer.ns_dtype: unsupported dtype 'float99' (expected f32, bf16 or f16)
// FLAT: func.func @step
// FLAT-SAME: {distopt.layout = [{name = "emb.weight", offset = 0 : i64, shape = array<i64: 16, 8>}, {name = "fc.bias", offset = 128 : i64, shape = array<i64: 8>}], distopt.name = "flat0.exp_avg", distopt.role = "state", distopt.shard_of = 160 : i64}
// FLAT-SAME: {distopt.layout = [{name = "fc.weight", offset = 0 : i64, owner = 0 : i64, shape = array<i64: 8, 8>}, {name = "conv.weight", offset = 0 : i64, owner = 1 : i64, shape = array<i64: 4, 2, 3, 3>}], distopt.name = "owned0.momentum_buffer", distopt.role = "state"}
// FLAT: distopt.owned_by @{{.*}} rank 0
// FLAT: distopt.muon_update {{.*}} : tensor<8x8xf32>, f64
// FLAT: distopt.owned_by @{{.*}} rank 1
// FLAT: distopt.muon_update {{.*}} : tensor<4x2x3x3xf32>, f64
// OWNERS:      updates on their owners
// OWNERS-NEXT:   rank  tensors       elements   update MFLOP
// OWNERS-NEXT:      0        1             64          0.013
// OWNERS-NEXT:      1        1             72          0.006
// OWNERS-NEXT: most loaded rank: 1.38x the mean of 2 ranks
// ELEMENTS:      updates on their owners
// ELEMENTS-NEXT:   rank  tensors       elements   update MFLOP
// ELEMENTS-NEXT:      0        1             72          0.006
// ELEMENTS-NEXT:      1        1             64          0.013
// BALANCE: for the --owner-balance option: 'bytes' is not one of: flops, elements
// PIPELINE-BALANCE: for the --zero-owner-balance option: 'bytes' is not one of: flops, elements
// HYBRID: error: cannot shard 'distopt.muon_update': its update reads the whole matrix, and hybrid sharding (shard-group) lays parameters out in chunks only
// STAGE3: error: cannot shard 'distopt.muon_update': its update reads the whole matrix, and stage 3 keeps only a chunk of each parameter on a rank (stages 1 and 2 update each matrix whole on the rank that owns it)
// GREEDY: distopt.owned_by @{{.*}} rank
// GREEDY: distopt.muon_update {{.*}} : tensor<8x8xf32>, f64
