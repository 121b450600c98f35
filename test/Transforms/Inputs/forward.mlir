// A step with a forward pass that uses the parameters (for distopt-shard-optimizer.mlir).
distopt.process_group @dp size 2
func.func @forward(%w: tensor<4x4xf32> {distopt.name = "w", distopt.role = "param"}, %b: tensor<6xf32> {distopt.name = "b", distopt.role = "param"},
                   %x: tensor<4xf32>, %lr: f32 {distopt.role = "lr"}, %t: i64 {distopt.role = "step"})
    -> (tensor<4x4xf32> {distopt.name = "w", distopt.role = "param"}, tensor<6xf32> {distopt.name = "b", distopt.role = "param"}, tensor<4xf32>) {
  %e = tensor.empty() : tensor<4xf32>
  %y = linalg.matvec ins(%w, %x : tensor<4x4xf32>, tensor<4xf32>) outs(%e : tensor<4xf32>) -> tensor<4xf32>
  %gb = arith.addf %b, %b : tensor<6xf32>
  %gw = arith.mulf %w, %w : tensor<4x4xf32>
  %rw = distopt.all_reduce avg %gw on @dp : tensor<4x4xf32>
  %rb = distopt.all_reduce avg %gb on @dp : tensor<6xf32>
  %w1 = distopt.sgd_update %w, %rw lr(%lr) step(%t) : tensor<4x4xf32>, f32
  %b1 = distopt.sgd_update %b, %rb lr(%lr) step(%t) : tensor<6xf32>, f32
  return %w1, %b1, %y : tensor<4x4xf32>, tensor<6xf32>, tensor<4xf32>
}

