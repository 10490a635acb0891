#!/bin/sh
# Triton Inference Server with the qforge backend on one GPU against `qforge
# bench` in the same run: the .qfm at batch 256 by qforge bench, then served by
# tritonserver (KIND_GPU, dynamic batching up to 256) under perf_analyzer at
# each concurrency, PA_BATCH images per request (default 1), inputs in system shared memory over
# gRPC. Writes OUT_DIR/triton.md: images/s and p50/p99 latency per concurrency
# and engine set, and the best throughput as a share of qforge bench b256.
#   usage: bench/bench_triton.sh QFORGE BACKEND.so MODEL.qfm TRITON_DIR OUT_DIR
# TRITON_DIR holds bin/tritonserver, bin/perf_analyzer and lib/, as unpacked
# from bench/device/pack_triton.sh. libqforge.so must be on LD_LIBRARY_PATH.
# Environment:
#   CONCURRENCY  perf_analyzer concurrencies (default "1 8 64 256")
#   VARIANTS     engine set:instances per GPU, space-separated (default
#                "sizes:2 max:2"): "sizes" builds the default engines (powers of
#                two up to 256, a batch runs on the smallest that holds it),
#                "max" one engine at 256 that every batch is padded to; the two
#                are the alternatives the backend can be configured with
#   PROTOCOL     grpc or http (default grpc); SHM system or none (default system)
#   QUEUE_US     dynamic batcher's max_queue_delay_microseconds (default 1000)
#   INTERVAL_MS  perf_analyzer measurement window (default 4000); STABILITY its
#                stability threshold in % (default 15, perf_analyzer's is 10)
#   PA_BATCH     images per request (perf_analyzer -b, default 1: one client, one image);
#                perf_analyzer's images/s counts images
#   KIND         GPU or CPU instances (default GPU; CPU to try the script on a
#                machine without one), MAX_BATCH (default 256)
set -eu
Q=$1 BACKEND=$2 MODEL=$3 TRITON=$4 OUT=$5
CONCURRENCY=${CONCURRENCY:-1 8 64 256}
VARIANTS=${VARIANTS:-sizes:2 max:2}
PROTOCOL=${PROTOCOL:-grpc}
SHM=${SHM:-system}
HERE=$(cd "$(dirname "$0")" && pwd)
MAX_BATCH=${MAX_BATCH:-256}
KIND=${KIND:-GPU}
if [ "$KIND" = GPU ]; then device=cuda gpus="gpus: [ 0 ] "; else device=cpu gpus=; fi
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
export QFORGE_CACHE_DIR=${QFORGE_CACHE_DIR:-$OUT/tactics}
mkdir -p "$QFORGE_CACHE_DIR"

# ---- the reference: qforge's own engine at batch 256, inputs resident ---------------------------
"$Q" bench "$MODEL" --batch $MAX_BATCH --device $device --json > "$OUT/qforge_bench.json"
ref=$(python3 -c 'import json,sys; print("%.1f" % json.load(open(sys.argv[1]))["results"][0]["images_per_second"])' \
  "$OUT/qforge_bench.json")
echo "qforge bench b$MAX_BATCH: $ref images/s"

mkdir -p "$OUT/backends/qforge"
cp "$BACKEND" "$OUT/backends/qforge/libtriton_qforge.so"
name=$(basename "$MODEL" .qfm)
http_port=${HTTP_PORT:-18000} grpc_port=${GRPC_PORT:-18001} metrics_port=${METRICS_PORT:-18002}
if [ "$PROTOCOL" = grpc ]; then url=127.0.0.1:$grpc_port; else url=127.0.0.1:$http_port; fi

{
  echo "| engines | instances | concurrency | images/s | p50 ms | p99 ms | of qforge bench b$MAX_BATCH |"
  echo "|---|---|---|---|---|---|---|"
} > "$OUT/rows.md"
best=0
pid=
trap '[ -n "$pid" ] && kill "$pid" 2>/dev/null; wait' EXIT
for v in $VARIANTS; do
  sizes=${v%%:*} count=${v#*:}
  repo=$OUT/repo_$sizes$count
  mkdir -p "$repo/$name/1"
  ln -sf "$(cd "$(dirname "$MODEL")" && pwd)/$(basename "$MODEL")" "$repo/$name/1/model.qfm"
  param=
  [ "$sizes" = max ] && param="parameters { key: \"batch_sizes\" value { string_value: \"$MAX_BATCH\" } }"
  cat > "$repo/$name/config.pbtxt" <<EOF
backend: "qforge"
max_batch_size: $MAX_BATCH
dynamic_batching { max_queue_delay_microseconds: ${QUEUE_US:-1000} }
instance_group [ { kind: KIND_$KIND count: $count $gpus} ]
$param
EOF
  "$TRITON/bin/tritonserver" --model-repository="$repo" --backend-directory="$OUT/backends" \
    --http-address=127.0.0.1 --http-port=$http_port --grpc-address=127.0.0.1 --grpc-port=$grpc_port \
    --metrics-address=127.0.0.1 --metrics-port=$metrics_port > "$OUT/server_$sizes$count.log" 2>&1 &
  pid=$!
  python3 "$HERE/../tools/triton_util.py" wait $http_port 300 $pid "$name" || { tail -n 30 "$OUT/server_$sizes$count.log"; exit 1; }
  grep -E "backend\.c|config\.c" "$OUT/server_$sizes$count.log"
  for c in $CONCURRENCY; do
    csv=$OUT/pa_${sizes}${count}_c$c.csv
    LD_LIBRARY_PATH=$TRITON/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH} "$TRITON/bin/perf_analyzer" -m "$name" -u "$url" \
      -i "$PROTOCOL" --shared-memory "$SHM" --concurrency-range "$c:$c" -b "${PA_BATCH:-1}" \
      --measurement-interval "${INTERVAL_MS:-4000}" --max-trials 8 --stability-percentage "${STABILITY:-15}" -f "$csv" > "$OUT/pa_${sizes}${count}_c$c.log" 2>&1 ||
      { echo "perf_analyzer failed at concurrency $c"; tail -n 20 "$OUT/pa_${sizes}${count}_c$c.log"; continue; }
    # the CSV's columns by name; latencies are in microseconds
    row=$(awk -F, 'NR == 1 { for (i = 1; i <= NF; i++) col[$i] = i; next }
      NR == 2 { printf "%.1f %.3f %.3f", $col["Inferences/Second"], $col["p50 latency"] / 1000, $col["p99 latency"] / 1000 }' "$csv")
    set -- $row
    share=$(awk -v a="$1" -v b="$ref" 'BEGIN { printf "%.1f %%", 100 * a / b }')
    echo "| $sizes | $count | $c | $1 | $2 | $3 | $share |" | tee -a "$OUT/rows.md"
    best=$(awk -v a="$1" -v b="$best" 'BEGIN { print (a > b) ? a : b }')
  done
  kill "$pid"
  wait "$pid" || true
  pid=
done

{
  echo "# $name through Triton, KIND_$KIND ($(date -u +%Y-%m-%d))"
  echo
  echo "qforge bench, batch $MAX_BATCH, same run: **$ref images/s**. perf_analyzer: $PROTOCOL, shared memory $SHM,"
  echo "${PA_BATCH:-1} image(s) per request, dynamic batching up to $MAX_BATCH (max_queue_delay ${QUEUE_US:-1000} us)."
  echo
  cat "$OUT/rows.md"
  echo
  echo "Best through Triton: $best images/s = $(awk -v a="$best" -v b="$ref" 'BEGIN { printf "%.1f %%", 100 * a / b }') of qforge bench b$MAX_BATCH."
} > "$OUT/triton.md"
cat "$OUT/triton.md"
