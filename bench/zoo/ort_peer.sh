#!/bin/bash
# ONNX Runtime's quantize_static beside qforge's default on the zoo's exports,
# with both of ORT's calibrations (`zoo.py run --ort` records MinMax alone in
# the table: the 2048-bin entropy takes minutes a model). Runs on the GPU
# machine after a bench/zoo/run.sh of the same call, which leaves its exports
# in $ZOO_WORK/onnx. Both tools see the zoo's images: the evenly spaced
# CALIB_N calibration and EVAL_N validation images that qforge's -n takes
# (ort_quant.py --calib-n/--eval-n pick the same). qforge calibrates with its
# default method and evaluates on the GPU (the GPU's INT8 is the CPU engine's,
# bit for bit); ONNX Runtime quantizes per channel (QDQ) and runs on the CPU.
# Usage: bash bench/zoo/ort_peer.sh KEY... (e.g. efficientnet_b0.bn.ts17)
# Prints one JSON line per tool and method.
set -o pipefail
. bench/device/env.sh
D=${ZOO_DATA:-.device/zoo/images} W=${ZOO_WORK:-/tmp/zoo} S=/tmp/ort_peer
Q=${QFORGE:-/tmp/q/bin/qforge} NC=${CALIB_N:-32} NE=${EVAL_N:-50}
mkdir -p $S
for key in "$@"; do
  m=$W/onnx/$key.onnx
  [ -f $m ] || { echo "ort_peer: no export $m (run bench/zoo/run.sh first)" >&2; continue; }
  $Q calib $m --images $D/calib -n $NC --preset imagenet --device cuda --batch 50 --quiet -o $S/$key.calib &&
    $Q quant $m --calib $S/$key.calib --precision int8 -o $S/$key.qfm --quiet &&
    $Q eval $S/$key.qfm --reference $m --images $D/val -n $NE --preset imagenet --device cuda --batch 50 --json --quiet |
      python3 -c "import json,sys; j=json.load(sys.stdin); r=j['reference']; print(json.dumps(dict(model='$key',
        tool='qforge', method='default', images=j['images'], agreement=r['agreement'], sqnr_db=r['sqnr_db'])))"
  python3 bench/peers/ort_quant.py $m --calib $D/calib --eval $D/val --calib-n $NC --eval-n $NE --preset imagenet \
    --synsets ${SYNSETS:-.device/zoo/synsets.txt} --methods ${ORT_METHODS:-minmax,entropy2048} --name $key
done
