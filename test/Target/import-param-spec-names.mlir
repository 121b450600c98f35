// Names in a parameter spec: the model's must be a string (a number was
// ignored), and no name may hold a NUL character -- names reach the host
// library as C strings, where "w\0a" and "w\0b" both read "w" (they were
// accepted and collapsed to one name there).
// RUN: not distopt-translate --import-param-spec %S/Inputs/model-number.json 2>&1 | FileCheck %s --check-prefix=MODEL
// RUN: not distopt-translate --import-param-spec %S/Inputs/nul-model.json 2>&1 | FileCheck %s --check-prefix=MODEL
// RUN: not distopt-translate --import-param-spec %S/Inputs/nul-name.json 2>&1 | FileCheck %s --check-prefix=NAME
// MODEL: error: param spec: model: expected a non-empty string without NUL characters
// NAME: error: param spec: parameters[0].name: holds a NUL character
