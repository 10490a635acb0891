#!/bin/bash
# Which of the CUDA engine's fusions parts its outputs from the CPU engine's
# on one model: bench/device/agree.sh with every fusion, with none, and with
# each kind turned off alone (QFORGE_CUDA_NOFUSE's kinds, man qforge).
#   usage: bench/device/bisect_fusions.sh MODEL.qfm INPUT.f32 CPU_OUT.f32
# (CPU_OUT: qf_logits --device cpu of the same .qfm and input; BATCH as agree.sh's)
exec bash "$(dirname "$0")/agree.sh" "$1" "$2" "$3" X= QFORGE_CUDA_NOFUSE=1 QFORGE_CUDA_NOFUSE=se \
  QFORGE_CUDA_NOFUSE=layers QFORGE_CUDA_NOFUSE=input QFORGE_CUDA_NOFUSE=bn QFORGE_CUDA_NOFUSE=shuffle \
  QFORGE_CUDA_NOFUSE=attention
