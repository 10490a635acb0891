#!/usr/bin/env python3
"""The peer of `qforge quant` for bench/bench_quant_accuracy.sh: ONNX Runtime's
quantize_static (QDQ format, per-channel weights, QInt8 activations (QUInt8,
asymmetric, with --activations uint8) and weights, CalibrationMethod.MinMax
and .Entropy, the latter also over a 2048-bin histogram) on the same model and the same
calibration images, then top-1 of the FP32 model and of each quantized model
with onnxruntime on the evaluation images, and each one's top-1 agreement with
FP32 and output SQNR against it (as qforge eval computes it). Prints one JSON
object per line (model, tool, method, precision, images, top1, agreement,
sqnr_db), or a table with --table. The preprocessing options are
qforge's: a preset, then the options given beside it in its place.
Usage: ort_quant.py MODEL.onnx --calib DIR --eval DIR [--preset cifar10|imagenet]
                    [--resize N] [--crop N] [--mean A,B,C] [--std A,B,C] [--synsets FILE] [--methods minmax,entropy,entropy2048] [--name NAME]
                    [--calib-n N] [--eval-n N]
                    [--keep DIR] [--table]
Labels: class sub-folders of the eval DIR, or --synsets (the wnid that starts
each file name), exactly as `qforge eval` assigns them. On a CPU where ONNX
Runtime's INT8 saturates (x86 without VNNI, common.ort_int8_exact) it warns,
and each INT8 row says ort_int8_exact: false."""
import argparse
import contextlib
import json
import os
import shutil
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import (PRESETS, calib_reader, evenly_spaced, folder_labels, input_batch, list_images, load_all, logits,  # noqa: E402
                    ort_int8_exact, sqnr_db, synset_labels)

# entropy2048: CalibrationMethod.Entropy over a 2048-bin histogram (TensorRT's
# and qforge's resolution). quantize_static's own Entropy keeps the calibrator's
# default of 128 bins for 128 quantized levels, where the KL search has a
# single candidate, the whole range: it then equals MinMax. The ranges of the
# 2048-bin calibrator reach quantize_static through its calibration cache.
METHODS = ("minmax", "entropy", "entropy2048")


def quantize(model, out, files, preset, method, activations="int8"):
    """quantize_static with the settings of the issue (activations: "int8",
    symmetric, or "uint8", asymmetric with zero points). The model is first
    upgraded to opset 13 where older, then run through ORT's recommended
    pre-processing (shape inference, graph optimization), falling back to the
    upgraded model where that step fails."""
    from onnxruntime.quantization import CalibrationMethod, QuantFormat, QuantType, quantize_static
    from onnxruntime.quantization.shape_inference import quant_pre_process
    import onnx
    from onnx import version_converter
    # per-channel QDQ (DequantizeLinear's axis) needs opset 13; quantize_static
    # does not upgrade an older model itself
    m = onnx.load(model)
    opset = max(o.version for o in m.opset_import if o.domain in ("", "ai.onnx"))
    src = model
    if opset < 13:
        src = out + ".opset13.onnx"
        onnx.save(version_converter.convert_version(m, 13), src)
    pre = out + ".pre.onnx"
    try:
        quant_pre_process(src, pre, skip_symbolic_shape=True)
        src = pre
    except Exception as e:  # the pre-processing is an optimization, not a requirement
        print(f"ort_quant: quant_pre_process failed ({e}); quantizing the model as is", file=sys.stderr)
    name, _ = input_batch(src)
    cm = CalibrationMethod.MinMax if method == "minmax" else CalibrationMethod.Entropy
    reader, cache = calib_reader(files, preset, name), None
    if method == "entropy2048":
        from onnxruntime.quantization.calibrate import create_calibrator, save_tensors_data
        cal = create_calibrator(src, None, augmented_model_path=out + ".augmented.onnx", calibrate_method=cm,
                                extra_options={"num_bins": 2048, "num_quantized_bins": 128})
        cal.collect_data(reader)
        cache, reader = out + ".ranges.json", None
        save_tensors_data(cal.compute_data(), cache)
    act = QuantType.QUInt8 if activations == "uint8" else QuantType.QInt8
    quantize_static(src, out, reader, quant_format=QuantFormat.QDQ, per_channel=True,
                    activation_type=act, weight_type=QuantType.QInt8, calibrate_method=cm,
                    calibration_cache_path=cache)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("model")
    ap.add_argument("--calib", required=True, help="calibration image folder")
    ap.add_argument("--eval", required=True, help="evaluation image folder")
    ap.add_argument("--preset", choices=["cifar10", "imagenet"])
    ap.add_argument("--resize", type=int)
    ap.add_argument("--crop", type=int)
    ap.add_argument("--mean", type=lambda v: tuple(float(x) for x in v.split(",")))
    ap.add_argument("--std", type=lambda v: tuple(float(x) for x in v.split(",")))
    ap.add_argument("--synsets", help="ImageNet-style labels (else class sub-folders)")
    ap.add_argument("--calib-n", type=int, help="calibrate on the evenly spaced subset qforge calib -n takes")
    ap.add_argument("--eval-n", type=int, help="evaluate on the evenly spaced subset qforge eval -n takes")
    ap.add_argument("--methods", default=",".join(METHODS))
    ap.add_argument("--name", help="model name in the output (default: the file name)")
    ap.add_argument("--keep", help="folder to keep the quantized models in")
    ap.add_argument("--activations", default="int8", choices=["int8", "uint8"],
                    help="activation type: int8 (symmetric, the default) or uint8 (asymmetric, with zero points)")
    ap.add_argument("--table", action="store_true", help="print a table instead of JSON lines")
    a = ap.parse_args()
    methods = [m for m in a.methods.split(",") if m]
    for m in methods:
        if m not in METHODS:
            ap.error(f"unknown method {m} (expected {', '.join(METHODS)})")
    pp = dict(PRESETS[a.preset]) if a.preset else dict(resize=0, crop=0, mean=(0.0,) * 3, std=(1.0,) * 3)
    pp.update({k: getattr(a, k) for k in ("resize", "crop", "mean", "std") if getattr(a, k) is not None})
    name = a.name or os.path.splitext(os.path.basename(a.model))[0]
    calib = evenly_spaced(list_images(a.calib), a.calib_n)
    files = evenly_spaced(list_images(a.eval), a.eval_n)
    if not calib or not files:
        sys.exit(f"ort_quant: no images in {a.calib if not calib else a.eval}")
    labels = synset_labels(files, a.synsets) if a.synsets else folder_labels(files, a.eval)
    x = load_all(files, pp)

    got, exact = ort_int8_exact()
    if got != exact:
        print(f"ort_quant: warning: ONNX Runtime's INT8 saturates on this CPU (no VNNI: 64 x 255 x 127 gave {got}, "
              f"not {exact}); its INT8 rows are not what the model gives on a CPU with VNNI", file=sys.stderr)
    work = a.keep or tempfile.mkdtemp(prefix="ort_quant.")
    os.makedirs(work, exist_ok=True)
    rows = []
    try:
        ref_y = logits(a.model, x)
        ref = np.argmax(ref_y, axis=1)
        rows.append(dict(model=name, tool="onnxruntime", method="-", precision="fp32", images=len(files),
                         top1=float(np.mean(ref == labels)), agreement=1.0, sqnr_db=None))
        for m in methods:
            out = os.path.join(work, f"{name}.ort-{m}-{a.activations}.onnx")
            t0 = time.perf_counter()
            # ORT's calibrators print progress on stdout, which carries our rows
            with contextlib.redirect_stdout(sys.stderr):
                quantize(a.model, out, calib, pp, m, a.activations)
            dt = time.perf_counter() - t0
            y = logits(out, x)
            p = np.argmax(y, axis=1)
            label = m if a.activations == "int8" else f"{m}+uint8"
            rows.append(dict(model=name, tool="onnxruntime", method=label, precision="int8", images=len(files),
                             top1=float(np.mean(p == labels)), agreement=float(np.mean(p == ref)),
                             sqnr_db=round(sqnr_db(ref_y, y), 3), calib_images=len(calib), quantize_seconds=round(dt, 1),
                             ort_int8_exact=got == exact))
    finally:
        if not a.keep:
            shutil.rmtree(work, ignore_errors=True)
    if a.table:
        print(f"{'model':<14}{'tool':<13}{'method':<13}{'precision':<10}{'images':>7}{'top-1':>9}{'agree':>9}{'SQNR dB':>9}")
        for r in rows:
            db = "-" if r["sqnr_db"] is None else f"{r['sqnr_db']:.2f}"
            print(f"{r['model']:<14}{r['tool']:<13}{r['method']:<13}{r['precision']:<10}{r['images']:>7}"
                  f"{r['top1']:>9.4f}{r['agreement']:>9.4f}{db:>9}")
    else:
        for r in rows:
            print(json.dumps(r))


if __name__ == "__main__":
    main()
