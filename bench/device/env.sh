# Sourced on the device machine from the repository root: unpacks the bundle
# made by bench/device/make_bundle.sh into /tmp/q and points the loader at its
# libraries (and at the machine's own cuBLASLt when the bundle's binaries do
# not find one).
# once per machine: scripts run side by side must not rewrite binaries in use
[ -f /tmp/q/.unpacked ] || { mkdir -p /tmp/q && tar -xJf .device/bundle.tar.xz -C /tmp/q && touch /tmp/q/.unpacked; }
export LD_LIBRARY_PATH=/tmp/q/lib
if ! ldd /tmp/q/bin/test_cuda | grep -q "libcublasLt.so.13 => /"; then
  d=$(dirname "$(find / -xdev -name 'libcublasLt.so.13*' 2>/dev/null | head -1)")
  export LD_LIBRARY_PATH=$LD_LIBRARY_PATH:$d
fi
