"""Shared helpers for peer scripts: image loading with the same preprocessing
qforge's presets use (PIL bilinear resize, torchvision-style center crop)."""
import os
import numpy as np
from PIL import Image

PRESETS = {
    "cifar10": dict(resize=0, crop=0, mean=(0.4914, 0.4822, 0.4465), std=(0.2023, 0.1994, 0.2010)),
    "imagenet": dict(resize=256, crop=224, mean=(0.485, 0.456, 0.406), std=(0.229, 0.224, 0.225)),
}
EXTS = (".png", ".jpg", ".jpeg", ".ppm", ".pgm", ".pnm")


def list_images(folder):
    """Image files under folder, recursively, in sorted relative-path order (as qforge scans)."""
    out = []
    for root, _, files in os.walk(folder):
        for f in files:
            if f.lower().endswith(EXTS) and not f.startswith("."):
                out.append(os.path.relpath(os.path.join(root, f), folder))
    return [os.path.join(folder, p) for p in sorted(out)]


def load(path, preset):
    p = PRESETS[preset]
    img = Image.open(path).convert("RGB")
    if p["resize"]:
        w, h = img.size
        s = p["resize"] / min(w, h)
        img = img.resize((max(1, round(w * s)), max(1, round(h * s))), Image.BILINEAR)
    if p["crop"]:
        w, h = img.size
        c = p["crop"]
        left, top = int(round((w - c) / 2.0)), int(round((h - c) / 2.0))
        img = img.crop((left, top, left + c, top + c))
    x = np.asarray(img, dtype=np.float32) / 255.0
    x = (x - np.array(p["mean"], np.float32)) / np.array(p["std"], np.float32)
    return x.transpose(2, 0, 1)[None].astype(np.float32)
