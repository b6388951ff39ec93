#!/usr/bin/env bash
# Load/verify/save benchmark on synthetic Conv-BatchNormalization-Relu-Add chains.
# Usage: bench/run_io_bench.sh [BUILD_DIR] [SIZES...]   (default sizes: 10000 100000 1000000)
# Each size: median of REPEAT runs (default 3), one process per run, JSON lines on stdout.
# bench_io, like fusectl, restarts itself with glibc's malloc on transparent huge pages
# (libgraph's huge_page_malloc.h); FUSECTL_NO_HUGE_PAGES=1 measures ordinary 4 KiB pages.
set -euo pipefail
build=${1:-build}
shift || true
sizes=("$@")
[ ${#sizes[@]} -gt 0 ] || sizes=(10000 100000 1000000)
repeat=${REPEAT:-3}
work=${BENCH_DIR:-bench/out}
mkdir -p "$work"
for n in "${sizes[@]}"; do
  model="$work/synthetic_$n.onnx"
  [ -f "$model" ] || "$build/bench/gen_synthetic" --nodes "$n" --out "$model" >/dev/null
  for ((r = 0; r < repeat; r++)); do
    "$build/bench/bench_io" "$model" "$work/synthetic_${n}.saved.onnx"
  done | sed -E 's/^(.*"total_s": ([0-9.]+).*)$/\2 \1/' | sort -n |
    awk -v r="$repeat" '{ a[NR] = $0 } END { line = a[int((r + 1) / 2)]; sub(/^[^ ]+ /, "", line); print line }'
  rm -f "$work/synthetic_${n}.saved.onnx"
done
