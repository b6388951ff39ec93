#!/usr/bin/python3
"""Sanity-check the exported testdata/models/*.onnx without onnxruntime.

A tiny ONNX interpreter (only the ops these models use, implemented with torch
functions) runs every model and compares it with the PyTorch module from
export_models.py on the same random input, including a second batch/seq size
to exercise the dynamic axes.

    /usr/bin/python3 testdata/gen/check_models.py
"""
import os
import sys

import numpy as np
import onnx
import onnx.numpy_helper as nh
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import export_models as em  # noqa: E402


def attrs(node):
    return {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}


def pads2d(p):  # ONNX [t, l, b, r] -> symmetric (h, w); models only use symmetric pads
    assert p[0] == p[2] and p[1] == p[3], p
    return (p[0], p[1])


def run(model, feeds):
    env = {i.name: torch.from_numpy(nh.to_array(i).copy()) for i in model.graph.initializer}
    env.update(feeds)
    for n in model.graph.node:
        a = attrs(n)
        x = [env[i] if i else None for i in n.input]
        op = n.op_type
        if op == "Constant":
            y = torch.from_numpy(nh.to_array(a["value"]).copy())
        elif op == "Conv":
            y = F.conv2d(x[0], x[1], x[2] if len(x) > 2 else None, a.get("strides", [1, 1]),
                         pads2d(a.get("pads", [0] * 4)), a.get("dilations", [1, 1]), a.get("group", 1))
        elif op == "BatchNormalization":
            y = F.batch_norm(x[0], x[3], x[4], x[1], x[2], False, 0.0, a.get("epsilon", 1e-5))
        elif op == "Relu":
            y = torch.relu(x[0])
        elif op == "Clip":
            y = torch.clamp(x[0], x[1].item(), x[2].item())
        elif op == "MaxPool":
            y = F.max_pool2d(x[0], a["kernel_shape"], a.get("strides", [1, 1]), pads2d(a.get("pads", [0] * 4)))
        elif op == "GlobalAveragePool":
            y = x[0].mean(dim=(2, 3), keepdim=True)
        elif op == "Flatten":
            y = x[0].flatten(a.get("axis", 1))
        elif op == "Gemm":
            A = x[0].T if a.get("transA", 0) else x[0]
            B = x[1].T if a.get("transB", 0) else x[1]
            y = a.get("alpha", 1.0) * (A @ B) + a.get("beta", 1.0) * x[2]
        elif op in ("Add", "Sub", "Mul", "Div", "Pow", "Greater"):
            f = {"Add": torch.add, "Sub": torch.sub, "Mul": torch.mul, "Pow": torch.pow,
                 "Greater": torch.gt}.get(op)
            if op == "Div":
                f = (lambda p, q: torch.div(p, q, rounding_mode="trunc")) \
                    if not x[0].is_floating_point() else torch.div
            y = f(x[0], x[1])
        elif op == "MatMul":
            y = torch.matmul(x[0], x[1])
        elif op in ("Sqrt", "Erf", "Neg", "Sigmoid"):
            y = {"Sqrt": torch.sqrt, "Erf": torch.erf, "Neg": torch.neg, "Sigmoid": torch.sigmoid}[op](x[0])
        elif op == "ReduceMean":
            y = x[0].mean(dim=tuple(a["axes"]), keepdim=bool(a.get("keepdims", 1)))
        elif op == "Softmax":
            y = torch.softmax(x[0], dim=a.get("axis", -1))
        elif op == "Shape":
            y = torch.tensor(list(x[0].shape), dtype=torch.int64)
        elif op == "Gather":
            y = torch.index_select(x[0], a.get("axis", 0), x[1].reshape(-1)).reshape(
                x[0].shape[:a.get("axis", 0)] + x[1].shape + x[0].shape[a.get("axis", 0) + 1:])
        elif op == "Unsqueeze":
            y = x[0]
            for ax in sorted(int(v) for v in x[1].reshape(-1)):
                y = y.unsqueeze(ax)
        elif op == "Concat":
            y = torch.cat(x, dim=a["axis"])
        elif op == "Reshape":
            y = x[0].reshape([int(v) for v in x[1]])
        elif op == "Transpose":
            y = x[0].permute(a["perm"])
        elif op == "Cast":
            y = x[0].to({1: torch.float32, 6: torch.int32, 7: torch.int64, 9: torch.bool}[a["to"]])
        elif op == "Range":
            y = torch.arange(x[0].item(), x[1].item(), x[2].item(), dtype=x[0].dtype)
        elif op == "Where":
            y = torch.where(x[0], x[1], x[2])
        elif op == "Slice":
            y = x[0]
            axes = x[3] if len(x) > 3 else range(len(x[1]))
            steps = x[4] if len(x) > 4 else [1] * len(x[1])
            for s, e, ax, st in zip(x[1], x[2], axes, steps):
                ax, dim = int(ax), y.shape[int(ax)]
                s, e = max(min(int(s), dim), -dim), max(min(int(e), dim), -dim)
                assert int(st) == 1
                y = y.narrow(ax, s % dim if s < 0 else s, (e % dim if e < 0 else e) - (s % dim if s < 0 else s))
        else:
            raise NotImplementedError(op)
        env[n.output[0]] = y
    return [env[o.name] for o in model.graph.output]


def main():
    torch.manual_seed(100)
    feeds = {
        "resnet_mini": lambda b, s: [torch.randn(b, 3, 32, 32)],
        "mobilenet_mini": lambda b, s: [torch.randn(b, 3, 32, 32)],
        "bert_layer": lambda b, s: [torch.randn(b, s, 64),
                                    torch.where(torch.rand(b, 1, 1, s) < 0.2, -10000.0, 0.0)],
        "llama_layer": lambda b, s: [torch.randn(b, s, 64), *em.rope_tables(s, 16)],
    }
    worst = 0.0
    for name, module, _, _ in em.make_models():
        model = onnx.load(os.path.join(em.OUT_DIR, name + ".onnx"))
        names = [i.name for i in model.graph.input]
        for b, s in [(1, 8), (3, 5)]:
            args = feeds[name](b, s)
            with torch.no_grad():
                ref = module(*args)
            got = run(model, dict(zip(names, args)))[0]
            err = (got - ref).abs().max().item()
            worst = max(worst, err)
            print("%-15s batch=%d seq=%d  max|onnx - torch| = %.3g" % (name, b, s, err))
            if not err < 1e-4:
                sys.exit("check_models.py: MISMATCH in " + name)
    print("all models match (worst %.3g)" % worst)


if __name__ == "__main__":
    main()
