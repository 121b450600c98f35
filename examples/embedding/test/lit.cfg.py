# mycc's own lit suite. Run it with
#   lit examples/embedding/test --param mycc_build=BUILD_DIR
# (BUILD_DIR: where examples/embedding was built); FileCheck comes from
# Debian's LLVM 22.
import os

import lit.formats

config.name = "mycc"
config.test_format = lit.formats.ShTest(True)
config.suffixes = [".mlir"]
config.test_source_root = os.path.dirname(__file__)
build = lit_config.params["mycc_build"]
config.test_exec_root = os.path.join(build, "test")
config.environment["PATH"] = os.pathsep.join(
    [os.path.join(build, "bin"), "/usr/lib/llvm-22/bin", config.environment.get("PATH", "")])
