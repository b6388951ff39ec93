#!/usr/bin/env bash
# `fusectl optimize -O2` on synthetic Conv-BatchNormalization-Relu-Add chains: wall time and
# peak RSS of the whole command (load, pipeline, save), one process per run.
# Usage: bench/run_optimize_bench.sh [BUILD_DIR] [SIZES...]   (default sizes: 10000 100000 1000000)
# Each size: median of REPEAT runs (default 3) by wall time, one JSON line on stdout, e.g.
#   {"nodes": 100000, "level": "-O2", "report": false, "wall_s": 1.92, "peak_rss_mib": 310}
# LEVEL=-O3 changes the level; REPORT=1 adds --report (rejection reasons and SHA-256 hashes
# included in the time). With ORT=1 (and onnxruntime-node in FUSECTL_ORT_DIR, default
# BUILD_DIR/ort) each size also gets a line from bench/ort_session.js: ORT's session creation
# with graphOptimizationLevel 'all' on the same file.
set -euo pipefail
build=${1:-build}
shift || true
sizes=("$@")
[ ${#sizes[@]} -gt 0 ] || sizes=(10000 100000 1000000)
repeat=${REPEAT:-3}
level=${LEVEL:--O2}
work=${BENCH_DIR:-bench/out}
fusectl="$build/apps/fusectl"
mkdir -p "$work"
[ -x /usr/bin/time ] || { echo "run_optimize_bench: needs /usr/bin/time (apt-get install time)" >&2; exit 2; }

for n in "${sizes[@]}"; do
  model="$work/synthetic_$n.onnx"
  [ -f "$model" ] || "$build/bench/gen_synthetic" --nodes "$n" --out "$model" >/dev/null
  out="$work/synthetic_${n}.opt.onnx"
  report=()
  [ "${REPORT:-0}" = 1 ] && report=(--report "$work/synthetic_${n}.report.json")
  for ((r = 0; r < repeat; r++)); do
    # GNU time -f: %e wall seconds, %M peak resident set in KiB.
    /usr/bin/time -f '%e %M' -o "$work/time.txt" \
      "$fusectl" optimize "$model" -o "$out" "$level" "${report[@]}" --quiet
    read -r wall rss_kib <"$work/time.txt"
    printf '%s {"nodes": %s, "level": "%s", "report": %s, "wall_s": %s, "peak_rss_mib": %s}\n' \
      "$wall" "$n" "$level" "$([ ${#report[@]} -gt 0 ] && echo true || echo false)" "$wall" \
      "$((rss_kib / 1024))"
  done | sort -n | awk -v r="$repeat" '{ a[NR] = $0 } END { line = a[int((r + 1) / 2)]; sub(/^[^ ]+ /, "", line); print line }'
  rm -f "$out" "$work/synthetic_${n}.report.json" "$work/time.txt"
  if [ "${ORT:-0}" = 1 ]; then
    FUSECTL_ORT_DIR=${FUSECTL_ORT_DIR:-$build/ort} node bench/ort_session.js "$model" \
      --level all --repeat "$repeat"
  fi
done
