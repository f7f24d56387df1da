"""Verification accuracy and detection mAP@0.5 on hand-made inputs with known answers."""

import sys

import numpy as np
import pytest
import torch

from scaleprobe.core.errors import ConfigError
from scaleprobe.tasks.detection import map50
from scaleprobe.tasks.verification import best_threshold, verification_accuracy

# --- verification ------------------------------------------------------------------------------


def test_separable_pairs_score_one():
    d = [0.1, 0.2, 0.3, 0.4, 0.5] * 4 + [1.1, 1.2, 1.3, 1.4, 1.5] * 4
    same = [True] * 20 + [False] * 20
    out = verification_accuracy(d, same)
    assert out["verification_accuracy"] == 1.0
    assert 0.5 < out["verification_threshold"] < 1.1
    assert out["eval_pairs"] == 40


def test_threshold_chosen_on_other_folds():
    # one matched pair is far away: it is misclassified whatever the threshold
    d = [0.1] * 9 + [2.0] + [1.0] * 10
    same = [True] * 10 + [False] * 10
    out = verification_accuracy(d, same, folds=10)
    assert out["verification_accuracy"] == pytest.approx(0.95)
    assert out["verification_accuracy_std"] > 0


def test_best_threshold_never_cuts_between_equal_distances():
    d = np.array([0.5, 0.5, 0.5, 0.5])
    same = np.array([True, False, True, False])
    thr, acc = best_threshold(d, same)
    assert acc == 0.5
    assert thr < 0.5 or thr > 0.5


def test_best_threshold_all_same_below():
    thr, acc = best_threshold(np.array([0.1, 0.2, 0.9]), np.array([True, True, False]))
    assert acc == 1.0 and 0.2 < thr < 0.9


def test_one_kind_of_pair_gives_null():
    assert verification_accuracy([0.1, 0.2], [True, True])["verification_accuracy"] is None


def test_one_pair_of_a_kind_gives_null():
    """Bug caught: with a single matched pair, the fold that holds it out chose its threshold
    from mismatched pairs alone, and an accuracy came out that measured nothing."""
    out = verification_accuracy([0.1, 0.7, 0.8, 0.9, 1.0], [True, False, False, False, False])
    assert out["verification_accuracy"] is None and out["eval_pairs"] == 5


def test_mismatched_lengths_raise():
    with pytest.raises(ValueError):
        verification_accuracy([0.1, 0.2], [True])


# --- detection: torchmetrics' COCO AP at IoU 0.5, through tasks/detection.map50 -------------
# Expected values are worked out by hand with COCO's rule: precision made monotone (the best
# precision at any higher recall), sampled at the 101 recalls 0, 0.01, ..., 1, averaged.


def _gt(boxes, labels, difficult=None):
    out = {"boxes": torch.tensor(boxes, dtype=torch.float32).reshape(-1, 4),
           "labels": torch.tensor(labels, dtype=torch.int64)}
    if difficult is not None:
        out["difficult"] = torch.tensor(difficult)
    return out


def _det(boxes, scores, labels):
    return {"boxes": torch.tensor(boxes, dtype=torch.float32).reshape(-1, 4),
            "scores": torch.tensor(scores, dtype=torch.float32),
            "labels": torch.tensor(labels, dtype=torch.int64)}


def test_perfect_detections():
    gt = [_gt([[0, 0, 10, 10], [20, 20, 40, 40]], [1, 2]), _gt([[5, 5, 15, 15]], [1])]
    det = [_det([[0, 0, 10, 10], [20, 20, 40, 40]], [0.9, 0.8], [1, 2]),
           _det([[5, 5, 15, 15]], [0.7], [1])]
    assert map50(det, gt) == pytest.approx(1.0)


def test_hand_computed_ap():
    """Bug caught: detections matched to the wrong image's objects, or boxes read as
    (x, y, w, h). Image 0: .9 hits, .8 misses everything; image 1: .7 hits (IoU 0.9); image
    0's second object is never found. Precision 1 up to recall 1/3, 2/3 up to 2/3, then 0:
    34 of the 101 recalls at 1 and 33 at 2/3."""
    gt = [_gt([[0, 0, 10, 10], [50, 50, 60, 60]], [1, 1]), _gt([[0, 0, 20, 20]], [1])]
    det = [_det([[0, 0, 10, 10], [80, 80, 90, 90]], [0.9, 0.8], [1, 1]),
           _det([[1, 1, 20, 20]], [0.7], [1])]
    assert map50(det, gt) == pytest.approx((34 + 33 * 2 / 3) / 101)


def test_duplicates_are_false_positives_and_low_iou_misses():
    gt = [_gt([[0, 0, 10, 10]], [1])]
    det = [_det([[0, 0, 10, 10], [0, 0, 10, 10], [0, 0, 10, 4]], [0.9, 0.8, 0.95], [1, 1, 1])]
    # ranked: .95 (IoU 0.4: miss), .9 hit, .8 duplicate; precision at the hit is 1/2
    assert map50(det, gt) == pytest.approx(0.5)


def test_difficult_objects_are_ignored():
    """Bug caught: VOC's difficult flag not passed on (as COCO's iscrowd), so a detector that
    finds a difficult object is charged a false positive, and one that misses it a miss."""
    gt = [_gt([[0, 0, 10, 10], [30, 30, 40, 40]], [1, 1], [False, True])]
    only_easy = [_det([[0, 0, 10, 10]], [0.9], [1])]
    both = [_det([[0, 0, 10, 10], [30, 30, 40, 40]], [0.9, 0.95], [1, 1])]
    assert map50(only_easy, gt) == pytest.approx(1.0)  # missing the difficult one costs nothing
    assert map50(both, gt) == pytest.approx(1.0)  # finding it is not a false positive


def test_wrong_class_and_class_without_objects():
    gt = [_gt([[0, 0, 10, 10]], [1])]
    det = [_det([[0, 0, 10, 10], [0, 0, 10, 10]], [0.9, 0.9], [1, 3])]
    assert map50(det, gt) == pytest.approx(1.0)  # class 3 has no object: not in the mean
    assert map50([_det([], [], [])], gt) == 0.0
    assert map50([_det([], [], [])], [_gt([], [])]) is None  # nothing to find: no figure


def test_missing_detection_extra_is_one_line_naming_it(monkeypatch):
    """Bug caught: without the optional libraries the mAP failed with an ImportError
    traceback after the whole training, or silently fell back to another definition."""
    monkeypatch.setitem(sys.modules, "pycocotools", None)  # import pycocotools now fails
    with pytest.raises(ConfigError) as err:
        map50([_det([], [], [])], [_gt([], [])])
    msg = str(err.value)
    assert "\n" not in msg and "pycocotools" in msg and "scaleprobe[detection]" in msg
