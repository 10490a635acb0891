#!/usr/bin/env python3
"""Top-1 agreement, image by image, between qforge and ONNX Runtime running
the same quantized ONNX file (a Q/DQ or QOperator model quantized elsewhere).
Both read the very same preprocessed tensors (bench/peers/common.py): qforge
through tests/tensor_predict (the model made qforge's INT8 graph with its own
scales), ORT through an InferenceSession. With --quantize FP32.onnx the model
is first written by bench/peers/ort_quant.py's quantize_static (MinMax on
--calib-n images of --calib; --activations uint8 gives asymmetric
activations). Prints one JSON line; exits 1 when the agreement is below --min.
Used by tests/test_qdq_ort.sh (subsets) and bench/bench_qdq.sh (full sets)."""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

import numpy as np

here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(here, "..", "bench", "peers"))
from common import folder_labels, list_images, load_all, predict, synset_labels  # noqa: E402


def spread(files, n):
    """n files evenly spread over the sorted list (every class of CIFAR's folders), or all."""
    if not n or n >= len(files):
        return files
    step = len(files) / n
    return [files[int(k * step)] for k in range(n)]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tensor-predict", required=True, help="tests/tensor_predict of the build")
    ap.add_argument("--model", required=True, help="the quantized ONNX model (written first with --quantize)")
    ap.add_argument("--quantize", help="FP32 ONNX model to quantize with ORT's quantize_static into --model")
    ap.add_argument("--calib", help="calibration image folder (with --quantize)")
    ap.add_argument("--calib-n", type=int, default=100)
    ap.add_argument("--activations", default="uint8", choices=["int8", "uint8"])
    ap.add_argument("--images", required=True)
    ap.add_argument("--preset", required=True, choices=["cifar10", "imagenet"])
    ap.add_argument("--synsets", help="ImageNet-style labels (else class sub-folders)")
    ap.add_argument("-n", type=int, default=0, help="images, evenly spread (0: all)")
    ap.add_argument("--batch", type=int, default=50)
    ap.add_argument("--device", default="cpu", help="qforge's engine: cpu or cuda[:N] (ORT runs on the CPU)")
    ap.add_argument("--min", type=float, default=0.99, help="least agreement that passes")
    ap.add_argument("--name", default="")
    ap.add_argument("--ort-noopt", action="store_true",
                    help="also ORT with graph optimizations off (its float Q/DQ path) against ORT's default "
                         "(integer kernels): how far ORT agrees with itself")
    a = ap.parse_args()

    if a.quantize:
        import contextlib
        import ort_quant
        calib = spread(list_images(a.calib), a.calib_n)
        with contextlib.redirect_stdout(sys.stderr):
            ort_quant.quantize(a.quantize, a.model, calib, a.preset, "minmax", a.activations)
    files = spread(list_images(a.images), a.n)
    labels = synset_labels(files, a.synsets) if a.synsets else folder_labels(files, a.images)
    x = load_all(files, a.preset)
    work = tempfile.mkdtemp(prefix="qdq_ort_agree.")  # never beside the model: it may lie in shared data
    tensors = os.path.join(work, "inputs.f32")
    x.tofile(tensors)
    t0 = time.perf_counter()
    ref = predict(a.model, x)
    t_ort = time.perf_counter() - t0
    t0 = time.perf_counter()
    out = subprocess.run([a.tensor_predict, a.model, tensors, "--batch", str(a.batch), "--device", a.device],
                         capture_output=True, text=True)
    t_qf = time.perf_counter() - t0
    shutil.rmtree(work, ignore_errors=True)
    if out.returncode != 0:
        sys.exit(f"qdq_ort_agree: tensor_predict failed: {out.stderr.strip()}")
    got = np.array([int(line.split()[1]) for line in out.stdout.splitlines()], np.int64)
    if len(got) != len(files):
        sys.exit(f"qdq_ort_agree: tensor_predict gave {len(got)} predictions for {len(files)} images")
    agree = float(np.mean(got == ref))
    row = dict(model=a.name or os.path.basename(a.model), device=a.device, images=len(files), agreement=agree,
               disagree=int(np.sum(got != ref)), top1_qforge=float(np.mean(got == labels)),
               top1_ort=float(np.mean(ref == labels)), seconds_qforge=round(t_qf, 1), seconds_ort=round(t_ort, 1))
    if a.ort_noopt:
        import onnxruntime as ort
        so = ort.SessionOptions()
        so.log_severity_level = 3
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
        sess = ort.InferenceSession(a.model, so, providers=["CPUExecutionProvider"])
        name, fixed = sess.get_inputs()[0].name, sess.get_inputs()[0].shape[0]
        b = fixed if isinstance(fixed, int) else 64
        p = np.concatenate([sess.run(None, {name: x[i:i + b]})[0].reshape(len(x[i:i + b]), -1).argmax(1)
                            for i in range(0, len(x), b)])
        row["ort_noopt_vs_ort"] = float(np.mean(p == ref))
        row["qforge_vs_ort_noopt"] = float(np.mean(p == got))
    print(json.dumps(row))
    if agree < a.min:
        print(f"qdq_ort_agree: agreement {agree:.4f} is below {a.min}", file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
