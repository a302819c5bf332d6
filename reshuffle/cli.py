"""``reshuffle`` command line. Bad arguments and failures give one-line errors."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from reshuffle.errors import ReShuffleError


def _parse_ids(spec: str) -> list[int]:
    """``"1-5,8"`` → [1, 2, 3, 4, 5, 8]."""
    out: list[int] = []
    try:
        for part in spec.split(","):
            if "-" in part:
                a, b = part.split("-", 1)
                lo, hi = int(a), int(b)
                if lo > hi:
                    raise ValueError
                out.extend(range(lo, hi + 1))
            else:
                out.append(int(part))
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid id list {spec!r} (expected e.g. 0-9,12)") from None
    if any(i < 0 or i >= 0xFFFFFFFF for i in out) or len(set(out)) != len(out):
        raise argparse.ArgumentTypeError(f"ids in {spec!r} must be distinct and in [0, 2^32-1)")
    return out


def cmd_ca(args: argparse.Namespace) -> int:
    from reshuffle.crypto.signatures import ROLE_SERVER, CertificateAuthority, load_identity

    d = Path(args.dir)
    if args.ca_cmd == "init":
        if (d / CertificateAuthority.CA_KEY).exists() and not args.force:
            raise ReShuffleError(f"{d / CertificateAuthority.CA_KEY} exists; use --force to replace it")
        ca = CertificateAuthority.generate()
        ca.save(d)
        print(f"CA created in {d} (public key {ca.verify_key.to_bytes().hex()})")
    elif args.ca_cmd == "issue":
        ca = CertificateAuthority.load(d)
        out = Path(args.out) if args.out else d
        for pid in args.ids:
            print(ca.issue_files(out, pid))
        if args.server:
            print(ca.issue_files(out, 0xFFFFFFFF, ROLE_SERVER))
    elif args.ca_cmd == "verify":
        ca = CertificateAuthority.load(d, public_only=True)
        out = Path(args.out) if args.out else d
        for pid in args.ids:
            _, cert = load_identity(out, pid)
            ca.verify(cert, subject=pid)
            print(f"participant-{pid}: certificate valid")
    return 0


def cmd_bench(args: argparse.Namespace) -> int:
    from reshuffle.bench.common import print_table

    if args.what == "crypto":
        from reshuffle.bench import crypto

        results = crypto.run(quick=args.quick)
    else:
        from reshuffle.bench import round as round_bench

        results = round_bench.run(Ns=args.N, d=args.d, quick=args.quick)
    if args.json:
        print(json.dumps(results, indent=2))
    else:
        print_table(f"reshuffle bench {args.what}", results)
    return 0


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="reshuffle",
        description="Re-Shuffle: anonymous raw-model upload for federated learning.",
    )
    sub = p.add_subparsers(dest="cmd", required=True)

    ca = sub.add_parser("ca", help="certificate authority: create it, issue participant keys")
    ca_sub = ca.add_subparsers(dest="ca_cmd", required=True)
    init = ca_sub.add_parser("init", help="create a CA key pair in --dir")
    init.add_argument("--dir", required=True)
    init.add_argument("--force", action="store_true", help="replace an existing CA")
    iss = ca_sub.add_parser("issue", help="generate and certify participant keys")
    iss.add_argument("--dir", required=True, help="folder holding the CA")
    iss.add_argument("--ids", type=_parse_ids, required=True, help="participant ids, e.g. 0-9")
    iss.add_argument("--server", action="store_true", help="also issue the PS key")
    iss.add_argument("--out", help="where to write keys (default: --dir)")
    ver = ca_sub.add_parser("verify", help="check participant certificates against the CA")
    ver.add_argument("--dir", required=True)
    ver.add_argument("--ids", type=_parse_ids, required=True)
    ver.add_argument("--out", help="folder holding the participant files (default: --dir)")
    ca.set_defaults(func=cmd_ca)

    bench = sub.add_parser("bench", help="benchmarks (ratios measured in one run)")
    bench.add_argument("what", choices=["crypto", "round"])
    bench.add_argument("--json", action="store_true", help="print one JSON object")
    bench.add_argument("--quick", action="store_true", help="smaller sizes, fewer repetitions")
    bench.add_argument("--N", type=int, nargs="+", default=[10, 50, 100], help="round: participants")
    bench.add_argument("--d", type=int, default=61_706, help="round: model size δ")
    bench.set_defaults(func=cmd_bench)
    return p


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return args.func(args)
    except ReShuffleError as exc:
        print(f"reshuffle: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("reshuffle: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
