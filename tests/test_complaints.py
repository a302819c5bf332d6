"""Verifiable shares (docs/protocol.md §6.4): batched Feldman checks, public complaints, named dealers."""

import dataclasses

import pytest

import reshuffle
from reshuffle.adversaries import make_adversary
from reshuffle.adversaries.participants import BadShare
from reshuffle.errors import ProtocolError
from reshuffle.protocol import complaints as cpl
from reshuffle.protocol import messages as msg
from reshuffle.harness.api import build_round
from reshuffle.protocol.messages import MsgType
from reshuffle.protocol.participant import Participant
from reshuffle.adversaries.base import ParticipantBehaviour
from tests.protocol_helpers import expected_models, make_updates, multiset

N = 8  # c = 1, t = 5


def keys_of(ups, params, seed):
    server, _ = build_round(ups, params, seed=seed)
    return {i: c.key for i, c in server._roster.items()}


def test_bad_dealer_is_named_and_the_round_survives_with_only_t_answering():
    # v1: one inconsistent share aborted the round whenever only t members answered.
    ups = make_updates(N, d=6, seed=1)
    drops = {"unmask": [5, 6]}  # 8 - 1 (excluded dealer) - 2 = 5 = t answer at the upload's unmask
    r = reshuffle.shuffle(ups, seed=1, adversaries=[BadShare(pids=(1,), victim=0)], dropouts=drops)
    assert set(r.blamed) == {1}
    ev = r.output.evidence[1]
    assert ev.kind == cpl.KIND_BAD_ANSWER and ev.subject == 0
    keys = keys_of(ups, r.params, 1)
    cpl.verify_share_evidence(ev, keys, r.params)  # a third party checks it from the roster keys
    with pytest.raises(ProtocolError):
        cpl.verify_share_evidence(dataclasses.replace(ev, subject=2), keys, r.params)
    assert r.online == [0, 2, 3, 4, 5, 6, 7]
    assert multiset(r.models) == expected_models(ups, r.online)


class HonestAfterAll(ParticipantBehaviour):
    """Deals a bad share to P0 but answers the complaint with the right one."""

    class participant_class(BadShare.participant_class):
        def _on_complaints(self, s, m):
            from dataclasses import replace

            ys = list(s.dealing.dealt[0])
            ys[0] = (ys[0] - 1) % self.ctx.group.order
            s = replace(s, dealing=replace(s.dealing, dealt={**s.dealing.dealt, 0: tuple(ys)}))
            return super()._on_complaints(s, m)


def test_a_good_public_answer_replaces_the_share_and_names_nobody():
    ups = make_updates(N, d=6, seed=2)
    b = HonestAfterAll(pids=(1,))
    b.victim = 0
    r = reshuffle.shuffle(ups, seed=2, adversaries=[b])
    assert r.blamed == {}
    assert r.online == list(range(N)) and multiset(r.models) == expected_models(ups, range(N))
    assert r.views[0].errors and "Feldman" in str(r.views[0].errors[0])  # P0 complained


class SilentDealer(ParticipantBehaviour):
    class participant_class(BadShare.participant_class):
        def _on_complaints(self, s, m):
            return s, []


def test_a_silent_accused_dealer_is_excluded_not_named():
    ups = make_updates(N, d=6, seed=3)
    b = SilentDealer(pids=(1,))
    b.victim = 0
    r = reshuffle.shuffle(ups, seed=3, adversaries=[b])
    assert r.blamed == {}
    assert 1 not in r.online and multiset(r.models) == expected_models(ups, r.online)
    assert r.online == [i for i in range(N) if i != 1]


def test_false_complaints_name_nobody_and_cost_nothing_else():
    ups = make_updates(N, d=6, seed=4)
    r = reshuffle.shuffle(ups, seed=4, adversaries=[make_adversary("false-complaint")])
    assert r.blamed == {} and r.online == list(range(N))
    assert multiset(r.models) == expected_models(ups, range(N))


class WrongCombined(ParticipantBehaviour):
    """Sends a Ĉ that is not the weighted combination of its commitments."""

    class participant_class(Participant):
        def _seal(self, m):
            if m.TYPE == MsgType.SHARE_BUNDLE:
                comb = (m.combined[0] * m.combined[0],) + m.combined[1:]
                m = msg.ShareBundle(m.T, m.m, m.sender, m.ciphertexts, comb)
            return super()._seal(m)


def test_inconsistent_combined_commitment_names_the_dealer_before_the_upload():
    # Honest recipients' shares fail the wrong Ĉ: they complain, and the PS checks the accused dealer's
    # Ĉ against its commitments: its signed advertisement and bundle name it, whatever it answers.
    ups = make_updates(N, d=6, seed=5)
    r = reshuffle.shuffle(ups, seed=5, adversaries=[WrongCombined(pids=(3,))])
    assert set(r.blamed) == {3} and r.output.evidence[3].kind == cpl.KIND_BAD_COMMITMENT
    cpl.verify_share_evidence(r.output.evidence[3], keys_of(ups, r.params, 5), r.params)
    assert r.online == [i for i in range(N) if i != 3]


class LyingRevealer(ParticipantBehaviour):
    """Reveals a wrong value for one share at the upload's unmasking."""

    class participant_class(Participant):
        def _reveal(self, s, m, online):
            plan, resp = super()._reveal(s, m, online)
            if m != self.params.upload_m:
                return plan, resp
            owner, kind, share = resp.shares[0]
            bad = type(share)(share.x, (share.y + 1) % self.ctx.group.order)
            return plan, msg.UnmaskResponse(resp.T, resp.m, resp.sender, ((owner, kind, bad),) + resp.shares[1:])


def test_a_wrong_revealed_share_is_dropped_by_the_commitments_and_the_round_completes():
    # Not named: the setup check's weights are known to dealers, so an honest member could hold a bad share.
    ups = make_updates(N, d=6, seed=6)
    r = reshuffle.shuffle(ups, seed=6, adversaries=[LyingRevealer(pids=(2,))])
    assert r.blamed == {}
    assert any(e.sender == 2 and "Feldman" in str(e.error) for e in r.errors)
    assert r.online == list(range(N)) and multiset(r.models) == expected_models(ups, range(N))


class CancellingDealer(ParticipantBehaviour):
    """Deals P0 two wrong shares whose errors cancel under the weights of its bundle as first built.

    With weights fixed before the shares (e.g. from the advertisement alone) these would pass the
    batch check. Here the weights hash the bundle's ciphertexts, so changing the shares changes the
    weights and the cancellation is gone.
    """

    class participant_class(Participant):
        def _on_advertise_list(self, s, m):
            s, (bundle,) = super()._on_advertise_list(s, m)
            from dataclasses import replace

            from reshuffle.protocol.complaints import Dealer, combined_for
            from reshuffle.protocol.participant import SETUP_PHASE_AD, _share_payload

            g, q, advert = self.ctx.group, self.ctx.group.order, s.dealing.advert
            rho = Dealer(advert, bundle.digest(), bundle.combined).rho()
            ys = list(s.dealing.dealt[0])
            e = 12345
            ys[0] = (ys[0] + e) % q
            ys[1] = (ys[1] - e * rho[0] * pow(rho[1], -1, q)) % q  # rho_0 e_0 + rho_1 e_1 = 0
            ct = s.peers.channels[0].seal(SETUP_PHASE_AD, _share_payload(g, ys))
            # What it dealt is what it publishes when P0 complains.
            s = replace(s, dealing=replace(s.dealing, dealt={**s.dealing.dealt, 0: tuple(ys)}))
            cts = tuple((j, ct if j == 0 else c) for j, c in bundle.ciphertexts)
            digest = msg.ShareBundle(bundle.T, bundle.m, bundle.sender, cts).digest()
            return s, [msg.ShareBundle(bundle.T, bundle.m, bundle.sender, cts, combined_for(advert, digest))]


def test_share_errors_cannot_be_chosen_to_cancel_in_the_batch_check():
    ups = make_updates(N, d=6, seed=7)
    r = reshuffle.shuffle(ups, seed=7, adversaries=[CancellingDealer(pids=(1,))])
    # P0's check fails, it complains, the dealer's published shares fail too: named, excluded.
    assert set(r.blamed) == {1} and r.output.evidence[1].kind == cpl.KIND_BAD_ANSWER
    cpl.verify_share_evidence(r.output.evidence[1], keys_of(ups, r.params, 7), r.params)
    assert r.online == [i for i in range(N) if i != 1]
    assert multiset(r.models) == expected_models(ups, r.online)


@pytest.mark.parametrize("dealer,victim,index,delta", [
    (0, 11, 9, 1),  # the last share of the first dealer
    (7, 3, 4, -1),  # a middle dealer and share, off by -1
    (11, 0, 1, 2**200 + 3),  # the last dealer, a large error
])
def test_one_bad_share_among_many_dealers_is_caught_and_pinned_on_its_dealer(dealer, victim, index, delta):
    # Prepare: 12 dealers; one of them is off in one of its 2M shares to one recipient (the case a
    # check that batches many dealers must still catch and attribute)
    n = 12
    ups = make_updates(n, d=4, seed=3)
    # Execute
    r = reshuffle.shuffle(ups, seed=3, adversaries=[BadShare(pids=(dealer,), victim=victim, index=index,
                                                             delta=delta)])
    # Assert: only the victim complained, about that dealer alone; that dealer alone is named, with
    # evidence a third party checks; everyone else's model arrives
    complained = {i: [e for e in v.errors if "Feldman" in str(e)] for i, v in sorted(r.views.items())}
    assert [i for i, errs in complained.items() if errs] == [victim]
    assert set(r.blamed) == {dealer}
    ev = r.output.evidence[dealer]
    assert ev.kind == cpl.KIND_BAD_ANSWER and ev.subject == victim
    cpl.verify_share_evidence(ev, keys_of(ups, r.params, 3), r.params)
    assert r.online == [i for i in range(n) if i != dealer]
