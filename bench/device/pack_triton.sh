#!/bin/sh
# Packs Triton Inference Server for the GPU machine, which has no network: the
# tritonserver binary of PyPI's nvidia-pytriton 0.7.0 (Triton 2.51), the
# libraries of that wheel it loads (its NEEDED closure; the system's libc,
# libstdc++, libz... are on every Linux), and tritonclient's perf_analyzer, all
# stripped, as OUT (a tar.xz of tritonserver/{bin,lib}). No Python, no python
# backend, no libarchive. Unpacked, bin/tritonserver finds lib/ through its own
# RPATH ($ORIGIN/../lib); perf_analyzer needs LD_LIBRARY_PATH=.../lib.
#   usage: bench/device/pack_triton.sh VENV OUT.tar.xz
# VENV is a virtual environment made by tools/triton_venv.sh (build/triton-venv
# after `tools/build.sh check`).
set -eu
venv=${1:?usage: pack_triton.sh VENV OUT.tar.xz}
out=${2:?usage: pack_triton.sh VENV OUT.tar.xz}
site=$(ls -d "$venv"/lib/python3*/site-packages | head -n 1)
wheel_libs=$site/nvidia_pytriton.libs
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
B=$T/tritonserver/bin
L=$T/tritonserver/lib
mkdir -p "$B" "$L"
cp "$site/pytriton/tritonserver/bin/tritonserver" "$venv/bin/perf_analyzer" "$B/"

needed() { readelf -d "$1" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p'; }
todo=$(needed "$B/tritonserver")
while [ -n "$todo" ]; do
  next=
  for n in $todo; do
    [ -f "$L/$n" ] || [ ! -f "$wheel_libs/$n" ] && continue
    cp "$wheel_libs/$n" "$L/"
    next="$next $(needed "$wheel_libs/$n")"
  done
  todo=$next
done
# perf_analyzer asks for these by their plain names; the wheel's copies serve
(cd "$L" && ln -s libb64-*.so.0d libb64.so.0d && ln -s libcudart-*.so.12.* libcudart.so.12 &&
  ln -s libssl-*.so.3 libssl.so.3 && ln -s libcrypto-*.so.3 libcrypto.so.3)
for f in "$L"/*; do [ -L "$f" ] || strip --strip-unneeded "$f"; done
strip "$B/tritonserver" "$B/perf_analyzer"
XZ_OPT=-9 tar -cJf "$out" -C "$T" tritonserver
echo "$out: $(du -k "$out" | cut -f1) KiB packed, $(du -sk "$T/tritonserver" | cut -f1) KiB unpacked, $(ls "$L" | wc -l) libraries"
