"""The math of the update rules: learning rates from staleness and in-place applies.

Sparse pushes go through the compiled push path (``_fastpush.c``: one C loop per push instead of a
dozen numpy calls) when it was built, else through numpy; both give the same bits
(tests/unit/ps/test_fastpush.py), so which one ran never shows in a result. ``FAST`` says which is in use.
"""
from __future__ import annotations

import math

import numpy as np

# Every function the PS calls on the compiled path. A module built from an older _fastpush.c (an
# editable install whose extension was not rebuilt after a pull) lacks some: it is not used, and
# the PS says so once, instead of failing at the first push that needs the missing one.
FUNCTIONS = ("check_sparse", "check_sparse_top", "max_abs", "sgd_sparse", "sgd_dense", "adacomp", "touch_sigma",
             "adacomp_touch_from", "touch_append", "touch_compact", "adacomp_step")
try:
    from . import _fastpush as _fast
except ImportError:   # not built (no C compiler at install time): numpy
    _fast = None
if _fast is not None and not all(hasattr(_fast, f) for f in FUNCTIONS):
    import warnings
    warnings.warn(f"edgebed.ps._fastpush ({_fast.__file__}) was built from an older _fastpush.c (it lacks "
                  f"{', '.join(f for f in FUNCTIONS if not hasattr(_fast, f))}): the PS uses numpy. Rebuild it: "
                  "`make setup` (or pip install -e .)", RuntimeWarning, stacklevel=2)
    _fast = None
FAST = _fast is not None
# dtype instances: comparing an array's dtype with one is ~2.5× faster than with the scalar type (which
# numpy converts on every comparison); a few of these per push. Same answers.
F32, U32 = np.dtype(np.float32), np.dtype(np.uint32)
_NO_INDICES = np.zeros(0, np.uint32)   # a dense push's check: the compiled sparse check with no indices
PUSH_PATH = "compiled" if FAST else "numpy"   # for the manifest (rundir.host_facts)


def staleness_lr(alpha: float, staleness):
    """α/τ, and α when τ = 0 (ASGD, Comp-ASGD with global τ; AdaComp with per-parameter σ_k).

    ``staleness`` may be an int or an integer array; the result has the same shape (arrays: float32)."""
    if isinstance(staleness, np.ndarray):   # in float64, then rounded once: the same bits as every earlier run
        return (alpha / np.maximum(staleness, 1)).astype(np.float32)
    return alpha / max(staleness, 1)


def dense_compiled(theta: np.ndarray, grad: np.ndarray) -> bool:
    """Whether ``apply_dense`` takes its compiled pass for these arrays (then it needs no scratch)."""
    return (_fast is not None and theta.dtype == F32 and grad.dtype == F32 and theta.flags.c_contiguous
            and grad.flags.c_contiguous and theta.size == grad.size)


def apply_dense(theta: np.ndarray, grad: np.ndarray, lr: float, scratch: np.ndarray | None = None) -> None:
    """Θ ← Θ − lr·g, in place: one compiled pass for float32 (``sgd_dense``); else numpy, where
    ``scratch`` (float32, Θ's size) avoids allocating |Θ| floats per call. The same bits either way."""
    if dense_compiled(theta, grad):
        _fast.sgd_dense(theta, grad, lr)   # rounds lr to float32 like np.float32(lr)
        return
    if scratch is None:
        theta -= np.float32(lr) * grad
    else:
        np.multiply(grad, np.float32(lr), out=scratch)
        theta -= scratch


# check_entries' answers, in their order of precedence
ENTRIES_OK, NOT_INCREASING, INDEX_TOO_LARGE, NOT_FINITE, TOO_LARGE = range(5)


def check_entries(indices: np.ndarray | None, values: np.ndarray, n: int, limit: float) -> int:
    """Are a push's entries safe to apply to Θ of ``n`` entries? ``indices``: uint32, strictly
    increasing (so unique) and < n (None: a dense push); ``values``: finite and within ±``limit``.
    Returns the first failing test as ENTRIES_OK … TOO_LARGE (a NaN anywhere is NOT_FINITE, even next
    to a too large value). Float32 pushes take one C pass, sparse or dense (without the C parts: numpy, and
    a dense push's values one BLAS pass, Σv²)."""
    if (_fast is not None and indices is not None and values.dtype == F32 and indices.dtype == U32
            and values.flags.c_contiguous and indices.flags.c_contiguous):
        return _fast.check_sparse(indices, values, n, limit)
    if _fast is not None and indices is None and values.dtype == F32 and values.flags.c_contiguous:
        return _fast.check_sparse(_NO_INDICES, values, n, limit)   # no indices: the values' pass alone
    if indices is not None:
        if indices.size > 1 and np.count_nonzero(indices[1:] <= indices[:-1]):
            return NOT_INCREASING
        if indices.size and int(indices[-1]) >= n:   # sorted: the last is the largest
            return INDEX_TOO_LARGE
    if values.size and not _values_in_range(values, limit):
        return TOO_LARGE if bool(np.isfinite(values).all()) else NOT_FINITE
    return ENTRIES_OK


def check_entries_top(indices: np.ndarray | None, values: np.ndarray, n: int, limit: float) -> tuple[int, float]:
    """``check_entries``' verdict and ``max_abs(values)`` (NaN unless the verdict is ENTRIES_OK): for a
    sparse float32 push, from one compiled pass over the values instead of two (the PS's short path
    for pushes notes the largest |value| of each one it applies)."""
    if (_fast is not None and values.dtype == F32 and values.flags.c_contiguous
            and (indices is None or (indices.dtype == U32 and indices.flags.c_contiguous))):
        # a dense push: the values' pass alone (no indices), one pass instead of Σv² and max |v|
        code, top = _fast.check_sparse_top(_NO_INDICES if indices is None else indices, values, n, limit)
        return code, (top if code == ENTRIES_OK else math.nan)
    code = check_entries(indices, values, n, limit)
    return code, (max_abs(values) if code == ENTRIES_OK else math.nan)


def _values_in_range(v: np.ndarray, limit: float) -> bool:
    """Every value finite and within ±limit.

    First Σv² in one BLAS pass (float32, ≤ 2**22 entries): max|v| ≤ ‖v‖, and the computed sum is at
    least 3/4 of the true one at that length (n·ε ≤ 1/4), so Σv² ≤ (limit/2)² proves the bound; NaN
    and ±Inf make the sum NaN or Inf and fail it. One pass over a dense push instead of two.
    Otherwise the exact test, min and max without temporaries (NaN fails every comparison, so it
    catches NaN, ±Inf and too large). The BLAS sum's last bits follow the host's OpenBLAS kernel, but
    not the verdict: the fast path answers True only where the exact test does too."""
    if v.dtype == F32 and v.size <= 1 << 22:
        with np.errstate(over="ignore"):   # a huge value overflows Σv² to Inf: the exact test words it
            if float(np.dot(v, v)) <= 0.25 * limit * limit:
                return True
    return -limit <= float(v.min()) and float(v.max()) <= limit


def max_abs(values: np.ndarray) -> float:
    """max |v| of a push's values (0.0 for none), as the PS notes it per push for the divergence check's
    blame: one compiled pass for float32, else two numpy reductions. The same number either way for the
    finite values the PS applies (tests/unit/ps/test_fastpush.py)."""
    if not values.size:
        return 0.0
    if _fast is not None and values.dtype == F32 and values.flags.c_contiguous:
        return _fast.max_abs(values)
    return max(float(values.max()), -float(values.min()))


def norm2(values: np.ndarray) -> float:
    """‖v‖₂ of a push's values (one BLAS pass, float32): the PS sums α·‖v‖₂ per device, how far its
    pushes moved Θ (``DeviceState.moved``), on both push paths alike."""
    v = values if values.dtype == F32 else values.astype(np.float32)
    return math.sqrt(float(np.dot(v, v))) if v.size else 0.0


def as_index(indices: np.ndarray) -> np.ndarray:
    """uint32 wire indices → intp once: numpy converts on every fancy index otherwise (2× slower)."""
    return indices.astype(np.intp)


def apply_sparse(theta: np.ndarray, indices: np.ndarray, values: np.ndarray, lr) -> None:
    """Θ[k] ← Θ[k] − lr_k·v_k for each sent k (indices unique), in place; lr scalar or per entry.

    ``np.subtract.at`` with intp indices and a step of Θ's very dtype: one float32 subtraction per
    entry, the same bits as ``Θ[ix] -= step``, in 3.4 instead of 5.7 µs for 2,122 entries (numpy 2.4).
    With any other dtype — even ``<f4``, which equals the native float32 but is spelled apart —
    numpy takes a slow path (68 µs; the 285 µs measured here once), so the step is made exact first."""
    if (_fast is not None and not isinstance(lr, np.ndarray) and theta.dtype == F32
            and indices.dtype == U32 and values.dtype == F32
            and indices.flags.c_contiguous and values.flags.c_contiguous):
        _fast.sgd_sparse(theta, indices, values, lr)   # rounds lr to float32 like np.float32(lr)
        return
    step = values * lr if isinstance(lr, np.ndarray) else values * np.float32(lr)
    ix = indices if indices.dtype == np.intp else as_index(indices)
    step = step.astype(theta.dtype, copy=False)
    if step.dtype is not theta.dtype:   # equal, spelled apart ('<f4' vs '=f4'): same bytes, Θ's dtype
        step = step.view(theta.dtype)
    np.subtract.at(theta, ix, step)


def count_updates(counts: np.ndarray, indices: np.ndarray) -> None:
    """counts[k] += 1 for each sent k (intp indices, unique), in place. ``np.add.at`` with a one of
    counts' own dtype: 4 instead of 7 µs for 2,122 entries; a Python int 1 would cost 120 µs."""
    np.add.at(counts, indices if indices.dtype == np.intp else as_index(indices), counts.dtype.type(1))


def per_param_staleness(counts: np.ndarray, snapshot: np.ndarray, indices: np.ndarray) -> np.ndarray:
    """σ_k = updates applied to Θ_k since the pull = count[k] now − count[k] at the pull.

    O(len(indices)) whatever the number of workers (no history scan)."""
    return (counts.take(indices) - snapshot.take(indices)).astype(np.int64)


def lr_table(alpha: float, size: int = 4096) -> np.ndarray:
    """``staleness_lr(alpha, σ)`` for σ = 0 … size − 1 (float32): the compiled AdaComp step looks the
    small σ up instead of dividing for every entry. The same computation, so the same bits."""
    return staleness_lr(alpha, np.arange(size, dtype=np.int64))


def adacomp_apply(theta: np.ndarray, counts: np.ndarray, snapshot: np.ndarray | None,
                  indices: np.ndarray | None, values: np.ndarray, alpha: float, staleness: int,
                  table: np.ndarray) -> tuple[int, int]:
    """AdaComp's step for one push, in place: σ_k = counts[k] − snapshot[k] (the updates Θ_k received
    since the device's pull; the global ``staleness`` for every k without a snapshot), Θ_k ← Θ_k −
    (α/max(σ_k, 1))·v_k, counts[k] += 1. ``indices``: the wire's uint32 indices, unique (None: dense,
    every entry); ``table``: ``lr_table(alpha)``. Returns (Σσ_k, max σ_k), both 0 for an empty push."""
    if (_fast is not None and theta.dtype == F32 and counts.dtype == U32 and values.dtype == F32
            and values.flags.c_contiguous and (indices is None or (indices.dtype == U32
                                                                 and indices.flags.c_contiguous))):
        return _fast.adacomp(theta, counts, snapshot, indices, values, alpha, staleness, table)
    ix = np.arange(theta.size) if indices is None else as_index(indices)
    if snapshot is None:
        apply_sparse(theta, ix, values, staleness_lr(alpha, staleness))
        count_updates(counts, ix)
        return staleness * ix.size, staleness if ix.size else 0
    sigma = per_param_staleness(counts, snapshot, ix)
    apply_sparse(theta, ix, values, staleness_lr(alpha, sigma))
    count_updates(counts, ix)
    return int(sigma.sum()), int(sigma.max()) if sigma.size else 0
