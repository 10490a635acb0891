#!/bin/sh
# End-to-end checks of the qforge command on the bundled example: exit codes
# and one-line errors for bad input, calibration tables identical across batch
# sizes and thread counts, eval's JSON. Needs dataset-fashion-mnist (exit 77 without).
set -u
: "${QFORGE:?}" "${top_srcdir:?}" "${top_builddir:?}"
idx=/usr/share/datasets/fashion-mnist
[ -r "$idx/t10k-images-idx3-ubyte.gz" ] || { echo "no $idx: skipped"; exit 77; }
model=$top_srcdir/examples/fashion-mnist/model.onnx
. "$top_srcdir/tests/cli_helpers.sh"
pp="--gray --mean 0.286 --std 0.353"

"$top_builddir/examples/fashion-mnist/idx2png" "$idx/t10k-images-idx3-ubyte.gz" "$idx/t10k-labels-idx1-ubyte.gz" \
  "$tmp/test" > /dev/null || { echo "idx2png failed"; exit 1; }

# ---- bad input: one line naming the culprit, exit 1 (2 for usage) -------------------
mkdir -p "$tmp/empty"
expect 1 "$tmp/empty" "empty folder" -- "$QFORGE" eval "$model" --images "$tmp/empty" $pp
expect 1 "no-such.onnx" "missing model" -- "$QFORGE" info "$tmp/no-such.onnx"
expect 2 "--bogus" "unknown option" -- "$QFORGE" eval "$model" --images "$tmp/test" --bogus
expect 2 "unknown command" "unknown command" -- "$QFORGE" frobnicate
expect 2 "--ops" "info --ops with a model" -- "$QFORGE" info --ops "$model"
# info --ops: one line per op; the CPU engine has every precision an op can have
"$QFORGE" info --ops > "$tmp/ops.txt" 2>&1
if grep -q '^Conv  *yes  *yes  *yes ' "$tmp/ops.txt" && grep -q '^Shape  *yes  *\.  *\. ' "$tmp/ops.txt" &&
   [ "$(grep -c '^[A-Z][A-Za-z]*  *yes' "$tmp/ops.txt")" -ge 40 ]
then pass "info --ops prints the support matrix"; else fail "info --ops ($(head -c 300 "$tmp/ops.txt"))"; fi
# --version: the version alone on the first line, then one line per engine kind this build has
"$QFORGE" --version > "$tmp/version.txt" 2>&1
if head -1 "$tmp/version.txt" | grep -q '^qforge [0-9][0-9.]*$' && grep -q '^cpu: INT8 kernels [a-z0-9]*, FP32 GEMM ' "$tmp/version.txt" &&
   grep -q '^cuda: ' "$tmp/version.txt"
then pass "--version names the version and what each engine finds"; else fail "--version ($(head -c 400 "$tmp/version.txt"))"; fi
# without cuDNN (or with it turned off) only the tactic goes, said on the cuda line
if ! grep -q '^cuda: .*built without CUDA' "$tmp/version.txt"; then
  QFORGE_CUDNN=/nonexistent/libcudnn.so.9 "$QFORGE" --version > "$tmp/version2.txt" 2>&1
  if grep -q '^cuda: .*no cuDNN tactics: cannot load /nonexistent/libcudnn.so.9' "$tmp/version2.txt"
  then pass "--version says why there are no cuDNN tactics"; else fail "--version without cuDNN ($(tail -1 "$tmp/version2.txt"))"; fi
fi
expect 2 "batch" "bad --batch value" -- "$QFORGE" eval "$model" --images "$tmp/test" --batch 0
# a batch whose tensors exceed 4 GiB: the batch and the bytes named, and the batch that would fit
# (42799 by the tensor bound, fewer where this machine's memory holds fewer); nothing written
expect 1 "at batch 65536, .* bytes .*; batch [1-9][0-9]* would fit (--batch [1-9][0-9]*)" "eval at a batch too large" -- \
  "$QFORGE" eval "$model" --images "$tmp/test" $pp --batch 65536
expect 1 "at batch 65536, .*; batch [1-9][0-9]* would fit" "calib at a batch too large" -- \
  "$QFORGE" calib "$model" --images "$tmp/test" $pp --batch 65536 -o "$tmp/huge.calib"
[ -e "$tmp/huge.calib" ] && fail "calib at a batch too large left $tmp/huge.calib" || pass "calib at a batch too large wrote nothing"
head -c 700 "$model" > "$tmp/truncated.onnx"
expect 1 "truncated.onnx" "truncated ONNX" -- "$QFORGE" info "$tmp/truncated.onnx"
mkdir -p "$tmp/badimg/0_a"
cp "$tmp/test/0_tshirt_top/00019.png" "$tmp/badimg/0_a/good.png"
head -c 60 "$tmp/test/0_tshirt_top/00019.png" > "$tmp/badimg/0_a/cut.png"
# (--quiet: the one class folder against the model's 10 adds a labels warning, 3b7bb31)
expect 1 "cut.png" "--strict stops at a corrupt image" -- "$QFORGE" eval "$model" --images "$tmp/badimg" $pp --strict --quiet
"$QFORGE" eval "$model" --images "$tmp/badimg" $pp --json > "$tmp/skip.json" 2> "$tmp/skip.err"
if grep -q '"images": 1,' "$tmp/skip.json" && grep -q '"skipped": 1' "$tmp/skip.json" && grep -q cut.png "$tmp/skip.err"
then pass "corrupt image skipped with a warning naming it"; else fail "corrupt image skip ($(cat "$tmp/skip.err"))"; fi
expect 1 "size\|channels\|crop\|28" "preprocessing that does not fit the model" -- \
  "$QFORGE" eval "$model" --images "$tmp/test" -n 4 --preset imagenet
printf 'qforge-calib 1\ngarbage here\n' > "$tmp/garbage.calib"
if "$QFORGE" help quant > /dev/null 2>&1; then
  expect 2 "bias-correction" "--bias-correction without images" -- "$QFORGE" quant "$model" --calib "$tmp/garbage.calib" --bias-correction
  expect 2 "optimize-rounding.*images" "--optimize-rounding without images" -- \
    "$QFORGE" quant "$model" --calib "$tmp/garbage.calib" --optimize-rounding
  expect 2 "optimize-rounding.*int8" "--optimize-rounding at fp16" -- \
    "$QFORGE" quant "$model" --images "$tmp/test" --precision fp16 --optimize-rounding
  expect 1 "garbage.calib" "garbage calibration table" -- "$QFORGE" quant "$model" --calib "$tmp/garbage.calib" -o "$tmp/x.qfm"
  [ ! -e "$tmp/x.qfm" ] && pass "no partial .qfm left" || fail "partial .qfm left behind"
fi

# ---- calibration tables are identical across batch sizes and thread counts -----------
"$QFORGE" calib "$model" --images "$tmp/test" -n 300 $pp --method all --batch 32 --threads 2 -o "$tmp/a.calib" --quiet &&
"$QFORGE" calib "$model" --images "$tmp/test" -n 300 $pp --method all --batch 7 --threads 1 -o "$tmp/b.calib" --quiet
if cmp -s "$tmp/a.calib" "$tmp/b.calib" && grep -q '^images 300$' "$tmp/a.calib"; then pass "calib table bit-identical (batch 32/2 threads vs batch 7/1 thread)"
else fail "calib tables differ across batch/threads"; fi
"$QFORGE" calib "$model" --images "$tmp/test" -n 300 $pp --method minmax --trt-cache "$tmp/c.cache" -o "$tmp/c.calib" --quiet
if head -1 "$tmp/c.cache" | grep -q '^TRT-[0-9]*-MinMaxCalibration$' && grep -Eq '^input: [0-9a-f]{8}$' "$tmp/c.cache"
then pass "TensorRT cache format"; else fail "TensorRT cache format"; fi
# the default, auto: its thresholds are --method all's auto column, its cache has the entropy header
"$QFORGE" calib "$model" --images "$tmp/test" -n 300 $pp --trt-cache "$tmp/d.cache" -o "$tmp/d.calib" 2> "$tmp/d.err"
if grep -q '^method auto$' "$tmp/d.calib" && head -1 "$tmp/d.cache" | grep -q '^TRT-[0-9]*-EntropyCalibration2$' &&
   grep -q 'auto thresholds (chosen on 32 images' "$tmp/d.err" &&
   [ "$(sed -n 's/^\([^ ]*\) auto=\([^ ]*\) .*/\1 \2/p' "$tmp/a.calib")" = "$(sed -n '7,$s/ min=.*//p' "$tmp/d.calib")" ]
then pass "calib --method auto by default (the all table's auto column, entropy cache header)"
else fail "calib default auto: $(cat "$tmp/d.err")"; fi
grep -q "TensorRT's INT8 is symmetric: --zero-points none" "$tmp/d.err" &&
  pass "calib --trt-cache: a note that auto judged for zero points" || fail "no --trt-cache note: $(cat "$tmp/d.err")"
# auto judges thresholds on the grid quant will use: with zero points by default, symmetric with
# --zero-points none; only the one-sided tensors (here the Relu outputs) can differ
"$QFORGE" calib "$model" --images "$tmp/test" -n 300 $pp --zero-points none -o "$tmp/sym.calib" --quiet
changed=$(diff "$tmp/d.calib" "$tmp/sym.calib" | sed -n 's/^< \([^ ]*\) .*/\1/p')
if [ -n "$changed" ] && ! echo "$changed" | grep -qv 'Relu_output'
then pass "calib --zero-points none: other auto thresholds for $(echo "$changed" | wc -l) Relu outputs only"
else fail "calib --zero-points none changed: ${changed:-nothing}"; fi
# --zero-points two-sided (calib and quant): the input, which the graph leaves two-sided, gets a zero
# point from its calibrated minimum; only two-sided tensors' auto thresholds can differ
"$QFORGE" calib "$model" --images "$tmp/test" -n 300 $pp --zero-points two-sided -o "$tmp/two.calib" --quiet
changed=$(diff "$tmp/d.calib" "$tmp/two.calib" | sed -n 's/^< \([^ ]*\) .*/\1/p')
"$QFORGE" quant "$model" --calib "$tmp/two.calib" --zero-points two-sided -o "$tmp/two.qfm" --quiet
"$QFORGE" quant "$model" --calib "$tmp/d.calib" -o "$tmp/d.qfm" --quiet
if [ -n "$changed" ] && ! echo "$changed" | grep -q 'Relu_output' &&
   "$QFORGE" info "$tmp/two.qfm" --nodes | grep -q '^ *0 QuantizeLinear .* zp -[0-9]' &&
   ! "$QFORGE" info "$tmp/d.qfm" --nodes | grep -q '^ *0 QuantizeLinear .* zp '
then pass "--zero-points two-sided: the input's zero point, other auto thresholds for $(echo "$changed" | wc -l) tensors"
else fail "--zero-points two-sided: changed ${changed:-nothing}; $("$QFORGE" info "$tmp/two.qfm" --nodes | grep Quantize)"; fi
expect 2 "zero-points takes all, two-sided, unpadded or none" "calib --zero-points with a bad value" -- \
  "$QFORGE" calib "$model" --images "$tmp/test" --zero-points half

"$QFORGE" quant "$model" --images "$tmp/test" -n 100 --held-out 50 $pp --bias-correction -o "$tmp/bc.qfm" > /dev/null 2> "$tmp/bc.err"
if grep -q 'bias correction of [1-9][0-9]* layers measured on 32 images' "$tmp/bc.err" && [ -s "$tmp/bc.qfm" ]
then pass "quant --bias-correction"; else fail "quant --bias-correction: $(cat "$tmp/bc.err")"; fi
# learned rounding, bias correction measured with it; the .qfm runs
"$QFORGE" quant "$model" --images "$tmp/test" -n 100 --held-out 50 $pp --optimize-rounding --bias-correction \
  -o "$tmp/ar.qfm" > /dev/null 2> "$tmp/ar.err"
if grep -q 'rounding learned for [1-9][0-9]* INT8 layers on 64 images in [0-9.]* s' "$tmp/ar.err" &&
   "$QFORGE" eval "$tmp/ar.qfm" --images "$tmp/test" -n 100 $pp --json --quiet | grep -q '"images": 100,'
then pass "quant --optimize-rounding"; else fail "quant --optimize-rounding: $(cat "$tmp/ar.err")"; fi
expect 2 "asymmetric" "--asymmetric at fp16" -- "$QFORGE" quant "$model" --precision fp16 --asymmetric
expect 2 "int8-attention" "--int8-attention at fp16" -- "$QFORGE" quant "$model" --precision fp16 --int8-attention
expect 2 "fp16-se" "--fp16-se at fp16" -- "$QFORGE" quant "$model" --precision fp16 --fp16-se
expect 2 "zero-points" "--zero-points sometimes" -- "$QFORGE" quant "$model" --zero-points sometimes
expect 2 "zero-points" "--zero-points at fp16" -- "$QFORGE" quant "$model" --precision fp16 --zero-points unpadded
# zero points reach the .qfm (the Relu outputs': -128), with bias correction measured alike
"$QFORGE" quant "$model" --images "$tmp/test" -n 100 --held-out 50 $pp --asymmetric --bias-correction -o "$tmp/zp.qfm" \
  > /dev/null 2> "$tmp/zp.err"
if "$QFORGE" info "$tmp/zp.qfm" --nodes 2> /dev/null | grep -q ' zp -128 '
then pass "quant --asymmetric: zero points in the model"; else fail "quant --asymmetric: $(cat "$tmp/zp.err")"; fi

# ---- --equalize: the table records it, quant --calib follows it, mismatches are refused --
expect 2 "equalize" "--equalize at fp16" -- "$QFORGE" quant "$model" --precision fp16 --equalize
expect 2 "trt-cache" "calib --equalize --trt-cache" -- \
  "$QFORGE" calib "$model" --images "$tmp/test" -n 50 $pp --equalize --trt-cache "$tmp/eq.cache"
"$QFORGE" calib "$model" --images "$tmp/test" -n 100 $pp --equalize -o "$tmp/eq.calib" 2> "$tmp/eq.err"
if head -1 "$tmp/eq.calib" | grep -q '^qforge-calib 3$' && grep -Eq '^equalized [0-9a-f]{64}$' "$tmp/eq.calib" &&
   grep -q 'equalized 2 of 2 conv pairs' "$tmp/eq.err"
then pass "calib --equalize records it in the table"; else fail "calib --equalize: $(cat "$tmp/eq.err")"; fi
"$QFORGE" quant "$model" --calib "$tmp/eq.calib" -o "$tmp/eq.qfm" 2> "$tmp/eqq.err"
if grep -q 'equalizing alike' "$tmp/eqq.err" && "$QFORGE" info "$tmp/eq.qfm" 2> /dev/null | grep -q '^equalized '
then pass "quant --calib follows an equalized table; the .qfm records it"
else fail "quant --calib with an equalized table: $(cat "$tmp/eqq.err")"; fi
"$QFORGE" calib "$model" --images "$tmp/test" -n 100 $pp -o "$tmp/plain.calib" --quiet
expect 2 "calibrate with --equalize" "--equalize with a table made without it" -- \
  "$QFORGE" quant "$model" --calib "$tmp/plain.calib" --equalize -o "$tmp/bad.qfm"
[ ! -e "$tmp/bad.qfm" ] && pass "no .qfm from a mismatched table" || fail "a mismatched table left $tmp/bad.qfm"
# per layer, the reference is equalized alike: no tensor compares as far off as a scaled channel would
"$QFORGE" eval "$tmp/eq.qfm" --images "$tmp/test" -n 64 $pp --reference "$model" --per-layer > "$tmp/eql.txt" 2> "$tmp/eql.err"
if grep -q 'per-layer' "$tmp/eql.txt" && ! awk '/ dB /{ if ($1 + 0 < 15) bad = 1 } END { exit !bad }' "$tmp/eql.txt"
then pass "eval --per-layer of an equalized model"; else fail "eval --per-layer equalized: $(head -5 "$tmp/eql.txt") $(cat "$tmp/eql.err")"; fi

# ---- eval JSON: accuracy of the example on an evenly spaced subset ----------------------
"$QFORGE" eval "$model" --images "$tmp/test" -n 500 $pp --json --reference "$model" > "$tmp/eval.json"
top1=$(sed -n 's/.*"top1": \([0-9.]*\).*/\1/p' "$tmp/eval.json" | head -1)
agree=$(sed -n 's/.*"agreement": \([0-9.]*\).*/\1/p' "$tmp/eval.json")
if awk -v t="$top1" -v a="$agree" 'BEGIN { exit !(t >= 0.90 && t <= 0.97 && a == 1) }'; then pass "eval top1 $top1, agreement $agree"
else fail "eval json: $(cat "$tmp/eval.json")"; fi

# ---- bench --profile on the CPU: every node that runs timed, with its shapes -------------
"$QFORGE" bench "$model" --device cpu --batch 4 --iterations 3 --profile > "$tmp/prof.txt" 2>&1
# the stem's Relu runs inside its Conv (no line); the residual Relus after the Adds have their own
if grep -q '^  per node (' "$tmp/prof.txt" && grep -q ' Conv  *fp32  /stem/stem.0/Conv  4x1x28x28 -> 4x32x28x28$' "$tmp/prof.txt" &&
   grep -q ' Gemm  *fp32  .* 4x64 -> 4x10$' "$tmp/prof.txt" && grep -q ' Relu  *fp32  /res1/Relu ' "$tmp/prof.txt" &&
   ! grep -q 'stem/stem.2/Relu\|on the host\|warning' "$tmp/prof.txt"
then pass "bench --profile on the CPU"; else fail "bench --profile: $(cat "$tmp/prof.txt")"; fi
"$QFORGE" bench "$model" --device cpu --batch 2 --iterations 3 --profile --json > "$tmp/prof.json"
if [ "$(grep -o '"op": "Conv"' "$tmp/prof.json" | wc -l)" = 6 ] && grep -q '"ms": 0\.[0-9]*[1-9]' "$tmp/prof.json" &&
   grep -q '"node": "/stem/stem.2/Relu", "op": "Relu", "precision": "fp32", "host": false, "ms": 0.00000}' "$tmp/prof.json"
then pass "bench --profile --json on the CPU"; else fail "bench --profile --json: $(head -c 400 "$tmp/prof.json")"; fi

echo "test_cli: $fails failure(s)"
[ "$fails" = 0 ]
