// RUN: distopt-opt %s -split-input-file --distopt-lower-local-ops -verify-diagnostics | FileCheck %s
// RUN: distopt-opt %s -split-input-file --distopt-lower-local-ops -verify-diagnostics --distopt-lower-to-cpu | FileCheck %s --check-prefix=LLVM
// RUN: distopt-opt %s -split-input-file --distopt-lower-local-ops=max-shard-cases=1 -verify-diagnostics | FileCheck %s --check-prefix=RUNTIME

distopt.process_group @dp size 2

// Buckets: each tensor copied once at its offset, zeros only in the gaps.
// CHECK-LABEL: func.func @buckets
// CHECK-SAME: (%[[A:.*]]: tensor<3x3xf32>, %[[B:.*]]: tensor<5xf32>)
// CHECK: %[[E:.*]] = tensor.empty() : tensor<32xf32>
// CHECK: %[[FA:.*]] = tensor.collapse_shape %[[A]] {{\[\[}}0, 1]] : tensor<3x3xf32> into tensor<9xf32>
// CHECK: %[[I0:.*]] = tensor.insert_slice %[[FA]] into %[[E]][0] [9] [1]
// Zeros are fills (a constant would become a global as large as the gap).
// CHECK: %[[ZE:.*]] = tensor.empty() : tensor<7xf32>
// CHECK: %[[Z:.*]] = linalg.fill ins(%{{.*}} : f32) outs(%[[ZE]] : tensor<7xf32>)
// CHECK: %[[I1:.*]] = tensor.insert_slice %[[Z]] into %[[I0]][9] [7] [1]
// CHECK: %[[I2:.*]] = tensor.insert_slice %[[B]] into %[[I1]][16] [5] [1]
// CHECK: %[[TE:.*]] = tensor.empty() : tensor<11xf32>
// CHECK: %[[T:.*]] = linalg.fill ins(%{{.*}} : f32) outs(%[[TE]] : tensor<11xf32>)
// CHECK: %[[P:.*]] = tensor.insert_slice %[[T]] into %[[I2]][21] [11] [1]
// CHECK: %[[R:.*]] = distopt.all_reduce sum %[[P]]
// CHECK: %[[SA:.*]] = tensor.extract_slice %[[R]][0] [9] [1]
// CHECK: tensor.expand_shape %[[SA]] {{\[\[}}0, 1]] output_shape [3, 3]
// CHECK: tensor.extract_slice %[[R]][16] [5] [1]
// The process group becomes private, for symbol-dce after bufferization.
// LLVM-NOT: distopt.
// LLVM: llvm.func @distopt_rt_world(i64, !llvm.ptr) -> i32
// LLVM-LABEL: llvm.func @buckets
// LLVM: llvm.call @distopt_rt_all_reduce
func.func @buckets(%a: tensor<3x3xf32>, %b: tensor<5xf32>) -> (tensor<3x3xf32>, tensor<5xf32>) {
  %p = distopt.bucket_pack %a, %b : tensor<3x3xf32>, tensor<5xf32> -> tensor<32xf32>
  %r = distopt.all_reduce sum %p on @dp : tensor<32xf32>
  %x, %y = distopt.bucket_unpack %r : tensor<32xf32> -> tensor<3x3xf32>, tensor<5xf32>
  return %x, %y : tensor<3x3xf32>, tensor<5xf32>
}

// The rank comes from the runtime; a shard is a slice at rank * chunk; the
// owner's body runs in a loop of one iteration on the owner and none
// elsewhere, which reads the `otherwise` values it carries
// (--distopt-owner-loops-to-branches makes it an scf.if after
// bufferization).
// CHECK-LABEL: func.func @ownership
// CHECK-SAME: %[[Y:[a-z0-9]+]]: tensor<4xf32>
// CHECK: %[[W:.*]] = llvm.load {{.*}} : !llvm.ptr -> !llvm.ptr
// CHECK: call @distopt_rt_comm_rank(%[[W]], %{{.*}})
// CHECK: %[[RANK:.*]] = arith.index_cast %{{.*}} : i64 to index
// CHECK: %[[OFF:.*]] = arith.muli %[[RANK]], %{{.*}} : index
// CHECK: tensor.extract_slice %{{.*}}[%[[OFF]]] [4] [1] : tensor<8xf32> to tensor<4xf32>
// CHECK: %[[OWNER:.*]] = arith.cmpi eq, %{{.*}}, %{{.*}} : index
// CHECK: %[[TRIPS:.*]] = arith.select %[[OWNER]], %[[ONE:.*]], %[[ZERO:.*]] : index
// CHECK: scf.for %{{.*}} = %[[ZERO]] to %[[TRIPS]] step %[[ONE]] iter_args(%[[C:.*]] = %[[Y]]) -> (tensor<4xf32>) {
// CHECK:   %[[Z:.*]] = arith.addf %[[C]], %[[C]]
// CHECK:   scf.yield %[[Z]] : tensor<4xf32>
// CHECK: } {distopt.owner_loop}
// CHECK: arith.constant 2 : index
// Lowered, the owner's test is a branch, not a loop's header.
// LLVM-LABEL: llvm.func @ownership
// LLVM: %[[OWN:.*]] = llvm.icmp "eq" %{{.*}}, %{{.*}} : i64
// LLVM-NEXT: llvm.cond_br %[[OWN]], ^{{.*}}, ^{{.*}}
func.func @ownership(%x: tensor<8xf32>, %y: tensor<4xf32>) -> (tensor<4xf32>, tensor<4xf32>, index) {
  %s = distopt.shard_slice %x on @dp : tensor<8xf32> -> tensor<4xf32>
  %o = distopt.owned_by @dp rank 1 otherwise(%y) : tensor<4xf32> {
    %z = arith.addf %y, %y : tensor<4xf32>
    distopt.yield %z : tensor<4xf32>
  }
  %n = distopt.group_size @dp : index
  return %s, %o, %n : tensor<4xf32>, tensor<4xf32>, index
}

// A shard of a pack (ZeRO's own parameter shard) packs only this rank's
// chunk: a case per rank with static slices, or, beyond max-shard-cases
// ranks, each input's overlap with the chunk computed at run time.
// CHECK-LABEL: func.func @shard_of_pack
// CHECK: scf.index_switch
// CHECK: case 0 {
// CHECK: case 1 {
// RUNTIME-LABEL: func.func @shard_of_pack
// RUNTIME-NOT: scf.index_switch
// RUNTIME: %[[FILLED:.*]] = linalg.fill
// RUNTIME: %[[BEGIN:.*]] = arith.muli %{{.*}}, %{{.*}} : index
// RUNTIME: %[[LO:.*]] = arith.maxsi %{{.*}}, %[[BEGIN]] : index
// RUNTIME: %[[HI:.*]] = arith.minsi
// RUNTIME: %[[OVERLAPS:.*]] = arith.cmpi slt, %[[LO]], %[[HI]] : index
// RUNTIME: %[[A:.*]] = scf.if %[[OVERLAPS]] -> (tensor<16xf32>) {
// RUNTIME:   tensor.extract_slice %{{.*}}[%{{.*}}] [%{{.*}}] [1] : tensor<9xf32> to tensor<?xf32>
// RUNTIME:   tensor.insert_slice %{{.*}} into %[[FILLED]][%{{.*}}] [%{{.*}}] [1] : tensor<?xf32> into tensor<16xf32>
// RUNTIME: } else {
// RUNTIME:   scf.yield %[[FILLED]] : tensor<16xf32>
// RUNTIME: scf.if %{{.*}} -> (tensor<16xf32>) {
// RUNTIME: tensor.insert_slice %{{.*}} into %[[A]]
func.func @shard_of_pack(%a: tensor<3x3xf32>, %b: tensor<5xf32>) -> tensor<16xf32> {
  %p = distopt.bucket_pack %a, %b : tensor<3x3xf32>, tensor<5xf32> -> tensor<32xf32>
  %s = distopt.shard_slice %p on @dp : tensor<32xf32> -> tensor<16xf32>
  return %s : tensor<16xf32>
}

// -----

// An asynchronous collective: the start copies its input into a buffer the
// request owns and starts the runtime collective; the wait completes it.
distopt.process_group @dp size 2
// LLVM-LABEL: llvm.func @async
// LLVM: "llvm.intr.memcpy"
// LLVM: llvm.call @distopt_rt_world
// LLVM: llvm.call @distopt_rt_all_reduce_start
// LLVM: llvm.fmul
// LLVM: llvm.call @distopt_rt_wait
// LLVM: llvm.return
func.func @async(%g: tensor<8xf32>, %x: tensor<8xf32>) -> (tensor<8xf32>, tensor<8xf32>) {
  %t = distopt.all_reduce_start avg %g on @dp : tensor<8xf32> -> !distopt.token<tensor<8xf32>>
  %y = arith.mulf %x, %x : tensor<8xf32>
  %r = distopt.wait %t : !distopt.token<tensor<8xf32>>
  return %r, %y : tensor<8xf32>, tensor<8xf32>
}

// -----

// PowerSGD: M = G + E; Q orthogonalized (2 columns: 2 norms), then used
// transposed (contiguous like M's rows); P = M Q summed; P orthogonalized;
// Q'^T = P^T M averaged; R = P Q'^T and E' = M - R in one pass (each column
// of P and row of Q'^T an input); Q' returned. Destination-passing style,
// so that the step updates in place: M is written over E, R over G, E'
// over M (read as that output's current value), Q' over Q.
// CHECK-LABEL: func.func @powersgd
// CHECK-SAME: (%[[G:[^:]*]]: tensor<8x4xf32>, %{{[^:]*}}: tensor<8x2xf32>, %[[Q0:[^:]*]]: tensor<4x2xf32>, %[[E:[^:]*]]: tensor<8x4xf32>)
// CHECK: %[[M:.*]] = linalg.generic {{.*}} ins(%[[G]] : tensor<8x4xf32>) outs(%[[E]] : tensor<8x4xf32>)
// CHECK: arith.addf
// CHECK: math.sqrt
// CHECK: math.sqrt
// CHECK: linalg.transpose ins(%{{.*}} : tensor<4x2xf32>) outs(%{{.*}} : tensor<2x4xf32>)
// CHECK: distopt.all_reduce sum %{{.*}} on @dp : tensor<8x2xf32>
// CHECK: math.sqrt
// CHECK: math.sqrt
// CHECK: %[[QT:.*]] = distopt.all_reduce avg %{{.*}} on @dp : tensor<2x4xf32>
// CHECK-NOT: distopt.powersgd_all_reduce
// CHECK: %[[RE:.*]]:2 = linalg.generic {{.*}} iterator_types = ["parallel", "parallel"]} ins(%[[P:.*]], %[[QT]], %[[P]], %[[QT]] : tensor<8x2xf32>, tensor<2x4xf32>, tensor<8x2xf32>, tensor<2x4xf32>) outs(%[[G]], %[[M]] : tensor<8x4xf32>, tensor<8x4xf32>)
// CHECK: ^bb0(%{{[^:]*}}: f32, %{{[^:]*}}: f32, %{{[^:]*}}: f32, %{{[^:]*}}: f32, %{{[^:]*}}: f32, %[[MOUT:[^:]*]]: f32):
// CHECK: %[[NEWE:.*]] = arith.subf %[[MOUT]], %[[R:.*]] : f32
// CHECK-NEXT: linalg.yield %[[R]], %[[NEWE]]
// CHECK: %[[Q:.*]] = linalg.transpose ins(%[[QT]] : tensor<2x4xf32>) outs(%[[Q0]] : tensor<4x2xf32>)
// CHECK: return %[[RE]]#0, %[[P]], %[[Q]], %[[RE]]#1
distopt.process_group @dp size 2
func.func @powersgd(%g: tensor<8x4xf32>, %p: tensor<8x2xf32>, %q: tensor<4x2xf32>, %e: tensor<8x4xf32>)
    -> (tensor<8x4xf32>, tensor<8x2xf32>, tensor<4x2xf32>, tensor<8x4xf32>) {
  %r:4 = distopt.powersgd_all_reduce %g, %p, %q, %e on @dp rank 2 : tensor<8x4xf32>, tensor<8x2xf32>, tensor<4x2xf32>
  return %r#0, %r#1, %r#2, %r#3 : tensor<8x4xf32>, tensor<8x2xf32>, tensor<4x2xf32>, tensor<8x4xf32>
}

// -----

// Without error feedback M is G itself; R is still written over G (after
// the products read it) and Q' over Q.
// CHECK-LABEL: func.func @powersgd_no_error
// CHECK-SAME: (%[[G:[^:]*]]: tensor<8x4xf32>, %{{[^:]*}}: tensor<8x2xf32>, %[[Q0:[^:]*]]: tensor<4x2xf32>)
// CHECK: %[[R:.*]] = linalg.generic {{.*}} outs(%[[G]] : tensor<8x4xf32>)
// CHECK: %[[Q:.*]] = linalg.transpose {{.*}} outs(%[[Q0]] : tensor<4x2xf32>)
// CHECK: return %[[R]], %{{.*}}, %[[Q]]
distopt.process_group @dp size 2
func.func @powersgd_no_error(%g: tensor<8x4xf32>, %p: tensor<8x2xf32>, %q: tensor<4x2xf32>)
    -> (tensor<8x4xf32>, tensor<8x2xf32>, tensor<4x2xf32>) {
  %r:3 = distopt.powersgd_all_reduce %g, %p, %q on @dp rank 2 : tensor<8x4xf32>, tensor<8x2xf32>, tensor<4x2xf32>
  return %r#0, %r#1, %r#2 : tensor<8x4xf32>, tensor<8x2xf32>, tensor<4x2xf32>
}

// -----

// PowerSGD ops of one block with the same batch number are lowered as a
// batch: both first products,
// then their P factors (16 + 64 elements, packed without padding) summed in
// one all_reduce, then both second products, then the Q factors (8 + 8)
// averaged in one, then both approximations. The bf16 one is a batch of its
// own (a bucket holds one element type).
// CHECK-LABEL: func.func @powersgd_batch
// CHECK-NOT: distopt.all_reduce
// CHECK: tensor.insert_slice %{{.*}} into %{{.*}}[0] [16] [1] : tensor<16xf32> into tensor<80xf32>
// CHECK: tensor.insert_slice %{{.*}} into %{{.*}}[16] [64] [1] : tensor<64xf32> into tensor<80xf32>
// CHECK: %[[PS:.*]] = distopt.all_reduce sum %{{.*}} on @dp : tensor<80xf32>
// CHECK-NOT: distopt.all_reduce
// CHECK: tensor.extract_slice %[[PS]][0] [16] [1]
// CHECK: tensor.extract_slice %[[PS]][16] [64] [1]
// CHECK-NOT: distopt.all_reduce
// CHECK: math.sqrt
// CHECK: %[[QS:.*]] = distopt.all_reduce avg %{{.*}} on @dp : tensor<16xf32>
// CHECK-NOT: distopt.all_reduce {{.*}}f32>
// CHECK: distopt.all_reduce sum %{{.*}} on @dp : tensor<8x1xbf16>
// CHECK: distopt.all_reduce avg %{{.*}} on @dp : tensor<1x4xbf16>
// CHECK-NOT: distopt.all_reduce
// CHECK: return
distopt.process_group @dp size 2
func.func @powersgd_batch(%g0: tensor<16x8xf32>, %p0: tensor<16x1xf32>, %q0: tensor<8x1xf32>,
                          %g1: tensor<32x4xf32>, %p1: tensor<32x2xf32>, %q1: tensor<4x2xf32>,
                          %g2: tensor<8x4xbf16>, %p2: tensor<8x1xbf16>, %q2: tensor<4x1xbf16>)
    -> (tensor<16x8xf32>, tensor<32x4xf32>, tensor<8x4xbf16>) {
  %r0:3 = distopt.powersgd_all_reduce %g0, %p0, %q0 on @dp rank 1 {batch = 0 : i64} : tensor<16x8xf32>, tensor<16x1xf32>, tensor<8x1xf32>
  %r2:3 = distopt.powersgd_all_reduce %g2, %p2, %q2 on @dp rank 1 {batch = 0 : i64} : tensor<8x4xbf16>, tensor<8x1xbf16>, tensor<4x1xbf16>
  %r1:3 = distopt.powersgd_all_reduce %g1, %p1, %q1 on @dp rank 2 {batch = 0 : i64} : tensor<32x4xf32>, tensor<32x2xf32>, tensor<4x2xf32>
  return %r0#0, %r1#0, %r2#0 : tensor<16x8xf32>, tensor<32x4xf32>, tensor<8x4xbf16>
}

// -----

// Interleaved kinds: the bf16 batch goes first (before %b0), the f32 batch
// before %b1, the first op after the f32 gradient %g1 is computed; each
// batch's ops are erased only once every batch is lowered.
// CHECK-LABEL: func.func @powersgd_interleaved
// CHECK: distopt.all_reduce sum %{{.*}} : tensor<16xbf16>
// CHECK: distopt.all_reduce avg %{{.*}} : tensor<8xbf16>
// CHECK: arith.addf %{{.*}} : tensor<8x4xf32>
// CHECK: distopt.all_reduce sum %{{.*}} : tensor<16xf32>
// CHECK: distopt.all_reduce avg %{{.*}} : tensor<8xf32>
// CHECK-NOT: distopt.all_reduce
distopt.process_group @dp size 2
func.func @powersgd_interleaved(
    %gb0: tensor<8x4xbf16>, %pb0: tensor<8x1xbf16>, %qb0: tensor<4x1xbf16>,
    %g0: tensor<8x4xf32>, %p0: tensor<8x1xf32>, %q0: tensor<4x1xf32>,
    %h: tensor<8x4xf32>, %p1: tensor<8x1xf32>, %q1: tensor<4x1xf32>,
    %gb1: tensor<8x4xbf16>, %pb1: tensor<8x1xbf16>, %qb1: tensor<4x1xbf16>)
    -> (tensor<8x4xbf16>, tensor<8x4xf32>, tensor<8x4xf32>, tensor<8x4xbf16>) {
  %b0:3 = distopt.powersgd_all_reduce %gb0, %pb0, %qb0 on @dp rank 1 {batch = 0 : i64} : tensor<8x4xbf16>, tensor<8x1xbf16>, tensor<4x1xbf16>
  %a0:3 = distopt.powersgd_all_reduce %g0, %p0, %q0 on @dp rank 1 {batch = 0 : i64} : tensor<8x4xf32>, tensor<8x1xf32>, tensor<4x1xf32>
  %g1 = arith.addf %h, %h : tensor<8x4xf32>
  %b1:3 = distopt.powersgd_all_reduce %gb1, %pb1, %qb1 on @dp rank 1 {batch = 0 : i64} : tensor<8x4xbf16>, tensor<8x1xbf16>, tensor<4x1xbf16>
  %a1:3 = distopt.powersgd_all_reduce %g1, %p1, %q1 on @dp rank 1 {batch = 0 : i64} : tensor<8x4xf32>, tensor<8x1xf32>, tensor<4x1xf32>
  return %b0#0, %a0#0, %a1#0, %b1#0 : tensor<8x4xbf16>, tensor<8x4xf32>, tensor<8x4xf32>, tensor<8x4xbf16>
}

// -----

// A result used before the next op (here the next op's gradient depends on
// it) ends the batch, whatever the numbers say: two all_reduces per op, in
// program order.
// CHECK-LABEL: func.func @powersgd_dependent
// CHECK: distopt.all_reduce sum %{{.*}} : tensor<8x1xf32>
// CHECK: distopt.all_reduce avg %{{.*}} : tensor<1x8xf32>
// CHECK: distopt.all_reduce sum %{{.*}} : tensor<8x1xf32>
// CHECK: distopt.all_reduce avg %{{.*}} : tensor<1x8xf32>
// CHECK-NOT: distopt.all_reduce
distopt.process_group @dp size 2
func.func @powersgd_dependent(%g: tensor<8x8xf32>, %p: tensor<8x1xf32>, %q: tensor<8x1xf32>)
    -> tensor<8x8xf32> {
  %r0:3 = distopt.powersgd_all_reduce %g, %p, %q on @dp rank 1 {batch = 0 : i64} : tensor<8x8xf32>, tensor<8x1xf32>, tensor<8x1xf32>
  %r1:3 = distopt.powersgd_all_reduce %r0#0, %r0#1, %r0#2 on @dp rank 1 {batch = 0 : i64} : tensor<8x8xf32>, tensor<8x1xf32>, tensor<8x1xf32>
  return %r1#0 : tensor<8x8xf32>
}

// -----

// Batches that would each wait for the other (%a reads %b1 of batch 1, %b2
// reads %a2 of batch 0): one falls apart into ops alone (2 all_reduces
// each), the other keeps its 2.
// CHECK-LABEL: func.func @powersgd_waiting_for_each_other
// CHECK-COUNT-6: distopt.all_reduce
// CHECK-NOT: distopt.all_reduce
distopt.process_group @dp size 2
func.func @powersgd_waiting_for_each_other(%g0: tensor<8x8xf32>, %g1: tensor<8x8xf32>,
                                           %p: tensor<8x1xf32>, %q: tensor<8x1xf32>)
    -> (tensor<8x8xf32>, tensor<8x8xf32>) {
  %b1:3 = distopt.powersgd_all_reduce %g0, %p, %q on @dp rank 1 {batch = 1 : i64} : tensor<8x8xf32>, tensor<8x1xf32>, tensor<8x1xf32>
  %a2:3 = distopt.powersgd_all_reduce %g1, %p, %q on @dp rank 1 {batch = 0 : i64} : tensor<8x8xf32>, tensor<8x1xf32>, tensor<8x1xf32>
  %a:3 = distopt.powersgd_all_reduce %b1#0, %p, %q on @dp rank 1 {batch = 0 : i64} : tensor<8x8xf32>, tensor<8x1xf32>, tensor<8x1xf32>
  %b2:3 = distopt.powersgd_all_reduce %a2#0, %p, %q on @dp rank 1 {batch = 1 : i64} : tensor<8x8xf32>, tensor<8x1xf32>, tensor<8x1xf32>
  return %a#0, %b2#0 : tensor<8x8xf32>, tensor<8x8xf32>
}

// -----

// Without a batch number, or with different numbers, each op all-reduces
// its own factors.
// CHECK-LABEL: func.func @powersgd_unbatched
// CHECK-COUNT-6: distopt.all_reduce {{(sum|avg)}} %{{.*}} : tensor<{{8x1|1x8}}xf32>
// CHECK-NOT: distopt.all_reduce
distopt.process_group @dp size 2
func.func @powersgd_unbatched(%g0: tensor<8x8xf32>, %g1: tensor<8x8xf32>, %g2: tensor<8x8xf32>,
                              %p: tensor<8x1xf32>, %q: tensor<8x1xf32>)
    -> (tensor<8x8xf32>, tensor<8x8xf32>, tensor<8x8xf32>) {
  %r0:3 = distopt.powersgd_all_reduce %g0, %p, %q on @dp rank 1 : tensor<8x8xf32>, tensor<8x1xf32>, tensor<8x1xf32>
  %r1:3 = distopt.powersgd_all_reduce %g1, %p, %q on @dp rank 1 {batch = 0 : i64} : tensor<8x8xf32>, tensor<8x1xf32>, tensor<8x1xf32>
  %r2:3 = distopt.powersgd_all_reduce %g2, %p, %q on @dp rank 1 {batch = 1 : i64} : tensor<8x8xf32>, tensor<8x1xf32>, tensor<8x1xf32>
  return %r0#0, %r1#0, %r2#0 : tensor<8x8xf32>, tensor<8x8xf32>, tensor<8x8xf32>
}

// -----

// Top-K: the threshold searched bit by bit (31 counts for f32), one pass
// selecting k = 4 pairs, both halves all-gathered (2 ranks x 4), added into
// zeros in order, then averaged.
// CHECK-LABEL: func.func @topk
// CHECK: scf.for %{{.*}} = %{{.*}} to %c31
// CHECK: scf.for %{{.*}} = %{{.*}} to %c8
// CHECK: distopt.all_gather %{{.*}} on @dp : tensor<4xf32> -> tensor<8xf32>
// CHECK: distopt.all_gather %{{.*}} on @dp : tensor<4xi64> -> tensor<8xi64>
// CHECK: scf.for
// CHECK: arith.divf
// CHECK-NOT: distopt.topk_all_reduce
distopt.process_group @dp size 2
func.func @topk(%g: tensor<8xf32>, %e: tensor<8xf32>) -> (tensor<8xf32>, tensor<8xf32>) {
  %r, %e1 = distopt.topk_all_reduce avg %g, %e on @dp density 5.000000e-01 : tensor<8xf32>
  return %r, %e1 : tensor<8xf32>, tensor<8xf32>
}

// -----

// A plain group smaller than the world: an error at the collective, not a
// world-size mismatch at run time.
module attributes {distopt.world_size = 4 : i64} {
  distopt.process_group @dp size 2
  func.func @sub_group(%g: tensor<8xf32>) -> tensor<8xf32> {
    // expected-error @+1 {{process group @dp spans a world of 2 ranks but the step is compiled for 4: declare a smaller group over a distopt.mesh or with its ranks}}
    %r = distopt.all_reduce sum %g on @dp : tensor<8xf32>
    return %r : tensor<8xf32>
  }
}

// -----

func.func @updates_first(%p: tensor<4xf32>, %g: tensor<4xf32>, %lr: f32, %t: i64) -> tensor<4xf32> {
  // expected-error @+1 {{'distopt.sgd_update' must be lowered by --distopt-lower-optimizers first}}
  %p1 = distopt.sgd_update %p, %g lr(%lr) step(%t) : tensor<4xf32>, f32
  return %p1 : tensor<4xf32>
}

// -----

// A group over a mesh axis: the runtime gets its layout (each world rank's
// part, then its rank in the part) and name as constants in host memory, and
// splits it from the world; the world's own group stays distopt_rt_world.
distopt.mesh @m shape [2, 3]
distopt.process_group @rows size 3 over @m axes [1]
distopt.process_group @world size 6
// LLVM-DAG: llvm.mlir.global private constant @__distopt_group_rows_name("@rows\00")
// LLVM-DAG: llvm.mlir.global private constant @__distopt_group_rows_layout(dense<[0, 0, 0, 1, 1, 1, 0, 1, 2, 0, 1, 2]> : tensor<12xi64>)
// LLVM-LABEL: llvm.func @sub_groups
// LLVM: %[[LAYOUT:.*]] = llvm.mlir.addressof @__distopt_group_rows_layout
// LLVM: %[[NAME:.*]] = llvm.mlir.addressof @__distopt_group_rows_name
// LLVM: llvm.call @distopt_rt_group(%{{.*}}, %{{.*}}, %[[LAYOUT]], %[[NAME]], %{{.*}})
// LLVM: llvm.call @distopt_rt_all_reduce
// LLVM: llvm.call @distopt_rt_world
// LLVM: llvm.call @distopt_rt_all_reduce
// LLVM: llvm.call @distopt_rt_group(%{{.*}}, %{{.*}}, %[[LAYOUT]], %[[NAME]], %{{.*}})
// LLVM: llvm.call @distopt_rt_comm_rank
// LLVM-NOT: distopt.mesh
func.func @sub_groups(%g: tensor<6xf32>) -> (tensor<6xf32>, tensor<6xf32>, tensor<2xf32>) {
  %a = distopt.all_reduce sum %g on @rows : tensor<6xf32>
  %b = distopt.all_reduce sum %g on @world : tensor<6xf32>
  %c = distopt.shard_slice %a on @rows : tensor<6xf32> -> tensor<2xf32>
  return %a, %b, %c : tensor<6xf32>, tensor<6xf32>, tensor<2xf32>
}

// -----

// ZeRO with loss scaling and clipping: the overflow check of the shards
// rides in the norm's reduction, its flag (0 or 1 per rank) after the
// per-tensor partial sums; one all_reduce, and the check is true when the
// ranks' flags sum to 0.
distopt.process_group @dp size 2
// CHECK-LABEL: func.func @finite_check_fused_into_norm
// CHECK:       %[[FLAG:.*]] = arith.select %{{.*}}, %{{.*}}, %{{.*}} : f64
// CHECK:       %[[BOTH:.*]] = tensor.from_elements %{{.*}}, %[[FLAG]] : tensor<2xf64>
// CHECK:       %[[SUMS:.*]] = distopt.all_reduce sum %[[BOTH]] on @dp : tensor<2xf64>
// CHECK-NOT:   distopt.all_reduce
// CHECK:       tensor.extract %[[SUMS]]
// CHECK:       %[[FLAGS:.*]] = tensor.extract %[[SUMS]]
// CHECK:       %[[OK:.*]] = arith.cmpf oeq, %[[FLAGS]], %{{.*}} : f64
// CHECK:       arith.select %[[OK]]
func.func @finite_check_fused_into_norm(%g: tensor<8xf32>, %h: tensor<8xf32>, %w: tensor<8xf32>) -> (tensor<8xf32>, i1, f32) {
  %ok = distopt.all_finite %g on @dp : tensor<8xf32>
  %c, %n = distopt.clip_grad_norm %h max_norm 1.0 on @dp {tensor_bounds = [array<i64: 0, 16>]} : tensor<8xf32> -> f32
  %s = arith.select %ok, %c, %w : tensor<8xf32>
  return %s, %ok, %n : tensor<8xf32>, i1, f32
}

// -----

// A check read before the norm is computed keeps its own vote.
distopt.process_group @dp size 2
// CHECK-LABEL: func.func @finite_check_read_first
// CHECK:       distopt.all_reduce min %{{.*}} on @dp : tensor<1xi32>
// CHECK:       distopt.all_reduce sum %{{.*}} on @dp : tensor<1xf64>
func.func @finite_check_read_first(%g: tensor<8xf32>, %h: tensor<8xf32>, %w: tensor<8xf32>) -> (tensor<8xf32>, f32) {
  %ok = distopt.all_finite %g on @dp : tensor<8xf32>
  %x = arith.select %ok, %h, %w : tensor<8xf32>
  %c, %n = distopt.clip_grad_norm %x max_norm 1.0 on @dp {tensor_bounds = [array<i64: 0, 16>]} : tensor<8xf32> -> f32
  return %c, %n : tensor<8xf32>, f32
}

// -----

// The norm reads the reduced gradient itself, dividing by K and unscaling
// each element in its loop, as the ops it reads through compute it.
// A check of the very tensors the norm reads (here through gradient
// accumulation's 1/K and the unscale) takes its flag from the norm's
// partial sums, which an inf or NaN makes non-finite: no pass of its own
// over the gradient, unless 1/scale > 1 (a loss scale below 1 could
// overflow a finite element as it is unscaled): then it reads the gradient
// itself, in the fallback.
distopt.process_group @dp size 2
// CHECK-LABEL: func.func @finite_check_from_norm
// CHECK-NOT:   math.isfinite %{{.*}} : f32
// CHECK:       %[[TWO:.*]] = arith.constant 2.000000e+00 : f32
// CHECK:       %[[SLICE:.*]] = tensor.extract_slice %arg0
// CHECK:       linalg.generic {{.*}} ins(%[[SLICE]] : tensor<?xf32>) outs(%{{.*}} : tensor<f64>)
// CHECK-NEXT:  ^bb0(%[[G:.*]]: f32, %{{.*}}: f64):
// CHECK-NEXT:    %[[MEAN:.*]] = arith.divf %[[G]], %[[TWO]] : f32
// CHECK-NEXT:    arith.mulf %[[MEAN]], %{{[0-9]+}} : f32
// CHECK:       %[[PARTIAL:.*]] = tensor.extract %{{.*}}[] : tensor<f64>
// CHECK:       %[[FINITE:.*]] = math.isfinite %[[PARTIAL]] : f64
// CHECK:       %[[INVERSE:.*]] = arith.extf %{{.*}} : f32 to f64
// CHECK:       %[[MAGNITUDE:.*]] = math.absf %[[INVERSE]] : f64
// CHECK:       arith.cmpf ole, %[[MAGNITUDE]]
// CHECK:       %[[OK:.*]] = scf.if %{{.*}} -> (i1) {
// CHECK-NEXT:    scf.yield %{{.*}} : i1
// CHECK-NEXT:  } else {
// CHECK:         linalg.generic {{.*}} ins(%arg0 : tensor<8xf32>)
// CHECK:           math.isfinite %{{.*}} : f32
// CHECK:       }
// CHECK:       %[[FLAG:.*]] = arith.select %[[OK]]
// CHECK:       tensor.from_elements %[[PARTIAL]], %[[FLAG]] : tensor<2xf64>
// CHECK:       distopt.all_reduce sum
// CHECK-NOT:   distopt.all_reduce
func.func @finite_check_from_norm(%g: tensor<8xf32>, %scale: f32, %w: tensor<8xf32>) -> (tensor<8xf32>, i1, f32) {
  %ok = distopt.all_finite %g on @dp : tensor<8xf32>
  %k = arith.constant dense<2.0> : tensor<8xf32>
  %mean = arith.divf %g, %k : tensor<8xf32>
  %u = distopt.unscale %mean by %scale : tensor<8xf32>, f32
  %c, %n = distopt.clip_grad_norm %u max_norm 1.0 on @dp {tensor_bounds = [array<i64: 0, 16>]} : tensor<8xf32> -> f32
  %s = arith.select %ok, %c, %w : tensor<8xf32>
  return %s, %ok, %n : tensor<8xf32>, i1, f32
}

// -----

// A division something else reads too is written to memory anyway: the
// norm reads its result rather than dividing again.
distopt.process_group @dp size 2
// CHECK-LABEL: func.func @norm_reads_shared_division
// CHECK:       %[[MEAN:.*]] = arith.divf %arg0, %{{.*}} : tensor<8xf32>
// CHECK:       %[[SLICE:.*]] = tensor.extract_slice %[[MEAN]]
// CHECK:       linalg.generic {{.*}} ins(%[[SLICE]] : tensor<?xf32>) outs(%{{.*}} : tensor<f64>)
// CHECK-NEXT:  ^bb0(%[[G:.*]]: f32, %{{.*}}: f64):
// CHECK-NEXT:    arith.extf %[[G]] : f32 to f64
func.func @norm_reads_shared_division(%g: tensor<8xf32>) -> (tensor<8xf32>, tensor<8xf32>, f32) {
  %k = arith.constant dense<2.0> : tensor<8xf32>
  %mean = arith.divf %g, %k : tensor<8xf32>
  %c, %n = distopt.clip_grad_norm %mean max_norm 1.0 on @dp {tensor_bounds = [array<i64: 0, 16>]} : tensor<8xf32> -> f32
  return %c, %mean, %n : tensor<8xf32>, tensor<8xf32>, f32
}

// -----

// Under nnan or ninf a division's inf or NaN result is poison: it no
// longer tells whether its input was finite, and the check keeps its pass.
distopt.process_group @dp size 2
// CHECK-LABEL: func.func @finite_check_not_through_nnan
// CHECK-NOT:   scf.if %{{.*}} -> (i1)
// CHECK:       linalg.generic {{.*}} ins(%arg0 : tensor<8xf32>)
// CHECK:         math.isfinite %{{.*}} : f32
// CHECK-NOT:   scf.if %{{.*}} -> (i1)
// CHECK:       distopt.all_reduce sum
func.func @finite_check_not_through_nnan(%g: tensor<8xf32>, %w: tensor<8xf32>) -> (tensor<8xf32>, i1, f32) {
  %ok = distopt.all_finite %g on @dp : tensor<8xf32>
  %k = arith.constant dense<2.0> : tensor<8xf32>
  %mean = arith.divf %g, %k fastmath<nnan> : tensor<8xf32>
  %c, %n = distopt.clip_grad_norm %mean max_norm 1.0 on @dp {tensor_bounds = [array<i64: 0, 16>]} : tensor<8xf32> -> f32
  %s = arith.select %ok, %c, %w : tensor<8xf32>
  return %s, %ok, %n : tensor<8xf32>, i1, f32
}

// -----

// Times 2 can overflow a finite element: the norm's sums no longer tell
// whether the checked tensor is finite, and the check keeps its pass.
distopt.process_group @dp size 2
// CHECK-LABEL: func.func @finite_check_not_from_norm
// CHECK-NOT:   scf.if %{{.*}} -> (i1)
// CHECK:       linalg.generic {{.*}} ins(%arg0 : tensor<8xf32>)
// CHECK:         math.isfinite %{{.*}} : f32
// CHECK-NOT:   scf.if %{{.*}} -> (i1)
// CHECK:       distopt.all_reduce sum
func.func @finite_check_not_from_norm(%g: tensor<8xf32>, %w: tensor<8xf32>) -> (tensor<8xf32>, i1, f32) {
  %ok = distopt.all_finite %g on @dp : tensor<8xf32>
  %twice = arith.constant dense<2.0> : tensor<8xf32>
  %d = arith.mulf %g, %twice : tensor<8xf32>
  %c, %n = distopt.clip_grad_norm %d max_norm 1.0 on @dp {tensor_bounds = [array<i64: 0, 16>]} : tensor<8xf32> -> f32
  %s = arith.select %ok, %c, %w : tensor<8xf32>
  return %s, %ok, %n : tensor<8xf32>, i1, f32
}

// -----

// An f64 element's square can overflow: the sum of squares of f64
// gradients cannot stand for the check, which keeps its pass.
distopt.process_group @dp size 2
// CHECK-LABEL: func.func @finite_check_f64
// CHECK-NOT:   scf.if %{{.*}} -> (i1)
// CHECK:       linalg.generic {{.*}} ins(%arg0 : tensor<8xf64>)
// CHECK:         math.isfinite %{{.*}} : f64
// CHECK-NOT:   scf.if %{{.*}} -> (i1)
// CHECK:       distopt.all_reduce sum
func.func @finite_check_f64(%g: tensor<8xf64>, %w: tensor<8xf64>) -> (tensor<8xf64>, i1, f32) {
  %ok = distopt.all_finite %g on @dp : tensor<8xf64>
  %c, %n = distopt.clip_grad_norm %g max_norm 1.0 on @dp {tensor_bounds = [array<i64: 0, 16>]} : tensor<8xf64> -> f32
  %s = arith.select %ok, %c, %w : tensor<8xf64>
  return %s, %ok, %n : tensor<8xf64>, i1, f32
}
