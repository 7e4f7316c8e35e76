"""Run a loader on a hostile file in a child process under an address-space limit and a time limit,
so a loader that would allocate the file's declared size fails fast (MemoryError) instead of taking
the host's memory, and one that would hang is cut off."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from dataclasses import dataclass

PRELUDE = """
import resource, sys
resource.setrlimit(resource.RLIMIT_AS, (MEMORY, MEMORY))
def report(fn):
    try:
        out = fn()
    except BaseException as err:
        chain = [c.__name__ for c in type(err).__mro__]
        print("ERROR", type(err).__name__, "|", " ".join(chain))
        print("MESSAGE", str(err)[:2000])
        sys.exit(3)
    print("OK", repr(out)[:200])
"""


@dataclass
class Outcome:
    rc: int
    out: str
    seconds: float

    @property
    def error_types(self) -> str:
        return next((ln for ln in self.out.splitlines() if ln.startswith("ERROR")), "")

    @property
    def message(self) -> str:
        return next((ln[len("MESSAGE "):] for ln in self.out.splitlines() if ln.startswith("MESSAGE")), "")

    def refused_with(self, kind: str) -> bool:
        """The child ended with an error whose class (or a base) is ``kind``."""
        return self.rc == 3 and kind in self.error_types.split("|", 1)[-1].split()


def run_hostile(body: str, memory_bytes: int = 1536 << 20, timeout: float = 30.0, env: dict | None = None) -> Outcome:
    """``body`` (code calling ``report(lambda: ...)``) in a child with RLIMIT_AS ``memory_bytes``."""
    code = PRELUDE.replace("MEMORY", str(int(memory_bytes))) + textwrap.dedent(body)
    e = {**os.environ, "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", **(env or {})}
    t0 = time.monotonic()
    try:
        p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=timeout,
                           env=e)
    except subprocess.TimeoutExpired:
        return Outcome(-9, "TIMEOUT", time.monotonic() - t0)
    return Outcome(p.returncode, p.stdout + p.stderr[-3000:], time.monotonic() - t0)
