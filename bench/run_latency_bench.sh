#!/usr/bin/env bash
# Latency of every testdata model on fusectl's executor next to ONNX Runtime's (CPU, from npm),
# same inputs, same intra-op threads, measured in the same run.
# Usage: bench/run_latency_bench.sh [BUILD_DIR] [THREADS...]   (default threads: 1 2)
# Env: REPEAT (default 20), MODELS (default testdata/models/*.onnx), FUSECTL_ORT_DIR
# (default BUILD_DIR/ort, filled by scripts/install-ort.sh). JSON lines on stdout.
set -euo pipefail
build=${1:-build}
shift || true
threads=("$@")
[ ${#threads[@]} -gt 0 ] || threads=(1 2)
repeat=${REPEAT:-20}
export FUSECTL_ORT_DIR=${FUSECTL_ORT_DIR:-$build/ort}
models=${MODELS:-$(ls testdata/models/*.onnx)}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for m in $models; do
  for t in "${threads[@]}"; do
    "$build/bench/bench_latency" "$m" --threads "$t" --repeat "$repeat" --inputs-dir "$tmp/in"
    node bench/ort_latency.js "$m" "$tmp/in" --threads "$t" --repeat "$repeat" --level disabled
    node bench/ort_latency.js "$m" "$tmp/in" --threads "$t" --repeat "$repeat" --level all
  done
done
