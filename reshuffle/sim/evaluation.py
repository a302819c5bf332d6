"""The simulator's evaluation of the global model: accuracy, the attack's success, divergence."""

from __future__ import annotations

import numpy as np

from reshuffle.clients import predict
from reshuffle.run.config import SimConfig
from reshuffle.run.round import Evaluation
from reshuffle.run.sampling import EVAL, seed_of
from reshuffle.sim.attackers import Attackers
from reshuffle.sim.training import Training


class Evaluator:
    """Scores W_g on the test set: a fixed subset (``eval_subset``) in every round but the last."""

    def __init__(self, cfg: SimConfig, training: Training, attackers: Attackers) -> None:
        self.cfg, self.training, self.attackers = cfg, training, attackers
        self.idx = self._subset()

    def _subset(self) -> np.ndarray | None:
        """A fixed test subset for every round but the last (``eval_subset``), or None: the whole test set."""
        k, n = self.cfg.eval_subset, len(self.training.data.y_test)
        if k is None or k >= n:
            return None
        return np.sort(np.random.default_rng(seed_of(self.cfg.seed, EVAL)).choice(n, size=k, replace=False))

    def test_set(self, last: bool) -> tuple[np.ndarray, np.ndarray]:
        """The test subset (``eval_subset``) in every round but the last; the whole test set otherwise."""
        data = self.training.data
        if self.idx is None or last:
            return data.x_test, data.y_test
        return data.x_test[self.idx], data.y_test[self.idx]

    def evaluators(self) -> list[dict | None]:
        """Whose local entries the global model is evaluated with: none (the global model is whole), or under
        local BatchNorm every client's own (FedBN's evaluation: accuracy is the mean over the clients)."""
        t = self.training
        if not self.cfg.local_bn or t.local is None:
            return [t.server_local]
        return [t.local[i] for i in range(self.cfg.clients)]

    def predict(self, W_g: np.ndarray, x: np.ndarray, local: dict | None = None) -> np.ndarray:
        t = self.training
        return predict(t.model, W_g, x, layout=t.layout, local=local)

    def __call__(self, W_g: np.ndarray, T: int, diverged: bool = False, last: bool | None = None) -> Evaluation:
        """W_g after round T; ``diverged``: the driver already knows the run diverged (every client's training did);
        ``last``: evaluate as the run's last round (the whole test set; default: whether T is the last round)."""
        x, y = self.test_set(last=T == self.cfg.rounds if last is None else last)
        preds = [self.predict(W_g, x, local) for local in self.evaluators()]
        return Evaluation.of(W_g, preds, y, self._success(W_g, x, y), diverged)

    def per_class(self, W_g: np.ndarray) -> list[float | None]:
        """W_g's accuracy on each class of the whole test set (the mean over the evaluators; None for a class
        with no test sample): framing that costs one class shows here, not in the overall accuracy."""
        x, y = self.test_set(last=True)
        preds = [self.predict(W_g, x, local) for local in self.evaluators()]
        out: list[float | None] = []
        for c in range(self.training.data.num_classes):
            mine = y == c
            out.append(float(np.mean([np.mean(p[mine] == c) for p in preds])) if mine.any() else None)
        return out

    def _success(self, W_g: np.ndarray, x: np.ndarray, y: np.ndarray) -> float | None:
        """The attack's success score on W_g (None without attackers); the mean over the clients' own
        BatchNorm entries under local BatchNorm."""
        a = self.attackers
        if not a.attacked:
            return None
        classes = self.training.data.num_classes
        scores = [a.attack.success(lambda x_, loc=local: self.predict(W_g, x_, loc), x, y, classes)
                  for local in self.evaluators()]
        return None if None in scores else float(np.mean(scores))
