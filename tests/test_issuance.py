"""Issuance that cannot silence a group: a pseudonym counts as issued once its holder holds it.

The lockout: one member of a stable group sends no OT request in its group's first round of the
epoch. Its group delivers nothing that round (all or none), and its other members got their
pseudonym evaluations with no certificate after them. Recorded at the OT answer, they would be
refused a second issuance in every later round of the epoch: a group silenced by one silence.
"""

from __future__ import annotations

import numpy as np
import pytest

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
    # The Shamir-shared round (its certificate); the DC-net round's twin follows.
    iss = EpochIssuer("ristretto255", 1)
    r = shuffle(_models(1), T=1, seed=1, groups=GROUPS, epoch_key=iss, identities=IDS, dropouts={"ot": [0]},
                raise_on_failure=False, dcnet=False)
    # The failed group's members got an evaluation but never consented (their group refused the online
    # set without member 0): not recorded, and dropped by them (they ask again). The delivering group's are
    # recorded and kept.
    assert iss.issued == {IDS[i] for i in GROUPS[1]}
    assert all(r.held[i] is None for i in GROUPS[0]) and all(r.held[i] is not None for i in GROUPS[1])


def test_a_dcnet_issuance_is_recorded_at_the_first_count_vector_the_member_sent():
    # The DC-net round has no certificate: a member answers DC_KEYS with its first count vector only once it
    # checked and unblinded its pseudonym, and keeps it from then on; the PS records it at that vector. Member 0,
    # silent there, is neither recorded nor holding; its group's others hold theirs though the group failed.
    iss = EpochIssuer("ristretto255", 1)
    r = shuffle(_models(1), T=1, seed=1, groups=GROUPS, epoch_key=iss, identities=IDS, dropouts={"ot": [0]},
                raise_on_failure=False, dcnet=True)
    assert sorted(r.positions) == GROUPS[1]
    assert iss.issued == set(IDS[1:])
    assert r.held[0] is None and all(r.held[i] is not None for i in range(1, 10))


@pytest.mark.parametrize("dcnet", [True, False])
@pytest.mark.parametrize("stage", ["setup", "ot", "reserve", "upload"])
def test_every_recorded_issuance_is_held_whichever_stage_a_member_drops_at(stage, dcnet):
    # The lockout's invariant: the PS records no identity whose member dropped its pseudonym.
    iss = EpochIssuer("ristretto255", 1)
    r = shuffle(_models(1), T=1, seed=1, groups=GROUPS, epoch_key=iss, identities=IDS, dropouts={stage: [0]},
                raise_on_failure=False, dcnet=dcnet)
    assert iss.issued <= {IDS[i] for i, n in r.held.items() if n is not None}
    assert {IDS[i] for i in GROUPS[1]} <= iss.issued


def test_a_member_that_kept_its_pseudonym_never_asks_again():
    iss = EpochIssuer("ristretto255", 1)
    r1 = shuffle(_models(1), T=1, seed=1, groups=GROUPS, epoch_key=iss, identities=IDS, raise_on_failure=False)
    r2 = shuffle(_models(2), T=2, seed=2, groups=GROUPS, epoch_key=iss, identities=IDS, pseudonyms=r1.held,
                 raise_on_failure=False)
    assert not any(isinstance(e.error, pseudonym.AlreadyIssued) for e in r2.errors)
    assert sorted(r2.pseudonyms) == sorted(r1.pseudonyms)


# --------------------------------------------------------------------------- the simulator's real channel
def _dropout_rounds(seed: int, rounds: int = 5, clients: int = 10):
    """The real channel over ``rounds`` rounds of one epoch in two stable sets of 5, with 10 % of the
    clients dropping out at a random stage each round (as the simulator draws them). Per round: the
    clients whose set had a member drop before unmask, and the clients delivered."""
    from reshuffle.protocol.schedule import STAGES
    from reshuffle.run.delivery import UNMASK, RealShuffle, Uploads
    from reshuffle.run.pseudonyms import EpochBook

    sets = (tuple(range(5)), tuple(range(5, 10)))
    channel = RealShuffle(epochs=EpochBook())
    rng = np.random.default_rng(seed)
    out = []
    for T in range(1, rounds + 1):
        who = rng.choice(clients, size=clients // 10, replace=False)
        drops: dict = {}
        for i in who.tolist():
            drops.setdefault(STAGES[int(rng.integers(len(STAGES)))], []).append(int(i))
        models = {i: np.full(6, T + i / 10, np.float32) for i in range(clients)}
        d = channel.deliver(Uploads(T, np.zeros(6, np.float32), models, drops, {}, frozenset(), (), sets))
        hit = {i for s in sets for i in s
               if any(j in s for ph, ids in drops.items() if ph != UNMASK for j in ids)}
        out.append((hit, set(d.senders)))
    return out


@pytest.mark.parametrize("seed", [1, 2, 3, 4])
def test_the_real_channel_at_10_percent_dropouts_loses_a_set_only_in_the_round_its_member_dropped(seed):
    for T, (hit, delivered) in enumerate(_dropout_rounds(seed), start=1):
        assert delivered == set(range(10)) - hit, f"round {T}: delivered {sorted(delivered)}, sets hit {sorted(hit)}"


def test_rule_aware_attackers_replay_the_rule_under_the_pseudonyms_the_deployed_rule_reads():
    # With the real channel, the deployed history rule reads the pseudonyms issued by the protocol; the
    # attackers' replay of it must read the same ones, not the ideal channel's.
    from reshuffle.run.config import SimConfig
    from reshuffle.run.delivery import PSEUDONYM
    from reshuffle.sim import Simulation

    sim = Simulation(SimConfig(dataset="digits", model="logreg", batch_size=16, seed=3, shuffle="real", rounds=2,
                               clients=10, set_size=5, rule="foolsgold"))
    from reshuffle.run.delivery import Uploads

    sets = sim.sets.sets
    models = {i: np.full(sim.W_g.size, i / 10, np.float32) for i in range(10)}
    ideal = {i: sim.attackers.names(i) for i in range(10)}
    delivery = sim.rounds.receive(sim.channel.deliver(Uploads(1, sim.W_g, models, {}, {}, frozenset(), (), sets)))
    deployed = dict(zip((int(i) for i in delivery.senders), delivery.meta[PSEUDONYM]))
    assert sorted(deployed) == list(range(10))
    assert all(sim.attackers.names(i) == name != ideal[i] for i, name in deployed.items())
