#!/usr/bin/python3
# Pairs ONNX Runtime's per-node kernel times (bench/ort_op_times.js --per-node FILE, its
# "original" side) with fusectl profile's (--json FILE --top 1000, the fused side), node by node.
# ONNX Runtime names an NCHWc node after the value it outputs (X_nchwc); that value is traced
# back through the original model to the Conv or Gemm its fusion started from, whose name the
# fused fusectl node keeps (the times of several ONNX Runtime nodes tracing back to one fusectl
# node add up). Prints the totals, the times grouped by kernel (1x1, 3x3, dw3x3...)
# and output size, and the 12 nodes where fusectl is furthest behind.
#
#   /usr/bin/python3 bench/pair_node_times.py MODEL.onnx ORT_PER_NODE.json FUSECTL_PROFILE.json
#
# Needs Debian's python3-onnx (bench/install-bench-deps.sh).
import json
import sys

import onnx


def producers(model):
    return {out: node for node in model.graph.node for out in node.output}


def origin(value, made_by):
    """The Conv or Gemm whose fused chain ends in `value` (walking first inputs back)."""
    node = made_by.get(value)
    while node is not None and node.op_type not in ("Conv", "Gemm"):
        node = made_by.get(node.input[0])
    return node.name if node is not None else None


def group(node):
    w = node["input_shapes"][1] if len(node["input_shapes"]) > 1 else None
    if not w or len(w) != 4:
        return node["op"]
    depthwise = w[1] == 1 and node["input_shapes"][0][1] > 1
    return f"{'dw' if depthwise else ''}{w[2]}x{w[3]} out{node['output_shapes'][0][2]}"


def main():
    if len(sys.argv) != 4:
        sys.exit("usage: pair_node_times.py MODEL.onnx ORT_PER_NODE.json FUSECTL_PROFILE.json")
    model = onnx.load(sys.argv[1], load_external_data=False)
    made_by = producers(model)
    ort = json.load(open(sys.argv[2]))["original"]
    ours = {n["node"]: n for n in json.load(open(sys.argv[3]))["sides"]["fused"]["top_nodes"]}
    # Several ONNX Runtime nodes can trace back to one fusectl node (an unfused Sigmoid and Mul
    # after a fused Conv): their times add up.
    # ONNX Runtime's QuickGelu (its Sigmoid + Mul, the Silu fusectl folds into the Conv) is
    # named after the Mul it replaced plus "/QuickGeluFusion/": traced back from that Mul's input.
    # Layout reorders (ReorderInput/ReorderOutput) belong to no model node; they and anything
    # else left unpaired are listed by op type, so that both totals cover the whole run.
    by_name = {node.name: node for node in model.graph.node}
    ort_ms, unpaired = {}, {}
    for key, entry in ort.items():
        if key.endswith("_nchwc"):
            name = origin(key[: -len("_nchwc")], made_by)
        elif key.endswith("/QuickGeluFusion/") and key[: -len("/QuickGeluFusion/")] in by_name:
            name = origin(by_name[key[: -len("/QuickGeluFusion/")]].input[0], made_by)
        else:
            name = key
        if name in ours:
            ort_ms[name] = ort_ms.get(name, 0.0) + entry["ms"]
        else:
            unpaired[entry["op"]] = unpaired.get(entry["op"], 0.0) + entry["ms"]
    pairs = [(ms, ours[name]) for name, ms in ort_ms.items()]  # (ORT ms, fusectl node)
    print(f"{len(pairs)} fusectl nodes paired with ONNX Runtime's; ONNX Runtime "
          f"{sum(o for o, _ in pairs):.3f} ms, fusectl {sum(n['ms'] for _, n in pairs):.3f} ms")
    if unpaired:
        print("ONNX Runtime kernels paired with no fusectl node: " +
              ", ".join(f"{op} {ms:.3f} ms" for op, ms in sorted(unpaired.items())))
    paired = set(ort_ms)
    rest = sum(n["ms"] for name, n in ours.items() if name not in paired)
    print(f"fusectl nodes paired with none: {rest:.3f} ms")
    groups = {}
    for ort_ms, node in pairs:
        g = groups.setdefault(group(node), [0.0, 0.0, 0])
        g[0] += ort_ms
        g[1] += node["ms"]
        g[2] += 1
    for name, (ort_ms, ours_ms, count) in sorted(groups.items()):
        print(f"{name:16s} n={count:2d}  ORT {ort_ms:.3f}  fusectl {ours_ms:.3f}  "
              f"ratio {ours_ms / ort_ms:.2f}")
    print("furthest behind:")
    for ort_ms, node in sorted(pairs, key=lambda p: p[0] - p[1]["ms"])[:int(__import__("os").environ.get("TOP", "12"))]:
        shapes = " ".join(str(s) for s in node["input_shapes"][:2])
        print(f"{node['ms'] - ort_ms:+.3f} ms  {node['op']:16s} {shapes:40s} "
              f"ORT {ort_ms:.3f}  fusectl {node['ms']:.3f}")


if __name__ == "__main__":
    main()
