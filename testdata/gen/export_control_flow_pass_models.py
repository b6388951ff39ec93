#!/usr/bin/python3
"""Export the models that test passes inside If/Loop bodies
(testdata/models/control_flow_passes/*.onnx).

Run from the repository root with the Debian python (python3-torch, python3-onnx):

    /usr/bin/python3 testdata/gen/export_control_flow_pass_models.py

Each model is a torch.jit.script'ed module whose loop body holds a fusable chain, so the ONNX
exporter writes a Loop with that chain in its body:
  - mlp_loop.onnx: x = LayerNorm(GELU(Linear(x))) repeated n times (opset 13: GELU as Erf
    arithmetic, LayerNorm as ReduceMean/Sub/Pow/Sqrt/Div arithmetic);
  - conv_loop.onnx: x = ReLU(BN(Conv(x))) repeated n times;
  - greedy_decode.onnx: a greedy decode loop: each step embeds the last token, runs a
    Linear+GELU+LayerNorm block and a vocabulary projection, takes the ArgMax and appends it.
Weights are fixed-seed random and small, so the files stay tiny; export is deterministic.
"""
import os

import torch
import torch.nn as nn
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
OUT_DIR = os.path.normpath(os.path.join(HERE, "..", "models", "control_flow_passes"))
OPSET = 13


class MlpLoop(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(16, 16)
        self.ln = nn.LayerNorm(16)

    def forward(self, x: torch.Tensor, n: torch.Tensor) -> torch.Tensor:
        for _ in range(int(n)):
            x = self.ln(F.gelu(self.fc(x)))
        return x


class ConvLoop(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(4, 4, 3, padding=1)
        self.bn = nn.BatchNorm2d(4)

    def forward(self, x: torch.Tensor, n: torch.Tensor) -> torch.Tensor:
        for _ in range(int(n)):
            x = F.relu(self.bn(self.conv(x)))
        return x


class GreedyDecode(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(32, 16)
        self.fc = nn.Linear(16, 16)
        self.ln = nn.LayerNorm(16)
        self.head = nn.Linear(16, 32)

    def forward(self, tokens: torch.Tensor, steps: torch.Tensor) -> torch.Tensor:
        for _ in range(int(steps)):
            h = self.embed(tokens[:, -1])
            h = self.ln(F.gelu(self.fc(h)))
            nxt = torch.argmax(self.head(h), dim=-1, keepdim=True)
            tokens = torch.cat([tokens, nxt], dim=1)
        return tokens


def randomize(module, gen):
    with torch.no_grad():
        for p in module.parameters():
            p.copy_(torch.randn(p.shape, generator=gen) * 0.3)
        for m in module.modules():
            if isinstance(m, nn.BatchNorm2d):
                m.running_mean.copy_(torch.randn(m.num_features, generator=gen) * 0.5)
                m.running_var.copy_(torch.rand(m.num_features, generator=gen) + 0.5)
            if isinstance(m, nn.LayerNorm):
                m.weight.copy_(torch.rand(m.weight.shape, generator=gen) + 0.5)


def export(name, module, args, input_names, output_names):
    gen = torch.Generator().manual_seed(15)
    randomize(module, gen)
    module.eval()
    scripted = torch.jit.script(module)
    path = os.path.join(OUT_DIR, name)
    torch.onnx.export(scripted, args, path, opset_version=OPSET, input_names=input_names,
                      output_names=output_names, do_constant_folding=True)
    print("wrote", path, os.path.getsize(path), "bytes")


def main():
    os.makedirs(OUT_DIR, exist_ok=True)
    torch.manual_seed(15)
    export("mlp_loop.onnx", MlpLoop(), (torch.randn(2, 16), torch.tensor(3)), ["x", "n"], ["y"])
    export("conv_loop.onnx", ConvLoop(), (torch.randn(1, 4, 6, 6), torch.tensor(2)),
           ["x", "n"], ["y"])
    export("greedy_decode.onnx", GreedyDecode(),
           (torch.tensor([[1], [5]], dtype=torch.int64), torch.tensor(4)), ["tokens", "steps"],
           ["out"])


if __name__ == "__main__":
    main()
