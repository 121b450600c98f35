// Dion from the spec: its keys into the op's attributes, a group of its own
// with a fixed rank, each right factor an argument of its own shape (rank x
// columns, the rank from the group's fraction of the smaller dimension or
// its fixed rank; f32 beside a bf16 parameter's fp32 main copy), and AdamW
// for the vector.
// RUN: distopt-translate --import-param-spec %S/Inputs/dion.json | FileCheck %s
// RUN: sed -e 's/"rank_fraction": 0.5/"rank_fraction": 0/' %S/Inputs/dion.json \
// RUN:   | not distopt-translate --import-param-spec 2>&1 | FileCheck %s --check-prefix=FRACTION
// RUN: sed -e 's/"rank": 3/"rank": 3.5/' %S/Inputs/dion.json \
// RUN:   | not distopt-translate --import-param-spec 2>&1 | FileCheck %s --check-prefix=RANK
// RUN: sed -e 's/"rank": 3/"rank": -3/' %S/Inputs/dion.json \
// RUN:   | not distopt-translate --import-param-spec 2>&1 | FileCheck %s --check-prefix=NEGATIVE
// ZeRO updates each matrix whole on its owner, the factors in a buffer of
// their own; the flat strategy lays out only the AdamW group (fc.bias) flat.
// RUN: distopt-translate --import-param-spec %S/Inputs/dion.json \
// RUN:   | distopt-opt --distopt-shard-optimizer=stage=2 --distopt-verify-collectives | FileCheck %s --check-prefix=FLAT
// RUN: distopt-translate --import-param-spec %S/Inputs/dion.json \
// RUN:   | distopt-opt --distopt-shard-optimizer="stage=2 strategy=greedy" --distopt-verify-collectives | FileCheck %s --check-prefix=GREEDY
// Dion's right factor is not laid out as its matrix: the gather plan
// cannot chunk it; forced at stage 2, Dion takes auto's plan (owners).
// Stage 3 takes the low-rank plan: each matrix a flat layout of its own in
// chunks of whole rows (emb.weight, 16 x 8 at 2 ranks: 8 rows each), its
// right factor whole; owners forced there are refused.
// RUN: distopt-translate --import-param-spec %S/Inputs/dion.json \
// RUN:   | distopt-opt --distopt-shard-optimizer=stage=3 --distopt-verify-collectives | FileCheck %s --check-prefix=STAGE3
// RUN: distopt-translate --import-param-spec %S/Inputs/dion.json \
// RUN:   | not distopt-opt --distopt-shard-optimizer="stage=3 matrix-plan=owner" 2>&1 | FileCheck %s --check-prefix=STAGE3-OWNER
// RUN: distopt-translate --import-param-spec %S/Inputs/muon.json \
// RUN:   | distopt-opt --distopt-shard-optimizer="stage=2 matrix-plan=lowrank" -o /dev/null 2>&1 | FileCheck %s --check-prefix=LOWRANK-MUON
// RUN: distopt-translate --import-param-spec %S/Inputs/dion.json \
// RUN:   | distopt-opt --distopt-shard-optimizer="stage=2 matrix-plan=gather" --distopt-verify-collectives | FileCheck %s --check-prefix=FLAT
// RUN: distopt-translate --import-param-spec %S/Inputs/dion.json \
// RUN:   | distopt-opt --distopt-shard-optimizer="stage=2 matrix-plan=gather" -o /dev/null 2>&1 | FileCheck %s --check-prefix=GATHER-WARNING
// With the rates auto weighs owners against blocks of rows per matrix:
// fast arithmetic keeps the owners (fewer collectives), slow arithmetic
// splits each matrix over the ranks.
// RUN: distopt-translate --import-param-spec %S/Inputs/dion.json \
// RUN:   | distopt-opt --distopt-shard-optimizer="stage=2 update-gflops=1 latency-us=5 bandwidth-gb-per-s=1" --distopt-report -o /dev/null 2>&1 | FileCheck %s --check-prefix=MODEL-OWNERS
// RUN: distopt-translate --import-param-spec %S/Inputs/dion.json \
// RUN:   | distopt-opt --distopt-shard-optimizer="stage=2 update-gflops=0.001 latency-us=5 bandwidth-gb-per-s=10" --distopt-report 2>&1 | FileCheck %s --check-prefix=MODEL-ROWS
// Without such updates the rates are unused, and the pass says so.
// RUN: distopt-translate --import-param-spec %S/Inputs/groups.json \
// RUN:   | distopt-opt --distopt-shard-optimizer="stage=2 update-gflops=1 latency-us=5 bandwidth-gb-per-s=1" -o /dev/null 2>&1 | FileCheck %s --check-prefix=UNUSED-RATES
// GATHER-WARNING: warning: matrix-plan=gather: 'distopt.dion_update' keeps state of another shape than its matrix, which the gather plan cannot lay out in chunks; it takes matrix-plan=auto's plan
// UNUSED-RATES: warning: --distopt-shard-optimizer: update-gflops, latency-us and bandwidth-gb-per-s are unused: no update here reads whole matrices (Muon's, Dion's)
// MODEL-OWNERS: 1 matrices: 0 in blocks of rows, 1 on owners, predicted 16.9 us (all on owners 16.9 us, all in blocks of rows 24.2 us)
// MODEL-ROWS-DAG: distopt.dion_update {{.*}}row_group = @world{{.*}} : tensor<8x8xf32> [tensor<8x8xf32>, tensor<4x8xf32>]
// MODEL-ROWS-DAG: 1 matrices: 1 in blocks of rows, 0 on owners, predicted 3732.1 us (all on owners 6410.1 us, all in blocks of rows 3732.1 us)
// MODEL-ROWS-DAG: in blocks of rows: emb.weight
// STAGE3: func.func @step
// STAGE3-SAME: tensor<64xf32> {distopt.layout = [{name = "emb.weight", offset = 0 : i64, shape = array<i64: 16, 8>}], distopt.name = "flat0.main_param", distopt.role = "main_param", distopt.shard_of = 128 : i64}
// STAGE3-SAME: tensor<64xf32> {distopt.layout = [{name = "emb.weight", offset = 0 : i64, shape = array<i64: 16, 8>}], distopt.name = "flat0.momentum", distopt.role = "state", distopt.shard_of = 128 : i64}
// STAGE3-SAME: tensor<4x8xf32> {distopt.name = "emb.weight.right_factor", distopt.role = "state"}
// STAGE3: %[[GRAD:.*]] = distopt.reduce_scatter {{.*}} : tensor<128xbf16> -> tensor<64xbf16>
// STAGE3: distopt.dion_update {{.*}} {matrix_rows = 16 : i64, {{.*}}, row_group = @world, {{.*}}} : tensor<8x8xf32> [tensor<8x8xf32>, tensor<4x8xf32>], f64
// STAGE3: distopt.dion_update {{.*}} {matrix_rows = 8 : i64, {{.*}}, rank = 3 : i64, {{.*}}, row_group = @world, {{.*}}} : tensor<4x6xf32> [tensor<4x6xf32>, tensor<3x6xf32>], f64
// STAGE3-OWNER: error: cannot shard 'distopt.dion_update': its update reads the whole matrix, and stage 3 keeps only a chunk of each parameter on a rank (matrix-plan=lowrank updates it in blocks of rows)
// LOWRANK-MUON: warning: matrix-plan=lowrank is Dion's (blocks of rows whose low-rank factors move): 'distopt.muon_update' takes matrix-plan=auto's plan

// CHECK-LABEL: func.func @step
// CHECK-SAME: %{{[^:]*}}: tensor<4x8xf32> {distopt.name = "emb.weight.right_factor", distopt.role = "state"}
// CHECK-SAME: %{{[^:]*}}: tensor<3x6xf32> {distopt.name = "fc.weight.right_factor", distopt.role = "state"}
// CHECK-SAME: %{{[^:]*}}: tensor<2x18xf32> {distopt.name = "conv.weight.right_factor", distopt.role = "state"}
// CHECK: distopt.dion_update {{.*}} {mu = 9.000000e-01 : f64, rank_fraction = 5.000000e-01 : f64, seed = 5 : i64, weight_decay = 1.000000e-01 : f64} : tensor<16x8xf32> [tensor<16x8xf32>, tensor<4x8xf32>], f64
// CHECK: distopt.dion_update {{.*}} {mu = 9.000000e-01 : f64, rank = 3 : i64, {{.*}} : tensor<8x6xf32> [tensor<8x6xf32>, tensor<3x6xf32>], f64
// CHECK: distopt.adamw_update {{.*}} : tensor<8xf32>, f64
// CHECK: distopt.dion_update {{.*}} : tensor<4x2x3x3xf32> [tensor<4x2x3x3xf32>, tensor<2x18xf32>], f64
//
// FRACTION: error: 'distopt.dion_update' op 'rank_fraction' must be in (0, 1], got 0
// RANK: param spec: param_groups[0].rank: expected an integer
// NEGATIVE: error: 'distopt.dion_update' op 'rank' must be at least 1, got -3
// FLAT: func.func @step
// FLAT-SAME: distopt.name = "owned0.right_factor"
// FLAT-SAME: {distopt.layout = [{name = "fc.weight", offset = 0 : i64, owner = 1 : i64, shape = array<i64: 3, 6>}], distopt.name = "owned1.right_factor", distopt.role = "state"}
// FLAT-SAME: {distopt.layout = [{name = "fc.bias", offset = 0 : i64, shape = array<i64: 8>}], distopt.name = "flat0.exp_avg_sq", distopt.role = "state", distopt.shard_of = 32 : i64}
// FLAT-SAME: {distopt.layout = [{name = "conv.weight", offset = 0 : i64, owner = 1 : i64, shape = array<i64: 2, 18>}], distopt.name = "owned2.right_factor", distopt.role = "state"}
// FLAT: distopt.reduce_scatter
// FLAT: distopt.dion_update {{.*}} : tensor<16x8xf32> [tensor<16x8xf32>, tensor<4x8xf32>], f64
// Each right factor's buffer is laid out as its parameter's, in its own
// shape. Each group of updates holds one tensor here: the assignment counts
// what the groups before gave each rank (as OSS across param groups), so
// the embedding (6.4k FLOPs at rank 4) goes to rank 0 and the other
// matrices (1.9k each) to rank 1, not everything to rank 0.
// GREEDY: func.func @step
// GREEDY-SAME: tensor<128xf32> {distopt.layout = [{name = "emb.weight", offset = 0 : i64, owner = 0 : i64, shape = array<i64: 16, 8>}], distopt.name = "owned0.momentum", distopt.role = "state"}
// GREEDY-SAME: tensor<32xf32> {distopt.layout = [{name = "emb.weight", offset = 0 : i64, owner = 0 : i64, shape = array<i64: 4, 8>}], distopt.name = "owned0.right_factor", distopt.role = "state"}
// GREEDY-SAME: {distopt.layout = [{name = "fc.weight", offset = 0 : i64, owner = 1 : i64, shape = array<i64: 8, 6>}], distopt.name = "owned1.momentum"
// GREEDY-SAME: {distopt.layout = [{name = "fc.bias", offset = 0 : i64, owner = 1 : i64, shape = array<i64: 8>}], distopt.name = "owned2.exp_avg"
// GREEDY-SAME: {distopt.layout = [{name = "conv.weight", offset = 0 : i64, owner = 1 : i64, shape = array<i64: 4, 2, 3, 3>}], distopt.name = "owned3.momentum"
// GREEDY: distopt.owned_by @{{.*}} rank
// GREEDY: distopt.dion_update {{.*}} : tensor<16x8xf32> [tensor<16x8xf32>, tensor<4x8xf32>], f64
