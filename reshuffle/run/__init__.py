"""One federated-learning run, for every driver (``reshuffle simulate`` and the Flower ServerApp).

:mod:`~reshuffle.run.round` is the round loop both drivers run (:class:`FLRound`:
the FL step over a delivery, the record, the state a checkpoint keeps);
:mod:`~reshuffle.run.delivery` is how models reach the PS in process (the real
shuffle, its ideal functionality, plaintext; the Flower driver has its own channel);
:mod:`~reshuffle.run.sampling` draws the cohorts and derives the run's seeds.
:mod:`~reshuffle.run.config` (settings), :mod:`~reshuffle.run.record` (what a
round records), :mod:`~reshuffle.run.report` (metrics.json, metrics.csv, plots),
:mod:`~reshuffle.run.checkpoint` (resuming) and the plug-ins and options a run loads
(:mod:`~reshuffle.run.plugins`, :mod:`~reshuffle.run.options`) are shared too.
"""
