#!/usr/bin/env python3
"""Checks a Q/DQ ONNX model that qforge exported (qf_export_onnx, `qforge quant
--export-onnx`): onnx.checker (full check, with shape inference) accepts it,
onnxruntime loads and runs it at more than one batch size, and its top-1 on
every image agrees with qforge's own CPU engine on the quantized model for at
least --min-agreement of the images (the issue's bar: 0.99 on the 10,000
CIFAR-10 test images). qforge's predictions come from bench/quant_predict
(lines "relative/path class", one per image). Prints one JSON object; exits 1
when a check fails.
Usage: check_export.py EXPORTED.onnx --images DIR --preset cifar10|imagenet
                       --predictions FILE [--min-agreement 0.99] [--synsets FILE]"""
import argparse
import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import folder_labels, list_images, load_all, predict, synset_labels  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("model")
    ap.add_argument("--images", required=True)
    ap.add_argument("--preset", required=True, choices=["cifar10", "imagenet"])
    ap.add_argument("--predictions", required=True, help="qforge's per-image top-1 (bench/quant_predict)")
    ap.add_argument("--synsets", help="ImageNet-style labels (else class sub-folders)")
    ap.add_argument("--min-agreement", type=float, default=0.99)
    a = ap.parse_args()

    import onnx
    m = onnx.load(a.model)
    onnx.checker.check_model(m, full_check=True)
    ops = {}
    for n in m.graph.node:
        ops[n.op_type] = ops.get(n.op_type, 0) + 1
    opset = max(o.version for o in m.opset_import if o.domain in ("", "ai.onnx"))
    per_axis = sum(1 for n in m.graph.node if n.op_type == "DequantizeLinear" and
                   any(at.name == "axis" for at in n.attribute))

    qf = {}
    with open(a.predictions) as f:
        for line in f:
            path, cls = line.rsplit(None, 1)
            qf[path] = int(cls)
    files = list_images(a.images)
    rel = [os.path.relpath(p, a.images) for p in files]
    missing = [r for r in rel if r not in qf]
    if missing:
        sys.exit(f"check_export: {len(missing)} images have no qforge prediction (first: {missing[0]})")
    x = load_all(files, a.preset)
    ours = np.array([qf[r] for r in rel])
    ort_b64 = predict(a.model, x, batch=64)
    # the exported batch dim is symbolic: another batch size must give the same
    ort_b7 = predict(a.model, x[:70], batch=7)
    labels = synset_labels(files, a.synsets) if a.synsets else folder_labels(files, a.images)
    agree = float(np.mean(ort_b64 == ours))
    res = dict(model=os.path.basename(a.model), opset=opset, ops=ops, per_axis_weight_dq=per_axis,
               images=len(files), agreement=agree, ort_top1=float(np.mean(ort_b64 == labels)),
               qforge_top1=float(np.mean(ours == labels)),
               batch_independent=bool(np.array_equal(ort_b7, ort_b64[:70])), min_agreement=a.min_agreement)
    print(json.dumps(res))
    ok = agree >= a.min_agreement and res["batch_independent"] and ops.get("QuantizeLinear", 0) > 0
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
