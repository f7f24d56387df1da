"""The light transform (torch alone) against torchvision's ToImage, Resize, ToDtype, Normalize;
and a run on the digits that never imports torchvision (about 2 s of each process's start)."""

import subprocess
import sys

import numpy as np
import pytest
import torch
from PIL import Image
from torchvision.transforms import v2

from scaleprobe.data.transforms import MEAN, STD, ToRGB, build_transform


def _torchvision_light(size):
    return v2.Compose([v2.ToImage(), ToRGB(), v2.Resize((size, size), antialias=True),
                       v2.ToDtype(torch.float32, scale=True), v2.Normalize(MEAN, STD)])


def _images(size):
    g = np.random.default_rng(0)
    rgb = g.integers(0, 256, (size, size, 3), dtype=np.uint8)
    grey = g.integers(0, 256, (size, size), dtype=np.uint8)
    return {"uint8 tensor": torch.from_numpy(rgb).permute(2, 0, 1).contiguous(),
            "grey uint8 tensor": torch.from_numpy(grey).unsqueeze(0),
            "PIL RGB": Image.fromarray(rgb), "PIL L": Image.fromarray(grey),
            "numpy HWC": rgb}


@pytest.mark.parametrize("kind", ["uint8 tensor", "grey uint8 tensor", "PIL RGB", "PIL L",
                                  "numpy HWC"])
def test_same_as_torchvision_without_a_resize(kind):
    """Bugs caught: channels in the wrong order (HWC read as CHW), grey not made three
    channels, no /255, the wrong mean or std: each moves values by far more than 1e-6."""
    img = _images(32)[kind]
    ours, theirs = build_transform("light", 32)(img), _torchvision_light(32)(img)
    assert ours.shape == theirs.shape == (3, 32, 32)
    assert ours.dtype == torch.float32
    assert torch.allclose(ours, theirs, atol=1e-6), (ours - theirs).abs().max()


@pytest.mark.parametrize("kind", ["uint8 tensor", "PIL RGB", "PIL L"])
@pytest.mark.parametrize("src", [28, 48])
def test_within_a_rounding_step_of_torchvision_with_a_resize(kind, src):
    """Up (MNIST's 28 px to 32) and down (48 to 32, where antialiasing matters): torchvision
    resizes uint8 in uint8, so one rounding step of 1/255 (/ std 0.25 after normalising) is
    the tolerance. Bugs caught: no antialiasing on the way down, nearest instead of bilinear,
    corner alignment (each moves values by several steps)."""
    img = _images(src)[kind]
    ours, theirs = build_transform("light", 32)(img), _torchvision_light(32)(img)
    assert ours.shape == theirs.shape == (3, 32, 32)
    step = 1 / 255 / STD[0]
    assert (ours - theirs).abs().max() <= step + 1e-5, (ours - theirs).abs().max()


def test_a_digits_run_never_imports_torchvision():
    """A single-process run on the digits with the light transform, in a fresh interpreter:
    torchvision stays out of sys.modules (the heavy transform, torchvision models and the
    torchvision dataset formats import it when they are used)."""
    code = ("import sys\n"
            "from scaleprobe.config.runconfig import build\n"
            "from scaleprobe.run.workloads import run_config\n"
            "rec = run_config(build({'steps': 2, 'warmup_steps': 1, 'loader': 'naive', "
            "'progress': False, 'out': sys.argv[1]}))\n"
            "assert rec.status == 'ok', rec.error\n"
            "print('torchvision' in sys.modules)\n")
    import tempfile

    with tempfile.TemporaryDirectory() as d:
        p = subprocess.run([sys.executable, "-c", code, d], capture_output=True, text=True,
                           timeout=180)
    assert p.returncode == 0, p.stderr[-2000:]
    assert p.stdout.strip().splitlines()[-1] == "False"


def test_an_image_of_another_integer_type_is_a_one_line_data_error():
    """A 16-bit image (a PIL "I;16" PNG read without conversion): a DataError naming the type,
    not a wrong scale (values up to 65535 read as if up to 255) or a traceback."""
    from scaleprobe.core.errors import DataError

    img = torch.full((1, 32, 32), 40000, dtype=torch.int32)
    with pytest.raises(DataError, match="8-bit or floating-point images; this one is int32"):
        build_transform("light", 32)(img)
