// A pack of an extended block argument that is a loop's, not the step's:
// --distopt-grad-as-bucket-view once crashed asking for its role.
func.func @step(%g: tensor<4xbf16> {distopt.name = "g", distopt.role = "grad"}) -> tensor<8xf32> {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %z = arith.constant dense<0.0> : tensor<8xf32>
  %r = scf.for %i = %c0 to %c1 step %c1 iter_args(%acc = %z) -> tensor<8xf32> {
    %x = arith.extf %g : tensor<4xbf16> to tensor<4xf32>
    %p = distopt.bucket_pack %x : tensor<4xf32> -> tensor<8xf32>
    scf.yield %p : tensor<8xf32>
  }
  %s = scf.for %i = %c0 to %c1 step %c1 iter_args(%acc = %g) -> tensor<4xbf16> {
    %e = arith.extf %acc : tensor<4xbf16> to tensor<4xf32>
    %p = distopt.bucket_pack %e : tensor<4xf32> -> tensor<8xf32>
    scf.yield %acc : tensor<4xbf16>
  }
  return %r : tensor<8xf32>
}
