#!/bin/sh
# The framing grid, resumable (finished cells are skipped), at the lowest priority on two cores: the cells that
# decide the default first (Fashion-MNIST, Flower's Dir(0.3), MLP, seed 1, framing and PoisonedFL; the idle runs
# each class's loss is measured against; the rest of seed 1), LeNet-5's seed 1 under the worst attacks so far, the
# idle runs of every seed, LeNet-5's every seed under the worst case so far (saturate-cover), then every cell of
# experiments/configs/framing-grid.toml. Progress: experiments/evaluation/framing/grid.log; tables:
# experiments/evaluation/framing/worst_case.md, docs/results.md ("The framing grid") and the README, after every cell.
set -u
cd "$(dirname "$0")/.."
export PYTHONPATH="$PWD"
CFG=experiments/configs/framing-grid.toml
OUT=experiments/evaluation/framing
mkdir -p "$OUT"
# Every stage's summary is the whole configuration's; docs/results.md's framing section and the README's brief one
# follow it.
run() { nice -n 19 .venv/bin/reshuffle grid --config "$CFG" --out "$OUT" --jobs 2 --docs docs/results.md --docs README.md "$@" \
          >> "$OUT/grid.log" 2>&1; }
run --partitions dirichlet:0.3 --models mlp --seeds 1 --attacks frame-ban frame-class poisonedfl
run --models mlp --seeds 1 --attacks idle
run --partitions dirichlet:0.3 --models mlp --seeds 1
run --partitions dirichlet:0.3 --models lenet5 --seeds 1 --attacks idle frame-ban saturate-cover slow-drift sleeper
run --models mlp --attacks idle
run --partitions dirichlet:0.3 --models lenet5 --attacks saturate-cover idle
run --partitions dirichlet:0.3 --models mlp
run --models mlp
run
