"""In-process driver: routes bytes between N participants and the PS.

It is a thin transport: it executes the round's schedule
(:mod:`~reshuffle.protocol.schedule`) through the PS's ``start`` / ``receive`` /
``close_phase`` and never inspects a participant's state on behalf of the PS.
It can pause before the first step that needs the models (:meth:`run_offline`),
so that setup, OT and reservation run while participants train. It injects dropouts per stage, lets tests tamper with any message
through *interceptors*, and records per-stage time and bytes.
"""

from __future__ import annotations

import time
from collections import defaultdict
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Callable, Iterable, Mapping

from reshuffle.crypto.signatures import SERVER_ID
from reshuffle.errors import ConfigError
from reshuffle.protocol.messages import peek_header
from reshuffle.protocol.participant import Participant
from reshuffle.protocol.schedule import STAGES, RoundTrips, stage_of
from reshuffle.protocol.driver import PS
from reshuffle.protocol.server import RoundOutput

if TYPE_CHECKING:
    import numpy as np


@dataclass(frozen=True)
class Envelope:
    """One message in flight. ``sender``/``recipient`` are transport ids (SERVER_ID for the PS)."""

    sender: int
    recipient: int
    data: bytes

    def with_data(self, data: bytes) -> "Envelope":
        return replace(self, data=data)


Interceptor = Callable[[Envelope], Iterable[Envelope]]


class StageStats:
    """Seconds and bytes per stage, for the PS and summed over participants.

    ``participant_cpu_s`` is the CPU time of the participants' handlers (their
    thread's), which other load on the machine does not inflate.
    """

    def __init__(self) -> None:
        self.ps_s: dict[str, float] = defaultdict(float)
        self.participant_s: dict[str, float] = defaultdict(float)
        self.participant_cpu_s: dict[str, float] = defaultdict(float)
        self.participant_sent: dict[str, int] = defaultdict(int)
        self.participant_recv: dict[str, int] = defaultdict(int)
        self.per_participant_s: dict[int, dict[str, float]] = defaultdict(lambda: defaultdict(float))

    def as_dict(self, n_participants: int) -> dict:
        out = {}
        for ph in STAGES:
            out[ph] = {
                "ps_s": self.ps_s.get(ph, 0.0),
                "participant_s": self.participant_s.get(ph, 0.0) / max(n_participants, 1),
                "participant_cpu_s": self.participant_cpu_s.get(ph, 0.0) / max(n_participants, 1),
                "participant_max_s": max((d.get(ph, 0.0) for d in self.per_participant_s.values()), default=0.0),
                "participant_bytes_sent": self.participant_sent.get(ph, 0) / max(n_participants, 1),
                "participant_bytes_received": self.participant_recv.get(ph, 0) / max(n_participants, 1),
                "ps_bytes_sent": self.participant_recv.get(ph, 0),
                "ps_bytes_received": self.participant_sent.get(ph, 0),
            }
        return out


class InProcessRunner:
    """Run one round among ``participants`` and ``server`` in this process.

    ``dropouts`` maps a stage name to participant ids that stop answering from
    that stage on (they receive nothing of it or later).
    """

    def __init__(
        self,
        server: PS,
        participants: Mapping[int, Participant],
        dropouts: Mapping[str, Iterable[int]] | None = None,
        interceptors: Iterable[Interceptor] = (),
    ) -> None:
        self.server = server
        self.participants = dict(participants)
        self.drop_at: dict[int, int] = {}
        for stage, ids in (dropouts or {}).items():
            if stage not in STAGES:
                raise ConfigError(f"unknown dropout stage {stage!r}; choose from {STAGES}")
            for i in ids:
                if i not in self.participants:
                    raise ConfigError(f"dropout names participant {i}, who is not in the round")
                self.drop_at[i] = min(self.drop_at.get(i, len(STAGES)), STAGES.index(stage))
        self.interceptors = list(interceptors)
        self.stats = StageStats()
        self.trips = RoundTrips()
        self._outbox: list | None = None  # the PS's messages of the step to run next

    def _intercept(self, env: Envelope) -> list[Envelope]:
        envs = [env]
        for f in self.interceptors:
            envs = [out for e in envs for out in f(e)]
        return envs

    def _stage(self, data: bytes) -> str:
        h = peek_header(data)
        if h is None or h.type is None:
            return "other"
        return stage_of(h.type, h.m, self.server.params.upload_m)

    def _to_server(self, env: Envelope) -> None:
        ph = self.server.stage_name
        t0 = time.perf_counter()
        self.server.receive(env.sender, env.data)
        self.stats.ps_s[ph] += time.perf_counter() - t0

    def _deliver(self, env: Envelope) -> None:
        p = self.participants.get(env.recipient)
        if p is None:
            return
        ph = self._stage(env.data)
        if ph in STAGES and STAGES.index(ph) >= self.drop_at.get(env.recipient, len(STAGES)):
            return  # dropped out: the message goes unanswered
        self.stats.participant_recv[ph] += len(env.data)
        t0, c0 = time.perf_counter(), time.thread_time()
        replies = p.handle(env.data)
        dt = time.perf_counter() - t0
        self.stats.participant_cpu_s[ph] += time.thread_time() - c0
        self.stats.participant_s[ph] += dt
        self.stats.per_participant_s[env.recipient][ph] += dt
        for r in replies:
            self.stats.participant_sent[ph] += len(r)
            for out in self._intercept(Envelope(env.recipient, SERVER_ID, r)):
                self._to_server(out)

    # -- executing the schedule (transport hooks: _exchange, _begin, _end) -- #
    def _exchange(self, envs: list[Envelope]) -> None:
        """Carry one step's PS messages to the participants and their replies to the PS."""
        for env in envs:
            self._deliver(env)

    def _begin(self) -> None:
        """Before the first step (the parallel runner starts its workers here)."""

    def _end(self, failed: bool) -> None:
        """After the last step (``failed``: the round raised)."""

    def advance(self, pause_online: bool) -> bool:
        """Execute the schedule (:mod:`~reshuffle.protocol.schedule`) step by step.

        Returns True when the round is done, False when ``pause_online`` stopped it
        before its first step that needs the participants' models.
        """
        try:
            if self._outbox is None:
                self._begin()
                t0 = time.perf_counter()
                self._outbox = self.server.start()
                self.stats.ps_s["setup"] += time.perf_counter() - t0
            while not self.server.done:
                step = self.server.step
                if pause_online and not step.offline:
                    return False
                if self._outbox:
                    self.trips.record(step)
                envs = [e for rcpt, data in self._outbox for e in self._intercept(Envelope(SERVER_ID, rcpt, data))]
                self._exchange(envs)
                ph = self.server.stage_name
                t0 = time.perf_counter()
                self._outbox = self.server.close_phase()
                self.stats.ps_s[ph] += time.perf_counter() - t0
        except BaseException:
            self._end(failed=True)
            raise
        self._end(failed=False)
        return True

    def run_offline(self) -> bool:
        """Run every step that needs no model (setup, OT, reservation); True if the round already ended."""
        return self.advance(pause_online=True)

    def provide_models(self, models: Mapping[int, "np.ndarray"]) -> None:
        """Hand participants their trained models (between :meth:`run_offline` and :meth:`run`)."""
        for pid, model in models.items():
            if pid not in self.participants:
                raise ConfigError(f"model for participant {pid}, who is not in the round")
            self.participants[pid].provide_model(model)

    def run(self) -> RoundOutput:
        """Run the round to its end (from the start, or from where :meth:`run_offline` paused)."""
        self.advance(pause_online=False)
        return self.server.output
