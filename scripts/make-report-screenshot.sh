#!/usr/bin/env bash
# Regenerates docs/images/report-resnet_mini.png, the README's screenshot of `fusectl report`:
# the demo model (testdata/models/resnet_mini.onnx at -O3, batch 1, as `make demo` runs it)
# rendered by headless chromium (scripts/install-browser.sh) and shrunk to a palette PNG under
# 300 KB when pngquant or Python's PIL is there.
#   scripts/make-report-screenshot.sh [BUILD_DIR]     (default build; fusectl must be built)
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="$(realpath -m "${1:-$repo/build}")"
fusectl="$build/apps/fusectl"
out="$repo/docs/images/report-resnet_mini.png"
[ -x "$fusectl" ] || { echo "make-report-screenshot: $fusectl not built (make build)" >&2; exit 1; }
command -v chromium >/dev/null || {
  echo "make-report-screenshot: chromium not found (scripts/install-browser.sh)" >&2; exit 1; }

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
"$fusectl" report "$repo/testdata/models/resnet_mini.onnx" -O3 --shape input=1x3x32x32 \
  -o "$work/report.html"
# Without "#site-N": headless chromium screenshots a page opened on a fragment blank.
chromium --headless --no-sandbox --disable-gpu --hide-scrollbars --no-first-run \
  --user-data-dir="$work/profile" --window-size=1280,1500 \
  --screenshot="$work/shot.png" "file://$work/report.html" >/dev/null 2>&1
mkdir -p "$(dirname "$out")"
if command -v pngquant >/dev/null; then
  pngquant --force --quality 60-90 --output "$out" "$work/shot.png"
elif python3 -c "import PIL" 2>/dev/null; then
  # A 64-colour palette: the page is flat colours and text, so it stays readable.
  python3 -c "import sys; from PIL import Image; Image.open(sys.argv[1]).convert('RGB').quantize(64).save(sys.argv[2], optimize=True)" \
    "$work/shot.png" "$out"
else
  cp "$work/shot.png" "$out"
fi
echo "make-report-screenshot: $out ($(stat -c %s "$out") bytes)"
