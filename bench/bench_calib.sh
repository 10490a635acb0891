#!/bin/sh
# Calibration benchmark: qforge calib --method all on the CPU against ONNX
# Runtime's quantize_static (CalibrationMethod.Entropy), same model, same 1000
# CIFAR-10 calibration images, same machine, RUNS (default 3) runs each,
# back to back. Reports images/s from the median wall time and the largest
# peak resident memory (GNU time's maximum RSS).
# Usage: bench/bench_calib.sh [BUILD_DIR]   (needs ../shared/data and python3 with onnxruntime)
set -eu
top=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$top/build}
data=$top/../shared/data/cifar10
[ -d "$data" ] || { echo "bench_calib: $data not found" >&2; exit 77; }
qforge=$build/tools/qforge
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
TIME=/usr/bin/time

RUNS=${RUNS:-3}
# median wall time of RUNS runs; peak RSS is the largest seen
median() { sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }

echo "== qforge calib (method all, CPU), $RUNS runs"
: > "$tmp/q.all"
for r in $(seq "$RUNS"); do
  $TIME -f "%e %M" -o "$tmp/q.time" "$qforge" calib "$data/resnet20.onnx" --images "$data/calib" --preset cifar10 \
    --method all -o "$tmp/r20.calib" --quiet
  cat "$tmp/q.time" >> "$tmp/q.all"
done
q_s=$(cut -d' ' -f1 "$tmp/q.all" | median)
q_kb=$(cut -d' ' -f2 "$tmp/q.all" | sort -n | tail -1)
q_n=$(sed -n 's/^images //p' "$tmp/r20.calib")
# validate before quoting: a table with every tensor and sane thresholds
q_t=$(sed -n 's/^tensors //p' "$tmp/r20.calib")
[ "$q_n" = 1000 ] && [ "$q_t" -gt 40 ] || { echo "bench_calib: qforge table looks wrong" >&2; exit 1; }

echo "== onnxruntime quantize_static (Entropy), $RUNS runs"
: > "$tmp/o.all"
for r in $(seq "$RUNS"); do
  $TIME -f "%e %M" -o "$tmp/o.time" python3 "$top/bench/peers/ort_calib.py" "$data/resnet20.onnx" \
    --images "$data/calib" --preset cifar10 --method entropy -o "$tmp/ort.onnx" > "$tmp/o.json"
  cat "$tmp/o.time" >> "$tmp/o.all"
done
o_s=$(cut -d' ' -f1 "$tmp/o.all" | median)
o_kb=$(cut -d' ' -f2 "$tmp/o.all" | sort -n | tail -1)

python3 - "$q_s" "$q_kb" "$o_s" "$o_kb" <<'PY'
import sys
qs, qkb, os_, okb = map(float, sys.argv[1:])
n = 1000
print(f"{'tool':<34}{'images/s':>10}{'peak RSS MiB':>14}")
print(f"{'qforge calib --method all':<34}{n/qs:>10.1f}{qkb/1024:>14.1f}")
print(f"{'onnxruntime quantize_static':<34}{n/os_:>10.1f}{okb/1024:>14.1f}")
print(f"throughput ratio qforge/ort: {(n/qs)/(n/os_):.1f}x   memory ratio ort/qforge: {okb/qkb:.1f}x")
PY
