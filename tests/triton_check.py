#!/usr/bin/env python3
"""Client side of tests/test_triton.sh, against a running tritonserver with the
qforge backend: the configuration the backend completed, outputs bit-identical
to qforge's own engine under dynamic batching, raw uint8 images preprocessed
by the backend, every kind of bad request answered with 400 while the other
requests and the server go on, and a corrupt .qfm failing only its own model
with qforge's message.
  usage: triton_check.py HOST:PORT WORK_DIR TRITON_REF MODEL.qfm"""
import concurrent.futures
import http.client
import json
import subprocess
import sys

import numpy as np
import tritonclient.http as th

url, work, ref_bin, qfm = sys.argv[1:5]
host, port = url.split(":")
fails = 0
passes = 0


def check(cond, what):
    global fails, passes
    if cond:
        passes += 1
        print("ok   " + what)
    else:
        fails += 1
        print("FAIL " + what)


def request(method, path, header=None, binary=b""):
    """Plain HTTP, to send what tritonclient refuses to build; (status, parsed JSON or text)."""
    body, headers = b"", {}
    if header is not None:
        body = json.dumps(header).encode()
        headers["Content-Type"] = "application/json"
        if binary:
            headers["Inference-Header-Content-Length"] = str(len(body))
            headers["Content-Type"] = "application/octet-stream"
    conn = http.client.HTTPConnection(host, int(port), timeout=60)
    conn.request(method, path, body + binary, headers)
    r = conn.getresponse()
    text = r.read()
    conn.close()
    try:
        return r.status, json.loads(text)
    except ValueError:
        return r.status, text.decode(errors="replace")


def reference(name, x, image=False):
    """qforge's CPU engine on x, one item at a time (tests/triton_ref.c)."""
    x.tofile(f"{work}/{name}.in")
    args = [ref_bin, qfm, str(len(x)), f"{work}/{name}.in", f"{work}/{name}.out"]
    if image:
        args += [str(d) for d in x.shape[1:]]
    subprocess.run(args, check=True)
    return np.fromfile(f"{work}/{name}.out", dtype=np.float32).reshape(len(x), -1)


def same_bits(a, b):
    return a.shape == b.shape and np.array_equal(a.view(np.uint32), b.view(np.uint32))


def infer_all(client, model, chunks, in_name, out_name, dtype):
    """Sends every chunk as its own request, all at once, so the dynamic batcher can merge them."""
    pending = []
    for c in chunks:
        inp = th.InferInput(in_name, list(c.shape), dtype)
        inp.set_data_from_numpy(c, binary_data=True)
        pending.append(client.async_infer(model, [inp], outputs=[th.InferRequestedOutput(out_name, binary_data=True)]))
    results = []
    for p in pending:
        try:
            results.append(p.get_result().as_numpy(out_name))
        except th.InferenceServerException as e:
            results.append(e)
    return results


def split(x, sizes):
    out, at = [], 0
    for s in sizes:
        out.append(x[at:at + s])
        at += s
    return out


client = th.InferenceServerClient(url, concurrency=16, network_timeout=60)
rng = np.random.default_rng(2024)

# ---- configurations the backend completed from the .qfm -----------------------------
cfg = client.get_model_config("fmnist")
inp, out = cfg["input"][0], cfg["output"][0]
check(cfg["max_batch_size"] == 8 and inp["name"] == "input" and inp["data_type"] == "TYPE_FP32" and
      [int(d) for d in inp["dims"]] == [1, 28, 28] and out["name"] == "logits" and [int(d) for d in out["dims"]] == [10],
      "fmnist: inputs and outputs completed from the .qfm (input [1,28,28] FP32, logits [10])")
cfg = client.get_model_config("fmnist_min")
check(cfg["max_batch_size"] == 4 and "dynamic_batching" in cfg and cfg["input"][0]["name"] == "input",
      "fmnist_min (config.pbtxt names only the backend): max_batch_size 4 and dynamic batching filled in")
cfg = client.get_model_config("fmnist_u8")
check(cfg["input"][0]["data_type"] == "TYPE_UINT8" and cfg["output"][0]["name"] == "logits",
      "fmnist_u8: the configured uint8 input kept, the output completed")

# ---- FP32 requests merged by the dynamic batcher, bit for bit ---------------------------
x = rng.standard_normal((32, 1, 28, 28), dtype=np.float32)
ref = reference("fp32", x)
sizes = [1, 3, 2, 1, 4, 1, 2, 5, 1, 2, 2, 8]
res = infer_all(client, "fmnist", split(x, sizes), "input", "logits", "FP32")
good = all(not isinstance(r, Exception) for r in res)
check(good and same_bits(np.concatenate(res), ref),
      f"fmnist: {len(sizes)} concurrent requests ({sum(sizes)} images) equal qforge's engine bit for bit")
stats = client.get_inference_statistics("fmnist")["model_stats"][0]
batches = {int(b["batch_size"]): int(b["compute_infer"]["count"]) for b in stats["batch_stats"]}
print(f"     executions by batch size: {dict(sorted(batches.items()))}")
check(max(batches) > 1 and max(batches) <= 8 and sum(k * v for k, v in batches.items()) == sum(sizes),
      "fmnist: the dynamic batcher ran requests together (a batch > 1, none > max_batch_size 8)")
y = rng.standard_normal((3, 1, 28, 28), dtype=np.float32)
res = infer_all(client, "fmnist_min", [y], "input", "logits", "FP32")
check(not isinstance(res[0], Exception) and same_bits(res[0], reference("min", y)), "fmnist_min: one request of 3, bit for bit")

# ---- raw uint8 images, preprocessed by the backend as the .qfm records ---------------------
for c in (1, 3):
    imgs = rng.integers(0, 256, (5, 28, 28, c), dtype=np.uint8)
    ref = reference(f"u8c{c}", imgs, image=True)
    res = infer_all(client, "fmnist_u8", split(imgs, [2, 1, 2]), "input", "logits", "UINT8")
    good = all(not isinstance(r, Exception) for r in res)
    check(good and same_bits(np.concatenate(res), ref), f"fmnist_u8: {c}-channel uint8 images equal qforge's preprocessing + engine")


# ---- bad requests: 400 with a clear message; the server and the others go on -----------------
def bad(model, header, binary, want, what):
    status, body = request("POST", f"/v2/models/{model}/infer", header, binary)
    msg = body.get("error", "") if isinstance(body, dict) else body
    print(f"     {what}: HTTP {status}: {msg}")
    check(status == 400 and all(w in msg for w in want), f"{model}: {what} -> 400 naming {', '.join(want)}")


def fp32_input(shape, count=None, datatype="FP32", nbytes=None):
    n = int(np.prod(shape)) if count is None else count
    return {"name": "input", "shape": shape, "datatype": datatype, "parameters": {"binary_data_size": nbytes or 4 * n}}


bad("fmnist", {"inputs": [fp32_input([1, 1, 28, 27])]}, bytes(4 * 756), ["input", "shape", "28,27"], "wrong shape")
bad("fmnist", {"inputs": [fp32_input([1, 1, 28, 28], datatype="FP64", nbytes=8 * 784)]}, bytes(8 * 784),
    ["input", "FP64", "FP32"], "wrong data type")
bad("fmnist", {"inputs": [fp32_input([1, 1, 28, 28], nbytes=1000)]}, bytes(1000), ["input", "1000"], "wrong byte size")
bad("fmnist", {"inputs": []}, b"", ["input"], "missing input")
bad("fmnist", {"inputs": [fp32_input([9, 1, 28, 28])]}, bytes(4 * 9 * 784), ["fmnist", "8"], "batch above max_batch_size")
bad("fmnist_u8", {"inputs": [{"name": "input", "shape": [1, 28, 28, 2], "datatype": "UINT8",
                              "parameters": {"binary_data_size": 28 * 28 * 2}}]}, bytes(28 * 28 * 2),
    ["input", "[1, 28, 28, 2]", "C 1 or 3"], "a 2-channel image")
bad("fmnist_u8", {"inputs": [{"name": "input", "shape": [1, 32, 32, 1], "datatype": "UINT8",
                              "parameters": {"binary_data_size": 32 * 32}}]}, bytes(32 * 32),
    ["fmnist_u8", "32x32", "28x28"], "an image of the wrong size")

# a bad image in the same batch as good ones: only it fails
imgs = rng.integers(0, 256, (4, 28, 28, 1), dtype=np.uint8)
ref = reference("mixed", imgs, image=True)
chunks = [imgs[0:1], imgs[1:3], rng.integers(0, 256, (1, 30, 30, 1), dtype=np.uint8), imgs[3:4]]
res = infer_all(client, "fmnist_u8", chunks, "input", "logits", "UINT8")
good = [r for i, r in enumerate(res) if i != 2]
check(isinstance(res[2], th.InferenceServerException) and "30x30" in str(res[2]) and
      all(not isinstance(r, Exception) for r in good) and same_bits(np.concatenate(good), ref),
      "fmnist_u8: a bad image among concurrent good ones fails alone; the others are exact")

res = infer_all(client, "fmnist", [x[:2]], "input", "logits", "FP32")
check(not isinstance(res[0], Exception) and same_bits(res[0], reference("after", x[:2])) and client.is_server_live(),
      "after the bad requests the server is live and answers exactly")

# ---- a corrupt .qfm fails its own model with qforge's message ----------------------------
status, index = request("POST", "/v2/repository/index")
broken = [m for m in index if m["name"] == "broken"] if status == 200 else []
reason = broken[0].get("reason", "") if broken else ""
print(f"     broken: {reason}")
check(broken and broken[0].get("state") == "UNAVAILABLE" and "model.qfm" in reason and "truncated" in reason,
      "broken: load failed with qforge's message naming the file")
check(not client.is_model_ready("broken") and client.is_model_ready("fmnist"), "broken is not ready; fmnist still is")

print(f"triton: {passes} passed, {fails} failed")
sys.exit(1 if fails else 0)
