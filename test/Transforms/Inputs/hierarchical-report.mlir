// The input of test/Transforms/distopt-hierarchical-all-reduce.mlir's report check.
distopt.process_group @dp size 4
func.func @step(%x: tensor<1024x1024xf32>) -> tensor<1024x1024xf32> {
  %a = distopt.all_reduce avg %x on @dp : tensor<1024x1024xf32>
  return %a : tensor<1024x1024xf32>
}
