#!/bin/sh
# Renders a sample calibration report: first checks it is self-contained (no URL,
# no external resource), then, where chromium is installed, screenshots it headless
# and checks the picture is not blank. Skips (77) without chromium.
set -u
builddir=${top_builddir:-.}
out=$(mktemp -d /tmp/qf-report-XXXXXX) || exit 99
trap 'rm -rf "$out"' EXIT
"$builddir/tests/calib_report_sample" "$out/report.html" || { echo "FAIL: sample report not written"; exit 1; }
for bad in 'http:' 'https:' 'src=' '<link' '@import' 'url('; do
    if grep -qF "$bad" "$out/report.html"; then
        echo "FAIL: report refers to something outside itself ($bad)"; exit 1
    fi
done
grep -q '<svg' "$out/report.html" || { echo "FAIL: no histogram in the report"; exit 1; }
chromium=$(command -v chromium || command -v chromium-browser || true)
if [ -z "$chromium" ]; then
    echo "SKIP: no chromium to render the report"; exit 77
fi
# A fresh profile folder; no network is needed or used.
timeout 120 "$chromium" --headless --no-sandbox --disable-gpu --user-data-dir="$out/profile" \
    --screenshot="$out/r.png" --window-size=1400,2000 "file://$out/report.html" >"$out/log" 2>&1
[ -s "$out/r.png" ] || { echo "FAIL: chromium wrote no screenshot"; cat "$out/log"; exit 1; }
# A blank page compresses to almost nothing; a rendered report with histograms does not.
size=$(wc -c < "$out/r.png")
if [ "$size" -lt 60000 ]; then
    echo "FAIL: screenshot is only $size bytes (blank page?)"; exit 1
fi
if [ -n "${QF_KEEP_REPORT:-}" ]; then cp "$out/report.html" "$out/r.png" "$QF_KEEP_REPORT"/; fi
echo "rendered report: $size-byte screenshot"
exit 0
