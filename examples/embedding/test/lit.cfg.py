# mycc's own lit suite. Run it with
#   /usr/lib/llvm-22/bin/lit examples/embedding/test --param mycc_build=BUILD_DIR
# (BUILD_DIR: where examples/embedding was built, absolute or relative to the
# current directory); FileCheck comes from Debian's LLVM 22.
import os

import lit.formats

config.name = "mycc"
config.test_format = lit.formats.ShTest(True)
config.suffixes = [".mlir"]
config.test_source_root = os.path.dirname(__file__)
if "mycc_build" not in lit_config.params:
    lit_config.fatal("give --param mycc_build=BUILD_DIR, where "
                     "examples/embedding was built")
# Tests run in their own directory: a relative BUILD_DIR is the caller's.
build = os.path.abspath(lit_config.params["mycc_build"])
if not os.path.exists(os.path.join(build, "bin", "mycc-opt")):
    lit_config.fatal(f"{build}/bin/mycc-opt does not exist: build "
                     "examples/embedding there first (docs/embedding.md)")
config.test_exec_root = os.path.join(build, "test")
config.environment["PATH"] = os.pathsep.join(
    [os.path.join(build, "bin"), "/usr/lib/llvm-22/bin", config.environment.get("PATH", "")])
