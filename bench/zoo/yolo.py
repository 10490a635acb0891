"""A YOLOv8n-style detector for the zoo (issue 13 item 4), written here from
the architecture's description because the GPU machine cannot install
Ultralytics: the blocks of yolov8n.yaml (width 0.25, depth 0.33, channels at
most 1024) with Ultralytics' layer choices -- Conv = Conv2d without bias +
BatchNorm2d (eps 1e-3) + SiLU; C2f; SPPF; the PAN neck with nearest 2x
upsampling and concatenation; the decoupled Detect head with DFL -- and its
export-time decoding: boxes in pixels (xywh) from the distribution over 16
bins, class scores through a sigmoid.

Ultralytics exports one tensor [N, 84, 8400] (4 box coordinates in pixels
beside 80 sigmoid scores). Their ranges differ by four orders of magnitude,
so one SQNR over that tensor would be the boxes' alone; this model returns
two outputs instead, `boxes` [N, 4, 8400] and `scores` [N, 80, 8400], and
the zoo reports the SQNR of each."""
import math

import torch
from torch import nn

REG_MAX = 16
NC = 80
STRIDES = (8, 16, 32)


class Conv(nn.Module):
    """Conv2d (no bias, 'same' padding) + BatchNorm2d + SiLU."""

    def __init__(self, c1, c2, k=1, s=1):
        super().__init__()
        self.conv = nn.Conv2d(c1, c2, k, s, k // 2, bias=False)
        self.bn = nn.BatchNorm2d(c2, eps=1e-3, momentum=0.03)
        self.act = nn.SiLU()

    def forward(self, x):
        return self.act(self.bn(self.conv(x)))


class Bottleneck(nn.Module):
    """Two 3x3 Convs at the same width, with the input added where `shortcut`."""

    def __init__(self, c, shortcut):
        super().__init__()
        self.cv1 = Conv(c, c, 3)
        self.cv2 = Conv(c, c, 3)
        self.add = shortcut

    def forward(self, x):
        y = self.cv2(self.cv1(x))
        return x + y if self.add else y


class C2f(nn.Module):
    """1x1 Conv to twice the hidden width, split in halves, n Bottlenecks
    chained on the second half, every piece concatenated, 1x1 Conv out."""

    def __init__(self, c1, c2, n, shortcut):
        super().__init__()
        self.c = c2 // 2
        self.cv1 = Conv(c1, 2 * self.c, 1)
        self.cv2 = Conv((2 + n) * self.c, c2, 1)
        self.m = nn.ModuleList(Bottleneck(self.c, shortcut) for _ in range(n))

    def forward(self, x):
        y = list(self.cv1(x).chunk(2, 1))
        for m in self.m:
            y.append(m(y[-1]))
        return self.cv2(torch.cat(y, 1))


class SPPF(nn.Module):
    """1x1 Conv to half width, three 5x5 stride-1 max pools in a row, the four
    concatenated, 1x1 Conv out."""

    def __init__(self, c1, c2, k=5):
        super().__init__()
        c = c1 // 2
        self.cv1 = Conv(c1, c, 1)
        self.cv2 = Conv(4 * c, c2, 1)
        self.m = nn.MaxPool2d(k, 1, k // 2)

    def forward(self, x):
        y = [self.cv1(x)]
        for _ in range(3):
            y.append(self.m(y[-1]))
        return self.cv2(torch.cat(y, 1))


class DFL(nn.Module):
    """Distribution focal loss decoding: softmax over REG_MAX bins per side,
    then their expectation as a fixed 1x1 conv with weights 0..REG_MAX-1."""

    def __init__(self, c1=REG_MAX):
        super().__init__()
        self.c1 = c1
        self.conv = nn.Conv2d(c1, 1, 1, bias=False).requires_grad_(False)
        self.conv.weight.data[:] = torch.arange(c1, dtype=torch.float).view(1, c1, 1, 1)

    def forward(self, x):
        b, _, a = x.shape
        return self.conv(x.view(b, 4, self.c1, a).transpose(2, 1).softmax(1)).view(b, 4, a)


def make_anchors(feats, strides, offset=0.5):
    """Cell centres (x, y) of every level in grid units, and each one's stride."""
    points, stride_of = [], []
    for f, s in zip(feats, strides):
        h, w = f.shape[2:]
        sx = torch.arange(w, dtype=f.dtype, device=f.device) + offset
        sy = torch.arange(h, dtype=f.dtype, device=f.device) + offset
        sy, sx = torch.meshgrid(sy, sx, indexing="ij")
        points.append(torch.stack((sx, sy), -1).view(-1, 2))
        stride_of.append(torch.full((h * w, 1), s, dtype=f.dtype, device=f.device))
    return torch.cat(points), torch.cat(stride_of)


def dist2bbox(distance, anchors, dim=1):
    """Distances (left, top, right, bottom) from the anchors to boxes (cx, cy, w, h)."""
    lt, rb = distance.chunk(2, dim)
    x1y1 = anchors - lt
    x2y2 = anchors + rb
    return torch.cat(((x1y1 + x2y2) / 2, x2y2 - x1y1), dim)


class Detect(nn.Module):
    """Per level a box branch (two 3x3 Convs, 1x1 Conv2d to 4 * REG_MAX) and a
    class branch (two 3x3 Convs, 1x1 Conv2d to NC); decoded as at export."""

    def __init__(self, ch, nc=NC):
        super().__init__()
        self.nc = nc
        self.no = nc + 4 * REG_MAX
        c2, c3 = max(16, ch[0] // 4, 4 * REG_MAX), max(ch[0], min(nc, 100))
        self.cv2 = nn.ModuleList(nn.Sequential(Conv(c, c2, 3), Conv(c2, c2, 3), nn.Conv2d(c2, 4 * REG_MAX, 1))
                                 for c in ch)
        self.cv3 = nn.ModuleList(nn.Sequential(Conv(c, c3, 3), Conv(c3, c3, 3), nn.Conv2d(c3, nc, 1)) for c in ch)
        self.dfl = DFL()
        # the initial biases of Ultralytics' detection model: box logits 1, class
        # logits at a prior of 5 objects per 640x640 image
        for a, b, s in zip(self.cv2, self.cv3, STRIDES):
            a[-1].bias.data[:] = 1.0
            b[-1].bias.data[:nc] = math.log(5 / nc / (640 / s) ** 2)

    def forward(self, xs):
        xs = [torch.cat((a(x), b(x)), 1) for x, a, b in zip(xs, self.cv2, self.cv3)]
        n = xs[0].shape[0]
        x = torch.cat([xi.view(n, self.no, -1) for xi in xs], 2)
        anchors, strides = (t.transpose(0, 1) for t in make_anchors(xs, STRIDES))
        box, cls = x.split((4 * REG_MAX, self.nc), 1)
        boxes = dist2bbox(self.dfl(box), anchors.unsqueeze(0), dim=1) * strides
        return boxes, cls.sigmoid()


def scaled(c, width=0.25, max_channels=1024):
    """A yolov8.yaml channel count at the model's width (multiples of 8)."""
    return int(math.ceil(min(c, max_channels) * width / 8) * 8)


def repeats(n, depth=0.33):
    return max(round(n * depth), 1) if n > 1 else n


class YOLOv8(nn.Module):
    """yolov8.yaml's backbone and head at a width and depth (n: 0.25, 0.33)."""

    def __init__(self, width=0.25, depth=0.33, nc=NC):
        super().__init__()
        c = lambda x: scaled(x, width)
        d = lambda x: repeats(x, depth)
        c1, c2, c3, c4, c5 = c(64), c(128), c(256), c(512), c(1024)
        # backbone: P1/2 .. P5/32
        self.b0 = Conv(3, c1, 3, 2)
        self.b1 = Conv(c1, c2, 3, 2)
        self.b2 = C2f(c2, c2, d(3), True)
        self.b3 = Conv(c2, c3, 3, 2)
        self.b4 = C2f(c3, c3, d(6), True)  # P3
        self.b5 = Conv(c3, c4, 3, 2)
        self.b6 = C2f(c4, c4, d(6), True)  # P4
        self.b7 = Conv(c4, c5, 3, 2)
        self.b8 = C2f(c5, c5, d(3), True)
        self.b9 = SPPF(c5, c5, 5)  # P5
        # PAN neck: top-down, then bottom-up
        self.up = nn.Upsample(scale_factor=2, mode="nearest")
        self.h12 = C2f(c5 + c4, c4, d(3), False)
        self.h15 = C2f(c4 + c3, c3, d(3), False)  # P3 out
        self.h16 = Conv(c3, c3, 3, 2)
        self.h18 = C2f(c3 + c4, c4, d(3), False)  # P4 out
        self.h19 = Conv(c4, c4, 3, 2)
        self.h21 = C2f(c4 + c5, c5, d(3), False)  # P5 out
        self.detect = Detect((c3, c4, c5), nc)

    def forward(self, x):
        x = self.b2(self.b1(self.b0(x)))
        p3 = self.b4(self.b3(x))
        p4 = self.b6(self.b5(p3))
        p5 = self.b9(self.b8(self.b7(p4)))
        h12 = self.h12(torch.cat((self.up(p5), p4), 1))
        h15 = self.h15(torch.cat((self.up(h12), p3), 1))
        h18 = self.h18(torch.cat((self.h16(h15), h12), 1))
        h21 = self.h21(torch.cat((self.h19(h18), p5), 1))
        return self.detect([h15, h18, h21])


def yolov8n():
    return YOLOv8(0.25, 0.33)


if __name__ == "__main__":
    m = yolov8n().eval()
    n_par = sum(p.numel() for p in m.parameters())
    with torch.no_grad():
        b, s = m(torch.rand(2, 3, 640, 640))
    print("parameters %d (Ultralytics' summary of yolov8n.yaml: 3,157,200); boxes %s, scores %s" % (n_par, tuple(b.shape), tuple(s.shape)))
