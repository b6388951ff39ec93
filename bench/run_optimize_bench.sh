#!/usr/bin/env bash
# `fusectl optimize -O2` on synthetic Conv-BatchNormalization-Relu-Add chains: wall time and
# peak RSS of the whole command (load, pipeline, save), one process per run.
# Usage: bench/run_optimize_bench.sh [BUILD_DIR] [SIZES... | MODEL.onnx...]
#   (default sizes: 10000 100000 1000000)
# Each size: the median of REPEAT runs (default 3) by wall time, one JSON line on stdout, with
# that run's phases (from the --table timing line) and the fastest and slowest wall times, e.g.
#   {"nodes": 100000, "level": "-O2", "report": false, "wall_s": 0.81, "load_s": 0.25,
#    "passes_s": 0.30, "save_s": 0.19, "peak_rss_mib": 336, "wall_min_s": 0.78, "wall_max_s": 1.4}
# An argument naming an .onnx file optimizes that model instead ("nodes" is then its node
# count before optimizing, and "model" its file name): issue 12's depth check runs
#   LEVEL=-O3 bench/run_optimize_bench.sh build M/bert_base.onnx M/bert_base_l24.onnx \
#     M/bert_base_l48.onnx          (bench/export_profile_models.py --only bert_base_l24,...)
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
  label=""
  if [[ "$n" == *.onnx ]]; then
    model="$n"
    label=$(basename "$n" .onnx)
    stem="$label"
  else
    stem="synthetic_$n"
    model="$work/$stem.onnx"
    [ -f "$model" ] || "$build/bench/gen_synthetic" --nodes "$n" --out "$model" >/dev/null
  fi
  out="$work/$stem.opt.onnx"
  report=()
  [ "${REPORT:-0}" = 1 ] && report=(--report "$work/$stem.report.json")
  for ((r = 0; r < repeat; r++)); do
    # GNU time -f: %e wall seconds, %M peak resident set in KiB. The table's last line gives
    # the phases: "Time: T ms (load L, passes P, save S)".
    /usr/bin/time -f '%e %M' -o "$work/time.txt" \
      "$fusectl" optimize "$model" -o "$out" "$level" "${report[@]}" --table >"$work/table.txt"
    read -r wall rss_kib <"$work/time.txt"
    phases=$(sed -n 's/^Time: [0-9.]* ms (load \([0-9.]*\), passes \([0-9.]*\).*save \([0-9.]*\))$/\1 \2 \3/p' \
      "$work/table.txt")
    read -r load_ms passes_ms save_ms <<<"$phases"
    nodes="$n"
    if [ -n "$label" ]; then
      nodes=$(sed -n 's/^| Nodes *| *\([0-9]*\) .*/\1/p' "$work/table.txt")
      nodes="$nodes, \"model\": \"$label\""
    fi
    printf '%s {"nodes": %s, "level": "%s", "report": %s, "wall_s": %s, "load_s": %.2f, "passes_s": %.2f, "save_s": %.2f, "peak_rss_mib": %s}\n' \
      "$wall" "$nodes" "$level" "$([ ${#report[@]} -gt 0 ] && echo true || echo false)" "$wall" \
      "$(awk -v x="$load_ms" 'BEGIN { print x / 1000 }')" \
      "$(awk -v x="$passes_ms" 'BEGIN { print x / 1000 }')" \
      "$(awk -v x="$save_ms" 'BEGIN { print x / 1000 }')" "$((rss_kib / 1024))"
  done | sort -n | awk -v r="$repeat" '{ a[NR] = $0 } END {
    line = a[int((r + 1) / 2)]; sub(/^[^ ]+ /, "", line)
    lo = a[1]; sub(/ .*/, "", lo); hi = a[NR]; sub(/ .*/, "", hi)
    sub(/}$/, ", \"wall_min_s\": " lo ", \"wall_max_s\": " hi "}", line); print line }'
  rm -f "$out" "$work/$stem.report.json" "$work/time.txt" "$work/table.txt"
  if [ "${ORT:-0}" = 1 ]; then
    FUSECTL_ORT_DIR=${FUSECTL_ORT_DIR:-$build/ort} node bench/ort_session.js "$model" \
      --level all --repeat "$repeat"
  fi
done
