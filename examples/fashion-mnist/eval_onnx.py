#!/usr/bin/env python3
# Checks the exported example model with ONNX Runtime, independently of PyTorch and of
# qforge: top-1 accuracy over the idx test files or over the PNG class folders idx2png
# writes. Reference tooling only (needs numpy, onnxruntime, and Pillow for --png).
#
#   python3 examples/fashion-mnist/eval_onnx.py examples/fashion-mnist/model.onnx \
#       --idx /usr/share/datasets/fashion-mnist      # or --png DIR
import argparse
import gzip
import os
import struct
import sys

import numpy as np
import onnxruntime as ort


def load_idx(data_dir):
    with gzip.open(os.path.join(data_dir, "t10k-images-idx3-ubyte.gz"), "rb") as f:
        raw = f.read()
    magic, n, h, w = struct.unpack(">IIII", raw[:16])
    if magic != 0x803 or len(raw) != 16 + n * h * w:
        sys.exit(f"{data_dir}: bad t10k images file")
    x = np.frombuffer(raw, np.uint8, offset=16).reshape(n, h, w)
    with gzip.open(os.path.join(data_dir, "t10k-labels-idx1-ubyte.gz"), "rb") as f:
        raw = f.read()
    magic, m = struct.unpack(">II", raw[:8])
    if magic != 0x801 or m != n or len(raw) != 8 + n:
        sys.exit(f"{data_dir}: bad t10k labels file")
    return x, np.frombuffer(raw, np.uint8, offset=8), np.arange(n)


def load_png(root):
    """Class = the folder's position in sorted order (qforge's rule); index = file name."""
    from PIL import Image
    xs, ys, idx = [], [], []
    for k, cls in enumerate(sorted(os.listdir(root))):
        for name in sorted(os.listdir(os.path.join(root, cls))):
            im = Image.open(os.path.join(root, cls, name))
            if im.mode != "L":
                sys.exit(f"{root}/{cls}/{name}: mode {im.mode}, expected 8-bit gray")
            xs.append(np.asarray(im, dtype=np.uint8))
            ys.append(k)
            idx.append(int(os.path.splitext(name)[0]))
    return np.stack(xs), np.array(ys), np.array(idx)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    src = ap.add_mutually_exclusive_group(required=True)
    src.add_argument("--idx", metavar="DIR", help="folder with t10k-*-ubyte.gz")
    src.add_argument("--png", metavar="DIR", help="class folders written by idx2png")
    ap.add_argument("--mean", type=float, default=0.286)
    ap.add_argument("--std", type=float, default=0.353)
    ap.add_argument("--compare", metavar="PREDS.npy",
                    help="torch predictions saved by train.py --save-preds")
    args = ap.parse_args()

    x, y, idx = load_idx(args.idx) if args.idx else load_png(args.png)
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 2
    sess = ort.InferenceSession(args.model, opts, providers=["CPUExecutionProvider"])
    preds = []
    for i in range(0, len(x), 500):  # batch of 500 also exercises the dynamic batch dim
        xb = (x[i:i + 500, None].astype(np.float32) / 255.0 - args.mean) / args.std
        preds.append(sess.run(["logits"], {"input": xb.astype(np.float32)})[0].argmax(1))
    preds = np.concatenate(preds)
    correct = int((preds == y).sum())
    print(f"onnxruntime {ort.__version__} on {args.idx or args.png}: {len(y)} images, "
          f"top-1 {correct / len(y):.4f} ({correct}/{len(y)})")
    if args.compare:
        ref = np.load(args.compare)
        diff = int((ref[idx] != preds).sum())
        print(f"predictions differing from {args.compare}: {diff}")


if __name__ == "__main__":
    main()
