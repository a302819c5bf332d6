"""Issuance that cannot silence a group: a pseudonym counts as issued once its holder holds it.

The lockout: one member of a stable group sends no OT request in its group's first round of the
epoch. Its group delivers nothing that round (all or none), and its other members got their
pseudonym evaluations with no certificate after them. Recorded at the OT answer, they would be
refused a second issuance in every later round of the epoch: a group silenced by one silence.
"""

from __future__ import annotations

import numpy as np

from reshuffle.harness.api import shuffle
from reshuffle.protocol import pseudonym
from reshuffle.protocol.pseudonym import EpochIssuer
from reshuffle.protocol.server import Server

GROUPS = [[0, 1, 2, 3, 4], [5, 6, 7, 8, 9]]
IDS = [200 + i for i in range(10)]


def _models(T):
    return [np.full(4, 10 * T + i, np.float32) for i in range(10)]


class _EarlyRecorder:
    """A PS behaviour that records an issuance when its evaluation leaves (at the OT answer)."""

    role = "ps"
    colluders = ()

    def make(self, *a, **kw):
        s = Server(*a, **kw)
        evaluate = s.nyms.evaluate

        def at_the_answer(identity, blinded, rng=None):
            out = evaluate(identity, blinded, rng)
            s.nyms.confirm([identity])
            return out
        s.nyms.evaluate = at_the_answer
        return s


def _epoch(rounds: int = 6, ps=()):
    """Rounds 1..rounds of one epoch in two stable groups; member 0 sends no OT request in round 1.
    Per round, the members whose model was delivered."""
    iss = EpochIssuer("ristretto255", 1)
    held: dict = {}
    delivered = []
    for T in range(1, rounds + 1):
        r = shuffle(_models(T), T=T, seed=T, groups=GROUPS, epoch_key=iss, identities=IDS, pseudonyms=held,
                    dropouts={"ot": [0]} if T == 1 else None, raise_on_failure=False, adversaries=list(ps))
        held.update({i: n for i, n in r.held.items() if n is not None})
        delivered.append(sorted(r.positions))
    return delivered, iss


def test_one_silent_member_in_the_epochs_first_round_silences_nobody_later():
    delivered, iss = _epoch()
    # Round 1: the silent member's group delivers nothing (all or none), the other group everything.
    assert delivered[0] == GROUPS[1]
    # Rounds 2-6: every member of both groups, each with the pseudonym it kept (0 silenced).
    assert all(d == list(range(10)) for d in delivered[1:])
    assert iss.issued == set(IDS)


def test_the_control_a_ps_recording_at_the_answer_silences_the_four_honest_members():
    delivered, _ = _epoch(3, ps=[_EarlyRecorder()])
    assert delivered[0] == GROUPS[1]
    assert all(d == GROUPS[1] for d in delivered[1:])  # 4 honest members silenced for the epoch


def test_an_issuance_is_recorded_at_the_certificate_the_member_got():
    iss = EpochIssuer("ristretto255", 1)
    r = shuffle(_models(1), T=1, seed=1, groups=GROUPS, epoch_key=iss, identities=IDS, dropouts={"ot": [0]},
                raise_on_failure=False)
    # The failed group's members got an evaluation but never consented (their group refused the online
    # set without member 0): not recorded, and dropped by them (they ask again). The delivering group's are
    # recorded and kept.
    assert iss.issued == {IDS[i] for i in GROUPS[1]}
    assert all(r.held[i] is None for i in GROUPS[0]) and all(r.held[i] is not None for i in GROUPS[1])


def test_a_member_that_kept_its_pseudonym_never_asks_again():
    iss = EpochIssuer("ristretto255", 1)
    r1 = shuffle(_models(1), T=1, seed=1, groups=GROUPS, epoch_key=iss, identities=IDS, raise_on_failure=False)
    r2 = shuffle(_models(2), T=2, seed=2, groups=GROUPS, epoch_key=iss, identities=IDS, pseudonyms=r1.held,
                 raise_on_failure=False)
    assert not any(isinstance(e.error, pseudonym.AlreadyIssued) for e in r2.errors)
    assert sorted(r2.pseudonyms) == sorted(r1.pseudonyms)
