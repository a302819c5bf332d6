"""Blame soundness: evidence against an honest participant never passes a third party's check.

The challenger plays real rounds (the real :class:`~reshuffle.protocol.participant.Participant`
over bytes, in process) with one roster and a PS the adversary runs: the forging PS of
:mod:`reshuffle.adversaries.forger`, which has one colluder complain about every dealer
(each honest dealer publishes a share), opens a reservation iteration (every member reveals
its x_r) and forces the blame step (every member opens its keys of the decoy rows). The
adversary holds the PS's view of every round (each signed message, every secret it rebuilt)
and its colluders' secrets and signing keys, and outputs evidence of any kind
(:class:`~reshuffle.protocol.blame.Evidence`, :class:`~reshuffle.protocol.opening.CountEvidence`,
:class:`~reshuffle.protocol.complaints.ShareEvidence`) naming a participant. It wins if the
participant is honest and the evidence passes the checker a third party runs with the
roster's keys and the round's parameters. Advantage = Pr[win] (the trivial strategy never
wins).

The adversary is the forger: it assembles the strongest evidence against each honest member
and changes every field to every value it can find or make; it outputs the first piece a
checker accepts. Against :class:`~reshuffle.adversaries.weak.OpensWithoutView` (an opening that
does not sign the h_M its keys were derived under, as before the fix) it wins every trial.
"""

from __future__ import annotations

from reshuffle.adversaries.forger import accepted, play_rounds
from reshuffle.games.framework import Estimate, estimate
from reshuffle.protocol.participant import Participant


def blame_trial(N: int = 6, rounds: int = 2, participant_cls: type[Participant] = Participant) -> bool:
    """One trial with fresh keys and randomness (OS randomness): True if forged evidence names an honest member."""
    h = play_rounds(N, rounds, participant_cls=participant_cls)
    found, _ = accepted(h.views, h.honest, h.keys)
    return bool(found)


def blame_game(N: int, rounds: int, trials: int, participant_cls: type[Participant] = Participant) -> Estimate:
    """Advantage of the forger over ``trials`` trials (baseline 0: an honest member is never named)."""
    return estimate(lambda: blame_trial(N, rounds, participant_cls), trials, 0.0)


__all__ = ["blame_game", "blame_trial"]
