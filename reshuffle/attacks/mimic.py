"""Mimic (Karimireddy, He and Jaggi, ICLR 2022, "Byzantine-Robust Learning on Heterogeneous Datasets via Bucketing")."""

from __future__ import annotations

import numpy as np

from reshuffle.attacks.base import Attack, check_observed, register_attack
from reshuffle.errors import ConfigError


@register_attack("mimic")
class Mimic(Attack):
    r"""Every attacker uploads an exact copy of one honest client's update.

    The copies over-represent that client's data, which biases the aggregate on
    heterogeneous data while every malicious row looks perfectly honest. The
    mimicked row is ``target`` (an index into the honest rows) if given, else the
    one the paper picks: the honest update with the largest projection on the top
    principal direction z of the centred honest updates,
    :math:`i^\star = \arg\max_i \langle z, u_i - \mu \rangle`. Variant: z is
    recomputed every round from that round's honest updates (the paper estimates
    it once during warm-up rounds).
    """

    omniscient = True
    uses_own_training = False

    def __init__(self, target: int | None = None) -> None:
        if target is not None and (not isinstance(target, int) or isinstance(target, bool) or target < 0):
            raise ConfigError(f"mimic target must be a non-negative int or None, got {target!r}")
        self.target = target

    def choose(self, H: np.ndarray) -> int:
        """The honest row to copy."""
        if self.target is not None:
            if self.target >= H.shape[0]:
                raise ConfigError(f"mimic target {self.target} but only {H.shape[0]} honest updates")
            return self.target
        C = H - H.mean(axis=0)
        # Top right-singular vector of C, from the small h×h Gram matrix (h ≪ d).
        _, vecs = np.linalg.eigh(C @ C.T)
        z = C.T @ vecs[:, -1]
        proj = C @ z
        # An eigenvector's sign is arbitrary: orient z towards the longer tail.
        if -proj.min() > proj.max():
            proj = -proj
        return int(np.argmax(proj))

    def __call__(self, observed: np.ndarray, m: int, rng: np.random.Generator) -> np.ndarray:
        H = check_observed(observed, m, self)
        return np.tile(H[self.choose(H)], (m, 1))
