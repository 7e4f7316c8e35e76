/* The PS's compiled push path: the per-entry loops of a sparse push in one pass each.
 *
 * Optional: setup.py builds it when a C compiler is there; edgebed/ps/aggregate.py falls back to numpy
 * otherwise. Both give the same bits (tests/unit/test_fastpush.py): every step is the float32 / float64
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
#include <math.h>
#include <stdint.h>

#if defined(__GNUC__) || defined(__clang__)
#define PREFETCH(addr, write) __builtin_prefetch((addr), (write))
#else
#define PREFETCH(addr, write) ((void)0)
#endif

/* check_sparse(indices, values, n, limit) -> int
 *   0  fine
 *   1  indices not strictly increasing (unsorted or duplicated)
 *   2  the last (largest) index is >= n
 *   3  a value is NaN or ±Inf
 *   4  a value is outside ±limit
 * In this order of precedence, as ParameterServer._check_payload words them. Sparse pushes only
 * (a dense one takes aggregate.check_entries' BLAS pass). */
static PyObject *check_sparse(PyObject *self, PyObject *args) {
    Py_buffer ib, vb;
    Py_ssize_t n;
    double limit;
    if (!PyArg_ParseTuple(args, "y*y*nd", &ib, &vb, &n, &limit))
        return NULL;
    const uint32_t *ix = (const uint32_t *)ib.buf;
    const float *v = (const float *)vb.buf;
    Py_ssize_t k = ib.len / (Py_ssize_t)sizeof(uint32_t), m = vb.len / (Py_ssize_t)sizeof(float);
    int code = 0, unsorted = 0;   /* branch-free, so the compiler vectorises both loops */
    for (Py_ssize_t j = 1; j < k; j++)
        unsorted |= ix[j] <= ix[j - 1];
    if (unsorted)
        code = 1;
    else if (k > 0 && (Py_ssize_t)ix[k - 1] >= n)
        code = 2;
    if (code == 0) {
        /* NaN fails both comparisons, ±Inf the bound: one pass finds any bad value (compared in
           double, as the numpy path's float(v.min()) is) */
        int bad = 0;
        for (Py_ssize_t j = 0; j < m; j++) {
            double x = (double)v[j];
            bad |= (x != x) | (x < -limit) | (x > limit);
        }
        if (bad) {   /* which kind: any NaN / ±Inf wins */
            code = 4;
            for (Py_ssize_t j = 0; j < m; j++)
                if (!isfinite(v[j])) {
                    code = 3;
                    break;
                }
        }
    }
    PyBuffer_Release(&ib);
    PyBuffer_Release(&vb);
    return PyLong_FromLong(code);
}

/* A buffer's length in items of `size` bytes, or -1 (ValueError set) if it isn't a whole number. */
static Py_ssize_t items(Py_buffer *b, Py_ssize_t size, const char *name) {
    if (b->len % size) {
        PyErr_Format(PyExc_ValueError, "%s: %zd bytes is not a whole number of %zd-byte items", name, b->len, size);
        return -1;
    }
    return b->len / size;
}

/* 0 if `ib` holds one uint32 index < n per value of `vb`, else -1 with ValueError set: what keeps a
 * caller's mistake from writing outside θ. */
static int check_indices(Py_buffer *ib, Py_buffer *vb, Py_ssize_t n) {
    if (ib->len != vb->len) {
        PyErr_Format(PyExc_ValueError, "%zd indices for %zd values", ib->len / 4, vb->len / 4);
        return -1;
    }
    const uint32_t *ix = (const uint32_t *)ib->buf;
    for (Py_ssize_t j = 0; j < ib->len / 4; j++) {
        if ((Py_ssize_t)ix[j] >= n) {
            PyErr_Format(PyExc_ValueError, "index %u out of range (theta has %zd entries)", ix[j], n);
            return -1;
        }
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
    PyBuffer_Release(&tb);
    PyBuffer_Release(&ib);
    PyBuffer_Release(&vb);
    return ret;
}

/* adacomp(theta, counts, snapshot, indices, values, alpha, staleness, lr_table) -> (Σσ, max σ)
 *   For each sent k: σ_k = counts[k] − snapshot[k] (uint32, the updates applied to θ_k since the
 *   device's pull; without a snapshot, the global staleness for every k), lr_k = float32(α / max(σ_k, 1))
 *   computed in float64, θ[k] ← θ[k] − float32(v·lr_k), counts[k] += 1.
 *   snapshot may be None; indices None means every entry (a dense push). Indices must be unique (the
 *   PS has checked them strictly increasing). lr_table: float32, lr_table[σ] = float32(α / max(σ, 1))
 *   computed as above for the small σ (a division per entry was half of this function's time). */
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
    if (have_idx) {
        if (check_indices(&ib, &vb, n) < 0)
            goto done;
    } else if (m != n) {
        PyErr_Format(PyExc_ValueError, "dense push of %zd values for theta of %zd", m, n);
        goto done;
    }
    float *theta = (float *)tb.buf;
    uint32_t *counts = (uint32_t *)cb.buf;
    const uint32_t *snap = have_snap ? (const uint32_t *)sb.buf : NULL;
    const float *v = (const float *)vb.buf;
    unsigned long long sum = 0, max = 0;
    float global_lr = (float)(alpha / (double)(staleness > 1 ? staleness : 1));
    for (Py_ssize_t j = 0; j < m; j++) {
        Py_ssize_t k = ix ? (Py_ssize_t)ix[j] : j;
        if (ix && j + 16 < m) {   /* sparse: ask for the entries 16 ahead now (scattered over Θ, and */
            Py_ssize_t f = (Py_ssize_t)ix[j + 16];   /* the device's snapshot is cold: 37 → 14 µs) */
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
    ret = Py_BuildValue("KK", sum, max);
done:
    PyBuffer_Release(&tb);
    PyBuffer_Release(&cb);
    PyBuffer_Release(&vb);
    PyBuffer_Release(&lb);
    if (have_snap && sb.obj)
        PyBuffer_Release(&sb);
    if (have_idx && ib.obj)
        PyBuffer_Release(&ib);
    return ret;
}

static PyMethodDef methods[] = {
    {"check_sparse", check_sparse, METH_VARARGS, "check_sparse(indices, values, n, limit) -> 0 fine, "
     "1 not increasing, 2 index >= n, 3 NaN/Inf, 4 outside ±limit"},
    {"sgd_sparse", sgd_sparse, METH_VARARGS, "sgd_sparse(theta, indices, values, lr): θ[k] -= v·lr"},
    {"adacomp", adacomp, METH_VARARGS, "adacomp(theta, counts, snapshot|None, indices|None, values, alpha, "
     "staleness, lr_table) -> (sum σ, max σ): AdaComp's apply and counter update"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_fastpush",
                                    "The PS's compiled push path (see _fastpush.c).", -1, methods};

PyMODINIT_FUNC PyInit__fastpush(void) { return PyModule_Create(&module); }
