// RUN: distopt-opt %s -split-input-file --distopt-hierarchical-all-reduce="node-size=2 min-bytes=64" -verify-diagnostics | FileCheck %s
// RUN: distopt-opt %s -split-input-file --distopt-hierarchical-all-reduce | FileCheck %s --check-prefix=OFF
// RUN: not distopt-opt %s -split-input-file --distopt-hierarchical-all-reduce=node-size=-2 2>&1 | FileCheck %s --check-prefix=NEGATIVE
// RUN: distopt-opt %S/Inputs/hierarchical-report.mlir --distopt-hierarchical-all-reduce=node-size=2 --distopt-report -o /dev/null | FileCheck %s --check-prefix=REPORT
// RUN: distopt-opt %S/Inputs/hierarchical-report-bf16.mlir --distopt-hierarchical-all-reduce=node-size=2 --distopt-report -o /dev/null | FileCheck %s --check-prefix=REPORT514

// A 4 MiB average on 2 nodes of 2: 1/2 of it crosses the nodes (2 MiB sent
// per rank on @inter_node), the rest stays inside (the report's bytes per
// group).
// REPORT:      reduce_scatter 1 4194304 2097152
// REPORT:      all_reduce 1 2097152 2097152
// REPORT:      all_gather 1 4194304 2097152
// REPORT:      by process group:
// REPORT-NEXT: @inter_node (2 ranks, axes [0] of @nodes [2, 2]) 1 2097152 2097152
// REPORT-NEXT: @intra_node (2 ranks, axes [1] of @nodes [2, 2]) 2 8388608 4194304

// The gradient bytes of a 2 MiB bf16 average on 514 ranks: those of one
// reduction, though its chunk is divided in f32 between the stages.
// REPORT514: gradients (after reduction) 2097152

// NEGATIVE: node-size and min-bytes must not be negative, got -2 and 1048576
// By default (node-size=0) nothing changes.
// OFF-NOT: reduce_scatter
// OFF-NOT: distopt.mesh @nodes

// An avg of 21 elements on 2 nodes of 2: flattened, padded to 22, summed in
// the node and across, divided by the world's 4, gathered in the node.
distopt.process_group @dp size 4
// CHECK-DAG:   distopt.mesh @nodes shape [2, 2]
// CHECK-DAG:   distopt.process_group @intra_node size 2 over @nodes axes [1]
// CHECK-DAG:   distopt.process_group @inter_node size 2 over @nodes axes [0]
// CHECK-LABEL: func.func @large
// CHECK:       %[[F:.*]] = tensor.collapse_shape %arg0 {{\[\[}}0, 1]] : tensor<3x7xf32> into tensor<21xf32>
// CHECK:       %[[P:.*]] = tensor.insert_slice %[[F]] into %{{.*}}[0] [21] [1] : tensor<21xf32> into tensor<22xf32>
// CHECK:       %[[C:.*]] = distopt.reduce_scatter sum %[[P]] on @intra_node : tensor<22xf32> -> tensor<11xf32>
// CHECK:       %[[A:.*]] = distopt.all_reduce sum %[[C]] on @inter_node : tensor<11xf32>
// CHECK:       %[[D:.*]] = arith.divf %[[A]], %{{.*}} : tensor<11xf32>
// CHECK:       %[[G:.*]] = distopt.all_gather %[[D]] on @intra_node : tensor<11xf32> -> tensor<22xf32>
// CHECK:       %[[S:.*]] = tensor.extract_slice %[[G]][0] [21] [1] : tensor<22xf32> to tensor<21xf32>
// CHECK:       %[[R:.*]] = tensor.expand_shape %[[S]] {{\[\[}}0, 1]] output_shape [3, 7] : tensor<21xf32> into tensor<3x7xf32>
// CHECK:       return %[[R]]
func.func @large(%x: tensor<3x7xf32>) -> tensor<3x7xf32> {
  %y = distopt.all_reduce avg %x on @dp : tensor<3x7xf32>
  return %y : tensor<3x7xf32>
}
// A premul_sum scales in the first stage; the wire type carries over; a
// max stays a max; below min-bytes the all_reduce stays flat.
// CHECK-LABEL: func.func @kinds
// CHECK:       distopt.reduce_scatter premul_sum(2.500000e-01) %arg0 on @intra_node wire bf16 : tensor<32xf32> -> tensor<16xf32>
// CHECK:       distopt.all_reduce sum %{{.*}} on @inter_node wire bf16 : tensor<16xf32>
// CHECK:       distopt.all_gather %{{.*}} on @intra_node wire bf16 : tensor<16xf32> -> tensor<32xf32>
// CHECK:       distopt.reduce_scatter max %arg1 on @intra_node
// CHECK:       distopt.all_reduce max %{{.*}} on @inter_node
// CHECK:       distopt.all_reduce sum %arg2 on @dp : tensor<4xf32>
func.func @kinds(%x: tensor<32xf32>, %m: tensor<32xi32>, %s: tensor<4xf32>) -> (tensor<32xf32>, tensor<32xi32>, tensor<4xf32>) {
  %a = distopt.all_reduce premul_sum(0.25) %x on @dp wire bf16 : tensor<32xf32>
  %b = distopt.all_reduce max %m on @dp : tensor<32xi32>
  %c = distopt.all_reduce sum %s on @dp : tensor<4xf32>
  return %a, %b, %c : tensor<32xf32>, tensor<32xi32>, tensor<4xf32>
}

// -----

// A world of one node stays flat, and a sub-group is left alone.
distopt.process_group @dp size 2
distopt.mesh @m shape [1, 2]
distopt.process_group @rows size 2 over @m axes [1]
// CHECK-LABEL: func.func @flat
// CHECK-NOT:   distopt.mesh @nodes
// CHECK:       distopt.all_reduce sum %arg0 on @dp : tensor<64xf32>
// CHECK:       distopt.all_reduce sum %arg1 on @rows : tensor<64xf32>
func.func @flat(%x: tensor<64xf32>, %y: tensor<64xf32>) -> (tensor<64xf32>, tensor<64xf32>) {
  %a = distopt.all_reduce sum %x on @dp : tensor<64xf32>
  %b = distopt.all_reduce sum %y on @rows : tensor<64xf32>
  return %a, %b : tensor<64xf32>, tensor<64xf32>
}

// -----

// A node size that does not divide the world is an error, as
// hybrid-shard-size's is (it was ignored).
// expected-error @+1 {{--distopt-hierarchical-all-reduce: node-size=2 does not divide the world of 3 ranks into nodes}}
distopt.process_group @dp size 3
func.func @uneven(%x: tensor<64xf32>) -> tensor<64xf32> {
  %a = distopt.all_reduce sum %x on @dp : tensor<64xf32>
  return %a : tensor<64xf32>
}

// -----

// The names it declares are taken by something else: an error, not a
// clash.
distopt.process_group @dp size 4
// expected-error @+1 {{--distopt-hierarchical-all-reduce declares @nodes, but the module has another symbol of that name}}
func.func private @nodes()
func.func @taken(%x: tensor<64xf32>) -> tensor<64xf32> {
  %a = distopt.all_reduce sum %x on @dp : tensor<64xf32>
  return %a : tensor<64xf32>
}

// -----

// bf16 on 514 ranks (257 nodes of 2): bf16 cannot hold 514 (it would divide
// by 512), so the chunk is divided in f32 and rounded once.
distopt.process_group @dp size 514
// CHECK-LABEL: func.func @bf16_beyond_256
// CHECK:       %[[A:.*]] = distopt.all_reduce sum %{{.*}} on @inter_node : tensor<32xbf16>
// CHECK-NEXT:  %[[E:.*]] = arith.extf %[[A]] : tensor<32xbf16> to tensor<32xf32>
// CHECK-NEXT:  %[[N:.*]] = arith.constant dense<5.140000e+02> : tensor<32xf32>
// CHECK-NEXT:  %[[D:.*]] = arith.divf %[[E]], %[[N]] : tensor<32xf32>
// CHECK-NEXT:  %[[T:.*]] = arith.truncf %[[D]] : tensor<32xf32> to tensor<32xbf16>
// CHECK-NEXT:  distopt.all_gather %[[T]] on @intra_node
func.func @bf16_beyond_256(%x: tensor<64xbf16>) -> tensor<64xbf16> {
  %y = distopt.all_reduce avg %x on @dp : tensor<64xbf16>
  return %y : tensor<64xbf16>
}
