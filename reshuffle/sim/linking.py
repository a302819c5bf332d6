"""The cross-round linking metric of a simulated run: what a passive PS learns about who sent which.

Each round the simulator hands over the delivered models with their true senders (and,
with anonymity groups, each client's group). The PS's view is kept as the linker keeps it
(each round's rows centred, normalised and sketched, in an order drawn at random: the
linker must not read the shuffle's output order), with the roster: the clients whose
models were delivered. The truth is used only to score
(:func:`reshuffle.adversaries.crossround.figures`).
"""

from __future__ import annotations

import numpy as np

from reshuffle.adversaries.crossround import CrossRoundLinker, Delivered, figures
from reshuffle.errors import ConfigError

#: Checkpoint array of the kept rows, and the state key of the rosters.
ROWS = "linking.rows"
STATE = "linking"


class LinkingMetric:
    """Per round, the bound and the linker's success over the rounds so far (a ``RoundRecord.linking`` dict)."""

    def __init__(self, seed: int) -> None:
        self.linker = CrossRoundLinker(seed=seed)
        self._rng = np.random.default_rng(seed)  # only permutes rows the PS holds anyway
        self.rounds: list[Delivered] = []
        self.senders: list[np.ndarray] = []

    def observe(self, got: list[np.ndarray], positions: dict[int, int],
                groups: dict[int, int] | None = None) -> dict | None:
        """Add one round (``positions``: client → row of ``got``; ``groups``: client → its group) and score."""
        if not got:
            return self.score()
        sender = np.full(len(got), -1, np.int64)
        for client, row in positions.items():
            sender[row] = client
        if (sender < 0).any():
            raise ConfigError("every delivered row needs its sender for the linking metric")
        order = self._rng.permutation(len(got))
        rows = self.linker.reduce(np.stack([np.asarray(g, np.float32) for g in got])[order])
        who = sender[order]
        roster = tuple(int(i) for i in self._rng.permutation(who))
        if groups:
            d = Delivered(rows, roster, tuple(groups[int(i)] for i in who), tuple(groups[i] for i in roster))
        else:
            d = Delivered(rows, roster)
        self.rounds.append(d)
        self.senders.append(who)
        return self.score()

    def score(self) -> dict | None:
        if not self.rounds:
            return None
        return figures(self.rounds, self.senders, self.linker, [d.rows for d in self.rounds]).as_dict()

    def state(self) -> tuple[dict[str, np.ndarray], dict]:
        """The kept rows (one array) and the rounds' rosters, groups and senders (JSON), for a checkpoint."""
        rows = np.concatenate([d.rows for d in self.rounds]) if self.rounds else np.zeros((0, 0), np.float32)
        data = [{"roster": list(d.roster), "senders": s.tolist(),
                 "row_groups": None if d.row_groups is None else list(d.row_groups),
                 "roster_groups": None if d.roster_groups is None else list(d.roster_groups)}
                for d, s in zip(self.rounds, self.senders)]
        return {ROWS: rows}, {STATE: data}

    def restore(self, arrays: dict[str, np.ndarray], state: dict) -> None:
        data, rows = state.get(STATE), arrays.get(ROWS)
        if not isinstance(data, list) or rows is None:
            raise ConfigError("the checkpoint holds no linking state; it was saved by a run without the linker")
        at = 0
        self.rounds, self.senders = [], []
        for r in data:
            n = len(r["roster"])
            rg, mg = r.get("row_groups"), r.get("roster_groups")
            self.rounds.append(Delivered(rows[at: at + n], tuple(r["roster"]), None if rg is None else tuple(rg),
                                         None if mg is None else tuple(mg)))
            self.senders.append(np.asarray(r["senders"], np.int64))
            at += n
