"""Listings (`grpo-edge tasks`, `grpo-edge targets`) as plain aligned text that fits the width.

Every column but the last keeps its full width (a name is never cut); the last column wraps under
itself, and moves to its own indented lines when the others leave it too little room. The width is
the terminal's when stdout is one, else 80. `--json` prints the rows for scripts.

    >>> print(rows2text(["a", "b"], [["x", "one two"]], width=20))
    a  b
    x  one two
"""
import json
import shutil
import sys
import textwrap
from typing import List, Sequence

GAP = "  "
MIN_LAST = 24            # narrower than this, the last column goes on its own lines


def listing_width() -> int:
    if sys.stdout.isatty():
        return max(40, shutil.get_terminal_size((80, 24)).columns)
    return 80


def rows2text(header: Sequence[str], rows: List[Sequence], width: int = None) -> str:
    width = width or listing_width()
    cells = [[str(c) for c in header]] + [[("" if c is None else str(c)) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(header) - 1)]
    lead = sum(widths) + len(GAP) * len(widths)
    room = width - lead
    lines = []
    for r in cells:
        head = GAP.join(c.ljust(w) for c, w in zip(r[:-1], widths)) + GAP
        last = r[-1]
        if room >= MIN_LAST:
            wrapped = textwrap.wrap(last, room) or [""]
            lines.append((head + wrapped[0]).rstrip())
            lines += [(" " * lead + w).rstrip() for w in wrapped[1:]]
        else:
            lines.append(head.rstrip())
            lines += ["    " + w for w in textwrap.wrap(last, width - 4)]
    rule = ["-" * len(lines[0])] if lines else []
    return "\n".join(lines[:1] + rule + lines[1:])


def rows2json(header: Sequence[str], rows: List[Sequence]) -> str:
    return json.dumps([dict(zip(header, r)) for r in rows], indent=1)
