/* The qforge backend for Triton Inference Server (libtriton_qforge.so): the
 * model as configured (its tensors, the batch sizes engines are built for, one
 * graph read from the .qfm at each) and the engines of each model instance. */
#ifndef QFORGE_TRITON_BACKEND_H
#define QFORGE_TRITON_BACKEND_H

#include <stdbool.h>
#include <stdint.h>
/* Triton's headers name their opaque structs without `struct`, as C++ allows;
 * C needs the typedefs first. */
typedef struct TRITONBACKEND_Backend TRITONBACKEND_Backend;
typedef struct TRITONBACKEND_BackendAttribute TRITONBACKEND_BackendAttribute;
typedef struct TRITONBACKEND_Batcher TRITONBACKEND_Batcher;
typedef struct TRITONBACKEND_Input TRITONBACKEND_Input;
typedef struct TRITONBACKEND_MemoryManager TRITONBACKEND_MemoryManager;
typedef struct TRITONBACKEND_Model TRITONBACKEND_Model;
typedef struct TRITONBACKEND_ModelInstance TRITONBACKEND_ModelInstance;
typedef struct TRITONBACKEND_ModelInstanceResponseStatistics TRITONBACKEND_ModelInstanceResponseStatistics;
typedef struct TRITONBACKEND_Output TRITONBACKEND_Output;
typedef struct TRITONBACKEND_Request TRITONBACKEND_Request;
typedef struct TRITONBACKEND_Response TRITONBACKEND_Response;
typedef struct TRITONBACKEND_ResponseFactory TRITONBACKEND_ResponseFactory;
typedef struct TRITONBACKEND_State TRITONBACKEND_State;
typedef struct TRITONSERVER_BufferAttributes TRITONSERVER_BufferAttributes;
typedef struct TRITONSERVER_Error TRITONSERVER_Error;
typedef struct TRITONSERVER_InferenceRequest TRITONSERVER_InferenceRequest;
typedef struct TRITONSERVER_InferenceResponse TRITONSERVER_InferenceResponse;
typedef struct TRITONSERVER_InferenceTrace TRITONSERVER_InferenceTrace;
typedef struct TRITONSERVER_Message TRITONSERVER_Message;
typedef struct TRITONSERVER_Metric TRITONSERVER_Metric;
typedef struct TRITONSERVER_MetricArgs TRITONSERVER_MetricArgs;
typedef struct TRITONSERVER_MetricFamily TRITONSERVER_MetricFamily;
typedef struct TRITONSERVER_Metrics TRITONSERVER_Metrics;
typedef struct TRITONSERVER_Parameter TRITONSERVER_Parameter;
typedef struct TRITONSERVER_ResponseAllocator TRITONSERVER_ResponseAllocator;
typedef struct TRITONSERVER_Server TRITONSERVER_Server;
typedef struct TRITONSERVER_ServerOptions TRITONSERVER_ServerOptions;
#include "triton/core/tritonbackend.h"
#include "qforge/qforge.h"

#define TQ_MAX_TENSORS 64
#define TQ_MAX_SIZES 32

/* An input or output as requests see it. An "item" is one slice along the
 * batch dimension when the model batches, else the whole tensor. */
typedef struct tq_tensor {
    char name[256];
    int index;                  /* position among the graph's inputs or outputs */
    qf_dtype dtype;             /* the model's element type */
    TRITONSERVER_DataType wire; /* the element type requests carry */
    int ndim;                   /* dims of one item as configured */
    int64_t dims[QF_MAX_DIMS];  /* -1: any size (image height, width, channels) */
    size_t item_bytes;          /* one item in the engine's buffer */
    bool image;                 /* raw uint8 (H, W, C) images, preprocessed here */
    qf_preprocess pp;           /* for an image input: what makes it the model's input */
} tq_tensor;

typedef struct tq_model {
    char name[256];
    char path[4096];               /* the .qfm */
    int max_batch;                 /* 0: requests carry the whole shape, one run each */
    int n_inputs, n_outputs;
    tq_tensor inputs[TQ_MAX_TENSORS], outputs[TQ_MAX_TENSORS];
    int threads;                   /* CPU engine threads (0: all cores) */
    int n_sizes;
    int sizes[TQ_MAX_SIZES];       /* items an engine runs, ascending; the last is the most a run takes */
    qf_graph *graphs[TQ_MAX_SIZES]; /* the .qfm read at each size, shared by the instances */
} tq_model;

/* A request of the batch being executed. */
typedef struct tq_job {
    TRITONBACKEND_Request *request;
    TRITONBACKEND_Response *response; /* NULL once sent */
    TRITONSERVER_Error *error;        /* set: the request is answered with it */
    int items;
    int first;                        /* its first item's place in the batch; -1 when it has none */
} tq_job;

typedef struct tq_instance {
    tq_model *m;
    TRITONBACKEND_ModelInstance *ti;
    char name[256];
    bool gpu;                         /* KIND_GPU: inputs may also come in that GPU's memory */
    qf_engine *engines[TQ_MAX_SIZES]; /* one per m->sizes[k] */
    tq_job *jobs;                     /* per-request state, grown as batches need */
    uint32_t jobs_cap;
    uint8_t *scratch;                 /* an image input split over several buffers, gathered */
    size_t scratch_cap;
    struct tq_piece *pieces;          /* a batch's input copies, done from several threads */
    size_t pieces_cap;
} tq_instance;

/* A Triton error with a formatted message. */
TRITONSERVER_Error *qfi_triton_error(TRITONSERVER_Error_Code code, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* The error of a failed qforge call: its status mapped to a Triton code, the
 * thread's qforge message after `what` (e.g. "model 'resnet'"). */
TRITONSERVER_Error *qfi_triton_qf_error(qf_status st, const char *what);
/* Logs through Triton's log (file and line of the caller). */
void qfi_triton_log(TRITONSERVER_LogLevel level, const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
#define TQ_LOG(level, ...) qfi_triton_log(level, __FILE__, __LINE__, __VA_ARGS__)

/* Triton's name of a qforge element type ("FP32"), or NULL where Triton has none. */
TRITONSERVER_DataType qfi_triton_dtype(qf_dtype t);

/* Reads the .qfm and the model's configuration, completes the configuration
 * from the .qfm where Triton allows it, checks one against the other and
 * reads the graph at every engine batch size. default_max_batch is the
 * max_batch_size given to a batching model whose configuration names none. */
TRITONSERVER_Error *qfi_triton_model_load(tq_model *m, TRITONBACKEND_Model *tm, int default_max_batch);
void qfi_triton_model_free(tq_model *m);

#endif
