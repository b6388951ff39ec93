#!/usr/bin/python3
# Each node's time inside the model against the same node run alone: what the rest of the
# model costs it. Inside the model a node finds its input just written by the node before,
# and its weights wherever the previous run left them (a model's weights outgrow the caches);
# alone, `fusectl profile` runs it again and again on a seeded input, so both are as close to
# the core as they can get. A node much slower in the model waits on memory: a reading order
# the hardware prefetcher does not follow, or weights streamed from memory.
#
#   /usr/bin/python3 bench/isolated_node_times.py FUSECTL MODEL.onnx [--input NAME=FILE ...]
#       [--runs N] [--top N] [--json OUT.json]
#
# The model's node times come from one `fusectl profile --only unfused` of MODEL (so pass an
# already optimized model to look at fused nodes); each node alone is cut out with
# onnx.utils.extract_model and profiled the same way (one thread, pinned to core 1 when
# taskset exists). Prints the totals and the nodes furthest apart. Needs Debian's python3-onnx
# (bench/install-bench-deps.sh).
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile

import onnx
from onnx import utils


def profile(fusectl, model, inputs, runs, out_json):
    pin = ["taskset", "-c", "1"] if shutil.which("taskset") else []
    cmd = pin + [fusectl, "profile", model, "--only", "unfused", "--runs", str(runs),
                 "--threads", "1", "--top", "100000", "--json", out_json]
    for spec in inputs:
        cmd += ["--input", spec]
    done = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    if done.returncode != 0:
        return None
    with open(out_json) as f:
        return json.load(f)["sides"]["unfused"]["top_nodes"]


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("fusectl")
    ap.add_argument("model")
    ap.add_argument("--input", action="append", default=[], help="NAME=FILE for the model")
    ap.add_argument("--runs", type=int, default=30, help="timed runs of the model")
    ap.add_argument("--node-runs", type=int, default=200, help="timed runs of each node alone")
    ap.add_argument("--top", type=int, default=25)
    ap.add_argument("--json", help="write [name, op, in_model_ms, alone_ms, input_shapes] rows")
    a = ap.parse_args()

    model = onnx.load(a.model)
    constants = {t.name for t in model.graph.initializer}
    work = tempfile.mkdtemp(prefix="isolated_node_times-")
    try:
        whole = profile(a.fusectl, a.model, a.input, a.runs, os.path.join(work, "model.json"))
        if whole is None:
            sys.exit(f"isolated_node_times: fusectl profile failed on {a.model}")
        in_model = {n["node"]: n["ms"] for n in whole}
        rows = []
        for i, node in enumerate(model.graph.node):
            label = node.name or node.output[0]
            if label not in in_model:
                continue
            part = os.path.join(work, f"node{i}.onnx")
            try:
                utils.extract_model(a.model, part,
                                    [x for x in node.input if x and x not in constants],
                                    [x for x in node.output if x])
            except Exception as e:  # a node reading an outer scope, say: skipped, and said
                print(f"skipped {label}: {e}", file=sys.stderr)
                continue
            alone = profile(a.fusectl, part, [], a.node_runs, os.path.join(work, "node.json"))
            os.remove(part)
            if not alone:
                print(f"skipped {label}: fusectl profile failed on it alone", file=sys.stderr)
                continue
            rows.append([label, node.op_type, in_model[label], alone[0]["ms"],
                         alone[0]["input_shapes"]])
    finally:
        shutil.rmtree(work, ignore_errors=True)

    rows.sort(key=lambda r: r[3] - r[2])
    print(f"{len(rows)} nodes: {sum(r[2] for r in rows):.3f} ms in the model, "
          f"{sum(r[3] for r in rows):.3f} ms alone")
    print("in model - alone   in model     alone  op                inputs")
    for r in rows[:a.top]:
        print(f"{r[2] - r[3]:+14.4f} {r[2]:10.4f} {r[3]:9.4f}  {r[1]:16s}  {r[4]}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(rows, f)


if __name__ == "__main__":
    main()
