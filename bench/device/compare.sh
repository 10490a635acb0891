#!/bin/bash
# Before/after speed of two qforge builds in one GPU run (the refactor rule:
# ResNet-50 and MobileNetV2 `qforge bench` b256 within 3 %). Each build
# calibrates and quantizes the same ONNX files itself (its own table and .qfm
# formats), then the two are benched alternately, REPS times each, so clock
# drift hits both alike; prints the median images/s of each and their ratio.
#   usage: [PRECS="int8 fp16"] [REPS=3] [NEW_ENV="VAR=value ..."] [OLD_QUANT=... NEW_QUANT=...] bench/device/compare.sh OLD_DIR NEW_DIR MODELS_DIR IMAGES [ARCH...]
# OLD_DIR/NEW_DIR hold bin/qforge and lib/ (as make_bundle.sh packs them);
# MODELS_DIR has ARCH.onnx (bench_cuda.sh writes them). NEW_ENV is set for
# the new side only: with OLD_DIR = NEW_DIR, an A/B of a switch in one build
# (NEW_ENV=QFORGE_CUDA_DW_DP4A=1). OLD_QUANT / NEW_QUANT: more `qforge quant`
# options for one side: an A/B of two plans of one build
# (NEW_QUANT=--fp16-se: the convs around SE blocks in FP16 against the default).
set -eu
OLD=$1 NEW=$2 M=$3 IMAGES=$4
shift 4
ARCHS=${*:-resnet50 mobilenet_v2}
REPS=${REPS:-3}
W=$(mktemp -d)
run() { # side args...
  local side=$1 b=$OLD e=; shift
  [ $side = new ] && b=$NEW e=${NEW_ENV:-}
  # each side its own tactic cache: the cache's key names the version, not the
  # build, so the second build would take the first one's timings
  env $e QFORGE_CACHE_DIR=$W/cache_$side LD_LIBRARY_PATH=$b/lib:${LD_LIBRARY_PATH:-} "$b/bin/qforge" "$@"
}
for a in $ARCHS; do
  for side in old new; do
    run $side calib "$M/$a.onnx" --images "$IMAGES" --preset imagenet -n 100 --device cuda --batch 50 --quiet -o $W/${a}_$side.calib
    for p in ${PRECS:-int8 fp16}; do
      q=${OLD_QUANT:-}; [ $side = new ] && q=${NEW_QUANT:-}
      run $side quant "$M/$a.onnx" --calib $W/${a}_$side.calib --precision $p $q -o $W/${a}_${p}_$side.qfm --quiet
    done
  done
  for p in ${PRECS:-int8 fp16}; do
    for r in $(seq $REPS); do
      for side in old new; do
        run $side bench $W/${a}_${p}_$side.qfm --batch 256 --duration 2 --json |
          python3 -c 'import json,sys; print(json.load(sys.stdin)["results"][0]["images_per_second"])' >> $W/${a}_${p}_$side.ips
      done
    done
    python3 - "$a" "$p" $W/${a}_${p}_old.ips $W/${a}_${p}_new.ips <<'EOF'
import statistics, sys
a, p, fo, fn = sys.argv[1:]
o = [float(x) for x in open(fo)]
n = [float(x) for x in open(fn)]
mo, mn = statistics.median(o), statistics.median(n)
print(f"{a} {p} b256: before {mo:,.0f} img/s, after {mn:,.0f} img/s, after/before {mn / mo:.3f} "
      f"(runs before {', '.join(f'{x:,.0f}' for x in o)}; after {', '.join(f'{x:,.0f}' for x in n)})")
EOF
  done
done
rm -rf "$W"
