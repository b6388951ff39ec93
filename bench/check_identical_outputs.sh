#!/usr/bin/env bash
# Writes everything the optimizer produces for the testdata models (and, with SYNTHETIC="10000
# 100000 ..." the synthetic chains of bench/gen_synthetic) into OUT_DIR, so that the outputs of
# two fusectl binaries can be compared byte for byte:
#   bench/check_identical_outputs.sh OLD/apps/fusectl /tmp/old
#   bench/check_identical_outputs.sh NEW/apps/fusectl /tmp/new
#   diff -r /tmp/old /tmp/new && echo identical
# For each model and each of -O1, -O2, -O3 and -O3 --emit standard: the optimized .onnx, the
# JSON report with its wall-clock fields ("seconds") removed, the --table text without its
# timing line, stderr and the exit code. Models that do not load (multi-case golden files) are
# recorded by their exit code and message, which must not change either. A restructuring that
# claims "behaviour does not change" is checked with this (issue 11).
set -uo pipefail
fusectl=$(realpath "$1")
out=$2
gen=${GEN_SYNTHETIC:-$(dirname "$fusectl")/../bench/gen_synthetic}
root=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "$out"
cd "$root"

models=(testdata/models/*.onnx testdata/fixtures/*.onnxtxt)
for f in testdata/passes/*/*.onnxtxt; do models+=("$f"); done
for n in ${SYNTHETIC:-}; do
  m="${SYNTHETIC_DIR:-/tmp}/synthetic_$n.onnx"
  [ -f "$m" ] || "$gen" --nodes "$n" --out "$m" >/dev/null
  models+=("$m")
done

strip_report() {  # drops the per-pass "seconds" (wall clock) from a report
  [ -f "$1" ] || return 0
  jq -S 'if .passes then .passes |= map(del(.seconds)) else . end' "$1" >"$1.tmp" 2>/dev/null &&
    mv "$1.tmp" "$1"
}

for m in "${models[@]}"; do
  key=$(echo "$m" | sed 's#^.*/synthetic_#synthetic_#; s#^\.*/*##; s#[/.]#_#g')
  for variant in O1 O2 O3 O3std; do
    flags=("-${variant%std}")
    [ "$variant" = O3std ] && flags+=(--emit standard)
    base="$out/$key.$variant"
    "$fusectl" optimize "$m" -o "$base.onnx" "${flags[@]}" --report "$base.json" --table \
      >"$base.table" 2>"$base.err"
    echo $? >"$base.rc"
    sed -i '/^Time: /d' "$base.table"
    sed -i "s#$out#OUT#g; s#$root/##g" "$base.err" "$base.table"
    strip_report "$base.json"
    [ -f "$base.json" ] && sed -i "s#$out#OUT#g; s#$root/##g" "$base.json"
  done
  # A second optimization of an optimized file must leave it as it is, and verify must agree.
  if [ -f "$out/$key.O3.onnx" ]; then
    "$fusectl" optimize "$out/$key.O3.onnx" -o "$out/$key.O3.again.onnx" -O3 >/dev/null 2>&1
    echo $? >"$out/$key.O3.again.rc"
    "$fusectl" diff "$m" "$out/$key.O3.onnx" >"$out/$key.diff" 2>&1
    echo $? >>"$out/$key.diff"
    sed -i "s#$out#OUT#g; s#$root/##g" "$out/$key.diff"
  fi
done
echo "check_identical_outputs: ${#models[@]} models written to $out"
