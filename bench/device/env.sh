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
# The device tool brings back at most 8 files from $OUT (and none deeper than
# two folders): the scripts' EXIT traps call this to say so when more are
# there, before a call's results are silently left behind.
out_fits() {
  n=$(find "$OUT" -type f | wc -l)
  [ "$n" -le 8 ] || echo "warning: $n files in \$OUT; the device tool brings back 8: pack the rest into one archive" >&2
}
