"""Secrets never print: no secret-bearing object shows its secrets in ``repr`` (one log line of a state).

The attack: a participant's state, a session or a key pair written to a log with
``%r`` (or in a traceback's locals). Before, ``repr`` of a participant's state after
the offline steps printed its DH secrets, its self seeds, its polynomials, the
shares it held, its credential and its OT tokens; of a Flower session, the PEM
signing key and the session seed.
"""

from __future__ import annotations

import numpy as np

from reshuffle.crypto.channel import DHKeyPair
from reshuffle.crypto.group import get_group
from reshuffle.crypto.shamir import Share
from reshuffle.crypto.signatures import SigningKey
from reshuffle.harness.api import build_round, identities
from reshuffle.harness.runner import InProcessRunner
from reshuffle.protocol.params import RoundParams
from reshuffle.protocol.session import SessionState


def _forms(secret) -> list[str]:
    """How a secret could appear in a repr: decimal and hex for ints, repr and hex for bytes."""
    if isinstance(secret, (bytes, bytearray)):
        return [repr(bytes(secret))[2:-1], bytes(secret).hex()]
    return [str(secret), format(secret, "x")]


def _leaks(text: str, secrets: list) -> list:
    return [s for s in secrets if any(f in text for f in _forms(s))]


def _ints(tree) -> list[int]:
    """Every integer in nested tuples/dicts (share values, coefficients)."""
    if isinstance(tree, dict):
        return [x for v in tree.values() for x in _ints(v)]
    if isinstance(tree, (tuple, list)):
        return [x for v in tree for x in _ints(v)]
    return [tree] if isinstance(tree, int) else []


def test_a_participants_state_during_the_offline_steps_prints_none_of_its_secrets():
    # Prepare: the offline steps of a seeded round (keys, dealing, shares held, credential, OT tokens),
    # with participant 0's state kept after every message it handled
    server, parts = build_round([None] * 4, RoundParams.default(4, 3), seed=7)
    states = []
    handle = parts[0].handle

    def keep(data):
        out = handle(data)
        states.append(parts[0].state)
        return out
    parts[0].handle = keep
    InProcessRunner(server, parts).run_offline()
    secrets: list = []
    for st in states:
        if st.session is not None:
            keys = st.session.keys
            secrets += [keys.enc.secret, *(k.secret for k in keys.mask), *keys.seeds]
        if st.dealing is not None:
            secrets += [*_ints(st.dealing.polys), *_ints(dict(st.dealing.dealt or {}))]
        secrets += _ints(dict(st.held))
        if st.cred is not None:
            secrets += [st.cred.r, st.cred.blind]
            if st.cred.value is not None:
                secrets += [st.cred.value.r, st.cred.value.y]
        if st.slots is not None and st.slots.tokens:
            secrets += list(st.slots.tokens.values())
    # Only values no public number could spell by chance (at least 64 bits)
    secrets = list({s for s in secrets if (s.bit_length() if isinstance(s, int) else 8 * len(s)) >= 64})
    assert len(secrets) > 20 and any(st.dealing for st in states) and any(st.slots for st in states)
    # Execute / Assert: no state, and no part of one, prints any of them
    for st in states:
        parts_of = [st, st.session, st.dealing, st.cred, st.slots, st.slots and st.slots.reservation]
        for obj in (o for o in parts_of if o is not None):
            assert _leaks(repr(obj), secrets) == [], type(obj).__name__
    assert _leaks(repr(parts[0].view), secrets) == []


def test_key_pairs_shares_sessions_and_identities_print_their_type_not_their_secrets():
    g = get_group("ristretto255")
    kp = DHKeyPair.generate(g)
    share = Share(3, g.random_scalar())
    sk = SigningKey.from_seed(bytes(range(32)))
    seed, model = bytes(range(100, 132)), np.arange(8, dtype=np.float32) + 0.123
    ident = identities(3, seed=1)
    session = SessionState.new(2, 5, model, sk, ident.roster[2], ident.ca.verify_key, b"h" * 32, seed)
    private = [ident.ps_key.to_pem(), *(k.to_pem() for k in ident.keys)]
    assert _leaks(repr(kp), [kp.secret]) == [] and "DHKeyPair(" in repr(kp)
    assert _leaks(repr(share), [share.y]) == [] and "Share(x=3" in repr(share)
    # The PEM body is what a leak would show; the session's model is the participant's own training result
    assert _leaks(repr(session), [sk.to_pem()[28:60], seed, model.tobytes()[:16]]) == []
    assert "pid=2" in repr(session)
    assert _leaks(repr(ident), [p[28:60] for p in private]) == []
