/* The op table: for every op of include/qforge/ops.def, its attribute parser,
 * shape inference, CPU kernel, scratch size and FLOP count. Adding an op
 * touches ops.def, this table and the op's own files. */
#include "internal.h"
#include "ops/ops.h"
#include "../runtime/cpu/kernels.h"

#define OP(stem, cpu_fn) .parse = qfi_##stem##_parse, .infer = qfi_##stem##_infer, .cpu = qfi_cpu_##cpu_fn
/* cpu_native bits */
#define NATIVE_INT8 (1u << QF_PREC_INT8)
#define NATIVE_FP16 (1u << QF_PREC_FP16)

const qfi_op_def qfi_ops[QF_OP_COUNT] = {
    [QF_OP_CONV]                = {OP(conv, conv), .cpu_scratch = qfi_cpu_conv_scratch, .flops = qfi_conv_flops,
                                   .cpu_native = NATIVE_INT8},
    [QF_OP_CONV_TRANSPOSE]      = {OP(conv_transpose, conv_transpose),
                                   .cpu_scratch = qfi_cpu_conv_transpose_scratch, .flops = qfi_conv_transpose_flops},
    [QF_OP_GEMM]                = {OP(gemm, gemm), .cpu_scratch = qfi_cpu_gemm_scratch, .flops = qfi_gemm_flops,
                                   .cpu_native = NATIVE_INT8},
    [QF_OP_MATMUL]              = {OP(matmul, matmul), .cpu_scratch = qfi_cpu_gemm_scratch,
                                   .flops = qfi_matmul_flops, .cpu_native = NATIVE_INT8},
    [QF_OP_ADD]                 = {OP(binary, binary)},
    [QF_OP_SUB]                 = {OP(binary, binary)},
    [QF_OP_MUL]                 = {OP(binary, binary)},
    [QF_OP_DIV]                 = {OP(binary, binary)},
    [QF_OP_RELU]                = {OP(unary, unary)},
    [QF_OP_LEAKY_RELU]          = {OP(unary, unary)},
    [QF_OP_PRELU]               = {OP(binary, binary)},
    [QF_OP_CLIP]                = {OP(unary, unary)},
    [QF_OP_SIGMOID]             = {OP(unary, unary)},
    [QF_OP_HARD_SIGMOID]        = {OP(unary, unary)},
    [QF_OP_HARD_SWISH]          = {OP(unary, unary)},
    [QF_OP_TANH]                = {OP(unary, unary)},
    [QF_OP_SOFTMAX]             = {OP(softmax, softmax)},
    [QF_OP_MAX_POOL]            = {OP(pool, pool)},
    [QF_OP_AVERAGE_POOL]        = {OP(pool, pool)},
    [QF_OP_GLOBAL_AVERAGE_POOL] = {OP(global_pool, global_pool)},
    [QF_OP_GLOBAL_MAX_POOL]     = {OP(global_pool, global_pool)},
    [QF_OP_BATCH_NORM]          = {OP(batchnorm, batchnorm)},
    [QF_OP_CONCAT]              = {OP(concat, concat)},
    [QF_OP_RESHAPE]             = {OP(reshape, copy)},
    [QF_OP_FLATTEN]             = {OP(flatten, copy)},
    [QF_OP_TRANSPOSE]           = {OP(transpose, transpose)},
    [QF_OP_SQUEEZE]             = {OP(squeeze, copy)},
    [QF_OP_UNSQUEEZE]           = {OP(squeeze, copy)},
    [QF_OP_PAD]                 = {OP(pad, pad)},
    [QF_OP_RESIZE]              = {OP(resize, resize)},
    [QF_OP_UPSAMPLE]            = {OP(resize, resize)},
    [QF_OP_SLICE]               = {OP(slice, slice)},
    [QF_OP_SPLIT]               = {OP(split, split)},
    [QF_OP_REDUCE_MEAN]         = {OP(reduce_mean, reduce_mean)},
    [QF_OP_SHAPE]               = {OP(shape, shape)},
    [QF_OP_GATHER]              = {OP(gather, gather)},
    [QF_OP_CAST]                = {OP(cast, cast), .cpu_native = NATIVE_INT8 | NATIVE_FP16},
    [QF_OP_IDENTITY]            = {OP(identity, copy)},
    [QF_OP_DROPOUT]             = {OP(identity, copy)},
    [QF_OP_CONSTANT]            = {OP(constant, constant)},
    /* conversions handle their dtypes themselves, whatever region they sit in */
    [QF_OP_QUANTIZE_LINEAR]     = {OP(qdq, qdq), .cpu_native = NATIVE_INT8 | NATIVE_FP16},
    [QF_OP_DEQUANTIZE_LINEAR]   = {OP(qdq, qdq), .cpu_native = NATIVE_INT8 | NATIVE_FP16},
};

static const char *const op_names[] = {
#define QF_OP(id, onnx_name) [QF_OP_##id] = onnx_name,
#include "qforge/ops.def"
#undef QF_OP
};
_Static_assert(QF_ARRAY_LEN(op_names) == QF_OP_COUNT, "ops.def and qf_op disagree");

const char *qf_op_name(qf_op op)
{
    return (unsigned)op < QF_OP_COUNT ? op_names[op] : "?";
}

bool qf_op_lookup(const char *onnx_name, qf_op *out)
{
    for (int i = 0; i < QF_OP_COUNT; i++) {
        if (strcmp(op_names[i], onnx_name) == 0) {
            *out = (qf_op)i;
            return true;
        }
    }
    return false;
}

