#!/bin/bash
# ONNX Runtime's quantize_static beside qforge's default on the zoo's exports
# (issue 15's peer on issue 12's random-weight models). Runs on the GPU machine
# after a bench/zoo/run.sh of the same call, which leaves its exports in
# $ZOO_WORK/onnx. Both tools see the same images, the zoo's: CALIB_N
# calibration and EVAL_N validation images picked as qforge's -n picks them
# (files i*n/count of the sorted list), linked into folders of their own. qforge calibrates with its
# default method on the GPU and evaluates there (the GPU's INT8 is the CPU
# engine's, bit for bit); ONNX Runtime quantizes per channel (QDQ, MinMax and
# 2048-bin entropy) and runs on the CPU (bench/peers/ort_quant.py).
# Usage: bash bench/zoo/ort_peer.sh KEY... (e.g. efficientnet_b0.bn.ts17)
# Prints one JSON line per tool and method.
set -o pipefail
. bench/device/env.sh
D=${ZOO_DATA:-.device/zoo/images} W=${ZOO_WORK:-/tmp/zoo} S=/tmp/ort_peer
Q=${QFORGE:-/tmp/q/bin/qforge}
subset() { # FOLDER N DEST: links to N evenly spaced images of FOLDER (datasets/scan.c's keep_evenly_spaced)
  rm -rf "$3" && mkdir -p "$3"
  ls "$1" | grep -iE '\.(jpe?g|png)$' | LC_ALL=C sort |
    awk -v c="$2" '{f[NR - 1] = $0} END {n = NR; if (c > n) c = n; for (i = 0; i < c; i++) print f[int(i * n / c)]}' |
    while read -r f; do ln -s "$(cd "$1" && pwd)/$f" "$3/$f"; done
}
subset $D/calib ${CALIB_N:-32} $S/calib
subset $D/val ${EVAL_N:-50} $S/val
for key in "$@"; do
  m=$W/onnx/$key.onnx
  [ -f $m ] || { echo "ort_peer: no export $m (run bench/zoo/run.sh first)" >&2; continue; }
  $Q calib $m --images $S/calib --preset imagenet --device cuda --batch 50 --quiet -o $S/$key.calib &&
    $Q quant $m --calib $S/$key.calib --precision int8 -o $S/$key.qfm --quiet &&
    $Q eval $S/$key.qfm --reference $m --images $S/val --preset imagenet --device cuda --batch 50 --json --quiet |
      python3 -c "import json,sys; j=json.load(sys.stdin); r=j['reference']; print(json.dumps(dict(model='$key',
        tool='qforge', method='default', images=j['images'], agreement=r['agreement'], sqnr_db=r['sqnr_db'])))"
  python3 bench/peers/ort_quant.py $m --calib $S/calib --eval $S/val --preset imagenet \
    --synsets ${SYNSETS:-.device/zoo/synsets.txt} --methods ${ORT_METHODS:-minmax,entropy2048} --name $key
done
