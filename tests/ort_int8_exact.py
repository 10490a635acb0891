#!/usr/bin/env python3
"""Exits 0 when ONNX Runtime's u8 x s8 integer GEMM is exact on this CPU, 10
when it is not (x86 without VNNI: bench/peers/common.py's ort_int8_exact),
and prints what it found; any other status is a failure of the probe
itself. tests/test_qdq_ort.sh asks this before it holds qforge's exact INT8
to ONNX Runtime's results."""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "bench", "peers"))
from common import ort_int8_exact  # noqa: E402

import onnxruntime  # noqa: E402

got, exact = ort_int8_exact()
print(f"onnxruntime {onnxruntime.__version__} u8 x s8 MatMulInteger of 64 x 255 x 127: {got} (exact {exact})")
sys.exit(0 if got == exact else 10)
