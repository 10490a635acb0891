#!/bin/sh
# Soak of the Triton backend, run once by hand (not by make check): SECONDS
# (default 600) of perf_analyzer load on one CPU instance serving MODEL.qfm as
# raw uint8 images (the backend preprocesses every one), with a bad request for
# every 99 good ones (bench/triton_soak.py sends them and samples the server's
# RSS). Passes when the server never dies, every bad request gets HTTP 400, it
# stops cleanly on SIGTERM, and RSS after warm-up stays within 5 %. Writes
# OUT_DIR/soak.md and summary.json.
#   usage: bench/triton_soak.sh BACKEND.so MODEL.qfm VENV OUT_DIR [SECONDS]
# VENV from tools/triton_venv.sh; MODEL.qfm an image model whose .qfm records
# its preprocessing (e.g. the Fashion-MNIST INT8 model of tests/test_triton.sh:
# H=28 W=28 C=1, the defaults). CONCURRENCY (default 4), MAX_BATCH (default 8).
set -eu
BACKEND=$1 MODEL=$2 VENV=$3 OUT=$4 DURATION=${5:-600}
H=${H:-28} W=${W:-28} C=${C:-1} MAX_BATCH=${MAX_BATCH:-8} CONCURRENCY=${CONCURRENCY:-4}
HERE=$(cd "$(dirname "$0")" && pwd)
server=$(ls "$VENV"/lib/python3*/site-packages/pytriton/tritonserver/bin/tritonserver | head -n 1)
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
rm -rf "$OUT/repo" "$OUT/backends" "$OUT"/pa_*.csv
mkdir -p "$OUT/repo/soak/1" "$OUT/backends/qforge"
cp "$MODEL" "$OUT/repo/soak/1/model.qfm"
cp "$BACKEND" "$OUT/backends/qforge/libtriton_qforge.so"
cat > "$OUT/repo/soak/config.pbtxt" <<EOF
backend: "qforge"
max_batch_size: $MAX_BATCH
dynamic_batching { max_queue_delay_microseconds: 2000 }
input [ { name: "input" data_type: TYPE_UINT8 dims: [ -1, -1, -1 ] } ]
instance_group [ { kind: KIND_CPU count: 1 } ]
parameters { key: "threads" value { string_value: "1" } }
EOF
set -- $("$VENV/bin/python" "$HERE/../tools/triton_util.py" ports 3)
http=$1 grpc=$2
"$server" --model-repository="$OUT/repo" --backend-directory="$OUT/backends" --http-address=127.0.0.1 \
  --http-port="$1" --grpc-address=127.0.0.1 --grpc-port="$2" --metrics-address=127.0.0.1 --metrics-port="$3" \
  > "$OUT/server.log" 2>&1 &
pid=$!
watcher=
trap 'kill $pid $watcher 2>/dev/null || true; wait' EXIT  # (set -e: a kill of nothing must not turn a pass into exit 2)
"$VENV/bin/python" "$HERE/../tools/triton_util.py" wait "$http" 120 "$pid" soak || { tail -n 30 "$OUT/server.log"; exit 1; }

"$VENV/bin/python" "$HERE/triton_soak.py" "$http" soak "$pid" "$DURATION" "$H" "$W" "$C" "$MAX_BATCH" \
  > "$OUT/summary.json" &
watcher=$!
# perf_analyzer measures until stable and exits: run it again until the watcher's deadline
runs=0
while kill -0 "$watcher" 2>/dev/null; do
  runs=$((runs + 1))
  LD_LIBRARY_PATH=$VENV/perf_analyzer_libs "$VENV/bin/perf_analyzer" -m soak -u "127.0.0.1:$grpc" -i grpc \
    --shape "input:$H,$W,$C" --concurrency-range "$CONCURRENCY:$CONCURRENCY" -p 10000 -r 3 -s 50 \
    -f "$OUT/pa_$runs.csv" >> "$OUT/perf_analyzer.log" 2>&1 || sleep 1
done
wait "$watcher" || true
watcher=
kill -TERM "$pid"
wait "$pid"
exit_status=$?
pid=
crash=no
grep -qiE "segmentation|core dumped|double free|terminate called|free\(\)" "$OUT/server.log" && crash=yes

python3 - "$OUT" "$exit_status" "$crash" "$runs" <<'EOF'
import csv, glob, json, statistics, sys
out, exit_status, crash, runs = sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4])
s = json.load(open(f"{out}/summary.json"))
rates = []
for f in sorted(glob.glob(f"{out}/pa_*.csv")):
    rows = list(csv.DictReader(open(f)))
    if rows:
        rates.append(float(rows[0]["Inferences/Second"]))
ok = (s["server_alive"] and crash == "no" and exit_status == 0 and s["bad_requests"] > 0 and
      s["bad_answered_400"] == s["bad_requests"] and s["rss_spread_after_warmup_pct"] is not None and
      s["rss_spread_after_warmup_pct"] <= 5.0)
lines = [
    f"# Triton backend soak ({s['seconds']:.0f} s, CPU instance, raw uint8 images)",
    "",
    "| what | result |",
    "|---|---|",
    f"| good requests completed | {s['good_requests']} |",
    f"| perf_analyzer runs (images/s min / median / max) | {len(rates)} of {runs} ({min(rates):.0f} / {statistics.median(rates):.0f} / {max(rates):.0f}) |" if rates else f"| perf_analyzer runs | 0 of {runs} reported |",
    f"| bad requests sent (1 per 99 good) | {s['bad_requests']} |",
    f"| answered HTTP 400 | {s['bad_answered_400']} (other: {s['bad_other'] or 'none'}) |",
    f"| server alive throughout / crash in log / exit status on SIGTERM | {s['server_alive']} / {crash} / {exit_status} |",
    f"| RSS after warm-up: first, min, max, last (MiB) | {s['rss_kib_first_after_warmup'] / 1024:.1f}, {s['rss_kib_min_after_warmup'] / 1024:.1f}, {s['rss_kib_max_after_warmup'] / 1024:.1f}, {s['rss_kib_last'] / 1024:.1f} |",
    f"| RSS spread after warm-up | {s['rss_spread_after_warmup_pct']} % (limit 5 %) |",
    f"| verdict | {'PASS' if ok else 'FAIL'} |",
]
open(f"{out}/soak.md", "w").write("\n".join(lines) + "\n")
print("\n".join(lines))
sys.exit(0 if ok else 1)
EOF
