#!/bin/sh
# The Triton backend (libtriton_qforge.so) in a real tritonserver, Triton 2.51
# from PyPI's nvidia-pytriton, on CPU instances: a Fashion-MNIST INT8 .qfm
# served as FP32 and as raw uint8 images, outputs compared bit for bit with
# qforge's own engine, every kind of bad request, a corrupt .qfm beside good
# models (tests/triton_check.py is the client). Skips (77) when the backend was
# not built, or when the wheels cannot be installed into $top_builddir/triton-venv.
set -u
: "${QFORGE:?}" "${top_srcdir:?}" "${top_builddir:?}"
backend=$top_builddir/runtime/triton/.libs/libtriton_qforge.so
[ -f "$backend" ] || { echo "the Triton backend was not built (configure --with-triton=DIR): skipped"; exit 77; }
idx=/usr/share/datasets/fashion-mnist
[ -r "$idx/t10k-images-idx3-ubyte.gz" ] || { echo "no $idx: skipped"; exit 77; }
venv=$top_builddir/triton-venv
if ! sh "$top_srcdir/tools/triton_venv.sh" "$venv" > "$top_builddir/triton-venv.log" 2>&1; then
  echo "cannot install nvidia-pytriton/tritonclient into $venv: skipped"; tail -n 3 "$top_builddir/triton-venv.log"; exit 77
fi
server=$(ls "$venv"/lib/python3*/site-packages/pytriton/tritonserver/bin/tritonserver | head -n 1)
tmp=$(mktemp -d)
pid=
stop_server() {
  [ -n "$pid" ] || return 0
  kill -TERM "$pid" 2>/dev/null
  # Triton waits for in-flight requests, then exits; give it 30 s before SIGKILL
  i=0
  while kill -0 "$pid" 2>/dev/null && [ $i -lt 300 ]; do sleep 0.1; i=$((i + 1)); done
  kill -0 "$pid" 2>/dev/null && { echo "FAIL tritonserver did not stop on SIGTERM"; kill -KILL "$pid"; }
  wait "$pid" 2>/dev/null
  pid=
}
trap 'stop_server; rm -rf "$tmp"' EXIT
trap 'exit 1' INT TERM

# ---- a small INT8 model: Fashion-MNIST, calibrated on 200 test images ----------------------
pp="--gray --mean 0.286 --std 0.353"
"$top_builddir/examples/fashion-mnist/idx2png" "$idx/t10k-images-idx3-ubyte.gz" "$idx/t10k-labels-idx1-ubyte.gz" \
  "$tmp/images" > /dev/null || { echo "idx2png failed"; exit 1; }
"$QFORGE" calib "$top_srcdir/examples/fashion-mnist/model.onnx" --images "$tmp/images" -n 200 $pp -o "$tmp/m.calib" \
  --quiet && "$QFORGE" quant "$top_srcdir/examples/fashion-mnist/model.onnx" --calib "$tmp/m.calib" \
  --precision int8 -o "$tmp/m.qfm" --quiet || { echo "could not make the test model"; exit 1; }

# ---- the model repository ---------------------------------------------------------------------
repo=$tmp/repo
for m in fmnist fmnist_min fmnist_u8 broken; do mkdir -p "$repo/$m/1"; cp "$tmp/m.qfm" "$repo/$m/1/model.qfm"; done
head -c 1000 "$tmp/m.qfm" > "$repo/broken/1/model.qfm"
cat > "$repo/fmnist/config.pbtxt" <<EOF
backend: "qforge"
max_batch_size: 8
dynamic_batching { max_queue_delay_microseconds: 200000 }
instance_group [ { kind: KIND_CPU count: 1 } ]
parameters { key: "threads" value { string_value: "1" } }
EOF
echo 'backend: "qforge"' > "$repo/fmnist_min/config.pbtxt"
echo 'backend: "qforge"' > "$repo/broken/config.pbtxt"
cat > "$repo/fmnist_u8/config.pbtxt" <<EOF
backend: "qforge"
max_batch_size: 4
dynamic_batching { max_queue_delay_microseconds: 200000 }
input [ { name: "input" data_type: TYPE_UINT8 dims: [ -1, -1, -1 ] } ]
instance_group [ { kind: KIND_CPU } ]
EOF
mkdir -p "$tmp/backends/qforge"
ln -s "$backend" "$tmp/backends/qforge/libtriton_qforge.so"

# ---- the server, on free loopback ports --------------------------------------------------------
ports=$("$venv/bin/python" "$top_srcdir/tools/triton_util.py" ports 3)
set -- $ports
http=$1
"$server" --model-repository="$repo" --backend-directory="$tmp/backends" --exit-on-error=false \
  --http-address=127.0.0.1 --http-port="$1" --grpc-address=127.0.0.1 --grpc-port="$2" \
  --metrics-address=127.0.0.1 --metrics-port="$3" > "$tmp/server.log" 2>&1 &
pid=$!
ready=no
"$venv/bin/python" "$top_srcdir/tools/triton_util.py" wait "$http" 120 "$pid" fmnist fmnist_min fmnist_u8 && ready=yes
echo "---- tritonserver log (the qforge backend's lines and model states)"
grep -E "backend\.c|config\.c|libqforge|model_lifecycle|Started HTTP|qforge" "$tmp/server.log"
[ $ready = yes ] || { echo "FAIL the models did not become ready"; tail -n 40 "$tmp/server.log"; exit 1; }

echo "---- requests"
"$venv/bin/python" "$top_srcdir/tests/triton_check.py" "127.0.0.1:$http" "$tmp" "$top_builddir/tests/triton_ref" "$tmp/m.qfm"
status=$?

stop_server
echo "---- after SIGTERM"
tail -n 4 "$tmp/server.log"
if grep -qiE "segmentation|core dumped|free\(\)|double free|terminate called" "$tmp/server.log"; then
  echo "FAIL the server log shows a crash"; status=1
fi
exit $status
