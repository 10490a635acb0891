#!/usr/bin/env python3
"""ONNX Runtime's CPU throughput on one model, timed as `qforge bench --device
cpu` times qforge: inputs of the model's shape at --batch filled with values in
[-2, 2), two warm-up runs that also size the timed run to about --duration
seconds, then runs back to back; images/s = batch x runs / their summed time.
Prints qforge bench's JSON shape (images_per_second, latency_ms p50) so that
bench/bench_cpu_int8.sh reads either alike.
--profile then prints every node's median time over five more runs, from ONNX
Runtime's own profiler, as `qforge bench --profile` prints qforge's.
Usage: ort_speed.py MODEL.onnx [--batch B] [--duration S | --iterations N] [--threads T] [--json] [--profile]"""
import argparse
import json
import time

import numpy as np


def batch_free(path):
    """The model's bytes with dim 0 of every graph input and output made
    symbolic, so that a model exported at batch 1 (CIFAR-10 ResNet-20, the ONNX
    zoo's MobileNetV2) runs at --batch as qforge runs it; such a model's
    constant Reshape targets that start with its batch of 1 start with 0 (copy
    the input's dim) instead. main() checks the result against batch 1."""
    import onnx
    from onnx import numpy_helper
    m = onnx.load(path)
    fixed_one = any(len(v.type.tensor_type.shape.dim) > 0 and v.type.tensor_type.shape.dim[0].dim_value == 1
                    for v in m.graph.input)
    for v in list(m.graph.input) + list(m.graph.output):
        dims = v.type.tensor_type.shape.dim
        if len(dims) > 0:
            dims[0].dim_param = "batch"
    del m.graph.value_info[:]
    if fixed_one:
        consts = {t.name: t for t in m.graph.initializer}
        for n in m.graph.node:
            if n.op_type == "Reshape" and len(n.input) > 1 and n.input[1] in consts:
                t = consts[n.input[1]]
                shape = numpy_helper.to_array(t).copy()
                if shape.size > 1 and shape[0] == 1:
                    shape[0] = 0
                    t.CopyFrom(numpy_helper.from_array(shape, t.name))
    return m.SerializeToString()


def session(path, threads, profile=False):
    import onnxruntime as ort
    so = ort.SessionOptions()
    so.enable_profiling = profile
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    return ort.InferenceSession(batch_free(path), so, providers=["CPUExecutionProvider"])


def feeds(sess, batch):
    rng = np.random.default_rng(0)
    out = {}
    for i in sess.get_inputs():
        shape = [batch if k == 0 else d for k, d in enumerate(i.shape)]
        if any(not isinstance(d, int) for d in shape):
            raise SystemExit(f"ort_speed: input {i.name} has a symbolic dim other than the batch: {i.shape}")
        out[i.name] = rng.uniform(-2.0, 2.0, size=shape).astype(np.float32)
    return out


PROFILE_RUNS = 5


def profile(a, x):
    """Each node's median kernel time (ms) over PROFILE_RUNS runs after a
    warm-up, from a second session with ONNX Runtime's profiler on."""
    import os
    import tempfile
    cwd, model = os.getcwd(), os.path.abspath(a.model)
    with tempfile.TemporaryDirectory() as d:
        os.chdir(d)  # the profiler writes its trace into the working folder
        try:
            sess = session(model, a.threads, profile=True)
            for _ in range(2 + PROFILE_RUNS):
                sess.run(None, x)
            with open(sess.end_profiling()) as f:
                trace = json.load(f)
        finally:
            os.chdir(cwd)
    times, ops = {}, {}
    for ev in trace:
        if ev.get("cat") == "Node" and ev["name"].endswith("_kernel_time"):
            node = ev["name"][:-len("_kernel_time")]
            times.setdefault(node, []).append(ev["dur"] / 1e3)
            args = ev.get("args", {})
            shapes = [next(iter(d.values())) for d in args.get("input_type_shape", [])[:1] + args.get("output_type_shape", [])]
            ops[node] = (args.get("op_name", "?"), " -> ".join("x".join(map(str, d)) for d in shapes))
    med = {k: float(np.median(v[-PROFILE_RUNS:])) for k, v in times.items()}
    total = sum(med.values())
    print(f"  per node ({total:.3f} ms in nodes):")
    for k in sorted(med, key=med.get, reverse=True):
        print(f"    {med[k]:8.4f} ms {100 * med[k] / (total or 1):5.1f}%  {ops[k][0]:18s} {k}  {ops[k][1]}")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("model")
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--duration", type=float, default=5.0)
    ap.add_argument("--iterations", type=int, default=0, help="a fixed number of timed runs instead")
    ap.add_argument("--threads", type=int, default=0, help="intra-op threads (0: ONNX Runtime's default)")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--profile", action="store_true", help="then every node's median time")
    a = ap.parse_args()
    sess = session(a.model, a.threads)
    x = feeds(sess, a.batch)
    # the batch is real: image 0 alone gives what it gives within the batch
    y = sess.run(None, x)
    y0 = sess.run(None, {k: v[:1] for k, v in x.items()})
    for b, s in zip(y, y0):
        if b.shape[0] != a.batch or not np.allclose(b[:1], s, rtol=1e-3, atol=1e-3 * float(np.abs(s).max())):
            raise SystemExit(f"ort_speed: {a.model} gives other outputs at batch {a.batch} than at batch 1")
    warm = []
    for _ in range(2):
        t = time.perf_counter()
        sess.run(None, x)
        warm.append(time.perf_counter() - t)
    n = a.iterations or max(3, min(20000, int(a.duration / max(np.mean(warm), 1e-6))))
    ms = []
    for _ in range(n):
        t = time.perf_counter()
        sess.run(None, x)
        ms.append((time.perf_counter() - t) * 1e3)
    ips = a.batch * n / (sum(ms) * 1e-3)
    p50 = float(np.percentile(ms, 50))
    if a.json:
        print(json.dumps({"model": a.model, "device": "cpu", "runtime": "onnxruntime",
                          "results": [{"batch": a.batch, "images_per_second": round(ips, 1),
                                       "latency_ms": {"p50": round(p50, 4)}, "iterations": n}]}))
    else:
        print(f"batch {a.batch:5d}  {ips:10.1f} images/s  latency p50 {p50:.3f} ms  ({n} runs)")
    if a.profile:
        profile(a, x)


if __name__ == "__main__":
    main()
