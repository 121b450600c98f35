// Dion at rank 12 on a 48 x 80 matrix: the GPU tests compile it.
func.func @step(%p: tensor<48x80xf32>, %g: tensor<48x80xf32>, %m: tensor<48x80xf32>, %q: tensor<12x80xf32>, %lr: f64, %t: i64) -> (tensor<48x80xf32>, tensor<48x80xf32>, tensor<12x80xf32>) {
  %p1, %m1, %q1 = distopt.dion_update %p, %g state(%m, %q) lr(%lr) step(%t) {rank = 12 : i64}
        : tensor<48x80xf32> [tensor<48x80xf32>, tensor<12x80xf32>], f64
  return %p1, %m1, %q1 : tensor<48x80xf32>, tensor<48x80xf32>, tensor<12x80xf32>
}
