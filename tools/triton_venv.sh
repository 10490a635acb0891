#!/bin/sh
# Makes DIR a Python virtual environment holding Triton Inference Server 2.51
# (the tritonserver binary inside PyPI's nvidia-pytriton 0.7.0) and its client
# (tritonclient[http] 2.51.0, with perf_analyzer), for tests/test_triton.sh and
# bench/. Does nothing when DIR already has them. Exit 0: ready; 1: they could
# not be installed (no network, no venv module), with pip's reason on stderr.
# perf_analyzer runs with LD_LIBRARY_PATH=DIR/perf_analyzer_libs.
#   usage: tools/triton_venv.sh DIR
set -u
dir=${1:?usage: triton_venv.sh DIR}
stamp=$dir/.qforge-triton-2.51
[ -f "$stamp" ] && exit 0
python=${PYTHON:-python3}
"$python" -m venv "$dir" || exit 1
"$dir/bin/pip" install -q --disable-pip-version-check 'nvidia-pytriton==0.7.0' 'tritonclient[http]==2.51.0' || exit 1
server=$(ls "$dir"/lib/python3*/site-packages/pytriton/tritonserver/bin/tritonserver 2>/dev/null | head -n 1)
[ -x "$server" ] || { echo "triton_venv.sh: no tritonserver in $dir after pip install" >&2; exit 1; }
# perf_analyzer (tritonclient's) wants libb64.so.0d and libcudart.so.12 by
# those names; the server's wheel carries both under hashed names
libs=$(cd "$(dirname "$server")/../../../nvidia_pytriton.libs" && pwd)
mkdir -p "$dir/perf_analyzer_libs"
ln -sf "$libs"/libb64-*.so.0d "$dir/perf_analyzer_libs/libb64.so.0d"
ln -sf "$libs"/libcudart-*.so.12* "$dir/perf_analyzer_libs/libcudart.so.12"
touch "$stamp"
