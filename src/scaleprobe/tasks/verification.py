"""Face verification accuracy, without torch (detection's mAP is torchmetrics', in
tasks/detection.py).

``verification_accuracy(distances, same)``: pairs of faces with a distance each and a "same
person" flag. The pairs are dealt into 10 folds (scikit-learn's ``StratifiedKFold``); for each
fold the threshold that classifies the other nine folds best ("same" when distance <=
threshold, candidates from scikit-learn's ``roc_curve``) is chosen, then tested on the
held-out fold. The result is the mean (and spread) of the ten test accuracies, as in the LFW
protocol.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from sklearn.metrics import roc_curve
from sklearn.model_selection import StratifiedKFold


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
