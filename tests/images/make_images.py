#!/usr/bin/env python3
"""Writes the image fixtures of tests/test_datasets.c under tests/images/bad/.

Run once by a developer (needs Pillow); the files are committed, so neither the
build nor the tests need Python. Each file is tiny. Expected outcomes (checked
by test_datasets.c):
  decode fine:  one.png (1x1), rgb16.png (16-bit RGB), palette.png,
                gray.jpg (grayscale JPEG), gray_alpha.png, cmyk.jpg (Adobe CMYK)
  skipped:      empty.png (0 bytes), truncated.png, truncated.jpg, corrupt.jpg
                (garbage after SOI), huge.png (IHDR says 20000x20000),
                huge.jpg (SOF says 20000x20000), notimage.jpg (text),
                maxval.pgm (maxval 70000), bitdepth.png (IHDR bit depth 3)
"""
import io
import os
import struct
import zlib

from PIL import Image

HERE = os.path.dirname(os.path.abspath(__file__))
BAD = os.path.join(HERE, "bad")


def put(name, data):
    with open(os.path.join(BAD, name), "wb") as f:
        f.write(data)


def png_chunk(kind, body):
    return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body) & 0xFFFFFFFF)


def png_bytes(im, **kw):
    b = io.BytesIO()
    im.save(b, "PNG", **kw)
    return b.getvalue()


def jpeg_bytes(im, **kw):
    b = io.BytesIO()
    im.save(b, "JPEG", **kw)
    return b.getvalue()


def pattern(w, h):
    # deterministic busy content, so the files are the same on every run
    return Image.frombytes("RGB", (w, h), bytes((i * 7919 + (i // 97) * 31) % 251 for i in range(w * h * 3)))


def main():
    os.makedirs(BAD, exist_ok=True)
    put("one.png", png_bytes(Image.new("RGB", (1, 1), (10, 200, 30))))

    # 16-bit RGB: 2x1, samples chosen so rounding v/257 is checkable.
    raw = b"".join(struct.pack(">HHH", *px) for px in [(65535, 257 * 100 + 128, 0), (1000, 30000, 50000)])
    ihdr = struct.pack(">IIBBBBB", 2, 1, 16, 2, 0, 0, 0)
    put("rgb16.png", b"\x89PNG\r\n\x1a\n" + png_chunk(b"IHDR", ihdr) +
        png_chunk(b"IDAT", zlib.compress(b"\x00" + raw)) + png_chunk(b"IEND", b""))

    pal = Image.new("P", (3, 1))
    pal.putpalette([255, 0, 0, 0, 255, 0, 0, 0, 255] + [0] * (253 * 3))
    pal.putdata([2, 1, 0])
    put("palette.png", png_bytes(pal))

    put("gray.jpg", jpeg_bytes(Image.new("L", (8, 8), 120), quality=95))
    put("gray_alpha.png", png_bytes(Image.new("LA", (2, 2), (77, 9))))
    put("cmyk.jpg", jpeg_bytes(Image.new("RGB", (8, 8), (255, 0, 0)).convert("CMYK"), quality=95))

    put("empty.png", b"")
    good_png = png_bytes(pattern(32, 32))
    put("truncated.png", good_png[: len(good_png) // 2])
    good_jpg = jpeg_bytes(pattern(64, 64), quality=90)
    put("truncated.jpg", good_jpg[: len(good_jpg) // 2])
    put("corrupt.jpg", good_jpg[:2] + bytes((i * 37) & 0xFF for i in range(300)))

    ihdr = struct.pack(">IIBBBBB", 20000, 20000, 8, 2, 0, 0, 0)
    put("huge.png", b"\x89PNG\r\n\x1a\n" + png_chunk(b"IHDR", ihdr) +
        png_chunk(b"IDAT", zlib.compress(b"\x00" * 64)) + png_chunk(b"IEND", b""))
    # huge.jpg: a real 8x8 JPEG whose SOF0 size fields say 20000x20000.
    j = bytearray(jpeg_bytes(Image.new("RGB", (8, 8), (1, 2, 3))))
    sof = j.index(b"\xff\xc0")
    j[sof + 5:sof + 9] = struct.pack(">HH", 20000, 20000)
    put("huge.jpg", bytes(j))

    put("notimage.jpg", b"this is a text file with an image extension\n")
    put("maxval.pgm", b"P5\n2 1\n70000\n" + b"\x00\x01\x00\x02")
    ihdr = struct.pack(">IIBBBBB", 2, 2, 3, 0, 0, 0, 0)
    put("bitdepth.png", b"\x89PNG\r\n\x1a\n" + png_chunk(b"IHDR", ihdr) +
        png_chunk(b"IDAT", zlib.compress(b"\x00\x00\x00\x00")) + png_chunk(b"IEND", b""))


if __name__ == "__main__":
    main()
