#!/bin/sh
# GPU benchmark, one command on the GPU machine: exports torchvision's
# ResNet-50 (and MobileNetV2) to ONNX, calibrates with qforge on the GPU on
# ImageNet images, quantizes to FP16 and INT8 .qfm files, runs `qforge bench`
# at batch 1, 32 and 256, and times PyTorch eager FP16 on the same
# architectures in the same run (bench/peers/torch_cnn.py). PRECS picks the
# .qfm variants (default fp16 int8 int8pt).
#   usage: bench/bench_cuda.sh QFORGE IMAGES_DIR OUT_DIR [ARCH...]
# QFORGE is the qforge binary, IMAGES_DIR a folder of ImageNet JPEGs (e.g.
# ../shared/data/imagenet/images), OUT_DIR receives models, tables and JSON.
set -e
Q=$1
IMAGES=$2
OUT=$3
shift 3
ARCHS=${*:-resnet50 mobilenet_v2}
HERE=$(cd "$(dirname "$0")" && pwd)
BATCHES=${BATCHES:-1,32,256}
mkdir -p "$OUT"
for a in $ARCHS; do
  echo "== $a"
  python3 "$HERE/peers/torch_cnn.py" $a "$OUT/$a.onnx" --batches $BATCHES > "$OUT/${a}_torch.json"
  cat "$OUT/${a}_torch.json"
  "$Q" calib "$OUT/$a.onnx" --images "$IMAGES" --preset imagenet -n 100 --device cuda --batch 50 --quiet \
    -o "$OUT/$a.calib"
  # int8pt: INT8 with per-tensor weight scales (cuBLASLt's own int8 epilogue on the GPU)
  for p in ${PRECS:-fp16 int8 int8pt}; do
    if [ $p = int8pt ]; then qa="--precision int8 --per-tensor-weights"; else qa="--precision $p"; fi
    "$Q" quant "$OUT/$a.onnx" --calib "$OUT/$a.calib" $qa -o "$OUT/${a}_$p.qfm" --quiet
    "$Q" bench "$OUT/${a}_$p.qfm" --batch $BATCHES --json > "$OUT/${a}_${p}_bench.json"
    cat "$OUT/${a}_${p}_bench.json"
  done
done
