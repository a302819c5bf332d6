r"""Per-round filters from the current literature that need no linkage: AlignIns, FreqFed.

Both judge one round's rows alone, so they combine with a per-pseudonym history
(:mod:`reshuffle.server.rules.hammer`) without needing one themselves.
"""

from __future__ import annotations

import numpy as np

from reshuffle.errors import ConfigError
from reshuffle.server.rules.base import (
    Decision, Rule, check_positive, check_round, check_updates, clip_factors, cosine_to,
)
from reshuffle.server.rules.flame import cosine_distances, majority_cluster
from reshuffle.server.rules.registry import register_rule


def mz_scores(x: np.ndarray) -> np.ndarray:
    r"""Median-based z-scores :math:`(x_i - \mathrm{med}(x)) / \mathrm{std}(x)` (0 where all values are equal).

    >>> mz_scores(np.array([1.0, 2.0, 3.0, 10.0])).round(3).tolist()   # median 2.5, std 3.536
    [-0.424, -0.141, 0.141, 2.121]
    """
    sd = float(np.std(x))
    return np.zeros_like(x) if sd == 0 else (x - np.median(x)) / sd


def principal_sign_alignment(U: np.ndarray, share: float) -> np.ndarray:
    r"""Per row, the share of its top-k coordinates (k = ⌈share·d⌉ largest |u_ij|) whose sign is the principal sign.

    The principal sign is :math:`p = \mathrm{sgn}(\sum_i \mathrm{sgn}(u_i))` (a
    coordinate-wise majority vote; 0 where the vote ties, which no row matches).

    >>> U = np.array([[1.0, -2.0, 0.5], [2.0, -1.0, 0.1], [-3.0, 1.0, 0.2]])
    >>> principal_sign_alignment(U, 0.34).tolist()   # k = 2; p = (+, −, +)
    [1.0, 1.0, 0.0]
    """
    d = U.shape[1]
    k = min(d, max(1, int(np.ceil(share * d))))
    p = np.sign(np.sign(U).sum(axis=0))
    top = np.argpartition(-np.abs(U), k - 1, axis=1)[:, :k]
    return (np.sign(np.take_along_axis(U, top, axis=1)) == p[top]).mean(axis=1)


@register_rule("alignins")
class AlignIns(Rule):
    r"""AlignIns (Xu, Zhang & Hu, CVPR 2025): direction alignment inspection, then clipping.

    Two alignments per row: TDA, the cosine of the update with the global
    model, :math:`\omega_i = \cos(u_i, W_g)`; and MPSA, the share of its
    top-k coordinates (k = ``share``·d, 0.3) whose sign agrees with the
    principal sign (:func:`principal_sign_alignment`). A row is accepted when
    both median-based z-scores (:func:`mz_scores`) are small:
    :math:`|MZ(\omega)_i| \le \lambda_c` and :math:`|MZ(\rho)_i| \le \lambda_s`
    (``lambda_c``, ``lambda_s``: 1.0). The accepted rows are clipped to their
    median norm S and averaged: :math:`a = \frac{1}{|A|}\sum_{i\in A} u_i \min(1, S/\lVert u_i\rVert)`.
    Weights: the clipping factors of the accepted rows, 0 for the others.
    Without the global model (a driver that gives none) ω is the cosine
    with the mean row instead.

    >>> U = np.array([[1.0, 1.0], [1.1, 0.9], [0.9, 1.1], [1.0, 1.05], [-1.0, 1.0]])
    >>> AlignIns(share=1.0).decide(U, global_model=np.array([1.0, 1.0])).accepted
    (0, 1, 2, 3)
    """

    context = frozenset({"global_model"})

    def __init__(self, share: float = 0.3, lambda_c: float = 1.0, lambda_s: float = 1.0) -> None:
        if isinstance(share, bool) or not isinstance(share, (int, float)) or not 0 < share <= 1:
            raise ConfigError(f"alignins share must be a number in (0, 1], got {share!r}")
        self.share = float(share)
        self.lambda_c = check_positive(lambda_c, "alignins lambda_c")
        self.lambda_s = check_positive(lambda_s, "alignins lambda_s")

    def decide(self, updates: np.ndarray, *, round: int = 0, global_model=None) -> Decision:
        check_round(round)
        U = check_updates(updates)
        ref = U.mean(axis=0) if global_model is None else np.asarray(global_model, dtype=np.float64)
        if ref.shape != (U.shape[1],):
            raise ConfigError(f"alignins: the global model has shape {ref.shape}, the rows {U.shape[1]} coordinates")
        tda = cosine_to(U, ref)
        mpsa = principal_sign_alignment(U, self.share)
        ok = (np.abs(mz_scores(tda)) <= self.lambda_c) & (np.abs(mz_scores(mpsa)) <= self.lambda_s)
        rows = np.flatnonzero(ok)
        w = np.zeros(len(U))
        if rows.size == 0:
            return Decision(np.zeros(U.shape[1]), (), w)
        norms = np.linalg.norm(U[rows], axis=1)
        k = clip_factors(norms, float(np.median(norms)))
        w[rows] = k
        return Decision((k @ U[rows]) / rows.size, tuple(rows.tolist()), w)


def low_frequencies(U: np.ndarray, share: float) -> np.ndarray:
    r"""The first ⌈share·d⌉ coefficients of each row's orthonormal DCT-II (its lowest frequencies).

    >>> low_frequencies(np.array([[1.0, 1.0, 1.0, 1.0]]), 0.5).round(3).tolist()   # a constant row: only DC
    [[2.0, 0.0]]
    """
    from scipy.fft import dct

    k = min(U.shape[1], max(1, int(np.ceil(share * U.shape[1]))))
    return dct(U, type=2, norm="ortho", axis=1)[:, :k]


@register_rule("freqfed")
class FreqFed(Rule):
    r"""FreqFed (Fereidooni et al., NDSS 2024): cluster the rows by their low frequencies, keep the majority.

    Each row is moved to the frequency domain by an orthonormal DCT-II and
    its lowest ``share`` (0.25) of coefficients kept
    (:func:`low_frequencies`; the paper keeps the low-frequency quadrant of
    each layer's 2-D transform, a quarter of the coefficients: here the
    transform runs over the flat row, since a rule sees no layer shapes). Rows
    are clustered by HDBSCAN on the cosine distances of these vectors with
    minimum cluster size ⌊n/2⌋ + 1 (as FLAME, :func:`majority_cluster`); the
    largest cluster is accepted and averaged (FedAvg on the accepted rows).

    >>> U = np.array([[1.0, 1.0, 1.0, 1.0], [1.1, 1.0, 0.9, 1.0], [0.9, 1.0, 1.1, 1.0], [1.0, -1.0, 1.0, -1.0]])
    >>> FreqFed(share=0.5).select(U)
    [0, 1, 2]
    """

    def __init__(self, share: float = 0.25) -> None:
        if isinstance(share, bool) or not isinstance(share, (int, float)) or not 0 < share <= 1:
            raise ConfigError(f"freqfed share must be a number in (0, 1], got {share!r}")
        self.share = float(share)

    def select(self, updates: np.ndarray, *, round: int = 0) -> list[int]:
        U = check_updates(updates)
        return sorted(majority_cluster(cosine_distances(low_frequencies(U, self.share))).tolist())
