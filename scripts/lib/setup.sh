# Sourced by scripts/test and scripts/demo: installs what is missing on a fresh
# Debian 12 machine, then configures and builds distopt in build/.

DISTOPT_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
DISTOPT_BUILD=${DISTOPT_BUILD:-$DISTOPT_ROOT/build}
LLVM_PREFIX=/usr/lib/llvm-22

# Debian packages the build and the tests need. mlir-22-tools is required by
# MLIR's CMake config although libmlir-22-dev does not depend on it; OpenMPI
# runs the multi-rank tests; python3-torch (CPU) is the numerical reference;
# mpi4py, scikit-learn (its bundled digits) and torchvision run the PyTorch
# examples (examples/torch) through the Python package. libomp runs a CPU
# step's parallel loops; OpenBLAS is what bench/powersgd_kernels.py holds
# PowerSGD's arithmetic against (torch links it too, through libblas.so.3).
DISTOPT_PACKAGES=(
  cmake ninja-build gcc g++ python3
  llvm-22-dev llvm-22-tools libmlir-22-dev mlir-22-tools
  clang-format-22 liblld-22-dev zlib1g-dev libzstd-dev
  libopenmpi-dev openmpi-bin iproute2 libomp-22-dev libopenblas-dev
  python3-torch python3-numpy python3-mpi4py python3-sklearn python3-torchvision
)

distopt_install_packages() {
  local missing=()
  for pkg in "${DISTOPT_PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "ok installed" ||
      missing+=("$pkg")
  done
  [ ${#missing[@]} -eq 0 ] && return 0
  echo "== installing: ${missing[*]}"
  local sudo=""
  [ "$(id -u)" -eq 0 ] || sudo=sudo
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends \
    "${missing[@]}"
}

distopt_build() {
  if [ ! -f "$DISTOPT_BUILD/build.ninja" ]; then
    echo "== configuring $DISTOPT_BUILD"
    cmake -G Ninja -S "$DISTOPT_ROOT" -B "$DISTOPT_BUILD" \
      -DCMAKE_BUILD_TYPE=Release \
      -DMLIR_DIR="$LLVM_PREFIX/lib/cmake/mlir" \
      -DLLVM_DIR="$LLVM_PREFIX/lib/cmake/llvm" >/dev/null
  fi
  echo "== building"
  ninja -C "$DISTOPT_BUILD" "$@"
}

distopt_setup() {
  distopt_install_packages
  distopt_build all distopt-doc
}
