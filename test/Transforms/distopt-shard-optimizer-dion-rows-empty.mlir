// Dion matrices without elements have no rows to cut: stage 3 (no owners)
// refuses them by name; at stage 2 with matrix-plan=lowrank they stay on
// an owner beside the matrix in blocks of rows, and the step lowers.
// RUN: not distopt-opt %s --distopt-shard-optimizer=stage=3 2>&1 | FileCheck %s --check-prefix=STAGE3
// RUN: distopt-opt %s --distopt-shard-optimizer="stage=2 matrix-plan=lowrank" --distopt-verify-collectives | FileCheck %s
// RUN: distopt-opt %s --distopt-shard-optimizer="stage=2 matrix-plan=lowrank" --distopt-lower-to-cpu -o /dev/null
// The greedy strategy's owned buffers hold them as no slice at all (offset
// 0 of an empty buffer would not verify).
// RUN: distopt-opt %s --distopt-pipeline="zero-stage=1 zero-strategy=greedy" -o /dev/null
// RUN: distopt-opt %s --distopt-pipeline="zero-stage=2 zero-strategy=greedy" -o /dev/null

// STAGE3: error: cannot shard 'distopt.dion_update': its matrix has no elements to cut into blocks of rows, and stage 3 keeps only a chunk of each parameter on a rank (stages 1 and 2 keep it whole on an owner; or give it a group of its own)
// CHECK-LABEL: func.func @step
// CHECK: distopt.dion_update {{.*}} {matrix_rows = 5 : i64, rank = 2 : i64, row_group = @world} : tensor<2x4xf32>, f64
// CHECK: distopt.owned_by @world rank {{[0-9]}}
// CHECK: distopt.dion_update {{.*}} : tensor<0x5xf32>, f64
// CHECK: distopt.owned_by @world rank {{[0-9]}}
// CHECK: distopt.dion_update {{.*}} : tensor<5x0x3xf32> [tensor<5x0x3xf32>, tensor<0x0xf32>], f64
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
