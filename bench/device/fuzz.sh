#!/bin/bash
# Optional: the long libFuzzer run (tests/fuzz/README.md) on the GPU machine's
# CPU cores, for when the shared development machine cannot give it the hours.
# Here first, after `make fuzz` in the CUDA build folder B:
#   B=/tmp/build-cuda sh bench/device/make_bundle.sh $B/fuzz-build/tests/fuzz/fuzz_*
#   cp -r build/fuzz-corpus .device/     # the local long run's corpus, if any
# then one device call, carry [".device"]: bash bench/device/fuzz.sh [SECONDS]
# Every harness runs at once for SECONDS (default 540), forked over cores in
# proportion to its cost (WORKERS), crashes kept. Prints per harness the
# executions and the coverage; $OUT/fuzz.tgz holds each grown corpus and any
# crashing input (unpack into build/ to continue locally).
set -o pipefail
R=$PWD
L=$OUT/logs
mkdir -p "$L"
. bench/device/env.sh
secs=${1:-540}
W=$OUT/fuzz
mkdir -p $W/crashes
export FUZZ_BIN=/tmp/q/bin TMPDIR=/dev/shm top_srcdir=$R
trap 'tar -czf $OUT/fuzz.tgz -C $OUT fuzz logs 2>/dev/null; rm -rf $W $L' EXIT
for hw in ${WORKERS:-onnx:3 qfm:3 labels:3 triton:2 image:2 calib:1 tactics:1}; do
  h=${hw%%:*} n=${hw#*:}
  [ -x $FUZZ_BIN/fuzz_$h ] || { echo "no fuzz_$h in the bundle"; continue; }
  mkdir -p $W/fuzz-corpus/$h /tmp/seeds/$h
  [ -d .device/fuzz-corpus/$h ] && cp .device/fuzz-corpus/$h/* $W/fuzz-corpus/$h/ 2>/dev/null
  sh tests/fuzz/run.sh seeds $h /tmp/seeds/$h
  opts=$(sh tests/fuzz/run.sh options $h)
  $FUZZ_BIN/fuzz_$h -rss_limit_mb=2048 -malloc_limit_mb=1024 -timeout=30 -fork=$n -ignore_crashes=1 \
    -ignore_ooms=1 -ignore_timeouts=1 -max_total_time=$secs -artifact_prefix=$W/crashes/$h- $opts \
    $W/fuzz-corpus/$h /tmp/seeds/$h > $L/fuzz_$h.log 2>&1 &
done
wait
for hw in ${WORKERS:-onnx:3 qfm:3 labels:3 triton:2 image:2 calib:1 tactics:1}; do
  h=${hw%%:*}
  echo "fuzz_$h: $(grep -E '^#[0-9]+: cov' $L/fuzz_$h.log | tail -n 1)"
done
ls $W/crashes | sed 's/^/crashing input: /'
exit 0
