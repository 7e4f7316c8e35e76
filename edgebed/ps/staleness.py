"""Per-parameter staleness σ_k for every outstanding pull, without a |Θ|-sized snapshot per pull.

AdaComp's σ_k counts the updates applied to Θ_k between a device's pull and its push. A snapshot of a
global per-parameter counter at each pull gives it in O(entries sent), but costs |Θ|·4 bytes per
outstanding pull (847 kB for the paper's CNN; 8.5 GB for 10,000 devices). Here instead:

- Every apply has a *stamp* (1, 2, 3, …). Each parameter keeps the ascending list of the stamps that
  touched it (``TouchLog``): σ_k for a pull at stamp s is the number of stamps > s in k's list, one
  binary search. Stamps at or below the oldest outstanding pull can never count again and are
  dropped when a list is moved or the pool compacted, so the log holds the entries sent since the
  oldest outstanding pull: with n devices cycling, about n·c·|Θ| entries of 4 bytes — O(c·|Θ|) per
  device.
- A pull that pins the log alone for long (a device that went silent with a pull on record) would let
  it grow without bound: once the entries only the oldest pull(s) keep exceed |Θ|, those pulls get a
  dense snapshot of the counters as they were (counts − σ, shared by every device that pulled at that
  stamp) and stop pinning the log. So no pull ever costs more than the old scheme did.

σ_k is the same number either way, so AdaComp's updates are bit-identical to the snapshot scheme's
(tests/unit/ps/test_staleness.py runs both side by side). The lists live in one pool, parameter k's
at ``pool[start : start + length]`` with room for ``capacity`` (``TouchLog.heads[k]``). The compiled push
path (``_fastpush.c``: ``adacomp_touch_from`` — σ, the step and the append in one pass over the sent
entries —, ``touch_sigma``, ``touch_append``, ``touch_compact``) and the numpy code below give the
same σ and the same bits (tests/unit/ps/test_fastpush.py).
"""
from __future__ import annotations

from collections import deque
from typing import Optional

import numpy as np

from . import aggregate
from .aggregate import F32, U32

MIN_CAP = 4          # the room a list gets at its first touch (as in _fastpush.c)
MIN_POOL = 1 << 16   # entries
START, LENGTH, CAPACITY = 0, 1, 2   # the columns of TouchLog.heads


def _fast():
    return aggregate._fast   # looked up per call: tests switch the compiled path off


def _simple(indices) -> bool:
    return indices is None or (indices.dtype == U32 and indices.flags.c_contiguous)


def _upper(pool: np.ndarray, start: np.ndarray, length: np.ndarray, value: int) -> np.ndarray:
    """Per list (start, length): the position of its first stamp > value (a vectorised binary search)."""
    lo = start.astype(np.int64)
    hi = lo + length
    while True:
        active = lo < hi
        if not active.any():
            return lo
        mid = (lo + hi) >> 1
        right = np.zeros(lo.shape, bool)
        right[active] = pool[mid[active]] <= value
        lo = np.where(active & right, mid + 1, lo)
        hi = np.where(active & ~right, mid, hi)


def adacomp_sigma(theta, counts, sigma, indices, values, alpha: float, table) -> tuple[int, int]:
    """AdaComp's step with σ_k given per sent entry (numpy): Θ_k ← Θ_k − (α/max(σ_k, 1))·v_k,
    counts[k] += 1; the same bits as ``aggregate.adacomp_apply`` with the snapshot that gives these σ
    (and as the compiled ``adacomp_touch_from``). Returns (Σσ, max σ)."""
    ix = np.arange(theta.size) if indices is None else aggregate.as_index(indices)
    sig = sigma.astype(np.int64)
    aggregate.apply_sparse(theta, ix, values, aggregate.staleness_lr(alpha, sig))
    aggregate.count_updates(counts, ix)
    return int(sig.sum()), int(sig.max()) if sig.size else 0


class TouchLog:
    """The stamps that touched each parameter since ``floor`` (see the module docstring). Owned by
    one update rule, on the PS's thread. ``heads[k]`` = (start, length, capacity, 0) of k's list in
    ``pool`` (uint32: 16 bytes a parameter, one cache line for four)."""

    def __init__(self, size: int):
        self.size = size
        # Written now (np.full, not np.zeros' untouched pages): the first pushes scatter over every page
        # of the heads, and faulting them in there stalled the serve loop (11 M parameters: 178 MB,
        # about 0.3 s on the first push). The PS's start pays it instead, once.
        self.heads = np.full((size, 4), 0, np.uint32)
        self.pool = np.zeros(0, np.uint32)
        self.used = 0
        self.stamp = 0                    # stamps appended so far (the last one)
        self.floor = 0                    # stamps ≤ floor are dead
        # cumulative entries appended by stamps 1 … s, at position s − floor + _skip (a list with its
        # dead head cut off now and then: O(1) at any position, unlike a deque)
        self._entries = [0]
        self._skip = 0

    @property
    def live_entries(self) -> int:
        """Entries appended after ``floor`` (what the lists must hold)."""
        return self._entries[-1] - self._entries[self._skip]

    def entries_between(self, a: int, b: int) -> int:
        """Entries appended by stamps a+1 … b (floor ≤ a ≤ b ≤ stamp)."""
        at = self._skip - self.floor
        return self._entries[b + at] - self._entries[a + at]

    def nbytes(self) -> int:
        return self.pool.nbytes + self.heads.nbytes

    def sigma(self, indices: Optional[np.ndarray], since: int) -> np.ndarray:
        """σ_k (uint32) for each sent k (indices None: every k): the stamps > ``since`` in k's list."""
        out = np.empty(self.size if indices is None else indices.size, np.uint32)
        f = _fast()
        if f is not None and _simple(indices):
            f.touch_sigma(self.pool, self.heads, indices, since, out)
            return out
        h = self.heads if indices is None else self.heads[indices.astype(np.intp)]
        s, n = h[:, START].astype(np.int64), h[:, LENGTH].astype(np.int64)
        out[:] = s + n - _upper(self.pool, s, n, since)
        return out

    def adacomp(self, theta, counts, indices, values, alpha: float, table, since: int) -> tuple[int, int]:
        """AdaComp's step for a device that pulled at stamp ``since`` (σ from the lists), and the
        append of the new stamp to every sent k: one compiled pass, or numpy. (Σσ, max σ)."""
        f = _fast()
        if (f is None or not _simple(indices) or theta.dtype != F32 or counts.dtype != U32
                or values.dtype != F32 or not values.flags.c_contiguous):
            total = adacomp_sigma(theta, counts, self.sigma(indices, since), indices, values, alpha, table)
            self.append(indices)
            return total
        self.stamp += 1
        total = top = done = 0
        while True:   # one call, or more when the pool's free tail fills up on the way (then a repack)
            self.used, part, most, done, need = f.adacomp_touch_from(
                theta, counts, self.pool, self.heads, self.used, indices, values, alpha, table, since, self.stamp,
                self.floor, done)
            total, top = total + part, max(top, most)
            if not need:
                break
            self._repack(need)
        self._appended(self.used, indices)
        return total, top

    def append(self, indices: Optional[np.ndarray]) -> None:
        """A new stamp touched ``indices`` (None: every parameter)."""
        self.stamp += 1
        while True:
            used = self._append(indices)
            if used >= 0:
                break
            self._repack(-used)
        self._appended(used, indices)

    def skip(self, indices: Optional[np.ndarray]) -> None:
        """A new stamp that no outstanding pull will ask about (none is on record in the log): count
        it, write nothing. Its lists' older stamps are all dead then, so σ stays exact."""
        self.stamp += 1
        self._appended(self.used, indices)

    def _appended(self, used: int, indices) -> None:
        self.used = used
        self._entries.append(self._entries[-1] + (self.size if indices is None else indices.size))

    def _append(self, indices) -> int:
        f = _fast()
        if f is not None and _simple(indices):
            return f.touch_append(self.pool, self.heads, self.used, indices, self.stamp, self.floor)
        ix = np.arange(self.size) if indices is None else indices.astype(np.intp)
        h = self.heads
        full = ix[h[ix, LENGTH] == h[ix, CAPACITY]]
        cap = h[full, CAPACITY].astype(np.int64)
        need = int(np.where(cap > 0, 2 * cap, MIN_CAP).sum())
        if self.used + need > self.pool.size:
            return -need
        used = self.used
        for k in full.tolist():   # as _fastpush.c: drop dead stamps in place, else move with twice the room
            a, n, c = (int(x) for x in h[k, :3])
            dead = int(np.searchsorted(self.pool[a:a + n], self.floor, side="right"))
            if dead:
                self.pool[a:a + n - dead] = self.pool[a + dead:a + n].copy()
                h[k, LENGTH] = n - dead
            else:
                room = 2 * c if c else MIN_CAP
                self.pool[used:used + n] = self.pool[a:a + n]
                h[k, START], h[k, CAPACITY] = used, room
                used += room
        self.pool[h[ix, START].astype(np.int64) + h[ix, LENGTH]] = self.stamp
        h[ix, LENGTH] += 1
        return used

    def _repack(self, need: int) -> None:
        """Compact the live stamps (each list with room to grow by half) into a pool with room for
        ``need`` more entries and a quarter of the live ones again (amortised O(1) per entry)."""
        live = self.live_entries
        size = max(MIN_POOL, int(1.5 * live) + MIN_CAP * self.size + max(2 * need, live // 4))
        if size >= 2**32:
            raise MemoryError(f"AdaComp's touch log would need {size:,} entries (more than 2³² − 1): too many "
                              "entries sent since the oldest outstanding pull")
        if self.used == 0:
            # Nothing was ever written to the pool since it was last packed empty: every head is
            # still (0, 0, 0), what compacting would make of them — skip reading |Θ| heads (11 M
            # parameters: 178 MB, most of a big model's first AdaComp push).
            self.pool = np.empty(size, np.uint32)
            return
        f = _fast()
        while True:
            new = np.empty(size, np.uint32)
            used = f.touch_compact(self.pool, self.heads, self.floor, new) if f is not None else \
                self._compact_numpy(new)
            if used >= 0:
                break
            size = -used + max(2 * need, live // 4)
        self.used, self.pool = used, new

    def _compact_numpy(self, new: np.ndarray) -> int:
        h = self.heads
        start, length = h[:, START].astype(np.int64), h[:, LENGTH].astype(np.int64)
        first = _upper(self.pool, start, length, self.floor)
        live = start + length - first
        room = np.where(live > 0, live + np.maximum(live // 2, MIN_CAP), 0)
        if int(room.sum()) > new.size:
            return -int(room.sum())
        new_start = np.concatenate(([0], np.cumsum(room)[:-1]))
        owner = np.repeat(np.arange(self.size), live)
        offs = np.arange(owner.size) - np.concatenate(([0], np.cumsum(live)[:-1]))[owner]
        new[new_start[owner] + offs] = self.pool[first[owner] + offs]
        h[:, START], h[:, LENGTH], h[:, CAPACITY] = new_start, live, room
        return int(room.sum())

    def advance(self, floor: int) -> None:
        """Stamps ≤ ``floor`` will never be asked for again (no pull on record is older)."""
        floor = min(floor, self.stamp)
        if floor > self.floor:
            self._skip += floor - self.floor
            self.floor = floor
            if self._skip > 1024 and self._skip > len(self._entries) // 2:
                del self._entries[:self._skip]
                self._skip = 0

    def counts_at(self, counts: np.ndarray, since: int) -> np.ndarray:
        """The per-parameter counters as they were at stamp ``since``: counts − σ (a dense snapshot)."""
        return counts - self.sigma(None, since)


class PullRecords:
    """AdaComp's record of every outstanding pull: the stamp it was made at (σ from the ``TouchLog``),
    or a dense snapshot of the counters for pulls that alone kept more than |Θ| entries in the log."""

    def __init__(self, size: int):
        self.log = TouchLog(size)
        self.since: dict[int, int] = {}          # device → stamp of its pull (σ from the log)
        self.dense: dict[int, np.ndarray] = {}   # device → counters at its pull (shared per stamp)
        self._pinned: dict[int, set] = {}        # stamp → the devices in `since` that pulled at it
        self._order: deque = deque()             # those stamps, ascending (emptied ones removed lazily)

    def __contains__(self, device: int) -> bool:
        return device in self.since or device in self.dense

    def __len__(self) -> int:
        return len(self.since) + len(self.dense)

    def pull(self, device: int) -> None:
        """``device`` pulled now."""
        self.forget(device)
        s = self.log.stamp
        self.since[device] = s
        if s not in self._pinned:
            self._pinned[s] = set()
            self._order.append(s)
        self._pinned[s].add(device)

    def forget(self, device: int) -> None:
        self.dense.pop(device, None)
        s = self.since.pop(device, None)
        if s is not None:
            self._pinned[s].discard(device)
            self._settle()

    def applied(self, indices: Optional[np.ndarray], counts: np.ndarray) -> None:
        """An update touched ``indices`` (after its σ were computed); ``counts`` already include it.
        (``TouchLog.adacomp`` appends itself: then only ``bound``.)"""
        if self.since:
            self.log.append(indices)
            self.bound(counts)
        else:   # no pull reads the log (only dense snapshots, or none): nothing to record
            self.log.skip(indices)
            self._settle()

    def _settle(self) -> None:
        while self._order and not self._pinned[self._order[0]]:
            del self._pinned[self._order.popleft()]
        self.log.advance(self._order[0] if self._order else self.log.stamp)

    def bound(self, counts: np.ndarray) -> None:
        """Give the oldest pulls dense snapshots while they alone keep more than |Θ| entries alive."""
        log, order = self.log, self._order
        while order and log.entries_between(order[0], log.stamp) > log.size:
            oldest = order.popleft()
            while order and not self._pinned[order[0]]:   # the next stamp still on record
                del self._pinned[order.popleft()]
            order.appendleft(oldest)
            if log.entries_between(oldest, order[1] if len(order) > 1 else log.stamp) <= log.size:
                return
            snapshot = log.counts_at(counts, oldest)
            for d in self._pinned[oldest]:
                del self.since[d]
                self.dense[d] = snapshot
            self._pinned[oldest] = set()
            self._settle()

    def nbytes(self) -> int:
        """Bytes of arrays held: the log and the distinct dense snapshots."""
        return self.log.nbytes() + sum(a.nbytes for a in {id(a): a for a in self.dense.values()}.values())
