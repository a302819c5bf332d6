#!/usr/bin/env bash
# Create .venv and install Re-Shuffle with everything it needs, on a fresh Debian
# machine with only the system Python. Idempotent. `scripts/setup.sh --data` only
# links the development datasets (below).
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-python3}"

link_dev_data() {
    # Development machines and CI keep the datasets beside the repository
    # (<repo>/../shared/data/<name>). Link each into data/, a real git-ignored
    # folder, so tests, benchmarks and experiments read the default path that
    # `reshuffle data fetch` fills for a user. A real folder already there (a
    # user's download) is left alone; the link is relative to data/, so it
    # survives moving the repository together with its neighbour.
    local name target
    mkdir -p data
    for name in mnist fashion-mnist; do
        target="../../shared/data/$name"
        [ -d "../shared/data/$name" ] || continue
        [ "$(readlink "data/$name" 2>/dev/null)" = "$target" ] && continue
        if [ -L "data/$name" ] || [ ! -e "data/$name" ]; then
            ln -sfn "$target" "data/$name"
            echo "setup: data/$name linked to the development copy"
        fi
    done
}

link_dev_data
if [ "${1:-}" = "--data" ]; then
    exit 0
fi

apt_install() {
    # Debian packages, only when missing and only if we can install them.
    local missing=()
    for pkg in "$@"; do dpkg -s "$pkg" >/dev/null 2>&1 || missing+=("$pkg"); done
    [ ${#missing[@]} -eq 0 ] && return 0
    if [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null; then
        echo "setup: apt-get install ${missing[*]}"
        apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
    else
        echo "setup: please install Debian packages: ${missing[*]}" >&2
    fi
}

if command -v dpkg >/dev/null; then
    # libssl-dev and a compiler build charm-crypto-lite (secp256k1 backend) from source.
    apt_install libssl-dev gcc make
fi
if ! "$PY" -c "import venv, ensurepip" >/dev/null 2>&1; then
    apt_install python3-venv
fi

if [ ! -x .venv/bin/python ]; then
    "$PY" -m venv .venv
fi
.venv/bin/python -m pip install -q --upgrade pip
# The CPU build of torch first: any other torch request pulls several GB of CUDA.
.venv/bin/python -c "import torch" >/dev/null 2>&1 || .venv/bin/pip install -q torch==2.13.0
.venv/bin/pip install -q -e ".[dev,charm]"
echo "setup: done ($(.venv/bin/python -c 'import torch, flwr, reshuffle; print("torch", torch.__version__, "flwr", flwr.__version__)'))"
