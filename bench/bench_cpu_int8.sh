#!/bin/sh
# CPU FP32 vs INT8 throughput (bench/cpu_notes.md): `qforge bench` of each
# model's FP32 .onnx and INT8 .qfm, for one or more qforge builds, runs
# interleaved (build, precision, model) so a load change hits all alike;
# prints one line per run and the medians of images/s per cell.
# Usage: bench/bench_cpu_int8.sh [-r REPEATS] [-b BATCH] [-d SECONDS | -i ITERATIONS] LABEL=QFORGE... --
#        NAME=FP32.onnx,INT8.qfm[,PEER_INT8.onnx]...  (-i: a fixed number of timed runs, for slow models)
# A build given as LABEL=onnxruntime is the peer: bench/peers/ort_speed.py
# times the FP32 .onnx and PEER_INT8.onnx (ONNX Runtime's own Q/DQ model,
# bench/peers/ort_quant.py --keep) with as many threads as qforge uses.
set -eu
reps=3 batch=32 secs=5 iters=
while getopts r:b:d:i: o; do
  case $o in r) reps=$OPTARG;; b) batch=$OPTARG;; d) secs=$OPTARG;; i) iters=$OPTARG;; *) exit 2;; esac
done
shift $((OPTIND - 1))
builds=
while [ $# -gt 0 ] && [ "$1" != -- ]; do builds="$builds $1"; shift; done
[ $# -gt 0 ] && shift
[ -n "$builds" ] && [ $# -gt 0 ] || { echo "usage: $0 [-r N] [-b B] [-d S | -i N] LABEL=QFORGE... -- NAME=FP32.onnx,INT8.qfm[,PEER_INT8.onnx]..." >&2; exit 2; }
timing="--duration $secs"
[ -n "$iters" ] && timing="--iterations $iters"
peers=$(dirname "$0")/peers
models="$*"
runs=$(mktemp)
trap 'rm -f "$runs"' EXIT
echo "# $(date -u '+%F %T') UTC, batch $batch, $timing, $reps repeats, $(nproc) CPUs"
for r in $(seq "$reps"); do
  for m in $models; do
    name=${m%%=*} files=${m#*=}
    for b in $builds; do
      label=${b%%=*} q=${b#*=}
      for p in fp32 int8; do
        f=${files%%,*}
        if [ $p = int8 ]; then
          f=${files#*,}
          if [ "$q" = onnxruntime ]; then
            case $f in *,*) f=${f#*,};; *) continue;; esac
          else
            f=${f%%,*}
          fi
        fi
        if [ "$q" = onnxruntime ]; then
          run="python3 $peers/ort_speed.py $f --threads $(nproc) --batch $batch $timing --json"
        else
          run="$q bench $f --device cpu --batch $batch $timing --json"
        fi
        ips=$($run | sed -n 's/.*"images_per_second": \([0-9.]*\).*/\1/p')
        load=$(cut -d' ' -f1 /proc/loadavg)
        echo "run $r $name $label $p $ips img/s (load $load)"
        echo "$name $label $p $ips" >>"$runs"
      done
    done
  done
done
echo "# medians (images/s)"
for m in $models; do
  name=${m%%=*}
  for b in $builds; do
    label=${b%%=*}
    for p in fp32 int8; do
      med=$(awk -v n="$name" -v l="$label" -v p="$p" '$1 == n && $2 == l && $3 == p { print $4 }' "$runs" |
            sort -g | awk '{ v[NR] = $1 } END { print NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }')
      echo "$name $label $p $med"
    done
  done
done
