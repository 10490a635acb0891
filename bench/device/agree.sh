#!/bin/bash
# Where the CUDA engine and the CPU engine part on one model: the GPU's
# outputs of MODEL.qfm under each environment setting given (a dispatch
# switch, QFORGE_CUDA_NOFUSE=1, another build's LD_LIBRARY_PATH, ...)
# against the CPU engine's outputs of the same inputs (bench/zoo/qf_logits
# files: raw float32, N whole samples). Prints, per setting, the top-1
# agreement, max |GPU - CPU| and the share of outputs that differ at all.
#   usage: bench/device/agree.sh MODEL.qfm INPUT.f32 CPU_OUT.f32 'VAR=value'...
# ('X=' for the default). QF_LOGITS (default /tmp/q/bin/qf_logits, the
# unpacked bundle: source bench/device/env.sh first), BATCH (default 16),
# DEVICE (default cuda; cpu checks the script itself).
set -u
M=$1 IN=$2 CPU=$3
shift 3
L=${QF_LOGITS:-/tmp/q/bin/qf_logits}
T=$(mktemp -d)
for s in "$@"; do
  if ! env "$s" "$L" "$M" "$IN" $T/gpu.f32 --device "${DEVICE:-cuda}" --batch "${BATCH:-16}" 2> $T/err; then
    echo "$s: qf_logits failed: $(tail -1 $T/err)"
    continue
  fi
  python3 - "$s" $T/gpu.f32 "$CPU" <<'EOF'
import sys
import numpy as np
s, gpu, cpu = sys.argv[1:]
g, c = np.fromfile(gpu, np.float32), np.fromfile(cpu, np.float32)
if g.size != c.size:
    sys.exit("%s: %d GPU values against %d CPU ones" % (s, g.size, c.size))
# samples: a classifier's outputs come in rows of 1000 (ImageNet) or 10 (CIFAR-10); else no top-1
n = next((c.size // k for k in (1000, 10) if c.size % k == 0), 0)
d = np.abs(g - c)
line = "%-50s max |GPU - CPU| %.4g (max |CPU| %.4g), %.2f %% of outputs differ" % (s, d.max(), np.abs(c).max(), 100.0 * np.mean(d > 0))
if n:
    line += ", top-1 agreement %.3f over %d" % (np.mean(g.reshape(n, -1).argmax(1) == c.reshape(n, -1).argmax(1)), n)
    per = d.reshape(n, -1).max(1)
    bad = np.nonzero(per > 0)[0]
    line += "; samples that differ: %d (%s)" % (bad.size, " ".join("%d:%.3g" % (i, per[i]) for i in bad[:16]))
print(line)
EOF
done
rm -rf $T
