// Folds and canonicalizations of the distopt ops, and what they must leave
// alone: collectives communicate, so they are neither dropped nor merged.
// RUN: distopt-opt %s -canonicalize -split-input-file | FileCheck %s
// RUN: distopt-opt %s -cse -split-input-file | FileCheck %s --check-prefix=CSE

distopt.process_group @dp size 4
distopt.process_group @single size 1

// CHECK-LABEL: func.func @group_queries
// CHECK-DAG: %[[C4:.*]] = arith.constant 4 : index
// CHECK-DAG: %[[C0:.*]] = arith.constant 0 : index
// CHECK-DAG: %[[R:.*]] = distopt.rank @dp : index
// CHECK: return %[[C4]], %[[C0]], %[[R]]
func.func @group_queries() -> (index, index, index) {
  %n = distopt.group_size @dp : index
  %r1 = distopt.rank @single : index
  %r = distopt.rank @dp : index
  return %n, %r1, %r : index, index, index
}

// On one rank a collective is the identity...
// CHECK-LABEL: func.func @singleton_collectives
// CHECK-SAME: (%[[G:.*]]: tensor<8xf32>)
// CHECK-NOT: distopt.all_reduce sum
// CHECK-NOT: distopt.reduce_scatter
// CHECK-NOT: distopt.all_gather
// CHECK-NOT: distopt.broadcast
// CHECK-NOT: distopt.reduce avg
// CHECK-NOT: distopt.shard_slice
// ...except a premul_sum, which still scales.
// CHECK: %[[P:.*]] = distopt.all_reduce premul_sum(5.000000e-01) %[[G]] on @single
// CHECK: return %[[G]], %[[G]], %[[G]], %[[G]], %[[G]], %[[G]], %[[P]]
func.func @singleton_collectives(%g: tensor<8xf32>) -> (tensor<8xf32>, tensor<8xf32>, tensor<8xf32>, tensor<8xf32>, tensor<8xf32>, tensor<8xf32>, tensor<8xf32>) {
  %0 = distopt.all_reduce sum %g on @single : tensor<8xf32>
  %1 = distopt.reduce_scatter avg %0 on @single : tensor<8xf32> -> tensor<8xf32>
  %2 = distopt.all_gather %1 on @single : tensor<8xf32> -> tensor<8xf32>
  %3 = distopt.broadcast %2 on @single root 0 : tensor<8xf32>
  %4 = distopt.reduce avg %3 on @single root 0 : tensor<8xf32>
  %5 = distopt.shard_slice %4 on @single : tensor<8xf32> -> tensor<8xf32>
  %6 = distopt.all_reduce premul_sum(0.5) %g on @single : tensor<8xf32>
  return %0, %1, %2, %3, %4, %5, %6 : tensor<8xf32>, tensor<8xf32>, tensor<8xf32>, tensor<8xf32>, tensor<8xf32>, tensor<8xf32>, tensor<8xf32>
}

// An unused collective still communicates: it stays. An unused update goes.
// Two identical collectives are two rounds of communication: both stay.
// CHECK-LABEL: func.func @effects
// CHECK: distopt.all_reduce sum
// CHECK: distopt.all_reduce sum
// CHECK: distopt.all_reduce sum
// CHECK-NOT: distopt.sgd_update
// CSE-LABEL: func.func @effects
// CSE: distopt.all_reduce sum
// CSE: distopt.all_reduce sum
// CSE: distopt.all_reduce sum
func.func @effects(%g: tensor<8xf32>, %lr: f32, %t: i64) -> (tensor<8xf32>, tensor<8xf32>) {
  %unused = distopt.all_reduce sum %g on @dp : tensor<8xf32>
  %a = distopt.all_reduce sum %g on @dp : tensor<8xf32>
  %b = distopt.all_reduce sum %g on @dp : tensor<8xf32>
  %p = distopt.sgd_update %g, %g lr(%lr) step(%t) : tensor<8xf32>, f32
  return %a, %b : tensor<8xf32>, tensor<8xf32>
}

// Pure ops are merged by CSE.
// CSE-LABEL: func.func @pure_cse
// CSE: distopt.bucket_pack
// CSE-NOT: distopt.bucket_pack
// CSE: return
func.func @pure_cse(%a: tensor<4xf32>) -> (tensor<16xf32>, tensor<16xf32>) {
  %0 = distopt.bucket_pack %a : tensor<4xf32> -> tensor<16xf32>
  %1 = distopt.bucket_pack %a : tensor<4xf32> -> tensor<16xf32>
  return %0, %1 : tensor<16xf32>, tensor<16xf32>
}

// CHECK-LABEL: func.func @unpack_of_pack
// CHECK-SAME: (%[[A:.*]]: tensor<3x3xf32>, %[[B:.*]]: tensor<5xf32>)
// CHECK-NOT: distopt.bucket
// CHECK: return %[[A]], %[[B]]
func.func @unpack_of_pack(%a: tensor<3x3xf32>, %b: tensor<5xf32>) -> (tensor<3x3xf32>, tensor<5xf32>) {
  %bucket = distopt.bucket_pack %a, %b : tensor<3x3xf32>, tensor<5xf32> -> tensor<32xf32>
  %x, %y = distopt.bucket_unpack %bucket : tensor<32xf32> -> tensor<3x3xf32>, tensor<5xf32>
  return %x, %y : tensor<3x3xf32>, tensor<5xf32>
}

// A different layout reads different elements: no fold.
// CHECK-LABEL: func.func @unpack_other_layout
// CHECK: distopt.bucket_pack
// CHECK: distopt.bucket_unpack
func.func @unpack_other_layout(%a: tensor<3x3xf32>, %b: tensor<5xf32>) -> (tensor<3x3xf32>, tensor<5xf32>) {
  %bucket = distopt.bucket_pack %a, %b : tensor<3x3xf32>, tensor<5xf32> -> tensor<32xf32>
  %x, %y = distopt.bucket_unpack %bucket {alignment = 4} : tensor<32xf32> -> tensor<3x3xf32>, tensor<5xf32>
  return %x, %y : tensor<3x3xf32>, tensor<5xf32>
}

// Only one rank of @single exists, and it owns everything: inline.
// CHECK-LABEL: func.func @owned_by
// CHECK: distopt.owned_by @dp rank 2
// CHECK:   distopt.sgd_update
// CHECK:   distopt.yield
// CHECK-NEXT: }
// CHECK-NEXT: %[[S:.*]] = distopt.sgd_update
// CHECK-NOT: distopt.owned_by
// CHECK: return %{{.*}}, %[[S]]
func.func @owned_by(%p: tensor<8xf32>, %g: tensor<8xf32>, %lr: f32, %t: i64) -> (tensor<8xf32>, tensor<8xf32>) {
  %a = distopt.owned_by @dp rank 2 otherwise(%p) : tensor<8xf32> {
    %u = distopt.sgd_update %p, %g lr(%lr) step(%t) : tensor<8xf32>, f32
    distopt.yield %u : tensor<8xf32>
  }
  %b = distopt.owned_by @single rank 0 otherwise(%p) : tensor<8xf32> {
    %u = distopt.sgd_update %p, %g lr(%lr) step(%t) : tensor<8xf32>, f32
    distopt.yield %u : tensor<8xf32>
  }
  return %a, %b : tensor<8xf32>, tensor<8xf32>
}
