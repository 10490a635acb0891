#!/usr/bin/env python3
"""Exits 0 when ONNX Runtime's u8 x s8 integer GEMM is exact on this CPU, 1
when it is not, and prints what it found. Without VNNI, ONNX Runtime's x86
kernels sum the products of adjacent byte pairs in 16 bits (vpmaddubsw), which
saturates at 32767: its quantization docs advise 7-bit weights
(reduce_range) for non-VNNI CPUs for that reason. A MatMulInteger of 255s
against 127s shows it: 64 products of 32,385 are 2,072,640, and saturated
pairs give 32 x 32,767. tests/test_qdq_ort.sh asks this before it holds
qforge's exact INT8 to ONNX Runtime's results."""
import sys

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

K = 64
b = numpy_helper.from_array(np.full((K, 1), 127, np.int8), "b")
graph = helper.make_graph([helper.make_node("MatMulInteger", ["a", "b"], ["y"])], "probe",
                          [helper.make_tensor_value_info("a", TensorProto.UINT8, [1, K])],
                          [helper.make_tensor_value_info("y", TensorProto.INT32, [1, 1])], [b])
model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
model.ir_version = 8
sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
got = int(sess.run(None, {"a": np.full((1, K), 255, np.uint8)})[0][0, 0])
exact = K * 255 * 127
print(f"onnxruntime {ort.__version__} u8 x s8 MatMulInteger: {got} (exact {exact})")
sys.exit(0 if got == exact else 1)
