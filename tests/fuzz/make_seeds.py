#!/usr/bin/env python3
"""Writes the committed seeds of the libFuzzer harnesses (tests/fuzz/seeds/<harness>/)
and the ONNX dictionary (tests/fuzz/onnx.dict).

Run once by a developer, not by the build; its outputs are committed. Plain
python3, no packages: ONNX models are encoded by the small protobuf writer
below, so each seed stays a few hundred bytes yet reaches an op qforge
implements. Given a built qforge (`make_seeds.py build/tools/qforge`), it also
calibrates and quantizes seeds into .calib and .qfm seeds. Seeds from the real
models and images of ../shared are gathered at run time by run.sh instead.
"""
import os
import shutil
import struct
import subprocess
import sys
import tempfile
import zlib

HERE = os.path.dirname(os.path.abspath(__file__))
SEEDS = os.path.join(HERE, "seeds")

# ---- protobuf --------------------------------------------------------------------------


def varint(n):
    n &= (1 << 64) - 1
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        out.append(b | (0x80 if n else 0))
        if not n:
            return bytes(out)


def key(field, wire):
    return varint(field << 3 | wire)


def vint(field, v):
    return key(field, 0) + varint(v)


def ld(field, payload):
    if isinstance(payload, str):
        payload = payload.encode()
    return key(field, 2) + varint(len(payload)) + payload


def f32(field, v):
    return key(field, 5) + struct.pack("<f", v)


# onnx.proto field numbers used below (and in the dictionary)
FIELDS = {
    "ModelProto": {"ir_version": (1, 0), "producer_name": (2, 2), "graph": (7, 2), "opset_import": (8, 2),
                   "doc_string": (6, 2), "domain": (4, 2), "model_version": (5, 0), "metadata_props": (14, 2),
                   "functions": (25, 2)},
    "OperatorSetIdProto": {"domain": (1, 2), "version": (2, 0)},
    "GraphProto": {"node": (1, 2), "name": (2, 2), "initializer": (5, 2), "doc_string": (10, 2), "input": (11, 2),
                   "output": (12, 2), "value_info": (13, 2), "sparse_initializer": (15, 2)},
    "NodeProto": {"input": (1, 2), "output": (2, 2), "name": (3, 2), "op_type": (4, 2), "attribute": (5, 2),
                  "doc_string": (6, 2), "domain": (7, 2)},
    "AttributeProto": {"name": (1, 2), "f": (2, 5), "i": (3, 0), "s": (4, 2), "t": (5, 2), "g": (6, 2),
                       "floats": (7, 2), "ints": (8, 2), "strings": (9, 2), "tensors": (10, 2), "graphs": (11, 2),
                       "type": (20, 0), "ref_attr_name": (21, 2)},
    "TensorProto": {"dims": (1, 0), "data_type": (2, 0), "segment": (3, 2), "float_data": (4, 2),
                    "int32_data": (5, 2), "string_data": (6, 2), "int64_data": (7, 2), "name": (8, 2),
                    "raw_data": (9, 2), "double_data": (10, 2), "uint64_data": (11, 2), "doc_string": (12, 2),
                    "external_data": (13, 2), "data_location": (14, 0)},
    "StringStringEntryProto": {"key": (1, 2), "value": (2, 2)},
    "ValueInfoProto": {"name": (1, 2), "type": (2, 2), "doc_string": (3, 2)},
    "TypeProto": {"tensor_type": (1, 2), "sequence_type": (4, 2), "map_type": (5, 2), "optional_type": (9, 2),
                  "denotation": (6, 2)},
    "TypeProto.Tensor": {"elem_type": (1, 0), "shape": (2, 2)},
    "TensorShapeProto": {"dim": (1, 2)},
    "TensorShapeProto.Dimension": {"dim_value": (1, 0), "dim_param": (2, 2), "denotation": (3, 2)},
}

FLOAT, UINT8, INT8, INT32, INT64, FLOAT16, DOUBLE = 1, 2, 3, 6, 7, 10, 11
A_FLOAT, A_INT, A_STRING, A_TENSOR, A_FLOATS, A_INTS = 1, 2, 3, 4, 6, 7

_det = [12345]


def rnd():
    """Deterministic values in [-1, 1): seeds must not change between runs."""
    _det[0] = (_det[0] * 1103515245 + 12345) & 0x7FFFFFFF
    return _det[0] / 0x40000000 - 1.0


def tensor(name, dims, dtype=FLOAT, values=None, external=None):
    n = 1
    for d in dims:
        n *= d
    out = ld(8, name) + vint(2, dtype) + b"".join(vint(1, d) for d in dims)
    if external:
        loc, off, length = external
        out += ld(13, ld(1, "location") + ld(2, loc)) + ld(13, ld(1, "offset") + ld(2, str(off)))
        out += ld(13, ld(1, "length") + ld(2, str(length))) + vint(14, 1)
        return out
    if values is None:
        values = [round(rnd(), 3) for _ in range(n)]
    fmt = {FLOAT: "<f", INT64: "<q", INT32: "<i", INT8: "<b", UINT8: "<B"}[dtype]
    if dtype == FLOAT16:
        raw = b"".join(struct.pack("<e", v) for v in values)
    else:
        raw = b"".join(struct.pack(fmt, v) for v in values)
    return out + ld(9, raw)


def attr(name, v):
    if isinstance(v, float):
        return ld(1, name) + f32(2, v) + vint(20, A_FLOAT)
    if isinstance(v, int):
        return ld(1, name) + vint(3, v) + vint(20, A_INT)
    if isinstance(v, str):
        return ld(1, name) + ld(4, v) + vint(20, A_STRING)
    if isinstance(v, bytes):  # a TensorProto
        return ld(1, name) + ld(5, v) + vint(20, A_TENSOR)
    if v and isinstance(v[0], float):
        return ld(1, name) + b"".join(f32(7, x) for x in v) + vint(20, A_FLOATS)
    return ld(1, name) + b"".join(vint(8, x) for x in v) + vint(20, A_INTS)


def node(op, ins, outs, name=None, domain=None, **attrs):
    out = b"".join(ld(1, i) for i in ins) + b"".join(ld(2, o) for o in outs)
    if name:
        out += ld(3, name)
    out += ld(4, op)
    for k, v in attrs.items():
        out += ld(5, attr(k, v))
    if domain:
        out += ld(7, domain)
    return out


def value_info(name, dims, dtype=FLOAT):
    shape = b"".join(ld(1, ld(2, d) if isinstance(d, str) else vint(1, d)) for d in dims)
    return ld(1, name) + ld(2, ld(1, vint(1, dtype) + ld(2, shape)))


def model(nodes, inits, inputs, outputs, opset, name="seed", domains=()):
    g = b"".join(ld(1, n) for n in nodes) + ld(2, name) + b"".join(ld(5, t) for t in inits)
    g += b"".join(ld(11, value_info(*i)) for i in inputs) + b"".join(ld(12, value_info(*o)) for o in outputs)
    opsets = ld(8, ld(1, "") + vint(2, opset)) + b"".join(ld(8, ld(1, d) + vint(2, 1)) for d in domains)
    return vint(1, 8) + ld(2, "qforge-make-seeds") + ld(7, g) + opsets


# ---- ONNX seeds: every op qforge implements, a few at a time, a few hundred bytes each ------------


def onnx_seeds():
    s = {}
    # MobileNet's exporter flatten: Shape/Gather/Unsqueeze/Concat/Reshape, then MatMul + Add + Softmax
    s["flatten_chain"] = model(
        [node("GlobalAveragePool", ["x"], ["p"]), node("Shape", ["p"], ["s"]),
         node("Gather", ["s", "zero"], ["b"], axis=0), node("Unsqueeze", ["b"], ["bu"], axes=[0]),
         node("Concat", ["bu", "minus1"], ["shape"], axis=0), node("Reshape", ["p", "shape"], ["f"]),
         node("MatMul", ["f", "w"], ["m"]), node("Add", ["m", "bias"], ["l"]),
         node("Softmax", ["l"], ["y"], axis=1)],
        [tensor("zero", [], INT64, [0]), tensor("minus1", [1], INT64, [-1]), tensor("w", [3, 3]),
         tensor("bias", [3])],
        [("x", ["N", 3, 2, 2])], [("y", ["N", 3])], 12)
    # depthwise conv + ReLU6 (Clip with min/max inputs), Identity, BatchNorm, pools, Concat
    s["dw_clip"] = model(
        [node("Conv", ["x", "dw", "db"], ["c"], group=3, kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
         node("Clip", ["c", "lo", "hi"], ["r6"]), node("Identity", ["r6"], ["i"]),
         node("BatchNormalization", ["i", "g", "b", "m", "v"], ["bn"], epsilon=1e-5),
         node("MaxPool", ["bn"], ["mp"], kernel_shape=[2, 2], strides=[2, 2], ceil_mode=1),
         node("AveragePool", ["bn"], ["ap"], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1],
              count_include_pad=1),
         node("Concat", ["mp", "ap"], ["y"], axis=1)],
        [tensor("dw", [3, 1, 3, 3]), tensor("db", [3]), tensor("lo", [], FLOAT, [0.0]),
         tensor("hi", [], FLOAT, [6.0]), tensor("g", [3]), tensor("b", [3]), tensor("m", [3]),
         tensor("v", [3], FLOAT, [0.5, 1.0, 2.0])],
        [("x", [1, 3, 5, 5])], [("y", [1, 6, 3, 3])], 13)
    # layout and indexing ops with their opset-13 inputs
    s["tensor_ops"] = model(
        [node("Transpose", ["x"], ["t"], perm=[0, 1, 3, 2]),
         node("Pad", ["t", "pads"], ["p"], mode="reflect"),
         node("Slice", ["p", "starts", "ends", "axes", "steps"], ["sl"]),
         node("Split", ["sl", "split"], ["s0", "s1"], axis=1),
         node("Mul", ["s0", "s1"], ["mu"]), node("Sub", ["mu", "s1"], ["su"]), node("Div", ["su", "two"], ["d"]),
         node("Resize", ["d", "", "scales"], ["rs"], mode="nearest"),
         node("ReduceMean", ["rs"], ["rm"], axes=[2, 3], keepdims=0),
         node("Cast", ["rm"], ["c16"], to=FLOAT16), node("Cast", ["c16"], ["c32"], to=FLOAT),
         node("Unsqueeze", ["c32", "ax"], ["u"]), node("Squeeze", ["u", "ax"], ["y"])],
        [tensor("pads", [8], INT64, [0, 0, 1, 1, 0, 0, 1, 1]), tensor("starts", [2], INT64, [1, 0]),
         tensor("ends", [2], INT64, [5, 6]), tensor("axes", [2], INT64, [2, 3]), tensor("steps", [2], INT64, [1, 2]),
         tensor("split", [2], INT64, [1, 1]), tensor("two", [], FLOAT, [2.0]),
         tensor("scales", [4], FLOAT, [1.0, 1.0, 2.0, 2.0]), tensor("ax", [1], INT64, [2])],
        [("x", [1, 2, 4, 4])], [("y", [1, 1])], 13)
    # Q/DQ with per-axis scales in front of a conv, and the activations
    s["qdq_acts"] = model(
        [node("QuantizeLinear", ["x", "xs", "xz"], ["xq"]), node("DequantizeLinear", ["xq", "xs", "xz"], ["xd"]),
         node("DequantizeLinear", ["wq", "ws", "wz"], ["w"], axis=0),
         node("Conv", ["xd", "w"], ["c"], kernel_shape=[1, 1]),
         node("LeakyRelu", ["c"], ["a1"], alpha=0.1), node("PRelu", ["a1", "slope"], ["a2"]),
         node("HardSigmoid", ["a2"], ["a3"], alpha=0.2, beta=0.5), node("HardSwish", ["a3"], ["a4"]),
         node("Tanh", ["a4"], ["a5"]), node("Sigmoid", ["a5"], ["a6"]), node("Relu", ["a6"], ["y"])],
        [tensor("xs", [], FLOAT, [0.05]), tensor("xz", [], INT8, [0]),
         tensor("wq", [2, 3, 1, 1], INT8, [1, -2, 3, -4, 5, -6]), tensor("ws", [2], FLOAT, [0.1, 0.2]),
         tensor("wz", [2], INT8, [0, 0]), tensor("slope", [2, 1, 1], FLOAT, [0.25, 0.5])],
        [("x", [1, 3, 2, 2])], [("y", [1, 2, 2, 2])], 14)
    # a QOperator model as ORT writes it: uint8 activations with zero points, QLinearConv with an
    # int32 bias, com.microsoft's QLinearAdd and QLinearGlobalAveragePool
    s["qop_uint8"] = model(
        [node("QuantizeLinear", ["x", "xs", "xz"], ["xq"]),
         node("QLinearConv", ["xq", "xs", "xz", "wq", "ws", "wz", "cs", "cz", "b"], ["cq"], kernel_shape=[1, 1]),
         node("QLinearAdd", ["cq", "cs", "cz", "cq", "cs", "cz", "as", "az"], ["aq"], domain="com.microsoft"),
         node("QLinearGlobalAveragePool", ["aq", "as", "az", "gs", "gz"], ["gq"], domain="com.microsoft",
              channels_last=0),
         node("DequantizeLinear", ["gq", "gs", "gz"], ["y"])],
        [tensor("xs", [], FLOAT, [0.02]), tensor("xz", [], UINT8, [131]),
         tensor("wq", [2, 3, 1, 1], INT8, [1, -2, 3, -4, 5, -6]), tensor("ws", [2], FLOAT, [0.1, 0.2]),
         tensor("wz", [2], INT8, [0, 0]), tensor("cs", [], FLOAT, [0.05]), tensor("cz", [], UINT8, [128]),
         tensor("b", [2], INT32, [40, -25]), tensor("as", [], FLOAT, [0.1]), tensor("az", [], UINT8, [120]),
         tensor("gs", [], FLOAT, [0.1]), tensor("gz", [], UINT8, [126])],
        [("x", [1, 3, 2, 2])], [("y", [1, 2, 1, 1])], 13, domains=("com.microsoft",))
    # Q/DQ with uint8 zero points around a Conv whose int32 bias is dequantized too, a residual Add
    # of two dequantized tensors, and the Relu between them (ORT's quantize_static, QDQ format)
    s["qdq_uint8_bias"] = model(
        [node("QuantizeLinear", ["x", "xs", "xz"], ["xq"]), node("DequantizeLinear", ["xq", "xs", "xz"], ["xd"]),
         node("DequantizeLinear", ["wq", "ws", "wz"], ["w"], axis=0),
         node("DequantizeLinear", ["bq", "bs", "bz"], ["b"], axis=0),
         node("Conv", ["xd", "w", "b"], ["c"], kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
         node("Relu", ["c"], ["r"]),
         node("QuantizeLinear", ["r", "rs", "rz"], ["rq"]), node("DequantizeLinear", ["rq", "rs", "rz"], ["rd"]),
         node("Add", ["rd", "xd"], ["a"]),
         node("QuantizeLinear", ["a", "as", "az"], ["aq"]), node("DequantizeLinear", ["aq", "as", "az"], ["y"])],
        [tensor("xs", [], FLOAT, [0.03]), tensor("xz", [], UINT8, [3]),
         tensor("wq", [2, 2, 3, 3], INT8, [((7 * i) % 11) - 5 for i in range(36)]),
         tensor("ws", [2], FLOAT, [0.05, 0.08]), tensor("wz", [2], INT8, [0, 0]),
         tensor("bq", [2], INT32, [17, -9]), tensor("bs", [2], FLOAT, [0.0015, 0.0024]), tensor("bz", [2], INT32, [0, 0]),
         tensor("rs", [], FLOAT, [0.04]), tensor("rz", [], UINT8, [0]),
         tensor("as", [], FLOAT, [0.06]), tensor("az", [], UINT8, [10])],
        [("x", [1, 2, 3, 3])], [("y", [1, 2, 3, 3])], 13)
    # opset 9: Upsample, Dropout, ConvTranspose, Gemm after Flatten, GlobalMaxPool, a Constant node
    s["opset9_mix"] = model(
        [node("Constant", [], ["k"], value=tensor("kv", [4], FLOAT, [1.0, 1.0, 2.0, 2.0])),
         node("Upsample", ["x", "k"], ["u"], mode="nearest"),
         node("ConvTranspose", ["u", "tw"], ["ct"], strides=[2, 2], kernel_shape=[2, 2], output_padding=[1, 1]),
         node("Dropout", ["ct"], ["dr"], ratio=0.5), node("GlobalMaxPool", ["dr"], ["gp"]),
         node("Flatten", ["gp"], ["f"], axis=1), node("Gemm", ["f", "gw", "gb"], ["y"], transB=1, alpha=0.5)],
        [tensor("tw", [2, 3, 2, 2]), tensor("gw", [4, 3]), tensor("gb", [4])],
        [("x", [1, 2, 2, 2])], [("y", [1, 4])], 9)
    # weights in external data: the harness's folder holds weights.bin (4096 bytes)
    s["external"] = model(
        [node("Conv", ["x", "w", "b"], ["c"], kernel_shape=[2, 2], strides=[1, 1], dilations=[1, 1],
              auto_pad="SAME_UPPER"), node("Relu", ["c"], ["y"])],
        [tensor("w", [2, 1, 2, 2], external=("weights.bin", 64, 32)),
         tensor("b", [2], external=("weights.bin", 128, 8))],
        [("x", [1, 1, 3, 3])], [("y", [1, 2, 3, 3])], 17)
    # ResNet-20's shape (opset 7): a residual Add, and a Reshape that hard-codes batch 1
    s["reshape_batch1"] = model(
        [node("Conv", ["x", "w", "b"], ["c"], kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
         node("Add", ["c", "x"], ["a"]), node("Relu", ["a"], ["r"]), node("GlobalAveragePool", ["r"], ["p"]),
         node("Reshape", ["p", "shape"], ["f"]), node("Gemm", ["f", "gw", "gb"], ["y"], transB=1)],
        [tensor("w", [3, 3, 3, 3]), tensor("b", [3]), tensor("shape", [2], INT64, [1, 3]), tensor("gw", [2, 3]),
         tensor("gb", [2])],
        [("x", [1, 3, 4, 4])], [("y", [1, 2])], 7)
    # opset 21 Resize with sizes, linear; Pad with constant value and axes
    s["opset21_resize"] = model(
        [node("Resize", ["x", "", "", "sizes"], ["r"], mode="linear",
              coordinate_transformation_mode="half_pixel"),
         node("Pad", ["r", "pads", "cv", "axes"], ["y"], mode="constant")],
        [tensor("sizes", [4], INT64, [1, 1, 3, 5]), tensor("pads", [4], INT64, [1, 0, 0, 2]),
         tensor("cv", [], FLOAT, [0.5]), tensor("axes", [2], INT64, [2, 3])],
        [("x", [1, 1, 2, 2])], [("y", [1, 1, 4, 7])], 21)
    return s


# ---- the dictionary ------------------------------------------------------------------------------

OPS_DEF = os.path.join(HERE, "..", "..", "include", "qforge", "ops.def")
DICT_WORDS = ["kernel_shape", "pads", "strides", "dilations", "group", "axis", "axes", "perm", "mode", "epsilon",
              "momentum", "alpha", "beta", "transA", "transB", "keepdims", "auto_pad", "ceil_mode",
              "count_include_pad", "coordinate_transformation_mode", "nearest_mode", "to", "value", "min", "max",
              "split", "num_outputs", "starts", "ends", "output_padding", "output_shape", "is_test",
              "consumed_inputs", "spatial", "ratio", "allowzero", "storage_order", "training_mode",
              "cubic_coeff_a", "exclude_outside", "extrapolation_value", "keep_aspect_ratio_policy",
              "noop_with_empty_axes", "saturate", "block_size", "location", "offset", "length", "checksum",
              "weights.bin", "../weights.bin", "SAME_UPPER", "SAME_LOWER", "VALID", "NOTSET", "constant", "reflect",
              "edge", "wrap", "nearest", "linear", "cubic", "asymmetric", "align_corners", "half_pixel",
              "pytorch_half_pixel", "tf_crop_and_resize", "round_prefer_floor", "floor", "ceil", "ai.onnx",
              "com.microsoft", "batch", "N",
              # the QOperator ops lib/onnx_qop.c imports (not in ops.def)
              "QLinearConv", "QLinearMatMul", "QGemm", "QLinearAdd", "QLinearMul", "QLinearGlobalAveragePool",
              "QLinearAveragePool", "QLinearConcat", "QLinearSigmoid", "QLinearLeakyRelu", "channels_last"]


def write_dict():
    lines = ["# libFuzzer dictionary for fuzz_onnx, written by make_seeds.py: the tag bytes of the",
             "# onnx.proto fields qforge reads, the op types of include/qforge/ops.def, attribute",
             "# names and values, and numbers that sit at the bounds the importer checks."]
    tags = set()
    for msg, fields in FIELDS.items():
        for fname, (num, wire) in fields.items():
            tags.add((key(num, wire), f"{msg}.{fname}"))
    for raw, what in sorted(tags, key=lambda t: (t[0], t[1])):
        lines.append(f"# {what}")
        lines.append('tag_%s="%s"' % (raw.hex(), "".join("\\x%02x" % b for b in raw)))
    with open(OPS_DEF) as f:
        for line in f:
            if line.startswith("QF_OP("):
                name = line.split('"')[1]
                lines.append(f'op_{name}="{name}"')
    for w in DICT_WORDS:
        lines.append('w_%s="%s"' % ("".join(c if c.isalnum() else "_" for c in w), w))
    for n in [0x7F, 0x80, 0xFF, 0x7FFFFFFF, 0xFFFFFFFF, 1 << 31, 1 << 32, (1 << 63) - 1, -1]:
        raw = varint(n)
        lines.append('int_%s="%s"' % (raw.hex(), "".join("\\x%02x" % b for b in raw)))
    with open(os.path.join(HERE, "onnx.dict"), "w") as f:
        f.write("\n".join(lines) + "\n")


# ---- images: PNM of every kind, PNGs by hand (the JPEGs and PNGs of tests/images/bad are seeds too) ----


def png(w, h, color, depth, rows, interlace=0, extra=b""):
    def chunk(kind, body):
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))
    ihdr = struct.pack(">IIBBBBB", w, h, depth, color, 0, 0, interlace)
    raw = b"".join(b"\x00" + r for r in rows)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + extra + chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b"")


def image_seeds():
    s = {}
    s["p2.pgm"] = b"P2\n# comment\n3 2\n255\n0 128 255\n1 2 3\n"
    s["p3.ppm"] = b"P3\n2 2\n15\n0 1 2 3 4 5 6 7 8 9 10 15\n"
    s["p5.pgm"] = b"P5\n4 3\n255\n" + bytes(range(12))
    s["p6_16bit.ppm"] = b"P6 2 1 65535\n" + bytes(range(12))
    s["p6.ppm"] = b"P6\n3 3\n255\n" + bytes((i * 29) % 256 for i in range(27))
    s["rgb_interlaced.png"] = png(5, 5, 2, 8, [bytes((x * 40 + y) % 256 for x in range(15)) for y in range(5)],
                                  interlace=1)
    s["gray2.png"] = png(8, 2, 0, 2, [b"\x1b\xe4", b"\xe4\x1b"])
    s["palette_trns.png"] = png(2, 2, 3, 8, [b"\x00\x01", b"\x01\x00"],
                                extra=b"\x00\x00\x00\x06PLTE\xff\x00\x00\x00\xff\x00" + struct.pack(
                                    ">I", zlib.crc32(b"PLTE\xff\x00\x00\x00\xff\x00")) +
                                b"\x00\x00\x00\x01tRNS\x80" + struct.pack(">I", zlib.crc32(b"tRNS\x80")))
    s["rgba16.png"] = png(2, 1, 6, 16, [bytes(range(16))])
    return s


# ---- text seeds: labels, Triton requests, tactic caches -----------------------------------------------


def labels_seeds():
    return {
        "synsets.txt": b"n01440764 tench, Tinca tinca\nn01443537 goldfish, Carassius auratus\n",
        "classes.txt": b"cat\ndog\nhot dog\n",
        "labels.txt": b"cat/1.png 0\ndog/2.jpg 1\n./dog/puppies/3.pgm 1\nhot dog/4.JPEG 2\n"
                      b"n01440764_tench.JPEG 0\nn01443537_goldfish.png 1\nn01443537_2.ppm 1\n",
        "crlf.txt": b"  cat \r\ndog\r\n\r\n",
    }


def request(inputs, outputs):
    """Bytes read_request() of fuzz_triton.c parses: inputs (name, type, dims, buffers), outputs."""
    names = ["x", "y", "input", "x ", ""]
    out = bytes([len(inputs)])
    for name, dtype, dims, bufs in inputs:
        out += bytes([names.index(name), dtype, len(dims)]) + b"".join(struct.pack("<h", d) for d in dims)
        out += bytes([len(bufs)])
        for mem, data in bufs:
            out += bytes([mem]) + struct.pack("<H", len(data)) + data
    out += bytes([len(outputs)]) + bytes(names.index(o) for o in outputs)
    return out


def triton_seeds():
    fp32, uint8 = 11, 2
    x1 = bytes(768)
    x2 = bytes((i * 7) % 256 for i in range(1536))
    img = bytes((i * 13) % 256 for i in range(5 * 7 * 3))
    full = (b'{"name":"fuzzmodel","backend":"qforge","max_batch_size":8,'
            b'"input":[{"name":"x","data_type":"TYPE_FP32","dims":["3","8","8"]}],'
            b'"output":[{"name":"y","data_type":"TYPE_FP32","dims":["10"]}],'
            b'"dynamic_batching":{"preferred_batch_size":["4"]},'
            b'"parameters":{"threads":{"string_value":"1"}}}')
    raw = (b'{"name":"fuzzmodel","backend":"qforge","max_batch_size":4,"default_model_filename":"int8.qfm",'
           b'"input":[{"name":"x","data_type":"TYPE_UINT8","dims":["-1","-1","3"]}],'
           b'"output":[{"name":"y","data_type":"TYPE_FP32","dims":["10"]}],'
           b'"parameters":{"preprocess":{"string_value":"--resize 8 --crop 8"},'
           b'"batch_sizes":{"string_value":"1,3,4"}}}')
    nobatch = (b'{"name":"fuzzmodel","max_batch_size":0,'
               b'"input":[{"name":"x","data_type":"TYPE_FP32","dims":["1","3","8","8"]}],'
               b'"output":[{"name":"y","data_type":"TYPE_FP32","dims":["1","10"]}]}')
    return {
        "full": full + b"\0\0" + request([("x", fp32, [2, 3, 8, 8], [(0, x2)])], ["y"]) +
        request([("x", fp32, [1, 3, 8, 8], [(1, x1[:500]), (0, x1[500:])])], ["y"]),
        "autocomplete": b'{"name":"fuzzmodel","backend":"qforge"}\0\1' +
        request([("x", fp32, [1, 3, 8, 8], [(0, x1)])], ["y"]) +
        request([("x", fp32, [1, 3, 8, 8], [(0, x1)])], ["input"]),
        "raw_int8": raw + b"\0\0" + request([("x", uint8, [1, 5, 7, 3], [(0, img[:50]), (1, img[50:])])], ["y"]) +
        request([("x", uint8, [2, 2, 3, 1], [(0, bytes(12))])], ["y"]),
        "nobatch": nobatch + b"\0\0" + request([("x", fp32, [1, 3, 8, 8], [(0, x1)])], ["y", "y"]),
    }


def tactics_seeds():
    return {
        "cache.txt": b"qforge-tactics 1\ndevice fuzz\n"
                     b"conv:i8:1,64,56,56,64:3x3:s1,1:p1,1:d1,1:r0:q0:l0:n0:v00000000 3\n"
                     b"gemm:k0:64x3136x576:ld576,576,64:t10:b1:r0:a0:al0:n8 -1\n",
        "other_device.txt": b"qforge-tactics 1\ndevice H200\nkey 1\n",
    }


# ---- .calib and .qfm seeds through a built qforge ------------------------------------------------------


def qforge_seeds(qforge, onnx):
    """Calibrates the small seeds on the PNM/PNG seeds and quantizes them to each precision."""
    calib, qfm = {}, {}
    tmp = tempfile.mkdtemp()
    try:
        imgs = os.path.join(tmp, "images")
        os.mkdir(imgs)
        for name, data in image_seeds().items():
            if name.endswith((".ppm", ".png")):
                with open(os.path.join(imgs, name), "wb") as f:
                    f.write(data)
        for name in ["dw_clip", "flatten_chain", "qdq_acts", "reshape_batch1"]:
            src = os.path.join(tmp, name + ".onnx")
            with open(src, "wb") as f:
                f.write(onnx[name])
            table = os.path.join(tmp, name + ".calib")
            method = "all" if name == "dw_clip" else "entropy"
            shape = {"dw_clip": "5x5", "flatten_chain": "2x2", "qdq_acts": "2x2", "reshape_batch1": "4x4"}[name]
            subprocess.run([qforge, "calib", src, "--images", imgs, "--size", shape, "--method", method,
                            "-o", table, "--quiet", "--device", "cpu"], check=True)
            calib[name + ".calib"] = open(table, "rb").read()
            for prec in ["fp32", "fp16", "int8"]:
                out = os.path.join(tmp, f"{name}_{prec}.qfm")
                # a model that already holds Q/DQ nodes has no INT8 form: qforge says so, skip it
                if subprocess.run([qforge, "quant", src, "--calib", table, "--precision", prec, "-o", out,
                                   "--quiet"]).returncode == 0:
                    qfm[f"{name}_{prec}.qfm"] = open(out, "rb").read()
        # models quantized elsewhere need no table: .qfm 1.1 seeds with zero points
        for name in ["qop_uint8", "qdq_uint8_bias"]:
            src, out = os.path.join(tmp, name + ".onnx"), os.path.join(tmp, name + "_int8.qfm")
            with open(src, "wb") as f:
                f.write(onnx[name])
            subprocess.run([qforge, "quant", src, "-o", out, "--quiet"], check=True)
            qfm[name + "_int8.qfm"] = open(out, "rb").read()
    finally:
        shutil.rmtree(tmp)
    return calib, qfm


def put_all(harness, files):
    d = os.path.join(SEEDS, harness)
    os.makedirs(d, exist_ok=True)
    for name, data in files.items():
        with open(os.path.join(d, name), "wb") as f:
            f.write(data)


def main():
    onnx = onnx_seeds()
    put_all("onnx", {k + ".onnx": v for k, v in onnx.items()})
    put_all("image", image_seeds())
    put_all("labels", labels_seeds())
    put_all("triton", triton_seeds())
    put_all("tactics", tactics_seeds())
    write_dict()
    if len(sys.argv) > 1:
        calib, qfm = qforge_seeds(sys.argv[1], onnx)
        put_all("calib", calib)
        put_all("qfm", qfm)


if __name__ == "__main__":
    main()
