"""ONNX Runtime's static quantization calibration on the same model and images
as `qforge calib`, for bench/bench_calib.sh. Prints one line of JSON with the
images/s of the calibration step (quantize_static with CalibrationMethod.Entropy,
which collects histograms of every activation and runs the KL search)."""
import argparse, json, os, sys, tempfile, time
import onnx
from onnxruntime.quantization import CalibrationMethod, QuantFormat, QuantType, quantize_static
sys.path.insert(0, os.path.dirname(__file__))
from common import calib_reader, list_images


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("--images", required=True)
    ap.add_argument("--preset", default="cifar10")
    ap.add_argument("--method", default="entropy", choices=["entropy", "minmax"])
    ap.add_argument("-o", "--output", default=None)
    a = ap.parse_args()
    files = list_images(a.images)
    name = onnx.load(a.model).graph.input[0].name
    out = a.output or os.path.join(tempfile.mkdtemp(), "ort_q.onnx")
    method = CalibrationMethod.Entropy if a.method == "entropy" else CalibrationMethod.MinMax
    t0 = time.perf_counter()
    quantize_static(a.model, out, calib_reader(files, a.preset, name), quant_format=QuantFormat.QDQ,
                    per_channel=True, activation_type=QuantType.QInt8, weight_type=QuantType.QInt8,
                    calibrate_method=method)
    dt = time.perf_counter() - t0
    print(json.dumps({"tool": "onnxruntime", "method": a.method, "images": len(files), "seconds": dt,
                      "images_per_second": len(files) / dt}))


if __name__ == "__main__":
    main()
