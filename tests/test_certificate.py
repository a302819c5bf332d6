"""The certificate check (docs/protocol.md §6.3): t valid signatures of U_m members on one view."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from reshuffle.errors import Refused
from reshuffle.crypto.signatures import SigningKey
from reshuffle.protocol import messages as msg
from reshuffle.protocol.transcript import CONSENT_CONTEXT, check_certificate

N, T, M = 7, 3, 2
KEYS = {i: SigningKey.from_seed(bytes([i + 1]) * 32) for i in range(N + 1)}
VKS = {i: k.verify_key for i, k in KEYS.items()}
H = bytes(range(32))


@settings(max_examples=40, deadline=None)
@given(st.lists(st.sampled_from(["good", "forged", "other-view", "outsider", "repeat"]), max_size=12),
       st.integers(1, N))
def test_certificate_holds_exactly_when_t_distinct_members_signed_this_view(kinds, t):
    # Prepare: members 0..N-1 (U_m); each entry a good signature, a forgery, a signature of another
    # view, one by a non-member (N), or a repeat of the previous signer
    members = list(range(N))
    stmt = msg.consent_statement(T, M, members, H)
    other = msg.consent_statement(T, M, members, bytes(32))
    sigs, good_signers, nxt = [], set(), 0
    for kind in kinds:
        pid = min(nxt, N - 1)
        if kind == "good":
            sigs.append((pid, KEYS[pid].sign(CONSENT_CONTEXT, stmt)))
            good_signers.add(pid)
        elif kind == "forged":
            sigs.append((pid, bytes(64)))
        elif kind == "other-view":
            sigs.append((pid, KEYS[pid].sign(CONSENT_CONTEXT, other)))
        elif kind == "outsider":
            sigs.append((N, KEYS[N].sign(CONSENT_CONTEXT, stmt)))
        elif sigs:
            sigs.append(sigs[-1])
        nxt += kind != "repeat"
    # Execute / Assert: it holds iff t distinct members signed this view; it returns t of them
    # (all of them with every=True)
    if len(good_signers) >= t:
        first = check_certificate(T, M, members, H, sigs, VKS, t)
        assert len(first) == t and set(first) <= good_signers
        assert set(check_certificate(T, M, members, H, sigs, VKS, t, every=True)) == good_signers
    else:
        with pytest.raises(Refused, match="valid signatures"):
            check_certificate(T, M, members, H, sigs, VKS, t)
