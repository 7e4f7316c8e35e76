/* The PS's compiled push path: the per-entry loops of a sparse push in one pass each.
 *
 * Optional: setup.py builds it when a C compiler is there; edgebed/ps/aggregate.py falls back to numpy
 * otherwise. Both give the same bits (tests/unit/ps/test_fastpush.py): every step is the float32 / float64
 * operation numpy does, in the same order, and the build turns off FMA contraction (-ffp-contract=off),
 * so θ_k − v_k·lr_k is two roundings here as it is in numpy.
 *
 * Why: a push of 2,122 entries costs AdaComp about a dozen numpy calls (take, subtract, maximum, divide,
 * astype, multiply, subtract.at, add.at, sum, max), each ~1 µs of call overhead for ~0.1 µs of work; the
 * serve loop spent more time in them than ZeroMQ spent moving the push (README, "Measured here").
 *
 * Arguments are buffers (numpy arrays, memoryviews of received frames): θ float32 and the update
 * counters uint32 writable, indices uint32, values float32. Lengths and index ranges are checked here
 * too, so a caller's mistake raises ValueError instead of writing out of bounds.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#if defined(__GNUC__) || defined(__clang__)
#define PREFETCH(addr, write) __builtin_prefetch((addr), (write))
#else
#define PREFETCH(addr, write) ((void)0)
#endif

/* Releases the buffers a function took: every one it got (``obj`` set), none twice. An optional
 * buffer starts as {0} and is released only if it was taken. */
static void release(Py_buffer **bufs, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (bufs[i]->obj)
            PyBuffer_Release(bufs[i]);
}
#define RELEASE(...) release((Py_buffer *[]){__VA_ARGS__}, sizeof((Py_buffer *[]){__VA_ARGS__}) / sizeof(Py_buffer *))

/* A buffer's length in items of `size` bytes, or -1 (ValueError set) if it isn't a whole number. */
static Py_ssize_t items(Py_buffer *b, Py_ssize_t size, const char *name) {
    if (b->len % size) {
        PyErr_Format(PyExc_ValueError, "%s: %zd bytes is not a whole number of %zd-byte items", name, b->len, size);
        return -1;
    }
    return b->len / size;
}

/* check_sparse(indices, values, n, limit) -> int
 *   0  fine
 *   1  indices not strictly increasing (unsorted or duplicated)
 *   2  the last (largest) index is >= n
 *   3  a value is NaN or ±Inf
 *   4  a value is outside ±limit
 * In this order of precedence, as ParameterServer._check_payload words them. A dense push is checked
 * with no indices: the values' pass alone.
 * check_sparse_top(indices, values, n, limit) -> (int, float)
 *   The same verdict, and max |v| (as max_abs gives it) from the same pass over the values: the PS's
 *   short path notes it per push (ParameterServer._note_step), one pass over a fresh push less. */
/* The largest of the values' magnitudes, as bits (sign cleared; NaN above +Inf above every finite
 * value): an integer maximum, so the same answer on every host whichever instructions compute it. With
 * GCC on x86-64 it is built twice, for baseline x86-64 and for AVX2 (whose 8-lane integer maximum the
 * baseline lacks: a dense push's check was slower than numpy's BLAS pass on the baseline build alone),
 * and the loader picks one for the CPU. The magnitudes fit in 31 bits, so a signed maximum is exact. */
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && defined(__GLIBC__)   /* ifunc: glibc's */
__attribute__((target_clones("avx2", "default")))
#endif
static uint32_t magnitude_top(const float *v, Py_ssize_t m) {
    const uint32_t *bits = (const uint32_t *)v;
    int32_t lane[16] = {0};   /* 16 running maxima: several vectors' worth, so no one chain of compares
                                 holds the loop up */
    Py_ssize_t j = 0;
    for (; j + 16 <= m; j += 16)
        for (int l = 0; l < 16; l++) {
            int32_t a = (int32_t)(bits[j + l] & 0x7fffffffu);
            lane[l] = a > lane[l] ? a : lane[l];
        }
    for (; j < m; j++) {
        int32_t a = (int32_t)(bits[j] & 0x7fffffffu);
        lane[0] = a > lane[0] ? a : lane[0];
    }
    int32_t top = 0;
    for (int l = 0; l < 16; l++)
        top = lane[l] > top ? lane[l] : top;
    return (uint32_t)top;
}

static int sparse_verdict(const uint32_t *ix, Py_ssize_t k, const float *v, Py_ssize_t m, Py_ssize_t n,
                          double limit, uint32_t *top_bits) {
    int code = 0, unsorted = 0;   /* branch-free, so the compiler vectorises both loops */
    for (Py_ssize_t j = 1; j < k; j++)
        unsorted |= ix[j] <= ix[j - 1];
    if (unsorted)
        return 1;
    if (k > 0 && (Py_ssize_t)ix[k - 1] >= n)
        return 2;
    /* The magnitudes' bits (sign cleared) order as |v| does, NaN above +Inf above every finite value:
       one integer maximum gives max |v| and finds any bad value. A value is bad when |v| > limit (as
       the numpy path compares it, in double) or NaN. For a float32 v, |v| > limit exactly when |v| >
       the largest float32 not above limit, so the test is |v|'s bits against that float's bits. */
    int bad = 0;
    uint32_t top = magnitude_top(v, m);
    if (limit >= 0.0) {   /* a NaN or negative limit (never the PS's) takes the comparison in double */
        float below = limit >= (double)FLT_MAX ? (isinf(limit) ? INFINITY : FLT_MAX) : (float)limit;
        if ((double)below > limit)   /* rounded up: the float below it */
            below = nextafterf(below, 0.0f);
        uint32_t bound;
        memcpy(&bound, &below, sizeof bound);
        bad = top > bound;
    } else {
        for (Py_ssize_t j = 0; j < m; j++) {
            double x = (double)v[j];
            bad |= (x != x) | (x < -limit) | (x > limit);
        }
    }
    if (top_bits)
        *top_bits = top;
    if (bad) {   /* which kind: any NaN / ±Inf wins */
        code = 4;
        for (Py_ssize_t j = 0; j < m; j++)
            if (!isfinite(v[j])) {
                code = 3;
                break;
            }
    }
    return code;
}

/* check_sparse's and check_sparse_top's common part: the arguments, the verdict (or -1, an error
 * set), max |v|'s bits in *top_bits. */
static int sparse_call(PyObject *args, uint32_t *top_bits) {
    Py_buffer ib, vb;
    Py_ssize_t n;
    double limit;
    if (!PyArg_ParseTuple(args, "y*y*nd", &ib, &vb, &n, &limit))
        return -1;
    int code = sparse_verdict((const uint32_t *)ib.buf, ib.len / (Py_ssize_t)sizeof(uint32_t),
                              (const float *)vb.buf, vb.len / (Py_ssize_t)sizeof(float), n, limit, top_bits);
    RELEASE(&ib, &vb);
    return code;
}

static PyObject *check_sparse(PyObject *self, PyObject *args) {
    int code = sparse_call(args, NULL);
    return code < 0 ? NULL : PyLong_FromLong(code);
}

static PyObject *check_sparse_top(PyObject *self, PyObject *args) {
    uint32_t bits = 0;
    int code = sparse_call(args, &bits);
    if (code < 0)
        return NULL;
    float top;
    memcpy(&top, &bits, sizeof top);
    return Py_BuildValue("id", code, (double)top);
}

/* max_abs(values) -> float
 *   max |v_j| over a float32 buffer, as a float (0.0 for none; NaN if any is NaN): the same number as
 *   the numpy path's max(float(v.max()), -float(v.min())) for every push the PS applies (their values
 *   are checked finite first). One pass instead of two reductions of ~1.5 µs call overhead each: the
 *   PS notes it per push (ParameterServer._note_step). On the bits: |v| is v's bits without the sign,
 *   and non-negative floats order as their bits do as unsigned integers (NaN above +Inf), so an
 *   integer maximum finds it exactly, and vectorises. */
static PyObject *max_abs(PyObject *self, PyObject *args) {
    Py_buffer vb;
    if (!PyArg_ParseTuple(args, "y*", &vb))
        return NULL;
    PyObject *ret = NULL;
    Py_ssize_t m = items(&vb, 4, "values");
    if (m < 0)
        goto done;
    uint32_t top = magnitude_top((const float *)vb.buf, m);
    float f;
    memcpy(&f, &top, sizeof f);
    ret = PyFloat_FromDouble(top > 0x7f800000u ? (double)NAN : (double)f);
done:
    RELEASE(&vb);
    return ret;
}

/* 0 if `ib` holds one uint32 index < n per value of `vb`, else -1 with ValueError set: what keeps a
 * caller's mistake from writing outside θ. */
static int check_indices(Py_buffer *ib, Py_buffer *vb, Py_ssize_t n) {
    if (ib->len != vb->len) {
        PyErr_Format(PyExc_ValueError, "%zd indices for %zd values", ib->len / 4, vb->len / 4);
        return -1;
    }
    const uint32_t *ix = (const uint32_t *)ib->buf;
    Py_ssize_t k = ib->len / 4;
    uint32_t top = 0;
    for (Py_ssize_t j = 0; j < k; j++)   /* branch-free, so the compiler vectorises it; the culprit after */
        top = ix[j] > top ? ix[j] : top;
    if (k > 0 && (Py_ssize_t)top >= n) {
        for (Py_ssize_t j = 0; j < k; j++)
            if ((Py_ssize_t)ix[j] >= n) {
                PyErr_Format(PyExc_ValueError, "index %u out of range (theta has %zd entries)", ix[j], n);
                return -1;
            }
    }
    return 0;
}

/* A push's entries against θ of n: sparse (ib: indices, checked as check_indices) or dense (ib NULL:
 * one value per parameter). 0, or −1 with ValueError set. */
static int check_push(Py_buffer *ib, Py_buffer *vb, Py_ssize_t m, Py_ssize_t n) {
    if (ib)
        return check_indices(ib, vb, n);
    if (m != n) {
        PyErr_Format(PyExc_ValueError, "dense push of %zd values for theta of %zd", m, n);
        return -1;
    }
    return 0;
}

/* sgd_sparse(theta, indices, values, lr) -> None
 *   θ[k] ← θ[k] − v·lr for each sent k, lr one float32 for all (ASGD, Comp-ASGD: α/τ).
 *   The same bits as aggregate.apply_sparse's numpy path: step = float32(v · float32(lr)), then
 *   θ − step in float32. */
static PyObject *sgd_sparse(PyObject *self, PyObject *args) {
    Py_buffer tb, ib, vb;
    float lr;
    if (!PyArg_ParseTuple(args, "w*y*y*f", &tb, &ib, &vb, &lr))
        return NULL;
    PyObject *ret = NULL;
    Py_ssize_t n = items(&tb, 4, "theta"), k = items(&ib, 4, "indices"), m = items(&vb, 4, "values");
    if (n < 0 || k < 0 || m < 0 || check_indices(&ib, &vb, n) < 0)
        goto done;
    float *theta = (float *)tb.buf;
    const uint32_t *ix = (const uint32_t *)ib.buf;
    const float *v = (const float *)vb.buf;
    for (Py_ssize_t j = 0; j < k; j++) {
        float step = v[j] * lr;
        theta[ix[j]] = theta[ix[j]] - step;
    }
    ret = Py_None;
    Py_INCREF(ret);
done:
    RELEASE(&tb, &ib, &vb);
    return ret;
}

/* sgd_dense(theta, values, lr) -> None
 *   θ[k] ← θ[k] − v_k·lr for every k, lr one float32 (a dense ASGD push). The same bits as
 *   aggregate.apply_dense's numpy path (step = float32(v · float32(lr)) into a scratch array, then
 *   θ − step in float32), in one pass over θ and v instead of two with the scratch between them. */
static PyObject *sgd_dense(PyObject *self, PyObject *args) {
    Py_buffer tb, vb;
    float lr;
    if (!PyArg_ParseTuple(args, "w*y*f", &tb, &vb, &lr))
        return NULL;
    PyObject *ret = NULL;
    Py_ssize_t n = items(&tb, 4, "theta"), m = items(&vb, 4, "values");
    if (n < 0 || m < 0 || check_push(NULL, &vb, m, n) < 0)
        goto done;
    float *theta = (float *)tb.buf;
    const float *v = (const float *)vb.buf;
    for (Py_ssize_t j = 0; j < n; j++) {
        float step = v[j] * lr;
        theta[j] = theta[j] - step;
    }
    ret = Py_NewRef(Py_None);
done:
    RELEASE(&tb, &vb);
    return ret;
}

/* adacomp(theta, counts, snapshot, indices, values, alpha, staleness, lr_table) -> (Σσ, max σ)
 *   For each sent k: σ_k = counts[k] − snapshot[k] (uint32, the updates applied to θ_k since the
 *   device's pull; without a snapshot, the global staleness for every k), lr_k = float32(α / max(σ_k, 1))
 *   computed in float64, θ[k] ← θ[k] − float32(v·lr_k), counts[k] += 1.
 *   snapshot may be None; indices None means every entry (a dense push). Indices must be unique (the
 *   PS has checked them strictly increasing). lr_table: float32, lr_table[σ] = float32(α / max(σ, 1))
 *   computed as above for the small σ (a division per entry was half of this function's time). */
#define SNAP_AHEAD 32
/* adacomp's pass over the m sent entries (ix NULL: every entry), on buffers already checked: (Σσ, max σ)
 * in *sum and *max. */
static void adacomp_pass(float *theta, uint32_t *counts, const uint32_t *snap, const uint32_t *ix, const float *v,
                         Py_ssize_t m, double alpha, long long staleness, const float *table, Py_ssize_t nl,
                         unsigned long long *sum_out, unsigned long long *max_out) {
    unsigned long long sum = 0, max = 0;
    float global_lr = (float)(alpha / (double)(staleness > 1 ? staleness : 1));
    for (Py_ssize_t j = 0; j < m; j++) {
        Py_ssize_t k = ix ? (Py_ssize_t)ix[j] : j;
        /* sparse: ask for the entries SNAP_AHEAD ahead now (scattered over Θ, and the device's snapshot
           is cold: 37 → 14 µs at 16 ahead; 32 covers more of the wait when the serve loop's other
           threads have emptied the caches between two pushes, as they do) */
        if (ix && j + SNAP_AHEAD < m) {
            Py_ssize_t f = (Py_ssize_t)ix[j + SNAP_AHEAD];
            PREFETCH(&theta[f], 1);
            PREFETCH(&counts[f], 1);
            if (snap)
                PREFETCH(&snap[f], 0);
        }
        float lr;
        if (snap) {
            uint32_t sigma = counts[k] - snap[k];
            lr = (Py_ssize_t)sigma < nl ? table[sigma] : (float)(alpha / (double)(sigma > 1 ? sigma : 1));
            sum += sigma;
            if (sigma > max)
                max = sigma;
        } else {
            lr = global_lr;
        }
        float step = v[j] * lr;
        theta[k] = theta[k] - step;
        counts[k] += 1;
    }
    if (!snap && m > 0) {   /* the global τ for every entry */
        sum = (unsigned long long)(staleness > 0 ? staleness : 0) * (unsigned long long)m;
        max = staleness > 0 ? (unsigned long long)staleness : 0;
    }
    *sum_out = sum;
    *max_out = max;
}

static PyObject *adacomp(PyObject *self, PyObject *args) {
    Py_buffer tb, cb, vb, lb, sb = {0}, ib = {0};
    PyObject *snap_obj, *idx_obj;
    double alpha;
    long long staleness;
    if (!PyArg_ParseTuple(args, "w*w*OOy*dLy*", &tb, &cb, &snap_obj, &idx_obj, &vb, &alpha, &staleness, &lb))
        return NULL;
    PyObject *ret = NULL;
    int have_snap = snap_obj != Py_None, have_idx = idx_obj != Py_None;
    if (have_snap && PyObject_GetBuffer(snap_obj, &sb, PyBUF_SIMPLE) < 0)
        goto done;
    if (have_idx && PyObject_GetBuffer(idx_obj, &ib, PyBUF_SIMPLE) < 0)
        goto done;
    Py_ssize_t n = items(&tb, 4, "theta"), nc = items(&cb, 4, "counts"), m = items(&vb, 4, "values");
    Py_ssize_t nl = items(&lb, 4, "lr_table");
    if (n < 0 || nc < 0 || m < 0 || nl < 0)
        goto done;
    const float *table = (const float *)lb.buf;
    if (nc != n || (have_snap && sb.len != cb.len)) {
        PyErr_SetString(PyExc_ValueError, "theta, counts and snapshot must have the same length");
        goto done;
    }
    const uint32_t *ix = have_idx ? (const uint32_t *)ib.buf : NULL;
    if (check_push(have_idx ? &ib : NULL, &vb, m, n) < 0)
        goto done;
    unsigned long long sum, max;
    adacomp_pass((float *)tb.buf, (uint32_t *)cb.buf, have_snap ? (const uint32_t *)sb.buf : NULL, ix,
                 (const float *)vb.buf, m, alpha, staleness, table, nl, &sum, &max);
    ret = Py_BuildValue("KK", sum, max);
done:
    RELEASE(&tb, &cb, &vb, &lb, &sb, &ib);
    return ret;
}

/* ---- AdaComp's touch log (edgebed/ps/staleness.py): σ_k without a |Θ|-sized snapshot per pull ----
 *
 * Every parameter k has a list of the stamps (apply numbers, ascending) of the updates that touched it:
 * heads[k] = {start, length, capacity, 0} (uint32, one 16-byte record, so one cache line holds four),
 * the list being pool[start : start + length] with room for capacity. A device that pulled when the
 * stamp was `since` has σ_k = the number of stamps > since in k's list (a binary search). Stamps ≤ the
 * oldest outstanding pull (`floor`) are dead: dropped when a full list is appended to or the pool
 * compacted. */

typedef struct { uint32_t start, len, cap, pad; } head_t;

#define MIN_CAP 4

/* index of the first stamp > v in a[0:n] (ascending). The two ends first: a device that pulled before
 * every stamp in the list (all count) or after them all (none does) is the common case, and it reads
 * the list's first and last entries only, the lines the prefetches ask for. */
static inline uint32_t upper(const uint32_t *a, uint32_t n, uint32_t v) {
    if (n == 0 || a[0] > v)
        return 0;
    if (a[n - 1] <= v)
        return n;
    uint32_t lo = 1, hi = n - 1;   /* a[0] <= v < a[n-1] */
    while (lo < hi) {
        uint32_t mid = (lo + hi) >> 1;
        if (a[mid] <= v)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

/* The log's buffers: n lists (heads), a pool; -1 with ValueError set if they don't fit together. */
static int log_sizes(Py_buffer *hb, Py_buffer *pb, Py_ssize_t *n, Py_ssize_t *pool_n) {
    if (hb->len % (Py_ssize_t)sizeof(head_t) || pb->len % 4) {
        PyErr_SetString(PyExc_ValueError, "heads must be uint32 [n, 4] and the pool uint32");
        return -1;
    }
    *n = hb->len / (Py_ssize_t)sizeof(head_t);
    *pool_n = pb->len / 4;
    return 0;
}

/* 0 if parameter k (< n) has a list inside the pool, else -1 with ValueError set. */
static int list_ok(const head_t *h, Py_ssize_t k, Py_ssize_t n, Py_ssize_t pool_n) {
    if (k >= n) {
        PyErr_Format(PyExc_ValueError, "index %zd out of range (theta has %zd entries)", k, n);
        return -1;
    }
    if ((Py_ssize_t)h[k].start + (Py_ssize_t)h[k].cap > pool_n || h[k].len > h[k].cap) {
        PyErr_Format(PyExc_ValueError, "the touch list of parameter %zd lies outside the pool", k);
        return -1;
    }
    return 0;
}

/* How far ahead (sent entries) the sparse loops ask for what they will read. A push of a large model
 * scatters over arrays far beyond the caches (11 M parameters: θ, counters 44 MB each, heads 178 MB):
 * every entry is a miss in each, so enough of them must be in flight to cover the memory's latency.
 * Two levels: an entry's head first (HEAD_AHEAD), then, once it has arrived, its list in the pool
 * (whose place the head gives), θ and the counter (AHEAD). */
#define AHEAD 32
#define HEAD_AHEAD 64

/* Checks the lists of the sent entries first … m − 1 and returns the pool entries appending to them may
 * need (moved lists);
 * -1 with ValueError set on a bad list. Reads only the heads (the pass that follows prefetches the
 * lists itself: lines asked for here would be gone by then at large pushes). */
static long long append_need(const head_t *h, const uint32_t *ix, Py_ssize_t first, Py_ssize_t m, Py_ssize_t n,
                             Py_ssize_t pool_n) {
    long long need = 0;
    for (Py_ssize_t j = first; j < m; j++) {
        Py_ssize_t k = ix ? (Py_ssize_t)ix[j] : j;
        if (ix && j + HEAD_AHEAD < m && (Py_ssize_t)ix[j + HEAD_AHEAD] < n)
            PREFETCH(&h[ix[j + HEAD_AHEAD]], 0);
        if (list_ok(h, k, n, pool_n) < 0)
            return -1;
        if (h[k].len == h[k].cap)
            need += h[k].cap ? 2 * (long long)h[k].cap : MIN_CAP;
    }
    return need;
}

/* Asks for what appending to the lists of the sent entries j + AHEAD and j + HEAD_AHEAD will read
 * (sparse pushes whose lists append_need has checked; a prefetch never faults in any case). */
static inline void prefetch_lists(const head_t *h, const uint32_t *pool, const uint32_t *ix, Py_ssize_t j,
                                  Py_ssize_t m) {
    if (j + HEAD_AHEAD < m)
        PREFETCH(&h[ix[j + HEAD_AHEAD]], 1);
    if (j + AHEAD < m) {
        const head_t *f = &h[ix[j + AHEAD]];
        PREFETCH(&pool[f->start], 1);
        if (f->len)
            PREFETCH(&pool[f->start + f->len - 1], 1);
    }
}

/* Makes room for one more stamp in a full list: drops its dead stamps (<= floor) in place, else moves
 * it to the free tail pool[used:pool_n] with twice the room. Returns the new end of the used pool, or
 * −1, changing nothing, when the tail is too small for the move. */
static inline long long make_room(head_t *hk, uint32_t *pool, long long used, long long pool_n, uint32_t floor_) {
    uint32_t *a = pool + hk->start;
    uint32_t dead = upper(a, hk->len, floor_);
    if (dead > 0) {   /* room in place */
        memmove(a, a + dead, (size_t)(hk->len - dead) * sizeof(uint32_t));
        hk->len -= dead;
        return used;
    }
    uint32_t room = hk->cap ? 2 * hk->cap : MIN_CAP;
    if (used + room > pool_n)
        return -1;
    memcpy(pool + used, a, (size_t)hk->len * sizeof(uint32_t));
    hk->start = (uint32_t)used;
    hk->cap = room;
    return used + room;
}

/* Appends stamp to k's list (room: checked by append_need); returns the new end of the used pool. */
static inline long long append_one(head_t *hk, uint32_t *pool, long long used, long long pool_n, uint32_t stamp,
                                   uint32_t floor_) {
    if (hk->len == hk->cap)
        used = make_room(hk, pool, used, pool_n, floor_);
    pool[hk->start + hk->len++] = stamp;
    return used;
}

/* touch_sigma(pool, heads, indices|None, since, out) -> None
 *   out[j] = σ_k for the j-th sent k (indices None: every parameter): the stamps > since in k's list.
 *   out: writable uint32, one per sent entry. */
static PyObject *touch_sigma(PyObject *self, PyObject *args) {
    Py_buffer pb, hb, ob, ib = {0};
    PyObject *idx_obj;
    unsigned long long since;
    if (!PyArg_ParseTuple(args, "y*y*OKw*", &pb, &hb, &idx_obj, &since, &ob))
        return NULL;
    PyObject *ret = NULL;
    int have_idx = idx_obj != Py_None;
    if (have_idx && PyObject_GetBuffer(idx_obj, &ib, PyBUF_SIMPLE) < 0)
        goto done;
    Py_ssize_t n, pool_n, m = ob.len / 4;
    if (log_sizes(&hb, &pb, &n, &pool_n) < 0)
        goto done;
    if ((have_idx && ib.len != ob.len) || (!have_idx && m != n)) {
        PyErr_SetString(PyExc_ValueError, "out needs one entry per sent index");
        goto done;
    }
    const uint32_t *pool = (const uint32_t *)pb.buf, *ix = have_idx ? (const uint32_t *)ib.buf : NULL;
    const head_t *h = (const head_t *)hb.buf;
    uint32_t *out = (uint32_t *)ob.buf;
    for (Py_ssize_t j = 0; j < m; j++) {
        Py_ssize_t k = ix ? (Py_ssize_t)ix[j] : j;
        if (ix && j + 16 < m && (Py_ssize_t)ix[j + 16] < n)
            PREFETCH(&h[ix[j + 16]], 0);
        if (list_ok(h, k, n, pool_n) < 0)
            goto done;
        out[j] = h[k].len - upper(pool + h[k].start, h[k].len, (uint32_t)since);
    }
    ret = Py_None;
    Py_INCREF(ret);
done:
    RELEASE(&pb, &hb, &ob, &ib);
    return ret;
}

/* touch_append's work on buffers already checked: appends `stamp` to the lists of the m sent entries
 * (ix NULL: every parameter), *used the new end of the used pool and *need 0; or, changing nothing,
 * *need the pool entries the moved lists might take when the free tail can't hold them. 0, or -1 with
 * ValueError set on a bad list. */
static int append_run(uint32_t *pool, Py_ssize_t pool_n, head_t *h, Py_ssize_t n, const uint32_t *ix, Py_ssize_t m,
                      uint32_t stamp, uint32_t floor_, long long *used, long long *need) {
    *need = append_need(h, ix, 0, m, n, pool_n);
    if (*need < 0)
        return -1;
    if (*used + *need > (long long)pool_n)
        return 0;
    *need = 0;
    for (Py_ssize_t j = 0; j < m; j++) {
        if (ix)
            prefetch_lists(h, pool, ix, j, m);
        *used = append_one(&h[ix ? (Py_ssize_t)ix[j] : j], pool, *used, pool_n, stamp, floor_);
    }
    return 0;
}

/* touch_append(pool, heads, used, indices|None, stamp, floor) -> used' or −needed
 *   Appends `stamp` to the list of every sent k. A full list first drops its dead stamps (≤ floor)
 *   in place; if still full it moves to the pool's free tail pool[used:] with twice the room. Returns
 *   the new end of the used pool; or, changing nothing, −(pool entries needed) when the free tail
 *   might not hold the moved lists (the caller compacts or grows the pool and calls again). */
static PyObject *touch_append(PyObject *self, PyObject *args) {
    Py_buffer pb, hb, ib = {0};
    PyObject *idx_obj;
    long long used;
    unsigned long long stamp, floor_;
    if (!PyArg_ParseTuple(args, "w*w*LOKK", &pb, &hb, &used, &idx_obj, &stamp, &floor_))
        return NULL;
    PyObject *ret = NULL;
    int have_idx = idx_obj != Py_None;
    if (have_idx && PyObject_GetBuffer(idx_obj, &ib, PyBUF_SIMPLE) < 0)
        goto done;
    Py_ssize_t n, pool_n;
    if (log_sizes(&hb, &pb, &n, &pool_n) < 0)
        goto done;
    if (used < 0 || used > (long long)pool_n) {
        PyErr_SetString(PyExc_ValueError, "used must lie within the pool");
        goto done;
    }
    const uint32_t *ix = have_idx ? (const uint32_t *)ib.buf : NULL;
    long long need;
    if (append_run((uint32_t *)pb.buf, pool_n, (head_t *)hb.buf, n, ix, have_idx ? ib.len / 4 : n, (uint32_t)stamp,
                   (uint32_t)floor_, &used, &need) < 0)
        goto done;
    ret = PyLong_FromLongLong(need ? -need : used);
done:
    RELEASE(&pb, &hb, &ib);
    return ret;
}

/* adacomp_touch_from(theta, counts, pool, heads, used, indices|None, values, alpha, lr_table, since, stamp,
 *                    floor, first) -> (used', Σσ, max σ, next, needed)
 *   AdaComp's whole step for a device that pulled at stamp `since`, in one pass over the sent entries
 *   first, first + 1, …: σ_k from k's list (as touch_sigma), lr_k = float32(α / max(σ_k, 1)) (lr_table
 *   for the small σ, as adacomp()), θ[k] ← θ[k] − float32(v·lr_k), counts[k] += 1, and `stamp` appended
 *   to k's list (as touch_append; σ is read first, so the new stamp never counts). Σσ and max σ are
 *   over the entries done. next = m (the number of sent entries) when all are done, needed = 0. If
 *   the pool's free tail can't hold a list that must move, it stops before that entry (next, with
 *   θ, counters and lists of the entries from next on unchanged) and needed = the pool entries the
 *   remaining entries' moves may take: the caller repacks the pool and calls again from next. The
 *   entries are independent (indices unique), so a step in several calls gives the same bits as in
 *   one. One pass, not a check of every list before the step: at 11 M parameters each pass over the
 *   heads is a cache miss per entry. */
/* adacomp_touch_from's pass, on buffers already checked: from entry `first` on, adds to *sum and *max,
 * sets *used, *next (m when all are done) and *need (0, or the pool entries the remaining entries'
 * moves may take when it stopped at *next). 0, or -1 with ValueError set on a bad list. */
static int touch_from(float *theta, uint32_t *counts, uint32_t *pool, Py_ssize_t pool_n, head_t *h, Py_ssize_t n,
                      const uint32_t *ix, const float *v, Py_ssize_t m, double alpha, const float *table,
                      Py_ssize_t nl, uint32_t since, uint32_t stamp, uint32_t floor_, Py_ssize_t first,
                      long long *used_io, unsigned long long *sum, unsigned long long *max, Py_ssize_t *next,
                      long long *need) {
    long long used = *used_io;
    Py_ssize_t j;
    *need = 0;
    if (ix)   /* the first entries' heads (the loop asks HEAD_AHEAD ahead) */
        for (j = first; j < m && j < first + HEAD_AHEAD; j++)
            PREFETCH(&h[ix[j]], 1);
    for (j = first; j < m; j++) {
        Py_ssize_t k = ix ? (Py_ssize_t)ix[j] : j;
        if (ix) {
            if (j + HEAD_AHEAD < m)
                PREFETCH(&h[ix[j + HEAD_AHEAD]], 1);
            if (j + AHEAD < m) {   /* that head has arrived by now: its list's place is known */
                Py_ssize_t f = (Py_ssize_t)ix[j + AHEAD];
                const head_t *hf = &h[f];
                if ((Py_ssize_t)hf->start + (Py_ssize_t)hf->cap <= pool_n) {   /* else list_ok will say */
                    PREFETCH(&pool[hf->start], 1);
                    if (hf->len)
                        PREFETCH(&pool[hf->start + hf->len - 1], 1);
                }
                PREFETCH(&theta[f], 1);
                PREFETCH(&counts[f], 1);
            }
        }
        head_t *hk = &h[k];
        if (list_ok(h, k, n, pool_n) < 0)
            return -1;
        uint32_t sigma = hk->len - upper(pool + hk->start, hk->len, since);
        if (hk->len == hk->cap) {
            long long room = make_room(hk, pool, used, pool_n, floor_);
            if (room < 0) {   /* the free tail is full: stop here, the caller repacks */
                *need = append_need(h, ix, j, m, n, pool_n);
                if (*need < 0)
                    return -1;
                break;
            }
            used = room;
        }
        float lr = (Py_ssize_t)sigma < nl ? table[sigma] : (float)(alpha / (double)(sigma > 1 ? sigma : 1));
        *sum += sigma;
        if (sigma > *max)
            *max = sigma;
        float step = v[j] * lr;
        theta[k] = theta[k] - step;
        counts[k] += 1;
        pool[hk->start + hk->len++] = stamp;
    }
    *used_io = used;
    *next = j;
    return 0;
}

static PyObject *adacomp_touch_from(PyObject *self, PyObject *args) {
    Py_buffer tb, cb, pb, hb, vb, lb, ib = {0};
    PyObject *idx_obj;
    long long used;
    double alpha;
    unsigned long long since, stamp, floor_;
    Py_ssize_t first;
    if (!PyArg_ParseTuple(args, "w*w*w*w*LOy*dy*KKKn", &tb, &cb, &pb, &hb, &used, &idx_obj, &vb, &alpha, &lb,
                          &since, &stamp, &floor_, &first))
        return NULL;
    PyObject *ret = NULL;
    int have_idx = idx_obj != Py_None;
    if (have_idx && PyObject_GetBuffer(idx_obj, &ib, PyBUF_SIMPLE) < 0)
        goto done;
    Py_ssize_t n = items(&tb, 4, "theta"), nc = items(&cb, 4, "counts"), m = items(&vb, 4, "values");
    Py_ssize_t nl = items(&lb, 4, "lr_table"), nh, pool_n;
    if (n < 0 || nc < 0 || m < 0 || nl < 0 || log_sizes(&hb, &pb, &nh, &pool_n) < 0)
        goto done;
    if (nc != n || nh != n) {
        PyErr_SetString(PyExc_ValueError, "theta, counts and heads must have one entry per parameter");
        goto done;
    }
    if (check_push(have_idx ? &ib : NULL, &vb, m, n) < 0)
        goto done;
    if (used < 0 || used > (long long)pool_n || first < 0 || first > m) {
        PyErr_SetString(PyExc_ValueError, "used must lie within the pool, first within the entries");
        goto done;
    }
    unsigned long long sum = 0, max = 0;
    long long need;
    Py_ssize_t next;
    if (touch_from((float *)tb.buf, (uint32_t *)cb.buf, (uint32_t *)pb.buf, pool_n, (head_t *)hb.buf, n,
                   have_idx ? (const uint32_t *)ib.buf : NULL, (const float *)vb.buf, m, alpha,
                   (const float *)lb.buf, nl, (uint32_t)since, (uint32_t)stamp, (uint32_t)floor_, first, &used, &sum,
                   &max, &next, &need) < 0)
        goto done;
    ret = Py_BuildValue("LKKnL", used, sum, max, next, need);
done:
    RELEASE(&tb, &cb, &pb, &hb, &vb, &lb, &ib);
    return ret;
}

/* touch_compact(pool, heads, floor, new_pool) -> used, or −needed
 *   Copies every list's live stamps (> floor) into new_pool, one list after the other, each with
 *   room to grow by half (at least MIN_CAP; none for an empty list), and points the heads there.
 *   Changes nothing and returns −(entries needed) when new_pool is too small. */
static PyObject *touch_compact(PyObject *self, PyObject *args) {
    Py_buffer pb, hb, nb;
    unsigned long long floor_;
    if (!PyArg_ParseTuple(args, "y*w*Kw*", &pb, &hb, &floor_, &nb))
        return NULL;
    PyObject *ret = NULL;
    Py_ssize_t n, pool_n, new_n = nb.len / 4;
    if (log_sizes(&hb, &pb, &n, &pool_n) < 0)
        goto done;
    const uint32_t *pool = (const uint32_t *)pb.buf;
    uint32_t *np_ = (uint32_t *)nb.buf;
    head_t *h = (head_t *)hb.buf;
    long long total = 0;
    for (Py_ssize_t k = 0; k < n; k++) {
        if (list_ok(h, k, n, pool_n) < 0)
            goto done;
        uint32_t live = h[k].len - upper(pool + h[k].start, h[k].len, (uint32_t)floor_);
        total += live ? live + (live / 2 > MIN_CAP ? live / 2 : MIN_CAP) : 0;
    }
    if (total > (long long)new_n || total > (long long)UINT32_MAX) {
        ret = PyLong_FromLongLong(-total);
        goto done;
    }
    long long used = 0;
    for (Py_ssize_t k = 0; k < n; k++) {
        uint32_t dead = upper(pool + h[k].start, h[k].len, (uint32_t)floor_), live = h[k].len - dead;
        uint32_t room = live ? live + (live / 2 > MIN_CAP ? live / 2 : MIN_CAP) : 0;
        memcpy(np_ + used, pool + h[k].start + dead, (size_t)live * sizeof(uint32_t));
        h[k].start = (uint32_t)used;
        h[k].len = live;
        h[k].cap = room;
        used += room;
    }
    ret = PyLong_FromLongLong(used);
done:
    RELEASE(&pb, &hb, &nb);
    return ret;
}

/* ---- AdaComp.apply compiled (edgebed/ps/rules/adacomp.py) ----
 *
 * adacomp_step(rule, device, staleness, values, indices|None[, raw]) -> (σ mean, σ max), or None having
 *   changed nothing
 *   ``AdaComp._apply_py``, step for step, on the same Python objects:
 *   - the device's pull is in the touch log: its stamp from ``rule.pulls.since``, ``TouchLog.adacomp``
 *     (the stamp, the pass, a repack through the log's own ``_repack`` when the pool's tail fills,
 *     ``_appended``) and ``PullRecords.bound``'s first test (when it holds, ``bound`` itself runs, in
 *     Python);
 *   - it is not: ``adacomp_apply`` against the device's dense snapshot (or, with none, the global τ
 *     ``staleness``), then ``PullRecords.applied`` — with other pulls in the log ``TouchLog.append``
 *     (as touch_append, repacks as above) and ``bound``'s first test; with none, ``TouchLog.skip`` and
 *     ``_settle`` (its loop over stamps still listed in Python). With more devices than one push's
 *     entries divide |Θ| by (about 1/c: 100 at c = 1 %), a device's pull has mostly become a dense
 *     snapshot by the time it pushes, while newer pulls are in the log: this case.
 *   None — the Python code then runs — when an array is not what the compiled passes take (float32
 *   values, uint32 indices,
 *   C-contiguous; raw true: values and indices are a push's frames as received, the wire's
 *   little-endian float32 and uint32 in any contiguous buffer, which the PS's short path has checked
 *   already — no arrays made for them). It owns no state: every value is read from and written to the
 *   objects' instance dicts, as the Python code reads and writes them.
 *   tests/unit/ps/test_adacomp_step.py plays one random run of pulls, pushes (repacks, dense snapshots,
 *   each case above), departures and a restart to a rule on this and one on ``_apply_py``: the same Θ,
 *   counters, log and records after every step. Why: the Python around the passes — the calls, the attribute reads, the
 *   tuples — cost the PS's short path about 1.4 µs a push warm, twice that in the serve loop
 *   (benchmarks/results/ps-warm-gap.md), against the 0.8 of raw pyzmq it has to reach. */

/* The attribute names it reads, interned at import (PyInit__fastpush). */
#define STEP_NAMES(X) X(pulls) X(since) X(log) X(theta) X(counts) X(lr) X(_lr_table) X(heads) X(pool) X(used) \
    X(stamp) X(floor) X(_entries) X(_order) X(_skip) X(size) X(_repack) X(bound) X(dense) X(_settle)
#define STEP_ENUM(n) S_##n,
#define STEP_TEXT(n) #n,
enum { STEP_NAMES(STEP_ENUM) S_COUNT };
static const char *step_text[] = {STEP_NAMES(STEP_TEXT)};
static PyObject *step_name[S_COUNT];
#define S(n) step_name[S_##n]

/* An item of a dict of instance attributes: a borrowed reference, or NULL with AttributeError set. */
static PyObject *attr(PyObject *dict, PyObject *name) {
    PyObject *v = PyDict_GetItemWithError(dict, name);
    if (v == NULL && !PyErr_Occurred())
        PyErr_Format(PyExc_AttributeError, "adacomp_step: no attribute %U where AdaComp keeps one", name);
    return v;
}

/* dict[name] = an int (a new one, let go of here): 0, or -1 with an error set. */
static int set_ll(PyObject *dict, PyObject *name, long long value) {
    PyObject *x = PyLong_FromLongLong(value);
    if (x == NULL)
        return -1;
    int r = PyDict_SetItem(dict, name, x);
    Py_DECREF(x);
    return r;
}

/* A buffer of 4-byte items of format `kind` ('f' float32, 'I' uint32; 0: any bytes, a whole number of
 * 4-byte items), C-contiguous (and writable if asked): 1 taken, 0 not such a buffer (nothing held, no
 * error), -1 error. */
static int typed(PyObject *obj, Py_buffer *b, char kind, int writable) {
    if (PyObject_GetBuffer(obj, b, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT | (writable ? PyBUF_WRITABLE : 0)) < 0) {
        if (PyErr_ExceptionMatches(PyExc_BufferError) || PyErr_ExceptionMatches(PyExc_ValueError)
            || PyErr_ExceptionMatches(PyExc_TypeError)) {
            PyErr_Clear();
            return 0;
        }
        return -1;
    }
    const char *f = b->format ? b->format : "B";
    if (*f == '@' || *f == '=' || *f == '<')
        f++;
    int ok = kind == 0 ? b->len % 4 == 0
                       : b->itemsize == 4 && f[0] != '\0' && f[1] == '\0'
                             && (f[0] == kind || (kind == 'I' && f[0] == 'L'));
    if (!ok) {
        PyBuffer_Release(b);
        b->obj = NULL;
    }
    return ok;
}

/* The touch log's entries appended by the stamps up to the new one: TouchLog._appended's list. */
static int appended(PyObject *ld, Py_ssize_t m, PyObject **entries) {
    if ((*entries = attr(ld, S(_entries))) == NULL)
        return -1;
    if (!PyList_Check(*entries) || PyList_GET_SIZE(*entries) == 0) {
        PyErr_SetString(PyExc_TypeError, "adacomp_step: TouchLog._entries is not a list with its first 0");
        return -1;
    }
    PyObject *x = PyLong_FromSsize_t(m);
    if (x == NULL)
        return -1;
    PyObject *total = PyNumber_Add(PyList_GET_ITEM(*entries, PyList_GET_SIZE(*entries) - 1), x);
    Py_DECREF(x);
    if (total == NULL)
        return -1;
    int t = PyList_Append(*entries, total);
    Py_DECREF(total);
    return t;
}

/* 0 if the touch log's used end lies within its pool, else -1 with ValueError set. */
static int used_in(long long used, Py_ssize_t pool_n) {
    if (used < 0 || used > (long long)pool_n) {
        PyErr_SetString(PyExc_ValueError, "the touch log's used end lies outside its pool");
        return -1;
    }
    return 0;
}

/* The pool's free tail is full: self.used = *used; self._repack(need); then the new pool (*pb, its
 * size) and used end. 0, or -1 with an error set. */
static int repack(PyObject *log, PyObject *ld, long long need, Py_buffer *pb, Py_buffer *hb, Py_ssize_t *pool_n,
                  long long *used) {
    int t = set_ll(ld, S(used), *used);
    PyBuffer_Release(pb);
    pb->obj = NULL;
    PyObject *x, *r, *pool;
    Py_ssize_t nh;
    if (t < 0 || (x = PyLong_FromLongLong(need)) == NULL)
        return -1;
    r = PyObject_CallMethodOneArg(log, S(_repack), x);
    Py_DECREF(x);
    if (r == NULL)
        return -1;
    Py_DECREF(r);
    if ((x = attr(ld, S(used))) == NULL || ((*used = PyLong_AsLongLong(x)) == -1 && PyErr_Occurred())
        || (pool = attr(ld, S(pool))) == NULL || PyObject_GetBuffer(pool, pb, PyBUF_WRITABLE) < 0
        || log_sizes(hb, pb, &nh, pool_n) < 0)
        return -1;
    return used_in(*used, *pool_n);
}

static PyObject *adacomp_step(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 5 && nargs != 6) {
        PyErr_SetString(PyExc_TypeError, "adacomp_step(rule, device, staleness, values, indices[, raw])");
        return NULL;
    }
    PyObject *rule = args[0], *device = args[1], *values = args[3], *indices = args[4];
    long long staleness = PyLong_AsLongLong(args[2]);
    if (staleness == -1 && PyErr_Occurred())
        return NULL;
    int raw = nargs == 6 ? PyObject_IsTrue(args[5]) : 0;
    if (raw < 0)
        return NULL;
#if !PY_LITTLE_ENDIAN
    if (raw)   /* the wire's little-endian numbers are not this host's: the caller makes arrays */
        Py_RETURN_NONE;
#endif
    Py_buffer tb = {0}, cb = {0}, pb = {0}, hb = {0}, vb = {0}, lb = {0}, ib = {0}, sb = {0};
    PyObject *rd = NULL, *pd = NULL, *ld = NULL, *ret = NULL, *x, *log, *pulls, *since_map, *entries, *order;
    int t;
    rd = PyObject_GenericGetDict(rule, NULL);
    if (rd == NULL || (pulls = attr(rd, S(pulls))) == NULL || (pd = PyObject_GenericGetDict(pulls, NULL)) == NULL
        || (since_map = attr(pd, S(since))) == NULL || (log = attr(pd, S(log))) == NULL
        || (ld = PyObject_GenericGetDict(log, NULL)) == NULL || (order = attr(pd, S(_order))) == NULL)
        goto done;
    if (!PyDict_Check(since_map)) {
        PyErr_SetString(PyExc_TypeError, "adacomp_step: PullRecords.since is not a dict");
        goto done;
    }
    /* which case: the device's pull in the log; else its dense snapshot, or none (the global τ) */
    PyObject *since_obj = PyDict_GetItemWithError(since_map, device), *snap = NULL;
    int logged = PyDict_GET_SIZE(since_map) != 0;   /* pulls in the log: a step is appended to it */
    if (since_obj == NULL) {
        if (PyErr_Occurred())
            goto done;
        if ((x = attr(pd, S(dense))) == NULL)
            goto done;
        if (!PyDict_Check(x)) {
            PyErr_SetString(PyExc_TypeError, "adacomp_step: PullRecords.dense is not a dict");
            goto done;
        }
        if ((snap = PyDict_GetItemWithError(x, device)) == NULL && PyErr_Occurred())
            goto done;
    }
    PyObject *theta, *counts, *lr, *table;
    if ((theta = attr(rd, S(theta))) == NULL || (counts = attr(rd, S(counts))) == NULL || (lr = attr(rd, S(lr))) == NULL
        || (table = attr(rd, S(_lr_table))) == NULL)
        goto done;
    /* the arrays the compiled pass takes, else the Python code (its numpy case) */
    if ((t = typed(values, &vb, raw ? 0 : 'f', 0)) <= 0
        || (indices != Py_None && (t = typed(indices, &ib, raw ? 0 : 'I', 0)) <= 0)
        || (t = typed(theta, &tb, 'f', 1)) <= 0 || (t = typed(counts, &cb, 'I', 1)) <= 0
        || (snap != NULL && (t = typed(snap, &sb, 'I', 0)) <= 0)) {
        if (t == 0)
            ret = Py_NewRef(Py_None);
        goto done;
    }
    double alpha = PyFloat_AsDouble(lr);
    if (alpha == -1.0 && PyErr_Occurred())
        goto done;
    if (PyObject_GetBuffer(table, &lb, PyBUF_SIMPLE) < 0)
        goto done;
    Py_ssize_t n = tb.len / 4, m = vb.len / 4, nl = lb.len / 4, nh, pool_n;
    const uint32_t *ix = indices != Py_None ? (const uint32_t *)ib.buf : NULL;
    if (cb.len / 4 != n || (snap != NULL && sb.len != cb.len)) {
        ret = Py_NewRef(Py_None);   /* not the PS's arrays: the Python code says what is wrong */
        goto done;
    }
    if (check_push(ix ? &ib : NULL, &vb, m, n) < 0)
        goto done;
    long long used, skip;
    unsigned long long stamp, floor_, sum = 0, max = 0;
    if ((x = attr(ld, S(used))) == NULL || ((used = PyLong_AsLongLong(x)) == -1 && PyErr_Occurred())
        || (x = attr(ld, S(stamp))) == NULL
        || ((stamp = PyLong_AsUnsignedLongLong(x)) == (unsigned long long)-1 && PyErr_Occurred())
        || (x = attr(ld, S(floor))) == NULL
        || ((floor_ = PyLong_AsUnsignedLongLong(x)) == (unsigned long long)-1 && PyErr_Occurred())
        || (x = attr(ld, S(_skip))) == NULL || ((skip = PyLong_AsLongLong(x)) == -1 && PyErr_Occurred()))
        goto done;

    if (logged) {   /* the log's buffers: its lists are appended to */
        PyObject *heads, *pool;
        if ((heads = attr(ld, S(heads))) == NULL || (pool = attr(ld, S(pool))) == NULL
            || PyObject_GetBuffer(heads, &hb, PyBUF_WRITABLE) < 0 || PyObject_GetBuffer(pool, &pb, PyBUF_WRITABLE) < 0
            || log_sizes(&hb, &pb, &nh, &pool_n) < 0)
            goto done;
        if (nh != n) {
            PyErr_SetString(PyExc_ValueError, "theta, counts and heads must have one entry per parameter");
            goto done;
        }
        if (used_in(used, pool_n) < 0)
            goto done;
    }
    long long need;
    if (since_obj != NULL) {
        /* TouchLog.adacomp: the new stamp, then the pass (with repacks) */
        unsigned long long since = PyLong_AsUnsignedLongLong(since_obj);
        if (since == (unsigned long long)-1 && PyErr_Occurred())
            goto done;
        stamp += 1;
        if (set_ll(ld, S(stamp), (long long)stamp) < 0)
            goto done;
        Py_ssize_t first = 0;
        while (1) {
            if (touch_from((float *)tb.buf, (uint32_t *)cb.buf, (uint32_t *)pb.buf, pool_n, (head_t *)hb.buf, n, ix,
                           (const float *)vb.buf, m, alpha, (const float *)lb.buf, nl, (uint32_t)since,
                           (uint32_t)stamp, (uint32_t)floor_, first, &used, &sum, &max, &first, &need) < 0)
                goto done;
            if (!need)
                break;
            if (repack(log, ld, need, &pb, &hb, &pool_n, &used) < 0)
                goto done;
        }
    } else {
        /* adacomp_apply(θ, counts, snapshot, …, staleness), then pulls.applied: with pulls in the log,
           log.append(indices) (the new stamp, appended with repacks); without, log.skip(indices) (a
           stamp, nothing written) */
        adacomp_pass((float *)tb.buf, (uint32_t *)cb.buf, snap ? (const uint32_t *)sb.buf : NULL, ix,
                     (const float *)vb.buf, m, alpha, staleness, (const float *)lb.buf, nl, &sum, &max);
        stamp += 1;
        if (set_ll(ld, S(stamp), (long long)stamp) < 0)
            goto done;
        while (logged) {
            if (append_run((uint32_t *)pb.buf, pool_n, (head_t *)hb.buf, n, ix, m, (uint32_t)stamp, (uint32_t)floor_,
                           &used, &need) < 0)
                goto done;
            if (!need)
                break;
            if (repack(log, ld, need, &pb, &hb, &pool_n, &used) < 0)
                goto done;
        }
    }
    /* self._appended(used, indices) */
    if (set_ll(ld, S(used), used) < 0 || appended(ld, m, &entries) < 0)
        goto done;
    if (logged) {
        /* pulls.bound(counts), whose loop runs while the oldest pull alone keeps more than |Θ| entries:
           its first test here, the loop itself in Python when the test holds */
        Py_ssize_t pending = PyObject_Length(order);
        if (pending < 0)
            goto done;
        if (pending > 0) {
            long long oldest, size;
            PyObject *o0 = PySequence_GetItem(order, 0);
            if (o0 == NULL)
                goto done;
            oldest = PyLong_AsLongLong(o0);
            Py_DECREF(o0);
            if ((oldest == -1 && PyErr_Occurred()) || (x = attr(ld, S(size))) == NULL
                || ((size = PyLong_AsLongLong(x)) == -1 && PyErr_Occurred()))
                goto done;
            /* log.entries_between(oldest, stamp) > log.size */
            long long at = skip - (long long)floor_, a = oldest + at, b = (long long)stamp + at;
            if (a < 0 || b >= PyList_GET_SIZE(entries) || a > b) {
                PyErr_SetString(PyExc_ValueError, "adacomp_step: the oldest pull's stamp lies outside the touch log");
                goto done;
            }
            PyObject *diff = PyNumber_Subtract(PyList_GET_ITEM(entries, b), PyList_GET_ITEM(entries, a));
            if (diff == NULL)
                goto done;
            long long between = PyLong_AsLongLong(diff);
            Py_DECREF(diff);
            if (between == -1 && PyErr_Occurred())
                goto done;
            if (between > size) {
                if ((x = PyObject_CallMethodOneArg(pulls, S(bound), counts)) == NULL)
                    goto done;
                Py_DECREF(x);
            }
        }
    } else {
        /* pulls._settle(): with no pull in the log, the stamps still listed (their pulls gone) are
           settled in Python; with none listed, log.advance(log.stamp): every stamp is dead */
        Py_ssize_t pending = PyObject_Length(order);
        if (pending < 0)
            goto done;
        if (pending > 0) {
            if ((x = PyObject_CallMethodNoArgs(pulls, S(_settle))) == NULL)
                goto done;
            Py_DECREF(x);
        } else if (stamp > floor_) {
            skip += (long long)(stamp - floor_);
            if (set_ll(ld, S(_skip), skip) < 0 || set_ll(ld, S(floor), (long long)stamp) < 0)
                goto done;
            if (skip > 1024 && skip > PyList_GET_SIZE(entries) / 2) {   /* del self._entries[:self._skip] */
                if (PyList_SetSlice(entries, 0, (Py_ssize_t)skip, NULL) < 0 || set_ll(ld, S(_skip), 0) < 0)
                    goto done;
            }
        }
    }

    /* (Σσ / m, max σ) as Python gives them: total / n if n else 0.0, float(top) */
    PyObject *mean;
    if (m == 0)
        mean = PyFloat_FromDouble(0.0);
    else if (sum < (1ULL << 53))   /* both exact in a double: one correctly rounded division, as Python's */
        mean = PyFloat_FromDouble((double)sum / (double)m);
    else {
        PyObject *s = PyLong_FromUnsignedLongLong(sum), *d = PyLong_FromSsize_t(m);
        mean = s && d ? PyNumber_TrueDivide(s, d) : NULL;
        Py_XDECREF(s);
        Py_XDECREF(d);
    }
    if (mean == NULL)
        goto done;
    ret = Py_BuildValue("(Nd)", mean, (double)max);
done:
    RELEASE(&tb, &cb, &pb, &hb, &vb, &lb, &ib, &sb);
    Py_XDECREF(rd);
    Py_XDECREF(pd);
    Py_XDECREF(ld);
    return ret;
}

static PyMethodDef methods[] = {
    {"check_sparse", check_sparse, METH_VARARGS, "check_sparse(indices, values, n, limit) -> 0 fine, "
     "1 not increasing, 2 index >= n, 3 NaN/Inf, 4 outside ±limit"},
    {"check_sparse_top", check_sparse_top, METH_VARARGS, "check_sparse_top(indices, values, n, limit) -> "
     "(check_sparse's verdict, max |v|)"},
    {"max_abs", max_abs, METH_VARARGS, "max_abs(values) -> max |v| (float32 values; NaN if any is NaN)"},
    {"sgd_sparse", sgd_sparse, METH_VARARGS, "sgd_sparse(theta, indices, values, lr): θ[k] -= v·lr"},
    {"sgd_dense", sgd_dense, METH_VARARGS, "sgd_dense(theta, values, lr): θ -= v·lr, every entry, one pass"},
    {"adacomp", adacomp, METH_VARARGS, "adacomp(theta, counts, snapshot|None, indices|None, values, alpha, "
     "staleness, lr_table) -> (sum σ, max σ): AdaComp's apply and counter update"},
    {"touch_sigma", touch_sigma, METH_VARARGS, "touch_sigma(pool, heads, indices|None, since, out): "
     "σ_k = stamps > since in k's touch list, per sent k"},
    {"adacomp_touch_from", adacomp_touch_from, METH_VARARGS, "adacomp_touch_from(theta, counts, pool, heads, used, "
     "indices|None, values, alpha, lr_table, since, stamp, floor, first) -> (used', sum σ, max σ, next, needed): "
     "AdaComp's step with σ from the touch log, and the log's append, from entry first on (needed > 0: stopped "
     "at next for a repack)"},
    {"adacomp_step", (PyCFunction)(void (*)(void))adacomp_step, METH_FASTCALL, "adacomp_step(rule, device, "
     "staleness, values, indices|None[, raw]) -> (sigma mean, sigma max), or None having changed nothing: "
     "AdaComp.apply compiled (see _fastpush.c)"},
    {"touch_append", touch_append, METH_VARARGS, "touch_append(pool, heads, used, indices|None, stamp, floor) "
     "-> new used, or -needed when the pool's free tail is too small"},
    {"touch_compact", touch_compact, METH_VARARGS, "touch_compact(pool, heads, floor, new_pool) -> used, or "
     "-needed: the live stamps packed into new_pool"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_fastpush",
                                    "The PS's compiled push path (see _fastpush.c).", -1, methods};

PyMODINIT_FUNC PyInit__fastpush(void) {
    for (int i = 0; i < S_COUNT; i++)
        if ((step_name[i] = PyUnicode_InternFromString(step_text[i])) == NULL)
            return NULL;
    return PyModule_Create(&module);
}
