#!/bin/sh
# `qforge quant MODEL --images DIR`, the one-command form, against the three
# commands it stands for, on ResNet-20 and CIFAR-10 images from the shared data
# (exit 77 without): the same table as `calib -n`, the same .qfm as
# `quant --calib`, and the held-out figures `eval --reference` gives on the
# images calibration left, and eval --per-layer's rows there; --precision best and fast; a
# folder too small; usage errors.
set -u
: "${QFORGE:?}" "${top_srcdir:?}"
data=${QFORGE_DATA:-$top_srcdir/../shared/data}/cifar10
model=$data/resnet20.onnx
[ -r "$model" ] && [ -d "$data/calib" ] || { echo "no $model: skipped"; exit 77; }
. "$top_srcdir/tests/cli_helpers.sh"
pp="--preset cifar10"
json() { sed -n "s/.*\"$2\": \([-0-9.e]*\).*/\1/p" "$1" | head -1; } # FILE KEY: the number under KEY

# held_out DIR C H OUT: links into OUT the images of DIR quant holds out when
# it calibrates on C of them and checks on H: the files `-n C` leaves
# (evenly spaced picks i*N/C in sorted order), then H evenly spaced among those
held_out() {
  (cd "$1" && find . -name '*.jpg' | sed 's|^\./||' | LC_ALL=C sort) |
    awk -v c="$2" -v h="$3" '{ f[NR - 1] = $0 }
      END { n = NR; p = 0; nx = 0; r = 0
            for (j = 0; j < n; j++) if (p < c && j == nx) { p++; nx = int(p * n / c) } else rest[r++] = f[j]
            k = 0; nx = 0
            for (j = 0; j < r; j++) if (k < h && j == nx) { print rest[j]; k++; nx = int(k * r / h) } }' |
    while read -r f; do mkdir -p "$4/${f%/*}" && ln -s "$1/$f" "$4/$f"; done
}

# ---- one command = calib -n + quant --calib + eval on the held-out part -------------------
"$QFORGE" quant "$model" --images "$data/calib" -n 200 --held-out 200 $pp -o "$tmp/one.qfm" \
  --calib-out "$tmp/one.calib" --json --quiet > "$tmp/one.json" || fail "quant --images exit $?"
"$QFORGE" calib "$model" --images "$data/calib" -n 200 $pp -o "$tmp/three.calib" --quiet &&
"$QFORGE" quant "$model" --calib "$tmp/three.calib" -o "$tmp/three.qfm" --quiet || fail "calib + quant"
cmp -s "$tmp/one.calib" "$tmp/three.calib" && pass "the table is calib -n 200's" || fail "tables differ"
cmp -s "$tmp/one.qfm" "$tmp/three.qfm" && pass "the .qfm is quant --calib's" || fail ".qfm files differ"
# zero points by default: ResNet-20's Relu outputs (21 of its 23 int8 activations), none with
# --zero-points none (best.json below)
zp=$(json "$tmp/one.json" zero_point_activations) acts=$(json "$tmp/one.json" int8_activations)
[ "$zp" = 21 ] && [ "$acts" = 23 ] && pass "zero points on $zp of $acts int8 activations" ||
  fail "zero points: $zp of $acts (want 21 of 23)"
held_out "$data/calib" 200 200 "$tmp/held"
"$QFORGE" eval "$tmp/three.qfm" --images "$tmp/held" --reference "$model" --json --quiet > "$tmp/three.json"
for key in images agreement sqnr_db; do
  a=$(json "$tmp/one.json" "$key") b=$(json "$tmp/three.json" "$key")
  [ -n "$a" ] && [ "$a" = "$b" ] && pass "held-out $key $a = eval's" || fail "held-out $key: quant $a, eval $b"
done
a=$(sed -n 's/.*"held_out": {[^}]*"top1": \([0-9.]*\).*/\1/p' "$tmp/one.json")
b=$(sed -n 's/.*"images": [0-9]*, "top1": \([0-9.]*\).*/\1/p' "$tmp/three.json")
[ -n "$a" ] && [ "$a" = "$b" ] && pass "held-out top1 $a = eval's" || fail "held-out top1: quant $a, eval $b"

# ---- eval --per-layer: every shared tensor's SQNR, worst first; the output's is eval's --------
"$QFORGE" eval "$tmp/three.qfm" --images "$tmp/held" --reference "$model" --per-layer --json --quiet \
  --report "$tmp/layers.html" > "$tmp/layers.json" || fail "eval --per-layer exit $?"
tr '{' '\n' < "$tmp/layers.json" | sed -n 's/.*"tensor": "\([^"]*\)".*"sqnr_db": \([-0-9.]*\)}.*/\1 \2/p' > "$tmp/layers.txt"
n=$(wc -l < "$tmp/layers.txt")
[ "$n" -ge 20 ] && pass "per-layer: $n tensors" || fail "per-layer: $n rows: $(cat "$tmp/layers.json")"
awk 'NR > 1 && $2 < last { bad = 1 } { last = $2 } END { exit bad }' "$tmp/layers.txt" &&
  pass "per-layer: worst first" || fail "per-layer: not sorted: $(cat "$tmp/layers.txt")"
a=$(awk '$1 == "output" { print $2 }' "$tmp/layers.txt") b=$(json "$tmp/three.json" sqnr_db)
[ -n "$a" ] && [ "$a" = "$b" ] && pass "per-layer: output $a dB = eval's" || fail "per-layer output: $a, eval $b"
awk 'NR == 1 { exit !($2 < 30) }' "$tmp/layers.txt" && pass "per-layer: worst $(head -1 "$tmp/layers.txt") dB" ||
  fail "per-layer: worst $(head -1 "$tmp/layers.txt")"
# the HTML report: the same rows in the same order, nothing fetched from elsewhere
sed -n 's|^<tr><td data-v="[0-9]*">[0-9]*</td><td class="n">\([^<]*\)</td>.*<td data-v="[-0-9.]*"[^>]*>\([-0-9.]*\)</td><td data-v.*|\1 \2|p' \
  "$tmp/layers.html" > "$tmp/html.txt"
[ "$(wc -l < "$tmp/html.txt")" = "$n" ] && paste -d ' ' "$tmp/layers.txt" "$tmp/html.txt" |
  awk '$1 != $3 || $2 - $4 > 0.006 || $4 - $2 > 0.006 { bad = 1 } END { exit bad }' &&
  ! grep -qE 'https?:|src=|<link' "$tmp/layers.html" && pass "per-layer: the HTML report's rows are eval's" ||
  fail "per-layer report: $(head -c 300 "$tmp/html.txt")"
expect 2 "--report needs --per-layer" "report without --per-layer" -- \
  "$QFORGE" eval "$tmp/three.qfm" --images "$tmp/held" --reference "$model" --report "$tmp/x.html"
expect 2 "--per-layer needs --reference" "per-layer without a reference" -- \
  "$QFORGE" eval "$tmp/three.qfm" --images "$tmp/held" --per-layer
if awk -v a="$(json "$tmp/one.json" agreement)" 'BEGIN { exit !(a >= 0.95) }'; then pass "INT8 agrees with FP32"
else fail "agreement: $(cat "$tmp/one.json")"; fi
grep -q '"speed": \[{"batch": 1, "images_per_second": [0-9]' "$tmp/one.json" && pass "speed reported" ||
  fail "no speed: $(cat "$tmp/one.json")"

# ---- --precision best: layers return to FP16 until the held-out loss is within --max-drop ------
# (50 calibration images leave symmetric INT8 a point or so of agreement to win back on
# 200; with zero points, the default, it lost only 0.5 and best had nothing to do)
"$QFORGE" quant "$model" --images "$data/calib" -n 50 --held-out 200 $pp --precision best --max-drop 0.5 --zero-points none \
  -o "$tmp/best.qfm" --json --quiet > "$tmp/best.json" || fail "quant --precision best exit $?"
agree=$(json "$tmp/best.json" agreement)
layers=$(sed -n 's/.*"fp16_layers": \[\([^]]*\)\].*/\1/p' "$tmp/best.json" | tr ',' '\n' | grep -c '"')
fp16=$(sed -n 's/.*"fp16": \([0-9]*\).*/\1/p' "$tmp/best.json")
if grep -q '"precision": "best"' "$tmp/best.json" && awk -v a="$agree" 'BEGIN { exit !(a >= 0.995) }' &&
   [ "$layers" -ge 1 ] && [ "$fp16" -ge "$layers" ]
then pass "best: agreement $agree with $layers layer(s) in FP16"; else fail "best: $(cat "$tmp/best.json")"; fi
[ "$(json "$tmp/best.json" zero_point_activations)" = 0 ] && pass "--zero-points none: no zero points" ||
  fail "--zero-points none: $(json "$tmp/best.json" zero_point_activations) zero points"
held_out "$data/calib" 50 200 "$tmp/held50"
b=$("$QFORGE" eval "$tmp/best.qfm" --images "$tmp/held50" --reference "$model" --json --quiet |
    sed -n 's/.*"agreement": \([0-9.]*\).*/\1/p')
[ "$agree" = "$b" ] && pass "best's held-out agreement = eval's" || fail "best: quant $agree, eval $b"
# its FP16 layers read conversions of qforge's own plan, not a model's Q/DQ pairs
"$QFORGE" info "$tmp/best.qfm" > "$tmp/best.info" || fail "info best.qfm exit $?"
if grep -q "between Q/DQ" "$tmp/best.info"; then fail "info calls qforge's FP16 layers Q/DQ: $(grep 'Q/DQ' "$tmp/best.info")"
else pass "info: FP16 layers of a qforge plan are not 'between Q/DQ'"; fi

# --fp16-layers replays best's choice from a table: the same nodes FP16, the same file
names=$(sed -n 's/.*"fp16_layers": \[\([^]]*\)\].*/\1/p' "$tmp/best.json" | tr -d '" ')
"$QFORGE" calib "$model" --images "$data/calib" -n 50 $pp --zero-points none -o "$tmp/best50.calib" --quiet &&
"$QFORGE" quant "$model" --calib "$tmp/best50.calib" --fp16-layers "$names" --zero-points none -o "$tmp/replay.qfm" --quiet ||
  fail "quant --fp16-layers exit $?"
cmp -s "$tmp/best.qfm" "$tmp/replay.qfm" && pass "--fp16-layers $names: best's .qfm again" ||
  fail "--fp16-layers $names: the .qfm differs from best's"
expect 2 "has no node named 'NoSuchConv'" "--fp16-layers with an unknown name" -- \
  "$QFORGE" quant "$model" --calib "$tmp/best50.calib" --fp16-layers "${names%%,*},NoSuchConv" -o "$tmp/bad.qfm"
[ ! -e "$tmp/bad.qfm" ] && pass "nothing written for it" || fail "bad.qfm written"
expect 2 "--fp16-layers goes with --precision int8" "--fp16-layers at fp16" -- \
  "$QFORGE" quant "$model" --calib "$tmp/best50.calib" --fp16-layers "$names" --precision fp16

# ---- --precision fast: the layers that time faster in FP16 (here, on the CPU) return to FP16 -----
# Which layers that is depends on the machine's timings, so the test asserts what holds for any
# choice: the summary names them, the .qfm has them in FP16, and --fp16-layers replays the file.
"$QFORGE" quant "$model" --calib "$tmp/best50.calib" --images "$data/calib" -n 50 --held-out 50 $pp --precision fast \
  --zero-points none -o "$tmp/fast.qfm" --json --quiet > "$tmp/fast.json" || fail "quant --precision fast exit $?"
fast_names=$(sed -n 's/.*"fp16_layers": \[\([^]]*\)\].*/\1/p' "$tmp/fast.json" | tr -d '" ')
fast_n=$(printf '%s' "$fast_names" | tr ',' '\n' | grep -c .)
fast16=$(sed -n 's/.*"fp16": \([0-9]*\).*/\1/p' "$tmp/fast.json")
fast_ips=$(sed -n 's/.*"fast": {[^}]*"images_per_second": \([0-9.]*\).*/\1/p' "$tmp/fast.json")
if grep -q '"precision": "fast"' "$tmp/fast.json" && [ -n "$fast_ips" ] && [ "$fast16" -ge "$fast_n" ] &&
   awk -v a="$(json "$tmp/fast.json" agreement)" 'BEGIN { exit !(a >= 0.9) }'
then pass "fast: $fast_n layer(s) in FP16 ($fast16 FP16 nodes), $fast_ips images/s at its batch"
else fail "fast: $(cat "$tmp/fast.json")"; fi
if [ "$fast_n" -gt 0 ]; then
  "$QFORGE" quant "$model" --calib "$tmp/best50.calib" --fp16-layers "$fast_names" --zero-points none \
    -o "$tmp/fast_replay.qfm" --quiet || fail "quant --fp16-layers (fast's) exit $?"
else
  "$QFORGE" quant "$model" --calib "$tmp/best50.calib" --zero-points none -o "$tmp/fast_replay.qfm" --quiet ||
    fail "quant (fast chose no layer) exit $?"
fi
cmp -s "$tmp/fast.qfm" "$tmp/fast_replay.qfm" && pass "fast's .qfm = --fp16-layers '$fast_names'" ||
  fail "fast's .qfm differs from --fp16-layers '$fast_names'"
expect 2 "--precision fast needs --images" "--precision fast without images" -- \
  "$QFORGE" quant "$model" --calib "$tmp/best50.calib" --precision fast

# labels whose classes do not match the model's outputs (folders calib/ and val/ of ImageNet
# without --synsets) are warned about, once
mkdir -p "$tmp/two/x" "$tmp/two/y"
for f in $(cd "$data/calib/cat" && ls | head -4); do ln -s "$data/calib/cat/$f" "$tmp/two/x/$f"; ln -s "$data/calib/cat/$f" "$tmp/two/y/$f"; done
"$QFORGE" eval "$model" --images "$tmp/two" $pp > /dev/null 2> "$tmp/two.err" || fail "eval of two folders exit $?"
if [ "$(grep -c "the labels name 2 classes but .* scores 10" "$tmp/two.err")" = 1 ]; then pass "eval warns once: 2 label classes, 10 outputs"
else fail "no single class-count warning: $(cat "$tmp/two.err")"; fi
"$QFORGE" eval "$model" --images "$data/calib" -n 20 $pp > /dev/null 2> "$tmp/ten.err" || fail "eval exit $?"
grep -q "the labels name" "$tmp/ten.err" && fail "warned with 10 folders for 10 outputs" || pass "no warning for 10 folders, 10 outputs"

# ---- errors: one line naming the culprit, exit 1 (2 for usage), nothing written ---------------
mkdir -p "$tmp/few"
for f in $(cd "$data/calib/cat" && ls | head -12); do ln -s "$data/calib/cat/$f" "$tmp/few/$f"; done
expect 1 "few: found 12 images; quant needs at least 20" "a folder too small for both parts" -- \
  "$QFORGE" quant "$model" --images "$tmp/few" $pp -o "$tmp/few.qfm"
[ ! -e "$tmp/few.qfm" ] && pass "nothing written for it" || fail "few.qfm written"
expect 2 "needs --images" "--precision best without images" -- "$QFORGE" quant "$model" --precision best
expect 2 "max-drop" "--max-drop without best" -- \
  "$QFORGE" quant "$model" --images "$data/calib" --max-drop 1 $pp
expect 2 "held-out" "--held-out below 10" -- "$QFORGE" quant "$model" --images "$data/calib" --held-out 3 $pp

echo "test_quant_images: $fails failure(s)"
[ "$fails" = 0 ]
