#!/usr/bin/env python3
"""The watcher of bench/triton_soak.sh, beside perf_analyzer's load: for every
99 requests the server completes it sends one bad request (a wrong shape, data
type or byte size, a missing input, a batch above max_batch_size, an image that
does not preprocess to the model's size, in turn) and checks it gets HTTP 400;
it samples the server's RSS every few seconds and whether it is alive. At the
deadline it prints a JSON summary.
  usage: triton_soak.py HTTP_PORT MODEL SERVER_PID SECONDS H W C MAX_BATCH"""
import http.client
import json
import sys
import time

port, model, pid = int(sys.argv[1]), sys.argv[2], int(sys.argv[3])
seconds, h, w, c, max_batch = (int(a) for a in sys.argv[4:9])


def call(method, path, header=None, binary=b""):
    body = json.dumps(header).encode() if header is not None else b""
    headers = {"Content-Type": "application/json"}
    if binary:
        headers = {"Content-Type": "application/octet-stream", "Inference-Header-Content-Length": str(len(body))}
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        conn.request(method, path, body + binary, headers)
        r = conn.getresponse()
        return r.status, r.read()
    finally:
        conn.close()


def image(shape, nbytes=None, datatype="UINT8"):
    n = nbytes if nbytes is not None else int(shape[0] * shape[1] * shape[2] * shape[3])
    return {"inputs": [{"name": "input", "shape": shape, "datatype": datatype,
                        "parameters": {"binary_data_size": n}}]}, bytes(n)


BAD = [
    ("wrong shape", *image([1, h, w, c + 5])),                          # C outside 1 or 3: the backend's check
    ("wrong data type", *image([1, h, w, c], nbytes=4 * h * w * c, datatype="FP32")),
    ("wrong byte size", *image([1, h, w, c], nbytes=h * w * c - 7)),
    ("missing input", {"inputs": []}, b""),
    ("batch above max_batch_size", *image([max_batch + 1, h, w, c])),
    ("image of another size", *image([1, h + 3, w + 3, c])),           # preprocessing fails in the backend
]


def rss_kib():
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def completed():
    status, body = call("GET", f"/v2/models/{model}/stats")
    s = json.loads(body)["model_stats"][0]["inference_stats"]
    return int(s["success"]["count"]), int(s["fail"]["count"])


start = time.time()
rss = []            # (seconds since start, KiB)
sent = answered = 0
wrong = {}          # bad requests not answered with 400, by status
next_rss = 0.0
base, _ = completed()
owed = 0            # good requests completed that have not yet been matched by a bad one
last = base
alive = True
while time.time() - start < seconds:
    now = time.time() - start
    try:
        if now >= next_rss:
            rss.append((round(now, 1), rss_kib()))
            next_rss = now + 5
        good, _ = completed()
    except (OSError, ValueError, KeyError):
        alive = False
        break
    owed += good - last
    last = good
    while owed >= 99:
        owed -= 99
        what, header, binary = BAD[sent % len(BAD)]
        try:
            status, _ = call("POST", f"/v2/models/{model}/infer", header, binary)
        except OSError:
            alive = False
            break
        sent += 1
        if status == 400:
            answered += 1
        else:
            wrong[f"{what}: {status}"] = wrong.get(f"{what}: {status}", 0) + 1
    if not alive:
        break
    time.sleep(0.05)

good, failed = completed() if alive else (last, -1)
warm = [k for t, k in rss if t >= min(60, seconds / 5)]
summary = {
    "seconds": round(time.time() - start, 1),
    "server_alive": alive,
    "good_requests": good - base,
    "bad_requests": sent,
    "bad_answered_400": answered,
    "bad_other": wrong,
    "failed_in_backend_stats": failed,
    "rss_kib_first_after_warmup": warm[0] if warm else None,
    "rss_kib_min_after_warmup": min(warm) if warm else None,
    "rss_kib_max_after_warmup": max(warm) if warm else None,
    "rss_kib_last": rss[-1][1] if rss else None,
    "rss_spread_after_warmup_pct": round(100.0 * (max(warm) - min(warm)) / min(warm), 2) if warm else None,
    "rss_samples": rss,
}
print(json.dumps(summary))
