# Exports torch.nn's own sequence models for bench/run_torchvision_sweep.sh: TransformerEncoder
# (post-norm with GELU, pre-norm with ReLU, with a causal mask), TransformerDecoder (causal),
# 2-layer bidirectional LSTM and GRU; random weights, opset 14, batch first. And a small
# diffusion-style UNet built from torch.nn (GroupNorm(32) + SiLU residual blocks, a spatial
# self-attention block, strided-conv downsampling, nearest upsampling with skip concatenation)
# on a [1, 4, 32, 32] latent: the GroupNorm-heavy family no torchvision model covers.
#   /usr/bin/python3 bench/export_torch_nn_sweep.py OUT_DIR
import torch, numpy as np, torch.nn as nn, os, sys
torch.manual_seed(0)
out = sys.argv[1]; os.makedirs(out, exist_ok=True)
class Enc(nn.Module):
    def __init__(s, norm_first, act):
        super().__init__()
        layer = nn.TransformerEncoderLayer(256, 8, 1024, dropout=0.1, activation=act, batch_first=True, norm_first=norm_first)
        s.enc = nn.TransformerEncoder(layer, 4, enable_nested_tensor=False)
    def forward(s, x): return s.enc(x)
class EncMask(nn.Module):
    def __init__(s):
        super().__init__()
        layer = nn.TransformerEncoderLayer(256, 8, 1024, dropout=0.1, activation="gelu", batch_first=True)
        s.enc = nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)
    def forward(s, x):
        n = x.shape[1]
        mask = torch.triu(torch.full((n, n), float("-inf")), diagonal=1)
        return s.enc(x, mask=mask)
class Dec(nn.Module):
    def __init__(s):
        super().__init__()
        layer = nn.TransformerDecoderLayer(256, 8, 1024, dropout=0.1, batch_first=True)
        s.dec = nn.TransformerDecoder(layer, 2)
    def forward(s, x):
        n = x.shape[1]
        mask = torch.triu(torch.full((n, n), float("-inf")), diagonal=1)
        return s.dec(x, x * 0.5, tgt_mask=mask)
class Rnn(nn.Module):
    def __init__(s, kind):
        super().__init__()
        s.rnn = getattr(nn, kind)(64, 128, num_layers=2, bidirectional=True, batch_first=True)
    def forward(s, x): return s.rnn(x)[0]
class ResBlock(nn.Module):
    def __init__(s, cin, cout):
        super().__init__()
        s.n1, s.c1 = nn.GroupNorm(32, cin), nn.Conv2d(cin, cout, 3, padding=1)
        s.n2, s.c2 = nn.GroupNorm(32, cout), nn.Conv2d(cout, cout, 3, padding=1)
        s.skip = nn.Conv2d(cin, cout, 1) if cin != cout else nn.Identity()
    def forward(s, x):
        h = s.c1(nn.functional.silu(s.n1(x)))
        return s.skip(x) + s.c2(nn.functional.silu(s.n2(h)))
class SpatialAttention(nn.Module):
    def __init__(s, c):
        super().__init__()
        s.norm, s.qkv, s.proj = nn.GroupNorm(32, c), nn.Conv2d(c, 3 * c, 1), nn.Conv2d(c, c, 1)
    def forward(s, x):
        b, c, h, w = x.shape
        q, k, v = s.qkv(s.norm(x)).reshape(b, 3, c, h * w).unbind(1)
        a = torch.softmax(q.transpose(1, 2) @ k / c ** 0.5, dim=-1)
        return x + s.proj((v @ a.transpose(1, 2)).reshape(b, c, h, w))
class UNet(nn.Module):
    def __init__(s):
        super().__init__()
        s.inp = nn.Conv2d(4, 64, 3, padding=1)
        s.d1, s.down = ResBlock(64, 64), nn.Conv2d(64, 64, 3, stride=2, padding=1)
        s.d2, s.attn = ResBlock(64, 128), SpatialAttention(128)
        s.mid = ResBlock(128, 128)
        s.u2 = ResBlock(256, 128)
        s.u1 = ResBlock(192, 64)
        s.out_norm, s.out = nn.GroupNorm(32, 64), nn.Conv2d(64, 4, 3, padding=1)
    def forward(s, x):
        h1 = s.d1(s.inp(x))
        h2 = s.attn(s.d2(s.down(h1)))
        h = s.u2(torch.cat([s.mid(h2), h2], 1))
        h = s.u1(torch.cat([nn.functional.interpolate(h, scale_factor=2.0, mode="nearest"), h1], 1))
        return s.out(nn.functional.silu(s.out_norm(h)))
models = [("encoder_post_gelu", Enc(False, "gelu"), (1, 64, 256)), ("encoder_pre_relu", Enc(True, "relu"), (1, 64, 256)),
          ("encoder_causal", EncMask(), (1, 64, 256)), ("decoder_causal", Dec(), (1, 32, 256)),
          ("lstm", Rnn("LSTM"), (1, 20, 64)), ("gru", Rnn("GRU"), (1, 20, 64)),
          ("unet_small", UNet(), (1, 4, 32, 32))]
for name, m, shape in models:
    try:
        m.eval(); x = torch.randn(*shape)
        torch.onnx.export(m, x, f"{out}/{name}.onnx", opset_version=14, input_names=["input"], output_names=["output"])
        np.save(f"{out}/{name}.input.npy", x.numpy()); print("ok", name, flush=True)
    except Exception as e:
        print("FAIL", name, type(e).__name__, str(e)[:300], flush=True)
