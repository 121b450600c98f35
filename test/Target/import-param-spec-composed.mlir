// Loss scaling and clipping in a spec: the reduced gradients are checked
// for overflow, converted to the main parameters' f32, unscaled, clipped by
// their global norm, and every update is kept only if all were finite; the
// loss scale and its tracker are scalar state, the norm and the skipped
// flag are reported.
// RUN: distopt-translate --import-param-spec %S/Inputs/composed.json | FileCheck %s
// RUN: distopt-translate --import-param-spec %S/Inputs/composed.json | distopt-opt --distopt-verify-collectives > /dev/null
// RUN: sed -e 's/"dynamic", "init_scale": 1024, "growth_interval": 3/"static", "scale": 128/' %S/Inputs/composed.json \
// RUN:   | distopt-translate --import-param-spec | FileCheck %s --check-prefix=STATIC
// RUN: sed -e 's/"max_norm": 1.0}/"max_norm": 1.0, "norm_type": "inf"}/' %S/Inputs/composed.json \
// RUN:   | distopt-translate --import-param-spec | FileCheck %s --check-prefix=INF
//
// Bad values name their JSON path.
// RUN: sed -e 's/"max_norm": 1.0/"max_norm": 0/' %S/Inputs/composed.json \
// RUN:   | not distopt-translate --import-param-spec 2>&1 | FileCheck %s --check-prefix=MAXNORM
// RUN: sed -e 's/"max_norm": 1.0}/"max_norm": 1.0, "norm_type": "two"}/' %S/Inputs/composed.json \
// RUN:   | not distopt-translate --import-param-spec 2>&1 | FileCheck %s --check-prefix=NORMTYPE
// RUN: sed -e 's/"growth_interval": 3/"growth_interval": 3, "growth_factor": 1/' %S/Inputs/composed.json \
// RUN:   | not distopt-translate --import-param-spec 2>&1 | FileCheck %s --check-prefix=GROWTH
// RUN: sed -e 's/"growth_interval": 3/"growth_interval": 3, "backoff_factor": 1.5/' %S/Inputs/composed.json \
// RUN:   | not distopt-translate --import-param-spec 2>&1 | FileCheck %s --check-prefix=BACKOFF
// RUN: sed -e 's/"growth_interval": 3/"growth_interval": 0/' %S/Inputs/composed.json \
// RUN:   | not distopt-translate --import-param-spec 2>&1 | FileCheck %s --check-prefix=INTERVAL
// RUN: sed -e 's/"type": "dynamic"/"type": "adaptive"/' %S/Inputs/composed.json \
// RUN:   | not distopt-translate --import-param-spec 2>&1 | FileCheck %s --check-prefix=TYPE
// RUN: sed -e 's/"dynamic", "init_scale": 1024, "growth_interval": 3/"static"/' %S/Inputs/composed.json \
// RUN:   | not distopt-translate --import-param-spec 2>&1 | FileCheck %s --check-prefix=NOSCALE
// RUN: sed -e 's/"init_scale": 1024/"init_scale": 1e39/' %S/Inputs/composed.json \
// RUN:   | not distopt-translate --import-param-spec 2>&1 | FileCheck %s --check-prefix=HUGE
// RUN: sed -e 's/"dynamic", "init_scale": 1024, "growth_interval": 3/"static", "scale": 1e-320/' %S/Inputs/composed.json \
// RUN:   | not distopt-translate --import-param-spec 2>&1 | FileCheck %s --check-prefix=DENORMAL
// RUN: sed -e 's/"growth_interval": 3/"growth_intervall": 3/' %S/Inputs/composed.json \
// RUN:   | not distopt-translate --import-param-spec 2>&1 | FileCheck %s --check-prefix=UNKNOWN

// CHECK-LABEL: func.func @step(
// CHECK-SAME: %[[SCALE:[^:]*]]: f32 {distopt.name = "loss_scale", distopt.role = "state", distopt.value = 1.024000e+03 : f64}
// CHECK-SAME: %[[TRACKER:[^:]*]]: i64 {distopt.name = "loss_scale_growth_tracker", distopt.role = "state"}
// CHECK-SAME: f32 {distopt.name = "loss_scale", distopt.role = "state"}, i64 {distopt.name = "loss_scale_growth_tracker", distopt.role = "state"}, f32 {distopt.name = "grad_norm"}, i1 {distopt.name = "skipped", distopt.role = "skipped"})
// CHECK: %[[RW:.*]] = arith.divf
// CHECK: %[[RB:.*]] = arith.divf
// CHECK: %[[OK:.*]] = distopt.all_finite %[[RW]], %[[RB]] : tensor<8x4xbf16>, tensor<8xf32>
// CHECK: %[[EW:.*]] = arith.extf %[[RW]] : tensor<8x4xbf16> to tensor<8x4xf32>
// CHECK: %[[UW:.*]] = distopt.unscale %[[EW]] by %[[SCALE]]
// CHECK: %[[UB:.*]] = distopt.unscale %[[RB]] by %[[SCALE]]
// CHECK: %[[C:.*]]:2, %[[NORM:.*]] = distopt.clip_grad_norm %[[UW]], %[[UB]] max_norm 1.000000e+00 : tensor<8x4xf32>, tensor<8xf32> -> f32
// CHECK: %[[NEW:.*]], %{{.*}}:2 = distopt.adamw_update %[[MAIN:[^,]*]], %[[C]]#0
// CHECK: %[[KEPT:.*]] = arith.select %[[OK]], %[[NEW]], %[[MAIN]]
// CHECK: arith.truncf %[[KEPT]] : tensor<8x4xf32> to tensor<8x4xbf16>
// CHECK: distopt.loss_scale_update %[[SCALE]], %[[TRACKER]], %[[OK]] {growth_interval = 3 : i64} : f32, i64
// CHECK: %[[SKIPPED:.*]] = arith.xori %[[OK]], %{{.*}} : i1
// CHECK: return {{.*}}, %[[NORM]], %[[SKIPPED]]
//
// A static scale is a constant: nothing to feed back.
// STATIC-NOT: loss_scale
// STATIC: %[[S:.*]] = arith.constant 1.280000e+02 : f32
// STATIC: distopt.unscale %{{.*}} by %[[S]]
// STATIC-NOT: distopt.loss_scale_update
// INF: distopt.clip_grad_norm {{.*}} {norm_type = 0x7FF0000000000000 : f64}
// MAXNORM: param spec: clip_grad_norm.max_norm: must be positive, got 0
// NORMTYPE: param spec: clip_grad_norm.norm_type: expected a positive number or "inf"
// GROWTH: param spec: loss_scaling.growth_factor: must be greater than 1, got 1
// BACKOFF: param spec: loss_scaling.backoff_factor: must be less than 1, got 1.5
// INTERVAL: param spec: loss_scaling.growth_interval: expected a positive integer
// TYPE: param spec: loss_scaling.type: expected "dynamic" or "static"
// NOSCALE: param spec: loss_scaling: missing 'scale'
// HUGE: param spec: loss_scaling.init_scale: must be a positive, normal f32 number (from 1.2e-38 to 3.4e38), got 1e+39
// DENORMAL: param spec: loss_scaling.scale: must be a positive, normal f32 number
// UNKNOWN: param spec: loss_scaling: unknown key 'growth_intervall'
