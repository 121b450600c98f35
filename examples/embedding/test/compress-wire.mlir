// RUN: mycc-opt %s --mycc-compress-wire=min-bytes=4096 | FileCheck %s
// RUN: not mycc-opt %s --mycc-compress-wire=min-bytes=-1 2>&1 | FileCheck %s --check-prefix=BAD

distopt.process_group @dp size 8

// CHECK-LABEL: func.func @step
func.func @step(%big: tensor<1024xf32>, %small: tensor<1023xf32>,
                %half: tensor<4096xf16>, %done: tensor<2048xf32>)
    -> (tensor<1024xf32>, tensor<1023xf32>, tensor<4096xf16>, tensor<2048xf32>) {
  // 4096 bytes: compressed.
  // CHECK: distopt.all_reduce avg %arg0 on @dp wire bf16 : tensor<1024xf32>
  %a = distopt.all_reduce avg %big on @dp : tensor<1024xf32>
  // 4092 bytes: left alone.
  // CHECK: distopt.all_reduce avg %arg1 on @dp : tensor<1023xf32>
  %b = distopt.all_reduce avg %small on @dp : tensor<1023xf32>
  // Not f32.
  // CHECK: distopt.all_reduce sum %arg2 on @dp : tensor<4096xf16>
  %c = distopt.all_reduce sum %half on @dp : tensor<4096xf16>
  // Already has a wire type.
  // CHECK: distopt.all_reduce sum %arg3 on @dp wire f16 : tensor<2048xf32>
  %d = distopt.all_reduce sum %done on @dp wire f16 : tensor<2048xf32>
  return %a, %b, %c, %d : tensor<1024xf32>, tensor<1023xf32>, tensor<4096xf16>, tensor<2048xf32>
}

// BAD: error: --mycc-compress-wire: min-bytes must be >= 0, got -1
