"""`treegraft-lab report`: write docs/results.md and the README's results table from the committed data.

    treegraft-lab report            # rewrite both
    treegraft-lab report --check    # exit 1, naming the file, where either differs from what the data give
    treegraft-lab report --peers wall   # print the peer table of the folders `make bench-peers-wall` writes
"""

from __future__ import annotations

import argparse
import sys


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--check", action="store_true", help="write nothing; exit 1 where a page differs from the data")
    parser.add_argument("--peers", metavar="CLOCK", default=None,
                        help="only print the peer table of scripts/bench_peers.sh's folders for CLOCK (wall or a profile)")


def run(args: argparse.Namespace) -> int:
    from treegraft_lab import report

    if args.peers:
        print(report.peer_table(report.bench_peers_folders(args.peers), args.peers))
        return 0
    stale = []
    for path, text in report.pages().items():
        if path.read_text() == text:
            continue
        stale.append(path)
        if not args.check:
            path.write_text(text)
    for path in stale:
        what = "differs from the data: run `treegraft-lab report`" if args.check else "written"
        print(f"{path}: {what}", file=sys.stderr if args.check else sys.stdout)
    return 1 if args.check and stale else 0
