#!/usr/bin/env python3
"""Writes tests/images/pil_reference.txt: what a PIL/torchvision pipeline makes
of a few real images of ../shared/data, for test_datasets.c to compare against.

ImageNet images: RGB, Resize(256) with PIL bilinear (shorter side to 256, the
longer int(256 * long / short)), CenterCrop(224) (top = int(round((H-224)/2)),
Python's round), as torchvision does; the values are the uint8 pixels before
x/255 and mean/std. CIFAR-10 images: RGB, no resize. For each image the file
holds the per-channel mean of the uint8 tensor and 256 sampled pixels.

Run once by a developer (needs Pillow and numpy, and the shared data):
    python3 tests/images/make_pil_reference.py ../shared/data > tests/images/pil_reference.txt
"""
import sys

import numpy as np
import PIL
from PIL import Image

IMAGENET = [
    "imagenet/images/calib/n01440764_tench.JPEG",
    "imagenet/images/val/n02356798_fox_squirrel.JPEG",        # 86x108: upscaled
    "imagenet/images/calib/n03825788_nipple.JPEG",            # 106x150
    "imagenet/images/val/n02692877_airship.JPEG",             # grayscale JPEG, 350x156
    "imagenet/images/calib/n03908714_pencil_sharpener.JPEG",  # grayscale JPEG, 333x500
    "imagenet/images/val/n04590129_window_shade.JPEG",        # 900x900
    "imagenet/images/val/n02086240_Shih-Tzu.JPEG",            # 1280x1024, the largest
]
CIFAR = ["cifar10/test/cat/0000.jpg", "cifar10/test/ship/0001.jpg"]
SAMPLES = 256


def imagenet_tensor(path):
    im = Image.open(path).convert("RGB")
    w, h = im.size
    if w <= h:
        nw, nh = 256, int(256 * h / w)
    else:
        nw, nh = int(256 * w / h), 256
    im = im.resize((nw, nh), Image.BILINEAR)
    top, left = int(round((nh - 224) / 2.0)), int(round((nw - 224) / 2.0))
    return np.asarray(im.crop((left, top, left + 224, top + 224)))


def main():
    root = sys.argv[1]
    rng = np.random.default_rng(12345)
    print(f"# PIL {PIL.__version__} reference pixels; written by tests/images/make_pil_reference.py")
    print("# image <path under shared/data> <preset> <h> <w>; mean <r> <g> <b>; px <y> <x> <c> <uint8 value>")
    for rel, preset in [(p, "imagenet") for p in IMAGENET] + [(p, "cifar10") for p in CIFAR]:
        path = f"{root}/{rel}"
        t = imagenet_tensor(path) if preset == "imagenet" else np.asarray(Image.open(path).convert("RGB"))
        h, w, _ = t.shape
        print(f"image {rel} {preset} {h} {w}")
        m = t.reshape(-1, 3).astype(np.float64).mean(axis=0)
        print(f"mean {m[0]:.4f} {m[1]:.4f} {m[2]:.4f}")
        ys, xs, cs = rng.integers(0, h, SAMPLES), rng.integers(0, w, SAMPLES), rng.integers(0, 3, SAMPLES)
        for y, x, c in zip(ys, xs, cs):
            print(f"px {y} {x} {c} {t[y, x, c]}")


if __name__ == "__main__":
    main()
