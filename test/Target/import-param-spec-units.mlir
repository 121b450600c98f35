// A parameter's "unit" (FSDP's wrapped module): its arguments carry
// distopt.unit, and ZeRO-3 never puts two units' tensors in one flat
// buffer (a and c share unit 1, b is unit 0: two flat shards, each with
// its gather entry under gather-params). A unit that is not a
// non-negative integer is refused.
// RUN: distopt-translate --import-param-spec %S/Inputs/units.json | FileCheck %s --check-prefix=IMPORT
// RUN: distopt-translate --import-param-spec %S/Inputs/units.json | distopt-opt --distopt-pipeline="zero-stage=3 split-step gather-params grad-as-bucket-view" | FileCheck %s --check-prefix=ZERO3
// RUN: distopt-translate --import-param-spec %S/Inputs/units.json | not distopt-opt --distopt-pipeline="zero-stage=3 gather-params" 2>&1 | FileCheck %s --check-prefix=NOSPLIT
// RUN: not distopt-translate --import-param-spec %S/Inputs/unit-negative.json 2>&1 | FileCheck %s --check-prefix=BAD
// RUN: not distopt-translate --import-param-spec %S/Inputs/unit-string.json 2>&1 | FileCheck %s --check-prefix=BAD

// IMPORT: func.func @step(
// IMPORT-SAME: {distopt.name = "a", distopt.role = "param", distopt.unit = 1 : i64}
// IMPORT-SAME: {distopt.name = "b", distopt.role = "param", distopt.unit = 0 : i64}
// IMPORT-SAME: {distopt.name = "a", distopt.role = "grad", distopt.unit = 1 : i64}
// IMPORT-SAME: {distopt.name = "a.exp_avg", distopt.role = "state"}

// ZERO3-DAG: distopt.layout = [{name = "a", offset = 0 : i64, shape = array<i64: 4, 4>}, {name = "c", offset = 16 : i64, shape = array<i64: 6>}], distopt.name = "[[AC:flat[01]]].param", distopt.role = "param", distopt.shard_of = 32 : i64
// ZERO3-DAG: distopt.layout = [{name = "b", offset = 0 : i64, shape = array<i64: 10>}], distopt.name = "[[B:flat[01]]].param", distopt.role = "param", distopt.shard_of = 32 : i64
// ZERO3-DAG: func.func @step_gather0(
// ZERO3-DAG: func.func @step_gather1(
// ZERO3-NOT: func.func @step_gather2(

// NOSPLIT: gather-params needs split-step (the gathers are its entries)

// BAD: error: param spec: parameters[0].unit: expected a non-negative integer
