"""Re-Shuffle on Flower: a ServerApp and a ClientApp that drive the same protocol core.

The apps only move bytes: the ServerApp runs :class:`reshuffle.protocol.server.Server`
and turns its outbox into Flower messages; the ClientApp keeps a
:class:`reshuffle.protocol.session.SessionState` in its ``Context`` and answers
with what the participant answers. See ``docs/flower.md``.
"""
