"""In-process driver: routes bytes between N participants and the PS.

It is a thin transport: it never inspects a participant's state on behalf of
the PS. It injects dropouts per phase, lets tests tamper with any message
through *interceptors*, and records per-phase time and bytes.
"""

from __future__ import annotations

import time
from collections import defaultdict
from dataclasses import dataclass, replace
from typing import Callable, Iterable, Mapping

from reshuffle.crypto.signatures import SERVER_ID
from reshuffle.errors import ConfigError
from reshuffle.protocol.messages import peek_type
from reshuffle.protocol.participant import Participant
from reshuffle.protocol.phases import PHASES, phase_of
from reshuffle.protocol.server import RoundOutput, Server


@dataclass(frozen=True)
class Envelope:
    """One message in flight. ``sender``/``recipient`` are transport ids (SERVER_ID for the PS)."""

    sender: int
    recipient: int
    data: bytes

    def with_data(self, data: bytes) -> "Envelope":
        return replace(self, data=data)


Interceptor = Callable[[Envelope], Iterable[Envelope]]


class PhaseStats:
    """Seconds and bytes per phase, for the PS and summed over participants.

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
        for ph in PHASES:
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

    ``dropouts`` maps a phase name to participant ids that stop answering from
    that phase on (they receive nothing of it or later).
    """

    def __init__(
        self,
        server: Server,
        participants: Mapping[int, Participant],
        dropouts: Mapping[str, Iterable[int]] | None = None,
        interceptors: Iterable[Interceptor] = (),
    ) -> None:
        self.server = server
        self.participants = dict(participants)
        self.drop_at: dict[int, int] = {}
        for phase, ids in (dropouts or {}).items():
            if phase not in PHASES:
                raise ConfigError(f"unknown dropout phase {phase!r}; choose from {PHASES}")
            for i in ids:
                if i not in self.participants:
                    raise ConfigError(f"dropout names participant {i}, who is not in the round")
                self.drop_at[i] = min(self.drop_at.get(i, len(PHASES)), PHASES.index(phase))
        self.interceptors = list(interceptors)
        self.stats = PhaseStats()

    def _intercept(self, env: Envelope) -> list[Envelope]:
        envs = [env]
        for f in self.interceptors:
            envs = [out for e in envs for out in f(e)]
        return envs

    def _phase(self, data: bytes) -> str:
        t = peek_type(data)
        m = int.from_bytes(data[10:14], "big") if len(data) >= 14 else 0
        return phase_of(t, m, self.server.params.upload_m) if t is not None else "other"

    def _to_server(self, env: Envelope) -> None:
        ph = self.server.phase_name
        t0 = time.perf_counter()
        self.server.receive(env.sender, env.data)
        self.stats.ps_s[ph] += time.perf_counter() - t0

    def _deliver(self, env: Envelope) -> None:
        p = self.participants.get(env.recipient)
        if p is None:
            return
        ph = self._phase(env.data)
        if ph in PHASES and PHASES.index(ph) >= self.drop_at.get(env.recipient, len(PHASES)):
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

    def run(self) -> RoundOutput:
        t0 = time.perf_counter()
        outbox = self.server.start()
        self.stats.ps_s["setup"] += time.perf_counter() - t0
        while not self.server.done:
            for rcpt, data in outbox:
                for env in self._intercept(Envelope(SERVER_ID, rcpt, data)):
                    self._deliver(env)
            ph = self.server.phase_name
            t0 = time.perf_counter()
            outbox = self.server.close_phase()
            self.stats.ps_s[ph] += time.perf_counter() - t0
        return self.server.output
