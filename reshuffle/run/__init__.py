"""One federated-learning run, for every driver (``reshuffle simulate`` and the Flower ServerApp).

:mod:`~reshuffle.run.config` (settings), :mod:`~reshuffle.run.record` (what a round
records), :mod:`~reshuffle.run.report` (metrics.json, metrics.csv, plots) and
:mod:`~reshuffle.run.checkpoint` (resuming) are shared by the drivers, as are the
plug-ins and options they load (:mod:`~reshuffle.run.plugins`, :mod:`~reshuffle.run.options`).
"""
