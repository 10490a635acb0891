#!/usr/bin/env python3
"""NVIDIA ModelOpt's ONNX PTQ (modelopt.onnx.quantization, INT8, max
calibration through onnxruntime on the CPU) of an FP32 model on N evenly
spaced calibration images preprocessed as qforge's presets do; writes the Q/DQ
model for bench/bench_qdq.sh to compare qforge with onnxruntime on. Needs a
python with nvidia-modelopt[onnx] (and its torch); not a qforge dependency.
Usage: modelopt_quant.py MODEL.onnx OUT.onnx --calib DIR --preset cifar10|imagenet [--n N] [--high fp32|fp16]"""
import argparse
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import input_batch, list_images, load_all  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("model")
    ap.add_argument("out")
    ap.add_argument("--calib", required=True)
    ap.add_argument("--preset", required=True, choices=["cifar10", "imagenet"])
    ap.add_argument("--n", type=int, default=500)
    ap.add_argument("--method", default="max", choices=["max", "entropy"])
    ap.add_argument("--high", default="fp32", choices=["fp32", "fp16"],
                    help="ModelOpt's high_precision_dtype: the float ops' (and scales') type (its default is fp16)")
    a = ap.parse_args()
    from modelopt.onnx.quantization import quantize
    files = list_images(a.calib)
    step = max(1, len(files) // a.n)
    x = load_all(files[::step][:a.n], a.preset)
    import onnx
    from onnx import version_converter
    src = a.model
    m = onnx.load(src)
    if max(o.version for o in m.opset_import if o.domain in ("", "ai.onnx")) < 13:
        # an old opset (resnet20.onnx: 7, IR 3) fails ModelOpt's checker: upgraded as ort_quant.py does
        src = a.out + ".opset13.onnx"
        m = version_converter.convert_version(m, 13)
        m.ir_version = max(m.ir_version, 7)
        onnx.save(m, src)
    name, fixed = input_batch(src)
    if fixed:  # a model with a fixed batch dim (resnet20.onnx: 1) is calibrated at that batch
        x = x[: len(x) // fixed * fixed]
    quantize(onnx_path=src, quantize_mode="int8", calibration_data={name: x}, calibration_method=a.method,
             calibration_eps=["cpu"], high_precision_dtype=a.high, output_path=a.out)


if __name__ == "__main__":
    main()
