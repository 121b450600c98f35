// ZeRO's low-rank plan for Dion (matrix-plan=lowrank; auto's at stage 3):
// each matrix a flat layout of its own whose chunks are whole rows, padded
// with zero rows (a 5 x 4 matrix at 3 ranks: 2 rows each, 24 elements in
// all), the update on this rank's block of rows with `row_group` and
// `matrix_rows`, the right factor whole. A matrix with no rows or no
// columns stays whole (nothing to cut), and the step lowers. Execution: test/Integration/dion-row-shards.test.
// RUN: distopt-opt %s --distopt-shard-optimizer=stage=3 --distopt-verify-collectives | FileCheck %s
// RUN: distopt-opt %s --distopt-shard-optimizer="stage=2 matrix-plan=lowrank" --distopt-verify-collectives | FileCheck %s --check-prefix=STAGE2
// RUN: distopt-opt %s --distopt-shard-optimizer=stage=3 --distopt-lower-to-cpu -o /dev/null
// RUN: distopt-opt %s --distopt-shard-optimizer=stage=3 --distopt-lower-optimizers | FileCheck %s --check-prefix=LOWERED
// RUN: distopt-opt %s --distopt-shard-optimizer=stage=3 --distopt-report -o /dev/null 2>&1 | FileCheck %s --check-prefix=REPORT

// CHECK-LABEL: func.func @step
// CHECK-SAME: %[[P:[^:]*]]: tensor<8xf32> {distopt.layout = [{name = "w", offset = 0 : i64, shape = array<i64: 5, 4>}], distopt.name = "flat0.param", distopt.role = "param", distopt.shard_of = 24 : i64}
// CHECK-SAME: %[[M:[^:]*]]: tensor<8xf32> {distopt.layout = [{name = "w", offset = 0 : i64, shape = array<i64: 5, 4>}], distopt.name = "flat0.momentum", distopt.role = "state", distopt.shard_of = 24 : i64}
// CHECK-SAME: %[[Q:[^:]*]]: tensor<2x4xf32> {distopt.name = "w.right_factor", distopt.role = "state"}
// CHECK: distopt.dion_update %arg{{[0-9]+}}, %{{.*}} state(%arg{{[0-9]+}}, %arg{{[0-9]+}}) lr(%{{.*}}) step(%{{.*}}) : tensor<0x5xf32>, f64
// CHECK: distopt.dion_update %arg{{[0-9]+}}, %{{.*}} state(%arg{{[0-9]+}}, %arg{{[0-9]+}}) lr(%{{.*}}) step(%{{.*}}) : tensor<5x0x3xf32> [tensor<5x0x3xf32>, tensor<0x0xf32>], f64
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
                  %e: tensor<0x5xf32> {distopt.name = "e", distopt.role = "param"},
                  %ge: tensor<0x5xf32> {distopt.name = "e", distopt.role = "grad"},
                  %me: tensor<0x5xf32> {distopt.name = "e.momentum", distopt.role = "state"},
                  %qe: tensor<0x5xf32> {distopt.name = "e.right_factor", distopt.role = "state"},
                  %c: tensor<5x0x3xf32> {distopt.name = "c", distopt.role = "param"},
                  %gc: tensor<5x0x3xf32> {distopt.name = "c", distopt.role = "grad"},
                  %mc: tensor<5x0x3xf32> {distopt.name = "c.momentum", distopt.role = "state"},
                  %qc: tensor<0x0xf32> {distopt.name = "c.right_factor", distopt.role = "state"},
                  %lr: f64 {distopt.role = "lr"}, %t: i64 {distopt.role = "step"})
      -> (tensor<5x4xf32> {distopt.name = "w", distopt.role = "param"},
          tensor<5x4xf32> {distopt.name = "w.momentum", distopt.role = "state"},
          tensor<2x4xf32> {distopt.name = "w.right_factor", distopt.role = "state"},
          tensor<0x5xf32> {distopt.name = "e", distopt.role = "param"},
          tensor<0x5xf32> {distopt.name = "e.momentum", distopt.role = "state"},
          tensor<0x5xf32> {distopt.name = "e.right_factor", distopt.role = "state"},
          tensor<5x0x3xf32> {distopt.name = "c", distopt.role = "param"},
          tensor<5x0x3xf32> {distopt.name = "c.momentum", distopt.role = "state"},
          tensor<0x0xf32> {distopt.name = "c.right_factor", distopt.role = "state"}) {
    %r = distopt.all_reduce sum %gw on @world : tensor<5x4xf32>
    %w1, %mw1, %qw1 = distopt.dion_update %w, %r state(%mw, %qw) lr(%lr) step(%t) {rank = 2 : i64} : tensor<5x4xf32> [tensor<5x4xf32>, tensor<2x4xf32>], f64
    %re = distopt.all_reduce sum %ge on @world : tensor<0x5xf32>
    %e1, %me1, %qe1 = distopt.dion_update %e, %re state(%me, %qe) lr(%lr) step(%t) : tensor<0x5xf32> [tensor<0x5xf32>, tensor<0x5xf32>], f64
    %rc = distopt.all_reduce sum %gc on @world : tensor<5x0x3xf32>
    %c1, %mc1, %qc1 = distopt.dion_update %c, %rc state(%mc, %qc) lr(%lr) step(%t) : tensor<5x0x3xf32> [tensor<5x0x3xf32>, tensor<0x0xf32>], f64
    return %w1, %mw1, %qw1, %e1, %me1, %qe1, %c1, %mc1, %qc1 : tensor<5x4xf32>, tensor<5x4xf32>, tensor<2x4xf32>, tensor<0x5xf32>, tensor<0x5xf32>, tensor<0x5xf32>, tensor<5x0x3xf32>, tensor<5x0x3xf32>, tensor<0x0xf32>
  }
}
