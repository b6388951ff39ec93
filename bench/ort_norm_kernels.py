#!/usr/bin/python3
# ONNX Runtime's own kernel time for the forms `--emit ort` could write a residual + norm in:
# com.microsoft::SkipLayerNormalization against Sum + LayerNormalization (which its optimizer
# leaves apart: it fuses Add -> LayerNormalization, not Sum), and the simplified (RMS) pair, on
# one BERT-base-sized activation. Each form is a one- or two-node model written to a temporary
# folder and run by bench/ort_op_times.js (its profiler, graph optimization `all`, 1 thread);
# prints one line per form with the kernel ms per run of each op ONNX Runtime ran, and the
# whole run's median.
#
#   /usr/bin/python3 bench/ort_norm_kernels.py [--rows 128] [--hidden 768] [--runs 300]
#
# Needs Debian's python3-onnx and python3-numpy (bench/install-bench-deps.sh) and ONNX
# Runtime from npm (FUSECTL_ORT_DIR, as the other ONNX Runtime benchmarks).
import argparse
import json
import os
import subprocess
import sys
import tempfile

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

HERE = os.path.dirname(os.path.abspath(__file__))


def forms(rows, hidden):
    ms = "com.microsoft"
    norm = dict(axis=-1, epsilon=1e-12)
    return {
        "SkipLayerNormalization (contrib)": [
            helper.make_node("SkipLayerNormalization", ["x", "s", "g", "b", "bias"], ["y"],
                             domain=ms, epsilon=1e-12)],
        "Sum(x, s, bias) + LayerNormalization": [
            helper.make_node("Sum", ["x", "s", "bias"], ["t"]),
            helper.make_node("LayerNormalization", ["t", "g", "b"], ["y"], **norm)],
        "Add + Add + LayerNormalization (ORT fuses it back)": [
            helper.make_node("Add", ["x", "bias"], ["u"]),
            helper.make_node("Add", ["u", "s"], ["t"]),
            helper.make_node("LayerNormalization", ["t", "g", "b"], ["y"], **norm)],
        "LayerNormalization alone": [
            helper.make_node("LayerNormalization", ["x", "g", "b"], ["y"], **norm)],
        "SkipSimplifiedLayerNormalization (contrib)": [
            helper.make_node("SkipSimplifiedLayerNormalization", ["x", "s", "g"], ["y"],
                             domain=ms, epsilon=1e-12)],
        "Sum(x, s) + SimplifiedLayerNormalization": [
            helper.make_node("Sum", ["x", "s"], ["t"]),
            helper.make_node("SimplifiedLayerNormalization", ["t", "g"], ["y"], **norm)],
    }


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=128)
    ap.add_argument("--hidden", type=int, default=768)
    ap.add_argument("--runs", type=int, default=300)
    args = ap.parse_args()
    rng = np.random.default_rng(0)
    shape = [1, args.rows, args.hidden]
    consts = [numpy_helper.from_array(rng.standard_normal(args.hidden).astype(np.float32), n)
              for n in ("g", "b", "bias")]
    with tempfile.TemporaryDirectory(prefix="ort_norm_kernels_") as work:
        for i, (label, nodes) in enumerate(forms(args.rows, args.hidden).items()):
            used = {name for n in nodes for name in n.input}
            inputs = [helper.make_tensor_value_info(n, TensorProto.FLOAT, shape)
                      for n in ("x", "s") if n in used]
            graph = helper.make_graph(
                nodes, "g", inputs, [helper.make_tensor_value_info("y", TensorProto.FLOAT, shape)],
                [c for c in consts if c.name in used])
            model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17),
                                                            helper.make_opsetid("com.microsoft", 1)])
            path = os.path.join(work, f"form{i}.onnx")
            onnx.save(model, path)
            data = os.path.join(work, f"form{i}")
            os.makedirs(data)
            for v in inputs:
                np.save(os.path.join(data, v.name + ".npy"),
                        rng.standard_normal(shape).astype(np.float32))
            done = subprocess.run(
                ["node", os.path.join(HERE, "ort_op_times.js"), path, path, data,
                 "--threads", "1", "--runs", str(args.runs)],
                stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
            if done.returncode != 0:
                sys.exit(f"ort_op_times.js failed on '{label}' (exit {done.returncode})")
            first = json.loads(done.stdout.splitlines()[0])
            ops = ", ".join(f"{op} {v['ms']:.3f}" for op, v in first["ops"].items())
            kernels = sum(v["ms"] for v in first["ops"].values())
            print(f"{label:55s} kernels {kernels:.3f} ms ({ops}); run median "
                  f"{first['median_ms']:.2f} ms")


if __name__ == "__main__":
    main()
