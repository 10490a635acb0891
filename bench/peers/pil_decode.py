#!/usr/bin/env python3
"""Peer for bench/bench_decode: the torchvision-style PIL pipeline (decode, RGB,
Resize(256) bilinear, CenterCrop(224), x/255, mean/std, CHW float32) on one
thread, in images/s, median of several passes over the same folder.
Usage: python3 bench/peers/pil_decode.py [FOLDER] [PASSES]   (needs Pillow, numpy)
"""
import os
import statistics
import sys
import time

import numpy as np
from PIL import Image

MEAN = np.array([0.485, 0.456, 0.406], np.float32).reshape(3, 1, 1)
STD = np.array([0.229, 0.224, 0.225], np.float32).reshape(3, 1, 1)


def preprocess(path):
    im = Image.open(path).convert("RGB")
    w, h = im.size
    nw, nh = (256, int(256 * h / w)) if w <= h else (int(256 * w / h), 256)
    im = im.resize((nw, nh), Image.BILINEAR)
    top, left = int(round((nh - 224) / 2.0)), int(round((nw - 224) / 2.0))
    x = np.asarray(im.crop((left, top, left + 224, top + 224)), np.float32).transpose(2, 0, 1) / 255.0
    return (x - MEAN) / STD


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    root = sys.argv[1] if len(sys.argv) > 1 else os.path.join(here, "../../../shared/data/imagenet/images")
    passes = int(sys.argv[2]) if len(sys.argv) > 2 else 5
    files = sorted(os.path.join(d, f) for d, _, fs in os.walk(root) for f in fs
                   if f.lower().endswith((".png", ".jpg", ".jpeg", ".ppm", ".pgm", ".pnm")))
    assert preprocess(files[0]).shape == (3, 224, 224)
    rates, cpu_ms = [], []
    for _ in range(passes):
        t0, c0 = time.perf_counter(), time.process_time()
        for f in files:
            preprocess(f)
        rates.append(len(files) / (time.perf_counter() - t0))
        cpu_ms.append((time.process_time() - c0) * 1e3 / len(files))
    print(f"PIL decode + preprocess, 1 thread: {statistics.median(rates):8.1f} images/s "
          f"(median of {passes} passes, {len(files)} images), {statistics.median(cpu_ms):.2f} CPU ms/image")


if __name__ == "__main__":
    main()
