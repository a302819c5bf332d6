"""Client-side DP: each client clips its update and adds Gaussian noise before it uploads.

The mechanism (a client's whole local dataset is the unit protected):

    U' = U · min(1, C / ‖U‖₂) + N(0, (z·C)² I),   W' = W_g + U'

where U = W − W_g is the client's update, C the clip norm and z the noise multiplier.
Any two local datasets give clipped updates at most 2C apart, so one upload is the
Gaussian mechanism with sensitivity 2C and noise z·C, i.e. noise multiplier z/2. A
client that took part in k rounds has composed k of them; the PS chooses the cohort and
knows who took part, so sampling brings no amplification against it. ε for a given δ
comes from the privacy-loss-distribution accountant of ``dp-accounting`` (its RDP
accountant where that is tighter, and to size the PLD's grid).

The noise is drawn by the client from OS randomness (or a caller's cryptographic
:class:`~reshuffle.crypto.rand.RandomSource`): the PS must not be able to predict and
subtract it. Uniforms take 53 bits of the source each, and Box–Muller turns pairs into
normals. The noised model then goes through the protocol's fixed-point encoding, which
rounds away the low-order floating-point bits that attacks on floating-point samplers
read (Mironov, CCS 2012); this is that rounding, not a proof about a discrete sampler.
"""

from __future__ import annotations

import math

import numpy as np

from reshuffle.crypto.rand import OS_RANDOM, RandomSource
from reshuffle.errors import ConfigError

#: Default δ of the reported ε.
DELTA = 1e-5


def gaussian(n: int, rng: RandomSource = OS_RANDOM) -> np.ndarray:
    """``n`` independent N(0, 1) samples (float64) from the cryptographic source ``rng``."""
    if not isinstance(n, int) or n < 0:
        raise ConfigError(f"number of samples must be a non-negative int, got {n!r}")
    pairs = (n + 1) // 2
    words = np.frombuffer(rng.bytes(16 * pairs), dtype="<u8").reshape(2, pairs)
    # 53 random bits, shifted half a step: every uniform lies in (0, 1), so log never sees 0.
    u = ((words >> np.uint64(11)).astype(np.float64) + 0.5) * 2.0**-53
    r = np.sqrt(-2.0 * np.log(u[0]))
    theta = 2.0 * np.pi * u[1]
    return np.concatenate([r * np.cos(theta), r * np.sin(theta)])[:n]


def _check(clip: float, noise: float) -> None:
    for name, v in (("clip", clip), ("noise", noise)):
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0:
            raise ConfigError(f"DP {name} must be a finite non-negative number, got {v!r}")
    if not clip > 0:
        raise ConfigError(f"DP clip norm must be positive, got {clip!r}")


def epsilon(noise: float, participations: int, delta: float = DELTA) -> float:
    """ε(δ) of a client that uploaded ``participations`` times with noise multiplier ``noise`` (std z·C).

    Infinite without noise; 0 before any upload.
    """
    if not 0 < delta < 1:
        raise ConfigError(f"DP delta must lie in (0, 1), got {delta!r}")
    if not isinstance(participations, int) or participations < 0:
        raise ConfigError(f"participations must be a non-negative int, got {participations!r}")
    if participations == 0:
        return 0.0
    if noise <= 0:
        return math.inf
    import dp_accounting
    from dp_accounting.pld import PLDAccountant
    from dp_accounting.rdp import RdpAccountant

    event = dp_accounting.SelfComposedDpEvent(dp_accounting.GaussianDpEvent(noise / 2.0), participations)
    rdp = RdpAccountant()
    rdp.compose(event)
    loose = float(rdp.get_epsilon(delta))
    # The PLD's support grows with ε: a grid of ε/10⁴ keeps it to about 10⁴ points (a finer one exhausts
    # memory at small noise). Both accountants give upper bounds; the PLD's is the tighter one.
    pld = PLDAccountant(value_discretization_interval=max(1e-4, loose * 1e-4))
    pld.compose(event)
    return min(loose, float(pld.get_epsilon(delta)))


def noise_for_epsilon(target: float, participations: int, delta: float = DELTA) -> float:
    """The smallest noise multiplier z (to 0.1 %) that keeps ε(δ) ≤ ``target`` after ``participations`` uploads."""
    if not (isinstance(target, (int, float)) and math.isfinite(target) and target > 0):
        raise ConfigError(f"target epsilon must be a positive finite number, got {target!r}")
    if participations < 1:
        raise ConfigError(f"participations must be at least 1, got {participations!r}")
    lo, hi = 0.0, 1.0
    while epsilon(hi, participations, delta) > target:
        lo, hi = hi, 2 * hi
    while hi - lo > 1e-3 * hi:
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if epsilon(mid, participations, delta) > target else (lo, mid)
    return hi


class ClientDP:
    """One client's mechanism: clip the update to ``clip``, add N(0, (noise·clip)²) per coordinate."""

    def __init__(self, clip: float, noise: float, rng: RandomSource = OS_RANDOM) -> None:
        _check(clip, noise)
        self.clip, self.noise, self.rng = float(clip), float(noise), rng

    def __repr__(self) -> str:
        return f"ClientDP(clip={self.clip}, noise={self.noise})"

    def privatize(self, W: np.ndarray, W_g: np.ndarray) -> np.ndarray:
        """The model to upload: W_g plus the clipped, noised update W − W_g (float32)."""
        W, W_g = np.asarray(W), np.asarray(W_g)
        if W.shape != W_g.shape:
            raise ConfigError(f"model of shape {W.shape} against a global model of shape {W_g.shape}")
        U = W.astype(np.float64) - W_g
        norm = float(np.linalg.norm(U))
        if norm > self.clip:
            U *= self.clip / norm
        if self.noise > 0:
            U += (self.noise * self.clip) * gaussian(U.size, self.rng).reshape(U.shape)
        return (W_g + U).astype(np.float32)
