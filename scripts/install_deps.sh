#!/usr/bin/env bash
# Install kvlab's build and test dependencies from Debian 12 packages, only those missing.
# CUDA is optional and never installed here: GPU targets build when nvcc is on PATH or in
# /usr/local/cuda.
set -euo pipefail

PACKAGES=(
  build-essential cmake pkg-config     # compiler and build
  ccache                               # scripts/test.sh: the pip build reuses build/'s objects
  zlib1g-dev                           # .npz writing (CRC-32)
  libeigen3-dev libhdf5-dev            # eval/, models/ and io/ (dump format)
  nlohmann-json3-dev                   # models/: config.json, safetensors headers, tokenizer.json
  libcli11-dev                         # the kvlab command line
  libgtest-dev libgmock-dev            # tests
  libbenchmark-dev                     # benchmarks
  pybind11-dev python3-dev             # bindings/
  python3-numpy                        # tests check .npz files with numpy.load
  libtorch-dev                         # torch.save reader (optional in CMake; ~124 MB download)
  python3-h5py python3-pytest          # h5py reads kvlab's dumps (test); the Python capture hook
  libfaiss-dev                         # optional: k-means benchmark against faiss 1.7.3 (~8 MB; skipped without it)
  clang libclang-rt-dev                # fuzz/: libFuzzer with ASan + UBSan (scripts/fuzz.sh, run by test.sh)
  libopenmpi-dev openmpi-bin           # optional: studies over MPI ranks (docs/SCALING.md; ctest cli_mpi skips without)
)

missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "install_deps: all ${#PACKAGES[@]} packages present"
  exit 0
fi
echo "install_deps: installing ${missing[*]}"
SUDO=""
if [ "$(id -u)" -ne 0 ]; then
  command -v sudo >/dev/null || { echo "install_deps: not root and no sudo; install: ${missing[*]}" >&2; exit 1; }
  SUDO=sudo
fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
