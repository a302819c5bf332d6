"""Server optimisers: the rule's aggregate Δ_t is a pseudo-gradient, the optimiser takes the step.

FedOpt (Reddi et al., "Adaptive Federated Optimization", ICLR 2021, Algorithm 2),
with x the global model and Δ_t the rule's aggregate of the rows U_i = W_i − W_g:

- ``sgd``: x ← x + η Δ_t (FedAvg's step when η = 1);
- ``momentum`` (FedAvgM, Hsu et al. 2019): v_t = β v_{t−1} + Δ_t, x ← x + η v_t;
- ``adam``: m_t = β₁ m_{t−1} + (1 − β₁) Δ_t, v_t = β₂ v_{t−1} + (1 − β₂) Δ_t²,
  x ← x + η m_t / (√v_t + τ);
- ``yogi``: as ``adam`` with v_t = v_{t−1} − (1 − β₂) Δ_t² sign(v_{t−1} − Δ_t²).

The adaptive optimisers start from m_{−1} = 0 and v_{−1} = τ² (the paper's
v_{−1} ≥ τ²) and apply no bias correction, as in the paper. Defaults: β₁ = 0.9,
β₂ = 0.99, τ = 10⁻³ (the paper's); β = 0.9 for momentum; η = 1 for ``sgd`` and
``momentum``, 10⁻² for ``adam`` and ``yogi`` (the paper tunes η per task; its best
values for Adam and Yogi lie around 10⁻² to 10^−1.5, and 10⁻² is Flower's FedYogi default).

An optimiser carries state from round to round (``state()``/``restore()`` for
checkpoints); it is built once per run.
"""

from __future__ import annotations

import inspect
from typing import Any, ClassVar

import numpy as np

from reshuffle.errors import ConfigError


def _number(v: object, name: str, lo: float, hi: float | None = None, lo_open: bool = False) -> float:
    """A finite number in [lo, hi) (or (lo, hi) with ``lo_open``); ints accepted, bools not."""
    ok = not isinstance(v, bool) and isinstance(v, (int, float)) and np.isfinite(v)
    ok = ok and (v > lo if lo_open else v >= lo) and (hi is None or v < hi)
    if not ok:
        span = f"{'(' if lo_open else '['}{lo:g}, {'inf' if hi is None else f'{hi:g}'})"
        raise ConfigError(f"server optimiser {name} must be a number in {span}, got {v!r}")
    return float(v)


class ServerOptimizer:
    """x ← step(x, Δ): one server step from the rule's aggregate Δ (float64, length d)."""

    name: ClassVar[str] = "optimizer"
    #: η when ``lr`` is not given.
    default_lr: ClassVar[float] = 1.0

    def __init__(self, lr: float | None = None) -> None:
        self.lr = _number(self.default_lr if lr is None else lr, "lr", 0.0, lo_open=True)

    def step(self, W: np.ndarray, delta: np.ndarray) -> np.ndarray:
        """The new global model (float32) from W (float32) and the pseudo-gradient Δ."""
        raise NotImplementedError

    def state(self) -> dict[str, np.ndarray]:
        """Arrays carried to the next round (empty for a stateless optimiser)."""
        return {}

    def restore(self, arrays: dict[str, np.ndarray]) -> None:
        """Continue from :meth:`state`'s arrays (a resumed run)."""
        if set(arrays) != set(self.state()):
            raise ConfigError(f"server optimiser {self.name!r} state needs arrays {sorted(self.state())}, "
                              f"got {sorted(arrays)}")

    @staticmethod
    def _new(W: np.ndarray, step: np.ndarray) -> np.ndarray:
        with np.errstate(over="ignore", invalid="ignore"):  # a diverged model is a result, not an error
            return (W + step).astype(np.float32)

    def __repr__(self) -> str:
        params = ", ".join(f"{k}={v!r}" for k, v in vars(self).items() if not k.startswith("_"))
        return f"{type(self).__name__}({params})"


class SGD(ServerOptimizer):
    """x ← x + η Δ (η = 1: the plain FedAvg step)."""

    name = "sgd"

    def step(self, W: np.ndarray, delta: np.ndarray) -> np.ndarray:
        return self._new(W, self.lr * delta)


class _Stateful(ServerOptimizer):
    """An optimiser whose arrays (named in ``_arrays``) start at the first step."""

    _arrays: ClassVar[tuple[str, ...]] = ()

    def __init__(self, lr: float | None = None) -> None:
        super().__init__(lr)
        self._state: dict[str, np.ndarray] = {}

    def state(self) -> dict[str, np.ndarray]:
        return {k: v.copy() for k, v in self._state.items()}

    def restore(self, arrays: dict[str, np.ndarray]) -> None:
        if arrays and set(arrays) != set(self._arrays):
            raise ConfigError(f"server optimiser {self.name!r} state needs arrays {list(self._arrays)}, "
                              f"got {sorted(arrays)}")
        self._state = {k: np.array(v, dtype=np.float64) for k, v in arrays.items()}


class Momentum(_Stateful):
    """FedAvgM: v_t = β v_{t−1} + Δ_t, x ← x + η v_t (v_{−1} = 0)."""

    name = "momentum"
    _arrays = ("v",)

    def __init__(self, lr: float | None = None, momentum: float = 0.9) -> None:
        super().__init__(lr)
        self.momentum = _number(momentum, "momentum", 0.0, 1.0)

    def step(self, W: np.ndarray, delta: np.ndarray) -> np.ndarray:
        v = self._state.get("v")
        v = delta.copy() if v is None else self.momentum * v + delta
        self._state["v"] = v
        return self._new(W, self.lr * v)


class Adam(_Stateful):
    """FedAdam: m_t = β₁ m + (1 − β₁) Δ, v_t = β₂ v + (1 − β₂) Δ², x ← x + η m_t / (√v_t + τ)."""

    name = "adam"
    default_lr = 1e-2
    _arrays = ("m", "v")

    def __init__(self, lr: float | None = None, beta1: float = 0.9, beta2: float = 0.99, tau: float = 1e-3) -> None:
        super().__init__(lr)
        self.beta1 = _number(beta1, "beta1", 0.0, 1.0)
        self.beta2 = _number(beta2, "beta2", 0.0, 1.0)
        self.tau = _number(tau, "tau", 0.0, lo_open=True)

    def _second_moment(self, v: np.ndarray, sq: np.ndarray) -> np.ndarray:
        return self.beta2 * v + (1 - self.beta2) * sq

    def step(self, W: np.ndarray, delta: np.ndarray) -> np.ndarray:
        m = self._state.get("m", np.zeros_like(delta))
        v = self._state.get("v", np.full_like(delta, self.tau ** 2))
        with np.errstate(over="ignore", invalid="ignore"):
            m = self.beta1 * m + (1 - self.beta1) * delta
            v = self._second_moment(v, delta * delta)
            self._state.update(m=m, v=v)
            return self._new(W, self.lr * m / (np.sqrt(v) + self.tau))


class Yogi(Adam):
    """FedYogi: Adam with v_t = v_{t−1} − (1 − β₂) Δ² sign(v_{t−1} − Δ²)."""

    name = "yogi"

    def _second_moment(self, v: np.ndarray, sq: np.ndarray) -> np.ndarray:
        return v - (1 - self.beta2) * sq * np.sign(v - sq)


SERVER_OPTIMIZERS: dict[str, type[ServerOptimizer]] = {c.name: c for c in (SGD, Momentum, Adam, Yogi)}


def option_names(cls: type[ServerOptimizer]) -> list[str]:
    """The options ``cls`` takes besides ``lr``."""
    return [p for p in inspect.signature(cls.__init__).parameters if p not in ("self", "lr")]


def make_server_optimizer(name: str, lr: float | None = None, **options: Any) -> ServerOptimizer:
    """The server optimiser ``name`` with step size ``lr`` (None: its default) and ``options``."""
    if name not in SERVER_OPTIMIZERS:
        raise ConfigError(f"unknown server optimiser {name!r}; choose one of {', '.join(SERVER_OPTIMIZERS)}")
    cls = SERVER_OPTIMIZERS[name]
    valid = option_names(cls)
    for key in options:
        if key not in valid:
            raise ConfigError(f"server optimiser {name!r} has no option {key!r}; "
                              f"valid: {', '.join(valid) if valid else 'none besides lr'}")
    return cls(lr, **options)
