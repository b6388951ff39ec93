#!/usr/bin/python3
"""Export the transformer test models of issue 12 (testdata/models/*.onnx).

Run from the repository root with the Debian python (python3-torch, python3-onnx):

    /usr/bin/python3 testdata/gen/export_transformer_models.py

Each model is one exporter spelling the fusion passes must recognise (GPT-2's addmm and
gelu_new, ViT at opset 13 and 17, LLaMA with QK-norm and grouped-query attention, a Qwen/Gemma
block with fp16 Cast-wrapped RMSNorm and the (1 + w) weight, BERT at opset 17). Weights are
random with fixed seeds, widths small (hidden 64-128, 1-2 layers), so each file stays well
under 1 MB; the output is byte-identical from run to run. The helpers and the shared modules
(export, RMSNorm, rotate_half, rope_tables) come from export_models.py.
"""
import collections
import math
import os
import sys

import onnx
import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import export_models as em  # noqa: E402
from export_models import RMSNorm, export, require, rope_tables, rotate_half  # noqa: E402


# --------------------------------------------------------------------------
# gpt2_block: HF GPT-2 (Conv1D = addmm, gelu_new, causal mask by Where on a tril buffer)
# --------------------------------------------------------------------------
class Conv1D(nn.Module):
    """HF transformers' Conv1D: y = x @ W + b with W stored [in, out], written with addmm."""

    def __init__(self, nf, nx, gen):
        super().__init__()
        self.nf = nf
        self.weight = nn.Parameter(torch.randn(nx, nf, generator=gen) * 0.08)
        self.bias = nn.Parameter(torch.randn(nf, generator=gen) * 0.02)

    def forward(self, x):
        size_out = x.size()[:-1] + (self.nf,)
        x = torch.addmm(self.bias, x.view(-1, x.size(-1)), self.weight)
        return x.view(size_out)


def gelu_new(x):
    # HF activations.NewGELUActivation, written out exactly as HF does.
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) *
                                       (x + 0.044715 * torch.pow(x, 3.0))))


class GPT2Block(nn.Module):
    def __init__(self, gen, hidden=64, heads=4, max_pos=32):
        super().__init__()
        self.h, self.d = heads, hidden // heads
        self.ln_1 = nn.LayerNorm(hidden, eps=1e-5)
        self.c_attn = Conv1D(3 * hidden, hidden, gen)
        self.c_proj = Conv1D(hidden, hidden, gen)
        self.ln_2 = nn.LayerNorm(hidden, eps=1e-5)
        self.c_fc = Conv1D(4 * hidden, hidden, gen)
        self.mlp_proj = Conv1D(hidden, 4 * hidden, gen)
        self.register_buffer("bias", torch.tril(torch.ones(max_pos, max_pos, dtype=torch.bool))
                             .view(1, 1, max_pos, max_pos))

    def split_heads(self, t):
        b, s, _ = t.size()
        return t.view(b, s, self.h, self.d).permute(0, 2, 1, 3)

    def forward(self, hidden):
        residual = hidden
        x = self.ln_1(hidden)
        q, k, v = self.c_attn(x).split(self.h * self.d, dim=2)
        q, k, v = self.split_heads(q), self.split_heads(k), self.split_heads(v)
        w = torch.matmul(q, k.transpose(-1, -2))
        w = w / torch.full([], v.size(-1) ** 0.5, dtype=w.dtype)
        s = q.size(-2)
        causal = self.bias[:, :, :s, :s]
        w = torch.where(causal, w, torch.full([], torch.finfo(w.dtype).min, dtype=w.dtype))
        w = F.softmax(w, dim=-1)
        a = torch.matmul(w, v).permute(0, 2, 1, 3).contiguous()
        a = a.view(a.size(0), a.size(1), self.h * self.d)
        hidden = residual + self.c_proj(a)
        m = self.mlp_proj(gelu_new(self.c_fc(self.ln_2(hidden))))
        return hidden + m


class GPT2Stack(nn.Module):
    def __init__(self, gen, layers):
        super().__init__()
        self.blocks = nn.ModuleList([GPT2Block(gen) for _ in range(layers)])

    def forward(self, hidden):
        for block in self.blocks:
            hidden = block(hidden)
        return hidden


# --------------------------------------------------------------------------
# vit_encoder: timm-style pre-norm blocks (fused qkv Linear, q*scale, exact nn.GELU)
# --------------------------------------------------------------------------
class ViTBlock(nn.Module):
    def __init__(self, dim=64, heads=4, mlp=128):
        super().__init__()
        self.h, self.d = heads, dim // heads
        self.scale = self.d ** -0.5
        self.norm1 = nn.LayerNorm(dim, eps=1e-6)
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        self.norm2 = nn.LayerNorm(dim, eps=1e-6)
        self.fc1 = nn.Linear(dim, mlp)
        self.act = nn.GELU()
        self.fc2 = nn.Linear(mlp, dim)

    def forward(self, x):
        b, n, c = x.shape
        qkv = self.qkv(self.norm1(x)).reshape(b, n, 3, self.h, self.d).permute(2, 0, 3, 1, 4)
        q, k, v = qkv.unbind(0)
        attn = (q @ k.transpose(-2, -1)) * self.scale
        attn = attn.softmax(dim=-1)
        y = (attn @ v).transpose(1, 2).reshape(b, n, c)
        x = x + self.proj(y)
        return x + self.fc2(self.act(self.fc1(self.norm2(x))))


class ViTEncoder(nn.Module):
    def __init__(self, dim=64, depth=2):
        super().__init__()
        self.blocks = nn.Sequential(*[ViTBlock(dim) for _ in range(depth)])
        self.norm = nn.LayerNorm(dim, eps=1e-6)

    def forward(self, x):
        return self.norm(self.blocks(x))


# --------------------------------------------------------------------------
# vit_mha_encoder: torchvision's ViT blocks, whose attention is nn.MultiheadAttention
# (batch_first): the export transposes to sequence first, slices q/k/v from the packed in_proj,
# folds the heads into the batch ([S, B*H, D] -> [B*H, S, D]) and scales q before the product.
# --------------------------------------------------------------------------
class TorchvisionViTBlock(nn.Module):
    def __init__(self, dim=64, heads=4, mlp=128):
        super().__init__()
        self.ln_1 = nn.LayerNorm(dim, eps=1e-6)
        self.self_attention = nn.MultiheadAttention(dim, heads, batch_first=True)
        self.ln_2 = nn.LayerNorm(dim, eps=1e-6)
        self.mlp = nn.Sequential(nn.Linear(dim, mlp), nn.GELU(), nn.Linear(mlp, dim))

    def forward(self, x):
        y = self.ln_1(x)
        y, _ = self.self_attention(y, y, y, need_weights=False)
        x = x + y
        return x + self.mlp(self.ln_2(x))


class TorchvisionViTEncoder(nn.Module):
    def __init__(self, dim=64, depth=2):
        super().__init__()
        self.layers = nn.Sequential(*[TorchvisionViTBlock(dim) for _ in range(depth)])
        self.ln = nn.LayerNorm(dim, eps=1e-6)

    def forward(self, x):
        return self.ln(self.layers(x))


# --------------------------------------------------------------------------
# llama_gqa_block: RMSNorm, QK-norm, GQA (8 Q heads, 2 KV heads), RoPE, SwiGLU, causal mask
# --------------------------------------------------------------------------
def repeat_kv(x, n_rep):
    # HF transformers' repeat_kv: [b, kv, s, d] -> [b, kv * n_rep, s, d] via expand + reshape.
    b, kv, s, d = x.shape
    if n_rep == 1:
        return x
    x = x[:, :, None, :, :].expand(b, kv, n_rep, s, d)
    return x.reshape(b, kv * n_rep, s, d)


class LlamaGQABlock(nn.Module):
    def __init__(self, hidden=128, heads=8, kv_heads=2, inter=256, norm=RMSNorm):
        super().__init__()
        self.h, self.kv, self.d = heads, kv_heads, hidden // heads
        self.input_layernorm = norm(hidden)
        self.q_proj = nn.Linear(hidden, heads * self.d, bias=False)
        self.k_proj = nn.Linear(hidden, kv_heads * self.d, bias=False)
        self.v_proj = nn.Linear(hidden, kv_heads * self.d, bias=False)
        self.q_norm = norm(self.d)
        self.k_norm = norm(self.d)
        self.o_proj = nn.Linear(heads * self.d, hidden, bias=False)
        self.post_attention_layernorm = norm(hidden)
        self.gate_proj = nn.Linear(hidden, inter, bias=False)
        self.up_proj = nn.Linear(hidden, inter, bias=False)
        self.down_proj = nn.Linear(inter, hidden, bias=False)

    def attention(self, x, cos, sin):
        b, s, _ = x.shape
        q = self.q_norm(self.q_proj(x).view(b, s, self.h, self.d)).transpose(1, 2)
        k = self.k_norm(self.k_proj(x).view(b, s, self.kv, self.d)).transpose(1, 2)
        v = self.v_proj(x).view(b, s, self.kv, self.d).transpose(1, 2)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        k = repeat_kv(k, self.h // self.kv)
        v = repeat_kv(v, self.h // self.kv)
        scores = torch.matmul(q, k.transpose(2, 3)) / math.sqrt(self.d)
        idx = torch.arange(s)
        causal = idx.unsqueeze(0) > idx.unsqueeze(1)
        scores = scores.masked_fill(causal, torch.finfo(torch.float32).min)
        probs = torch.softmax(scores, dim=-1)
        return torch.matmul(probs, v).transpose(1, 2).reshape(b, s, self.h * self.d)

    def forward(self, hidden, cos, sin):
        hidden = hidden + self.o_proj(self.attention(self.input_layernorm(hidden), cos, sin))
        x = self.post_attention_layernorm(hidden)
        return hidden + self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


# --------------------------------------------------------------------------
# qwen_fp16_block: fp16 residual stream, Gemma RMSNorm (float inside, weight 1 + w)
# --------------------------------------------------------------------------
class GemmaRMSNorm(nn.Module):
    """Gemma's RMSNorm: normalise in float32, scale by (1 + w), cast back to the input type."""

    def __init__(self, dim, eps=1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.zeros(dim))

    def forward(self, x):
        h = x.float()
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.eps)
        return (h * (1.0 + self.weight.float())).type_as(x)


class QwenFp16Block(LlamaGQABlock):
    """The LLaMA GQA block with a float16 residual stream and Gemma norms.

    fusectl (and torch 1.13 on CPU) compute float16 by staging through float32 anyway, so only
    the hidden states and the norms' in/out are float16: each norm is Cast(fp16->fp32) ->
    RMSNorm -> Mul(1 + w) -> Cast(fp32->fp16), and the projections read Cast(fp16->fp32) of it.
    """

    def __init__(self):
        super().__init__(norm=GemmaRMSNorm)

    def forward(self, hidden, cos, sin):
        x = self.input_layernorm(hidden).float()
        hidden = hidden + self.o_proj(self.attention(x, cos, sin)).half()
        x = self.post_attention_layernorm(hidden).float()
        return hidden + self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x)).half()


# --------------------------------------------------------------------------
# bert_op17: 2-layer BERT with HF's own erf gelu and an additive mask
# --------------------------------------------------------------------------
class HFGelu(nn.Module):
    # HF BERT's gelu: x * 0.5 first, then * (1 + erf(x / sqrt 2)); nn.GELU exports
    # x * (1 + erf) * 0.5 instead, so the two exports multiply in different orders.
    def forward(self, x):
        return x * 0.5 * (1.0 + torch.erf(x / math.sqrt(2.0)))


class BertEncoder(nn.Module):
    def __init__(self, layers=2):
        super().__init__()
        self.layers = nn.ModuleList([em.BertLayer() for _ in range(layers)])
        for layer in self.layers:
            layer.act = HFGelu()

    def forward(self, hidden, attention_mask):
        for layer in self.layers:
            hidden = layer(hidden, attention_mask)
        return hidden


# --------------------------------------------------------------------------
def randomize_norms(model, gen):
    """Give every LayerNorm/RMSNorm a non-trivial weight (and bias), so a wrong fold shows."""
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, nn.LayerNorm):
                m.weight.copy_(torch.rand(m.weight.shape, generator=gen) + 0.5)
                m.bias.copy_(torch.randn(m.bias.shape, generator=gen) * 0.1)
            elif isinstance(m, RMSNorm):
                m.weight.copy_(torch.rand(m.weight.shape, generator=gen) + 0.5)
            elif isinstance(m, GemmaRMSNorm):
                m.weight.copy_(torch.randn(m.weight.shape, generator=gen) * 0.2)


def seq_axes(*names):
    return {n: {0: "batch", 1: "seq"} for n in names}


def make_models():
    """(name, module, example_args, export kwargs) for each model, deterministically."""
    gen = torch.Generator().manual_seed(4321)
    models = []
    seq = 8

    torch.manual_seed(10)
    model = GPT2Block(gen)
    randomize_norms(model, gen)
    models.append(("gpt2_block", model, (torch.randn(2, seq, 64, generator=gen),), dict(
        input_names=["hidden"], output_names=["output"],
        dynamic_axes=seq_axes("hidden", "output"))))

    for opset in (13, 17):
        torch.manual_seed(11)
        model = ViTEncoder()
        randomize_norms(model, gen)
        models.append(("vit_encoder_op%d" % opset, model,
                       (torch.randn(2, 17, 64, generator=gen),), dict(
                           input_names=["tokens"], output_names=["output"],
                           dynamic_axes=seq_axes("tokens", "output"), opset=opset)))

    cos, sin = rope_tables(seq, 16)
    rope_axes = {"cos": {0: "seq"}, "sin": {0: "seq"}}
    torch.manual_seed(12)
    model = LlamaGQABlock()
    randomize_norms(model, gen)
    models.append(("llama_gqa_block", model, (torch.randn(2, seq, 128, generator=gen), cos, sin),
                   dict(input_names=["hidden", "cos", "sin"], output_names=["output"],
                        dynamic_axes=dict(seq_axes("hidden", "output"), **rope_axes))))

    torch.manual_seed(13)
    model = QwenFp16Block()
    randomize_norms(model, gen)
    hidden = torch.randn(2, seq, 128, generator=gen).half()
    # In models/fp16/: the whole-folder ORT differential test (tests/test_executor.cpp, "[ort]")
    # compares at float32 tolerances (rtol 1e-4), below one float16 ulp (2^-11 relative);
    # tests/test_transformer_models.cpp compares it with ORT at float16 tolerance.
    models.append(("fp16/qwen_fp16_block", model, (hidden, cos, sin), dict(
        input_names=["hidden", "cos", "sin"], output_names=["output"],
        dynamic_axes=dict(seq_axes("hidden", "output"), **rope_axes), fold=False)))

    torch.manual_seed(14)
    model = BertEncoder()
    randomize_norms(model, gen)
    hidden = torch.randn(2, seq, 64, generator=gen)
    mask = torch.zeros(2, 1, 1, seq)
    mask[1, :, :, 6:] = -10000.0
    models.append(("bert_op17", model, (hidden, mask), dict(
        input_names=["hidden", "attention_mask"], output_names=["output"],
        dynamic_axes={"hidden": {0: "batch", 1: "seq"}, "attention_mask": {0: "batch", 3: "seq"},
                      "output": {0: "batch", 1: "seq"}}, opset=17)))

    # Last, so that the generator's draws for the models above stay as they were. Static, as
    # torchvision's ViT is exported (the image size fixes the sequence); batch 1, a deployment's
    # batch and the one whose sequence-first rows fuse-packed-attention reads as [1, S, W].
    torch.manual_seed(15)
    model = TorchvisionViTEncoder()
    randomize_norms(model, gen)
    models.append(("vit_mha_encoder", model, (torch.randn(1, 17, 64, generator=gen),), dict(
        input_names=["tokens"], output_names=["output"], dynamic_axes={})))
    # The same module exported as a deployment with varying batch and sequence usually is: the
    # head split's and merge's targets are computed from Shapes (B*H folded heads, S read from
    # k), which fuse-packed-attention and emit-ort take with symbolic dims.
    models.append(("vit_mha_encoder_dyn", model, (torch.randn(2, 17, 64, generator=gen),), dict(
        input_names=["tokens"], output_names=["output"],
        dynamic_axes={"tokens": {0: "batch", 1: "seq"}, "output": {0: "batch", 1: "seq"}})))
    # Three GPT-2 blocks stacked: each causal mask, a Slice of the [1, 1, P, P] buffer to the
    # sequence length, leaves the next block's dims unknown until its attention is fused
    # (fuse-attention's rounds; tests/test_transformer_models.cpp runs -O3 with one iteration).
    torch.manual_seed(16)
    model = GPT2Stack(gen, 3)
    randomize_norms(model, gen)
    models.append(("gpt2_stack3", model, (torch.randn(2, seq, 64, generator=gen),), dict(
        input_names=["hidden"], output_names=["output"],
        dynamic_axes=seq_axes("hidden", "output"))))
    # Exporters that still default to opsets 11 and 12 (older transformers.onnx and
    # torch.onnx settings): before opset 13 Softmax normalises axis..rank-1 as one 2-D row and
    # Squeeze/Unsqueeze take attribute axes, so fuse-attention's Softmax check and its views of
    # folded heads differ there, and the function bodies read their scalars from tensor twins
    # below opset 12 (Constant has no value_float/value_int).
    torch.manual_seed(17)
    model = BertEncoder()
    randomize_norms(model, gen)
    hidden = torch.randn(2, seq, 64, generator=gen)
    models.append(("bert_op12", model, (hidden, mask), dict(
        input_names=["hidden", "attention_mask"], output_names=["output"],
        dynamic_axes={"hidden": {0: "batch", 1: "seq"}, "attention_mask": {0: "batch", 3: "seq"},
                      "output": {0: "batch", 1: "seq"}}, opset=12)))
    torch.manual_seed(18)
    model = TorchvisionViTEncoder()
    randomize_norms(model, gen)
    models.append(("vit_mha_encoder_op11", model, (torch.randn(1, 17, 64, generator=gen),), dict(
        input_names=["tokens"], output_names=["output"], dynamic_axes={}, opset=11)))
    for _, m, _, _ in models:
        m.eval()
    return models


def export_unfolded(model, args, name, input_names, output_names, dynamic_axes, opset=13):
    """export() without torch's constant folding, which would fold Gemma's (1 + w) away."""
    model.eval()
    path = os.path.join(em.OUT_DIR, name + ".onnx")
    torch.onnx.export(model, args, path, input_names=input_names, output_names=output_names,
                      dynamic_axes=dynamic_axes, opset_version=opset, do_constant_folding=False)
    m = onnx.load(path)
    onnx.checker.check_model(m, full_check=True)
    hist = collections.Counter(n.op_type for n in m.graph.node)
    print("== %s: %d nodes, %d initializers, %d bytes" %
          (name, len(m.graph.node), len(m.graph.initializer), os.path.getsize(path)))
    print("   ops: " + ", ".join("%s=%d" % kv for kv in sorted(hist.items())))
    return m, hist


def verify(name, m, hist):
    """The spelling each model exists for is really in the export."""
    ln17 = hist["LayerNormalization"]
    if name == "gpt2_block":
        for op in ("Gemm", "Tanh", "Pow", "Where", "ReduceMean", "Softmax"):
            require(hist[op] > 0, "gpt2_block: missing " + op)
    elif name == "vit_encoder_op13":
        require(ln17 == 0 and hist["ReduceMean"] == 10 and hist["Erf"] == 2,
                "vit_encoder_op13: 5 decomposed LayerNorms and 2 Erf GELUs expected")
    elif name == "vit_encoder_op17":
        require(ln17 == 5 and hist["ReduceMean"] == 0 and hist["Erf"] == 2,
                "vit_encoder_op17: 5 LayerNormalization and 2 Erf GELUs expected")
    elif name == "llama_gqa_block":
        require(hist["ReduceMean"] == 4, "llama_gqa_block: 4 RMSNorms (2 + QK-norm) expected")
        for op in ("Expand", "Neg", "Concat", "Sigmoid", "Where", "Softmax"):
            require(hist[op] > 0, "llama_gqa_block: missing " + op)
    elif name == "fp16/qwen_fp16_block":
        require(hist["ReduceMean"] == 4 and hist["Cast"] >= 8, "qwen_fp16_block: Cast-wrapped norms")
        fp16_in = m.graph.input[0].type.tensor_type.elem_type == onnx.TensorProto.FLOAT16
        require(fp16_in, "qwen_fp16_block: hidden must be float16")
    elif name == "vit_mha_encoder":
        require(hist["Softmax"] == 2 and hist["Slice"] >= 6 and hist["Erf"] == 2,
                "vit_mha_encoder: 2 attentions on Slices of the packed in_proj, 2 Erf GELUs")
    elif name == "vit_mha_encoder_dyn":
        dims = m.graph.input[0].type.tensor_type.shape.dim
        require(dims[0].dim_param == "batch" and dims[1].dim_param == "seq",
                "vit_mha_encoder_dyn: dynamic batch and sequence expected")
        require(hist["Softmax"] == 2 and hist["Shape"] > 0 and hist["Concat"] > 0,
                "vit_mha_encoder_dyn: 2 attentions with computed Reshape targets expected")
    elif name == "bert_op17":
        require(ln17 == 4 and hist["Erf"] == 2 and hist["ReduceMean"] == 0,
                "bert_op17: 4 LayerNormalization and 2 Erf expected")
    require(os.path.getsize(os.path.join(em.OUT_DIR, name + ".onnx")) < 1 << 20,
            name + ": over 1 MB")


def write_reference(out_dir):
    """Write each model's example inputs and torch's outputs as DIR/<model>/{in,torch}/*.npy,
    to compare `fusectl run --input` and tests/ort_reference.js against torch."""
    import numpy as np
    for name, model, args, kw in make_models():
        for sub in ("in", "torch"):
            os.makedirs(os.path.join(out_dir, name, sub), exist_ok=True)
        for n, a in zip(kw["input_names"], args):
            np.save(os.path.join(out_dir, name, "in", n + ".npy"), a.numpy())
        with torch.no_grad():
            y = model(*args)
        np.save(os.path.join(out_dir, name, "torch", kw["output_names"][0] + ".npy"), y.numpy())


def main():
    if len(sys.argv) == 3 and sys.argv[1] == "--reference":
        return write_reference(sys.argv[2])
    os.makedirs(os.path.join(em.OUT_DIR, "fp16"), exist_ok=True)
    for name, model, args, kw in make_models():
        if kw.pop("fold", True):
            m, hist = export(model, args, name, **kw)
        else:
            m, hist = export_unfolded(model, args, name, **kw)
        verify(name, m, hist)


if __name__ == "__main__":
    main()
