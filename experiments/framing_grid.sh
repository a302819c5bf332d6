#!/bin/sh
# The framing grid, resumable (finished cells are skipped), at the lowest priority on two cores: the cells that
# decide the default first (Fashion-MNIST, Flower's Dir(0.3), MLP, seed 1, framing and PoisonedFL), then every
# cell of experiments/configs/framing-grid.toml. Progress: experiments/evaluation/framing/grid.log.
set -u
cd "$(dirname "$0")/.."
export PYTHONPATH="$PWD"
CFG=experiments/configs/framing-grid.toml
OUT=experiments/evaluation/framing
mkdir -p "$OUT"
run() { nice -n 19 .venv/bin/reshuffle grid --config "$CFG" --out "$OUT" --jobs 2 "$@" >> "$OUT/grid.log" 2>&1; }
run --partitions dirichlet:0.3 --models mlp --seeds 1 --attacks frame-ban frame-class poisonedfl
run --partitions dirichlet:0.3 --models mlp --seeds 1
run --partitions dirichlet:0.3 --models mlp
run
