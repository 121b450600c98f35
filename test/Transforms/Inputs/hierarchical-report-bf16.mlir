// The input of test/Transforms/distopt-hierarchical-all-reduce.mlir's
// REPORT514 check: on 514 ranks the bf16 chunk is divided in f32 between
// the stages (ExactDivision.h), and the report still sees one reduction.
distopt.process_group @dp size 514
func.func @step(%x: tensor<1024x1024xbf16>) -> tensor<1024x1024xbf16> {
  %a = distopt.all_reduce avg %x on @dp : tensor<1024x1024xbf16>
  return %a : tensor<1024x1024xbf16>
}
