// RUN: distopt-opt %s -split-input-file --distopt-mark-in-place-results | FileCheck %s

// A step that updates its buffers in place returns nothing: the driver reads
// results 0 and 2 in arguments 0 and 1; result 1 is a new buffer and stays.
// CHECK-LABEL: func.func @step
// CHECK-SAME: (%[[P:.*]]: memref<4xf32>, %[[S:.*]]: memref<4xf32>) -> memref<4xf32>
// CHECK-SAME: distopt.in_place_results = array<i64: 0, -1, 1>
// CHECK: %[[NEW:.*]] = memref.alloc
// CHECK: return %[[NEW]] : memref<4xf32>
func.func @step(%p: memref<4xf32>, %s: memref<4xf32>)
    -> (memref<4xf32>, memref<4xf32>, memref<?xf32>) {
  %new = memref.alloc() : memref<4xf32>
  %cast = memref.cast %s : memref<4xf32> to memref<?xf32>
  return %p, %new, %cast : memref<4xf32>, memref<4xf32>, memref<?xf32>
}

// -----

// A function that is called keeps its results: its caller uses them.
// CHECK-LABEL: func.func private @helper
// CHECK-SAME: -> memref<4xf32>
// CHECK-NOT: in_place_results
// CHECK: return %{{.*}} : memref<4xf32>
// CHECK-LABEL: func.func @caller
// CHECK-SAME: in_place_results = array<i64: -1>
func.func private @helper(%p: memref<4xf32>) -> memref<4xf32> {
  return %p : memref<4xf32>
}
func.func @caller(%p: memref<4xf32>) -> memref<4xf32> {
  %r = func.call @helper(%p) : (memref<4xf32>) -> memref<4xf32>
  return %r : memref<4xf32>
}

// -----

// A result returned in another argument's buffer (the gradient as the new
// parameter) stays a result: the driver refills that buffer every step.
// CHECK-LABEL: func.func @step
// CHECK-SAME: -> (memref<4xf32> {distopt.name = "w", distopt.role = "param"})
// CHECK-SAME: distopt.in_place_results = array<i64: -1, 2>
// CHECK: return %arg1 : memref<4xf32>
func.func @step(%p: memref<4xf32> {distopt.name = "w", distopt.role = "param"},
                %g: memref<4xf32> {distopt.name = "w", distopt.role = "grad"},
                %m: memref<4xf32> {distopt.name = "w.momentum_buffer", distopt.role = "state"})
    -> (memref<4xf32> {distopt.name = "w", distopt.role = "param"},
        memref<4xf32> {distopt.name = "w.momentum_buffer", distopt.role = "state"}) {
  return %g, %m : memref<4xf32>, memref<4xf32>
}

// -----

// A parameter copied out of a gathered buffer into a new one (ZeRO) is
// copied into its own argument instead, and stays in place; not when the
// argument is still read after the copy, or the result has no role.
// CHECK-LABEL: func.func @gathered
// CHECK-SAME: (%[[W:[^:]*]]: memref<4xf32> {distopt.name = "w", distopt.role = "param"}, %[[V:[^:]*]]: memref<4xf32> {distopt.name = "v", distopt.role = "param"}, %[[U:[^:]*]]: memref<4xf32>)
// CHECK-SAME: -> (memref<4xf32> {distopt.name = "v", distopt.role = "param"}, memref<4xf32>)
// CHECK-SAME: distopt.in_place_results = array<i64: 0, -1, -1>
// CHECK: %[[ALL:.*]] = memref.alloc() : memref<16xf32>
// CHECK: %[[SW:.*]] = memref.subview %[[ALL]][0] [4] [1]
// CHECK: memref.copy %[[SW]], %[[W]]
// CHECK: %[[NV:.*]] = memref.alloc() : memref<4xf32>
// CHECK: memref.copy %{{.*}}, %[[NV]]
// CHECK: %[[NU:.*]] = memref.alloc() : memref<4xf32>
// CHECK: memref.copy %{{.*}}, %[[NU]]
// CHECK: call @read(%[[V]])
// CHECK: return %[[NV]], %[[NU]]
func.func private @read(memref<4xf32>)
func.func @gathered(%w: memref<4xf32> {distopt.name = "w", distopt.role = "param"},
                    %v: memref<4xf32> {distopt.name = "v", distopt.role = "param"},
                    %u: memref<4xf32>)
    -> (memref<4xf32> {distopt.name = "w", distopt.role = "param"},
        memref<4xf32> {distopt.name = "v", distopt.role = "param"},
        memref<4xf32>) {
  %all = memref.alloc() : memref<16xf32>
  %sw = memref.subview %all[0] [4] [1] : memref<16xf32> to memref<4xf32, strided<[1]>>
  %nw = memref.alloc() : memref<4xf32>
  memref.copy %sw, %nw : memref<4xf32, strided<[1]>> to memref<4xf32>
  %sv = memref.subview %all[4] [4] [1] : memref<16xf32> to memref<4xf32, strided<[1], offset: 4>>
  %nv = memref.alloc() : memref<4xf32>
  memref.copy %sv, %nv : memref<4xf32, strided<[1], offset: 4>> to memref<4xf32>
  %su = memref.subview %all[8] [4] [1] : memref<16xf32> to memref<4xf32, strided<[1], offset: 8>>
  %nu = memref.alloc() : memref<4xf32>
  memref.copy %su, %nu : memref<4xf32, strided<[1], offset: 8>> to memref<4xf32>
  call @read(%v) : (memref<4xf32>) -> ()
  return %nw, %nv, %nu : memref<4xf32>, memref<4xf32>, memref<4xf32>
}

// -----

// A gradient reshaped and back (PowerSGD works on a matrix view of a conv
// gradient) is the argument's own memory in its own layout: in place. A
// reshape that does not come back to the argument's type stays a result.
// CHECK-LABEL: func.func @reshaped
// CHECK-SAME: -> (memref<16xf32> {distopt.name = "v", distopt.role = "grad"})
// CHECK-SAME: distopt.in_place_results = array<i64: 0, -1>
// CHECK: %[[FLAT:.*]] = memref.collapse_shape %arg1
// CHECK: return %[[FLAT]] : memref<16xf32>
func.func @reshaped(%w: memref<4x2x2xf32> {distopt.name = "w", distopt.role = "grad"},
                    %v: memref<4x4xf32> {distopt.name = "v", distopt.role = "grad"})
    -> (memref<4x2x2xf32> {distopt.name = "w", distopt.role = "grad"},
        memref<16xf32> {distopt.name = "v", distopt.role = "grad"}) {
  %m = memref.collapse_shape %w [[0], [1, 2]] : memref<4x2x2xf32> into memref<4x4xf32>
  %back = memref.expand_shape %m [[0], [1, 2]] output_shape [4, 2, 2] : memref<4x4xf32> into memref<4x2x2xf32>
  %flat = memref.collapse_shape %v [[0, 1]] : memref<4x4xf32> into memref<16xf32>
  return %back, %flat : memref<4x2x2xf32>, memref<16xf32>
}

// -----

// A parameter returned as a view of a buffer the step allocated (offset 0
// of ZeRO's gathered buffer needs no copy) is copied into its argument at
// the return: returned, it would keep the whole buffer alive into the next
// step. Not a view in another layout (offset 16: its type differs), nor
// when another result still reads the argument's buffer.
// CHECK-LABEL: func.func @view
// CHECK-SAME: (%[[W:[^:]*]]: memref<4x4xf32> {{.*}}, %[[V:[^:]*]]: memref<10xf32> {{.*}})
// CHECK-SAME: distopt.in_place_results = array<i64: 0, -1>
// CHECK: %[[ALL:.*]] = memref.alloc() : memref<32xf32>
// CHECK: %[[SW:.*]] = memref.subview %[[ALL]][0] [16] [1]
// CHECK: %[[EW:.*]] = memref.expand_shape %[[SW]]
// CHECK: %[[SV:.*]] = memref.subview %[[ALL]][16] [10] [1]
// CHECK: memref.copy %[[EW]], %[[W]]
// CHECK-NEXT: return %[[SV]]
func.func @view(%w: memref<4x4xf32> {distopt.name = "w", distopt.role = "param"},
                %v: memref<10xf32> {distopt.name = "v", distopt.role = "param"})
    -> (memref<4x4xf32> {distopt.name = "w", distopt.role = "param"},
        memref<10xf32, strided<[1], offset: 16>> {distopt.name = "v", distopt.role = "param"}) {
  %all = memref.alloc() : memref<32xf32>
  %sw = memref.subview %all[0] [16] [1] : memref<32xf32> to memref<16xf32, strided<[1]>>
  %ew = memref.expand_shape %sw [[0, 1]] output_shape [4, 4] : memref<16xf32, strided<[1]>> into memref<4x4xf32>
  %sv = memref.subview %all[16] [10] [1] : memref<32xf32> to memref<10xf32, strided<[1], offset: 16>>
  return %ew, %sv : memref<4x4xf32>, memref<10xf32, strided<[1], offset: 16>>
}

// -----

// CHECK-LABEL: func.func @read_after
// CHECK-SAME: distopt.in_place_results = array<i64: -1, -1>
// CHECK-NOT: memref.copy
func.func @read_after(%w: memref<4xf32> {distopt.name = "w", distopt.role = "param"},
                      %s: memref<4xf32> {distopt.name = "w.momentum_buffer", distopt.role = "state"})
    -> (memref<4xf32> {distopt.name = "w", distopt.role = "param"},
        memref<2xf32, strided<[1]>> {distopt.name = "w.momentum_buffer", distopt.role = "state"}) {
  %all = memref.alloc() : memref<8xf32>
  %sw = memref.subview %all[0] [4] [1] : memref<8xf32> to memref<4xf32, strided<[1]>>
  %cw = memref.cast %sw : memref<4xf32, strided<[1]>> to memref<4xf32>
  %view = memref.subview %w[0] [2] [1] : memref<4xf32> to memref<2xf32, strided<[1]>>
  return %cw, %view : memref<4xf32>, memref<2xf32, strided<[1]>>
}

// -----

// A flat parameter all-gathered into a new buffer (ZeRO-1/2 with
// --distopt-param-as-bucket-view) is gathered into its argument instead: the
// shard sent is already in its slot there. Not when the argument is read
// after the gather, when the new buffer is written before it, or when the
// call is not an all_gather's receive buffer.
// CHECK-LABEL: func.func @gather_into
// CHECK-SAME: (%[[F:[^:]*]]: memref<64xf32> {distopt.name = "flat_param0", distopt.role = "param"}
// CHECK-SAME: distopt.in_place_results = array<i64: 0>
// CHECK-NOT: memref.alloc
// CHECK: memref.extract_aligned_pointer_as_index %[[F]]
// CHECK: call @distopt_rt_all_gather
// CHECK-NEXT: return
// CHECK-LABEL: func.func @gather_start_into
// CHECK-SAME: distopt.in_place_results = array<i64: 0>
// CHECK-NOT: memref.alloc
// CHECK: call @distopt_rt_all_gather_start
// CHECK-LABEL: func.func @read_after_gather
// CHECK-SAME: distopt.in_place_results = array<i64: -1>
// CHECK: %[[ALL:.*]] = memref.alloc
// CHECK: return %[[ALL]]
// CHECK-LABEL: func.func @written_before
// CHECK-SAME: distopt.in_place_results = array<i64: -1>
// CHECK: memref.alloc
// CHECK-LABEL: func.func @broadcast_into
// CHECK-SAME: distopt.in_place_results = array<i64: -1>
// CHECK: memref.alloc
func.func private @distopt_rt_all_gather(!llvm.ptr, !llvm.ptr, !llvm.ptr, i64, i32, i32) -> i32
func.func private @distopt_rt_all_gather_start(!llvm.ptr, !llvm.ptr, !llvm.ptr, i64, i32, i32, !llvm.ptr) -> i32
func.func private @distopt_rt_broadcast(!llvm.ptr, !llvm.ptr, !llvm.ptr, i64, i32, i64, i32) -> i32

func.func @gather_into(%f: memref<64xf32> {distopt.name = "flat_param0", distopt.role = "param"},
                       %comm: !llvm.ptr, %send: !llvm.ptr)
    -> (memref<64xf32> {distopt.name = "flat_param0", distopt.role = "param"}) {
  %all = memref.alloc() : memref<64xf32>
  %c4 = arith.constant 4 : index
  %base = memref.extract_aligned_pointer_as_index %all : memref<64xf32> -> index
  %b, %o, %s, %st = memref.extract_strided_metadata %all : memref<64xf32> -> memref<f32>, index, index, index
  %bytes = arith.muli %o, %c4 : index
  %addr = arith.addi %base, %bytes : index
  %i = arith.index_cast %addr : index to i64
  %recv = llvm.inttoptr %i : i64 to !llvm.ptr
  %n = arith.constant 32 : i64
  %z = arith.constant 0 : i32
  %status = call @distopt_rt_all_gather(%comm, %send, %recv, %n, %z, %z) : (!llvm.ptr, !llvm.ptr, !llvm.ptr, i64, i32, i32) -> i32
  return %all : memref<64xf32>
}

// Asynchronous: the request writes the buffer until its wait.
func.func @gather_start_into(%f: memref<64xf32> {distopt.name = "flat_param0", distopt.role = "param"},
                             %comm: !llvm.ptr, %send: !llvm.ptr, %request: !llvm.ptr)
    -> (memref<64xf32> {distopt.name = "flat_param0", distopt.role = "param"}) {
  %all = memref.alloc() : memref<64xf32>
  %base = memref.extract_aligned_pointer_as_index %all : memref<64xf32> -> index
  %i = arith.index_cast %base : index to i64
  %recv = llvm.inttoptr %i : i64 to !llvm.ptr
  %n = arith.constant 32 : i64
  %z = arith.constant 0 : i32
  %status = call @distopt_rt_all_gather_start(%comm, %send, %recv, %n, %z, %z, %request) : (!llvm.ptr, !llvm.ptr, !llvm.ptr, i64, i32, i32, !llvm.ptr) -> i32
  return %all : memref<64xf32>
}

func.func @read_after_gather(%f: memref<64xf32> {distopt.name = "flat_param0", distopt.role = "param"},
                             %comm: !llvm.ptr, %send: !llvm.ptr, %out: memref<f32>)
    -> (memref<64xf32> {distopt.name = "flat_param0", distopt.role = "param"}) {
  %all = memref.alloc() : memref<64xf32>
  %base = memref.extract_aligned_pointer_as_index %all : memref<64xf32> -> index
  %i = arith.index_cast %base : index to i64
  %recv = llvm.inttoptr %i : i64 to !llvm.ptr
  %n = arith.constant 32 : i64
  %z = arith.constant 0 : i32
  %status = call @distopt_rt_all_gather(%comm, %send, %recv, %n, %z, %z) : (!llvm.ptr, !llvm.ptr, !llvm.ptr, i64, i32, i32) -> i32
  %c0 = arith.constant 0 : index
  %old = memref.load %f[%c0] : memref<64xf32>
  memref.store %old, %out[] : memref<f32>
  return %all : memref<64xf32>
}

func.func @written_before(%f: memref<64xf32> {distopt.name = "flat_param0", distopt.role = "param"},
                          %comm: !llvm.ptr, %send: !llvm.ptr, %x: f32)
    -> (memref<64xf32> {distopt.name = "flat_param0", distopt.role = "param"}) {
  %all = memref.alloc() : memref<64xf32>
  %c0 = arith.constant 0 : index
  memref.store %x, %all[%c0] : memref<64xf32>
  %base = memref.extract_aligned_pointer_as_index %all : memref<64xf32> -> index
  %i = arith.index_cast %base : index to i64
  %recv = llvm.inttoptr %i : i64 to !llvm.ptr
  %n = arith.constant 32 : i64
  %z = arith.constant 0 : i32
  %status = call @distopt_rt_all_gather(%comm, %send, %recv, %n, %z, %z) : (!llvm.ptr, !llvm.ptr, !llvm.ptr, i64, i32, i32) -> i32
  return %all : memref<64xf32>
}

func.func @broadcast_into(%f: memref<64xf32> {distopt.name = "flat_param0", distopt.role = "param"},
                          %comm: !llvm.ptr, %send: !llvm.ptr)
    -> (memref<64xf32> {distopt.name = "flat_param0", distopt.role = "param"}) {
  %all = memref.alloc() : memref<64xf32>
  %base = memref.extract_aligned_pointer_as_index %all : memref<64xf32> -> index
  %i = arith.index_cast %base : index to i64
  %recv = llvm.inttoptr %i : i64 to !llvm.ptr
  %n = arith.constant 64 : i64
  %z = arith.constant 0 : i32
  %root = arith.constant 0 : i64
  %status = call @distopt_rt_broadcast(%comm, %send, %recv, %n, %z, %root, %z) : (!llvm.ptr, !llvm.ptr, !llvm.ptr, i64, i32, i64, i32) -> i32
  return %all : memref<64xf32>
}

// -----

// A step skipped on overflow updates its state in place under scf.if and
// yields the argument from both branches: the result stays in place (a
// returned result would be copied into a new buffer every step). An if
// that yields another buffer from one branch keeps its result.
// CHECK-LABEL: func.func @skippable
// CHECK-SAME: -> (memref<4xf32> {distopt.name = "v", distopt.role = "state"})
// CHECK-SAME: distopt.in_place_results = array<i64: 0, -1>
// CHECK: scf.if
// CHECK: %[[KEPT:.*]] = scf.if
// CHECK: return %[[KEPT]] : memref<4xf32>
func.func @skippable(%m: memref<4xf32> {distopt.name = "m", distopt.role = "state"},
                     %v: memref<4xf32> {distopt.name = "v", distopt.role = "state"},
                     %finite: i1)
    -> (memref<4xf32> {distopt.name = "m", distopt.role = "state"},
        memref<4xf32> {distopt.name = "v", distopt.role = "state"}) {
  %inPlace = scf.if %finite -> memref<4xf32> {
    %c0 = arith.constant 0 : index
    %one = arith.constant 1.0 : f32
    memref.store %one, %m[%c0] : memref<4xf32>
    %cast = memref.cast %m : memref<4xf32> to memref<?xf32>
    %back = memref.cast %cast : memref<?xf32> to memref<4xf32>
    scf.yield %back : memref<4xf32>
  } else {
    scf.yield %m : memref<4xf32>
  }
  %kept = scf.if %finite -> memref<4xf32> {
    %new = memref.alloc() : memref<4xf32>
    scf.yield %new : memref<4xf32>
  } else {
    scf.yield %v : memref<4xf32>
  }
  return %inPlace, %kept : memref<4xf32>, memref<4xf32>
}
