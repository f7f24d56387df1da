"""Object detection with torchvision's detectors: the sum of the model's losses, mAP@0.5.

Models are built with ``weights=None, weights_backbone=None`` (nothing is ever downloaded) and
told the input size, so they do not resize the images again; the default model
(``digits_cnn``) stands for the task's default, ssdlite. Images stay a list
(``collate_indexed_list``) with a target dict each, and the transforms move the boxes with the
image. docs/TASKS.md ("Detection") gives the models, the ``--model`` rule, the transforms and
``map50`` (COCO's AP at IoU 0.5, difficult objects as crowd regions; the ``detection`` extra).
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from typing import Any

import torch
import torchvision
from torch import nn
from torchvision import tv_tensors
from torchvision.transforms import v2

from scaleprobe.config.extras import require
from scaleprobe.config.runconfig import TASK_DEFAULT_MODELS
from scaleprobe.config.sections import ModelConfig
from scaleprobe.core.errors import ConfigError
from scaleprobe.core.registry import suggest
from scaleprobe.data.loader import collate_indexed_list
from scaleprobe.tasks import TASKS, evaluating

DEFAULT_DETECTOR = TASK_DEFAULT_MODELS["detection"]
TASK_DEFAULT_MODEL = ModelConfig.name  # the run's default model: means "the task's default"
UNSUPPORTED = ("maskrcnn", "keypointrcnn")  # need mask / keypoint targets


def detectors() -> list[str]:
    """torchvision detection models that train on boxes and labels alone."""
    names = torchvision.models.list_models(module=torchvision.models.detection)
    return sorted(n for n in names if not n.startswith(UNSUPPORTED))


def detector_name(name: str) -> str:
    """The detector ``--model name`` stands for (see the module docstring)."""
    known = detectors()
    if name in known:
        return name
    if name == TASK_DEFAULT_MODEL:
        return DEFAULT_DETECTOR
    near = suggest(name, known)
    hint = f"did you mean {', '.join(near)}? " if near else ""
    raise ConfigError(f"--task detection needs a detection model, not '{name}'; {hint}"
                      f"choices: {', '.join(known)}")


def build_detector(name: str, num_classes: int, size: int) -> nn.Module:
    """A randomly initialised detector for ``size x size`` inputs and ``num_classes`` classes
    (background included)."""
    name = detector_name(name)
    kwargs: dict[str, Any] = {"weights": None, "weights_backbone": None,
                              "num_classes": num_classes}
    if not name.startswith("ssd"):
        kwargs.update(min_size=size, max_size=size)
    model = torchvision.models.get_model(name, **kwargs)
    if name.startswith("ssd"):  # SSD's input size is fixed by its builder: set it afterwards
        model.transform.fixed_size = (size, size)
        model.transform.min_size = (size,)
        model.transform.max_size = size
    return model


def _sanitized(sample: Any) -> tuple[torch.Tensor, ...]:
    """What SanitizeBoundingBoxes drops along with each removed box."""
    target = sample[1]
    return tuple(target[k] for k in ("labels", "difficult") if k in target)


class BoxTransform:
    """``(uint8 image 3xHxW, target)`` -> ``(float image in [0, 1], target)``, boxes moved with
    the image. Picklable, so loader worker processes can run it."""

    def __init__(self, kind: str, size: int) -> None:
        self.kind, self.size = kind, size
        if kind == "heavy":
            body = [v2.RandomResizedCrop(size, scale=(0.35, 1.0), antialias=True),
                    v2.RandomHorizontalFlip(),
                    v2.ColorJitter(brightness=0.4, contrast=0.4, saturation=0.4, hue=0.1)]
        else:
            body = [v2.Resize((size, size), antialias=True)]
        self.pipeline = v2.Compose([*body, v2.ClampBoundingBoxes(),
                                    v2.SanitizeBoundingBoxes(labels_getter=_sanitized),
                                    v2.ToDtype(torch.float32, scale=True)])

    def __call__(self, image: Any, target: dict[str, Any]) -> tuple[torch.Tensor, dict]:
        if not isinstance(target, dict) or "boxes" not in target:
            raise ConfigError("--task detection needs a dataset with boxes (--dataset voc); "
                              f"this one gives {type(target).__name__} labels")
        if not isinstance(image, torch.Tensor):
            image = v2.PILToTensor()(image)
        img = tv_tensors.Image(image)
        h, w = img.shape[-2:]
        t = dict(target)
        t["boxes"] = tv_tensors.BoundingBoxes(torch.as_tensor(target["boxes"]).reshape(-1, 4),
                                              format="XYXY", canvas_size=(h, w))
        img, t = self.pipeline(img, t)
        out = {k: v.as_subclass(torch.Tensor) if isinstance(v, torch.Tensor) else v
               for k, v in t.items()}
        return img.as_subclass(torch.Tensor), out


MAP50_SOURCE = "torchmetrics (COCO, 101-point)"


def require_metric() -> None:
    """A one-line ConfigError naming the extra when the mAP cannot be computed here."""
    require("detection", "--task detection with --eval (mAP through torchmetrics)")


def map50(preds: list[dict[str, torch.Tensor]], gts: list[dict[str, torch.Tensor]]
          ) -> float | None:
    """COCO's AP at IoU 0.5, mean over the classes that have objects; None when none has.
    ``preds[i]``: ``boxes`` N x 4, ``scores``, ``labels``; ``gts[i]``: ``boxes``, ``labels``
    and optionally ``difficult``, for image ``i``."""
    require_metric()
    # optional: torchmetrics (the detection extra)
    from torchmetrics.detection import MeanAveragePrecision

    metric = MeanAveragePrecision(iou_type="bbox", iou_thresholds=[0.5], backend="pycocotools")
    metric.warn_on_many_detections = False  # COCO keeps the 100 best per image, as intended
    metric.update(preds, [{"boxes": g["boxes"], "labels": g["labels"],
                           "iscrowd": g.get("difficult", torch.zeros(len(g["labels"]))).long()}
                          for g in gts])
    value = float(metric.compute()["map_50"])
    return value if value >= 0 else None  # -1: no class has an object


class Detection:
    name = "detection"
    collate = staticmethod(collate_indexed_list)
    metric_name = "map50"

    def __init__(self, cfg: Any, num_classes: int) -> None:
        self.num_classes = num_classes

    def make_model(self, name: str, num_classes: int, image_size: int) -> nn.Module:
        """The engine calls this instead of building a classifier and ``build_model``."""
        return build_detector(name, num_classes, image_size)

    def build_model(self, base: nn.Module) -> nn.Module:
        raise ConfigError("--task detection builds its own model (see make_model)")

    def transforms(self, kind: str, size: int) -> tuple[BoxTransform, None]:
        """(joint image+target transform, image-only transform) for ``light``/``heavy``/``eval``."""
        return BoxTransform("light" if kind == "eval" else kind, size), None

    def to_device(self, x: Any, y: Any, device: torch.device, channels_last: bool):
        x = [img.to(device, non_blocking=True) for img in x]
        y = [{k: v.to(device, non_blocking=True) for k, v in t.items()} for t in y]
        return x, y

    def forward_loss(self, model: nn.Module, x: list[torch.Tensor], y: list[dict]) -> torch.Tensor:
        losses = model(x, y)
        return sum(losses.values())

    def batch_sampler(self, dataset: Any, batch_size: int, seed: int) -> Any:
        """Ordinary batches. Setup calls this once with the training set, so it is also where a
        dataset without boxes is refused, before any training."""
        if len(dataset):
            dataset[0]
        return None

    @torch.no_grad()
    def evaluate(self, model: nn.Module, loader: Any, device: torch.device,
                 autocast: AbstractContextManager, channels_last: bool = False) -> dict[str, Any]:
        preds: list[dict[str, torch.Tensor]] = []
        gts: list[dict[str, torch.Tensor]] = []
        with evaluating(model):
            for x, y, _, _ in loader:
                if x is None:
                    continue
                x, _ = self.to_device(x, [], device, channels_last)
                with autocast:
                    out = model(x)
                preds += [{k: v.float().cpu() if v.is_floating_point() else v.cpu()
                           for k, v in o.items()} for o in out]
                gts += y
        return {"map50": map50(preds, gts), "map50_source": MAP50_SOURCE,
                "eval_samples": len(gts),
                "eval_objects": int(sum(len(g["labels"]) for g in gts))}


TASKS.add("detection", Detection, "torchvision detectors (ssdlite, Faster R-CNN, RetinaNet, FCOS); "
          "sum of the model's losses, mAP@0.5")
