#!/bin/bash
# Every model bench/export_torchvision_sweep.py wrote, checked end to end against ONNX Runtime
# (npm): fusectl run on the export, -O3 and --emit ort written and run by fusectl and by ONNX
# Runtime, -O3 applied twice (idempotent?), and node counts against ONNX Runtime's own `all`
# graph. One line per model; errors are the largest |difference| over the largest |reference|.
#
#   bench/run_torchvision_sweep.sh [BUILD_DIR] MODELS_DIR [NAME...]
#
# Needs onnxruntime-node (scripts/install-ort.sh; FUSECTL_ORT_DIR) and /usr/bin/python3 with numpy.
set -u
cd "$(dirname "$0")/.."
BUILD=${1:-build}; DIR=$2; shift 2
FC=$BUILD/apps/fusectl
export FUSECTL_ORT_DIR=${FUSECTL_ORT_DIR:-$BUILD/ort}
WORK=$(mktemp -d); trap 'rm -rf "$WORK"' EXIT
rel() { /usr/bin/python3 - "$1" "$2" <<'PY'
import sys, glob, numpy as np
a = sorted(glob.glob(sys.argv[1] + '/*.npy')); b = sorted(glob.glob(sys.argv[2] + '/*.npy'))
if not a or len(a) != len(b): print('missing'); sys.exit()
worst = 0.0
for fa, fb in zip(a, b):
    A = np.load(fa).astype(np.float64); B = np.load(fb).astype(np.float64)
    if A.shape != B.shape: print('shape'); sys.exit()
    # NaNs where the other side has none: max() below would drop them (comparisons with NaN
    # are false) and report agreement.
    if (np.isnan(A) != np.isnan(B)).any(): print('NaN'); sys.exit()
    A = np.nan_to_num(A); B = np.nan_to_num(B)
    if A.size: worst = max(worst, np.abs(A - B).max() / max(np.abs(A).max(), 1e-30))
print('%.1e' % worst)
PY
}
nodes() { "$FC" dump "$1" 2>/dev/null | awk '/^nodes:/ {print $2; exit}'; }
names=("$@")
if [ ${#names[@]} -eq 0 ]; then for f in "$DIR"/*.onnx; do names+=("$(basename "$f" .onnx)"); done; fi
printf '| model | nodes | -O3 | ORT all | idempotent | fusectl on export | fusectl -O3 | ORT on -O3 | ORT on --emit ort |\n|---|---|---|---|---|---|---|---|---|\n'
for n in "${names[@]}"; do
  m=$DIR/$n.onnx; x=$DIR/$n.input.npy; w=$WORK/$n; mkdir -p "$w"
  node tests/ort_reference.js "$m" "$w/ref" input="$x" >/dev/null 2>&1 || { echo "| $n | ONNX Runtime failed on the export |"; continue; }
  node tests/ort_optimized_model.js "$m" "$w/ort_all.onnx" all >/dev/null 2>&1
  "$FC" run "$m" --input input="$x" --output-dir "$w/fc" >/dev/null 2>&1
  "$FC" optimize -O3 "$m" -o "$w/opt.onnx" -q 2>"$w/err" || { echo "| $n | optimize failed: $(head -1 "$w/err") |"; continue; }
  "$FC" optimize -O3 "$w/opt.onnx" -o "$w/opt2.onnx" -q 2>/dev/null
  "$FC" optimize -O3 --emit ort "$m" -o "$w/emit.onnx" -q 2>/dev/null
  "$FC" run "$w/opt.onnx" --input input="$x" --output-dir "$w/fc_opt" >/dev/null 2>&1
  node tests/ort_reference.js "$w/opt.onnx" "$w/ort_opt" input="$x" >/dev/null 2>&1
  node tests/ort_reference.js "$w/emit.onnx" "$w/ort_emit" input="$x" >/dev/null 2>&1
  idem=no; cmp -s "$w/opt.onnx" "$w/opt2.onnx" && idem=yes
  echo "| $n | $(nodes "$m") | $(nodes "$w/opt.onnx") | $(nodes "$w/ort_all.onnx") | $idem | $(rel "$w/ref" "$w/fc") | $(rel "$w/ref" "$w/fc_opt") | $(rel "$w/ref" "$w/ort_opt") | $(rel "$w/ref" "$w/ort_emit") |"
done
