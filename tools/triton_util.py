#!/usr/bin/env python3
"""Small helpers of the scripts that run tritonserver (tests/test_triton.sh,
bench/bench_triton.sh, bench/triton_soak.sh):
  triton_util.py ports N                       N free TCP ports on 127.0.0.1
  triton_util.py wait PORT SECONDS PID MODEL...
                                               until every MODEL is ready on 127.0.0.1:PORT;
                                               exit 1 at the deadline or when process PID ends"""
import socket
import sys
import time
import urllib.request

if sys.argv[1] == "ports":
    socks = [socket.socket() for _ in range(int(sys.argv[2]))]
    for s in socks:
        s.bind(("127.0.0.1", 0))
    print(" ".join(str(s.getsockname()[1]) for s in socks))
elif sys.argv[1] == "wait":
    port, deadline, pid, models = sys.argv[2], time.time() + float(sys.argv[3]), int(sys.argv[4]), sys.argv[5:]

    def ready(m):
        try:
            return urllib.request.urlopen(f"http://127.0.0.1:{port}/v2/models/{m}/ready", timeout=2).status == 200
        except OSError:
            return False

    def running():
        try:  # a child that has exited stays a zombie ('Z') until its parent waits
            with open(f"/proc/{pid}/stat") as f:
                return f.read().rsplit(")", 1)[1].split()[0] != "Z"
        except OSError:
            return False

    while not all(ready(m) for m in models):
        if not running():
            sys.exit(f"triton_util: the server (pid {pid}) has exited")
        if time.time() > deadline:
            sys.exit(f"triton_util: {', '.join(models)} not ready on port {port} after {sys.argv[3]} s")
        time.sleep(0.2)
else:
    sys.exit(__doc__)
