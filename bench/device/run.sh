#!/bin/bash
# Runs on the device machine from the repository root: unpacks the bundle made
# by bench/device/make_bundle.sh, reports the environment, runs the CUDA tests
# and/or the ResNet-50/MobileNetV2 benchmark (logs packed into $OUT/logs.tgz:
# the device tool brings back only a few files).
# `triton`: ResNet-50 INT8 through tritonserver (.device/triton.tar.xz) under
# perf_analyzer against qforge bench b256 (bench/bench_triton.sh).
# `compare`: this build against the one in .device/before.tar.xz (bin/, lib/
# of an earlier make_bundle.sh) on ResNet-50 and MobileNetV2 b256
# (bench/device/compare.sh), with PyTorch eager FP16 timed beside them.
# `profile`: per-layer GPU times (qforge bench --profile, INT8 and FP16 b256) of
# PROFILE_ARCHS (default the zoo's slowest against PyTorch), for issue 14;
# PROFILE_OPSET=17 for the transformers (vit_b_16 swin_t convnext_tiny), issue 13;
# PROFILE_DEBUG=1 keeps each build's debug log (tactics, fusions) in logs.tgz;
# PROFILE_BATCHES (default 256) the batch sizes profiled, PROFILE_PRECS (default
# "int8 fp16") the precisions.
# `qdq`: bench/bench_qdq.sh with qforge on the GPU (models quantized elsewhere
# against ONNX Runtime on the CPU; ORT quantizes the Q/DQ models here), issue 18.
# `best`: MobileNetV2 `quant --precision best --max-drop 0.1` calibrated and
# checked on the GPU, then b256 speed of it, all-INT8 and FP16, issue 15.
# `calib`: qforge calib's default method (auto) with --device cuda on ResNet-20,
# MobileNetV2 and ResNet-50 (torchvision, random weights, exported here), 3
# runs each (CALIB_RUNS) of this build and, where .device/before.tar.xz holds one, of the
# earlier build, interleaved; then this build's GPU table against its CPU
# table (auto thresholds that differ, INT8 SQNR of each): bench/calib_speed.md.
# Usage: bash bench/device/run.sh [MODE...], MODE one of tests (the default),
# bench, all (tests and bench), compare, profile, qdq, best, triton, calib; several run in that order.
set -o pipefail
R=$PWD
L=$OUT/logs
mkdir -p $L
trap 'tar -czf $OUT/logs.tgz -C $OUT logs && rm -rf $L; out_fits' EXIT
. bench/device/env.sh
modes=" ${*:-tests} "
want() { # MODE: asked for by name, or tests/bench by `all`
  case $modes in *" $1 "*) true;; *" all "*) [ $1 = tests ] || [ $1 = bench ];; *) false;; esac
}
{ nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm --format=csv
  nproc; ldd /tmp/q/bin/test_cuda | grep -E "not found|cuda|cublas|blas"
  [ -x /tmp/q/bin/qforge ] && /tmp/q/bin/qforge --version; } 2>&1 | tee $L/env.txt
export QFORGE_DATA=$R/.device/data top_srcdir=$R
if want tests; then
  # the op graphs once more with every GEMM conv cut into chunks of 96 positions (plus a tail)
  CK_RUN_CASE=ops QFORGE_CUDA_CHUNK_ROWS=96 timeout 120 /tmp/q/bin/test_cuda > $L/test_chunked.log 2>&1
  echo "chunked ops rc=$?"; grep -E "Checks|F:" $L/test_chunked.log
  # and with every INT8 conv pinned to cuBLASLt, then to each implicit-GEMM
  # variant (index mod the layer's count, up to CU_IGEMM_MAX_VARIANTS; a
  # 2-block persistent grid so that blocks loop over tiles; splitk: the
  # split-K variants, on the whole grid they need); the default times
  # them all per layer (cudnn: every FP16 and INT8 conv on cuDNN's first
  # plan). The runs share the GPU at once (about 2 minutes for all 21)
  # (dw5: every 5x5 depthwise conv on the sliding window, SiLU ones included)
  for t in lt cudnn splitk dw5 0 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17; do
    case $t in
      lt|cudnn) env="QFORGE_CUDA_CONV_TACTIC=$t QFORGE_CUDA_IGEMM_BLOCKS=2";;
      dw5) env="QFORGE_CUDA_DW_WINDOW=5";;
      splitk) env="QFORGE_CUDA_CONV_TACTIC=igemm QFORGE_CUDA_IGEMM_VARIANT=$t";;
      *) env="QFORGE_CUDA_CONV_TACTIC=igemm QFORGE_CUDA_IGEMM_VARIANT=$t QFORGE_CUDA_IGEMM_BLOCKS=2";;
    esac
    ( env $env CK_RUN_CASE=ops timeout 240 /tmp/q/bin/test_cuda > $L/test_pinned_$t.log 2>&1
      echo "ops with $env rc=$? $(grep -E 'Checks' $L/test_pinned_$t.log)"; grep -E "F:" $L/test_pinned_$t.log ) &
  done | tee -a $L/pinned.txt
  wait
  QFORGE_DEBUG=1 timeout ${TEST_TIMEOUT:-420} /tmp/q/bin/test_cuda > $L/test_cuda.log 2>&1
  rc=$?
  grep -v "^qforge\[" $L/test_cuda.log | tail -120
  echo "test_cuda rc=$rc"
  # every op of the op table on this engine against the CPU engine, where the bundle has the test
  if [ -x /tmp/q/bin/test_backend_ops ]; then
    timeout 300 /tmp/q/bin/test_backend_ops > $L/test_backend_ops.log 2>&1
    echo "test_backend_ops rc=$?"; grep -E "Checks|F:|cuda" $L/test_backend_ops.log | grep -v "^qforge\[" | head -40
    # and with every GEMM on the fallback kernel (batched products included)
    QFORGE_CUDA_NOLT=1 timeout 300 /tmp/q/bin/test_backend_ops > $L/test_backend_ops_nolt.log 2>&1
    echo "test_backend_ops without cuBLASLt rc=$?"; grep -E "Checks|F:" $L/test_backend_ops_nolt.log | head -20
  fi
  # issue 17: a batch that cannot fit in GPU memory is one line naming the
  # batch and the bytes (with the batch that would fit), exit 1, no output file
  M=$R/.device/data/imagenet/mobilenetv2-fp32.onnx I=$R/.device/data/imagenet/images/calib
  if [ -f $M ]; then
    for c in "bench $M --batch 65536" "eval $M --images $I --preset imagenet --batch 65536" \
             "calib $M --images $I --preset imagenet --batch 65536 -o /tmp/huge.calib"; do
      rm -f /tmp/huge.calib
      timeout 300 /tmp/q/bin/qforge ${c%% *} --device cuda ${c#* } > /tmp/huge.out 2> /tmp/huge.err
      echo "too large a batch: qforge ${c%% *} rc=$? stderr lines $(wc -l < /tmp/huge.err)" \
        "output file left: $([ -e /tmp/huge.calib ] && echo yes || echo no)"
      cat /tmp/huge.err
    done
  fi
  if [ $rc -ne 0 ] && [ -n "$SANITIZE" ]; then
    CK_RUN_CASE=ops timeout 200 compute-sanitizer --tool memcheck /tmp/q/bin/test_cuda > $L/sanitizer.log 2>&1
    grep -E "ERROR SUMMARY|Invalid|Error|F:" $L/sanitizer.log | head -40
  fi
fi
if want bench; then
  export PYTHONUNBUFFERED=1
  timeout ${BENCH_TIMEOUT:-400} bash bench/bench_cuda.sh /tmp/q/bin/qforge $R/.device/data/imagenet/images /tmp/b ${ARCHS:-resnet50 mobilenet_v2} > $L/bench.log 2>&1
  echo "bench rc=$?"
  for a in ${ARCHS:-resnet50 mobilenet_v2}; do
    for p in int8 fp16; do
      # stderr: the debug log, with each layer's tactic and the timings of all (no tactic cache)
      [ -f /tmp/b/${a}_$p.qfm ] && QFORGE_CACHE_DIR= QFORGE_DEBUG=1 timeout 120 /tmp/q/bin/qforge bench /tmp/b/${a}_$p.qfm \
        --batch 256 --duration 1 --profile > $L/prof_${a}_$p.txt 2> $L/tactics_${a}_$p.txt
    done
  done
  # engine build time with an empty tactic cache, then with the cache that run wrote
  for r in cold warm; do
    [ -f /tmp/b/resnet50_int8.qfm ] && QFORGE_CACHE_DIR=/tmp/tactics timeout 120 /tmp/q/bin/qforge bench /tmp/b/resnet50_int8.qfm \
      --batch 256 --duration 0.5 2>&1 | sed -n "s/.*built in/tactic cache $r: built in/p" | tee -a $L/cache.txt
    mkdir -p /tmp/tactics
  done
  grep -v '"profile' $L/bench.log | cut -c1-600
  for a in ${ARCHS:-resnet50 mobilenet_v2}; do for p in int8 fp16; do head -${PROF_LINES:-25} $L/prof_${a}_$p.txt; done; done
fi
if want compare; then
  mkdir -p /tmp/old /tmp/b && tar -xJf .device/before.tar.xz -C /tmp/old
  # the old build brings only its own library; the others are the bundle's
  for l in /tmp/q/lib/*.so*; do [ -e /tmp/old/lib/$(basename $l) ] || ln -s $l /tmp/old/lib/; done
  for a in ${ARCHS:-resnet50 mobilenet_v2}; do
    python3 bench/peers/torch_cnn.py $a /tmp/b/$a.onnx --batches 256 > $L/torch_$a.json 2> $L/torch_$a.err
    echo "torch eager FP16 $a: $(cat $L/torch_$a.json | cut -c1-300)"
  done
  # calibration images: the data subset's, else the zoo's (a call carrying only the bundles and .device/zoo/images)
  I=$R/.device/data/imagenet/images/calib; [ -d $I ] || I=$R/.device/zoo/images/calib
  REPS=${REPS:-3} timeout ${COMPARE_TIMEOUT:-400} bash bench/device/compare.sh /tmp/old /tmp/q /tmp/b \
    $I ${ARCHS:-resnet50 mobilenet_v2} 2>&1 | tee $L/compare.txt
fi
if want profile; then
  mkdir -p /tmp/p
  for a in ${PROFILE_ARCHS:-efficientnet_b0 resnext50_32x4d regnet_y_800mf densenet121}; do
    python3 bench/peers/torch_cnn.py $a /tmp/p/$a.onnx --batches 256 --seconds 1 --opset ${PROFILE_OPSET:-13} \
      > $L/torch_$a.json 2> $L/torch_$a.err
    /tmp/q/bin/qforge calib /tmp/p/$a.onnx --images $R/.device/data/imagenet/images/calib --preset imagenet -n 50 \
      --device cuda --batch 50 --quiet -o /tmp/p/$a.calib
    for p in ${PROFILE_PRECS:-int8 fp16}; do
      /tmp/q/bin/qforge quant /tmp/p/$a.onnx --calib /tmp/p/$a.calib --precision $p -o /tmp/p/${a}_$p.qfm --quiet
      # PROFILE_DEBUG=1: the engine build's log too (each layer's tactic with the timings of the first build, fusions)
      for b in ${PROFILE_BATCHES:-256}; do
        f=${a}_${p}_b$b
        [ -n "$PROFILE_DEBUG" ] && QFORGE_DEBUG=1 /tmp/q/bin/qforge bench /tmp/p/${a}_$p.qfm --batch $b --duration 0.2 \
          > /dev/null 2> $L/debug_$f.txt
        /tmp/q/bin/qforge bench /tmp/p/${a}_$p.qfm --batch $b --duration 1 --profile > $L/prof_$f.txt 2>&1
        echo "== $a $p b$b (PyTorch eager FP16 b256: $(grep -o '"images_per_second": [0-9.]*' $L/torch_$a.json | head -1))"
        head -${PROF_LINES:-12} $L/prof_$f.txt
        # the same by op and precision
        awk '$2 == "ms" && $3 ~ /%$/ {t[$4 " " $5] += $1; c[$4 " " $5]++} END {for (k in t) printf "    by op: %8.4f ms %4d nodes  %s\n", t[k], c[k], k}' \
          $L/prof_$f.txt | sort -k3 -rn | head -8
      done
    done
  done
fi
if want qdq; then
  mkdir -p /tmp/qb/tests && ln -sf /tmp/q/bin/tensor_predict /tmp/qb/tests/
  QFORGE_DATA=$R/.device/data QFORGE_DEVICE=cuda timeout ${QDQ_TIMEOUT:-300} bash bench/bench_qdq.sh /tmp/qb 2>&1 | tee $L/qdq.log
  echo "bench_qdq rc=$?"
fi
if want best; then
  I=$R/.device/data/imagenet
  common="--images $I/images --synsets $I/synsets.txt --preset imagenet -n 50 --held-out 100 --device cuda"
  /tmp/q/bin/qforge quant $I/mobilenetv2-fp32.onnx $common --precision best --max-drop 0.1 -o /tmp/best.qfm \
    --json > $L/best.json 2> $L/best.err
  echo "quant --precision best rc=$?"; tail -n 30 $L/best.err; cut -c1-3000 $L/best.json
  for p in int8 fp16; do
    /tmp/q/bin/qforge quant $I/mobilenetv2-fp32.onnx $common --precision $p -o /tmp/$p.qfm --quiet --json > $L/$p.json
    echo "$p: $(cut -c1-400 $L/$p.json)"
  done
  for r in 1 2 3; do for p in best int8 fp16; do
    echo "bench $p b256 run $r: $(/tmp/q/bin/qforge bench /tmp/$p.qfm --device cuda --batch 256 --duration 2 --json | cut -c1-300)"
  done; done
fi
if want triton; then
  mkdir -p /tmp/t && tar -xJf .device/triton.tar.xz -C /tmp/t
  # the INT8 model as bench_cuda.sh makes it, unless a bench run already did
  [ -f /tmp/b/resnet50_int8.qfm ] || PRECS=int8 BATCHES=256 timeout ${BENCH_TIMEOUT:-300} bash bench/bench_cuda.sh \
    /tmp/q/bin/qforge ${TRITON_IMAGES:-$R/.device/data/imagenet/images} /tmp/b resnet50 > $L/bench.log 2>&1
  timeout ${TRITON_TIMEOUT:-480} bash bench/bench_triton.sh /tmp/q/bin/qforge /tmp/q/lib/libtriton_qforge.so \
    /tmp/b/resnet50_int8.qfm /tmp/t/tritonserver $L/triton > $L/triton.log 2>&1
  echo "bench_triton rc=$?"
  grep -v "^|" $L/triton.log | tail -n 20
  cat $L/triton/triton.md
fi
if want calib; then
  D=$R/.device/data W=/tmp/c
  mkdir -p $W
  python3 bench/peers/torch_cnn.py resnet50 $W/resnet50.onnx --batches 1 --seconds 0.1 > $L/torch_calib.json 2>&1
  builds=/tmp/q
  if [ -f .device/before.tar.xz ]; then
    mkdir -p /tmp/old && tar -xJf .device/before.tar.xz -C /tmp/old
    for l in /tmp/q/lib/*.so*; do [ -e /tmp/old/lib/$(basename $l) ] || ln -s $l /tmp/old/lib/; done
    builds="/tmp/old /tmp/q"
  fi
  qf() { local b=$1; shift; LD_LIBRARY_PATH=$b/lib:${LD_LIBRARY_PATH:-} $b/bin/qforge "$@"; }
  for m in r20 mnv2 r50; do
    case $m in
      r20) M=$D/cifar10/resnet20.onnx CAL=$D/cifar10/calib VAL=$D/cifar10/test PP="--preset cifar10" N=1000 ;;
      mnv2) M=$D/imagenet/mobilenetv2-fp32.onnx CAL=$D/imagenet/images/calib VAL=$D/imagenet/images/val PP="--preset imagenet" N=100 ;;
      r50) M=$W/resnet50.onnx CAL=$D/imagenet/images/calib VAL=$D/imagenet/images/val PP="--preset imagenet" N=100 ;;
    esac
    [ -f $M ] || { echo "calib $m: no $M"; continue; }
    for r in $(seq ${CALIB_RUNS:-3}); do
      for b in $builds; do
        s=$(date +%s%N)
        LD_LIBRARY_PATH=$b/lib:${LD_LIBRARY_PATH:-} timeout 600 $b/bin/qforge calib $M --images $CAL -n $N $PP \
          --device cuda -o $W/$m.$(basename $b).calib > $W/log 2>&1
        echo "calib $m $(basename $b) run $r rc=$? wall $(( ($(date +%s%N) - s) / 1000000 )) ms: $(grep -o 'chosen on.*' $W/log)"
      done
    done
    qf /tmp/q calib $M --images $CAL -n $N $PP --device cpu -o $W/$m.cpu.calib > $W/log 2>&1
    echo "calib $m cpu: $(grep -o 'chosen on.*' $W/log)"
    echo "calib $m: auto thresholds differing GPU/CPU: $(diff <(sed -n '7,$p' $W/$m.q.calib) <(sed -n '7,$p' $W/$m.cpu.calib) | grep -c '^<') of $(sed -n 's/^tensors //p' $W/$m.cpu.calib)"
    for t in q cpu; do
      qf /tmp/q quant $M --calib $W/$m.$t.calib --precision int8 -o $W/$m.$t.qfm --quiet &&
        qf /tmp/q eval $W/$m.$t.qfm --images $VAL $PP --reference $M --device cuda --json --quiet > $W/$m.$t.json
      echo "calib $m table from $t: INT8 $(python3 -c 'import json,sys; r=json.load(open(sys.argv[1]))["reference"]; print("SQNR", r["sqnr_db"], "dB, agreement", r["agreement"])' $W/$m.$t.json)"
    done
  done
fi
