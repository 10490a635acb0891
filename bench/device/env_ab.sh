#!/bin/bash
# A/B of one environment setting on the same build and the same .qfm files
# (a dispatch switch such as QFORGE_CUDA_DW_WINDOW): `qforge bench` at
# one batch, the two settings alternated REPS times per model so that clock
# drift hits both alike; prints each side's median images/s and B / A.
#   usage: bench/device/env_ab.sh 'VAR=a' 'VAR=b' MODEL.qfm...
# REPS (default 3), BATCH (default 256), QFORGE (default /tmp/q/bin/qforge,
# the unpacked bundle: source bench/device/env.sh first).
set -eu
A=$1 B=$2
shift 2
Q=${QFORGE:-/tmp/q/bin/qforge}
# each side its own tactic cache, or the second side would take the first
# side's choices (the cache's key names the version, not the setting or build)
C=$(mktemp -d)
trap 'rm -rf "$C"' EXIT
for m in "$@"; do
  a=() b=()
  for r in $(seq "${REPS:-3}"); do
    for side in A B; do
      set_=$A; [ $side = B ] && set_=$B
      ips=$(env QFORGE_CACHE_DIR=$C/$side "$set_" "$Q" bench "$m" --batch "${BATCH:-256}" --duration 1 --json |
        python3 -c 'import json,sys; print(json.load(sys.stdin)["results"][0]["images_per_second"])')
      if [ $side = A ]; then a+=("$ips"); else b+=("$ips"); fi
    done
  done
  python3 - "$(basename "$m")" "$A" "$B" "${a[*]}" "${b[*]}" <<'EOF'
import statistics, sys
m, sa, sb, a, b = sys.argv[1:]
ma = statistics.median(float(x) for x in a.split())
mb = statistics.median(float(x) for x in b.split())
print("%-40s %s %10.1f   %s %10.1f   B/A %.3f   (A %s; B %s)" % (m, sa, ma, sb, mb, mb / ma, a, b))
EOF
done
