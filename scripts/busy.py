#!/usr/bin/env python3
"""Keep N cores busy: N processes spinning until killed, or for a given time.

    python scripts/busy.py 2                 # two busy processes until Ctrl-C / SIGTERM
    python scripts/busy.py 2 --seconds 600   # ... for ten minutes
    python scripts/busy.py 2 & make test; kill %1

For showing that the test suite passes on a loaded machine. Standard library only.
Ctrl-C or SIGTERM stops every spinner (it stops them before it exits); on Linux they
also die with it when it is killed outright (SIGKILL).
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import signal
import sys
import time


def _spin(parent: int) -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    if sys.platform == "linux":  # die with the parent, even when it is SIGKILLed
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
        if os.getppid() != parent:  # it died before prctl took effect
            return
    x = 0
    while True:
        x = (x * 1_103_515_245 + 12_345) & 0xFFFF_FFFF


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("cores", type=int, help="busy processes to run (one core each)")
    ap.add_argument("--seconds", type=float, help="stop after this many seconds (default: when killed)")
    args = ap.parse_args(argv)
    if args.cores < 1:
        ap.error(f"cores must be at least 1, got {args.cores}")
    if args.seconds is not None and args.seconds <= 0:
        ap.error(f"--seconds must be positive, got {args.seconds}")

    def stop(signum, frame):
        raise SystemExit(0)

    signal.signal(signal.SIGTERM, stop)
    ctx = mp.get_context("fork")
    spinners = [ctx.Process(target=_spin, args=(os.getpid(),), daemon=True) for _ in range(args.cores)]
    try:
        for p in spinners:
            p.start()
        print(f"busy: {args.cores} spinning processes (pids {' '.join(str(p.pid) for p in spinners)}); "
              f"load average {os.getloadavg()[0]:.2f}", file=sys.stderr, flush=True)
        if args.seconds is None:
            while True:
                signal.pause()
        else:
            time.sleep(args.seconds)
    except KeyboardInterrupt:
        pass
    finally:
        for p in spinners:
            if p.pid is not None:
                p.kill()
        for p in spinners:
            if p.pid is not None:
                p.join()
    return 0


if __name__ == "__main__":
    sys.exit(main())
