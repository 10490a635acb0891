#!/bin/sh
# bench/zoo/zoo.py merge and report on made-up results: a later run whose
# deadline came before its timings keeps the earlier run's speed figures,
# marked "*" in the table with the run they came from, and its own figures
# win where it has them (quant --precision fast's column too); ONNX Runtime's SQNR (zoo.py run --ort) has its column,
# kept from an earlier run of the same export by a run without --ort;
# a row the deadline cut short keeps the earlier one. Needs python3 (exit 77 without).
set -u
: "${top_srcdir:?}"
command -v python3 > /dev/null || { echo "no python3: skipped"; exit 77; }
. "$top_srcdir/tests/cli_helpers.sh"
zoo=$top_srcdir/bench/zoo/zoo.py
mkdir -p "$tmp/res" "$tmp/new"

# result FILE COMMIT SQNR INT8_IPS (INT8_IPS "-": the run timed nothing)
result() {
  python3 - "$@" <<'PY'
import json, sys
path, commit, sqnr, ips = sys.argv[1:5]
r = {"model": "resnet50", "variant": "bn", "setting": "ts17", "key": "resnet50.bn.ts17",
     "run": {"date": "2026-12-0%d" % (len(commit) % 9 + 1), "commit": commit, "device": "GPU", "calib_images": 32,
             "eval_images": 50, "bn_images": 32},
     "export": {"ok": True, "opset": 17}, "info": {"ok": True},
     "eval_int8": {"ok": True, "sqnr_db": float(sqnr), "agreement": 0.9},
     "ort_int8": {"ok": True, "method": "minmax", "sqnr_db": 14.496, "agreement": 0.98}}
if ips != "-":
    r["bench_int8"] = {"ok": True, "b256_ips": float(ips), "b1_p50_ms": 0.3}
    r["bench_fp16"] = {"ok": True, "b256_ips": 1000.0, "b1_p50_ms": 0.4}
    r["bench_fast"] = {"ok": True, "b256_ips": 2000.0, "b1_p50_ms": 0.2}
    r["quant_fast"] = {"ok": True, "fp16_layers": ["conv1", "fc"], "sqnr_db": 30.25}
    r["torch_fp16_b256"] = {"ips": 500.0}
json.dump(r, open(path, "w"))
PY
}
row() { grep '^| resnet50 | bn |' "$tmp/R.md"; }

result "$tmp/new/resnet50.bn.ts17.json" aaaaaaa 17.0 49320
python3 "$zoo" merge "$tmp/new" --results "$tmp/res" > /dev/null && python3 "$zoo" report --results "$tmp/res" --out "$tmp/R.md" > /dev/null
if row | grep -q '| 17.0 | 14.5 (0.98) |' && row | grep -q '| 49,320 | 2,000 (2, 30.2) | 1,000 | 500 |' && ! row | grep -q '\*'; then
  pass "a timed run's row, with ONNX Runtime's SQNR beside qforge's"
else fail "a timed run's row: $(row)"; fi

result "$tmp/new/resnet50.bn.ts17.json" bbbbbbb 18.0 -
python3 "$zoo" merge "$tmp/new" --results "$tmp/res" > /dev/null && python3 "$zoo" report --results "$tmp/res" --out "$tmp/R.md" > /dev/null
if row | grep -q '18.0 (was 17.0)' && row | grep -q '| 0.300 \* | 49,320 \* | 2,000 (2, 30.2) \* | 1,000 \* | 500 \* |' &&
   grep -q 'marked \* .* commit aaaaaaa' "$tmp/R.md"; then pass "an untimed run keeps the timings, marked"
else fail "an untimed run keeps the timings, marked: $(row)"; fi

result "$tmp/new/resnet50.bn.ts17.json" ccccccc 18.5 -
python3 "$zoo" merge "$tmp/new" --results "$tmp/res" > /dev/null
if python3 -c "import json, sys; d = json.load(open(sys.argv[1])); sys.exit(d['speed_from']['bench_int8']['commit'] != 'aaaaaaa')" \
   "$tmp/res/resnet50.bn.ts17.json"; then pass "a carried timing keeps the run that measured it"
else fail "a carried timing keeps the run that measured it"; fi

result "$tmp/new/resnet50.bn.ts17.json" ddddddd 19.0 51000
python3 "$zoo" merge "$tmp/new" --results "$tmp/res" > /dev/null && python3 "$zoo" report --results "$tmp/res" --out "$tmp/R.md" > /dev/null
if row | grep -q '| 51,000 (was 49,320) |' && ! row | grep -q '\*' && ! grep -q 'marked \*' "$tmp/R.md"; then
  pass "a new timing replaces a carried one"
else fail "a new timing replaces a carried one: $(row)"; fi

# a run with other quant flags made another INT8 model: nothing carried
result "$tmp/new/resnet50.bn.ts17.json" eeeeeee 20.0 -
python3 - "$tmp/new/resnet50.bn.ts17.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1])); r["run"]["quant_flags"] = "--asymmetric"; json.dump(r, open(sys.argv[1], "w"))
PY
python3 "$zoo" merge "$tmp/new" --results "$tmp/res" > /dev/null && python3 "$zoo" report --results "$tmp/res" --out "$tmp/R.md" > /dev/null
if row | grep -q '| -- (was 51,000) |' && grep -q 'commit eeeeeee.*INT8 made with `qforge quant --asymmetric`' "$tmp/R.md"
then pass "other quant flags: nothing carried, the flags named"
else fail "other quant flags: nothing carried: $(row)"; fi

# a run whose deadline cut its checks short leaves the earlier complete row
result "$tmp/new/resnet50.bn.ts17.json" fffffff 21.0 -
python3 - "$tmp/new/resnet50.bn.ts17.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1])); r["cut_at"] = "ort_int8"; del r["ort_int8"]; json.dump(r, open(sys.argv[1], "w"))
PY
python3 "$zoo" merge "$tmp/new" --results "$tmp/res" > "$tmp/merge.out" && python3 "$zoo" report --results "$tmp/res" --out "$tmp/R.md" > /dev/null
if row | grep -q '| 20.0 (was 19.0) |' && grep -q 'kept the earlier row' "$tmp/merge.out"; then
  pass "a row cut short by the deadline does not replace a complete one"
else fail "a row cut short by the deadline: $(row)"; fi

# a run without --ort keeps the ONNX Runtime figures of the same export,
# naming their run; of another export it keeps none
sha_ort() { # FILE SHA KEEP_ORT
  python3 - "$@" <<'PY'
import json, sys
path, sha, keep = sys.argv[1:4]
r = json.load(open(path)); r["export"]["weights_sha"] = sha
if keep == "no": r.pop("ort_int8", None)
json.dump(r, open(path, "w"))
PY
}
sha_ort "$tmp/res/resnet50.bn.ts17.json" s1 yes
result "$tmp/new/resnet50.bn.ts17.json" ggggggg 22.0 52000
sha_ort "$tmp/new/resnet50.bn.ts17.json" s1 no
python3 "$zoo" merge "$tmp/new" --results "$tmp/res" > /dev/null && python3 "$zoo" report --results "$tmp/res" --out "$tmp/R.md" > /dev/null
if row | grep -q '| 22.0 (was 20.0) | 14.5 (0.98) |' && grep -q 'ORT INT8 figures .* commit eeeeeee (the same export)' "$tmp/R.md"
then pass "a run without --ort keeps the same export's ONNX Runtime figures, named"
else fail "a run without --ort keeps the same export's ONNX Runtime figures: $(row)"; fi
result "$tmp/new/resnet50.bn.ts17.json" hhhhhhh 23.0 52000
sha_ort "$tmp/new/resnet50.bn.ts17.json" s2 no
python3 "$zoo" merge "$tmp/new" --results "$tmp/res" > /dev/null && python3 "$zoo" report --results "$tmp/res" --out "$tmp/R.md" > /dev/null
if row | grep -q '| 23.0 (was 22.0) |  |' && ! grep -q 'ORT INT8 figures' "$tmp/R.md"
then pass "another export's ONNX Runtime figures are not kept"
else fail "another export's ONNX Runtime figures are not kept: $(row)"; fi

[ $fails -eq 0 ]
