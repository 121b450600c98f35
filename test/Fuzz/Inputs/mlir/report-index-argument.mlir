// distopt-report on a function taking an index: bytesOf asked an index for
// its bit width (found by distopt-pipeline-fuzzer).


func.func @alloc_in_loop(%n: index) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  scf.parallel (%i) = (%c0) to (%n) step (%c1) {
    %m = memref.alloc() : memref<4xf32>
    memref.dealloc %m : memref<4xf32>
    scf.reduce
  }
  return
}
