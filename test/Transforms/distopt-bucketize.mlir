// RUN: distopt-opt %s -split-input-file --distopt-bucketize | FileCheck %s
// RUN: distopt-opt %s -split-input-file --distopt-bucketize --distopt-bucketize | FileCheck %s
// RUN: distopt-opt %s -split-input-file --distopt-bucketize="reverse=false" | FileCheck %s --check-prefix=FWD
// RUN: distopt-opt %s -split-input-file --distopt-bucketize="first-bucket-cap-mb=0.000001 cap-mb=0.000001" | FileCheck %s --check-prefix=SMALL
// RUN: not distopt-opt %s -split-input-file --distopt-bucketize="cap-mb=0" 2>&1 | FileCheck %s --check-prefix=CAP
// RUN: not distopt-opt %s -split-input-file --distopt-bucketize="first-bucket-cap-mb=-1" 2>&1 | FileCheck %s --check-prefix=FIRST
// RUN: not distopt-opt %s -split-input-file --distopt-bucketize="alignment=48" 2>&1 | FileCheck %s --check-prefix=ALIGN

// CAP: --distopt-bucketize: cap-mb must be positive, got 0
// FIRST: --distopt-bucketize: first-bucket-cap-mb must be positive, got -1
// ALIGN: --distopt-bucketize: alignment must be a positive power of two, got 48

distopt.process_group @dp size 4

// Three gradients: one bucket, in reverse order (c, b, a), 64-byte aligned:
// c at 0 (10 elements), b at 16 (16), a at 32 (12) -> 44 elements.
// CHECK-LABEL: func.func @three
// CHECK-SAME: (%[[A:.*]]: tensor<3x4xf32>, %[[B:.*]]: tensor<16xf32>, %[[C:.*]]: tensor<10xf32>)
// CHECK: %[[P:.*]] = distopt.bucket_pack %[[C]], %[[B]], %[[A]] : tensor<10xf32>, tensor<16xf32>, tensor<3x4xf32> -> tensor<44xf32>
// CHECK: %[[R:.*]] = distopt.all_reduce sum %[[P]] on @dp : tensor<44xf32>
// CHECK: %[[U:.*]]:3 = distopt.bucket_unpack %[[R]] : tensor<44xf32> -> tensor<10xf32>, tensor<16xf32>, tensor<3x4xf32>
// CHECK-NOT: distopt.all_reduce
// CHECK: return %[[U]]#2, %[[U]]#1, %[[U]]#0
// FWD-LABEL: func.func @three
// FWD: distopt.bucket_pack %{{.*}}, %{{.*}}, %{{.*}} : tensor<3x4xf32>, tensor<16xf32>, tensor<10xf32> -> tensor<42xf32>
// SMALL-LABEL: func.func @three
// SMALL-NOT: distopt.bucket_pack
// SMALL-COUNT-3: distopt.all_reduce sum
func.func @three(%a: tensor<3x4xf32>, %b: tensor<16xf32>, %c: tensor<10xf32>) -> (tensor<3x4xf32>, tensor<16xf32>, tensor<10xf32>) {
  %0 = distopt.all_reduce sum %a on @dp : tensor<3x4xf32>
  %1 = distopt.all_reduce sum %b on @dp : tensor<16xf32>
  %2 = distopt.all_reduce sum %c on @dp : tensor<10xf32>
  return %0, %1, %2 : tensor<3x4xf32>, tensor<16xf32>, tensor<10xf32>
}

// -----

distopt.process_group @dp size 4
distopt.process_group @other size 2

// Never mixed: element types, reductions, scales, wire types, groups.
// CHECK-LABEL: func.func @kinds
// CHECK-DAG: distopt.bucket_pack %{{.*}}, %{{.*}} : tensor<4xf32>, tensor<4xf32> -> tensor<20xf32>
// CHECK-DAG: distopt.all_reduce sum %{{.*}} on @dp : tensor<4xf16>
// CHECK-DAG: distopt.all_reduce avg %{{.*}} on @dp : tensor<4xf32>
// CHECK-DAG: distopt.all_reduce premul_sum(5.000000e-01) %{{.*}} on @dp : tensor<4xf32>
// CHECK-DAG: distopt.all_reduce premul_sum(2.500000e-01) %{{.*}} on @dp : tensor<4xf32>
// CHECK-DAG: distopt.all_reduce sum %{{.*}} on @dp wire bf16 : tensor<4xf32>
// CHECK-DAG: distopt.all_reduce sum %{{.*}} on @other : tensor<4xf32>
func.func @kinds(%x: tensor<4xf32>, %h: tensor<4xf16>) {
  %0 = distopt.all_reduce sum %x on @dp : tensor<4xf32>
  %1 = distopt.all_reduce sum %h on @dp : tensor<4xf16>
  %2 = distopt.all_reduce avg %x on @dp : tensor<4xf32>
  %3 = distopt.all_reduce premul_sum(0.5) %x on @dp : tensor<4xf32>
  %4 = distopt.all_reduce premul_sum(0.25) %x on @dp : tensor<4xf32>
  %5 = distopt.all_reduce sum %x on @dp wire bf16 : tensor<4xf32>
  %6 = distopt.all_reduce sum %x on @other : tensor<4xf32>
  %7 = distopt.all_reduce sum %x on @dp : tensor<4xf32>
  return
}

// -----

distopt.process_group @dp size 4

// The second gradient is computed after the first one's result is used: no
// bucket can hold both, so both stay.
// CHECK-LABEL: func.func @dependent
// CHECK-NOT: distopt.bucket_pack
// CHECK: distopt.all_reduce sum
// CHECK: arith.addf
// CHECK: distopt.all_reduce sum
func.func @dependent(%a: tensor<4xf32>) -> tensor<4xf32> {
  %0 = distopt.all_reduce sum %a on @dp : tensor<4xf32>
  %1 = arith.addf %0, %a : tensor<4xf32>
  %2 = distopt.all_reduce sum %1 on @dp : tensor<4xf32>
  return %2 : tensor<4xf32>
}

// -----

distopt.process_group @dp size 4

// Gradients produced in between (a backward pass in the IR): the bucket goes
// after the last one is computed and before the first result is used.
// CHECK-LABEL: func.func @late_input
// CHECK: %[[G:.*]] = arith.mulf
// CHECK-NEXT: distopt.bucket_pack %[[G]], %{{.*}}
// CHECK-NEXT: distopt.all_reduce sum
// CHECK-NEXT: distopt.bucket_unpack
// CHECK-NEXT: arith.addf
func.func @late_input(%a: tensor<4xf32>, %b: tensor<4xf32>) -> tensor<4xf32> {
  %0 = distopt.all_reduce sum %a on @dp : tensor<4xf32>
  %g = arith.mulf %b, %b : tensor<4xf32>
  %1 = distopt.all_reduce sum %g on @dp : tensor<4xf32>
  %2 = arith.addf %0, %1 : tensor<4xf32>
  return %2 : tensor<4xf32>
}

// -----

distopt.process_group @dp size 2

// A tensor at least as large as a bucket's cap (25 MB) would fill one alone:
// it is reduced in place, not copied into a bucket and out again, and the
// small ones around it still share a bucket (DDP would add the large one to
// the open bucket and close it).
// CHECK-LABEL: func.func @large
// CHECK-SAME: (%[[S1:[^:]*]]: tensor<16xf32>, %[[BIG:[^:]*]]: tensor<6553600xf32>, %[[S2:[^:]*]]: tensor<16xf32>)
// CHECK: distopt.bucket_pack %[[S2]], %[[S1]] : tensor<16xf32>, tensor<16xf32> -> tensor<32xf32>
// CHECK-NOT: distopt.bucket_pack
// CHECK: distopt.all_reduce sum %[[BIG]] on @dp : tensor<6553600xf32>
// SMALL-LABEL: func.func @large
// SMALL-NOT: distopt.bucket_pack
func.func @large(%s1: tensor<16xf32>, %big: tensor<6553600xf32>, %s2: tensor<16xf32>) -> (tensor<16xf32>, tensor<6553600xf32>, tensor<16xf32>) {
  %0 = distopt.all_reduce sum %s1 on @dp : tensor<16xf32>
  %1 = distopt.all_reduce sum %big on @dp : tensor<6553600xf32>
  %2 = distopt.all_reduce sum %s2 on @dp : tensor<16xf32>
  return %0, %1, %2 : tensor<16xf32>, tensor<6553600xf32>, tensor<16xf32>
}

// -----

distopt.process_group @dp size 2

// Capacity: the first bucket closes at 1 MB, later ones at 25 MB. Reverse
// order: %d (0.5 MB) and %c (0.75 MB) fill the first bucket; %b and %a
// (1 MB each) share the second.
// CHECK-LABEL: func.func @caps
// CHECK-SAME: (%[[A:[^:]*]]: tensor<262144xf32>, %[[B:[^:]*]]: tensor<262144xf32>, %[[C:[^:]*]]: tensor<196608xf32>, %[[D:[^:]*]]: tensor<131072xf32>)
// CHECK: distopt.bucket_pack %[[D]], %[[C]] :
// CHECK: distopt.bucket_pack %[[B]], %[[A]] :
// CHECK-NEXT: distopt.all_reduce
// CHECK-NEXT: distopt.bucket_unpack
// CHECK-NOT: distopt.all_reduce
// CHECK: return
func.func @caps(%a: tensor<262144xf32>, %b: tensor<262144xf32>, %c: tensor<196608xf32>, %d: tensor<131072xf32>) {
  %0 = distopt.all_reduce sum %a on @dp : tensor<262144xf32>
  %1 = distopt.all_reduce sum %b on @dp : tensor<262144xf32>
  %2 = distopt.all_reduce sum %c on @dp : tensor<196608xf32>
  %3 = distopt.all_reduce sum %d on @dp : tensor<131072xf32>
  return
}

// -----

distopt.process_group @dp size 2

// Collectives in different blocks are bucketed per block, and other
// collectives are left alone.
// CHECK-LABEL: func.func @regions
// CHECK: scf.if
// CHECK:   distopt.bucket_pack
// CHECK: else
// CHECK:   distopt.all_reduce sum
// CHECK: distopt.reduce_scatter
func.func @regions(%c: i1, %a: tensor<4xf32>) -> tensor<2xf32> {
  %r = scf.if %c -> tensor<4xf32> {
    %0 = distopt.all_reduce sum %a on @dp : tensor<4xf32>
    %1 = distopt.all_reduce sum %a on @dp : tensor<4xf32>
    %2 = arith.addf %0, %1 : tensor<4xf32>
    scf.yield %2 : tensor<4xf32>
  } else {
    %0 = distopt.all_reduce sum %a on @dp : tensor<4xf32>
    scf.yield %0 : tensor<4xf32>
  }
  %s = distopt.reduce_scatter sum %r on @dp : tensor<4xf32> -> tensor<2xf32>
  return %s : tensor<2xf32>
}

// -----

distopt.process_group @dp size 2

// An all_reduce of another's result cannot share its bucket (one collective
// cannot take its own output): each stays alone, in order. Their positions
// alone would allow it, the bucket going after the first.
// CHECK-LABEL: func.func @chained
// CHECK-NOT: distopt.bucket_pack
// CHECK: %[[A:.*]] = distopt.all_reduce sum %arg0
// CHECK: distopt.all_reduce sum %[[A]]
// CHECK-NOT: distopt.bucket_pack
func.func @chained(%x: tensor<4xf32>) -> tensor<4xf32> {
  %a = distopt.all_reduce sum %x on @dp : tensor<4xf32>
  %b = distopt.all_reduce sum %a on @dp : tensor<4xf32>
  return %b : tensor<4xf32>
}

// -----

distopt.process_group @node size 2
distopt.process_group @cross size 2

// Reductions on two groups, one of a result of the other: the @node bucket
// goes after %x, where %a1 is now reduced, so the @cross bucket that reads
// %a1 goes there too, after it (positions alone would put it before %x).
// CHECK-LABEL: func.func @across_buckets
// CHECK: %[[X:.*]] = arith.addf
// CHECK: %[[N:.*]] = distopt.all_reduce sum %{{.*}} on @node : tensor<20xf32>
// CHECK: %[[NU:.*]]:2 = distopt.bucket_unpack %[[N]]
// CHECK: distopt.bucket_pack %[[NU]]#1, %arg1
// CHECK: distopt.all_reduce sum %{{.*}} on @cross : tensor<20xf32>
func.func @across_buckets(%g1: tensor<4xf32>, %g0: tensor<4xf32>, %h: tensor<4xf32>)
    -> (tensor<4xf32>, tensor<4xf32>, tensor<4xf32>) {
  %a1 = distopt.all_reduce sum %g1 on @node : tensor<4xf32>
  %b0 = distopt.all_reduce sum %g0 on @cross : tensor<4xf32>
  %x = arith.addf %h, %h : tensor<4xf32>
  %a2 = distopt.all_reduce sum %x on @node : tensor<4xf32>
  %b1 = distopt.all_reduce sum %a1 on @cross : tensor<4xf32>
  return %a2, %b0, %b1 : tensor<4xf32>, tensor<4xf32>, tensor<4xf32>
}

// -----

distopt.process_group @node size 2
distopt.process_group @cross size 2

// Two buckets that would each wait for the other (%a reads %b1, %b2 reads
// %a2): one is left out, its collectives as they were.
// CHECK-LABEL: func.func @waiting_for_each_other
// CHECK-COUNT-1: distopt.bucket_pack
// CHECK-NOT: distopt.bucket_pack
func.func @waiting_for_each_other(%g0: tensor<4xf32>, %g1: tensor<4xf32>)
    -> (tensor<4xf32>, tensor<4xf32>) {
  %b1 = distopt.all_reduce sum %g0 on @cross : tensor<4xf32>
  %a2 = distopt.all_reduce sum %g1 on @node : tensor<4xf32>
  %a = distopt.all_reduce sum %b1 on @node : tensor<4xf32>
  %b2 = distopt.all_reduce sum %a2 on @cross : tensor<4xf32>
  return %a, %b2 : tensor<4xf32>, tensor<4xf32>
}
