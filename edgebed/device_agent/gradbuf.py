"""Reusable buffers for dense gradients: a device's flat gradient is written into the memory of one
that was pushed and is no longer held, instead of memory fresh from the allocator.

Why: on the virtual clock every device of a population lives in one process, and each ASGD device
holds its dense gradient (|Θ| floats) from its compute to its push. With 10,000 of them alive at once,
each new gradient came from fresh pages the kernel faulted in while ``torch.cat`` wrote them (146
minor faults and 0.5 ms per gradient against 0.09 ms at n = 200: benchmarks/results/scale*.json),
the one point of the scale grid that fell below 0.8× of n = 200's rate.

How: the runtime hands each pushed dense gradient back (``give``) once it has sent it; ``take`` looks
at the oldest few handed back and reuses the first that nothing else references any more (its
reference count: the push in flight, a view, a frame all hold one), else the trainer allocates. So a
buffer is never written while anything can still read it, and the bits of every gradient are the same
as without the pool. Only arrays that own their memory, float32, C-contiguous and 1-D are kept.
"""
from __future__ import annotations

import sys
from collections import deque
import numpy as np

LOOK = 8   # buffers handed back that ``take`` looks at, oldest first (pushes are answered roughly in order)
KEEP = 1 << 17   # buffers handed back that the pool remembers at most: beyond, the oldest is forgotten (not
#                  reused, freed as usual), so one array handed back again and again (a compressor's own
#                  buffer sent as the push) cannot grow the pool without bound
_FREE = 3  # sys.getrefcount of a buffer only this pool holds: the deque's slot, ``take``'s name, the argument


class GradientBuffers:
    """A process's pool of dense gradient buffers, shared by its trainers (one thread)."""

    def __init__(self):
        self._given: deque = deque(maxlen=KEEP)

    def give(self, arr: np.ndarray) -> None:
        """``arr`` was pushed: its memory may be reused once nothing references it."""
        if (type(arr) is np.ndarray and arr.base is None and arr.dtype == np.float32 and arr.ndim == 1
                and arr.flags.c_contiguous and arr.flags.writeable):
            self._given.append(arr)

    def take(self, size: int) -> np.ndarray:
        """A float32 buffer of ``size`` entries whose contents are to be overwritten: a handed-back one
        nothing holds any more, else a new one."""
        given = self._given
        for _ in range(min(LOOK, len(given))):
            arr = given[0]
            if sys.getrefcount(arr) == _FREE:
                given.popleft()
                if arr.size == size:
                    return arr
                continue          # free, but of another size (another model): let it go
            given.rotate(-1)      # still held (not answered yet): look again later
        return np.empty(size, np.float32)

    def __len__(self) -> int:
        return len(self._given)
