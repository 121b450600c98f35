// -mlir-timing reports the time of each pass of the pipeline.
// RUN: distopt-opt %examples/mlp_train_step.mlir --distopt-pipeline="zero-stage=2" -mlir-timing -o /dev/null 2>&1 | FileCheck %s

// CHECK: Execution time report
// CHECK: Parser
// CHECK: 'func.func' Pipeline
// CHECK:   FuseDivIntoAllReducePass
// CHECK:   ShardOptimizerPass
// CHECK:   BucketizePass
// CHECK:   OverlapCollectivesPass
// CHECK: VerifyCollectivesPass
// CHECK: Total
