"""One-line notes the library prints where it chooses for the user (the dtype a pair loads in, the
schedule and pruning of `DecodeConfig()`): on stderr, each message once per process, none with
`TREEGRAFT_LAB_QUIET=1`."""

from __future__ import annotations

import os
import sys

_said: set[str] = set()


def note(message: str) -> None:
    """Print `message` once (as `treegraft_lab: <message>` on stderr) unless TREEGRAFT_LAB_QUIET is set."""
    if message and message not in _said and os.environ.get("TREEGRAFT_LAB_QUIET", "") in ("", "0"):
        _said.add(message)
        print(f"treegraft_lab: {message}", file=sys.stderr)
