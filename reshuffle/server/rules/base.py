"""What every detection/aggregation rule shares: input checks and the select → mean default."""

from __future__ import annotations

from typing import ClassVar

import numpy as np

from reshuffle.errors import ConfigError


def check_updates(updates: np.ndarray) -> np.ndarray:
    """Normalise the input once: a finite (n, d) float64 array with n ≥ 1."""
    U = np.asarray(updates, dtype=np.float64)
    if U.ndim != 2 or U.shape[0] < 1 or U.shape[1] < 1:
        raise ConfigError(f"a rule needs an (n, d) array of updates with n, d >= 1, got shape {U.shape}")
    if not np.isfinite(U).all():
        bad = np.flatnonzero(~np.isfinite(U).all(axis=1)).tolist()
        raise ConfigError(f"updates in rows {bad} are not finite")
    return U


def check_f(f: object, name: str = "f") -> int:
    if not isinstance(f, int) or isinstance(f, bool) or f < 0:
        raise ConfigError(f"{name} must be a non-negative int, got {f!r}")
    return f


def pairwise_sq_distances(U: np.ndarray) -> np.ndarray:
    """‖u_i − u_j‖² for all pairs, from one Gram matrix (float64, clipped at 0)."""
    sq = np.einsum("ij,ij->i", U, U)
    D = sq[:, None] + sq[None, :] - 2.0 * (U @ U.T)
    np.maximum(D, 0.0, out=D)
    np.fill_diagonal(D, 0.0)
    return D


def cosine_to(U: np.ndarray, ref: np.ndarray) -> np.ndarray:
    """cos(u_i, ref) for each row; 0 where either vector is zero."""
    denom = np.linalg.norm(U, axis=1) * np.linalg.norm(ref)
    dots = U @ ref
    return np.divide(dots, denom, out=np.zeros_like(dots), where=denom > 0)


class Rule:
    """A rule on the (n, d) array of unlinked updates U_i = W_i − W_g.

    ``select(U)`` returns the accepted rows (sorted indices); ``__call__(U)``
    returns the aggregate update (float64, length d). Rows are anonymous: a rule
    sees no sender ids, only what the PS recovers. The default aggregate is the
    unweighted mean of the accepted rows (the PS cannot weight by sample counts
    without linking rows to clients).
    """

    name: ClassVar[str] = "rule"
    #: True when ``select`` may reject rows (detection); False for rules that
    #: bound influence coordinate-wise and accept every row.
    detects: ClassVar[bool] = True

    def select(self, updates: np.ndarray) -> list[int]:
        raise NotImplementedError

    def __call__(self, updates: np.ndarray) -> np.ndarray:
        U = check_updates(updates)
        rows = self.select(U)
        if not rows:
            return np.zeros(U.shape[1])
        return U[rows].mean(axis=0)

    def __repr__(self) -> str:
        params = ", ".join(f"{k}={v!r}" for k, v in vars(self).items() if not k.startswith("_"))
        return f"{type(self).__name__}({params})"
