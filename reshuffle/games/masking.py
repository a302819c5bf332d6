"""MaskedSum hiding (docs/protocol.md §6): a masked vector y_i = v_b + r_i reveals nothing of b.

Participant 0 is the target; participant 1 is another honest one; participants
2.. collude with the PS (their x are known). Two views, two reductions:

* ``prg`` view: the PS also learns x_0 (as when 0 is declared dropped), so every
  pairwise mask is known; hiding rests on the self mask PRG(b_0).
  B^A against PRG security embeds its challenge z as the self mask:
  Adv_PRG(B) = Adv(A) / 2 (advantages measured as Pr[win] − ½).
* ``ddh`` view: the PS learns b_0 (as when 0 is online), not x_0 nor x_1; hiding
  rests on the pairwise mask PRG(KDF(g^{x_0 x_1})). B^A against DDH sets
  X_0 = g^a, X_1 = g^b and keys that mask with the challenge Z:
  Adv_DDH(B) = Adv(A) / 2 up to the PRG's advantage.

The adversary A removes every mask it can and says b = 1 iff the rest equals v_1.
Weak instances: a PRG whose seed leaks (A removes the self mask), and a 17-bit
group where A computes x_1 = log X_1.
"""

from __future__ import annotations

import secrets

import numpy as np

from reshuffle.crypto.prg import accumulate_streams
from reshuffle.games.framework import Estimate, coin, estimate
from reshuffle.protocol.masking import mask_in_place, pair_key, pair_row_key, pair_sign, self_key

T, M, L, N = 1, 1, 8, 4
H = bytes(32)  # the transcript hash h_M of the one invocation played (docs/protocol.md §6.2–6.3)
V = [np.zeros(L, np.uint32), np.arange(1, L + 1, dtype=np.uint32)]  # A's chosen v_0, v_1


def _stream(key: bytes) -> np.ndarray:
    acc = np.zeros(L, np.uint32)
    accumulate_streams(acc, [(key, 1)])
    return acc


class View:
    """What the PS sees of participant 0's masked vector, plus the secrets it holds."""

    def __init__(self, group, y, X, colluders, x0=None, b0=None, x1=None, leaked_seed=None) -> None:
        self.group, self.y, self.X, self.colluders = group, y, X, colluders
        self.x0, self.b0, self.x1, self.leaked_seed = x0, b0, x1, leaked_seed


def remove_known_masks(view: View) -> int:
    """A: strip every mask it can compute, guess 1 iff the rest is v_1."""
    g = view.group
    rest = view.y.copy()
    streams = []
    if view.b0 is not None:
        streams.append((self_key(g, T, M, 0, view.b0, H), -1))
    if view.leaked_seed is not None:
        streams.append((view.leaked_seed, -1))
    x0 = view.x0
    for j, X_j in view.X.items():
        if j == 0:
            continue
        if x0 is not None:
            streams.append((pair_key(T, M, 0, j, x0, X_j, H), -pair_sign(0, j)))
        elif j in view.colluders:
            streams.append((pair_key(T, M, j, 0, view.colluders[j], view.X[0], H), -pair_sign(0, j)))
        elif j == 1 and view.x1 is not None:
            streams.append((pair_key(T, M, 1, 0, view.x1, view.X[0], H), -pair_sign(0, j)))
    accumulate_streams(rest, streams)
    return int(np.array_equal(rest, V[1]))


def dlog_then_remove(view: View) -> int:
    """A in a tiny group: recover x_1 = log X_1, then remove the masks."""
    view.x1 = view.group.dlog(int.from_bytes(view.X[1].to_bytes(), "big"))
    return remove_known_masks(view)


def _keys(group):
    xs = {j: group.random_scalar() for j in range(N)}
    return xs, {j: group.base_mul(x) for j, x in xs.items()}


def _colluders(xs):
    return {j: xs[j] for j in range(2, N)}


# ------------------------------------------------------------------ prg view
def prg_trial(group, adversary, leak: bool) -> bool:
    """Real scheme (the real ``mask_in_place``); the PS holds x_0 (and the self-mask key if ``leak``)."""
    b = coin()
    xs, X = _keys(group)
    b0 = group.random_scalar()
    y = V[b].copy()
    mask_in_place(y, group, T, M, 0, b0, xs[0], X, H)
    seed = self_key(group, T, M, 0, b0, H) if leak else None
    return adversary(View(group, y, X, _colluders(xs), x0=xs[0], leaked_seed=seed)) == b


def prg_reduction_trial(group, adversary, leak: bool) -> bool:
    """PRG game played by B^A: z = PRG(s) or uniform; B masks with z as the self mask."""
    real = coin()
    s = secrets.token_bytes(32)
    z = _stream(s) if real else np.frombuffer(secrets.token_bytes(4 * L), np.uint32).copy()
    # B^A: builds the rest of the view itself.
    b = coin()
    xs, X = _keys(group)
    y = V[b] + z
    accumulate_streams(y, [(pair_key(T, M, 0, j, xs[0], X[j], H), pair_sign(0, j)) for j in X if j != 0])
    view = View(group, y, X, _colluders(xs), x0=xs[0], leaked_seed=s if leak else None)
    guess_real = int(adversary(view) == b)
    return guess_real == real


# ------------------------------------------------------------------ ddh view
def ddh_view_trial(group, adversary) -> bool:
    b = coin()
    xs, X = _keys(group)
    b0 = group.random_scalar()
    y = V[b].copy()
    mask_in_place(y, group, T, M, 0, b0, xs[0], X, H)
    return adversary(View(group, y, X, _colluders(xs), b0=b0)) == b


def ddh_reduction_trial(group, adversary) -> bool:
    """DDH game played by B^A: X_0 = g^a, X_1 = g^c, the 0–1 pair key from Z."""
    real = coin()
    a, c = group.random_scalar(), group.random_scalar()
    g = group.generator()
    Z = g ** (a * c) if real else g ** group.random_scalar()
    b = coin()
    xs, X = _keys(group)
    X[0], X[1] = g**a, g**c
    b0 = group.random_scalar()
    y = V[b].copy()
    streams = [(self_key(group, T, M, 0, b0, H), 1),
               (pair_row_key(Z.to_bytes(), T, M, 0, 1, H), pair_sign(0, 1))]
    # colluders' pair masks: B knows x_j, so DH(x_0, X_j) = X_0^{x_j}
    streams += [(pair_key(T, M, j, 0, xs[j], X[0], H), pair_sign(0, j)) for j in range(2, N)]
    accumulate_streams(y, streams)
    guess_real = int(adversary(View(group, y, X, _colluders(xs), b0=b0)) == b)
    return guess_real == real


def masked_sum_games(group, adversary, view: str, trials: int, leak: bool = False) -> tuple[Estimate, Estimate]:
    """(Adv of A against the real masking, Adv of B^A against PRG or DDH)."""
    if view == "prg":
        return (estimate(lambda: prg_trial(group, adversary, leak), trials, 0.5),
                estimate(lambda: prg_reduction_trial(group, adversary, leak), trials, 0.5))
    return (estimate(lambda: ddh_view_trial(group, adversary), trials, 0.5),
            estimate(lambda: ddh_reduction_trial(group, adversary), trials, 0.5))
