"""Shared helpers for peer scripts: image loading with the same preprocessing
qforge's presets use (PIL bilinear resize, torchvision-style center crop),
labels as `qforge eval` assigns them, a calibration reader for ONNX Runtime's
quantize_static, and top-1 prediction with an onnxruntime session."""
import os
import numpy as np
from PIL import Image

PRESETS = {
    "cifar10": dict(resize=0, crop=0, mean=(0.4914, 0.4822, 0.4465), std=(0.2023, 0.1994, 0.2010)),
    "imagenet": dict(resize=256, crop=224, mean=(0.485, 0.456, 0.406), std=(0.229, 0.224, 0.225)),
}
EXTS = (".png", ".jpg", ".jpeg", ".ppm", ".pgm", ".pnm")


def evenly_spaced(files, count):
    """The subset qforge's -n COUNT takes (datasets/scan.c): files i*n/count, in order."""
    n = len(files)
    if count is None or count <= 0 or count >= n:
        return files
    return [files[i * n // count] for i in range(count)]


def list_images(folder):
    """Image files under folder, recursively, in sorted relative-path order (as qforge scans)."""
    out = []
    for root, _, files in os.walk(folder):
        for f in files:
            if f.lower().endswith(EXTS) and not f.startswith("."):
                out.append(os.path.relpath(os.path.join(root, f), folder))
    return [os.path.join(folder, p) for p in sorted(out)]


def load(path, preset):
    """One image as a (1,C,H,W) float32 array; preset is a name of PRESETS or
    a dict with the same keys."""
    p = PRESETS[preset] if isinstance(preset, str) else preset
    img = Image.open(path).convert("RGB")
    if p["resize"]:
        w, h = img.size
        s = p["resize"] / min(w, h)
        img = img.resize((max(1, round(w * s)), max(1, round(h * s))), Image.BILINEAR)
    if p["crop"]:
        w, h = img.size
        c = p["crop"]
        left, top = int(round((w - c) / 2.0)), int(round((h - c) / 2.0))
        img = img.crop((left, top, left + c, top + c))
    x = np.asarray(img, dtype=np.float32) / 255.0
    x = (x - np.array(p["mean"], np.float32)) / np.array(p["std"], np.float32)
    return x.transpose(2, 0, 1)[None].astype(np.float32)


def load_all(files, preset):
    """Every image of files preprocessed, as one (N,C,H,W) float32 array."""
    return np.concatenate([load(f, preset) for f in files], axis=0)


def folder_labels(files, folder):
    """Class index of each file: the position of its first sub-folder of
    `folder` in sorted order (qforge eval's class sub-folders)."""
    top = [os.path.relpath(f, folder).split(os.sep)[0] for f in files]
    classes = sorted(set(top))
    return np.array([classes.index(t) for t in top], np.int64)


def synset_labels(files, synsets):
    """Class index of each file: the line of synsets.txt whose wnid starts the
    file name (ImageNet style, qforge eval --synsets)."""
    with open(synsets) as f:
        wnids = [line.split()[0] for line in f if line.strip()]
    index = {w: k for k, w in enumerate(wnids)}
    return np.array([index[os.path.basename(p).split("_")[0]] for p in files], np.int64)


def input_batch(model_path):
    """The input's name and its batch dim: an int when the model fixes it, else None."""
    import onnx
    vi = onnx.load(model_path, load_external_data=False).graph.input[0]
    d0 = vi.type.tensor_type.shape.dim[0]
    return vi.name, (d0.dim_value if d0.HasField("dim_value") else None)


def logits(model_path, x, batch=64):
    """The first output of the model for every row of x (N,C,H,W), flattened
    to (N, K), with onnxruntime on the CPU. Models with a fixed batch dim
    (resnet20.onnx hard-codes 1) run at that batch."""
    import onnxruntime as ort
    name, fixed = input_batch(model_path)
    b = fixed or batch
    so = ort.SessionOptions()
    so.log_severity_level = 3
    sess = ort.InferenceSession(model_path, so, providers=["CPUExecutionProvider"])
    out = []
    for i in range(0, len(x), b):
        y = sess.run(None, {name: x[i:i + b]})[0]
        out.append(y.reshape(y.shape[0], -1))
    return np.concatenate(out)


def predict(model_path, x, batch=64):
    """Top-1 class of every row of x (N,C,H,W) with onnxruntime on the CPU."""
    return np.argmax(logits(model_path, x, batch), axis=1)


def sqnr_db(ref, y):
    """10 log10(sum ref^2 / sum (y - ref)^2) over all outputs, as qforge eval
    reports it (y == ref: inf)."""
    ref = ref.astype(np.float64)
    noise = float(((y.astype(np.float64) - ref) ** 2).sum())
    return float("inf") if noise == 0 else float(10 * np.log10((ref ** 2).sum() / noise))


def calib_reader(files, preset, input_name):
    """An onnxruntime.quantization.CalibrationDataReader that feeds the
    preprocessed images of files one at a time."""
    from onnxruntime.quantization import CalibrationDataReader

    class Reader(CalibrationDataReader):
        def __init__(self):
            self.i = 0

        def get_next(self):
            if self.i >= len(files):
                return None
            x = load(files[self.i], preset)
            self.i += 1
            return {input_name: x}

        def rewind(self):
            self.i = 0

    return Reader()


def ort_int8_exact():
    """(got, exact): ONNX Runtime's u8 x s8 MatMulInteger of 64 products
    255 x 127 on this CPU, and the true sum. Without VNNI its x86 kernels sum
    byte pairs in 16 bits (vpmaddubsw), which saturates at 32767, so its INT8
    outputs there are not the model's (its docs advise 7-bit weights,
    reduce_range, on such CPUs): got is then 32 x 32767."""
    import onnxruntime as ort
    from onnx import TensorProto, helper, numpy_helper
    k = 64
    b = numpy_helper.from_array(np.full((k, 1), 127, np.int8), "b")
    graph = helper.make_graph([helper.make_node("MatMulInteger", ["a", "b"], ["y"])], "probe",
                              [helper.make_tensor_value_info("a", TensorProto.UINT8, [1, k])],
                              [helper.make_tensor_value_info("y", TensorProto.INT32, [1, 1])], [b])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    got = int(sess.run(None, {"a": np.full((1, k), 255, np.uint8)})[0][0, 0])
    return got, k * 255 * 127
