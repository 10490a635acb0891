#!/bin/sh
# Models quantized elsewhere, run by qforge's CPU engine against ONNX Runtime
# running the same file, image by image on the full sets (tests/test_qdq_ort.sh
# checks subsets of the same in make check):
#   - the ONNX model zoo's QOperator MobileNetV2 (mobilenetv2-12-int8.onnx), 200 ImageNet images;
#   - ORT quantize_static Q/DQ models (bench/peers/ort_quant.py, MinMax on the
#     calibration images, per-channel int8 weights) with uint8 activations
#     (zero points) and with int8 ones: ResNet-20 on the 10,000 CIFAR-10 test
#     images, MobileNetV2 on the 200 ImageNet images;
#   - NVIDIA ModelOpt ONNX PTQ models of both when $MODELOPT_PYTHON is set.
# Each row: top-1 agreement with ORT's default session, top-1 of both, and how
# far ORT agrees with itself with its graph optimizations off.
# QFORGE_DATA names the data folder (default ../shared/data); QFORGE_DEVICE=cuda runs qforge's side on the GPU (ORT stays on the CPU).
# Usage: bench/bench_qdq.sh [BUILD_DIR]   (python3 with onnxruntime, onnx, numpy, Pillow:
#   $QFORGE_PYTHON, else python3; builds BUILD_DIR/tests/tensor_predict when missing)
set -eu
top=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$top/build}
data=${QFORGE_DATA:-$top/../shared/data}
py=${QFORGE_PYTHON:-python3}
[ -d "$data/cifar10" ] && [ -d "$data/imagenet" ] || { echo "bench_qdq: $data not found" >&2; exit 77; }
[ -x "$build/tests/tensor_predict" ] || make -C "$build" tests/tensor_predict > /dev/null
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
agree="$py $top/tests/qdq_ort_agree.py --tensor-predict $build/tests/tensor_predict --min 0 --ort-noopt --device ${QFORGE_DEVICE:-cpu}"
inet="--images $data/imagenet/images --synsets $data/imagenet/synsets.txt --preset imagenet"
cifar="--images $data/cifar10/test --preset cifar10"

$agree --name "MobileNetV2 zoo QOperator" --model "$data/imagenet/mobilenetv2-12-int8.onnx" $inet
for act in uint8 int8; do
  $agree --name "ResNet-20 Q/DQ $act" --model "$tmp/r20.$act.onnx" --quantize "$data/cifar10/resnet20.onnx" \
    --calib "$data/cifar10/calib" --calib-n 1000 --activations $act $cifar
  $agree --name "MobileNetV2 Q/DQ $act" --model "$tmp/mnv2.$act.onnx" --quantize "$data/imagenet/mobilenetv2-fp32.onnx" \
    --calib "$data/imagenet/images/calib" --calib-n 100 --activations $act $inet
done
# NVIDIA ModelOpt's ONNX PTQ (max calibration through onnxruntime on the CPU, FP32 float ops),
# where $MODELOPT_PYTHON is a python with nvidia-modelopt[onnx] (bench/peers/modelopt_quant.py)
if [ -n "${MODELOPT_PYTHON:-}" ]; then
  "$MODELOPT_PYTHON" "$top/bench/peers/modelopt_quant.py" "$data/cifar10/resnet20.onnx" "$tmp/r20.modelopt.onnx" \
    --calib "$data/cifar10/calib" --preset cifar10 --n 500 > "$tmp/modelopt.log" 2>&1 || { tail -n 5 "$tmp/modelopt.log" >&2; exit 1; }
  $agree --name "ResNet-20 ModelOpt PTQ" --model "$tmp/r20.modelopt.onnx" $cifar
  "$MODELOPT_PYTHON" "$top/bench/peers/modelopt_quant.py" "$data/imagenet/mobilenetv2-fp32.onnx" "$tmp/mnv2.modelopt.onnx" \
    --calib "$data/imagenet/images/calib" --preset imagenet --n 100 > "$tmp/modelopt.log" 2>&1 || { tail -n 5 "$tmp/modelopt.log" >&2; exit 1; }
  $agree --name "MobileNetV2 ModelOpt PTQ" --model "$tmp/mnv2.modelopt.onnx" $inet
fi
