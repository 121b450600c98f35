// The shipped examples verify and round-trip; at world size 1 every
// collective of the DDP example folds away; the example mistake is rejected.
// RUN: distopt-opt %examples/mlp_adamw_step.mlir | distopt-opt > /dev/null
// RUN: distopt-opt %examples/zero2_flat_step.mlir | distopt-opt > /dev/null
// RUN: distopt-opt %examples/mixed_precision_step.mlir | distopt-opt > /dev/null
// RUN: distopt-opt %examples/mlp_train_step.mlir --distopt-verify-collectives | distopt-opt > /dev/null
// RUN: sed 's/size 2/size 1/' %examples/mlp_adamw_step.mlir \
// RUN:   | distopt-opt -canonicalize | FileCheck %s --check-prefix=SINGLE
// RUN: not distopt-opt %examples/errors/premul_underflow.mlir 2>&1 \
// RUN:   | FileCheck %s --check-prefix=ERROR

// SINGLE-LABEL: func.func @step
// SINGLE-NOT: distopt.all_reduce
// SINGLE-NOT: distopt.bucket_
// SINGLE: distopt.clip_grad_norm
// SINGLE-COUNT-4: distopt.adamw_update
// SINGLE: return

// ERROR: premul_underflow.mlir:7:8: error: 'distopt.all_reduce' op premul_sum scale 1e-08 is not representable in 'f16'
