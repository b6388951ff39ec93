#!/usr/bin/env bash
# Models over protobuf's 2 GB limit: generates one whose weights (default 2300 MiB) live in an
# external data file, then times and measures `fusectl dump --summary` (load with mmapped
# weights) and `fusectl convert` to a new folder (save: the writer moves the weights into
# "<out>.data" by itself, since the output cannot be one protobuf). Peak RSS shows whether the
# weights are held more than once. Needs Debian's python3-onnx and python3-numpy.
# Usage: bench/check_large_model.sh [BUILD_DIR] [MIB]
set -euo pipefail
build=${1:-build}
mib=${2:-2300}
work=${BENCH_DIR:-bench/out}/large
rm -rf "$work"
mkdir -p "$work/in" "$work/out"
/usr/bin/python3 - "$work/in/model.onnx" "$mib" <<'PY'
import sys, numpy as np, onnx
from onnx import helper, TensorProto, numpy_helper
path, mib = sys.argv[1], int(sys.argv[2])
cols = 256
rows = mib * 1024 * 1024 // 8 // cols   # two weights of mib/2 MiB: each under 2 GB in memory
# Y = X @ Wa + X @ Wb, then one small MatMul.
inits = [numpy_helper.from_array(np.full((rows, cols), 0.001 * k, np.float32), f"W{k}") for k in (1, 2)]
inits.append(numpy_helper.from_array(np.full((cols, cols), 0.01, np.float32), "W3"))
nodes = [helper.make_node("MatMul", ["X", "W1"], ["A"], name="mm1"),
         helper.make_node("MatMul", ["X", "W2"], ["B"], name="mm2"),
         helper.make_node("Add", ["A", "B"], ["S"], name="add"),
         helper.make_node("MatMul", ["S", "W3"], ["Y"], name="mm3")]
graph = helper.make_graph(nodes, "large", [helper.make_tensor_value_info("X", TensorProto.FLOAT, [1, rows])],
                          [helper.make_tensor_value_info("Y", TensorProto.FLOAT, [1, cols])], inits)
model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
onnx.save_model(model, path, save_as_external_data=True, all_tensors_to_one_file=True,
                location="model.onnx.data", size_threshold=1024)
PY
ls -l "$work/in"
measure() {
  /usr/bin/time -f '%e s, peak RSS %M KiB' "$@" 2>&1 >/dev/null | tail -1
}
echo "dump --summary: $(measure "$build/apps/fusectl" dump --summary "$work/in/model.onnx")"
echo "convert:        $(measure "$build/apps/fusectl" convert "$work/in/model.onnx" "$work/out/model.onnx")"
ls -l "$work/out"
echo "convert back reloads: $(measure "$build/apps/fusectl" dump --summary "$work/out/model.onnx")"
cmp <(tail -c 4096 "$work/in/model.onnx.data") <(tail -c 4096 "$work/out/model.onnx.data") && echo "last 4 KiB of weights identical"
rm -rf "$work"
