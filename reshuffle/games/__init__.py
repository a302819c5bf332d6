"""Security statements of docs/security/README.md as executable games (see ``docs/security/``).

``run_games(quick)`` plays every game and returns one :class:`Result` per row
of ``reshuffle games``. Each statement has a secure instance (the measured
advantage must stay within its bound) and a deliberately weak one (the harness
must detect an advantage, and the reduction must transfer it as predicted).
"""

from __future__ import annotations

from fractions import Fraction
from typing import Callable

from reshuffle.crypto.group import get_group
from reshuffle.games.framework import Estimate, Result
from reshuffle.games.toy import ToyGroup


def _secure(game, assumption, e: Estimate, expected="abs(adv) ≤ bound") -> Result:
    return Result(game, assumption, e.advantage, e.bound, expected, abs(e.advantage) <= e.bound)


def _detected(game, assumption, e: Estimate, predicted: float) -> Result:
    ok = e.above(0) and abs(e.advantage - predicted) <= e.bound
    return Result(game, assumption, e.advantage, e.bound, f"> 0, ≈ {predicted:g} predicted", ok)


def _transfer(game, assumption, a: Estimate, b: Estimate, factor: float) -> Result:
    """B^A's advantage ≈ factor · A's, within both bounds."""
    slack = b.bound + factor * a.bound
    ok = abs(b.advantage - factor * a.advantage) <= slack
    rel = "Adv(A)" if factor == 1 else f"Adv(A)·{factor:g}"
    return Result(game, assumption, b.advantage, slack, f"≈ {rel} = {factor * a.advantage:.3f}", ok)


def _exact(game, assumption, value: Fraction, expected_value: Fraction, text: str) -> Result:
    return Result(game, assumption, float(value), 0.0, text, value == expected_value)


def _hybrid(game, assumption, a: Estimate, b_ddh: Estimate, b_aead: Estimate) -> Result:
    """Adv(A) ≈ 2·Adv(B_DDH) + Adv(B_AEAD): the hybrid identity, within all three bounds."""
    value = 2 * b_ddh.advantage + b_aead.advantage
    slack = a.bound + 2 * b_ddh.bound + b_aead.bound
    text = (f"≈ Adv(A) = {a.advantage:.3f} (B_DDH {b_ddh.advantage:.3f}, "
            f"B_AEAD {b_aead.advantage:.3f})")
    return Result(game, assumption, value, slack, text, abs(value - a.advantage) <= slack)


def _always(game, assumption, e: Estimate, text: str) -> Result:
    """An event that must happen in every trial (e.g. extraction of a witness)."""
    return Result(game, assumption, e.advantage, 0.0, text, e.wins == e.trials)


#: Rows ``run_games`` returns (a progress display's total; tests/test_games.py checks it).
GAME_ROWS = 62


class _Rows(list):
    """The results so far; ``on_result`` hears of each as it is added."""

    def __init__(self, on_result: Callable[[Result], None] | None) -> None:
        super().__init__()
        self.on_result = on_result

    def append(self, r: Result) -> None:
        super().append(r)
        if self.on_result is not None:
            self.on_result(r)

    def extend(self, rs) -> None:
        for r in rs:
            self.append(r)

    def __iadd__(self, rs):
        self.extend(rs)
        return self


def run_games(quick: bool = False, on_result: Callable[[Result], None] | None = None) -> list[Result]:
    from reshuffle.adversaries.weak import ReopensAfterUpload
    from reshuffle.games.anonymity import anonymity_game, anonymity_game_groups, schedule_game
    from reshuffle.games.basic import ddh_game, ot_request_distance, shamir_view_distance
    from reshuffle.games.masking import dlog_then_remove, masked_sum_games, remove_known_masks
    from reshuffle.games.ot_sender import dlog_adversary, honest_then_guess, ot_sender_games

    n_fast, n_mask, n_round = (400, 200, 40) if quick else (4000, 2000, 300)
    toy, weak_zp, tiny = ToyGroup.schnorr(41), ToyGroup.schnorr(41, full=True), ToyGroup.schnorr(17)
    ristretto = get_group("ristretto255")
    out: list[Result] = _Rows(on_result)

    out.append(_secure("ddh [toy 41-bit QR subgroup]", "DDH", ddh_game(toy, n_fast)))
    out.append(_detected("ddh [weak: all of Z_p*]", "none (Legendre symbol)", ddh_game(weak_zp, n_fast), 0.25))

    tiny_ot = ToyGroup(23)  # q = 11: every blind enumerated
    q, k = tiny_ot.order, 2
    sd = ot_request_distance(tiny_ot, 4, k)
    theory = 1 - Fraction(q - 2, q - 1) ** k
    out.append(_exact("ot receiver privacy [exact, q=11, k=2]", "none (information-theoretic)", sd, theory,
                      f"= 1−((q−2)/(q−1))^k = {float(theory):.3f} (< 2^-248 on Ristretto255)"))
    out.append(_exact("ot receiver privacy [weak: unblinded request]", "none", ot_request_distance(tiny_ot, 4, k, False),
                      Fraction(1), "= 1 (choices readable)"))

    a, b = ot_sender_games(toy, honest_then_guess, 16, 4, n_fast // 4)
    out.append(_secure("ot sender privacy: A vs OT [toy 41-bit]", "CT-CDH, ROM", a))
    out.append(_transfer("ot sender privacy: B^A vs CT-CDH [toy 41-bit]", "CT-CDH, ROM", a, b, 1))
    a, b = ot_sender_games(tiny, dlog_adversary, 16, 4, n_fast // 4)
    out.append(_detected("ot sender privacy: A vs OT [weak: 17-bit group]", "CT-CDH, ROM", a, 1.0))
    out.append(_transfer("ot sender privacy: B^A vs CT-CDH [weak: 17-bit]", "CT-CDH, ROM", a, b, 1))

    out.append(_exact("shamir privacy, t−1 shares [exact, Z_7, t=3]", "none (information-theoretic)",
                      shamir_view_distance(7, 3, 5, 2), Fraction(0), "= 0 (views identical)"))
    out.append(_exact("shamir privacy [weak: t shares]", "none", shamir_view_distance(7, 3, 5, 3), Fraction(1),
                      "= 1 (secret determined)"))

    a, b = masked_sum_games(ristretto, remove_known_masks, "prg", n_mask)
    out.append(_secure("masked sum hides v (x_i known): A [ristretto255, AES]", "PRG", a))
    out.append(_transfer("masked sum (x_i known): B^A vs PRG [ristretto255]", "PRG", a, b, 0.5))
    a, b = masked_sum_games(ristretto, remove_known_masks, "prg", n_mask, leak=True)
    out.append(_detected("masked sum (x_i known): A [weak: PRG seed leaked]", "PRG", a, 0.5))
    out.append(_transfer("masked sum: B^A vs PRG [weak: seed leaked]", "PRG", a, b, 0.5))
    a, b = masked_sum_games(toy, remove_known_masks, "ddh", n_mask)
    out.append(_secure("masked sum hides v (b_i known): A [toy 41-bit]", "DDH + PRG", a))
    out.append(_transfer("masked sum (b_i known): B^A vs DDH [toy 41-bit]", "DDH + PRG", a, b, 0.5))
    a, b = masked_sum_games(tiny, dlog_then_remove, "ddh", n_mask)
    out.append(_detected("masked sum (b_i known): A [weak: 17-bit group]", "DDH + PRG", a, 0.5))
    out.append(_transfer("masked sum: B^A vs DDH [weak: 17-bit]", "DDH + PRG", a, b, 0.5))

    out += _v2_games(toy, tiny, n_fast, n_mask)

    e = anonymity_game(6, 1, 4, n_round)
    out.append(_secure("source anonymity, real round [N=6, c=1, h=5]", "all of the above", e, "abs(adv) ≤ bound (adv over 1/h)"))
    e = anonymity_game(6, 1, 4, n_round, broken=True)
    out.append(_detected("source anonymity [weak: answers both share kinds]", "all of the above", e, 0.8))
    # The adversary also chooses the schedule: every legal order of PS messages (explorer, N = 4, n = 1024).
    n_sched = 8 if quick else 60
    e = schedule_game(4, 1024, 3000, n_sched)
    out.append(_secure("source anonymity, PS chooses the schedule [N=4, c=1, h=3]", "all of the above", e,
                       "abs(adv) ≤ bound (adv over 1/h)"))
    # 20 trials: the bound (0.50) stays below the prediction even when the upload of a trial follows a
    # second iteration (chance 1 %: n = 1,024 for 5 parties) and the adversary then links fewer rows.
    e = schedule_game(4, 1024, 3000, 20, ReopensAfterUpload)
    out.append(_detected("source anonymity, schedule [weak: opens after its upload]", "all of the above", e,
                         2 / 3))
    # Anonymity groups: the set is the honest members of the challenge row's group (h_j = 2 or 3 here).
    n_group = 20 if quick else 150
    # Groups of 4 (c_j = 1, t_j = 3): the broken participant's group can still certify U_M without the target.
    e = anonymity_game_groups(8, 1, 4, 4, n_group)
    out.append(_secure("source anonymity, groups [N=8, g=4, c=1, h_j ≤ 4]", "all of the above, per group", e,
                       "abs(adv) ≤ bound (adv over 1/h_j)"))
    e = anonymity_game_groups(8, 1, 4, 4, n_group, broken=True)
    out.append(_detected("source anonymity, groups [weak: answers both share kinds]", "all of the above, per group",
                         e, 5 / 7))  # 1 − E[1/h_j] = 1 − (3/7·1/3 + 4/7·1/4)
    # Many rounds of stable groups: perfect links between rounds, the PS picks whom it messages and when.
    from reshuffle.games.rounds import rounds_game

    n_rounds = 16 if quick else 120
    e = rounds_game(5, 5, 1, n_rounds)
    out.append(_secure("source anonymity, many rounds [N=5, g=5, c=1, h=4, perfect links]",
                       "all of the above, all-or-none", e, "abs(adv) ≤ bound (adv over 1/h_j)"))
    e = rounds_game(5, 5, 1, n_rounds, weak=True)
    out.append(_detected("source anonymity, many rounds [weak: a group delivers without a member]",
                         "all of the above", e, 3 / 4))  # every chain isolated: 1 − 1/h
    # Forming groups is the PS's choice: one that never forms them leaves a different subset out of each
    # ungrouped round (a chain's presence pattern is its owner's binary code).
    from reshuffle.games.rounds import ungrouped_game

    # 24 quick trials: the bound (0.45) stays below the prediction when a trial loses to an upload that found no
    # slot within R_max iterations (about 1 trial in 40) and leaves two owners that fit.
    n_ungrouped = 24 if quick else 60
    e = ungrouped_game(5, 1, n_ungrouped)
    out.append(_secure("source anonymity, PS never forms groups [N=5, c=1, h=4, presence patterns]",
                       "the group floor held by each participant", e, "abs(adv) ≤ bound (adv over 1/h)"))
    e = ungrouped_game(5, 1, n_ungrouped, opted_in=True)
    out.append(_detected("source anonymity, PS never forms groups [weak: participants take ungrouped rounds]",
                         "none", e, 3 / 4))  # every chain named: 1 − 1/h
    out += _epoch_games(quick)
    out += _dcnet_games(quick)
    out += _blame_games(quick)
    return list(out)


def _epoch_games(quick: bool) -> list[Result]:
    """The PS picks the epoch's first rounds: whom the draw lists (and redraws), and when a pseudonym counts as
    issued (docs/security/anonymity.md, "The PS picks the epoch's first rounds")."""
    from reshuffle.games.rounds import draw_game, issuance_game, reissue_game
    from reshuffle.protocol.params import TrustFloors

    n_draw, n_nym = (24, 2) if quick else (120, 12)  # 24: the bound (0.45) well below the prediction (2/3)
    out = []
    # N = 20, c = 4 (the members' own floor), g = 5: a list of exactly g is the target and its four colluders.
    e = draw_game(20, 5, 4, n_draw)
    out.append(_secure("source anonymity, PS picks the draw's candidates [N=20, g=5, c=4: g, 2g padded, redraws]",
                       "the candidate floor held by each participant", e,
                       "abs(adv) ≤ bound (adv over 1/3: 2g padded with every colluder)"))
    e = draw_game(20, 5, 4, n_draw, TrustFloors(draw=1))
    out.append(_detected("source anonymity, PS picks the draw's candidates [weak: no candidate floor, draw=1]",
                         "none", e, 2 / 3))  # the target alone with its colluders: 1 − 1/3
    # One colluder drops in the epoch's first round (before any consent, or before its upload): its group
    # delivers nothing that round; the weak node loses what it was issued, so only the late drop tells.
    e = issuance_game(5, 1, n_nym)
    out.append(Result("epoch pseudonyms, a colluder's drop in the epoch's first round [g=5, c=1: both rounds, before consent or upload]",
                      "none (the issuance rule)", e.advantage, 0.0,
                      "= 0 (no honest member silenced after the round its member dropped)", e.advantage == 0))
    e = issuance_game(5, 1, n_nym, kept_after_failure=False, stages=("upload",))
    out.append(_always("epoch pseudonyms, a colluder's drop [weak: a pseudonym kept only once delivered]", "none", e,
                       "= 1 (4 of 4 honest members silenced for the epoch)"))
    # The target restarts before round 2; this PS issues to whoever asks.
    e = reissue_game(5, 1, n_nym)
    out.append(_secure("epoch pseudonyms, PS issues again to whoever asks [g=5, c=1, a member restarts]",
                       "the pseudonym the node keeps", e, "abs(adv) ≤ bound (adv over 1/h)"))
    e = reissue_game(5, 1, n_nym, keeps_state=False, baseline=0.0)  # the rate it names the target
    out.append(_always("epoch pseudonyms, PS issues again [weak: the restarted node lost its pseudonym]", "none", e,
                       "= 1 (the target named in every trial)"))
    return out


def _dcnet_games(quick: bool) -> list[Result]:
    """A stable group of 5 in the DC-net round: the real round, a PS with 1-3 colluders (docs/security/dcnet.md)."""
    from reshuffle.games.dcnet import dcnet_game

    n, n_weak = (24, 40) if quick else (150, 150)
    out = []
    for coalition in ((3,), (3, 4), (1, 3, 4)):
        e = dcnet_game(coalition, n)
        name = f"source anonymity, DC-net group [g=5, {len(coalition)} colluder(s), h={5 - len(coalition)}]"
        out.append(_secure(name, "DDH + PRG", e, "abs(adv) ≤ bound (adv over 1/2)"))
    e = dcnet_game((1, 4), n_weak, weak=True)
    out.append(_detected("source anonymity, DC-net group [weak: ring key graph, the target's 2 neighbours collude]",
                         "DDH + PRG", e, 0.5))
    # Blame in the DC-net round: the PS's view and a colluder's keys against the third party's checker.
    from reshuffle.games.dcnet import dc_blame_game, unbound_checker

    n_blame = 2 if quick else 20
    assumption = "Ed25519 EUF-CMA, SHA-256 collisions, DLEQ soundness (ROM)"
    e = dc_blame_game(n_blame)
    out.append(Result("blame soundness, DC-net round: forger vs the checker [g=5, a lying colluder]", assumption,
                      e.advantage, e.bound, "= 0 (no evidence against an honest member accepted)", e.wins == 0))
    e = dc_blame_game(max(2, n_blame // 2), unbound_checker)
    out.append(_always("blame soundness, DC-net round [weak: h not recomputed from the transcript]", assumption, e,
                       "= 1 (an honest member framed in every trial)"))
    # Dropping a named member: the smaller group against the PS, the dropped member and two colluders.
    from reshuffle.games.dcnet import dc_drop_game, dc_drop_reads

    n_drop = 4 if quick else 60
    e = dc_drop_game(n_drop)
    out.append(_secure("source anonymity after a drop [g=6 -> 5, K_05 proved, 3 colluders, h=2 targets + 1]",
                       "DDH + PRG", e, "abs(adv) ≤ bound (adv over 1/2)"))
    e = dc_drop_reads(max(2, n_drop // 4))
    out.append(_always("source anonymity after a drop [weak: members drop whomever the PS names]", "DDH + PRG", e,
                       "= 1 (the target read alone in every trial)"))
    return out


def _blame_games(quick: bool) -> list[Result]:
    """Blame soundness: the forger, holding the PS's view of two rounds and a colluder's secrets, against
    the checkers; and against participants whose opening signs no h_M (it must win every trial)."""
    from reshuffle.adversaries.weak import OpensWithoutView
    from reshuffle.games.blame import blame_game

    n = 3 if quick else 20
    assumption = "Ed25519 EUF-CMA, SHA-256 collisions, DLEQ soundness (ROM)"
    e = blame_game(6, 2, n)
    out = [Result("blame soundness: forger vs every checker [N=6, c=1, 2 rounds]", assumption, e.advantage, e.bound,
                  "= 0 (no evidence against an honest member accepted)", e.wins == 0)]
    e = blame_game(6, 1, max(2, n // 4), OpensWithoutView)
    out.append(_always("blame soundness [weak: opening signs no h_M]", assumption, e,
                       "= 1 (an honest member framed in every trial)"))
    return out


def _v2_games(toy, tiny, n_fast: int, n_mask: int) -> list[Result]:
    """Channel confidentiality, row-credential and epoch-pseudonym unforgeability, DLEQ soundness."""
    from reshuffle.games.channel import FixedNonces, channel_games, sanity_adversary
    from reshuffle.games.credential import (
        credential_games,
        credential_trial,
        pseudonym_forger,
        pseudonym_games,
        sanity_forger,
    )
    from reshuffle.games.dleq import dleq_games
    from reshuffle.games.framework import estimate

    out: list[Result] = []
    cpa = "DDH + AEAD IND-CPA"
    a, b1, b2 = channel_games(toy, sanity_adversary, n_fast)
    out.append(_secure("channel IND-CPA: A vs channel [toy 41-bit, AES-GCM]", cpa, a))
    out.append(_hybrid("channel: 2·B_DDH^A + B_AEAD^A [toy 41-bit]", cpa, a, b1, b2))
    a, b1, b2 = channel_games(tiny, sanity_adversary, n_fast)
    out.append(_detected("channel IND-CPA: A [weak: 17-bit group]", cpa, a, 0.5))
    out.append(_hybrid("channel: 2·B_DDH^A + B_AEAD^A [weak: 17-bit]", cpa, a, b1, b2))
    a, b1, b2 = channel_games(toy, sanity_adversary, n_fast, FixedNonces)
    out.append(_detected("channel IND-CPA: A [weak: fixed nonce]", cpa, a, 0.5))
    out.append(_hybrid("channel: 2·B_DDH^A + B_AEAD^A [weak: fixed nonce]", cpa, a, b1, b2))

    omdh = "one-more DH, ROM"

    def one_more_dh(name: str, toy_adv: str, games, forger, extra=()) -> None:
        # The same four rows for each VOPRF-issued token: secure on the toy group, the reduction's
        # transfer, detected on the 17-bit group, its transfer; ``extra`` rows after the toy pair.
        a, b = games(toy, forger, n_mask)
        out.append(_secure(f"{name}: {toy_adv}", omdh, a))
        out.append(_transfer(f"{name}: B^A vs one-more DH [toy 41-bit]", omdh, a, b, 1))
        a, b = games(tiny, forger, n_mask)
        out.append(_detected(f"{name}: A [weak: 17-bit group]", omdh, a, 1.0))
        out.append(_transfer(f"{name}: B^A vs one-more DH [weak: 17-bit]", omdh, a, b, 1))
        out.extend(extra)

    e = estimate(lambda: credential_trial(toy, sanity_forger, keyless=True), n_mask, 0.0)
    one_more_dh("row credential", "A vs VOPRF issuer [toy 41-bit, q=3]", credential_games, sanity_forger,
                [_detected("row credential: A [weak: keyless, γ = 1]", omdh, e, 1.0)])
    one_more_dh("epoch pseudonym", "A vs issuer, one per identity [toy 41-bit, c=3]", pseudonym_games,
                pseudonym_forger)

    stat = "none (statistical, ROM)"
    forge, ext = dleq_games(toy, n_fast)
    out.append(_secure("dleq soundness: forger vs verify_dleq [toy 41-bit]", stat, forge))
    out.append(_always("dleq special soundness: witness from two challenges [toy 41-bit]", stat, ext,
                       "= 1 (extracted in every trial)"))
    forge, _ = dleq_games(toy, n_fast, weak=True)
    out.append(_detected("dleq soundness: forger [weak: challenge omits B, Z]", stat, forge, 1.0))
    return out


__all__ = ["Result", "run_games"]
