"""The decision grid: attacks × rules × settings × seeds, run resumably and summarised.

``reshuffle grid`` is the command line; :mod:`~reshuffle.evaluation.grid` holds the
grid as data, :mod:`~reshuffle.evaluation.cell` one cell's run and file,
:mod:`~reshuffle.evaluation.backends` where cells run (this process, local
processes, Ray), :mod:`~reshuffle.evaluation.runner` the resumable loop,
:mod:`~reshuffle.evaluation.summary` the statistics and
:mod:`~reshuffle.evaluation.report` the tables, heat maps and docs section.
Importing this package loads neither torch nor Ray.
"""

from reshuffle.evaluation.grid import Cell, Grid, Partition, Setting, default_grid, load_grid_toml, validate

__all__ = ["Cell", "Grid", "Partition", "Setting", "default_grid", "load_grid_toml", "validate"]
