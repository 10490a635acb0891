#!/usr/bin/env python3
"""Writes the malformed-model corpus tests/test_onnx_import.c reads.

Run once by hand (python3 + onnx), not by the build; its outputs are committed.
seed.onnx is a small valid CNN; every other file breaks one thing about it and
tests/test_onnx_import.c lists the status and the names each must report.
Hand-built protobuf bytes (huge length prefixes) use the tiny encoder below,
since the onnx package refuses to write them."""
import os
import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

HERE = os.path.dirname(os.path.abspath(__file__))


def out(name, data):
    with open(os.path.join(HERE, name), "wb") as f:
        f.write(data)


def save(name, model):
    out(name, model.SerializeToString())


# ---- the seed: x (1,3,8,8) -> Conv -> Relu -> GlobalAveragePool -> Flatten -> Gemm -> Softmax
def seed_parts(opset=13):
    rng = np.random.RandomState(0)
    w = rng.uniform(-1, 1, (4, 3, 3, 3)).astype(np.float32)
    b = rng.uniform(-1, 1, (4,)).astype(np.float32)
    fw = rng.uniform(-1, 1, (10, 4)).astype(np.float32)
    fb = rng.uniform(-1, 1, (10,)).astype(np.float32)
    inits = [
        numpy_helper.from_array(w, "conv1.weight"),
        numpy_helper.from_array(b, "conv1.bias"),
        # typed float_data instead of raw_data: the importer reads both
        helper.make_tensor("fc.weight", TensorProto.FLOAT, fw.shape, fw.flatten().tolist()),
        numpy_helper.from_array(fb, "fc.bias"),
    ]
    nodes = [
        helper.make_node("Conv", ["x", "conv1.weight", "conv1.bias"], ["c1"], name="conv1",
                         kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c1"], ["r1"]),  # unnamed: the importer calls it Relu_1
        helper.make_node("GlobalAveragePool", ["r1"], ["p1"], name="pool"),
        helper.make_node("Flatten", ["p1"], ["f1"], name="flatten", axis=1),
        helper.make_node("Gemm", ["f1", "fc.weight", "fc.bias"], ["logits"], name="fc", transB=1),
        helper.make_node("Softmax", ["logits"], ["y"], name="softmax", axis=1),
    ]
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, 8, 8])]
    outputs = [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 10])]
    return nodes, inits, inputs, outputs, opset


def model(nodes, inits, inputs, outputs, opset, name="seed"):
    g = helper.make_graph(nodes, name, inputs, outputs, initializer=inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)], producer_name="qforge-make-bad")
    m.ir_version = 8
    return m


def seed_model(**kw):
    return model(*seed_parts(**kw))


def replace_init(m, name, t):
    for i, old in enumerate(m.graph.initializer):
        if old.name == name:
            m.graph.initializer[i].CopyFrom(t)
            return m
    raise KeyError(name)


# ---- a minimal protobuf encoder for byte-level damage ----------------------------------
def varint(n):
    b = bytearray()
    while True:
        c = n & 0x7F
        n >>= 7
        if n:
            b.append(c | 0x80)
        else:
            b.append(c)
            return bytes(b)


def key(field, wire):
    return varint(field << 3 | wire)


def ld(field, payload):
    return key(field, 2) + varint(len(payload)) + payload


def with_raw_initializer(tensor_bytes):
    """The seed model plus one hand-encoded initializer (GraphProto field 5)."""
    m = seed_model()
    g = m.graph.SerializeToString() + ld(5, tensor_bytes)
    m.ClearField("graph")
    return m.SerializeToString() + ld(7, g)


def main():
    seed = seed_model()
    save("seed.onnx", seed)
    raw = seed.SerializeToString()

    out("empty.onnx", b"")
    out("text.onnx", b"This is not an ONNX model, just a text file.\n" * 4)
    out("truncated.onnx", raw[: len(raw) // 2])

    # one bit flipped in the graph's length prefix: the graph now claims more
    # bytes than the file has
    pos = raw.index(key(7, 2)) + 1
    n = 0
    while raw[pos + n] & 0x80:
        n += 1
    flipped = bytearray(raw)
    flipped[pos + n] ^= 0x40  # the top value bit of the last length byte
    out("bitflip.onnx", bytes(flipped))

    # dims whose element count overflows int64, on a tensor holding 432 bytes
    m = seed_model()
    t = numpy_helper.from_array(np.zeros((4, 3, 3, 3), np.float32), "conv1.weight")
    del t.dims[:]
    t.dims.extend([1 << 40, 1 << 40, 1 << 40])
    save("absurd_dims.onnx", replace_init(m, "conv1.weight", t))

    # nine dims (qforge stops at 8)
    m = seed_model()
    t = helper.make_tensor("conv1.bias", TensorProto.FLOAT, [1, 1, 1, 1, 4, 1, 1, 1, 1], [0.0] * 4)
    save("too_many_dims.onnx", replace_init(m, "conv1.bias", t))

    # dims promise 10^9 floats, float_data holds 3
    m = seed_model()
    t = helper.make_tensor("fc.bias", TensorProto.FLOAT, [3], [1.0, 2.0, 3.0])
    t.dims[0] = 1000000000
    save("count_mismatch.onnx", replace_init(m, "fc.bias", t))

    # raw_data (TensorProto field 9) declaring ~2 GiB and holding 8 bytes
    t = ld(8, b"huge_raw") + key(2, 0) + varint(TensorProto.FLOAT) + key(1, 0) + varint(2)
    t += key(9, 2) + varint(0x7FFFFFF0) + b"\0" * 8
    out("huge_raw_len.onnx", with_raw_initializer(t))

    # packed float_data (field 4) declaring 2^31 bytes of floats
    t = ld(8, b"huge_floats") + key(2, 0) + varint(TensorProto.FLOAT) + key(1, 0) + varint(3)
    t += key(4, 2) + varint(1 << 31) + b"\0" * 12
    out("huge_repeated.onnx", with_raw_initializer(t))

    # Conv reads a weight no initializer defines
    m = seed_model()
    keep = [i for i in m.graph.initializer if i.name != "conv1.weight"]
    del m.graph.initializer[:]
    m.graph.initializer.extend(keep)
    save("missing_init.onnx", m)

    # an op no one implements
    nodes, inits, inputs, outputs, opset = seed_parts()
    nodes[2] = helper.make_node("FancyPool", ["r1"], ["p1"], name="mystery")
    save("unknown_op.onnx", model(nodes, inits, inputs, outputs, opset))

    # a node of a custom domain
    nodes, inits, inputs, outputs, opset = seed_parts()
    nodes[1] = helper.make_node("Relu", ["c1"], ["r1"], name="custom_relu", domain="com.example")
    m = model(nodes, inits, inputs, outputs, opset)
    m.opset_import.append(helper.make_opsetid("com.example", 1))
    save("other_domain.onnx", m)

    # a cycle: cyc_a reads cyc_b's output and cyc_b reads cyc_a's
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])
    y = helper.make_tensor_value_info("b_out", TensorProto.FLOAT, [1, 4])
    nodes = [
        helper.make_node("Add", ["x", "b_out"], ["a_out"], name="cyc_a"),
        helper.make_node("Relu", ["a_out"], ["b_out"], name="cyc_b"),
    ]
    save("cycle.onnx", model(nodes, [], [x], [y], 13, "cycle"))

    # two nodes writing one value
    nodes, inits, inputs, outputs, opset = seed_parts()
    nodes.insert(2, helper.make_node("Relu", ["c1"], ["r1"], name="second_writer"))
    save("dup_output.onnx", model(nodes, inits, inputs, outputs, opset))

    # external data: a missing file, an offset past the end, a path leaving the folder
    def external(name, location, offset=None, length=None):
        m = seed_model()
        t = TensorProto()
        t.name = name
        t.data_type = TensorProto.FLOAT
        t.dims.extend([4])
        t.data_location = TensorProto.EXTERNAL
        for k, v in (("location", location), ("offset", offset), ("length", length)):
            if v is not None:
                e = t.external_data.add()
                e.key, e.value = k, str(v)
        return replace_init(m, name, t)

    save("ext_missing.onnx", external("conv1.bias", "ext_missing_weights.bin"))
    out("ext_offset.bin", np.arange(4, dtype=np.float32).tobytes())
    save("ext_offset.onnx", external("conv1.bias", "ext_offset.bin", offset=4096, length=16))
    save("ext_dotdot.onnx", external("conv1.bias", "../bad/ext_offset.bin"))

    # opsets outside 6..21
    save("opset99.onnx", seed_model(opset=99))
    save("opset5.onnx", seed_model(opset=5))

    # opset 6, read as opset 7: the seed with Gemm-6's broadcast attribute loads;
    # BatchNormalization in training mode (is_test=0) and a per-channel PRelu
    # slope (opset 6 broadcast it along axis 1, opset 7 numpy-style) do not
    nodes, inits, inputs, outputs, opset = seed_parts(opset=6)
    nodes[4].attribute.append(helper.make_attribute("broadcast", 1))
    save("opset6_seed.onnx", model(nodes, inits, inputs, outputs, opset))
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 4, 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 3, 4, 4])
    bn_inits = [numpy_helper.from_array(np.ones(3, np.float32), n) for n in ("scale", "bias", "mean", "var")]
    bn = helper.make_node("BatchNormalization", ["x", "scale", "bias", "mean", "var"], ["y"], name="bn_train",
                          is_test=0)
    save("opset6_bn_training.onnx", model([bn], bn_inits, [x], [y], 6))
    slope = numpy_helper.from_array(np.full(3, 0.25, np.float32), "slope")
    prelu = helper.make_node("PRelu", ["x", "slope"], ["y"], name="legacy_prelu")
    save("opset6_prelu.onnx", model([prelu], [slope], [x], [y], 6))

    # a float64 initializer
    m = seed_model()
    save("f64_init.onnx", replace_init(m, "fc.bias", numpy_helper.from_array(np.zeros(10, np.float64), "fc.bias")))

    # a subgraph attribute
    nodes, inits, inputs, outputs, opset = seed_parts()
    sub = helper.make_graph([], "body", [], [])
    nodes[3].attribute.append(helper.make_attribute("body", sub))
    save("graph_attr.onnx", model(nodes, inits, inputs, outputs, opset))


# ---- models quantized elsewhere: a Q/DQ seed (uint8 activations with zero
# points, per-channel int8 weights, an int32 bias), and what breaks it
def qdq_parts():
    rng = np.random.RandomState(1)
    w = rng.randint(-127, 128, (4, 3, 3, 3)).astype(np.int8)
    inits = [
        numpy_helper.from_array(np.array(0.02, np.float32), "x_scale"),
        numpy_helper.from_array(np.array(131, np.uint8), "x_zero_point"),
        numpy_helper.from_array(w, "w_q"),
        numpy_helper.from_array(rng.uniform(0.001, 0.01, 4).astype(np.float32), "w_scale"),
        numpy_helper.from_array(np.zeros(4, np.int8), "w_zero_point"),
        numpy_helper.from_array(rng.randint(-500, 500, 4).astype(np.int32), "b_q"),
        numpy_helper.from_array(np.array(0.05, np.float32), "y_scale"),
        numpy_helper.from_array(np.array(3, np.uint8), "y_zero_point"),
    ]
    bias_scale = (np.float32(0.02) * numpy_helper.to_array(inits[3])).astype(np.float32)
    inits.append(numpy_helper.from_array(bias_scale, "b_scale"))
    nodes = [
        helper.make_node("QuantizeLinear", ["x", "x_scale", "x_zero_point"], ["xq"], name="x_q"),
        helper.make_node("DequantizeLinear", ["xq", "x_scale", "x_zero_point"], ["xd"], name="x_dq"),
        helper.make_node("DequantizeLinear", ["w_q", "w_scale", "w_zero_point"], ["wd"], name="w_dq", axis=0),
        helper.make_node("DequantizeLinear", ["b_q", "b_scale"], ["bd"], name="b_dq", axis=0),
        helper.make_node("Conv", ["xd", "wd", "bd"], ["c1"], name="conv1", kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c1"], ["r1"], name="relu1"),
        helper.make_node("QuantizeLinear", ["r1", "y_scale", "y_zero_point"], ["yq"], name="y_q"),
        helper.make_node("DequantizeLinear", ["yq", "y_scale", "y_zero_point"], ["y"], name="y_dq"),
    ]
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, 8, 8])]
    outputs = [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 4, 8, 8])]
    return nodes, inits, inputs, outputs, 13


def qdq_model(nodes, inits, inputs, outputs, opset, domains=()):
    m = model(nodes, inits, inputs, outputs, opset, "qdq")
    for d in domains:
        m.opset_import.append(helper.make_opsetid(d, 1))
    return m


def set_init(inits, name, array):
    return [numpy_helper.from_array(array, name) if i.name == name else i for i in inits]


def qdq_corpus():
    save("qdq_seed.onnx", qdq_model(*qdq_parts()))
    # a zero activation scale
    nodes, inits, inputs, outputs, opset = qdq_parts()
    save("qdq_zero_scale.onnx", qdq_model(nodes, set_init(inits, "x_scale", np.array(0.0, np.float32)), inputs,
                                          outputs, opset))
    # an int32 bias with a zero point other than 0 (ONNX allows none but 0 there)
    nodes, inits, inputs, outputs, opset = qdq_parts()
    inits.append(numpy_helper.from_array(np.full(4, 7, np.int32), "b_zero_point"))
    nodes[3] = helper.make_node("DequantizeLinear", ["b_q", "b_scale", "b_zero_point"], ["bd"], name="b_dq", axis=0)
    save("qdq_bias_zero_point.onnx", qdq_model(nodes, inits, inputs, outputs, opset))
    # a 16-bit zero point: qforge quantizes to 8 bits only
    nodes, inits, inputs, outputs, opset = qdq_parts()
    save("qdq_zero_point_16bit.onnx", qdq_model(nodes, set_init(inits, "y_zero_point", np.array(3, np.uint16)),
                                                inputs, outputs, opset))
    # a malformed pair: DequantizeLinear of the float activation itself
    nodes, inits, inputs, outputs, opset = qdq_parts()
    nodes[1] = helper.make_node("DequantizeLinear", ["x", "x_scale", "x_zero_point"], ["xd"], name="x_dq")
    save("qdq_float_dequantize.onnx", qdq_model(nodes, inits, inputs, outputs, opset))
    # per-channel weight scales of the wrong length
    nodes, inits, inputs, outputs, opset = qdq_parts()
    save("qdq_axis_length.onnx", qdq_model(nodes, set_init(inits, "w_scale", np.full(3, 0.01, np.float32)), inputs,
                                           outputs, opset))
    # a QLinear op qforge does not import
    nodes, inits, inputs, outputs, opset = qdq_parts()
    nodes[5:7] = [helper.make_node("QLinearSoftmax", ["c1q", "y_scale", "y_zero_point", "y_scale", "y_zero_point"],
                                   ["yq"], name="qsoftmax", domain="com.microsoft", axis=1)]
    nodes.insert(5, helper.make_node("QuantizeLinear", ["c1", "y_scale", "y_zero_point"], ["c1q"], name="c1_q"))
    save("qop_unsupported.onnx", qdq_model(nodes, inits, inputs, outputs, opset, ["com.microsoft"]))


if __name__ == "__main__":
    main()
    qdq_corpus()
