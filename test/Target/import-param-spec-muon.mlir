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
// elements (72 against 64) would swap them. Stage 3 and hybrid sharding,
// which keep only chunks of the parameters, have no owners: the matrices
// are laid out flat too, and every rank gathers their chunks (parameters,
// gradients, momentum), updates each whole and keeps its chunk; forcing
// the owner plan there is an error.
// RUN: distopt-translate --import-param-spec %S/Inputs/muon.json \
// RUN:   | distopt-opt --distopt-shard-optimizer=stage=1 --distopt-verify-collectives | FileCheck %s --check-prefix=FLAT
// RUN: distopt-translate --import-param-spec %S/Inputs/muon.json \
// RUN:   | distopt-opt --distopt-shard-optimizer=stage=3 --distopt-verify-collectives | FileCheck %s --check-prefix=GATHER3
// RUN: distopt-translate --import-param-spec %S/Inputs/muon.json \
// RUN:   | distopt-opt --distopt-pipeline="zero-stage=2 hybrid-shard-size=1" --distopt-verify-collectives | FileCheck %s --check-prefix=GATHER-HYBRID
// RUN: distopt-translate --import-param-spec %S/Inputs/muon.json \
// RUN:   | not distopt-opt --distopt-shard-optimizer="stage=3 matrix-plan=owner" 2>&1 | FileCheck %s --check-prefix=STAGE3
// RUN: distopt-translate --import-param-spec %S/Inputs/muon.json \
// RUN:   | not distopt-opt --distopt-pipeline="zero-stage=2 hybrid-shard-size=1 zero-matrix-plan=owner" 2>&1 | FileCheck %s --check-prefix=HYBRID
// Forced at stage 2: the gradient chunks reduce-scattered with the AdamW
// group's, then gathered with the momentum's; the new parameters need no
// gather (every rank computed them) and are not packed; the new momentum
// is packed for this rank's chunk.
// RUN: distopt-translate --import-param-spec %S/Inputs/muon.json \
// RUN:   | distopt-opt --distopt-shard-optimizer="stage=2 matrix-plan=gather" --distopt-verify-collectives | FileCheck %s --check-prefix=GATHER2
// Its report: both matrices' arithmetic on every rank (19k FLOPs), as
// without ZeRO.
// RUN: distopt-translate --import-param-spec %S/Inputs/muon.json \
// RUN:   | distopt-opt --distopt-shard-optimizer="stage=2 matrix-plan=gather" --distopt-report -o /dev/null | FileCheck %s --check-prefix=EVERY-RANK
// The cost model (matrix-plan=auto with rates) at stage 2: fc.weight
// 12928 FLOPs, conv.weight 5840, 256 and 288 bytes. On owners: two
// broadcasts and two reduces of 5000 us each, and fc.weight's owner's
// 1292.8 us at 10 MFLOP/s: 21293.9 us. Gathered: three collectives (the
// reduce-scatter, the gradient's and the momentum's gathers) of half the
// bytes and both updates on every rank: 3 x 5000.272 + 1876.8 = 16877.6
// us. The owners win at a 50 us latency; the split of a larger group is
// test/Integration/Inputs/muon-bf16.json's (passes-preserve-step.test
// runs it).
// RUN: distopt-translate --import-param-spec %S/Inputs/muon.json \
// RUN:   | distopt-opt --distopt-shard-optimizer="stage=2 update-gflops=0.01 latency-us=5000 bandwidth-gb-per-s=1" --distopt-report -o /dev/null | FileCheck %s --check-prefix=MODEL
// RUN: distopt-translate --import-param-spec %S/Inputs/muon.json \
// RUN:   | distopt-opt --distopt-shard-optimizer="stage=2 update-gflops=0.01 latency-us=50 bandwidth-gb-per-s=1" --distopt-report -o /dev/null | FileCheck %s --check-prefix=MODEL-OWNERS
// RUN: distopt-translate --import-param-spec %S/Inputs/muon.json \
// RUN:   | distopt-opt --distopt-pipeline="zero-stage=2 zero-update-gflops=0.01 zero-latency-us=5000 zero-bandwidth-gb-per-s=1" --distopt-report -o /dev/null | FileCheck %s --check-prefix=MODEL
// RUN: sed -e 's/"world_size": 2/"world_size": 3/' %S/../Integration/Inputs/muon-bf16.json \
// RUN:   | distopt-translate --import-param-spec \
// RUN:   | distopt-opt --distopt-shard-optimizer="stage=2 update-gflops=0.1 latency-us=1000 bandwidth-gb-per-s=1" --distopt-report -o /dev/null | FileCheck %s --check-prefix=MODEL-SPLIT
// The model assigns owners as the pass does. With a third matrix x.weight
// (2x36: 72 elements, 3088 FLOPs) at 50 us: by FLOPs fc.weight's owner is
// the busiest, 300 us of collectives + 1.7 us of bytes + 1292.8 us; by
// elements x.weight and fc.weight share rank 0 (the table's 0.016 MFLOP):
// 1601.6 us of arithmetic.
// RUN: sed -e 's/{"name": "conv.weight"/{"name": "x.weight", "shape": [2, 36], "dtype": "f32"}, {"name": "conv.weight"/' %S/Inputs/muon.json \
// RUN:   | distopt-translate --import-param-spec \
// RUN:   | distopt-opt --distopt-shard-optimizer="stage=2 update-gflops=0.01 latency-us=50 bandwidth-gb-per-s=1" --distopt-report -o /dev/null | FileCheck %s --check-prefix=MODEL-FLOPS
// RUN: sed -e 's/{"name": "conv.weight"/{"name": "x.weight", "shape": [2, 36], "dtype": "f32"}, {"name": "conv.weight"/' %S/Inputs/muon.json \
// RUN:   | distopt-translate --import-param-spec \
// RUN:   | distopt-opt --distopt-shard-optimizer="stage=2 update-gflops=0.01 latency-us=50 bandwidth-gb-per-s=1 owner-balance=elements" --distopt-report -o /dev/null | FileCheck %s --check-prefix=MODEL-ELEMENTS
// The rates come together, and only where the plan is the model's.
// RUN: distopt-translate --import-param-spec %S/Inputs/muon.json \
// RUN:   | not distopt-opt --distopt-shard-optimizer="stage=2 update-gflops=1" 2>&1 | FileCheck %s --check-prefix=RATES
// RUN: distopt-translate --import-param-spec %S/Inputs/muon.json \
// RUN:   | not distopt-opt --distopt-pipeline="zero-stage=2 zero-update-gflops=1" 2>&1 | FileCheck %s --check-prefix=RATES
// RUN: distopt-translate --import-param-spec %S/Inputs/muon.json \
// RUN:   | not distopt-opt --distopt-shard-optimizer="stage=2 matrix-plan=owner update-gflops=1 latency-us=5 bandwidth-gb-per-s=1" 2>&1 | FileCheck %s --check-prefix=FORCED
// RUN: distopt-translate --import-param-spec %S/Inputs/muon.json \
// RUN:   | not distopt-opt --distopt-pipeline="zero-stage=2 zero-matrix-plan=split" 2>&1 | FileCheck %s --check-prefix=PLAN
// RUN: distopt-translate --import-param-spec %S/Inputs/muon.json \
// RUN:   | not distopt-opt --distopt-pipeline="zero-update-gflops=1 zero-latency-us=5 zero-bandwidth-gb-per-s=1" 2>&1 | FileCheck %s --check-prefix=NO-CHOICE
// RUN: distopt-translate --import-param-spec %S/Inputs/muon.json \
// RUN:   | not distopt-opt --distopt-pipeline="zero-stage=3 zero-update-gflops=1 zero-latency-us=5 zero-bandwidth-gb-per-s=1" 2>&1 | FileCheck %s --check-prefix=NO-CHOICE
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
// HYBRID: error: cannot shard 'distopt.muon_update': its update reads the whole matrix, and hybrid sharding (shard-group) lays parameters out in chunks only (matrix-plan=gather updates it whole on every rank)
// STAGE3: error: cannot shard 'distopt.muon_update': its update reads the whole matrix, and stage 3 keeps only a chunk of each parameter on a rank (matrix-plan=gather updates it whole on every rank)
// GATHER3: func.func @step
// GATHER3-SAME: {distopt.layout = [{name = "fc.weight", offset = 0 : i64, shape = array<i64: 8, 8>}, {name = "conv.weight", offset = 64 : i64, shape = array<i64: 4, 2, 3, 3>}], distopt.name = "flat1.momentum_buffer", distopt.role = "state", distopt.shard_of = 160 : i64}
// GATHER3-SAME: distopt.name = "flat1.param", distopt.role = "param", distopt.shard_of = 160 : i64
// GATHER3-NOT: distopt.owned_by
// GATHER3: %[[PARAMS:.*]] = distopt.all_gather %{{.*}} on @world : tensor<80xf32> -> tensor<160xf32>
// GATHER3: distopt.bucket_unpack %[[PARAMS]]
// GATHER3: distopt.muon_update {{.*}} : tensor<8x8xf32>, f64
// GATHER3: distopt.muon_update {{.*}} : tensor<4x2x3x3xf32>, f64
// GATHER3: distopt.shard_slice {{.*}} : tensor<160xf32> -> tensor<80xf32>
// GATHER-HYBRID: distopt.name = "flat1.momentum_buffer"
// GATHER-HYBRID: distopt.all_gather %{{.*}} on @hybrid_shard
// GATHER-HYBRID: distopt.muon_update {{.*}} : tensor<8x8xf32>, f64
// GATHER2-NOT: distopt.owned_by
// GATHER2-COUNT-2: distopt.reduce_scatter
// GATHER2: distopt.bucket_pack
// GATHER2: distopt.adamw_update
// GATHER2-NOT: distopt.bucket_pack
// GATHER2: distopt.all_gather
// GATHER2-COUNT-2: distopt.all_gather %{{.*}} on @world : tensor<80xf32> -> tensor<160xf32>
// GATHER2-COUNT-2: distopt.muon_update
// GATHER2: distopt.bucket_pack
// GATHER2: distopt.shard_slice %{{.*}} on @world : tensor<160xf32> -> tensor<80xf32>
// GATHER2-NOT: distopt.all_gather
// GATHER2: return
// EVERY-RANK-NOT: updates on their owners
// EVERY-RANK: whole-matrix updates on every rank: 2 tensors, 136 elements, 0.019 update MFLOP each rank
// MODEL:      whole matrices off owners or on them (matrix-plan=auto's model)
// MODEL-NEXT:   2 matrices: 2 gathered, 0 on owners, predicted 16877.6 us (all on owners 21293.9 us, all gathered 16877.6 us)
// MODEL-NEXT:     gathered: fc.weight conv.weight
// MODEL-OWNERS: 2 matrices: 0 gathered, 2 on owners, predicted 1493.9 us (all on owners 1493.9 us, all gathered 2027.6 us)
// MODEL-FLOPS: 3 matrices: 0 gathered, 3 on owners, predicted 1594.5 us
// MODEL-ELEMENTS: 0 2 136 0.016
// MODEL-ELEMENTS: 3 matrices: 0 gathered, 3 on owners, predicted 1903.3 us
// MODEL-SPLIT: 5 matrices: 3 gathered, 2 on owners
// MODEL-SPLIT-NEXT: gathered: l1.w l2.w conv.w
// RATES: update-gflops, latency-us and bandwidth-gb-per-s are given together, each positive
// FORCED: update-gflops, latency-us and bandwidth-gb-per-s choose matrix-plan=auto's plans; matrix-plan is forced here
// NO-CHOICE: error: --distopt-shard-optimizer: update-gflops, latency-us and bandwidth-gb-per-s choose between owners and gathering (or Dion's blocks of rows), which only stages 1 and 2 without hybrid sharding have (the pipeline's zero-stage, hybrid-shard-size)
// PLAN: for the --zero-matrix-plan option: 'split' is not one of: auto, owner, gather
// GREEDY: distopt.owned_by @{{.*}} rank
// GREEDY: distopt.muon_update {{.*}} : tensor<8x8xf32>, f64
