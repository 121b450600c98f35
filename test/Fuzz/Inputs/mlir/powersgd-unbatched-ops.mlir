// batchPowerSGD kept pointers into a vector it was still growing, one per
// powersgd_all_reduce without a batch number: freed memory once the vector
// grew (found by B6 on ResNet-50's 54 compressed gradients; replayed under
// AddressSanitizer by the fuzzers).

distopt.process_group @dp size 2
func.func @step(%g0: tensor<8x8xf32>, %g1: tensor<8x8xf32>, %g2: tensor<8x8xf32>,
                %g3: tensor<8x8xf32>, %p: tensor<8x1xf32>, %q: tensor<8x1xf32>)
    -> (tensor<8x8xf32>, tensor<8x8xf32>, tensor<8x8xf32>, tensor<8x8xf32>) {
  %r0:3 = distopt.powersgd_all_reduce %g0, %p, %q on @dp rank 1 : tensor<8x8xf32>, tensor<8x1xf32>, tensor<8x1xf32>
  %r1:3 = distopt.powersgd_all_reduce %g1, %p, %q on @dp rank 1 : tensor<8x8xf32>, tensor<8x1xf32>, tensor<8x1xf32>
  %r2:3 = distopt.powersgd_all_reduce %g2, %p, %q on @dp rank 1 {batch = 0 : i64} : tensor<8x8xf32>, tensor<8x1xf32>, tensor<8x1xf32>
  %r3:3 = distopt.powersgd_all_reduce %g3, %p, %q on @dp rank 1 {batch = 0 : i64} : tensor<8x8xf32>, tensor<8x1xf32>, tensor<8x1xf32>
  return %r0#0, %r1#0, %r2#0, %r3#0 : tensor<8x8xf32>, tensor<8x8xf32>, tensor<8x8xf32>, tensor<8x8xf32>
}
