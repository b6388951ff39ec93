# Exports torchvision detection models (random weights, opset 13, one 3xHxW image as the list
# torchvision's detectors take) for bench/run_torchvision_sweep.sh: their post-processing
# (If/Loop bodies, TopK, NonMaxSuppression, RoiAlign, empty tensors) is what the classification
# sweep does not reach.
#   /usr/bin/python3 bench/export_torchvision_detection.py OUT_DIR [NAME...]
import torch, numpy as np, torchvision.models.detection as det, os, sys
torch.manual_seed(0)
out = sys.argv[1]; os.makedirs(out, exist_ok=True)
for name, ctor, size in [("ssdlite320", lambda: det.ssdlite320_mobilenet_v3_large(weights=None, weights_backbone=None, num_classes=91), 320),
                         ("fasterrcnn_mnv3_320", lambda: det.fasterrcnn_mobilenet_v3_large_320_fpn(weights=None, weights_backbone=None, num_classes=91), 320),
                         ("retinanet_r50", lambda: det.retinanet_resnet50_fpn(weights=None, weights_backbone=None, num_classes=91, min_size=256, max_size=256), 256),
                         ("maskrcnn_r50", lambda: det.maskrcnn_resnet50_fpn(weights=None, weights_backbone=None, num_classes=91, min_size=256, max_size=256), 256),
                         ("keypointrcnn_r50", lambda: det.keypointrcnn_resnet50_fpn(weights=None, weights_backbone=None, min_size=256, max_size=256), 256)]:
    if len(sys.argv) > 2 and name not in sys.argv[2:]: continue
    try:
        m = ctor(); m.eval()
        x = torch.rand(1, 3, size, size)
        torch.onnx.export(m, ([x[0]],), f"{out}/{name}.onnx", opset_version=13, input_names=["input"], do_constant_folding=False)
        np.save(f"{out}/{name}.input.npy", x[0].numpy())
        print("ok", name, flush=True)
    except Exception as e:
        print("FAIL", name, type(e).__name__, str(e)[:300], flush=True)
