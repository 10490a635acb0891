#!/usr/bin/python3
# Trains qforge's bundled example classifier (a small residual CNN) on Fashion-MNIST
# and exports it to ONNX opset 13 with its BatchNormalization nodes kept, so that the
# example also exercises qforge's own BN folding. Not part of the product.
#
#   /usr/bin/python3 examples/fashion-mnist/train.py \
#       --data /usr/share/datasets/fashion-mnist --out examples/fashion-mnist
#
# Needs PyTorch (Debian: python3-torch) and numpy; runs on the CPU.
import argparse
import gzip
import os
import struct
import sys
import time
import warnings

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

CLASSES = ["T-shirt/top", "Trouser", "Pullover", "Dress", "Coat",
           "Sandal", "Shirt", "Sneaker", "Bag", "Ankle boot"]


def read_idx(path, magic, ndim):
    """Reads a gzip'd idx file; checks the magic and that the payload size matches."""
    with gzip.open(path, "rb") as f:
        data = f.read()
    if len(data) < 4 + 4 * ndim:
        sys.exit(f"{path}: truncated idx header")
    got, = struct.unpack(">I", data[:4])
    if got != magic:
        sys.exit(f"{path}: bad magic 0x{got:08x}, expected 0x{magic:08x}")
    dims = struct.unpack(">" + "I" * ndim, data[4:4 + 4 * ndim])
    body = np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * ndim)
    if body.size != int(np.prod(dims)):
        sys.exit(f"{path}: {body.size} data bytes, header says {dims}")
    return body.reshape(dims)


def load_split(data_dir, split):
    x = read_idx(os.path.join(data_dir, f"{split}-images-idx3-ubyte.gz"), 0x803, 3)
    y = read_idx(os.path.join(data_dir, f"{split}-labels-idx1-ubyte.gz"), 0x801, 1)
    if x.shape[0] != y.shape[0] or x.shape[1:] != (28, 28):
        sys.exit(f"{data_dir}: {split} images {x.shape} vs labels {y.shape}")
    return x, y


class ConvBN(nn.Sequential):
    def __init__(self, cin, cout, stride=1, relu=True):
        layers = [nn.Conv2d(cin, cout, 3, stride, 1, bias=False), nn.BatchNorm2d(cout)]
        if relu:
            layers.append(nn.ReLU(inplace=True))
        super().__init__(*layers)


class ResBlock(nn.Module):
    """Two 3x3 conv+BN with an identity shortcut (exported as an ONNX Add)."""

    def __init__(self, c):
        super().__init__()
        self.a = ConvBN(c, c)
        self.b = ConvBN(c, c, relu=False)

    def forward(self, x):
        return F.relu(x + self.b(self.a(x)))


class FashionNet(nn.Module):
    def __init__(self, c1=32, c2=64, ncls=10):
        super().__init__()
        self.stem = ConvBN(1, c1)                 # (N,32,28,28)
        self.pool = nn.MaxPool2d(2)               # (N,32,14,14)
        self.res1 = ResBlock(c1)                  # (N,32,14,14)
        self.down = ConvBN(c1, c2, stride=2)      # (N,64,7,7)
        self.res2 = ResBlock(c2)                  # (N,64,7,7)
        self.gap = nn.AdaptiveAvgPool2d(1)        # (N,64,1,1)  -> GlobalAveragePool
        self.fc = nn.Linear(c2, ncls)             # (N,10)       -> Gemm

    def forward(self, x):
        x = self.res1(self.pool(self.stem(x)))
        x = self.res2(self.down(x))
        return self.fc(torch.flatten(self.gap(x), 1))


def evaluate(model, x, y, batch=1000):
    """Top-1 accuracy and the per-image predictions, model in eval mode."""
    model.eval()
    preds = []
    with torch.no_grad():
        for i in range(0, x.shape[0], batch):
            preds.append(model(x[i:i + batch]).argmax(1))
    preds = torch.cat(preds)
    return (preds == y).float().mean().item(), preds


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--data", default="/usr/share/datasets/fashion-mnist")
    ap.add_argument("--out", default=os.path.dirname(os.path.abspath(__file__)))
    ap.add_argument("--epochs", type=int, default=10)
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--lr", type=float, default=0.1)
    ap.add_argument("--seed", type=int, default=20240601)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--save-preds", metavar="FILE.npy",
                    help="also save the torch test-set predictions (for comparing runtimes)")
    args = ap.parse_args()

    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    np.random.seed(args.seed)
    torch.use_deterministic_algorithms(True)

    xtr, ytr = load_split(args.data, "train")
    xte, yte = load_split(args.data, "t10k")
    # Normalisation constants from the training set, rounded to 4 digits: these exact
    # numbers are what a user passes to qforge (--gray --mean M --std S).
    px = xtr.astype(np.float64) / 255.0
    mean_exact, std_exact = px.mean(), px.std()
    mean, std = round(float(mean_exact), 4), round(float(std_exact), 4)
    print(f"train pixels: mean {mean_exact:.6f} std {std_exact:.6f} -> using {mean} / {std}")

    def prep(x):  # uint8 (N,28,28) -> float (N,1,28,28)
        t = torch.from_numpy(x.astype(np.float32) / 255.0).unsqueeze(1)
        return (t - mean) / std

    xtr_t, ytr_t = prep(xtr), torch.from_numpy(ytr.astype(np.int64))
    xte_t, yte_t = prep(xte), torch.from_numpy(yte.astype(np.int64))

    model = FashionNet()
    nparams = sum(p.numel() for p in model.parameters())
    print(f"parameters: {nparams}")

    steps_per_epoch = (xtr_t.shape[0] + args.batch - 1) // args.batch
    opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9,
                          nesterov=True, weight_decay=5e-4)
    sched = torch.optim.lr_scheduler.OneCycleLR(
        opt, max_lr=args.lr, epochs=args.epochs, steps_per_epoch=steps_per_epoch)
    gen = torch.Generator().manual_seed(args.seed)

    t0 = time.time()
    for epoch in range(args.epochs):
        model.train()
        perm = torch.randperm(xtr_t.shape[0], generator=gen)
        loss_sum, correct = 0.0, 0
        for i in range(0, perm.numel(), args.batch):
            idx = perm[i:i + args.batch]
            xb, yb = xtr_t[idx], ytr_t[idx]
            # Random horizontal flip, the only augmentation: cheap and label-preserving.
            flip = torch.rand(xb.shape[0], generator=gen) < 0.5
            xb = torch.where(flip[:, None, None, None], xb.flip(3), xb)
            out = model(xb)
            loss = F.cross_entropy(out, yb)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            sched.step()
            loss_sum += loss.item() * xb.shape[0]
            correct += (out.argmax(1) == yb).sum().item()
        acc, _ = evaluate(model, xte_t, yte_t)
        n = xtr_t.shape[0]
        print(f"epoch {epoch + 1}/{args.epochs}: train loss {loss_sum / n:.4f} "
              f"train acc {correct / n:.4f} test acc {acc:.4f} ({time.time() - t0:.0f} s)",
              flush=True)

    acc, preds = evaluate(model, xte_t, yte_t)
    print(f"final FP32 test accuracy (torch): {acc:.4f} "
          f"({int((preds == yte_t).sum())}/{yte_t.numel()})")

    model.eval()
    onnx_path = os.path.join(args.out, "model.onnx")
    # PRESERVE (with the model in eval mode) keeps BatchNormalization nodes in
    # inference form; EVAL would let the exporter fold them into the convs. Its warning
    # about constant folding concerns models left in training mode, not this one.
    warnings.filterwarnings("ignore", message="It is recommended that constant folding")
    torch.onnx.export(model, torch.zeros(1, 1, 28, 28), onnx_path, opset_version=13,
                      input_names=["input"], output_names=["logits"],
                      dynamic_axes={"input": {0: "batch"}, "logits": {0: "batch"}},
                      training=torch.onnx.TrainingMode.PRESERVE,
                      do_constant_folding=True)
    with open(os.path.join(args.out, "classes.txt"), "w") as f:
        f.write("\n".join(CLASSES) + "\n")
    if args.save_preds:
        np.save(args.save_preds, preds.numpy().astype(np.uint8))
    print(f"wrote {onnx_path} ({os.path.getsize(onnx_path)} bytes), classes.txt; "
          f"mean {mean} std {std}")


if __name__ == "__main__":
    main()
