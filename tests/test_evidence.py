"""Evidence binds only what the accused signed (docs/protocol.md §9, "What evidence may read").

The PS assembles evidence, so every field a checker reads but the accused did not sign is
the PS's to choose. The material is what a PS holds after two rounds with one roster
(:func:`~reshuffle.adversaries.forger.play_rounds`): every signed message, the secrets it
rebuilt, a colluder's secrets and signing key. For each evidence kind the strongest evidence
against an honest member (its own messages, a colluder's DLEQ-proved pair key) is refused,
and so is every change of any of its fields, one or two at a time, to values drawn from the
material or made up. Before the fix a checker accepted evidence with another h (9 of 9 honest
participants at N = 10, three seeds), a colluder's second advertisement (9 of 9), and a
dealer's advertisement or bundle of another round (7 of 7 at N = 8).
"""

from __future__ import annotations

import dataclasses
from functools import lru_cache

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import reshuffle
from reshuffle.adversaries import make_adversary
from reshuffle.adversaries.forger import Forgery, accepted, check, forge, play_rounds
from reshuffle.adversaries.weak import OpensWithoutView
from reshuffle.errors import ProtocolError
from reshuffle.protocol import complaints as cpl
from reshuffle.protocol import opening
from reshuffle.protocol.blame import KIND_FALSE_OPENING, KIND_NONZERO

KINDS = (KIND_NONZERO, KIND_FALSE_OPENING, opening.KIND_BAD_COUNT, opening.KIND_FALSE_OBJECTION,
         cpl.KIND_BAD_COMMITMENT, cpl.KIND_BAD_ANSWER)


@lru_cache(maxsize=None)
def _material():
    h = play_rounds(N=8, rounds=2, seed=3)
    candidates = [f for v in h.views for f in forge(v, h.views, h.honest)]
    return h, candidates


def _bases(kind: str) -> list[Forgery]:
    return [f for f in _material()[1] if f.kind == kind and f.field == "assembled"]


def _pool(kind: str, field: str) -> list:
    """Every value the forger found or made for ``field`` of ``kind``, from both rounds."""
    out = []
    for f in _material()[1]:
        if f.kind == kind:
            v = getattr(f.evidence, field)
            if v not in out:
                out.append(v)
    return out


def _value(draw, kind: str, field: str, now):
    """A replacement value: one the material holds, a corrupted one, or one made up."""
    pool = _pool(kind, field)
    if isinstance(now, bytes):
        made = st.one_of(st.binary(max_size=96), st.sampled_from(pool).flatmap(
            lambda b: st.integers(0, max(len(b) - 1, 0)).map(lambda i: b[:i] + bytes([(b[i:i + 1] or b"\0")[0] ^ 0x40])
                                                               + b[i + 1:])))
    elif isinstance(now, int):
        made = st.integers(-1, 2**40)
    elif field in ("counts", "certified"):
        made = st.lists(st.integers(0, 9), max_size=12).map(tuple)
    else:  # row hashes
        made = st.lists(st.binary(min_size=32, max_size=32), max_size=4).map(tuple)
    return draw(st.one_of(st.sampled_from(pool), made))


def _refused(f: Forgery, params) -> None:
    with pytest.raises(ProtocolError):
        check(f.evidence, _material()[0].keys, params)


@pytest.mark.parametrize("kind", KINDS)
def test_the_strongest_evidence_against_an_honest_member_is_refused(kind):
    h, _ = _material()
    bases = _bases(kind)
    assert bases, f"the material holds no {kind} evidence to assemble"
    for f in bases:
        _refused(f, h.views[0].params)


@pytest.mark.parametrize("kind", KINDS)
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_changing_any_fields_of_evidence_against_an_honest_member_is_refused(kind, data):
    h, _ = _material()
    base = data.draw(st.sampled_from(_bases(kind)))
    names = [f.name for f in dataclasses.fields(base.evidence) if f.name != "kind"]
    chosen = data.draw(st.lists(st.sampled_from(names), min_size=1, max_size=2, unique=True))
    ev = base.evidence
    for name in chosen:
        ev = dataclasses.replace(ev, **{name: _value(data.draw, kind, name, getattr(ev, name))})
    _refused(dataclasses.replace(base, evidence=ev), h.views[0].params)


def test_the_forger_finds_nothing_in_two_rounds_and_tries_every_kind():
    h, candidates = _material()
    found, tried = accepted(h.views, h.honest, h.keys)
    assert found == [] and tried == len(candidates) > 3000
    assert {f.kind for f in candidates} == set(KINDS)


def test_the_forger_frames_everyone_who_signs_an_opening_without_its_view():
    # The opening as it was: keys only, no h_M. A colluder proves K_ij; the PS picks the h.
    h = play_rounds(N=8, rounds=1, seed=4, participant_cls=OpensWithoutView)
    found, _ = accepted(h.views, h.honest, h.keys)
    assert {f.pid for f in found if f.kind == KIND_FALSE_OPENING} == set(h.honest)


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_forged_false_opening_evidence_frames_nobody(seed):
    # N = 10, one colluder, c = 2 respected: the PS runs a blame step every member accepts, collects the
    # honest openings and writes evidence with another h, or with a pair key proved under a second key its
    # colluder advertises (before: the checker accepted both against 9 of 9 honest participants).
    b = make_adversary("forge-evidence")
    rng = np.random.default_rng(seed)  # model values only
    ups = [rng.normal(size=16).astype(np.float32) for _ in range(10)]
    r = reshuffle.shuffle(ups, seed=seed, adversaries=[b], raise_on_failure=False)
    honest = [i for i in range(10) if i not in b.colluders]
    v = b.holds(r, honest)
    assert v.holds and b.forged == [] and b.tried > 1500, v.detail
    tried = {(f.kind, f.field) for v_ in b.views() for f in forge(v_, b.views(), honest)}
    assert (KIND_FALSE_OPENING, "upload_h") in tried and (KIND_FALSE_OPENING, "partner's second key") in tried
    assert r.failure is None and not set(r.blamed) & set(honest)
