"""A detector-style head exported by PyTorch (Conv, Resize, TopK, then
torchvision's NMS as NonMaxSuppression, with gathers on the kept boxes: an
output whose length depends on the data) against onnxruntime, on fresh
random images of several sizes through one engine."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import twinfer

torch = pytest.importorskip("torch")
torchvision = pytest.importorskip("torchvision")


class DetectorHead(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 8, 3, stride=4, padding=1)
        self.score = torch.nn.Conv2d(8, 1, 1)
        self.box = torch.nn.Conv2d(8, 4, 1)

    def forward(self, x):
        f = torch.relu(self.conv(x))
        f = torch.nn.functional.interpolate(f, scale_factor=2.0, mode="nearest")
        s = torch.sigmoid(self.score(f)).flatten(1)[0]
        b = self.box(f).flatten(2)[0].t()
        xy = b[:, :2] * 10
        boxes = torch.cat([xy, xy + b[:, 2:].exp() * 4 + 1], dim=1)
        top, idx = s.topk(64)
        keep = torchvision.ops.nms(boxes[idx], top, 0.4)
        return boxes[idx][keep], top[keep]


@pytest.fixture(scope="module")
def detector(tmp_path_factory):
    torch.manual_seed(0)
    path = tmp_path_factory.mktemp("det") / "detector.onnx"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(DetectorHead().eval(), (torch.randn(1, 3, 61, 83),), str(path), dynamo=False,
                          opset_version=17, input_names=["image"], output_names=["boxes", "scores"],
                          dynamic_axes={"image": {2: "h", 3: "w"}})
    return path


def test_detector_head_matches_onnxruntime(detector, rng, device):
    import onnxruntime as ort

    engine = twinfer.load(detector, device=device)
    sess = ort.InferenceSession(str(detector), providers=["CPUExecutionProvider"])
    for h, w in [(61, 83), (47, 129), (61, 83)]:
        image = rng.standard_normal((1, 3, h, w)).astype(np.float32)
        got = engine.run({"image": image})
        boxes, scores = sess.run(None, {"image": image})
        assert got["boxes"].shape == boxes.shape and boxes.shape[0] > 0
        np.testing.assert_allclose(got["scores"].numpy(), scores, rtol=1e-4, atol=1e-5)
        np.testing.assert_allclose(got["boxes"].numpy(), boxes, rtol=1e-4, atol=1e-4)
