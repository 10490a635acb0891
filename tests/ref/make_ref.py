"""Writes the ONNX Runtime reference logits that tests/test_models_ref.c checks
qforge's CPU engine against. Inputs are a deterministic pseudo-random tensor
(the same LCG the test uses), so no image decoding is involved.
Run once from the repository root: python3 tests/ref/make_ref.py"""
import numpy as np
import onnxruntime as ort

MODELS = [  # (path relative to the repo root, batch, output file)
    ("../shared/data/cifar10/resnet20.onnx", 4, "tests/ref/resnet20.logits"),
    ("../shared/data/imagenet/mobilenetv2-fp32.onnx", 2, "tests/ref/mobilenetv2.logits"),
    ("examples/fashion-mnist/model.onnx", 4, "tests/ref/fashion-mnist.logits"),
]


def lcg_input(shape, seed=12345):
    n = int(np.prod(shape))
    x = seed
    out = np.empty(n, np.float32)
    for i in range(n):
        x = (1103515245 * x + 12345) % 2**31
        out[i] = np.float32(x / 2**31 * 4.0 - 2.0)
    return out.reshape(shape)


for path, batch, out in MODELS:
    s = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    inp = s.get_inputs()[0]
    shape = [batch] + [d for d in inp.shape[1:]]
    x = lcg_input(shape)
    # one image at a time: ResNet-20's graph is fixed at batch 1 (qforge runs the batch whole)
    y = np.concatenate([s.run(None, {inp.name: x[i:i + 1]})[0] for i in range(batch)])
    with open(out, "w") as f:
        f.write(f"# ONNX Runtime {ort.__version__} logits of {path} on the LCG input, batch {batch}\n")
        f.write(" ".join(str(d) for d in y.shape) + "\n")
        for v in y.reshape(-1):
            f.write(f"{v:.9g}\n")
    print(out, y.shape)
