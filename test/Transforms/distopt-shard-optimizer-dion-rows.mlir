// ZeRO's low-rank plan for Dion (matrix-plan=lowrank; auto's at stage 3):
// each matrix a flat layout of its own whose chunks are whole rows, padded
// with zero rows (a 5 x 4 matrix at 3 ranks: 2 rows each, 24 elements in
// all), the update on this rank's block of rows with `row_group` and
// `matrix_rows`, the right factor whole; the step lowers. Matrices
// without elements: distopt-shard-optimizer-dion-rows-empty.mlir. Execution: test/Integration/dion-row-shards.test.
// RUN: distopt-opt %s --distopt-shard-optimizer=stage=3 --distopt-verify-collectives | FileCheck %s
// RUN: distopt-opt %s --distopt-shard-optimizer="stage=2 matrix-plan=lowrank" --distopt-verify-collectives | FileCheck %s --check-prefix=STAGE2
// RUN: distopt-opt %s --distopt-shard-optimizer=stage=3 --distopt-lower-to-cpu -o /dev/null
// RUN: distopt-opt %s --distopt-shard-optimizer=stage=3 --distopt-lower-optimizers | FileCheck %s --check-prefix=LOWERED
// RUN: distopt-opt %s --distopt-shard-optimizer=stage=3 --distopt-report -o /dev/null 2>&1 | FileCheck %s --check-prefix=REPORT
// An update in blocks of rows communicates: sharding again leaves it be
// (no owner takes it).
// RUN: distopt-opt %s --distopt-shard-optimizer=stage=3 | distopt-opt --distopt-shard-optimizer=stage=2 --distopt-verify-collectives | FileCheck %s --check-prefix=TWICE

// CHECK-LABEL: func.func @step
// CHECK-SAME: %[[P:[^:]*]]: tensor<8xf32> {distopt.layout = [{name = "w", offset = 0 : i64, shape = array<i64: 5, 4>}], distopt.name = "flat0.param", distopt.role = "param", distopt.shard_of = 24 : i64}
// CHECK-SAME: %[[M:[^:]*]]: tensor<8xf32> {distopt.layout = [{name = "w", offset = 0 : i64, shape = array<i64: 5, 4>}], distopt.name = "flat0.momentum", distopt.role = "state", distopt.shard_of = 24 : i64}
// CHECK-SAME: %[[Q:[^:]*]]: tensor<2x4xf32> {distopt.name = "w.right_factor", distopt.role = "state"}
// CHECK: %[[PACK:.*]] = distopt.bucket_pack {{.*}} : tensor<5x4xf32> -> tensor<24xf32>
// CHECK: %[[G:.*]] = distopt.reduce_scatter sum %[[PACK]] on @world : tensor<24xf32> -> tensor<8xf32>
// CHECK-DAG: %[[PB:.*]] = tensor.expand_shape %[[P]] {{.*}} : tensor<8xf32> into tensor<2x4xf32>
// CHECK-DAG: %[[GB:.*]] = tensor.expand_shape %[[G]] {{.*}} : tensor<8xf32> into tensor<2x4xf32>
// CHECK-DAG: %[[MB:.*]] = tensor.expand_shape %[[M]] {{.*}} : tensor<8xf32> into tensor<2x4xf32>
// CHECK: distopt.dion_update %[[PB]], %[[GB]] state(%[[MB]], %[[Q]]) {{.*}} {matrix_rows = 5 : i64, rank = 2 : i64, row_group = @world} : tensor<2x4xf32>, f64
// STAGE2-LABEL: func.func @step
// STAGE2: distopt.dion_update {{.*}} {matrix_rows = 5 : i64, rank = 2 : i64, row_group = @world} : tensor<2x4xf32>, f64
// STAGE2: distopt.all_gather {{.*}} on @world : tensor<8xf32> -> tensor<24xf32>
// The rows of P (2 x 2 here) gathered, this rank's columns of the
// orthonormalized P^T taken, R^T summed.
// TWICE-NOT: distopt.owned_by
// TWICE: distopt.dion_update {{.*}} {matrix_rows = 5 : i64, rank = 2 : i64, row_group = @world} : tensor<2x4xf32>, f64
// TWICE-NOT: distopt.owned_by
// LOWERED-LABEL: func.func @step
// LOWERED: distopt.all_gather %{{.*}} on @world : tensor<2x2xf32> -> tensor<6x2xf32>
// LOWERED: scf.for
// LOWERED: distopt.shard_slice %{{.*}} on @world : tensor<6x2xf32> -> tensor<2x2xf32>
// LOWERED: distopt.all_reduce sum %{{.*}} on @world : tensor<2x4xf32>
// The report counts the factors' two collectives: P's rows gathered (3
// blocks of 2 x 2 f32: 48 bytes, 32 sent) and R all-reduced (4 x 2 f32:
// 32 bytes, 42.7 sent).
// REPORT: dion_update (rows)          2               80               75
// REPORT: (dion_update: 1 matrices in blocks of rows, each gathering P's rows and all-reducing R)
module attributes {distopt.world_size = 3 : i64} {
  distopt.process_group @world size 3
  func.func @step(%w: tensor<5x4xf32> {distopt.name = "w", distopt.role = "param"},
                  %gw: tensor<5x4xf32> {distopt.name = "w", distopt.role = "grad"},
                  %mw: tensor<5x4xf32> {distopt.name = "w.momentum", distopt.role = "state"},
                  %qw: tensor<2x4xf32> {distopt.name = "w.right_factor", distopt.role = "state"},
                  %lr: f64 {distopt.role = "lr"}, %t: i64 {distopt.role = "step"})
      -> (tensor<5x4xf32> {distopt.name = "w", distopt.role = "param"},
          tensor<5x4xf32> {distopt.name = "w.momentum", distopt.role = "state"},
          tensor<2x4xf32> {distopt.name = "w.right_factor", distopt.role = "state"}) {
    %r = distopt.all_reduce sum %gw on @world : tensor<5x4xf32>
    %w1, %mw1, %qw1 = distopt.dion_update %w, %r state(%mw, %qw) lr(%lr) step(%t) {rank = 2 : i64} : tensor<5x4xf32> [tensor<5x4xf32>, tensor<2x4xf32>], f64
    return %w1, %mw1, %qw1 : tensor<5x4xf32>, tensor<5x4xf32>, tensor<2x4xf32>
  }
}
