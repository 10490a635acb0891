#!/bin/sh
# Builds qforge from a fresh checkout and runs one job: `demo` (the bundled
# example end to end) or `check` (the whole test suite). Installs missing
# Debian packages first (apt-get; run as root), bootstraps, configures (with
# the Triton backend where ../shared/third_party/triton-core holds its headers),
# builds in ./build; `check` also installs the Triton test's wheels into
# build/triton-venv. Extra arguments go to configure (e.g. --enable-sanitizers).
set -eu
job=${1:-demo}
[ $# -gt 0 ] && shift
case $job in demo|check|distcheck) ;; *) echo "usage: $0 demo|check|distcheck [configure options]" >&2; exit 2;; esac
top=$(cd "$(dirname "$0")/.." && pwd)

packages="build-essential autoconf automake libtool pkg-config protobuf-c-compiler libprotobuf-c-dev
  libonnx-dev libonnx-testdata check libopenblas-dev libpng-dev libjpeg62-turbo-dev zlib1g-dev
  dataset-fashion-mnist"
missing=
for p in $packages; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
done
if [ -n "$missing" ]; then
  echo "build.sh: installing Debian packages:$missing"
  if [ "$(id -u)" != 0 ]; then echo "build.sh: need root to install:$missing" >&2; exit 1; fi
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends $missing >/dev/null
fi

cd "$top"
[ -x configure ] && [ configure -nt configure.ac ] && [ Makefile.in -nt Makefile.am ] || ./bootstrap
mkdir -p build
cd build
# the Triton backend is built wherever its API headers lie beside the project
triton=
case " $* " in
  *" --with-triton"*|*" --without-triton"*) ;;
  *) t=$top/../shared/third_party/triton-core
     [ -r "$t/include/triton/core/tritonbackend.h" ] && triton=--with-triton=$(cd "$t" && pwd) ;;
esac
if [ ! -f Makefile ] || [ $# -gt 0 ] || { [ -n "$triton" ] && ! grep -q -- --with-triton config.status; }; then
  ../configure ${triton:+"$triton"} "$@"
fi
jobs=$(nproc 2>/dev/null || echo 2)
make -j"$jobs"
case $job in
  demo) make demo ;;
  check)
    status=0
    # the Triton test's server and client (PyPI wheels); it skips if they cannot be had
    if [ -f runtime/triton/.libs/libtriton_qforge.so ]; then
      sh "$top/tools/triton_venv.sh" triton-venv > triton-venv.log 2>&1 ||
        { echo "build.sh: could not install the Triton wheels (test_triton will skip):"; tail -n 3 triton-venv.log; }
    fi
    make -j"$jobs" check || status=1
    [ $status = 0 ] || tail -n 200 test-suite.log 2>/dev/null
    # one closing line for whoever reads the log: automake's counts, plus the
    # ONNX conformance figure
    grep -h '^onnx-conformance:' tests/onnx_conformance.log 2>/dev/null | tail -n 1
    awk '/^# PASS:/ {p=$3} /^# FAIL:/ {f=$3} /^# ERROR:/ {e=$3} /^# SKIP:/ {s=$3}
         END {printf "qforge: %d passed, %d failed, %d skipped\n", p, f + e, s}' test-suite.log
    exit $status ;;
  distcheck) make distcheck ;;
esac
