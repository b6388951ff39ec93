#!/usr/bin/python3
"""Single-op ONNX models for ONNX Runtime's side of bench/run_kernel_bench.sh.

    /usr/bin/python3 bench/make_kernel_models.py OUT_DIR [--elements N] [--skinny-k K] [--skinny-n N]

Writes OUT_DIR/<case>.onnx and OUT_DIR/cases.json, one entry per model: the case name fusectl's
benchmark uses for the same work (bench_gemm, bench_bandwidth, bench_executor_overhead), the
group it belongs to, and what one run moves or computes (bytes of every input and output,
or FLOPs), so that run_kernel_bench.sh turns ORT's median time into the same unit.

Shapes mirror fusectl's benchmarks: GEMM 1024x1024x1024 and skinny M = 1..16 against a
K x N weight; ResNet-50's convolution shapes; memory-bound kernels on 2^24 floats shaped as bench_bandwidth shapes them
(per-channel cases with 64 channels, last-axis cases with rows of 1024); a chain of 10,000
Relu nodes on 16 floats for the executor's fixed cost per node. Weights (GEMM B, norm and
BN parameters, small broadcast operands) are initializers, as in a real model, so ORT may
prepack them; the large operands are graph inputs that the timing script fills with seeded
data. Every model ends in a Slice to one element (see make()), so ORT's figure is the
kernel's and not that of copying a 64 MB result into JavaScript.
"""

import argparse
import json
import os

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

SEED = 13
# (C, H, M, k, stride): the convolution shapes bench_gemm times, ResNet-50's distinct layers.
RESNET50_CONVS = [(3, 224, 64, 7, 2), (64, 56, 64, 1, 1), (64, 56, 64, 3, 1), (64, 56, 256, 1, 1),
                  (256, 56, 64, 1, 1), (256, 56, 128, 1, 1), (128, 56, 128, 3, 2),
                  (128, 28, 512, 1, 1), (512, 28, 128, 1, 1), (128, 28, 128, 3, 1),
                  (256, 28, 256, 3, 2), (256, 14, 1024, 1, 1), (1024, 14, 256, 1, 1),
                  (256, 14, 256, 3, 1), (512, 14, 512, 3, 2), (512, 7, 2048, 1, 1),
                  (2048, 7, 512, 1, 1), (512, 7, 512, 3, 1)]


def make(path, nodes, inputs, output, initializers=(), opset=17):
    """Saves nodes as a model whose one output is the first element of `output`.

    The Slice keeps the kernel's full result in ONNX Runtime's arena and hands JavaScript one
    float: onnxruntime-node copies every result into a fresh JavaScript array (a
    preallocated output is filled and then copied too), and a fresh 64 MB array costs page
    faults that would swamp the kernel being timed.
    """
    name, shape = output
    rank = len(shape)
    slice_args = [("first_starts", np.zeros(rank, np.int64)), ("first_ends", np.ones(rank, np.int64))]
    nodes = nodes + [helper.make_node("Slice", [name, "first_starts", "first_ends"], ["first"])]
    graph = helper.make_graph(nodes, os.path.basename(path)[:-5],
                              [helper.make_tensor_value_info(n, TensorProto.FLOAT, s)
                               for n, s in inputs],
                              [helper.make_tensor_value_info("first", TensorProto.FLOAT, [1] * rank)],
                              [numpy_helper.from_array(a, n)
                               for n, a in list(initializers) + slice_args])
    opset = max(opset, 13)  # Slice with starts/ends as inputs
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    # Debian's onnx 1.12 knows opsets up to 17; Gelu (opset 20) is left to ONNX Runtime to
    # validate when it loads the model.
    if opset <= onnx.defs.onnx_opset_version():
        onnx.checker.check_model(model)
    onnx.save(model, path)


def cases(n, skinny_k, skinny_n):
    rng = np.random.default_rng(SEED)
    f32 = lambda *shape, lo=-1.0, hi=1.0: rng.uniform(lo, hi, shape).astype(np.float32)
    out = []

    def add(name, group, nodes, inputs, output, inits=(), opset=17, work=None):
        out.append(dict(name=name, group=group, nodes=nodes, inputs=inputs, output=output,
                        inits=inits, opset=opset, work=work))

    # GEMM: A is the input, B a constant weight (prepacked by both runtimes when they can).
    for m, k, nn, name in [(1024, 1024, 1024, "gemm_1024")] + [
            (m, skinny_k, skinny_n, f"gemm_skinny_m{m}") for m in (1, 2, 4, 8, 16)]:
        add(name, "gemm", [helper.make_node("MatMul", ["A", "B"], ["Y"])],
            [("A", [m, k])], ("Y", [m, nn]), [("B", f32(k, nn))],
            work=dict(flops=2 * m * k * nn, weight_bytes=4 * k * nn, m=m, k=k, n=nn))

    # ResNet-50's convolutions as bench_gemm times them: square input, pad k/2, with bias.
    for cin, h, cout, k, stride in RESNET50_CONVS:
        pad, oh = k // 2, (h + 2 * (k // 2) - k) // stride + 1
        add(f"conv_c{cin}_h{h}_m{cout}_k{k}_s{stride}", "conv",
            [helper.make_node("Conv", ["X", "W", "bias"], ["Y"], kernel_shape=[k, k],
                              strides=[stride, stride], pads=[pad] * 4)],
            [("X", [1, cin, h, h])], ("Y", [1, cout, oh, oh]),
            [("W", f32(cout, cin, k, k)), ("bias", f32(cout))],
            work=dict(flops=2 * cout * oh * oh * cin * k * k, x=[1, cin, h, h],
                      w=[cout, cin, k, k], stride=stride))

    # Memory-bound kernels, named as bench_bandwidth names them.
    def bw(name, op, shapes, out_shape, consts=(), attrs=None, opset=17, consts_first=False):
        ins = [(f"in{i}", s) for i, s in enumerate(shapes)]
        names = [n for n, _ in ins] + [c for c, _ in consts]
        if consts_first:
            names = [c for c, _ in consts] + [n for n, _ in ins]
        node = helper.make_node(op, names, ["out"], **(attrs or {}))
        elems = lambda s: int(np.prod(s)) if s else 1
        nbytes = 4 * (sum(elems(s) for s in shapes) + sum(a.size for _, a in consts)
                      + elems(out_shape))
        add(name, "bandwidth", [node], ins, ("out", out_shape), consts, opset,
            work=dict(bytes=nbytes))

    for op in ("Relu", "Sigmoid", "Tanh", "Exp", "Erf", "LeakyRelu"):
        bw(op, op, [[n]], [n])
    bw("Gelu", "Gelu", [[n]], [n], opset=20)
    hidden, rows, c = 1024, n // 1024, 64
    hw = n // c
    nchw = [1, c, hw // 256, 256]
    bw("Add_same", "Add", [[n], [n]], [n])
    bw("Mul_same", "Mul", [[n], [n]], [n])
    bw("Add_scalar", "Add", [[n]], [n], [("s", f32())])
    bw("Mul_scalar_first", "Mul", [[n]], [n], [("s", f32())], consts_first=True)
    bw("Add_per_channel_NCHW", "Add", [nchw], nchw, [("bias", f32(c, 1, 1))])
    bw("Add_last_axis", "Add", [[1, rows, hidden]], [1, rows, hidden], [("bias", f32(hidden))])
    bw("Div_last_axis", "Div", [[1, rows, hidden]], [1, rows, hidden],
       [("d", f32(hidden, lo=1.0, hi=2.0))])
    bw("BatchNormalization", "BatchNormalization", [nchw], nchw,
       [("scale", f32(c)), ("B", f32(c)), ("mean", f32(c)), ("var", f32(c, lo=0.5, hi=2.0))],
       opset=15)
    bw("Softmax_last_axis", "Softmax", [[rows, hidden]], [rows, hidden], opset=13)
    bw("LogSoftmax_last_axis", "LogSoftmax", [[rows, hidden]], [rows, hidden], opset=13)
    bw("LayerNormalization", "LayerNormalization", [[rows, hidden]], [rows, hidden],
       [("gamma", f32(hidden)), ("beta", f32(hidden))])
    pool_h = n // c // 512
    pooled = lambda size, k, s, p: (size + 2 * p - k) // s + 1
    for name, op, k, s, p, opset in [("MaxPool_3x3_s2_p1", "MaxPool", 3, 2, 1, 12),
                                     ("MaxPool_2x2_s2", "MaxPool", 2, 2, 0, 12),
                                     ("AveragePool_3x3_s1_p1", "AveragePool", 3, 1, 1, 11)]:
        attrs = dict(kernel_shape=[k, k], strides=[s, s])
        if p:
            attrs["pads"] = [p] * 4
        bw(name, op, [[1, c, pool_h, 512]], [1, c, pooled(pool_h, k, s, p), pooled(512, k, s, p)],
           attrs=attrs, opset=opset)
    gshape = [1, 256, n // 256 // 64, 64]
    bw("GlobalAveragePool", "GlobalAveragePool", [gshape], [1, 256, 1, 1], opset=1)
    bw("GlobalMaxPool", "GlobalMaxPool", [gshape], [1, 256, 1, 1], opset=1)

    # Executor overhead: bench_executor_overhead's chain (10,000 Relu on 16 floats).
    chain, elems = 10000, 16
    nodes = [helper.make_node("Relu", ["x" if i == 0 else f"t{i - 1}"],
                              ["y" if i == chain - 1 else f"t{i}"], name=f"relu_{i}")
             for i in range(chain)]
    add("executor_overhead", "overhead", nodes, [("x", [elems])], ("y", [elems]),
        work=dict(nodes=chain, elements=elems))
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out_dir")
    ap.add_argument("--elements", type=int, default=1 << 24)
    ap.add_argument("--skinny-k", type=int, default=4096)
    ap.add_argument("--skinny-n", type=int, default=4096)
    opts = ap.parse_args()
    n = opts.elements // (1 << 16) * (1 << 16)  # whole rows and planes, as bench_bandwidth does
    os.makedirs(opts.out_dir, exist_ok=True)
    manifest = []
    for c in cases(n, opts.skinny_k, opts.skinny_n):
        path = os.path.join(opts.out_dir, c["name"] + ".onnx")
        make(path, c["nodes"], c["inputs"], c["output"], c["inits"], c["opset"])
        manifest.append(dict(name=c["name"], group=c["group"], model=path, **c["work"]))
    with open(os.path.join(opts.out_dir, "cases.json"), "w") as f:
        json.dump(manifest, f, indent=1)
    print(f"make_kernel_models: {len(manifest)} models in {opts.out_dir}")


if __name__ == "__main__":
    main()
