#!/usr/bin/env bash
# Installs what fusectl needs to build and test, from Debian's packages. Idempotent: when every
# package is already installed it changes nothing and needs no network.
set -euo pipefail

packages=(
  g++ make cmake pkg-config
  libonnx-dev libprotobuf-dev protobuf-compiler
  libcli11-dev libfmt-dev nlohmann-json3-dev catch2
  libssl-dev   # OpenSSL's libcrypto: SHA-256 of the report's input and output files
  graphviz   # `dot`, to check that `fusectl dump --format dot` renders
  # ONNX's Python package, for bench/mutate_models.py: CTest's black-box mutation run (200
  # hostile models through the CLI, 2 s) was skipped without it, in CI too.
  python3-onnx
  # The sanitizer and fuzz build (`make test-sanitize`, `make fuzz`): clang, and its runtimes
  # (ASan, UBSan, libFuzzer), which apt only recommends and --no-install-recommends leaves out.
  clang libclang-rt-dev
)
# ONNX Runtime's CPU build comes from npm (scripts/install-ort.sh) and is the reference runtime of
# the differential tests. A node/npm already on PATH (e.g. a nodesource build, which conflicts
# with Debian's npm package) is used as is.
if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
  packages+=(nodejs npm)
fi

bash "$(dirname "${BASH_SOURCE[0]}")/apt-install-missing.sh" install-deps "${packages[@]}"
