"""Parallel in-process driver: the participants' local work runs in worker processes.

:class:`ParallelRunner` drives the same :class:`~reshuffle.protocol.server.Server`
as :class:`~reshuffle.harness.runner.InProcessRunner`, in this process, and
hands each participant's messages to the worker that owns it. Workers are forked
once the round is built, so each inherits its participants' state machines and
model vectors (copy-on-write pages, never copied or pickled) and keeps them for
the whole round.

What crosses a process boundary is raw bytes only: a phase's messages go over a
pipe (``send_bytes``, each distinct message once), small replies come back the
same way, and a large reply (an upload) is written into its worker's
``multiprocessing.shared_memory`` slot, which the PS reads once it is that
reply's turn. Nothing is pickled. At the end each worker sends its
participants' views (slot, position, uploads, errors, reveals) in a fixed binary
layout, and they replace the views of the parent's copies.

Replies reach the PS in exactly the order of the single-process runner (the
order of the PS's outbox), so for the same seed the round's outcome is
identical. A worker holds at most one unread slot, so the PS never buffers
more than one large reply per worker. Every shared-memory segment is created
and unlinked by this process, also when a worker fails.

Frames (first byte is the kind; every field through :mod:`reshuffle.wire`):

========  ===========  =========================================================
kind      direction    body
========  ===========  =========================================================
BATCH     PS → worker  payload table, then (index, pid, payload number) items
ACK       PS → worker  the slot has been read
SLOT      PS → worker  name and size of the worker's new slot
VIEWS     PS → worker  send the views of your participants
MODELS    PS → worker  (pid, dtype, bytes) of trained models; answered by DONE
STOP      PS → worker  exit
REPLY     worker → PS  index, pid, wall and CPU seconds, inline replies, slot bytes
GROW      worker → PS  the slot must hold this many bytes
DONE      worker → PS  the batch is answered
VIEWDATA  worker → PS  the encoded views
FAILED    worker → PS  exception type, message and traceback
========  ===========  =========================================================
"""

from __future__ import annotations

import dataclasses
import multiprocessing as mp
import os
import secrets
import struct
import time
import traceback
from multiprocessing import resource_tracker, shared_memory
from multiprocessing.connection import Connection, wait
from typing import Iterable, Mapping

import numpy as np

from reshuffle import errors as _errors
from reshuffle.crypto.signatures import SERVER_ID
from reshuffle.errors import ConfigError, DecodeError, ProtocolError, ReShuffleError
from reshuffle.protocol.messages import ShareKind
from reshuffle.protocol.participant import Participant, ParticipantView
from reshuffle.protocol.schedule import STAGES
from reshuffle.harness.runner import Envelope, InProcessRunner, Interceptor
from reshuffle.protocol.driver import PS
from reshuffle.wire import Parser, Writer

BATCH, ACK, SLOT, VIEWS, STOP, REPLY, GROW, DONE, VIEWDATA, FAILED, MODELS = range(1, 12)
_MODEL_DTYPES = (np.dtype("<f4"), np.dtype("<u4"))
INLINE_MAX = 1 << 16  # replies up to 64 KiB travel in the pipe frame; larger ones in the slot
FIRST_SLOT = 1 << 20
SHM_PREFIX = "rshuf"  # names of this driver's segments: rshuf<pid>_<worker>_<n>_<random>
_MAX_ITEMS = 1 << 24
_MAX_NAME = 256
_SECONDS = struct.Struct(">d")


class WorkerFailed(ReShuffleError, RuntimeError):
    """A worker process raised or died; the round is abandoned."""


def _frame(kind: int, w: Writer | None = None) -> bytes:
    return bytes([kind]) + (w.bytes() if w is not None else b"")


def _parse(frame: bytes, what: str) -> tuple[int, Parser]:
    if not frame:
        raise DecodeError(f"{what}: empty frame")
    return frame[0], Parser(memoryview(frame)[1:], what)


# ---------------------------------------------------------------------- #
# Views: the participant's record of its own outcome, as bytes.

def _opt(w: Writer, v: int | None) -> None:
    w.u8(v is not None).u32(v or 0)


def _read_opt(p: Parser, field: str) -> int | None:
    present, v = p.u8(field + ".present"), p.u32(field)
    if present > 1:
        raise DecodeError(f"view field {field!r}: presence flag {present}")
    return v if present else None


def encode_view(pid: int, v: ParticipantView) -> bytes:
    """``v`` in a fixed layout; errors keep their class name and message."""
    w = Writer().u32(pid)
    _opt(w, v.slot)
    _opt(w, v.position)
    w.u32_list(sorted(v.uploaded)).u64(v.clipped).var(b"".join(v.row_tags)).u32(len(v.errors))
    for e in v.errors:
        w.var(type(e).__name__.encode()).var(str(e).encode())
    w.u32(len(v.revealed))
    for m, plan in sorted(v.revealed.items()):
        w.u32(m).u32(len(plan))
        for owner, kind in sorted(plan.items()):
            w.u32(owner).u8(int(kind))
    return w.bytes()


def _protocol_error(name: str, message: str) -> ProtocolError:
    from reshuffle.protocol import groups  # the group wrapper's refusals live beside the assignment

    cls = getattr(_errors, name, None) or getattr(groups, name, None)
    if not (isinstance(cls, type) and issubclass(cls, ProtocolError)):
        raise DecodeError(f"view names {name!r}, not a protocol error type")
    return cls(message)


def decode_view(p: Parser, max_items: int) -> tuple[int, ParticipantView]:
    """One view written by :func:`encode_view`."""
    pid = p.u32("pid")
    v = ParticipantView(slot=_read_opt(p, "slot"), position=_read_opt(p, "position"))
    v.uploaded = set(p.u32_list("uploaded", max_items))
    v.clipped = p.u64("clipped")
    tags = p.var("row tags", 16 * max_items)
    if len(tags) % 16:
        raise DecodeError(f"view of {pid}: row tags of {len(tags)} bytes, not 16 each")
    v.row_tags = tuple(tags[k : k + 16] for k in range(0, len(tags), 16))
    n_err = p.u32("errors")
    if n_err > max_items:
        raise DecodeError(f"view of {pid} lists {n_err} errors")
    v.errors = [_protocol_error(p.var("error type", 128).decode(), p.var("error", 1 << 16).decode())
                for _ in range(n_err)]
    n_m = p.u32("revealed")
    if n_m > max_items:
        raise DecodeError(f"view of {pid} lists reveals for {n_m} invocations")
    for _ in range(n_m):
        m, n_owner = p.u32("m"), p.u32("owners")
        if n_owner > max_items:
            raise DecodeError(f"view of {pid} reveals {n_owner} shares in invocation {m}")
        plan = {}
        for _ in range(n_owner):
            owner, kind = p.u32("owner"), p.u8("kind")
            if kind not in ShareKind._value2member_map_:
                raise DecodeError(f"view of {pid}: share kind {kind}")
            plan[owner] = ShareKind(kind)
        v.revealed[m] = plan
    return pid, v


# ---------------------------------------------------------------------- #
# Worker side

class _WorkerSlot:
    """The worker's end of its shared-memory slot."""

    def __init__(self, conn: Connection) -> None:
        self.conn = conn
        self.shm: shared_memory.SharedMemory | None = None
        self.busy = False

    def wait_ack(self) -> None:
        if self.busy:
            kind, _ = _parse(self.conn.recv_bytes(), "PS frame")
            if kind != ACK:
                raise WorkerFailed(f"expected ACK from the PS, got frame kind {kind}")
            self.busy = False

    def put(self, parts: list[bytes]) -> int:
        """Write ``parts`` back to back into the slot (growing it first if needed)."""
        need = sum(len(x) for x in parts)
        self.wait_ack()
        if self.shm is None or self.shm.size < need:
            self.conn.send_bytes(_frame(GROW, Writer().u64(need)))
            kind, p = _parse(self.conn.recv_bytes(), "PS frame")
            if kind != SLOT:
                raise WorkerFailed(f"expected SLOT from the PS, got frame kind {kind}")
            name = p.var("name", _MAX_NAME).decode()
            if self.shm is not None:
                self.shm.close()
            self.shm = shared_memory.SharedMemory(name=name)
        pos = 0
        for x in parts:
            self.shm.buf[pos : pos + len(x)] = x
            pos += len(x)
        self.busy = True
        return need

    def close(self) -> None:
        if self.shm is not None:
            self.shm.close()


def _answer_batch(p: Parser, participants: Mapping[int, Participant], slot: _WorkerSlot) -> None:
    payloads = [p.var("payload") for _ in range(p.u32("payloads"))]
    n = p.u32("items")
    for _ in range(n):
        index, pid, which = p.u32("index"), p.u32("pid"), p.u32("payload")
        t0, c0 = time.perf_counter(), time.thread_time()
        replies = participants[pid].handle(payloads[which])
        dt, cpu = time.perf_counter() - t0, time.thread_time() - c0
        big = [r for r in replies if len(r) > INLINE_MAX]
        w = Writer().u32(index).u32(pid).raw(_SECONDS.pack(dt)).raw(_SECONDS.pack(cpu)).u32(len(replies))
        for r in replies:
            # A large reply is only its length here; its bytes are in the slot, in order.
            w.u8(len(r) > INLINE_MAX)
            w.u64(len(r)) if len(r) > INLINE_MAX else w.var(r)
        w.u64(slot.put(big) if big else 0)
        slot.conn.send_bytes(_frame(REPLY, w))
    p.finish()
    slot.conn.send_bytes(_frame(DONE))


def _worker_main(conn: Connection, participants: Mapping[int, Participant]) -> None:
    slot = _WorkerSlot(conn)
    try:
        while True:
            kind, p = _parse(conn.recv_bytes(), "PS frame")
            if kind == STOP:
                break
            if kind == ACK:
                slot.busy = False
            elif kind == BATCH:
                _answer_batch(p, participants, slot)
            elif kind == MODELS:
                for _ in range(p.u32("models")):
                    pid, code = p.u32("pid"), p.u8("dtype")
                    if code >= len(_MODEL_DTYPES) or pid not in participants:
                        raise WorkerFailed(f"model frame for participant {pid} with dtype code {code}")
                    participants[pid].provide_model(np.frombuffer(p.var("model"), dtype=_MODEL_DTYPES[code]).copy())
                p.finish()
                conn.send_bytes(_frame(DONE))
            elif kind == VIEWS:
                w = Writer().u32(len(participants))
                for pid, pp in sorted(participants.items()):
                    w.var(encode_view(pid, pp.view))
                conn.send_bytes(_frame(VIEWDATA, w))
            else:
                raise WorkerFailed(f"unexpected frame kind {kind} from the PS")
    except BaseException as exc:  # reported to the PS, which raises it
        try:
            w = Writer().var(type(exc).__name__.encode()).var(str(exc).encode()).var(traceback.format_exc().encode())
            conn.send_bytes(_frame(FAILED, w))
        except OSError:
            pass
    finally:
        slot.close()
        conn.close()


# ---------------------------------------------------------------------- #
# PS side

class _Worker:
    """The PS's handle on one worker: its process, pipe and slot."""

    def __init__(self, index: int, proc, conn: Connection) -> None:
        self.index, self.proc, self.conn = index, proc, conn
        self.shm: shared_memory.SharedMemory | None = None
        self.grown = 0
        self.batch_open = False  # a BATCH was sent and its DONE not yet read
        self.slot_unread = False  # a REPLY names bytes in the slot that were not yet ACKed


def _raise_failure(w: _Worker, p: Parser) -> None:
    name, message, tb = (p.var(f, 1 << 20).decode(errors="replace") for f in ("type", "message", "traceback"))
    cls = getattr(_errors, name, None)
    cause = WorkerFailed(f"worker {w.index} raised {name}: {message}\n{tb}")
    if isinstance(cls, type) and issubclass(cls, ReShuffleError):
        raise cls(message) from cause
    raise cause


class ParallelRunner(InProcessRunner):
    """:class:`InProcessRunner` with the participants spread over ``workers`` processes.

    Parameters are those of :class:`InProcessRunner`, plus ``workers`` (>= 1).
    Interceptors run in this process: first on the PS's messages of a phase,
    then on the replies in outbox order. After :meth:`run` (also a failed one),
    ``participants[i].view`` holds what participant i's worker recorded.

    Raises
    ------
    ConfigError : ``workers`` < 1, or the platform cannot fork.
    WorkerFailed : a worker died or raised something not in :mod:`reshuffle.errors`
        (an error type from there is re-raised as that type).
    """

    def __init__(
        self,
        server: PS,
        participants: Mapping[int, Participant],
        dropouts: Mapping[str, Iterable[int]] | None = None,
        interceptors: Iterable[Interceptor] = (),
        workers: int = 2,
    ) -> None:
        super().__init__(server, participants, dropouts, interceptors)
        if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
            raise ConfigError(f"workers must be a positive integer, got {workers!r}")
        if "fork" not in mp.get_all_start_methods():
            raise ConfigError("the parallel runner needs the 'fork' start method (Linux, macOS)")
        self.n_workers = min(workers, max(len(self.participants), 1))
        order = sorted(self.participants)
        self._owner = {pid: k % self.n_workers for k, pid in enumerate(order)}
        self._workers: list[_Worker] = []
        self._segments: list[shared_memory.SharedMemory] = []
        self._tag = f"{SHM_PREFIX}{os.getpid()}_{secrets.token_hex(3)}"

    # -- lifecycle ------------------------------------------------------ #
    def _start_workers(self) -> None:
        ctx = mp.get_context("fork")
        # One resource tracker for all: workers that attach a slot must not each start
        # their own, which would unlink the PS's segments when the worker exits.
        resource_tracker.ensure_running()
        for w in range(self.n_workers):
            mine = {pid: p for pid, p in self.participants.items() if self._owner[pid] == w}
            parent, child = ctx.Pipe(duplex=True)
            proc = ctx.Process(target=_worker_main, args=(child, mine), daemon=True, name=f"reshuffle-worker-{w}")
            proc.start()
            child.close()
            self._workers.append(_Worker(w, proc, parent))

    def _shutdown(self) -> None:
        for w in self._workers:
            try:
                w.conn.send_bytes(_frame(STOP))
            except OSError:
                pass
        for w in self._workers:
            w.proc.join(timeout=5)
            if w.proc.is_alive():
                w.proc.terminate()
                w.proc.join(timeout=5)
            w.conn.close()
        for shm in self._segments:
            shm.close()
            shm.unlink()
        self._segments.clear()

    def _new_slot(self, w: _Worker, need: int) -> None:
        size = max(FIRST_SLOT, need + need // 8)
        w.grown += 1
        shm = shared_memory.SharedMemory(name=f"{self._tag}_{w.index}_{w.grown}", create=True, size=size)
        self._segments.append(shm)
        if w.shm is not None:
            # The worker still maps the old segment until it reads SLOT; the name can go now.
            self._segments.remove(w.shm)
            w.shm.close()
            w.shm.unlink()
        w.shm = shm
        w.conn.send_bytes(_frame(SLOT, Writer().var(shm.name.encode())))

    def _recv(self, w: _Worker) -> bytes:
        try:
            return w.conn.recv_bytes()
        except (EOFError, OSError):
            w.proc.join(timeout=5)  # reaped, so its exit code is known
            raise WorkerFailed(f"worker {w.index} (pid {w.proc.pid}) exited with code {w.proc.exitcode}") from None

    # -- one phase ------------------------------------------------------ #
    def _dispatch(self, envs: list[Envelope]) -> list[tuple[int, str]]:
        """Send each worker its share of ``envs``; returns (pid, phase) per item index."""
        items: list[tuple[int, str]] = []
        per_worker: list[list[tuple[int, int, bytes]]] = [[] for _ in self._workers]
        for env in envs:
            if env.recipient not in self.participants:
                continue
            ph = self._stage(env.data)
            if ph in STAGES and STAGES.index(ph) >= self.drop_at.get(env.recipient, len(STAGES)):
                continue  # dropped out: the message goes unanswered
            self.stats.participant_recv[ph] += len(env.data)
            per_worker[self._owner[env.recipient]].append((len(items), env.recipient, env.data))
            items.append((env.recipient, ph))
        for w, mine in zip(self._workers, per_worker):
            table: dict[bytes, int] = {}
            for _, _, data in mine:
                table.setdefault(data, len(table))
            body = Writer().u32(len(table))
            for data in table:
                body.var(data)
            body.u32(len(mine))
            for index, pid, data in mine:
                body.u32(index).u32(pid).u32(table[data])
            w.conn.send_bytes(_frame(BATCH, body))
            w.batch_open = True
        return items

    def _read_reply(self, w: _Worker, p: Parser, n_items: int) -> tuple[int, int, float, list, int]:
        index, pid = p.u32("index"), p.u32("pid")
        dt = _SECONDS.unpack(p.fixed(_SECONDS.size, "seconds"))[0]
        cpu = _SECONDS.unpack(p.fixed(_SECONDS.size, "cpu seconds"))[0]
        n = p.u32("replies")
        if index >= n_items or n > _MAX_ITEMS:
            raise WorkerFailed(f"worker {w.index} answered item {index} of {n_items} with {n} replies")
        replies = [p.u64("length") if p.u8("in slot") else p.var("reply") for _ in range(n)]
        in_slot = p.u64("slot bytes")
        p.finish()
        return index, pid, (dt, cpu), replies, in_slot

    def _take_slot(self, w: _Worker, replies: list, in_slot: int) -> list[bytes]:
        """Replace slot lengths by the bytes, then free the slot."""
        if not in_slot:
            return replies
        if w.shm is None or in_slot > w.shm.size:
            raise WorkerFailed(f"worker {w.index} claims {in_slot} bytes in its slot")
        out, pos = [], 0
        for r in replies:
            if isinstance(r, int):
                out.append(bytes(w.shm.buf[pos : pos + r]))
                pos += r
            else:
                out.append(r)
        if pos != in_slot:
            raise WorkerFailed(f"worker {w.index}: slot holds {in_slot} bytes, replies {pos}")
        self._ack(w)
        return out

    def _ack(self, w: _Worker) -> None:
        w.slot_unread = False
        w.conn.send_bytes(_frame(ACK))

    def _collect(self, items: list[tuple[int, str]]) -> None:
        """Feed every reply to the PS in item order, as the workers produce them."""
        ready: dict[int, tuple[_Worker, float, list, int]] = {}
        conns = {w.conn: w for w in self._workers}
        live = set(conns)
        nxt = 0
        while nxt < len(items) or live:
            if nxt in ready:
                w, times, replies, in_slot = ready.pop(nxt)
                pid, ph = items[nxt]
                self._record(pid, ph, times, self._take_slot(w, replies, in_slot))
                nxt += 1
                continue
            if not live:
                raise WorkerFailed(f"workers finished without answering item {nxt} of {len(items)}")
            for c in wait(list(live)):
                w = conns[c]
                kind, p = _parse(self._recv(w), f"frame of worker {w.index}")
                if kind == REPLY:
                    index, pid, times, replies, in_slot = self._read_reply(w, p, len(items))
                    if pid != items[index][0]:
                        raise WorkerFailed(f"worker {w.index} answered item {index} as participant {pid}")
                    ready[index] = (w, times, replies, in_slot)
                    w.slot_unread = bool(in_slot)
                elif kind == GROW:
                    self._new_slot(w, p.u64("bytes"))
                elif kind == DONE:
                    w.batch_open = False
                    live.discard(c)
                elif kind == FAILED:
                    _raise_failure(w, p)
                else:
                    raise WorkerFailed(f"worker {w.index} sent frame kind {kind}")

    def _record(self, pid: int, ph: str, times: tuple[float, float], replies: list[bytes]) -> None:
        dt, cpu = times
        self.stats.participant_cpu_s[ph] += cpu
        self.stats.participant_s[ph] += dt
        self.stats.per_participant_s[pid][ph] += dt
        for r in replies:
            self.stats.participant_sent[ph] += len(r)
            for out in self._intercept(Envelope(pid, SERVER_ID, r)):
                self._to_server(out)

    def _fetch_views(self) -> None:
        for w in self._workers:
            w.conn.send_bytes(_frame(VIEWS))
        for w in self._workers:
            p = self._expect(w, VIEWDATA, "its views")
            n = p.u32("views")
            for _ in range(n):
                vp = Parser(p.var("view"), f"view from worker {w.index}")
                pid, view = decode_view(vp, len(self.participants) + 64)
                vp.finish()
                if self._owner.get(pid) != w.index:
                    raise WorkerFailed(f"worker {w.index} sent the view of participant {pid}")
                # In place: a wrapper (a grouped participant) may expose its inner view read-only.
                target = self.participants[pid].view
                for f in dataclasses.fields(ParticipantView):
                    setattr(target, f.name, getattr(view, f.name))
            p.finish()

    # -- the schedule's transport hooks (InProcessRunner.advance runs the steps) -- #
    def _begin(self) -> None:
        self._start_workers()

    def _exchange(self, envs: list[Envelope]) -> None:
        self._collect(self._dispatch(envs))

    def _end(self, failed: bool) -> None:
        try:
            if not failed:
                self._fetch_views()
            else:
                # The views of a failed round are still the participants' own record of it.
                try:
                    if self._workers and all(w.proc.is_alive() for w in self._workers):
                        self._drain_and_fetch_views()
                except (ReShuffleError, OSError, EOFError):
                    pass
        finally:
            self._shutdown()

    def provide_models(self, models) -> None:
        """Send each worker its participants' trained models (between ``run_offline`` and ``run``)."""
        per_worker: list[Writer] = [Writer() for _ in self._workers]
        counts = [0] * len(self._workers)
        for pid, model in sorted(models.items()):
            if pid not in self.participants:
                raise ConfigError(f"model for participant {pid}, who is not in the round")
            a = np.ascontiguousarray(model)
            if a.dtype not in _MODEL_DTYPES:
                raise ConfigError(f"model of participant {pid} has dtype {a.dtype}; float32 or uint32 expected")
            w = self._owner[pid]
            per_worker[w].u32(pid).u8(_MODEL_DTYPES.index(a.dtype)).var(a.tobytes())
            counts[w] += 1
        for w, body, n in zip(self._workers, per_worker, counts):
            w.conn.send_bytes(_frame(MODELS, Writer().u32(n).raw(body.bytes())))
        for w in self._workers:
            self._expect(w, DONE, "taking its models")

    def _expect(self, w, want: int, what: str):
        """The body of worker ``w``'s next frame, which must be of kind ``want`` (a FAILED frame re-raises)."""
        kind, p = _parse(self._recv(w), f"frame of worker {w.index}")
        if kind == FAILED:
            _raise_failure(w, p)
        if kind != want:
            raise WorkerFailed(f"worker {w.index} sent frame kind {kind} instead of {what}")
        return p

    def _drain_and_fetch_views(self) -> None:
        """After the PS gave up mid-phase: let the workers finish the batch, then read the views."""
        for w in self._workers:
            if w.slot_unread:
                self._ack(w)
            while w.batch_open:
                if not w.conn.poll(60):
                    raise WorkerFailed(f"worker {w.index} did not finish its batch")
                kind, p = _parse(self._recv(w), f"frame of worker {w.index}")
                if kind == DONE:
                    w.batch_open = False
                elif kind == FAILED:
                    raise WorkerFailed(f"worker {w.index} failed")
                elif kind == REPLY:
                    *_, in_slot = self._read_reply(w, p, _MAX_ITEMS)
                    if in_slot:
                        self._ack(w)
                elif kind == GROW:
                    self._new_slot(w, p.u64("bytes"))
        self._fetch_views()


def make_runner(
    server: PS,
    participants: Mapping[int, Participant],
    dropouts: Mapping[str, Iterable[int]] | None = None,
    interceptors: Iterable[Interceptor] = (),
    workers: int | None = None,
) -> InProcessRunner:
    """The single-process runner for ``workers`` None or 1, else a :class:`ParallelRunner`."""
    if workers is None or workers == 1:
        return InProcessRunner(server, participants, dropouts, interceptors)
    return ParallelRunner(server, participants, dropouts, interceptors, workers)
