#!/usr/bin/env bash
# Installs onnxruntime-node (the reference for the ORT differential test) into DIR/node_modules,
# default build/ort. Idempotent: does nothing when the package and its Linux binary are there.
# --ignore-scripts skips the package's postinstall, which only fetches optional CUDA/TensorRT
# binaries; the CPU binary ships inside the npm package (bin/napi-v*/linux/<arch>/).
# Needs node >= 16 and npm; configure with -DFUSECTL_ORT_DIR=DIR when DIR is not <build>/ort.
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
dir="$(realpath -m "${1:-$repo/build/ort}")"
version="${ORT_NODE_VERSION:-1.30.0}"

arch="$(uname -m)"
case "$arch" in
  x86_64) arch=x64 ;;
  aarch64) arch=arm64 ;;
esac

pkg="$dir/node_modules/onnxruntime-node"
if ls "$pkg"/bin/napi-v*/linux/"$arch"/onnxruntime_binding.node >/dev/null 2>&1; then
  echo "install-ort: onnxruntime-node $(node -p "require('$pkg/package.json').version" 2>/dev/null) present in $dir"
  exit 0
fi

command -v npm >/dev/null || { echo "install-ort: npm not found (apt-get install npm)" >&2; exit 1; }
mkdir -p "$dir"
[ -f "$dir/package.json" ] || echo '{"name": "fusectl-ort", "private": true}' > "$dir/package.json"
echo "install-ort: installing onnxruntime-node@$version into $dir"
npm install --prefix "$dir" --ignore-scripts --no-audit --no-fund "onnxruntime-node@$version"
if ! ls "$pkg"/bin/napi-v*/linux/"$arch"/onnxruntime_binding.node >/dev/null 2>&1; then
  echo "install-ort: the package has no Linux $arch binary under $pkg/bin" >&2
  exit 1
fi
node -e "require('$pkg'); console.log('install-ort: onnxruntime-node loads')"
