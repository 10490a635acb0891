#!/bin/sh
# Builds qforge from a fresh checkout and runs one job: `demo` (the bundled
# example end to end), `check` (the whole test suite) or `sanitize` (the unit
# tests again built with ASan + UBSan in build/sanitize, then each libFuzzer
# harness of tests/fuzz for FUZZ_SECONDS (20) from its seeds, built in
# build/fuzz-build by clang, skipped without clang; tests/fuzz/README.md).
# .ci/run runs check, then sanitize. Installs missing
# Debian packages first (apt-get; run as root), bootstraps, configures (with
# the Triton backend where ../shared/third_party/triton-core holds its headers),
# builds in ./build; `check` also installs the Triton test's wheels into
# build/triton-venv. Extra arguments go to configure (e.g. --enable-sanitizers).
set -eu
job=${1:-demo}
[ $# -gt 0 ] && shift
case $job in demo|check|sanitize|distcheck) ;; *) echo "usage: $0 demo|check|sanitize|distcheck [configure options]" >&2; exit 2;; esac
top=$(cd "$(dirname "$0")/.." && pwd)

packages="build-essential autoconf automake libtool pkg-config protobuf-c-compiler libprotobuf-c-dev
  libonnx-dev libonnx-testdata check libopenblas-dev libpng-dev libjpeg62-turbo-dev zlib1g-dev
  dataset-fashion-mnist"
# the sanitize job's libFuzzer harnesses need clang; without it (and no root to
# install it) their smoke run is skipped and the sanitizer suite runs alone
optional=
[ "$job" = sanitize ] && optional="clang libclang-rt-dev"
installed() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q "install ok installed"; }
missing=
for p in $packages; do installed "$p" || missing="$missing $p"; done
if [ "$(id -u)" = 0 ]; then
  for p in $optional; do installed "$p" || missing="$missing $p"; done
fi
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
  sanitize)
    status=0
    # the unit tests under ASan + UBSan, stopping at the first error; CPU-only
    # (nvcc's code is not instrumented, and test_cuda skips without a GPU) and
    # without the Triton backend (tritonserver cannot load an ASan module;
    # fuzz_triton covers it)
    mkdir -p sanitize
    ( cd sanitize
      [ -f Makefile ] || ../../configure --enable-sanitizers --without-cuda --without-triton "$@" > configure.log 2>&1 ||
        { tail -n 20 configure.log; exit 1; }
      make -j"$jobs" > make.log 2>&1 || { tail -n 40 make.log; exit 1; }
      export ASAN_OPTIONS=halt_on_error=1:detect_leaks=1 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1
      make -j"$jobs" check > check.log 2>&1 || { tail -n 200 test-suite.log; exit 1; }
      grep -E '^(PASS|SKIP|FAIL|ERROR):' check.log
      awk '/^# PASS:/ {p=$3} /^# FAIL:/ {f=$3} /^# ERROR:/ {e=$3} /^# SKIP:/ {s=$3}
           END {printf "qforge sanitizers (ASan + UBSan): %d passed, %d failed, %d skipped\n", p, f + e, s}' test-suite.log
    ) || status=1
    # each libFuzzer harness from its seeds, where configure found a clang that
    # links libFuzzer; 20 s each (not the issue's 30) keeps CI near 10 minutes
    if [ -z "$(sed -n 's/^FUZZ_CC = //p' Makefile)" ]; then
      echo "fuzz-smoke: skipped: no clang with libFuzzer (Debian: clang, libclang-rt-dev)"
    elif make fuzz > fuzz-build.log 2>&1; then
      FUZZ_SECONDS=${FUZZ_SECONDS:-20} make -s fuzz-smoke || status=1
    else
      tail -n 40 fuzz-build.log; status=1
    fi
    exit $status ;;
  distcheck) make distcheck ;;
esac
