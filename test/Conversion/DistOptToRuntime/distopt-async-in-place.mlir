// RUN: distopt-opt %s -split-input-file --distopt-async-in-place | FileCheck %s
// The marker never survives the pass.
// RUN: distopt-opt %s -split-input-file --distopt-async-in-place | FileCheck %s --check-prefix=MARKER
// MARKER-NOT: distopt.request_input

// @start stands for the runtime call a bufferized *_start makes on the
// request's buffer.
func.func private @start(memref<16xf32>)

// A gradient argument nothing reads after the copy: the request uses it.
// CHECK-LABEL: func.func @gradient_argument
// CHECK-SAME: (%[[G:.*]]: memref<16xf32>
// CHECK-NOT: memref.alloc
// CHECK-NOT: memref.copy
// CHECK: call @start(%[[G]])
// CHECK: return %[[G]]
func.func @gradient_argument(%g: memref<16xf32> {distopt.role = "grad"}) -> memref<16xf32> {
  %a = memref.alloc() : memref<16xf32>
  memref.copy %g, %a {distopt.request_input} : memref<16xf32> to memref<16xf32>
  call @start(%a) : (memref<16xf32>) -> ()
  return %a : memref<16xf32>
}

// A buffer the step allocated (a bucket it packed), read before the copy.
// CHECK-LABEL: func.func @allocation
// CHECK: %[[B:.*]] = memref.alloc() : memref<16xf32>
// CHECK-NEXT: memref.copy %{{.*}}, %[[B]]
// CHECK-NEXT: call @start(%[[B]])
// CHECK-NOT: memref.alloc
func.func @allocation(%x: memref<16xf32>) -> memref<16xf32> {
  %b = memref.alloc() : memref<16xf32>
  memref.copy %x, %b : memref<16xf32> to memref<16xf32>
  %a = memref.alloc() : memref<16xf32>
  memref.copy %b, %a {distopt.request_input} : memref<16xf32> to memref<16xf32>
  call @start(%a) : (memref<16xf32>) -> ()
  return %a : memref<16xf32>
}

// -----

func.func private @start(memref<16xf32>)
func.func private @read(memref<4xf32, strided<[1], offset: 4>>)

// Kept: a view of the input is read after the copy (it must still hold the
// input), the argument is not one the step may update, the function has a
// caller, or the copy is in a loop (the next iteration copies again).
// CHECK-LABEL: func.func @read_after
// CHECK: memref.copy {{.*}} : memref<16xf32> to memref<16xf32>
// CHECK-LABEL: func.func @not_updatable
// CHECK: memref.copy
// CHECK-LABEL: func.func @called
// CHECK: memref.copy
// CHECK-LABEL: func.func @in_loop
// CHECK: memref.copy
func.func @read_after(%g: memref<16xf32> {distopt.role = "grad"}) {
  %a = memref.alloc() : memref<16xf32>
  memref.copy %g, %a {distopt.request_input} : memref<16xf32> to memref<16xf32>
  call @start(%a) : (memref<16xf32>) -> ()
  %v = memref.subview %g[4] [4] [1] : memref<16xf32> to memref<4xf32, strided<[1], offset: 4>>
  call @read(%v) : (memref<4xf32, strided<[1], offset: 4>>) -> ()
  return
}

func.func @not_updatable(%g: memref<16xf32> {distopt.role = "lr"}) {
  %a = memref.alloc() : memref<16xf32>
  memref.copy %g, %a {distopt.request_input} : memref<16xf32> to memref<16xf32>
  call @start(%a) : (memref<16xf32>) -> ()
  return
}

func.func @called(%g: memref<16xf32> {distopt.role = "grad"}) {
  %a = memref.alloc() : memref<16xf32>
  memref.copy %g, %a {distopt.request_input} : memref<16xf32> to memref<16xf32>
  call @start(%a) : (memref<16xf32>) -> ()
  return
}

func.func @caller(%g: memref<16xf32>) {
  call @called(%g) : (memref<16xf32>) -> ()
  return
}

func.func @in_loop(%g: memref<16xf32> {distopt.role = "grad"}) {
  %c0 = arith.constant 0 : index
  %c2 = arith.constant 2 : index
  %c1 = arith.constant 1 : index
  scf.for %i = %c0 to %c2 step %c1 {
    %a = memref.alloc() : memref<16xf32>
    memref.copy %g, %a {distopt.request_input} : memref<16xf32> to memref<16xf32>
    func.call @start(%a) : (memref<16xf32>) -> ()
  }
  return
}
