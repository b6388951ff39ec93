#!/usr/bin/python3
"""Exports the issue-13 benchmark models and their inputs for bench/run_profile_bench.sh.

    /usr/bin/python3 bench/export_profile_models.py [OUT_DIR] [--only NAME,...] [--opset17] [--force]

OUT_DIR defaults to $FUSECTL_BENCH_MODELS or /work/bench-models (keep it out of git: the
models are 14-420 MB). For each model it writes OUT_DIR/NAME.onnx and OUT_DIR/inputs/NAME/
<input name>.npy (seeded, so every runtime in the bench sees the same bytes), then checks
the export three ways: onnx.checker, the node counts it must have (one BatchNormalization
node per BatchNorm module of the CNN: none folded), and one run in ONNX Runtime (npm, through tests/ort_reference.js) compared
with torch's own output.

Models: torchvision ResNet-50, MobileNetV2 and EfficientNet-B0 (opset 13, batch 1,
3x224x224, random weights) and a BERT-base-sized encoder written here in plain torch
(12 layers, hidden 768, 12 heads, FFN 3072, exact-erf GELU, sequence 128). --opset17 adds
bert_base_op17, the same encoder with LayerNormalization as one op. `--only llama_8l` exports
issue 12's LLaMA-sized decoder (8 layers, hidden 2048, sequence 128, 1.6 GB), `--only
llama_gqa_8l` the same with grouped-query attention (4 k/v heads for 16 q heads, 1.4 GB);
`--only bert_base_l24,bert_base_l48` the BERT-base encoder 24 and 48 layers deep, for the
optimizer's depth scaling (bench/run_optimize_bench.sh with model files). It also writes
tiny_relu.onnx (one Relu on 16 floats), the baseline run_profile_bench.sh subtracts from
each runtime's peak RSS.

Why the exports look the way they do:
- BatchNormalization is kept on purpose: folding it into Conv is one of the fusions
  fusectl's optimizer is measured on. In eval mode torch.onnx.export folds BN into the
  preceding Conv (its eval peephole pass); TrainingMode.PRESERVE with the model in eval
  mode skips that pass while still exporting inference-mode BN.
- Random weights would leave every BN at mean 0 / var 1, so folding would be nearly an
  identity and activations would drift in scale through 50 layers. The running statistics
  are therefore calibrated on a few seeded random batches, which keeps the outputs finite
  and the folded weights non-trivial.
- Needs Debian's python3-torch 1.13 / torchvision 0.14 (bench/install-bench-deps.sh), hence
  /usr/bin/python3 rather than whatever python3 is first on PATH.
"""

import argparse
import os
import subprocess
import sys
import tempfile
import warnings

import numpy as np
import onnx
import torch
import torch.nn as nn
import torchvision

SEED = 13
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT_OUT = os.environ.get("FUSECTL_BENCH_MODELS", "/work/bench-models")
# Where `make test` (scripts/install-ort.sh) puts onnxruntime-node.
ORT_DIR = os.environ.get("FUSECTL_ORT_DIR", os.path.join(REPO, "build", "ort"))


# ---- BERT-base-sized encoder (no HF dependency) ----
# The layer is testdata's bert_layer (testdata/gen/export_models.py), at BERT-base sizes.
sys.path.insert(0, os.path.join(REPO, "testdata", "gen"))
from export_models import BertLayer, LlamaLayer, rope_tables  # noqa: E402
from export_transformer_models import LlamaGQABlock  # noqa: E402

class BertEncoder(nn.Module):
    def __init__(self, vocab=30522, max_pos=512, hidden=768, heads=12, ffn=3072, layers=12):
        super().__init__()
        self.word = nn.Embedding(vocab, hidden)
        self.position = nn.Embedding(max_pos, hidden)
        self.token_type = nn.Embedding(2, hidden)
        self.embed_norm = nn.LayerNorm(hidden, eps=1e-12)
        self.layers = nn.ModuleList(BertLayer(hidden, heads, ffn) for _ in range(layers))

    def forward(self, input_ids, attention_mask):
        seq = input_ids.shape[1]
        positions = torch.arange(seq, dtype=torch.int64).unsqueeze(0)
        x = self.word(input_ids) + self.position(positions) + self.token_type(
            torch.zeros_like(input_ids))
        x = self.embed_norm(x)
        # [1, 1, 1, seq]: 0 where attended, -10000 where masked (BERT's additive mask).
        mask_bias = (1.0 - attention_mask[:, None, None, :].to(torch.float32)) * -10000.0
        for layer in self.layers:
            x = layer(x, mask_bias)
        return x


# ---- model table ----

def calibrate_batchnorm(model, shape, batches=2, batch=8):
    """Sets BN running statistics from seeded random batches (see the module docstring)."""
    g = torch.Generator().manual_seed(SEED + 1)
    for m in model.modules():
        if isinstance(m, nn.modules.batchnorm._BatchNorm):
            m.reset_running_stats()
            m.momentum = None  # cumulative average over the calibration batches
    model.train()
    with torch.no_grad():
        for _ in range(batches):
            model(torch.randn((batch,) + shape[1:], generator=g))
    model.eval()


def vision(ctor):
    def build():
        torch.manual_seed(SEED)
        model = ctor(weights=None)
        calibrate_batchnorm(model, (1, 3, 224, 224))
        rng = np.random.default_rng(SEED)
        image = rng.standard_normal((1, 3, 224, 224), dtype=np.float32)
        return model, {"input": image}, ["output"]
    # The BatchNormalization count is raised to the module's own count at export time.
    return build, {"BatchNormalization": 1, "Conv": 1}


def bert(opset, layers=12):
    def build():
        torch.manual_seed(SEED)
        model = BertEncoder(layers=layers).eval()
        rng = np.random.default_rng(SEED)
        ids = rng.integers(0, 30522, size=(1, 128), dtype=np.int64)
        mask = np.ones((1, 128), dtype=np.int64)
        return model, {"input_ids": ids, "attention_mask": mask}, ["last_hidden_state"]
    required = {"MatMul": layers * 6, "Softmax": layers, "Erf": layers}
    if opset >= 17:
        required["LayerNormalization"] = 2 * layers + 1
    return build, required


class LlamaGQALayer(LlamaGQABlock):
    """LLaMA 3 / Mistral's attention: testdata's llama_gqa_block (grouped-query, HF's repeat_kv
    through Expand + Reshape, rotate_half RoPE) without its QK-norm."""

    def __init__(self, hidden, heads, kv_heads, inter):
        super().__init__(hidden, heads, kv_heads, inter)
        self.q_norm = self.k_norm = nn.Identity()


class LlamaDecoder(nn.Module):
    """Issue 12's LLaMA-sized benchmark: testdata's llama_layer stacked at LLaMA sizes (hidden
    2048, 16 heads, SwiGLU 5504, RMSNorm, rotate_half RoPE), fed hidden states and the RoPE
    tables, so that no embedding table inflates the file. With `kv_heads`, LlamaGQALayer."""

    def __init__(self, hidden=2048, heads=16, inter=5504, layers=8, kv_heads=None):
        super().__init__()
        self.layers = nn.ModuleList(
            LlamaLayer(hidden, heads, inter) if kv_heads is None
            else LlamaGQALayer(hidden, heads, kv_heads, inter) for _ in range(layers))

    def forward(self, hidden, cos, sin):
        for layer in self.layers:
            hidden = layer(hidden, cos, sin)
        return hidden


def llama(seq=128, hidden=2048, heads=16, kv_heads=None):
    """llama_8l; with kv_heads, llama_gqa_8l (4 k/v heads for 16 q heads), for the
    merge-narrow-projections rule (docs/catalog.md)."""
    def build():
        torch.manual_seed(SEED)
        model = LlamaDecoder(hidden, heads, kv_heads=kv_heads).eval()
        # Random Linear weights at this width grow activations layer by layer; scale them
        # down so that eight layers stay in a float range where comparisons mean something.
        with torch.no_grad():
            for p in model.parameters():
                if p.dim() == 2:
                    p.mul_(0.5)
        rng = np.random.default_rng(SEED)
        x = rng.standard_normal((1, seq, hidden), dtype=np.float32)
        cos, sin = rope_tables(seq, hidden // heads)
        return model, {"hidden": x, "cos": cos.numpy(), "sin": sin.numpy()}, ["output"]
    required = {"MatMul": 8 * 9, "Softmax": 8}
    if kv_heads is not None:
        required["Expand"] = 2 * 8
    return build, required


def vit_b_16():
    """torchvision's ViT-B/16 (nn.MultiheadAttention inside: heads folded into the batch). Its
    classifier starts at zero, so it is drawn like the other weights: logits of all zeros would
    make every comparison pass."""
    def build():
        torch.manual_seed(SEED)
        model = torchvision.models.vit_b_16(weights=None).eval()
        nn.init.normal_(model.heads.head.weight, std=0.02)
        rng = np.random.default_rng(SEED)
        image = rng.standard_normal((1, 3, 224, 224), dtype=np.float32)
        return model, {"input": image}, ["output"]
    return build, {"Softmax": 12, "MatMul": 24}


# name -> (opset, build() -> (module, inputs, output names), {op: minimum count})
MODELS = {
    "resnet50": (13, *vision(torchvision.models.resnet50)),
    "mobilenet_v2": (13, *vision(torchvision.models.mobilenet_v2)),
    "efficientnet_b0": (13, *vision(torchvision.models.efficientnet_b0)),
    "bert_base": (13, *bert(13)),
}
# bert_base_l24 / _l48: the same encoder 24 and 48 layers deep, for issue 12's "the optimizer
# stays linear: a 48-layer transformer export optimizes in under 2 s" (run_optimize_bench.sh
# takes model files too); 0.75 and 1.4 GB.
OPTIONAL = {"bert_base_op17": (17, *bert(17)), "llama_8l": (13, *llama()),
            "llama_gqa_8l": (13, *llama(kv_heads=4)),
            "vit_b_16": (13, *vit_b_16()), "bert_base_l24": (13, *bert(13, 24)),
            "bert_base_l48": (13, *bert(13, 48))}


# ---- export and checks ----

def export(name, opset, build, out_dir):
    model, inputs, output_names = build()
    path = os.path.join(out_dir, name + ".onnx")
    args = tuple(torch.from_numpy(a) for a in inputs.values())
    # PRESERVE + constant folding draws a warning meant for models in training mode; ours is
    # in eval mode, and check_in_ort compares the export's output with torch's anyway.
    warnings.filterwarnings("ignore", message="It is recommended that constant folding")
    torch.onnx.export(model, args, path, opset_version=opset,
                      input_names=list(inputs), output_names=output_names,
                      training=torch.onnx.TrainingMode.PRESERVE, do_constant_folding=True)
    input_dir = os.path.join(out_dir, "inputs", name)
    os.makedirs(input_dir, exist_ok=True)
    for k, a in inputs.items():
        np.save(os.path.join(input_dir, k + ".npy"), a)
    with torch.no_grad():
        expected = model(*args).numpy()
    bn_modules = sum(isinstance(m, nn.modules.batchnorm._BatchNorm) for m in model.modules())
    return path, input_dir, expected, bn_modules


def check_structure(name, path, required):
    onnx.checker.check_model(path)  # by path: works above the 2 GB in-memory limit too
    graph = onnx.load(path, load_external_data=False).graph
    counts = {}
    for n in graph.node:
        counts[n.op_type] = counts.get(n.op_type, 0) + 1
    for op, at_least in required.items():
        if counts.get(op, 0) < at_least:
            raise SystemExit(f"{path}: expected >= {at_least} {op} nodes, found "
                             f"{counts.get(op, 0)} (op counts: {counts})")
    return len(graph.node), counts


def check_in_ort(path, input_dir, expected):
    """One run in onnxruntime-node; returns the max abs difference from torch's output."""
    with tempfile.TemporaryDirectory() as out:
        feeds = [f"{f[:-4]}={os.path.join(input_dir, f)}" for f in sorted(os.listdir(input_dir))]
        env = dict(os.environ, FUSECTL_ORT_DIR=ORT_DIR)
        r = subprocess.run(["node", os.path.join(REPO, "tests", "ort_reference.js"), path, out]
                           + feeds, env=env, capture_output=True, text=True)
        if r.returncode == 77:  # tests/ort_reference.js: onnxruntime-node not found
            raise SystemExit(f"{path}: onnxruntime-node is not in {ORT_DIR}: run "
                             f"scripts/install-ort.sh {ORT_DIR}, or set FUSECTL_ORT_DIR")
        if r.returncode != 0:
            raise SystemExit(f"{path}: ONNX Runtime failed (exit {r.returncode}): "
                             f"{r.stderr.strip().splitlines()[-1:]}")
        got = np.load(os.path.join(out, sorted(os.listdir(out))[0]))
    if got.shape != expected.shape:
        raise SystemExit(f"{path}: ORT output shape {got.shape}, torch {expected.shape}")
    return float(np.max(np.abs(got - expected))), float(np.max(np.abs(expected)))


def write_memory_baseline(out_dir):
    """tiny_relu.onnx: one Relu on 16 floats, the process-overhead baseline that
    run_profile_bench.sh subtracts from each runtime's peak RSS."""
    from onnx import TensorProto, helper
    x = helper.make_tensor_value_info("input", TensorProto.FLOAT, [1, 16])
    y = helper.make_tensor_value_info("output", TensorProto.FLOAT, [1, 16])
    graph = helper.make_graph([helper.make_node("Relu", ["input"], ["output"])], "tiny_relu",
                              [x], [y])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 7
    onnx.checker.check_model(model)
    onnx.save(model, os.path.join(out_dir, "tiny_relu.onnx"))
    input_dir = os.path.join(out_dir, "inputs", "tiny_relu")
    os.makedirs(input_dir, exist_ok=True)
    np.save(os.path.join(input_dir, "input.npy"),
            np.random.default_rng(SEED).standard_normal((1, 16), dtype=np.float32))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out_dir", nargs="?", default=DEFAULT_OUT)
    ap.add_argument("--only", help="comma-separated model names")
    ap.add_argument("--opset17", action="store_true", help="also export bert_base_op17")
    ap.add_argument("--force", action="store_true", help="re-export models that exist")
    opts = ap.parse_args()

    table = dict(MODELS)
    if opts.opset17:
        table["bert_base_op17"] = OPTIONAL["bert_base_op17"]
    names = opts.only.split(",") if opts.only else list(table)
    unknown = [n for n in names if n not in table and n not in OPTIONAL]
    if unknown:
        raise SystemExit(f"unknown model(s) {unknown}; known: {list(MODELS) + list(OPTIONAL)}")
    os.makedirs(opts.out_dir, exist_ok=True)
    torch.set_num_threads(2)
    print(f"torch {torch.__version__}, torchvision {torchvision.__version__}, "
          f"onnx {onnx.__version__} -> {opts.out_dir}", flush=True)
    write_memory_baseline(opts.out_dir)
    for name in names:
        opset, build, required = table[name] if name in table else OPTIONAL[name]
        path = os.path.join(opts.out_dir, name + ".onnx")
        if os.path.exists(path) and not opts.force:
            print(f"{name}: exists, skipped (--force re-exports)", flush=True)
            continue
        path, input_dir, expected, bn_modules = export(name, opset, build, opts.out_dir)
        if bn_modules:  # every BatchNorm module must survive as its own node
            required = dict(required, BatchNormalization=bn_modules)
        nodes, counts = check_structure(name, path, required)
        diff, scale = check_in_ort(path, input_dir, expected)
        if not np.isfinite(diff) or diff > 1e-3 * max(1.0, scale):
            raise SystemExit(f"{path}: ORT and torch differ by {diff:g} (output scale {scale:g})")
        shown = {k: counts[k] for k in sorted(required)}
        print(f"{name}: opset {opset}, {nodes} nodes {shown}, "
              f"{os.path.getsize(path) / 2**20:.1f} MiB; checker ok; "
              f"ORT vs torch max |diff| {diff:.2e} (output max |y| {scale:.3g})", flush=True)


if __name__ == "__main__":
    sys.exit(main())
