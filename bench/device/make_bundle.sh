#!/bin/sh
# Prepares a GPU run on the lent device machine (which gets the checkout but
# not ../shared, and may lack the Debian -dev libraries): packs the binaries of
# the CUDA build in $B (and its Triton backend, if built) and the shared
# libraries they need into .device/bundle.tar.xz, copies a subset of
# ../shared/data (about 42 MB) to .device/data once, and with TRITON_VENV=DIR
# (build/triton-venv) packs tritonserver into .device/triton.tar.xz once. .device/ must be ignored (`echo /.device/ >>
# .git/info/exclude`) and named in the run's `carry`; then, on the device,
# `bash bench/device/run.sh tests|bench|all` from the repository root.
set -e
B=${B:-/tmp/build-cuda}
D=$(cd "$(dirname "$0")/../.." && pwd)/.device
mkdir -p "$D"
# the test binaries it packs, built where the build has not made them yet
# (a bundle without test_backend_ops left a device call's run of it at rc 127)
make -C "$B" tests/test_cuda >/dev/null && make -C "$B" tests/test_backend_ops >/dev/null
T=$(mktemp -d)
mkdir -p $T/bin $T/lib
cp $B/tests/test_cuda $T/bin/
# the op table against the CPU engine on the GPU (run.sh tests runs it where present)
[ -x $B/tests/test_backend_ops ] && cp $B/tests/test_backend_ops $T/bin/
# per-image predictions of a model on tensors (run.sh qdq), with QDQ=1: each
# test binary holds the whole library, and the carry is 64 MiB in all
[ -n "$QDQ" ] && [ -x $B/tests/tensor_predict ] && cp $B/tests/tensor_predict $T/bin/
[ -f $B/tools/.libs/qforge ] && cp $B/tools/.libs/qforge $T/bin/
# the zoo's logits writer (bench/zoo/run.sh), where built (`make bench/zoo/qf_logits`): small, and
# a bundle without it made a zoo call fail at its first model
[ -f $B/bench/zoo/.libs/qf_logits ] && cp $B/bench/zoo/.libs/qf_logits $T/bin/
cp -L $B/.libs/libqforge.so.0 $T/lib/
for l in libprotobuf-c.so.1 libpng16.so.16 libjpeg.so.62 libopenblas.so.0 libsubunit.so.0 libgfortran.so.5 libquadmath.so.0 libz.so.1; do
  cp -L /lib/x86_64-linux-gnu/$l $T/lib/
done
# the Triton backend, where the build has one (configure --with-triton)
[ -f $B/runtime/triton/.libs/libtriton_qforge.so ] && cp $B/runtime/triton/.libs/libtriton_qforge.so $T/lib/
for f in "$@"; do cp "$f" $T/bin/; done
# debug sections off (function names stay, for backtraces): the run's carry is 64 MiB in all
strip --strip-debug $T/bin/* $T/lib/libqforge.so.0 $T/lib/libtriton_qforge.so 2>/dev/null || true
# xz -9: its 64 MiB dictionary spans the three test binaries, each of which
# links the library's CUDA code again (24 MB at xz's default level, 11 MB here),
# when they come one after another: the library next, OpenBLAS after it (in
# directory order it once fell between them, and the bundle grew from 22 to 39 MB)
(cd $T && tar -c bin lib/libqforge.so.0 $(ls lib/* | grep -v '^lib/libqforge.so.0$')) | xz -9 > $D/bundle.tar.xz
rm -rf $T
S=$(cd "$D/../../shared/data" && pwd)
if [ ! -d $D/data ]; then
  mkdir -p $D/data/cifar10/test $D/data/imagenet/images
  cp $S/cifar10/resnet20.onnx $D/data/cifar10/
  cp -r $S/cifar10/calib $D/data/cifar10/
  for c in $S/cifar10/test/*; do
    mkdir -p $D/data/cifar10/test/$(basename $c)
    ls $c | head -50 | while read f; do cp $c/$f $D/data/cifar10/test/$(basename $c)/; done
  done
  cp $S/imagenet/mobilenetv2-fp32.onnx $S/imagenet/mobilenetv2-12-int8.onnx $S/imagenet/synsets.txt $D/data/imagenet/
  cp -r $S/imagenet/images/calib $S/imagenet/images/val $D/data/imagenet/images/
fi
# tritonserver and perf_analyzer for `run.sh triton`, once, from the test's virtual environment
if [ -n "${TRITON_VENV:-}" ] && [ ! -f $D/triton.tar.xz ]; then
  sh "$(dirname "$0")/pack_triton.sh" "$TRITON_VENV" $D/triton.tar.xz
fi
du -sh $D/bundle.tar.xz $D/data $D/triton.tar.xz 2>/dev/null || true # (no triton.tar.xz unless TRITON_VENV was given)
