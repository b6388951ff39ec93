# Exports torchvision models (random weights, random BatchNorm statistics, opset 13, static
# shapes) for bench/run_torchvision_sweep.sh: classification, segmentation and video models.
#   /usr/bin/python3 bench/export_torchvision_sweep.py OUT_DIR [NAME...]
# Writes OUT_DIR/NAME.onnx and OUT_DIR/NAME.input.npy (seeded); existing files are kept.
# DYNAMIC_BATCH=1 exports the batch axis as a symbolic dim ('batch'); OPSET=N another opset
# than 13 (torch 1.13 writes up to 17; RAFT needs 16 for grid_sample and is exported at 16).
import sys, os, numpy as np, torch, torchvision.models as tvm, torchvision.models.optical_flow, torchvision.models.segmentation as seg, torchvision.models.video as vid
out = sys.argv[1]; os.makedirs(out, exist_ok=True); only = set(sys.argv[2:])
torch.manual_seed(0)
M = [
 ("resnet18", tvm.resnet18, (1,3,96,96)), ("resnext50_32x4d", tvm.resnext50_32x4d, (1,3,96,96)),
 ("wide_resnet50_2", tvm.wide_resnet50_2, (1,3,64,64)), ("mobilenet_v3_small", tvm.mobilenet_v3_small, (1,3,96,96)),
 ("mobilenet_v3_large", tvm.mobilenet_v3_large, (1,3,96,96)), ("efficientnet_v2_s", tvm.efficientnet_v2_s, (1,3,96,96)),
 ("regnet_y_400mf", tvm.regnet_y_400mf, (1,3,96,96)), ("regnet_x_400mf", tvm.regnet_x_400mf, (1,3,96,96)),
 ("densenet121", tvm.densenet121, (1,3,96,96)), ("shufflenet_v2_x1_0", tvm.shufflenet_v2_x1_0, (1,3,96,96)),
 ("squeezenet1_1", tvm.squeezenet1_1, (1,3,96,96)), ("googlenet", lambda: tvm.googlenet(aux_logits=False, init_weights=True), (1,3,96,96)),
 ("inception_v3", lambda: tvm.inception_v3(aux_logits=False, init_weights=True), (1,3,160,160)), ("mnasnet1_0", tvm.mnasnet1_0, (1,3,96,96)),
 ("convnext_tiny", tvm.convnext_tiny, (1,3,96,96)), ("swin_t", tvm.swin_t, (1,3,224,224)),
 ("maxvit_t", tvm.maxvit_t, (1,3,224,224)), ("alexnet", tvm.alexnet, (1,3,96,96)),
 ("efficientnet_b3", tvm.efficientnet_b3, (1,3,96,96)), ("vit_b_32", tvm.vit_b_32, (1,3,224,224)),
 ("fcn_resnet50", lambda: seg.fcn_resnet50(weights_backbone=None, aux_loss=False), (1,3,96,96)),
 ("deeplabv3_mobilenet_v3_large", lambda: seg.deeplabv3_mobilenet_v3_large(weights_backbone=None, aux_loss=False), (1,3,96,96)),
 ("lraspp_mobilenet_v3_large", lambda: seg.lraspp_mobilenet_v3_large(weights_backbone=None), (1,3,96,96)),
 ("r3d_18", vid.r3d_18, (1,3,8,56,56)), ("r2plus1d_18", vid.r2plus1d_18, (1,3,8,56,56)),
 ("mc3_18", vid.mc3_18, (1,3,8,56,56)), ("s3d", vid.s3d, (1,3,16,224,224)),
 ("raft_small", lambda: RaftPair(), (1,6,128,128), 16),
]
class RaftPair(torch.nn.Module):
    """RAFT (small) on two frames stacked as one 6-channel input: the last of 4 flow updates."""
    def __init__(s):
        super().__init__(); s.m = tvm.optical_flow.raft_small(weights=None)
    def forward(s, x):
        return s.m(x[:, :3], x[:, 3:], num_flow_updates=4)[-1]
class Wrap(torch.nn.Module):
    def __init__(s, m): super().__init__(); s.m = m
    def forward(s, x):
        y = s.m(x)
        return y["out"] if isinstance(y, dict) else y
for name, ctor, shape, *model_opset in M:
    if only and name not in only: continue
    p = os.path.join(out, name + ".onnx")
    if os.path.exists(p): continue
    try:
        m = ctor(); m.eval()
        # weights torchvision initializes to zeros (ViT's head) would make every output 0
        with torch.no_grad():
            for prm in m.parameters():
                if prm.dim() >= 2 and not prm.any(): prm.normal_(0, 0.02)
        # random BN statistics so that folding is exercised
        for mod in m.modules():
            if isinstance(mod, (torch.nn.BatchNorm2d, torch.nn.BatchNorm3d)):
                mod.running_mean.uniform_(-0.1, 0.1); mod.running_var.uniform_(0.5, 1.5)
        x = torch.randn(*shape)
        dynamic = {"input": {0: "batch"}, "output": {0: "batch"}} if os.environ.get("DYNAMIC_BATCH") else None
        torch.onnx.export(Wrap(m), x, p, opset_version=int(os.environ.get("OPSET", model_opset[0] if model_opset else 13)), input_names=["input"], output_names=["output"],
                          do_constant_folding=False, dynamic_axes=dynamic)
        np.save(os.path.join(out, name + ".input.npy"), x.numpy())
        print("ok", name, flush=True)
    except Exception as e:
        print("FAIL", name, type(e).__name__, str(e)[:200], flush=True)
