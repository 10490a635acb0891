#!/bin/bash
# Batches that do not fit, on the GPU machine (bundle as for run.sh: carry
# [".device"]; PyTorch makes the model, as bench/bench_cuda.sh does), about 3
# minutes. ResNet-50 at batch 65536 first meets the 4 GiB bound of a tensor:
#   1. qforge bench of the FP32 ONNX and of the INT8 .qfm at batch 65536: exit 1,
#      one stderr line naming the batch and the bytes, within 120 s;
#   2. eval and calib at batch 65536: the same, plus the batch that fits; no table;
#   3. qforge bench at the batch eval named: it builds and runs.
# Then the device's memory itself: with all but HOLD_LEFT_GIB (3) GiB of the GPU
# held by a PyTorch process,
#   4. qforge bench of the INT8 .qfm at batch 2048: exit 1, one line naming the
#      batch, the bytes and the bytes free on cuda:0;
#   5. eval at batch 2048 says which batch fits, and bench builds at it.
# Prints one PASS/FAIL line per check; logs in $OUT/logs.tgz.
set -o pipefail
R=$PWD
L=$OUT/logs
mkdir -p "$L"
. bench/device/env.sh
trap 'kill $holder 2>/dev/null; tar -czf $OUT/logs.tgz -C $OUT logs && rm -rf $L' EXIT
Q=/tmp/q/bin/qforge
IMG=${OOM_IMAGES:-$R/.device/data/imagenet/images}  # a folder of ImageNet JPEGs
W=/tmp/oom
mkdir -p $W
export QFORGE_CACHE_DIR=
fails=0

# check NAME STATUS PATTERN -- CMD...: exit status, a one-line stderr matching PATTERN, 120 s at most
check() {
  name=$1 want=$2 pat=$3
  shift 4
  t0=$(date +%s)
  timeout 120 "$@" > $L/$name.out 2> $L/$name.err
  got=$?
  lines=$(grep -vc '^qforge: warning' $L/$name.err)
  secs=$(( $(date +%s) - t0 ))
  if [ $got = "$want" ] && [ "$lines" = 1 ] && grep -qE -- "$pat" $L/$name.err; then
    echo "PASS $name (exit $got, ${secs} s): $(head -c 400 $L/$name.err)"
  else
    echo "FAIL $name (exit $got, want $want; $lines lines; ${secs} s): $(head -c 600 $L/$name.err)"
    fails=$((fails + 1))
  fi
}

# the batch a hint names ("... batch N would fit (--batch N)")
hinted() { sed -n 's/.*would fit (--batch \([0-9]*\)).*/\1/p' $L/$1.err | tail -n 1; }

# builds NAME BATCH: qforge bench of the INT8 .qfm at BATCH builds and runs
builds() {
  if [ -n "$2" ] && timeout 300 $Q bench $W/r50_int8.qfm --batch $2 --device cuda --duration 0.3 > $L/$1.out 2> $L/$1.err; then
    echo "PASS $1: $(grep -h 'images/s' $L/$1.out)"
  else
    echo "FAIL $1 (batch '$2'): $(head -c 600 $L/$1.err)"
    fails=$((fails + 1))
  fi
}

python3 $R/bench/peers/torch_cnn.py resnet50 $W/r50.onnx --batches 1 --seconds 0.1 > $L/torch.json 2> $L/torch.err ||
  { echo "FAIL could not export ResNet-50: $(tail -n 3 $L/torch.err)"; exit 1; }
$Q calib $W/r50.onnx --images $IMG --preset imagenet -n 50 --device cuda --batch 50 --quiet -o $W/r50.calib &&
$Q quant $W/r50.onnx --calib $W/r50.calib --precision int8 -o $W/r50_int8.qfm --quiet ||
  { echo "FAIL could not quantize ResNet-50"; exit 1; }

if [ -z "${HELD_ONLY:-}" ]; then  # HELD_ONLY=1: the memory-held checks alone
check bench_fp32_65536 1 "at batch 65536.* [0-9]+ bytes" -- $Q bench $W/r50.onnx --batch 65536 --device cuda
check bench_int8_65536 1 "at batch 65536.* [0-9]+ bytes" -- $Q bench $W/r50_int8.qfm --batch 65536 --device cuda
check eval_65536 1 "at batch 65536.* bytes.*would fit \(--batch [0-9]+\)" -- \
  $Q eval $W/r50_int8.qfm --images $IMG --synsets $R/.device/data/imagenet/synsets.txt --batch 65536 --device cuda
rm -f $W/huge.calib
check calib_65536 1 "at batch 65536.* bytes.*would fit \(--batch [0-9]+\)" -- \
  $Q calib $W/r50.onnx --images $IMG --preset imagenet --batch 65536 --device cuda -o $W/huge.calib
[ -e $W/huge.calib ] && { echo "FAIL calib_65536 left $W/huge.calib"; fails=$((fails + 1)); }
builds bench_at_hinted "$(hinted eval_65536)"
fi

# hold the GPU's memory but HOLD_LEFT_GIB, so that the engine's own check is what stops a batch
python3 - ${HOLD_LEFT_GIB:-3} > $L/holder.log 2>&1 <<'PY' &
import sys, time, torch
free, total = torch.cuda.mem_get_info()
keep = int(float(sys.argv[1]) * 2**30)
x = torch.empty(max(0, free - keep), dtype=torch.uint8, device="cuda")
print("holding", x.numel(), "of", total, "bytes", flush=True)
time.sleep(300)
PY
holder=$!
for i in $(seq 60); do grep -q holding $L/holder.log && break; sleep 1; done
nvidia-smi --query-gpu=memory.used,memory.total --format=csv | tee -a $L/holder.log
check bench_held_2048 1 "batch 2048 needs [0-9]+ bytes .* of cuda:0 memory .* [0-9]+ bytes .* free" -- \
  $Q bench $W/r50_int8.qfm --batch 2048 --device cuda
check eval_held_2048 1 "batch 2048 needs .*would fit \(--batch [0-9]+\)" -- \
  $Q eval $W/r50_int8.qfm --images $IMG --synsets $R/.device/data/imagenet/synsets.txt --batch 2048 --device cuda
builds bench_held_at_hinted "$(hinted eval_held_2048)"
kill $holder 2>/dev/null
echo "oom checks: $fails failed"
