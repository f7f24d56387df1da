"""Detection task pieces: the --model rule, box-aware transforms, a detector's train step."""

import pytest
import torch

from scaleprobe.config.sections import TaskConfig
from scaleprobe.core.errors import ConfigError
from scaleprobe.tasks import build_task
from scaleprobe.tasks.detection import BoxTransform, build_detector, detector_name, detectors


def test_model_rule():
    assert detector_name("digits_cnn") == "ssdlite320_mobilenet_v3_large"
    assert detector_name("fcos_resnet50_fpn") == "fcos_resnet50_fpn"
    for name in ("ssdlite320_mobilenet_v3_large", "fasterrcnn_mobilenet_v3_large_fpn",
                 "retinanet_resnet50_fpn", "fcos_resnet50_fpn"):
        assert name in detectors()
    assert not any(n.startswith("maskrcnn") for n in detectors())
    with pytest.raises(ConfigError, match="needs a detection model, not 'resnet18'"):
        detector_name("resnet18")
    with pytest.raises(ConfigError, match="did you mean"):
        detector_name("fasterrcnn_mobilenet")


def _sample(w=200, h=100):
    img = torch.randint(0, 256, (3, h, w), dtype=torch.uint8)
    target = {"boxes": torch.tensor([[0.0, 0.0, 100.0, 50.0], [150.0, 50.0, 200.0, 100.0]]),
              "labels": torch.tensor([3, 7]), "difficult": torch.tensor([False, True])}
    return img, target


def test_light_transform_scales_boxes_with_the_image():
    img, target = BoxTransform("light", 50)(*_sample())
    assert img.dtype == torch.float32 and img.shape == (3, 50, 50)
    assert 0.0 <= float(img.min()) and float(img.max()) <= 1.0
    assert type(target["boxes"]) is torch.Tensor
    torch.testing.assert_close(target["boxes"], torch.tensor([[0, 0, 25, 25], [37.5, 25, 50, 50]]))
    assert target["labels"].tolist() == [3, 7] and target["difficult"].tolist() == [False, True]


def test_heavy_transform_keeps_boxes_inside_and_lists_aligned():
    torch.manual_seed(0)
    for _ in range(20):
        img, t = BoxTransform("heavy", 64)(*_sample())
        assert img.shape == (3, 64, 64)
        b = t["boxes"]
        assert len(b) == len(t["labels"]) == len(t["difficult"])
        assert bool(((b >= 0) & (b <= 64)).all())
        assert bool((b[:, 2] > b[:, 0]).all() and (b[:, 3] > b[:, 1]).all())


def test_eval_transform_is_light():
    task = build_task(TaskConfig(task="detection"), 21)
    joint, image_tf = task.transforms("eval", 32)
    assert image_tf is None and joint.kind == "light"


def test_detector_trains_and_predicts_at_a_small_size():
    task = build_task(TaskConfig(task="detection"), 21)
    model = task.make_model("digits_cnn", 21, 96)
    pairs = [BoxTransform("light", 96)(*_sample()) for _ in range(2)]
    x, y = [p[0] for p in pairs], [p[1] for p in pairs]
    y[1] = {"boxes": torch.zeros(0, 4), "labels": torch.zeros(0, dtype=torch.long)}  # no object
    loss = task.forward_loss(model, *task.to_device(x, y, torch.device("cpu"), False))
    assert loss.ndim == 0 and torch.isfinite(loss)
    loss.backward()
    model.eval()
    with torch.no_grad():
        out = model(x)
    assert len(out) == 2 and set(out[0]) >= {"boxes", "scores", "labels"}


def test_detector_is_told_the_input_size():
    m = build_detector("fasterrcnn_mobilenet_v3_large_fpn", 21, 128)
    assert m.transform.min_size == (128,) and m.transform.max_size == 128
    assert m.roi_heads.box_predictor.cls_score.out_features == 21
