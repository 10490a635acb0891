#!/bin/sh
# Runs the libFuzzer harnesses that `make fuzz` built in fuzz-build/ (run from
# the build folder that holds it, or set FUZZ_BIN to the harnesses' folder).
#   run.sh smoke            each harness for FUZZ_SECONDS (30) from its seeds, two at a
#                           time; one line per harness; fails if any harness fails
#   run.sh long H [RUNS]    harness H (onnx, qfm, ...) for about RUNS executions (10000000),
#                           or FUZZ_MAX_TIME seconds if that comes first, at nice 19 in one
#                           worker process that a crash does not stop; its corpus is kept in
#                           fuzz-corpus/H, crashing inputs in fuzz-crashes/
#   run.sh seeds H DIR      gathers H's seeds into DIR: tests/fuzz/seeds/H, the bad inputs
#                           of tests/, and (where ../shared/data exists) real models and images
#   run.sh options H        libFuzzer's options for H (dictionary, input length)
set -eu
src=$(cd "$(dirname "$0")/../.." && pwd)
bin=${FUZZ_BIN:-$PWD/fuzz-build/tests/fuzz}
data=$src/../shared/data
# libFuzzer's limits for every run: the malloc limit flags any single
# allocation a hostile input could make huge
LIMITS="-rss_limit_mb=2048 -malloc_limit_mb=1024 -timeout=30"
# the harnesses write each input to a file: in memory that costs a tenth of a disk's time
if [ -z "${TMPDIR:-}" ] && [ -d /dev/shm ] && [ -w /dev/shm ]; then TMPDIR=/dev/shm; export TMPDIR; fi

harnesses() {
  for h in onnx qfm calib image labels tactics triton; do
    [ -x "$bin/fuzz_$h" ] && echo $h
  done
  return 0
}

# seeds H DIR
seeds() {
  h=$1 dir=$2
  mkdir -p "$dir"
  [ -d "$src/tests/fuzz/seeds/$h" ] && cp "$src/tests/fuzz/seeds/$h"/* "$dir/"
  case $h in
    onnx)
      cp "$src"/tests/bad/*.onnx "$dir/"
      [ -f "$data/cifar10/resnet20.onnx" ] && cp "$data/cifar10/resnet20.onnx" "$dir/" ;;
    qfm)
      real_models
      cp "$PWD"/fuzz-real/*.qfm "$dir/" 2>/dev/null || true
      # test_qfm's corrupted files (truncations, bit flips), where make check has run
      cp "$PWD"/tests/bad/qfm/*.qfm "$dir/" 2>/dev/null || true ;;
    calib)
      real_models
      cp "$PWD"/fuzz-real/*.calib "$dir/" 2>/dev/null || true ;;
    image)
      cp "$src"/tests/images/bad/* "$dir/"
      [ -d "$src/tests/bad/image" ] && cp "$src"/tests/bad/image/* "$dir/"
      if [ -d "$data" ]; then
        for f in "$data"/cifar10/calib/cat/000[0-4].jpg "$data"/cifar10/calib-png/dog/000[0-4].png; do
          [ -f "$f" ] && cp "$f" "$dir/cifar_$(basename "$(dirname "$f")")_$(basename "$f")"
        done
        # the three smallest ImageNet JPEGs (one is grayscale)
        ls -S "$data"/imagenet/images/val/*.JPEG 2>/dev/null | tail -n 3 | while read -r f; do cp "$f" "$dir/"; done
      fi ;;
    labels)
      cp "$src/examples/fashion-mnist/classes.txt" "$dir/fashion_classes.txt"
      [ -f "$data/imagenet/synsets.txt" ] && cp "$data/imagenet/synsets.txt" "$dir/" ;;
  esac
  # crashers found and fixed before: tests/bad/<harness>/ (named after what they broke)
  [ -d "$src/tests/bad/$h" ] && [ "$h" != image ] && cp "$src/tests/bad/$h"/* "$dir/"
  return 0
}

# per harness: the dictionary, and inputs as long as the real models' files
# (others stay small, so fast); FUZZ_MAX_LEN overrides the length, as a long
# run may once its corpus holds small inputs that cover what the large seeds did
options() {
  case $1 in
    onnx) len=1200000; echo "-dict=$src/tests/fuzz/onnx.dict" ;;
    qfm) len=1200000 ;;
    labels | tactics) len=4096 ;;
    *) len=65536 ;;
  esac
  echo "-max_len=${FUZZ_MAX_LEN:-$len}"
}

# ResNet-20 (../shared) calibrated on 20 CIFAR images and quantized, with the
# qforge of this build folder; made once into fuzz-real/
real_models() {
  r=$PWD/fuzz-real
  [ -f "$r/resnet20_int8.qfm" ] && return 0
  [ -x "$PWD/tools/qforge" ] && [ -f "$data/cifar10/resnet20.onnx" ] || return 0
  mkdir -p "$r"
  "$PWD/tools/qforge" calib "$data/cifar10/resnet20.onnx" --images "$data/cifar10/calib" -n 20 --preset cifar10 \
    --device cpu --quiet -o "$r/resnet20.calib" &&
  "$PWD/tools/qforge" quant "$data/cifar10/resnet20.onnx" --calib "$r/resnet20.calib" --precision fp16 \
    -o "$r/resnet20_fp16.qfm" --quiet &&
  "$PWD/tools/qforge" quant "$data/cifar10/resnet20.onnx" --calib "$r/resnet20.calib" --precision int8 \
    -o "$r/resnet20_int8.qfm" --quiet || echo "fuzz: could not make the ResNet-20 seeds" >&2
  return 0
}

# run1 H SECONDS LOG: a smoke run from fresh seeds; prints the harness's line
run1() {
  h=$1 secs=$2 log=$3
  work=$(mktemp -d)
  seeds "$h" "$work/seeds"
  mkdir -p "$work/corpus"
  status=ok
  # shellcheck disable=SC2046
  "$bin/fuzz_$h" $LIMITS -max_total_time="$secs" -print_final_stats=1 -artifact_prefix="$work/" \
    $(options "$h") "$work/corpus" "$work/seeds" > "$log" 2>&1 || status=FAILED
  runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -n 1)
  cov=$(grep -E '#[0-9]+.*cov: ' "$log" | tail -n 1 | sed -n 's/.*\(cov: [0-9]* ft: [0-9]*\).*/\1/p')
  echo "fuzz-smoke: fuzz_$h: $status, ${secs} s, ${runs:-?} runs, ${cov:-no coverage line}"
  if [ $status != ok ]; then
    grep -E "ERROR|SUMMARY|fuzz:|==[0-9]+==" "$log" | head -n 20
    for a in "$work"/crash-* "$work"/leak-* "$work"/oom-* "$work"/timeout-*; do
      [ -f "$a" ] && cp "$a" "$(dirname "$log")/" && echo "fuzz-smoke: input kept: $(dirname "$log")/$(basename "$a")"
    done
  fi
  rm -rf "$work"
  [ $status = ok ]
}

case ${1:-smoke} in
  smoke)
    secs=${FUZZ_SECONDS:-30}
    out=$PWD/fuzz-smoke
    rm -rf "$out"
    mkdir -p "$out"
    list=$(harnesses)
    [ -n "$list" ] || { echo "fuzz-smoke: no harness in $bin (make fuzz)"; exit 1; }
    # two at a time: CI has two cores
    set -- $list
    fail=0
    while [ $# -gt 0 ]; do
      a=$1; shift
      if [ $# -gt 0 ]; then
        b=$1; shift
        run1 "$a" "$secs" "$out/$a.log" > "$out/$a.line" 2>&1 & pa=$!
        run1 "$b" "$secs" "$out/$b.log" > "$out/$b.line" 2>&1 || fail=1
        wait $pa || fail=1
        cat "$out/$a.line" "$out/$b.line"
      else
        run1 "$a" "$secs" "$out/$a.log" || fail=1
      fi
    done
    exit $fail ;;
  long)
    h=$2 runs=${3:-10000000}
    corpus=$PWD/fuzz-corpus/$h
    mkdir -p "$corpus" "$PWD/fuzz-crashes"
    work=$(mktemp -d)
    seeds "$h" "$work"
    # shellcheck disable=SC2046
    # -fork=1: one worker at a time, restarted after a crash, OOM or timeout (each input kept)
    nice -n 19 "$bin/fuzz_$h" $LIMITS -fork=1 -ignore_crashes=1 -ignore_ooms=1 -ignore_timeouts=1 -runs="$runs" \
      -max_total_time="${FUZZ_MAX_TIME:-0}" \
      -artifact_prefix="$PWD/fuzz-crashes/${h}-" $(options "$h") "$corpus" "$work" || true
    rm -rf "$work"
    # the corpus's coverage, measured alone
    nice -n 19 "$bin/fuzz_$h" $LIMITS -runs=0 $(options "$h") "$corpus" 2>&1 | grep -E "INITED|DONE" | tail -n 1 ;;
  seeds)
    seeds "$2" "$3" ;;
  options)
    options "$2" ;;
  *)
    echo "usage: $0 smoke | long HARNESS [RUNS] | seeds HARNESS DIR | options HARNESS" >&2
    exit 2 ;;
esac
