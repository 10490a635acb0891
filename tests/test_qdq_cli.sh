#!/bin/sh
# The qforge command on models quantized elsewhere, without ONNX Runtime:
# tests/bad/qdq_seed.onnx (uint8 activations with zero points) quantizes with
# no table and info says where its scales came from; eval/run read it
# directly; each broken variant fails with one line naming its node, exit 1,
# and no output file.
set -u
: "${QFORGE:?}" "${top_srcdir:?}" "${top_builddir:?}"
. "$top_srcdir/tests/cli_helpers.sh"
bad=$top_srcdir/tests/bad
seed=$bad/qdq_seed.onnx

"$QFORGE" quant "$seed" -o "$tmp/seed.qfm" 2> "$tmp/q.err"
if [ $? = 0 ] && grep -q '1 INT8, 0 FP16, 0 FP32 nodes, 1 fused, 2 conversions; scales from the model' "$tmp/q.err"
then pass "quant without a table keeps the model's scales"; else fail "quant of the Q/DQ seed: $(cat "$tmp/q.err")"; fi
"$QFORGE" info "$tmp/seed.qfm" --nodes > "$tmp/info.txt" 2>&1
# the Conv's output: uint8 zero point 3 stored as int8 3 - 128
if grep -q "^scales   the source model's own" "$tmp/info.txt" && grep -q 'Conv .* int8 i8  scale 0.05 zp -125 +relu' "$tmp/info.txt"
then pass "info: scales from the model, the zero point"; else fail "info of the imported seed: $(cat "$tmp/info.txt")"; fi
"$QFORGE" info "$seed" > "$tmp/info_onnx.txt" 2>&1
if grep -q "^scales   the model's own" "$tmp/info_onnx.txt" && grep -q '^precision int8 1, fp16 0, fp32 0' "$tmp/info_onnx.txt"
then pass "info on the ONNX file shows it as qforge runs it"; else fail "info of the seed: $(cat "$tmp/info_onnx.txt")"; fi
expect 2 "carries its own scales" "--precision fp16 refused on a model quantized elsewhere" -- \
  "$QFORGE" bench "$seed" --device cpu --batch 1 --iterations 1 --precision fp16

for case in "qdq_zero_scale:node x_q (QuantizeLinear): scale x_scale is 0" \
            "qdq_bias_zero_point:node b_dq (DequantizeLinear): int32 zero point b_zero_point is not 0" \
            "qdq_float_dequantize:node x_dq (DequantizeLinear): input x has dtype f32" \
            "qdq_axis_length:node w_dq (DequantizeLinear): scale w_scale has 3 elements" \
            "qop_unsupported:node qsoftmax: op QLinearSoftmax of domain com.microsoft is not supported"; do
  name=${case%%:*} msg=${case#*:}
  expect 1 "$bad/$name.onnx: $msg" "quant $name: one line naming the node" -- \
    "$QFORGE" quant "$bad/$name.onnx" -o "$tmp/$name.qfm"
  [ -e "$tmp/$name.qfm" ] && fail "quant $name left $tmp/$name.qfm" || pass "quant $name wrote nothing"
done

echo "test_qdq_cli: $fails failure(s)"
[ "$fails" = 0 ]
