// --distopt-powersgd on steps with overflow checks (distopt-powersgd.mlir).
distopt.process_group @dp size 2
// The check keeps the update: PowerSGD's new state is kept by it too; the
// plain average before start-iter reduces as the original did (wire bf16).
func.func @kept(%p: tensor<16x16xf32> {distopt.role = "param", distopt.name = "p"},
                %gp: tensor<16x16xf32> {distopt.role = "grad", distopt.name = "p"},
                %lr: f32 {distopt.role = "lr"}, %t: i64 {distopt.role = "step"}) -> tensor<16x16xf32> {
  %rp = distopt.all_reduce avg %gp on @dp wire bf16 : tensor<16x16xf32>
  %ok = distopt.all_finite %rp : tensor<16x16xf32>
  %p1 = distopt.sgd_update %p, %rp lr(%lr) step(%t) : tensor<16x16xf32>, f32
  %p2 = arith.select %ok, %p1, %p : tensor<16x16xf32>
  return %p2 : tensor<16x16xf32>
}
// A select of the check that keeps no update: the state is not frozen.
func.func @flag(%p: tensor<16x16xf32> {distopt.role = "param", distopt.name = "p"},
                %gp: tensor<16x16xf32> {distopt.role = "grad", distopt.name = "p"},
                %lr: f32 {distopt.role = "lr"}, %t: i64 {distopt.role = "step"}) -> (tensor<16x16xf32>, f32) {
  %rp = distopt.all_reduce avg %gp on @dp : tensor<16x16xf32>
  %ok = distopt.all_finite %rp : tensor<16x16xf32>
  %p1 = distopt.sgd_update %p, %rp lr(%lr) step(%t) : tensor<16x16xf32>, f32
  %z = arith.constant 0.0 : f32
  %o = arith.constant 1.0 : f32
  %flag = arith.select %ok, %z, %o : f32
  return %p1, %flag : tensor<16x16xf32>, f32
}
