/* libFuzzer harness: an ONNX model through qf_onnx_load and qf_graph_prepare
 * (sorting, shape inference, folding), then, when the prepared graph is small,
 * one run of the CPU engine on zeroed inputs. The folder holds weights.bin, so
 * external-data tensors can resolve (seeds: tests/bad, dictionary: onnx.dict). */
#include "fuzz_util.h"

static char model[600];

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    char path[600];
    uint8_t weights[4096];
    for (size_t i = 0; i < sizeof weights; i++) weights[i] = (uint8_t)(i * 37 + 11);
    fz_write(fz_path(path, sizeof path, "weights.bin"), weights, sizeof weights);
    fz_path(model, sizeof model, "model.onnx");
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fz_write(model, data, size);
    qf_graph *g = NULL;
    qf_status st = qf_onnx_load(model, &g);
    fz_check_error(st, "model.onnx");
    if (st != QF_OK) return 0;
    // an odd size prepares at batch 2: the Reshape-to-batch fix and rebatched shapes
    st = qf_graph_prepare(g, 1 + (int)(size & 1));
    fz_check_error(st, "model.onnx");
    if (st == QF_OK && fz_graph_is_small(g)) fz_run_cpu(g, "model.onnx");
    qf_graph_free(g);
    return 0;
}
