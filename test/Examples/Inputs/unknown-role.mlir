// A step with an argument no optimizer update says anything about.
distopt.process_group @world size 1
func.func @step(%w: tensor<4xf32>, %g: tensor<4xf32>, %extra: tensor<4xf32>, %lr: f32, %t: i64)
    -> tensor<4xf32> {
  %w1 = distopt.sgd_update %w, %g lr(%lr) step(%t) : tensor<4xf32>, f32
  return %w1 : tensor<4xf32>
}
