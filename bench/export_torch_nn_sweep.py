# Exports torch.nn's own sequence models for bench/run_torchvision_sweep.sh: TransformerEncoder
# (post-norm with GELU, pre-norm with ReLU, with a causal mask), TransformerDecoder (causal),
# 2-layer bidirectional LSTM and GRU; random weights, opset 14, batch first.
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
models = [("encoder_post_gelu", Enc(False, "gelu"), (1, 64, 256)), ("encoder_pre_relu", Enc(True, "relu"), (1, 64, 256)),
          ("encoder_causal", EncMask(), (1, 64, 256)), ("decoder_causal", Dec(), (1, 32, 256)),
          ("lstm", Rnn("LSTM"), (1, 20, 64)), ("gru", Rnn("GRU"), (1, 20, 64))]
for name, m, shape in models:
    try:
        m.eval(); x = torch.randn(*shape)
        torch.onnx.export(m, x, f"{out}/{name}.onnx", opset_version=14, input_names=["input"], output_names=["output"])
        np.save(f"{out}/{name}.input.npy", x.numpy()); print("ok", name, flush=True)
    except Exception as e:
        print("FAIL", name, type(e).__name__, str(e)[:300], flush=True)
