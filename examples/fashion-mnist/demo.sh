#!/bin/sh
# The bundled example end to end (`make demo`): Fashion-MNIST test and training
# images as PNG class folders; one command that calibrates on 1000 training
# images, quantizes to INT8 and checks the result on 1000 others; the same
# table at other choices (entropy and MSE thresholds, FP16); --precision best; then the
# accuracy of each side by side on the 10,000 test images.  Usage: demo.sh BUILD_DIR SRC_DIR
set -eu
build=$1
src=$2
idx=/usr/share/datasets/fashion-mnist
qforge=$build/tools/qforge
model=$src/examples/fashion-mnist/model.onnx
work=$build/fashion-mnist
pp="--gray --mean 0.286 --std 0.353"

[ -r "$idx/t10k-images-idx3-ubyte.gz" ] || { echo "demo: $idx not found (apt-get install dataset-fashion-mnist)" >&2; exit 1; }
mkdir -p "$work"
for split in t10k:test train:train; do
  name=${split%%:*} dir=$work/${split#*:}
  [ -d "$dir" ] || "$build/examples/fashion-mnist/idx2png" "$idx/$name-images-idx3-ubyte.gz" \
      "$idx/$name-labels-idx1-ubyte.gz" "$dir"
done

echo "== one command: calibrate on 1000 of the 60,000 training images (every method), quantize to INT8,"
echo "   check against FP32 on 1000 training images calibration did not see"
"$qforge" quant "$model" --images "$work/train" -n 1000 --held-out 1000 $pp --method all \
  --calib-out "$work/model.calib" --report "$work/calib-report.html" -o "$work/model-int8.qfm"
echo "== the same table with the entropy (TensorRT's) and MSE thresholds, and at FP16 (the three-command form's quant step)"
"$qforge" quant "$model" --calib "$work/model.calib" --precision int8 --method entropy -o "$work/model-int8-entropy.qfm"
"$qforge" quant "$model" --calib "$work/model.calib" --precision int8 --method mse -o "$work/model-int8-mse.qfm"
"$qforge" quant "$model" --calib "$work/model.calib" --precision fp16 -o "$work/model-fp16.qfm"
echo "== --precision best: the INT8 layers that cost the most agreement return to FP16"
"$qforge" quant "$model" --images "$work/train" -n 1000 --held-out 1000 $pp --precision best -o "$work/model-best.qfm"
echo "== evaluate on the 10,000 test images"
printf '%-12s %8s %10s %10s\n' precision top1 agreement sqnr_db
# int8 uses the default threshold (auto: per tensor, the candidate that costs its readers least);
# int8-entropy and int8-mse the table's other columns
row() { # precision model
  "$qforge" eval "$2" --images "$work/test" --reference "$model" $pp --quiet --json |
    python3 -c 'import json,sys; r=json.load(sys.stdin); f=r["reference"]; print("%-12s %8.4f %10.4f %10.1f" % (sys.argv[1], r["top1"], f["agreement"], f["sqnr_db"]))' "$1" 2>/dev/null ||
  "$qforge" eval "$2" --images "$work/test" --reference "$model" $pp --quiet
}
row fp32 "$model"
row fp16 "$work/model-fp16.qfm"
row int8 "$work/model-int8.qfm"
row int8-entropy "$work/model-int8-entropy.qfm"
row int8-mse "$work/model-int8-mse.qfm"
row best "$work/model-best.qfm"
echo "calibration report: $work/calib-report.html"
