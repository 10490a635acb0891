#!/bin/sh
# Models quantized elsewhere against ONNX Runtime running the same file:
# top-1 per image agrees on >= 0.99 of the images (tests/qdq_ort_agree.py) for
# the ONNX model zoo's QOperator MobileNetV2 (mobilenetv2-12-int8.onnx) and the
# Q/DQ models bench/peers/ort_quant.py writes for ResNet-20 and MobileNetV2
# with uint8 activations (zero points), where ONNX Runtime's INT8 is exact
# (tests/ort_int8_exact.py: not on x86 without VNNI, where the agreements are
# only printed). Subsets keep it fast: 500 CIFAR-10
# images, 50 ImageNet ones (bench/bench_qdq.sh runs the full sets). Skips (77)
# without ../shared/data or a python3 with onnxruntime, onnx, numpy and
# Pillow ($QFORGE_PYTHON, else python3, else the venv beside the checkout).
set -u
: "${QFORGE:?}" "${top_srcdir:?}" "${top_builddir:?}"
data=$top_srcdir/../shared/data
[ -r "$data/cifar10/resnet20.onnx" ] && [ -r "$data/imagenet/mobilenetv2-12-int8.onnx" ] ||
  { echo "no $data: skipped"; exit 77; }
py=
for p in ${QFORGE_PYTHON:-} python3 "$top_srcdir/../venv/bin/python3"; do
  if "$p" -c 'import onnxruntime, onnx, numpy, PIL' 2> /dev/null; then py=$p; break; fi
done
[ -n "$py" ] || { echo "no python3 with onnxruntime, onnx, numpy and Pillow: skipped"; exit 77; }
. "$top_srcdir/tests/cli_helpers.sh"
agree="$py $top_srcdir/tests/qdq_ort_agree.py --tensor-predict $top_builddir/tests/tensor_predict"
# Where ONNX Runtime's own INT8 sums saturate (x86 without VNNI), its outputs
# are not the model's: the agreement is printed, not held to 0.99.
probe=$("$py" "$top_srcdir/tests/ort_int8_exact.py" 2>&1)
case $? in
  0) held="" ;;
  10) held="--min 0"
      echo "agreement not checked, ONNX Runtime's INT8 is inexact on this CPU: $probe" ;;
  *) echo "FAIL the ONNX Runtime INT8 probe (tests/ort_int8_exact.py) failed: $probe"; exit 1 ;;
esac
inet="--images $data/imagenet/images --synsets $data/imagenet/synsets.txt --preset imagenet"

check() {
  what=$1
  shift
  if $agree $held "$@" > "$tmp/row" 2> "$tmp/err"; then pass "$what: $(cat "$tmp/row")"
  else fail "$what: $(cat "$tmp/row") $(tail -n 3 "$tmp/err")"; fi
}
check "QOperator MobileNetV2 (zoo int8)" --model "$data/imagenet/mobilenetv2-12-int8.onnx" $inet -n 50
check "Q/DQ ResNet-20, uint8 activations" --model "$tmp/resnet20.u8.onnx" --quantize "$data/cifar10/resnet20.onnx" \
  --calib "$data/cifar10/calib" --calib-n 100 --images "$data/cifar10/test" --preset cifar10 -n 500
check "Q/DQ MobileNetV2, uint8 activations" --model "$tmp/mobilenetv2.u8.onnx" \
  --quantize "$data/imagenet/mobilenetv2-fp32.onnx" --calib "$data/imagenet/images/calib" --calib-n 100 $inet -n 50

# the imported ResNet-20 exported again and read back: the same INT8 compute nodes, by name,
# with the same scales and zero points (tests/test_export_onnx.c compares their weights and biases)
"$QFORGE" quant "$tmp/resnet20.u8.onnx" -o "$tmp/a.qfm" --export-onnx "$tmp/a.onnx" --quiet &&
  "$QFORGE" quant "$tmp/a.onnx" -o "$tmp/b.qfm" --quiet &&
  "$QFORGE" info "$tmp/a.qfm" --nodes | awk '/ int8 / && !/Quantize/ {$1 = ""; print}' > "$tmp/a.txt" &&
  "$QFORGE" info "$tmp/b.qfm" --nodes | awk '/ int8 / && !/Quantize/ {$1 = ""; print}' > "$tmp/b.txt"
if [ $? = 0 ] && [ -s "$tmp/a.txt" ] && cmp -s "$tmp/a.txt" "$tmp/b.txt" && grep -q ' zp ' "$tmp/a.txt"
then pass "export and re-import of the uint8 ResNet-20: $(wc -l < "$tmp/a.txt") identical INT8 nodes"
else fail "export round trip: $(diff "$tmp/a.txt" "$tmp/b.txt" | head -n 6)"; fi

echo "test_qdq_ort: $fails failure(s)"
[ "$fails" = 0 ]
