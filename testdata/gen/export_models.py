#!/usr/bin/python3
"""Export the fusectl test models (testdata/models/*.onnx).

Run from the repository root with the Debian python (needs python3-torch,
python3-onnx, python3-numpy):

    /usr/bin/python3 testdata/gen/export_models.py

Everything is deterministic (fixed seeds, fixed shapes); weights are random
but small so the committed .onnx files stay tiny.
"""
import collections
import math
import os
import sys

import numpy as np
import onnx
import onnx.numpy_helper
import torch
import torch.nn as nn
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
OUT_DIR = os.path.normpath(os.path.join(HERE, "..", "models"))
OPSET = 13


# --------------------------------------------------------------------------
# helpers
# --------------------------------------------------------------------------
def randomize_bn(module, gen):
    """Give every BatchNorm non-trivial stats and affine params."""
    for m in module.modules():
        if isinstance(m, nn.BatchNorm2d):
            c = m.num_features
            with torch.no_grad():
                m.running_mean.copy_(torch.randn(c, generator=gen) * 0.5)
                m.running_var.copy_(torch.rand(c, generator=gen) * 1.5 + 0.5)
                m.weight.copy_(torch.rand(c, generator=gen) * 1.0 + 0.5)
                m.bias.copy_(torch.randn(c, generator=gen) * 0.2)


def export(model, args, name, input_names, output_names, dynamic_axes,
           opset=OPSET, preserve=False):
    """Export one module to OUT_DIR/<name>.onnx, check it, print a histogram."""
    model.eval()
    path = os.path.join(OUT_DIR, name + ".onnx")
    with torch.no_grad():
        ref = model(*args)  # run once through torch
    kwargs = {}
    if preserve:
        # Keep BatchNormalization unfolded (the eval peephole Conv+BN fusion
        # only runs for TrainingMode.EVAL).
        kwargs["training"] = torch.onnx.TrainingMode.PRESERVE
    torch.onnx.export(model, args, path,
                      input_names=input_names, output_names=output_names,
                      dynamic_axes=dynamic_axes, opset_version=opset,
                      do_constant_folding=True, **kwargs)
    m = onnx.load(path)
    onnx.checker.check_model(m, full_check=True)
    hist = collections.Counter(n.op_type for n in m.graph.node)
    size = os.path.getsize(path)
    print("== %s: %d nodes, %d initializers, %d bytes, output %s %s" %
          (name, len(m.graph.node), len(m.graph.initializer), size,
           tuple(ref.shape), "finite" if torch.isfinite(ref).all() else "NONFINITE"))
    print("   ops: " + ", ".join("%s=%d" % kv for kv in sorted(hist.items())))
    return m, hist


def require(cond, msg):
    if not cond:
        sys.exit("export_models.py: check failed: " + msg)


# --------------------------------------------------------------------------
# 1. resnet_mini
# --------------------------------------------------------------------------
class BasicBlock(nn.Module):
    def __init__(self, cin, cout, stride=1, eps=1e-5):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout, eps=eps)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.relu = nn.ReLU()
        self.downsample = None
        if stride != 1 or cin != cout:
            self.downsample = nn.Sequential(
                nn.Conv2d(cin, cout, 1, stride, bias=False),
                nn.BatchNorm2d(cout, eps=1e-3))

    def forward(self, x):
        idt = x if self.downsample is None else self.downsample(x)
        y = self.relu(self.bn1(self.conv1(x)))
        y = self.bn2(self.conv2(y))
        return self.relu(y + idt)


class ResNetMini(nn.Module):
    def __init__(self, num_classes=10):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 16, 3, 1, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(16, eps=1e-3)   # non-default eps
        self.relu = nn.ReLU()
        self.maxpool = nn.MaxPool2d(3, 2, 1)
        self.layer1 = BasicBlock(16, 16)
        self.layer2 = BasicBlock(16, 32, stride=2, eps=1e-3)
        self.layer3 = BasicBlock(32, 32)
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(32, num_classes)

    def forward(self, x):
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        x = self.layer3(self.layer2(self.layer1(x)))
        x = torch.flatten(self.avgpool(x), 1)
        return self.fc(x)


# --------------------------------------------------------------------------
# 2. mobilenet_mini
# --------------------------------------------------------------------------
def conv_bn_relu6(cin, cout, k, stride, groups=1):
    return nn.Sequential(
        nn.Conv2d(cin, cout, k, stride, k // 2, groups=groups, bias=False),
        nn.BatchNorm2d(cout), nn.ReLU6())


class InvertedResidual(nn.Module):
    def __init__(self, cin, cout, stride, expand):
        super().__init__()
        hid = cin * expand
        self.use_res = stride == 1 and cin == cout
        layers = []
        if expand != 1:
            layers.append(conv_bn_relu6(cin, hid, 1, 1))           # pointwise expand
        layers.append(conv_bn_relu6(hid, hid, 3, stride, groups=hid))  # depthwise
        layers += [nn.Conv2d(hid, cout, 1, 1, 0, bias=False),      # pointwise project
                   nn.BatchNorm2d(cout)]
        self.conv = nn.Sequential(*layers)

    def forward(self, x):
        y = self.conv(x)
        return x + y if self.use_res else y


class MobileNetMini(nn.Module):
    def __init__(self, num_classes=10):
        super().__init__()
        self.features = nn.Sequential(
            conv_bn_relu6(3, 16, 3, 2),
            InvertedResidual(16, 16, 1, 1),
            InvertedResidual(16, 24, 2, 4),
            InvertedResidual(24, 24, 1, 4),
            InvertedResidual(24, 32, 2, 4),
            InvertedResidual(32, 32, 1, 4),
            conv_bn_relu6(32, 64, 1, 1))
        self.classifier = nn.Linear(64, num_classes)

    def forward(self, x):
        x = self.features(x)
        x = F.adaptive_avg_pool2d(x, 1).flatten(1)
        return self.classifier(x)


# --------------------------------------------------------------------------
# 3. bert_layer
# --------------------------------------------------------------------------
class BertLayer(nn.Module):
    def __init__(self, hidden=64, heads=4, ffn=256):
        super().__init__()
        self.h, self.d = heads, hidden // heads
        self.q = nn.Linear(hidden, hidden)
        self.k = nn.Linear(hidden, hidden)
        self.v = nn.Linear(hidden, hidden)
        self.o = nn.Linear(hidden, hidden)
        self.ln1 = nn.LayerNorm(hidden, eps=1e-12)
        self.fc1 = nn.Linear(hidden, ffn)
        self.act = nn.GELU()  # exact (erf)
        self.fc2 = nn.Linear(ffn, hidden)
        self.ln2 = nn.LayerNorm(hidden, eps=1e-12)

    def heads(self, t, b, s):
        return t.view(b, s, self.h, self.d).transpose(1, 2)

    def forward(self, hidden, attention_mask):
        b, s, e = hidden.shape
        q = self.heads(self.q(hidden), b, s)
        k = self.heads(self.k(hidden), b, s)
        v = self.heads(self.v(hidden), b, s)
        scores = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(self.d)
        scores = scores + attention_mask
        probs = torch.softmax(scores, dim=-1)
        ctx = torch.matmul(probs, v).transpose(1, 2).reshape(b, s, e)
        x = self.ln1(self.o(ctx) + hidden)
        y = self.fc2(self.act(self.fc1(x)))
        return self.ln2(y + x)


# --------------------------------------------------------------------------
# 4. llama_layer
# --------------------------------------------------------------------------
class RMSNorm(nn.Module):
    def __init__(self, dim, eps=1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        var = x.pow(2).mean(-1, keepdim=True)
        x = x * torch.rsqrt(var + self.eps)
        return self.weight * x


def rotate_half(x):
    half = x.shape[-1] // 2
    x1 = x[..., :half]
    x2 = x[..., half:]
    return torch.cat((-x2, x1), dim=-1)


class LlamaLayer(nn.Module):
    def __init__(self, hidden=64, heads=4, inter=172):
        super().__init__()
        self.h, self.d = heads, hidden // heads
        self.input_layernorm = RMSNorm(hidden)
        self.q_proj = nn.Linear(hidden, hidden, bias=False)
        self.k_proj = nn.Linear(hidden, hidden, bias=False)
        self.v_proj = nn.Linear(hidden, hidden, bias=False)
        self.o_proj = nn.Linear(hidden, hidden, bias=False)
        self.post_attention_layernorm = RMSNorm(hidden)
        self.gate_proj = nn.Linear(hidden, inter, bias=False)
        self.up_proj = nn.Linear(hidden, inter, bias=False)
        self.down_proj = nn.Linear(inter, hidden, bias=False)

    def forward(self, hidden, cos, sin):
        b, s, e = hidden.shape
        x = self.input_layernorm(hidden)
        q = self.q_proj(x).view(b, s, self.h, self.d).transpose(1, 2)
        k = self.k_proj(x).view(b, s, self.h, self.d).transpose(1, 2)
        v = self.v_proj(x).view(b, s, self.h, self.d).transpose(1, 2)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        scores = torch.matmul(q, k.transpose(2, 3)) / math.sqrt(self.d)
        idx = torch.arange(s)
        causal = idx.unsqueeze(0) > idx.unsqueeze(1)          # [s, s], True above diag
        scores = scores.masked_fill(causal, torch.finfo(torch.float32).min)
        probs = torch.softmax(scores, dim=-1)
        attn = torch.matmul(probs, v).transpose(1, 2).reshape(b, s, e)
        hidden = hidden + self.o_proj(attn)
        x = self.post_attention_layernorm(hidden)
        x = self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))
        return hidden + x


def rope_tables(seq, dim, base=10000.0):
    inv = 1.0 / (base ** (torch.arange(0, dim, 2).float() / dim))
    freqs = torch.outer(torch.arange(seq).float(), inv)
    emb = torch.cat((freqs, freqs), dim=-1)
    return emb.cos(), emb.sin()


# --------------------------------------------------------------------------
def make_models():
    """Build the four modules deterministically.

    Returns a list of (name, module, example_args, export_kwargs); also used by
    check_models.py to get the reference PyTorch modules.
    """
    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(1234)
    models = []

    # 1. resnet_mini
    model = ResNetMini()
    randomize_bn(model, gen)
    x = torch.randn(1, 3, 32, 32, generator=gen)
    models.append(("resnet_mini", model, (x,), dict(
        input_names=["input"], output_names=["output"],
        dynamic_axes={"input": {0: "batch"}, "output": {0: "batch"}}, preserve=True)))

    # 2. mobilenet_mini
    torch.manual_seed(1)
    model = MobileNetMini()
    randomize_bn(model, gen)
    x = torch.randn(1, 3, 32, 32, generator=gen)
    models.append(("mobilenet_mini", model, (x,), dict(
        input_names=["input"], output_names=["output"],
        dynamic_axes={"input": {0: "batch"}, "output": {0: "batch"}}, preserve=True)))

    # 3. bert_layer
    torch.manual_seed(2)
    model = BertLayer()
    with torch.no_grad():  # non-trivial LayerNorm affine params
        for ln in (model.ln1, model.ln2):
            ln.weight.copy_(torch.rand(64, generator=gen) + 0.5)
            ln.bias.copy_(torch.randn(64, generator=gen) * 0.1)
    hidden = torch.randn(2, 8, 64, generator=gen)
    mask = torch.zeros(2, 1, 1, 8)
    mask[1, :, :, 6:] = -10000.0
    models.append(("bert_layer", model, (hidden, mask), dict(
        input_names=["hidden", "attention_mask"], output_names=["output"],
        dynamic_axes={"hidden": {0: "batch", 1: "seq"},
                      "attention_mask": {0: "batch", 3: "seq"},
                      "output": {0: "batch", 1: "seq"}})))

    # 4. llama_layer
    torch.manual_seed(3)
    model = LlamaLayer()
    with torch.no_grad():
        for n in (model.input_layernorm, model.post_attention_layernorm):
            n.weight.copy_(torch.rand(64, generator=gen) + 0.5)
    seq = 8
    hidden = torch.randn(2, seq, 64, generator=gen)
    cos, sin = rope_tables(seq, 16)
    models.append(("llama_layer", model, (hidden, cos, sin), dict(
        input_names=["hidden", "cos", "sin"], output_names=["output"],
        dynamic_axes={"hidden": {0: "batch", 1: "seq"}, "cos": {0: "seq"},
                      "sin": {0: "seq"}, "output": {0: "batch", 1: "seq"}},
        opset=14)))
    for _, m, _, _ in models:
        m.eval()
    return models


def verify(name, m, hist):
    if name in ("resnet_mini", "mobilenet_mini"):
        bns = [n for n in m.graph.node if n.op_type == "BatchNormalization"]
        require(all(len(n.output) == 1 for n in bns), name + ": BN with >1 output")
        require(len(bns) == hist["Conv"], name + ": every Conv should have a BN")
    if name == "resnet_mini":
        require(len(bns) == 8, "resnet_mini: expected 8 BatchNormalization, got %d" % len(bns))
        eps = [a.f for n in bns for a in n.attribute if a.name == "epsilon"]
        require(any(abs(e - 1e-3) < 1e-9 for e in eps), "resnet_mini: no eps=1e-3 BN")
        require(hist["Add"] == 3, "resnet_mini: expected 3 residual Add")
    elif name == "mobilenet_mini":
        require(hist["Clip"] == 11 and hist["Add"] == 3, "mobilenet_mini: Clip/Add count")
        dw = [n for n in m.graph.node if n.op_type == "Conv" and
              any(a.name == "group" and a.i > 1 for a in n.attribute)]
        require(len(dw) == 5, "mobilenet_mini: expected 5 depthwise convs, got %d" % len(dw))
    elif name == "bert_layer":
        for op in ("ReduceMean", "Sub", "Pow", "Sqrt", "Div", "Erf", "Softmax", "MatMul"):
            require(hist[op] > 0, "bert_layer: missing " + op)
        require(hist["ReduceMean"] == 4 and hist["Erf"] == 1, "bert_layer: LN/GELU not decomposed")
        require("LayerNormalization" not in hist, "bert_layer: LayerNormalization present")
    elif name == "llama_layer":
        for op in ("Pow", "ReduceMean", "Sqrt", "Neg", "Slice", "Concat", "Sigmoid",
                   "Softmax", "Where", "Range"):
            require(hist[op] > 0, "llama_layer: missing " + op)
    # every initializer must equal the module parameter/buffer of the same name
    # (guards against constant folding mutating BN/LN parameters)
    return m


def main():
    os.makedirs(OUT_DIR, exist_ok=True)
    for name, model, args, kw in make_models():
        m, hist = export(model, args, name, **kw)
        verify(name, m, hist)
        state = model.state_dict()
        checked = 0
        for init in m.graph.initializer:
            if init.name in state:
                require(np.array_equal(onnx.numpy_helper.to_array(init),
                                       state[init.name].numpy()),
                        "%s: initializer %s differs from module" % (name, init.name))
                checked += 1
        print("   %d initializers identical to module state_dict" % checked)

    total = sum(os.path.getsize(os.path.join(OUT_DIR, f))
                for f in os.listdir(OUT_DIR) if f.endswith(".onnx"))
    print("total .onnx bytes: %d" % total)


if __name__ == "__main__":
    main()
