"""Task metrics without torch: face verification accuracy and detection mAP@0.5.

``verification_accuracy(distances, same)``: pairs of faces with a distance each and a "same
person" flag. The pairs are dealt into 10 folds (scikit-learn's ``StratifiedKFold``); for each
fold the threshold that classifies the other nine folds best ("same" when distance <=
threshold, candidates from scikit-learn's ``roc_curve``) is chosen, then tested on the
held-out fold. The result is the mean (and spread) of the ten test accuracies, as in the LFW
protocol.

``voc_map50(detections, ground_truth)``: mean over classes of the VOC average precision at
IoU >= 0.5 with all-point interpolation (the area under the precision envelope, the VOC
2010+ rule). Ground truth marked difficult counts neither as a hit nor as a miss: a
detection matched to it is ignored, as in the VOC development kit. Boxes are
``(x1, y1, x2, y2)`` pixel edges, so a box's area is ``(x2 - x1) * (y2 - y1)``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from sklearn.metrics import roc_curve
from sklearn.model_selection import StratifiedKFold

IOU_THRESHOLD = 0.5


# ---------------------------------------------------------------------------------------------
# face verification


def best_threshold(distances: np.ndarray, same: np.ndarray) -> tuple[float, float]:
    """(threshold, accuracy) that best separates ``same`` pairs (distance <= threshold).

    The candidate cuts are the ROC curve's (scikit-learn ``roc_curve``, score = -distance):
    one below every pair, then one after each distinct distance, never between equal ones.
    The threshold is set halfway to the next distance, so a held-out pair at a distance the
    chosen cut did not see falls on the nearer side."""
    d = np.asarray(distances, dtype=np.float64)
    s = np.asarray(same, dtype=bool)
    pos, neg = int(s.sum()), int((~s).sum())
    if pos == 0 or neg == 0:  # one kind of pair: every pair on its side
        return (float(d.max()) + 1e-6, 1.0) if neg == 0 else (float(d.min()) - 1e-6, 1.0)
    fpr, tpr, _ = roc_curve(s, -d, drop_intermediate=False)
    correct = np.rint(tpr * pos + (1.0 - fpr) * neg)  # counts; k: the k smallest distances "same"
    k = int(np.argmax(correct))
    u = np.unique(d)
    if k == 0:
        thr = float(u[0]) - 1e-6
    elif k == len(u):
        thr = float(u[-1]) + 1e-6
    else:
        thr = float((u[k - 1] + u[k]) / 2)
    return thr, float(correct[k]) / len(d)


def verification_accuracy(distances: Sequence[float], same: Sequence[bool],
                          folds: int = 10) -> dict[str, Any]:
    """Mean accuracy over ``folds`` with the threshold chosen on the other folds.

    The folds are scikit-learn's ``StratifiedKFold`` without shuffling: each holds the same
    share of matched pairs, also when the pairs come as all matched pairs, then all
    mismatched ones (as LFW pairs files list them). Fewer folds when a kind of pair has fewer
    than ``folds`` members; no figure with fewer than two of either kind."""
    d = np.asarray(distances, dtype=np.float64)
    s = np.asarray(same, dtype=bool)
    if len(d) != len(s):
        raise ValueError(f"{len(d)} distances but {len(s)} same/different flags")
    folds = min(folds, int(s.sum()), int((~s).sum()))
    if folds < 2:
        return {"verification_accuracy": None, "verification_accuracy_std": None,
                "verification_threshold": None, "eval_pairs": int(len(d))}
    accs, thrs = [], []
    for train, test in StratifiedKFold(n_splits=folds).split(d, s):
        thr, _ = best_threshold(d[train], s[train])
        accs.append(float(((d[test] <= thr) == s[test]).mean()))
        thrs.append(thr)
    return {"verification_accuracy": float(np.mean(accs)),
            "verification_accuracy_std": float(np.std(accs)),
            "verification_threshold": float(np.mean(thrs)), "eval_pairs": int(len(d))}


# ---------------------------------------------------------------------------------------------
# detection


def box_iou(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """IoU of every box in ``a`` (N x 4) with every box in ``b`` (M x 4): N x M."""
    a = np.asarray(a, dtype=np.float64).reshape(-1, 4)
    b = np.asarray(b, dtype=np.float64).reshape(-1, 4)
    ix1 = np.maximum(a[:, None, 0], b[None, :, 0])
    iy1 = np.maximum(a[:, None, 1], b[None, :, 1])
    ix2 = np.minimum(a[:, None, 2], b[None, :, 2])
    iy2 = np.minimum(a[:, None, 3], b[None, :, 3])
    inter = np.clip(ix2 - ix1, 0, None) * np.clip(iy2 - iy1, 0, None)
    area_a = (a[:, 2] - a[:, 0]) * (a[:, 3] - a[:, 1])
    area_b = (b[:, 2] - b[:, 0]) * (b[:, 3] - b[:, 1])
    union = area_a[:, None] + area_b[None, :] - inter
    return np.where(union > 0, inter / np.where(union > 0, union, 1), 0.0)


def average_precision(recall: np.ndarray, precision: np.ndarray) -> float:
    """All-point interpolated AP: area under the monotone precision envelope."""
    r = np.concatenate([[0.0], recall, [1.0]])
    p = np.concatenate([[0.0], precision, [0.0]])
    p = np.maximum.accumulate(p[::-1])[::-1]
    steps = np.nonzero(r[1:] != r[:-1])[0]
    return float(np.sum((r[steps + 1] - r[steps]) * p[steps + 1]))


def _class_ap(dets: list[tuple[float, int, np.ndarray]], gts: dict[int, np.ndarray],
              hard: dict[int, np.ndarray], n_pos: int) -> float:
    """AP of one class: ``dets`` = (score, image, box); ``gts``/``hard`` per image."""
    dets = sorted(dets, key=lambda t: -t[0])
    used = {img: np.zeros(len(g), dtype=bool) for img, g in gts.items()}
    tp = np.zeros(len(dets))
    fp = np.zeros(len(dets))
    for i, (_, img, box) in enumerate(dets):
        g = gts.get(img)
        if g is None or len(g) == 0:
            fp[i] = 1
            continue
        ious = box_iou(box[None], g)[0]
        j = int(np.argmax(ious))
        if ious[j] < IOU_THRESHOLD:
            fp[i] = 1
        elif hard[img][j]:
            continue  # matched a difficult object: ignored
        elif used[img][j]:
            fp[i] = 1  # a duplicate detection of an object already found
        else:
            tp[i] = 1
            used[img][j] = True
    tp, fp = np.cumsum(tp), np.cumsum(fp)
    recall = tp / n_pos
    precision = tp / np.maximum(tp + fp, np.finfo(np.float64).eps)
    return average_precision(recall, precision)


def voc_map50(detections: Sequence[dict[str, Any]], ground_truth: Sequence[dict[str, Any]]
              ) -> dict[str, Any]:
    """VOC mAP at IoU 0.5 over the classes that have at least one non-difficult object.

    ``detections[i]``: ``boxes`` N x 4, ``scores`` N, ``labels`` N for image ``i``;
    ``ground_truth[i]``: ``boxes``, ``labels`` and optionally ``difficult`` (bool N).
    Arrays may be numpy arrays or anything ``np.asarray`` takes (CPU tensors included).
    Returns ``{"map50": float | None, "ap50_per_class": {label: AP}}``."""
    if len(detections) != len(ground_truth):
        raise ValueError(f"{len(detections)} detection lists for {len(ground_truth)} images")
    gts: dict[int, dict[int, np.ndarray]] = {}
    hard: dict[int, dict[int, np.ndarray]] = {}
    n_pos: dict[int, int] = {}
    for img, gt in enumerate(ground_truth):
        boxes = np.asarray(gt["boxes"], dtype=np.float64).reshape(-1, 4)
        labels = np.asarray(gt["labels"]).reshape(-1).astype(np.int64)
        diff = gt.get("difficult")
        diff = (np.zeros(len(labels), dtype=bool) if diff is None
                else np.asarray(diff).reshape(-1).astype(bool))
        for c in np.unique(labels):
            sel = labels == c
            gts.setdefault(int(c), {})[img] = boxes[sel]
            hard.setdefault(int(c), {})[img] = diff[sel]
            n_pos[int(c)] = n_pos.get(int(c), 0) + int((~diff[sel]).sum())
    dets: dict[int, list[tuple[float, int, np.ndarray]]] = {}
    for img, det in enumerate(detections):
        boxes = np.asarray(det["boxes"], dtype=np.float64).reshape(-1, 4)
        scores = np.asarray(det["scores"], dtype=np.float64).reshape(-1)
        labels = np.asarray(det["labels"]).reshape(-1).astype(np.int64)
        for box, score, c in zip(boxes, scores, labels, strict=True):
            dets.setdefault(int(c), []).append((float(score), img, box))
    per_class = {c: _class_ap(dets.get(c, []), gts[c], hard[c], n)
                 for c, n in sorted(n_pos.items()) if n > 0}
    mean = float(np.mean(list(per_class.values()))) if per_class else None
    return {"map50": mean, "ap50_per_class": per_class}
