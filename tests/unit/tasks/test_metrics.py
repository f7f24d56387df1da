"""Verification accuracy and VOC mAP@0.5 on hand-made inputs with known answers."""

import numpy as np
import pytest

from scaleprobe.tasks.metrics import (
    average_precision,
    best_threshold,
    box_iou,
    verification_accuracy,
    voc_map50,
)

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


# --- detection ---------------------------------------------------------------------------------


def test_box_iou():
    a = np.array([[0, 0, 10, 10]])
    b = np.array([[0, 0, 10, 10], [5, 0, 15, 10], [20, 20, 30, 30], [0, 0, 0, 0]])
    assert box_iou(a, b)[0].tolist() == pytest.approx([1.0, 50 / 150, 0.0, 0.0])


def test_average_precision_all_point():
    # recall 1/3 at precision 1, then 2/3 at precision 2/3: AP = 1/3 + 1/3 * 2/3
    ap = average_precision(np.array([1 / 3, 1 / 3, 2 / 3]), np.array([1.0, 0.5, 2 / 3]))
    assert ap == pytest.approx(5 / 9)


def _gt(boxes, labels, difficult=None):
    out = {"boxes": np.array(boxes, dtype=float).reshape(-1, 4), "labels": np.array(labels)}
    if difficult is not None:
        out["difficult"] = np.array(difficult)
    return out


def _det(boxes, scores, labels):
    return {"boxes": np.array(boxes, dtype=float).reshape(-1, 4), "scores": np.array(scores),
            "labels": np.array(labels)}


def test_perfect_detections():
    gt = [_gt([[0, 0, 10, 10], [20, 20, 40, 40]], [1, 2]), _gt([[5, 5, 15, 15]], [1])]
    det = [_det([[0, 0, 10, 10], [20, 20, 40, 40]], [0.9, 0.8], [1, 2]),
           _det([[5, 5, 15, 15]], [0.7], [1])]
    out = voc_map50(det, gt)
    assert out["map50"] == 1.0
    assert out["ap50_per_class"] == {1: 1.0, 2: 1.0}


HAND_GT = [_gt([[0, 0, 10, 10], [50, 50, 60, 60]], [1, 1]), _gt([[0, 0, 20, 20]], [1])]
# .9 hits, .8 misses everything, .7 hits image 1's object, image 0's second object is missed
HAND_DET = [_det([[0, 0, 10, 10], [80, 80, 90, 90]], [0.9, 0.8], [1, 1]),
            _det([[1, 1, 20, 20]], [0.7], [1])]


def test_hand_computed_ap():
    assert voc_map50(HAND_DET, HAND_GT)["map50"] == pytest.approx(5 / 9)


def test_duplicates_are_false_positives_and_low_iou_misses():
    gt = [_gt([[0, 0, 10, 10]], [1])]
    det = [_det([[0, 0, 10, 10], [0, 0, 10, 10], [0, 0, 10, 4]], [0.9, 0.8, 0.95], [1, 1, 1])]
    # ranked: .95 (IoU 0.4: miss), .9 hit, .8 duplicate; precision at the hit is 1/2
    assert voc_map50(det, gt)["map50"] == pytest.approx(0.5)


def test_difficult_objects_are_ignored():
    gt = [_gt([[0, 0, 10, 10], [30, 30, 40, 40]], [1, 1], [False, True])]
    only_easy = [_det([[0, 0, 10, 10]], [0.9], [1])]
    both = [_det([[0, 0, 10, 10], [30, 30, 40, 40]], [0.9, 0.95], [1, 1])]
    assert voc_map50(only_easy, gt)["map50"] == 1.0  # missing the difficult one costs nothing
    assert voc_map50(both, gt)["map50"] == 1.0  # finding it is not a false positive


def test_wrong_class_and_class_without_objects():
    gt = [_gt([[0, 0, 10, 10]], [1])]
    det = [_det([[0, 0, 10, 10], [0, 0, 10, 10]], [0.9, 0.9], [1, 3])]
    out = voc_map50(det, gt)
    assert out["ap50_per_class"] == {1: 1.0}  # class 3 has no object: not in the mean
    assert voc_map50([_det([], [], [])], gt)["map50"] == 0.0
    assert voc_map50([_det([], [], [])], [_gt([], [])])["map50"] is None


def test_agrees_with_torchmetrics_when_installed():
    torch = pytest.importorskip("torch")
    detection = pytest.importorskip("torchmetrics.detection")
    try:
        metric = detection.MeanAveragePrecision(iou_type="bbox", iou_thresholds=[0.5])
    except (ImportError, RuntimeError, ModuleNotFoundError):
        pytest.skip("torchmetrics has no COCO backend here")

    def t(d):
        return {k: torch.as_tensor(v, dtype=torch.float32 if k != "labels" else torch.int64)
                for k, v in d.items()}

    metric.update([t(d) for d in HAND_DET], [t(g) for g in HAND_GT])
    coco = float(metric.compute()["map_50"])
    # COCO samples the envelope at 101 recall points: (34 + 33 * 2/3) / 101 vs 5/9
    assert coco == pytest.approx(voc_map50(HAND_DET, HAND_GT)["map50"], abs=0.01)
