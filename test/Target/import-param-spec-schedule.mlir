// Learning-rate schedules computed in the step from its own step count
// (LambdaLR's last_epoch, scalar state that advances every call): the
// step's rate times the schedule's factor; the scheduled rate is reported.
// RUN: distopt-translate --import-param-spec %S/Inputs/schedule.json | FileCheck %s
// RUN: sed -e 's/"warmup_cosine"/"warmup_linear"/' %S/Inputs/schedule.json \
// RUN:   | distopt-translate --import-param-spec | FileCheck %s --check-prefix=LINEAR
// RUN: sed -e 's/"type": "warmup_cosine", "warmup_steps": 3, "total_steps": 10, "min_lr": 0.01/"type": "step", "step_size": 4, "gamma": 0.5/' %S/Inputs/schedule.json \
// RUN:   | distopt-translate --import-param-spec | FileCheck %s --check-prefix=STEP
//
// Bad values name their JSON path.
// RUN: sed -e 's/"warmup_steps": 3/"warmup_steps": 30/' %S/Inputs/schedule.json \
// RUN:   | not distopt-translate --import-param-spec 2>&1 | FileCheck %s --check-prefix=WARMUP
// RUN: sed -e 's/, "total_steps": 10//' %S/Inputs/schedule.json \
// RUN:   | not distopt-translate --import-param-spec 2>&1 | FileCheck %s --check-prefix=TOTAL
// RUN: sed -e 's/"min_lr": 0.01/"min_lr": 0.5/' %S/Inputs/schedule.json \
// RUN:   | not distopt-translate --import-param-spec 2>&1 | FileCheck %s --check-prefix=MINLR
// RUN: sed -e 's/"warmup_cosine"/"cosine"/' %S/Inputs/schedule.json \
// RUN:   | not distopt-translate --import-param-spec 2>&1 | FileCheck %s --check-prefix=KIND

// CHECK-LABEL: func.func @step
// CHECK-SAME: %[[EPOCH:[^:]*]]: i64 {distopt.name = "lr_schedule.last_epoch", distopt.role = "state"}, %[[LR:[^:]*]]: f64 {distopt.role = "lr"}
// CHECK-SAME: -> ({{.*}}, i64 {distopt.name = "lr_schedule.last_epoch", distopt.role = "state"}, f64 {distopt.name = "scheduled_lr"})
// CHECK: %[[S:.*]] = arith.sitofp %[[EPOCH]] : i64 to f64
// CHECK: math.cos
// CHECK: %[[FACTOR:.*]] = arith.select
// CHECK: %[[NEXT:.*]] = arith.addi %[[EPOCH]], %{{.*}} : i64
// CHECK: %[[RATE:.*]] = arith.mulf %[[LR]], %[[FACTOR]] : f64
// CHECK: distopt.sgd_update %{{.*}} lr(%[[RATE]])
// CHECK: return {{.*}}%[[NEXT]], %[[RATE]]
// LINEAR-NOT: math.cos
// LINEAR: arith.select
// STEP: math.floor
// STEP: math.powf
// WARMUP: param spec: lr_schedule.warmup_steps: the warmup (30 steps) is longer than the schedule (10)
// TOTAL: param spec: lr_schedule: missing 'total_steps'
// MINLR: param spec: lr_schedule.min_lr: must be from 0 to optimizer.lr (0.1), got 0.5
// KIND: param spec: lr_schedule.type: expected "constant", "warmup_cosine", "warmup_linear" or "step"
