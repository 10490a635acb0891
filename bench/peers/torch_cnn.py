"""Exports a torchvision CNN (random weights: nothing can be downloaded on the
GPU machine) to ONNX for qforge, and times PyTorch eager FP16 on it as the
peer of `qforge bench`: channels_last, cudnn.benchmark, inputs resident on the
GPU, CUDA events around back-to-back forward passes.

usage: torch_cnn.py ARCH OUT.onnx [--batches 1,32,256] [--seconds 2] [--opset 13]
(the vision transformers need --opset 17: scaled_dot_product_attention and LayerNormalization)
prints one JSON object: {"arch", "peer", "results": [{"batch", "images_per_second", "latency_ms": {"p50"...}}]}"""
import argparse
import json
import sys

import torch
import torchvision


def export(model, path, opset=13):
    x = torch.randn(1, 3, 224, 224)
    kw = dict(input_names=["input"], output_names=["output"], dynamic_axes={"input": {0: "batch"}, "output": {0: "batch"}},
              opset_version=opset)
    try:
        torch.onnx.export(model, x, path, dynamo=False, **kw)
    except TypeError:  # a torch without the dynamo switch
        torch.onnx.export(model, x, path, **kw)


def time_eager(model, batch, seconds, size=224):
    x = torch.randn(batch, 3, size, size, device="cuda", dtype=torch.half).to(memory_format=torch.channels_last)
    with torch.inference_mode():
        for _ in range(10):
            model(x)
        torch.cuda.synchronize()
        # size the run from a short one
        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        e0.record()
        for _ in range(10):
            model(x)
        e1.record()
        torch.cuda.synchronize()
        per = e0.elapsed_time(e1) / 10
        n = max(20, min(5000, int(seconds * 1000 / max(per, 1e-3))))
        ev = [torch.cuda.Event(enable_timing=True) for _ in range(n + 1)]
        ev[0].record()
        for i in range(n):
            model(x)
            ev[i + 1].record()
        torch.cuda.synchronize()
    ms = sorted(ev[i].elapsed_time(ev[i + 1]) for i in range(n))
    total = sum(ms)
    pct = lambda p: ms[min(n - 1, max(0, int(-(-p * n // 100)) - 1))]
    return {"batch": batch, "images_per_second": round(batch * n / (total / 1000), 1),
            "latency_ms": {"p50": round(pct(50), 4), "p90": round(pct(90), 4), "p99": round(pct(99), 4)}, "iterations": n}


def time_compiled(model, batch, seconds, size=224):
    """torch.compile (inductor, mode reduce-overhead: CUDA graphs) of the FP16
    model, timed as time_eager times eager; compiling is not timed (it is
    warmed up by time_eager's first passes) but reported."""
    import time
    t0 = time.time()
    compiled = torch.compile(model, mode="reduce-overhead")
    x = torch.randn(batch, 3, size, size, device="cuda", dtype=torch.half).to(memory_format=torch.channels_last)
    with torch.inference_mode():
        for _ in range(3):
            compiled(x)
        torch.cuda.synchronize()
    r = time_eager(compiled, batch, seconds, size=size)
    r["compile_seconds"] = round(time.time() - t0, 1)
    return r


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("arch")
    ap.add_argument("out")
    ap.add_argument("--batches", default="1,32,256")
    ap.add_argument("--seconds", type=float, default=2.0)
    ap.add_argument("--opset", type=int, default=13)
    a = ap.parse_args()
    torch.manual_seed(0)
    model = getattr(torchvision.models, a.arch)(weights=None).eval()
    export(model, a.out, a.opset)
    torch.backends.cudnn.benchmark = True
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    m = model.cuda().half().to(memory_format=torch.channels_last)
    res = [time_eager(m, int(b), a.seconds) for b in a.batches.split(",")]
    json.dump({"arch": a.arch, "peer": "pytorch %s eager fp16 channels_last cudnn.benchmark" % torch.__version__,
               "device": torch.cuda.get_device_name(), "results": res}, sys.stdout)
    print()


if __name__ == "__main__":
    main()
