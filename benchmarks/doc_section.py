"""A generated section of a hand-written docs page: the text between two markers, rewritten from its
source or checked against it. Used by ``benchmarks.architecture`` (the layer diagram) and
``benchmarks.bench_executors`` (the executor cost tables)."""
from __future__ import annotations

import sys
from pathlib import Path
from typing import Callable


def write_section(page: Path, begin: str, end: str, block: Callable[[], str], *, what: str, command: str,
                  check: bool = False) -> int:
    """Replace the text from ``begin`` to ``end`` in ``page`` by ``block()`` (which carries both markers),
    or with ``check`` only say whether it is up to date. Returns the exit code: 0 written or up to date,
    1 out of date (``check``), 2 markers missing."""
    text = page.read_text()
    if begin not in text or end not in text:
        print(f"{page}: the markers {begin!r} and {end!r} are missing; put them where {what} goes",
              file=sys.stderr)
        return 2
    head, rest = text.split(begin, 1)
    new = head + block() + rest.split(end, 1)[1]
    if check:
        if new != text:
            print(f"{page}: {what} is out of date; run `{command}`", file=sys.stderr)
            return 1
        return 0
    page.write_text(new)
    print(f"wrote {page}")
    return 0
