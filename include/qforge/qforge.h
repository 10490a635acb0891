/* libqforge: post-training INT8/FP16 quantization of ONNX image models. */
#ifndef QFORGE_H
#define QFORGE_H

#include "qforge/status.h"
#include "qforge/dtype.h"
#include "qforge/graph.h"
#include "qforge/engine.h"
#include "qforge/datasets.h"
#include "qforge/calib.h"
#include "qforge/quant.h"
#include "qforge/model.h"

const char *qf_version(void);

#endif
