# Exports torchaudio's speech and audio models for bench/run_torchvision_sweep.sh (one input
# named "input"): wav2vec 2.0 and HuBERT (convolutional feature encoder + transformer; the
# group-norm and the layer-norm extractor), Conformer, ConvTasNet, DeepSpeech, Wav2Letter,
# Emformer. Random weights, reduced depth where the full model adds nothing but time; one second
# of 16 kHz audio or 100 frames of features; opset 14. (HDemucs and torchaudio's spectrograms
# need aten::stft, which torch 1.13 does not export.)
#   /usr/bin/python3 bench/export_torchaudio_sweep.py OUT_DIR [NAME...]
import os
import sys

import numpy as np
import torch
import torchaudio.models as tm

torch.manual_seed(0)
out = sys.argv[1]
only = set(sys.argv[2:])
os.makedirs(out, exist_ok=True)


class FirstOutput(torch.nn.Module):
    """The model's first output, with full-length `lengths` where it asks for them."""

    def __init__(s, model, lengths=False):
        super().__init__()
        s.model, s.lengths = model, lengths

    def forward(s, x):
        if s.lengths:
            full = torch.full((x.shape[0],), x.shape[1], dtype=torch.int64)
            return s.model(x, full)[0]
        y = s.model(x)
        return y[0] if isinstance(y, tuple) else y


def wav2vec2(extractor_mode, layers):
    return tm.wav2vec2_model(
        extractor_mode=extractor_mode, extractor_conv_layer_config=None, extractor_conv_bias=extractor_mode == "layer_norm",
        encoder_embed_dim=384, encoder_projection_dropout=0.1, encoder_pos_conv_kernel=128, encoder_pos_conv_groups=16,
        encoder_num_layers=layers, encoder_num_heads=6, encoder_attention_dropout=0.1, encoder_ff_interm_features=1536,
        encoder_ff_interm_dropout=0.0, encoder_dropout=0.1, encoder_layer_norm_first=extractor_mode == "layer_norm",
        encoder_layer_drop=0.0, aux_num_out=32)


audio = (1, 16000)
models = [
    ("wav2vec2_group_norm", lambda: FirstOutput(wav2vec2("group_norm", 4)), audio, 14),
    ("wav2vec2_layer_norm", lambda: FirstOutput(wav2vec2("layer_norm", 4)), audio, 14),
    ("hubert_base", lambda: FirstOutput(tm.hubert_base()), audio, 14),
    ("conformer", lambda: FirstOutput(tm.Conformer(input_dim=80, num_heads=4, ffn_dim=256, num_layers=4,
                                                   depthwise_conv_kernel_size=31), lengths=True), (1, 100, 80), 14),
    ("conv_tasnet", lambda: FirstOutput(tm.conv_tasnet_base(num_sources=2)), (1, 1, 8000), 14),
    ("deepspeech", lambda: FirstOutput(tm.DeepSpeech(n_feature=80, n_hidden=512)), (1, 1, 100, 80), 14),
    ("wav2letter", lambda: FirstOutput(tm.Wav2Letter(num_classes=40, input_type="waveform")), (1, 1, 16000), 14),
    ("emformer", lambda: FirstOutput(tm.Emformer(input_dim=128, num_heads=4, ffn_dim=512, num_layers=4,
                                                 segment_length=4, right_context_length=1), lengths=True), (1, 41, 128), 14),
]
for name, make, shape, opset in models:
    if only and name not in only:
        continue
    try:
        m = make().eval()
        x = torch.randn(*shape)
        with torch.no_grad():
            torch.onnx.export(m, x, f"{out}/{name}.onnx", opset_version=opset, input_names=["input"], output_names=["output"])
        np.save(f"{out}/{name}.input.npy", x.numpy())
        print("ok", name, flush=True)
    except Exception as e:
        print("FAIL", name, type(e).__name__, str(e)[:300], flush=True)
