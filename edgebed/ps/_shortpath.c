/* The PS's short path for pushes, compiled: ParameterServer._push_py's steps, in the same order, on
 * the same Python objects (edgebed/ps/server.py).
 *
 * A push it hands back (None) goes the general way untouched — but for the periodic look at Θ, which,
 * when due, both paths take just before the entries' check (the general path then finds it done).
 *
 * Optional, like the PS's other C parts: setup.py builds it when a C compiler is there; without it (or
 * with the compiled kernels switched off, aggregate._fast None) the PS runs ``_push_py`` itself. This
 * file owns no state: every value it reads or writes is an attribute of the ParameterServer, its
 * DeviceState, TrafficMeter, Hooks or update rule, read afresh on every push, so the Python methods
 * that change them (hello, the look at Θ, checkpoints, the engine's reads under the meter's lock) need
 * to know nothing of it. What stays Python is called from here: the rule's ``apply`` (ASGD's step; a
 * rule with a ``compiled_step`` — AdaComp: its touch log and step, _fastpush.c — has that called
 * instead, and ``apply`` only when it hands the push back), the hooks (clock, record, consumed), and
 * ``_after_apply`` — the rare tail (an
 * evaluation snapshot, the stop rule, a crash draw, a checkpoint, a look at Θ after a large step) —
 * when one of its conditions holds, tested here exactly as ``_after_apply`` tests them.
 *
 * tests/unit/ps/test_push_paths.py plays one random conversation (good pushes, duplicates, replays,
 * strangers, refusals, float16, drift, crashes, checkpoints, a stop) to a PS on this path, one on
 * ``_push_py`` and one on the general path: the same replies byte for byte, Θ, tables, traffic counts
 * and device states.
 *
 * Why: with the header, the check and the rule's kernel already compiled, the Python between them —
 * the device and PS checks, the traffic meter, the ``updates`` row, the step's note — was most of what
 * kept AdaComp's ingest under 0.8 of raw (benchmarks/results/ps-interleaved.md: the compiled parts
 * alone reach 0.87).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

/* Set once by setup() (ps/server.py at import): the functions and constants the steps use. */
static PyObject *push_frames, *aggregate, *check_entries_top, *frombuffer, *f4, *u4, *ack_template;
static long long check_every, entries_ok;
static PyObject *one;   /* the int 1 */

/* Attribute, key and method names, interned at import. */
#define NAMES(X) X(config) X(max_message_bytes) X(sessions) X(devices) X(peer) X(excluded) X(frozen) \
    X(stopped) X(_held) X(last_seq) X(version) X(statistics) X(_limit_at) X(_limit) X(theta) X(size) \
    X(_fast) X(check_sparse_top) X(_peer) X(_principal) X(meter) X(_lock) X(acquire) X(release) \
    X(_ingress_bytes) X(_messages_in) X(push_bytes) X(_push_bytes) X(_egress_bytes) X(_by_kind) X(_by_device) X(push) X(ack) \
    X(in_bytes) X(in_msgs) X(out_bytes) X(out_msgs) X(pushes) X(hooks) X(clock) X(last_seen) X(rule) \
    X(apply) X(step_scale) X(_window) X(consumed) X(record) X(updates) X(update) X(wall_time) \
    X(virtual_time) X(device) X(speed_class) X(class_of) X(staleness) X(sigma_mean) X(sigma_max) \
    X(entries) X(bytes_in) X(loss) X(_eval_step) X(stop_updates) X(crash_probability) X(crash_at) \
    X(checkpoint_every) X(anchor) X(_after_apply) X(_reply_frames) X(_release) X(value_limit) X(compiled_step) X(tally) X(moved) X(norm2)
#define ENUM(n) N_##n,
#define STRING(n) #n,
enum { NAMES(ENUM) N_NAMES };
static const char *name_text[] = {NAMES(STRING)};
static PyObject *names[N_NAMES];
#define NAME(n) names[N_##n]

/* The new references a push takes, let go of together at its end. */
typedef struct {
    PyObject *refs[128];
    int n;
} owned;

static PyObject *keep(owned *o, PyObject *x) {
    if (x != NULL) {
        if (o->n == 128) {   /* more than the steps below ever take: a programming error */
            Py_DECREF(x);
            PyErr_SetString(PyExc_SystemError, "_shortpath: too many references held");
            return NULL;
        }
        o->refs[o->n++] = x;
    }
    return x;
}

static void drop(owned *o) {
    while (o->n)
        Py_DECREF(o->refs[--o->n]);
}

/* obj.name, read from obj's instance dict (``vars(obj)``) when it is there: a dict lookup instead of
 * the generic attribute lookup's walk of the type first (~1/3 of this path's cost in the serve loop);
 * anything else (a method, a class attribute) the generic way. The classes read here define no
 * properties or other data descriptors, whose values the instance dict would not hold. */
static PyObject *field(PyObject *obj, PyObject *dict, PyObject *name) {
    if (dict != NULL) {
        PyObject *v = PyDict_GetItemWithError(dict, name);
        if (v != NULL)
            return Py_NewRef(v);
        if (PyErr_Occurred())
            return NULL;
    }
    return PyObject_GetAttr(obj, name);
}

#define GET(obj, n) keep(&o, field((obj), obj##_dict, NAME(n)))
#define DICT(obj) keep(&o, PyObject_GenericGetDict((obj), NULL))
#define TRY(x)            \
    do {                  \
        if ((x) == NULL)  \
            goto error;   \
    } while (0)
#define TRYI(x)           \
    do {                  \
        if ((x) < 0)      \
            goto error;   \
    } while (0)

/* obj.n is true: the push goes the general way (in push, whose locals x and t it uses). */
#define IF_TRUE_NONE(obj, n)                  \
    TRY(x = GET(obj, n));                     \
    TRYI(t = PyObject_IsTrue(x));             \
    if (t)                                    \
        goto none;

/* map[key] += n, or -1. */
static int add_item(PyObject *map, PyObject *key, PyObject *n) {
    PyObject *v = PyObject_GetItem(map, key);
    if (v == NULL)
        return -1;
    PyObject *sum = PyNumber_Add(v, n);
    Py_DECREF(v);
    if (sum == NULL)
        return -1;
    int r = PyObject_SetItem(map, key, sum);
    Py_DECREF(sum);
    return r;
}

/* TrafficMeter.received("push", nbytes, d) (push = 1) or .sent("ack", nbytes, d) (push = 0): the same
 * counters, under the meter's lock (the engine reads them from its own thread). Its attributes are
 * read and written in its instance dict, as ``field`` reads. For a push the meter's tally (below)
 * doesn't take: a meter without one, or a device number out of its range. */
static int meter_count(PyObject *meter, PyObject *nbytes, PyObject *d, int push) {
    PyObject *m = PyObject_GenericGetDict(meter, NULL), *lock = NULL, *r, *kind = NULL, *dev = NULL, *map;
    if (m == NULL || (lock = field(meter, m, NAME(_lock))) == NULL) {
        Py_XDECREF(m);
        return -1;
    }
    r = PyObject_CallMethodNoArgs(lock, NAME(acquire));
    if (r == NULL) {
        Py_DECREF(lock);
        Py_DECREF(m);
        return -1;
    }
    Py_DECREF(r);
    int ok = -1;
    if (push) {
        if (add_item(m, NAME(_ingress_bytes), nbytes) < 0 || add_item(m, NAME(_messages_in), one) < 0
            || add_item(m, NAME(_push_bytes), nbytes) < 0)
            goto done;
    } else if (add_item(m, NAME(_egress_bytes), nbytes) < 0)
        goto done;
    if ((map = field(meter, m, NAME(_by_kind))) == NULL)
        goto done;
    kind = PyObject_GetItem(map, push ? NAME(push) : NAME(ack));   /* a defaultdict: made if missing */
    Py_DECREF(map);
    if (kind == NULL || add_item(kind, push ? NAME(in_bytes) : NAME(out_bytes), nbytes) < 0
        || add_item(kind, push ? NAME(in_msgs) : NAME(out_msgs), one) < 0)
        goto done;
    if ((map = field(meter, m, NAME(_by_device))) == NULL)
        goto done;
    dev = PyObject_GetItem(map, d);
    Py_DECREF(map);
    if (dev == NULL)
        goto done;
    if (push ? (add_item(dev, NAME(in_bytes), nbytes) < 0 || add_item(dev, NAME(push_bytes), nbytes) < 0
                || add_item(dev, NAME(pushes), one) < 0)
             : add_item(dev, NAME(out_bytes), nbytes) < 0)
        goto done;
    ok = 0;
done:
    Py_XDECREF(kind);
    Py_XDECREF(dev);
    Py_DECREF(m);
    /* released whatever happened, an error kept for the caller */
    PyObject *type, *value, *tb;
    PyErr_Fetch(&type, &value, &tb);
    r = PyObject_CallMethodNoArgs(lock, NAME(release));
    Py_DECREF(lock);
    if (r == NULL) {
        Py_XDECREF(type);
        Py_XDECREF(value);
        Py_XDECREF(tb);
        return -1;
    }
    Py_DECREF(r);
    PyErr_Restore(type, value, tb);
    return ok;
}

/* Tally: the traffic meter's counts of the pushes this path applies and the Acks it sends, in C.
 *
 * Owned by the PS thread, which adds to it here; read by TrafficMeter (edgebed/ps/traffic.py), which
 * folds it into its counters whenever they are read (any thread, under the meter's lock), by ``take``:
 * everything since the last take, zeroed in the same step. An add and the copy-and-zero half of a take
 * call no Python code and allocate nothing Python-managed, so neither can be interrupted by the other
 * thread: a reader sees a push counted whole or not at all, and none twice or lost.
 *
 * Why: the meter's Python counters (dicts of ints, under a threading.Lock) cost a push 1.4 µs warm,
 * the largest piece of what separated the short path from its compiled parts
 * (benchmarks/results/ps-warm-gap.md). */
#define TALLY_DEVICES_MAX (1 << 22)   /* device numbers at or above it take the meter's own counters */
enum { T_PUSH_BYTES, T_PUSHES, T_ACK_BYTES, T_ACKS, T_PER_DEVICE = 3 };

typedef struct {
    PyObject_HEAD
    long long total[4];   /* push bytes, pushes, Ack bytes, Acks */
    long long *dev;       /* per device: push bytes, pushes, Ack bytes */
    unsigned char *marked;
    uint32_t *touched;    /* the devices with counts since the last take, each once */
    Py_ssize_t cap, n_touched;
} Tally;

static void tally_dealloc(Tally *t) {
    PyMem_RawFree(t->dev);
    PyMem_RawFree(t->marked);
    PyMem_RawFree(t->touched);
    Py_TYPE(t)->tp_free((PyObject *)t);
}

/* Room for device d: 0, or -1 (nothing changed) when the memory isn't there. */
static int tally_grow(Tally *t, Py_ssize_t d) {
    Py_ssize_t cap = t->cap ? t->cap : 64;
    while (cap <= d)
        cap *= 2;
    long long *dev = PyMem_RawCalloc((size_t)cap * T_PER_DEVICE, sizeof(long long));
    unsigned char *marked = PyMem_RawCalloc((size_t)cap, 1);
    uint32_t *touched = PyMem_RawMalloc((size_t)cap * sizeof(uint32_t));
    if (dev == NULL || marked == NULL || touched == NULL) {
        PyMem_RawFree(dev);
        PyMem_RawFree(marked);
        PyMem_RawFree(touched);
        return -1;
    }
    if (t->cap) {
        memcpy(dev, t->dev, (size_t)t->cap * T_PER_DEVICE * sizeof(long long));
        memcpy(marked, t->marked, (size_t)t->cap);
        memcpy(touched, t->touched, (size_t)t->n_touched * sizeof(uint32_t));
    }
    PyMem_RawFree(t->dev);
    PyMem_RawFree(t->marked);
    PyMem_RawFree(t->touched);
    t->dev = dev, t->marked = marked, t->touched = touched, t->cap = cap;
    return 0;
}

/* A push of nbytes from device d applied (push = 1), or an Ack of nbytes sent to it (push = 0): 1, or
 * 0 having counted nothing (a device number out of the tally's range, or no memory to grow it: the
 * caller counts it the meter's way). No Python code runs here. */
static int tally_add(Tally *t, Py_ssize_t d, long long nbytes, int push) {
    if (d < 0 || d >= TALLY_DEVICES_MAX || (d >= t->cap && tally_grow(t, d) < 0))
        return 0;
    long long *dv = t->dev + d * T_PER_DEVICE;
    if (push) {
        t->total[T_PUSH_BYTES] += nbytes;
        t->total[T_PUSHES] += 1;
        dv[0] += nbytes;
        dv[1] += 1;
    } else {
        t->total[T_ACK_BYTES] += nbytes;
        t->total[T_ACKS] += 1;
        dv[2] += nbytes;
    }
    if (!t->marked[d]) {
        t->marked[d] = 1;
        t->touched[t->n_touched++] = (uint32_t)d;
    }
    return 1;
}

/* Tally.take() -> None, or (push bytes, pushes, Ack bytes, Acks, ((device, push bytes, pushes, Ack
 * bytes), ...)): the counts since the last take, which are zeroed. */
static PyObject *tally_take(Tally *t, PyObject *unused) {
    Py_ssize_t n = t->n_touched;
    if (n == 0)
        Py_RETURN_NONE;
    long long total[4], *copy = PyMem_RawMalloc((size_t)n * 4 * sizeof(long long));
    if (copy == NULL)
        return PyErr_NoMemory();
    /* copied and zeroed with no Python call in between: atomic for the PS thread's adds */
    memcpy(total, t->total, sizeof total);
    memset(t->total, 0, sizeof t->total);
    for (Py_ssize_t i = 0; i < n; i++) {
        uint32_t d = t->touched[i];
        long long *dv = t->dev + (Py_ssize_t)d * T_PER_DEVICE;
        copy[4 * i] = d, copy[4 * i + 1] = dv[0], copy[4 * i + 2] = dv[1], copy[4 * i + 3] = dv[2];
        dv[0] = dv[1] = dv[2] = 0;
        t->marked[d] = 0;
    }
    t->n_touched = 0;
    PyObject *devices = PyTuple_New(n), *out = NULL;
    if (devices == NULL)
        goto done;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *row = Py_BuildValue("(LLLL)", copy[4 * i], copy[4 * i + 1], copy[4 * i + 2], copy[4 * i + 3]);
        if (row == NULL)
            goto done;
        PyTuple_SET_ITEM(devices, i, row);
    }
    out = Py_BuildValue("(LLLLO)", total[0], total[1], total[2], total[3], devices);
done:
    Py_XDECREF(devices);
    if (out == NULL) {   /* no memory for the answer: the counts go back, none lost (no Python runs here) */
        for (int i = 0; i < 4; i++)
            t->total[i] += total[i];
        for (Py_ssize_t i = 0; i < n; i++) {
            Py_ssize_t d = (Py_ssize_t)copy[4 * i];
            long long *dv = t->dev + d * T_PER_DEVICE;
            dv[0] += copy[4 * i + 1], dv[1] += copy[4 * i + 2], dv[2] += copy[4 * i + 3];
            if (!t->marked[d]) {
                t->marked[d] = 1;
                t->touched[t->n_touched++] = (uint32_t)d;
            }
        }
    }
    PyMem_RawFree(copy);
    return out;
}

static PyMethodDef tally_methods[] = {
    {"take", (PyCFunction)tally_take, METH_NOARGS,
     "take() -> None, or (push bytes, pushes, Ack bytes, Acks, ((device, push bytes, pushes, Ack bytes), ...)): "
     "the counts since the last take, zeroed"},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject TallyType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "edgebed.ps._shortpath.Tally",
    .tp_basicsize = sizeof(Tally),
    .tp_dealloc = (destructor)tally_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "The traffic meter's counts of the short path's pushes and Acks (see _shortpath.c).",
    .tp_methods = tally_methods,
    .tp_new = PyType_GenericNew,
};

/* A push (push = 1) or Ack counted: in the meter's tally when it has one that takes device d, else as
 * TrafficMeter.received / .sent count it. 0, or -1 with an error set. */
static int count(PyObject *meter, PyObject *nbytes, long long n, PyObject *d, int push) {
    PyObject *m = PyObject_GenericGetDict(meter, NULL), *tally;
    if (m == NULL)
        return -1;
    tally = PyDict_GetItemWithError(m, NAME(tally));   /* borrowed */
    Py_DECREF(m);
    if (tally == NULL && PyErr_Occurred())
        return -1;
    if (tally != NULL && Py_IS_TYPE(tally, &TallyType)) {
        Py_ssize_t dev = PyLong_Check(d) ? PyLong_AsSsize_t(d) : -1;
        if (dev == -1 && PyErr_Occurred())
            PyErr_Clear();   /* not a small int: the meter's way */
        else if (tally_add((Tally *)tally, dev, n, push))
            return 0;
    }
    PyObject *obj = nbytes != NULL ? Py_NewRef(nbytes) : PyLong_FromLongLong(n);
    if (obj == NULL)
        return -1;
    int r = meter_count(meter, obj, d, push);
    Py_DECREF(obj);
    return r;
}

/* Whether the wire's little-endian float32 and uint32 are this host's: then a kernel may read a frame
 * as received instead of an array over it. */
#define WIRE_IS_NATIVE PY_LITTLE_ENDIAN

/* values, indices = np.frombuffer(frames[1], float32), np.frombuffer(frames[2], uint32) (indices None
 * for a dense push), kept in o: 0, or -1 with an error set. */
static int arrays(PyObject **frame, PyObject *n_indices, PyObject **values, PyObject **indices, owned *o) {
    if ((*values = keep(o, PyObject_CallFunctionObjArgs(frombuffer, frame[1], f4, NULL))) == NULL)
        return -1;
    if (n_indices != Py_None && (*indices = keep(o, PyObject_CallFunctionObjArgs(frombuffer, frame[2], u4, NULL))) == NULL)
        return -1;
    return 0;
}

/* A long long from a Python int, or -1 with an error set (the values read here are never negative). */
static long long as_ll(PyObject *x) { return x == NULL ? -1 : PyLong_AsLongLong(x); }

/* push(ps, peer, frames, principal) -> the Ack's frames, or None having changed nothing:
 * ParameterServer._push_py, step for step. */
static PyObject *push(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 4) {
        PyErr_SetString(PyExc_TypeError, "push(ps, peer, frames, principal)");
        return NULL;
    }
    if (push_frames == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "_shortpath.setup() was not called (ps/server.py calls it at import)");
        return NULL;
    }
    PyObject *ps = args[0], *peer = args[1], *frames = args[2], *principal = args[3];
    owned o = {.n = 0};
    PyObject *out = NULL, *x;
    int t;

    /* fields = wire.push_fields(frames, self.config.max_message_bytes) */
    PyObject *ps_dict, *config, *config_dict, *fields;
    TRY(ps_dict = DICT(ps));
    TRY(config = GET(ps, config));
    TRY(config_dict = DICT(config));
    TRY(x = GET(config, max_message_bytes));
    TRY(fields = keep(&o, PyObject_CallFunctionObjArgs(push_frames, frames, x, NULL)));
    if (fields == Py_None)
        goto none;
    if (!PyTuple_Check(fields) || PyTuple_GET_SIZE(fields) != 7) {
        PyErr_SetString(PyExc_TypeError, "_shortpath: push_frames gave no 7-tuple");
        goto error;
    }
    PyObject *session = PyTuple_GET_ITEM(fields, 0), *seq = PyTuple_GET_ITEM(fields, 1),
             *version = PyTuple_GET_ITEM(fields, 2), *loss = PyTuple_GET_ITEM(fields, 3),
             *nbytes = PyTuple_GET_ITEM(fields, 4), *n_values = PyTuple_GET_ITEM(fields, 5),
             *n_indices = PyTuple_GET_ITEM(fields, 6);

    /* d = self.sessions.get(session); st = self.devices[d] */
    PyObject *d, *st;
    TRY(x = GET(ps, sessions));
    if (!PyDict_Check(x)) {
        PyErr_SetString(PyExc_TypeError, "_shortpath: ParameterServer.sessions is not a dict");
        goto error;
    }
    if ((d = PyDict_GetItemWithError(x, session)) == NULL) {
        if (PyErr_Occurred())
            goto error;
        goto none;
    }
    Py_INCREF(d);
    TRY(keep(&o, d));
    TRY(x = GET(ps, devices));
    TRY(st = keep(&o, PyObject_GetItem(x, d)));
    PyObject *st_dict;
    TRY(st_dict = DICT(st));

    /* The conditions of _push_py, each handing the push to the general path. */
    TRY(x = GET(st, peer));
    TRYI(t = PyObject_RichCompareBool(x, peer, Py_NE));
    if (t)
        goto none;
    IF_TRUE_NONE(st, excluded)
    IF_TRUE_NONE(st, frozen)
    IF_TRUE_NONE(ps, stopped)
    IF_TRUE_NONE(ps, _held)
    IF_TRUE_NONE(config, statistics)
    TRY(x = GET(st, last_seq));
    TRYI(t = PyObject_RichCompareBool(seq, x, Py_LE));
    if (t)
        goto none;
    long long values_n = as_ll(n_values), ps_version, limit_at;
    PyObject *ps_version_obj;
    TRY(ps_version_obj = GET(ps, version));
    if ((ps_version = as_ll(ps_version_obj)) == -1 && PyErr_Occurred())
        goto error;
    if (values_n <= 0 || as_ll(version) > ps_version)
        goto none;
    TRY(x = GET(ps, _limit_at));
    if ((limit_at = as_ll(x)) == -1 && PyErr_Occurred())
        goto error;
    PyObject *theta, *n_obj;
    TRY(theta = GET(ps, theta));
    TRY(n_obj = keep(&o, PyObject_GetAttr(theta, NAME(size))));
    if (n_indices == Py_None ? values_n != as_ll(n_obj) : as_ll(n_indices) != values_n)
        goto none;
    if (PyErr_Occurred())
        goto error;

    /* the check, and max |v|: a sparse push's on its frames as received (the kernel reads any buffer; on
       a little-endian host the wire's numbers are the host's), a dense one's on values as an array */
    PyObject **frame = PySequence_Fast_ITEMS(frames), *values = NULL, *indices = Py_None, *limit, *fast, *verdict;
    if (limit_at + check_every <= ps_version)   /* the bound's look at Θ is due: taken as _push_py takes it */
        TRY(keep(&o, PyObject_CallMethodNoArgs(ps, NAME(value_limit))));
    TRY(limit = GET(ps, _limit));
    TRY(fast = keep(&o, PyObject_GetAttr(aggregate, NAME(_fast))));
    if (n_indices != Py_None && fast != Py_None && WIRE_IS_NATIVE)   /* check_entries_top's compiled case */
        verdict = PyObject_CallMethodObjArgs(fast, NAME(check_sparse_top), frame[2], frame[1], n_obj, limit, NULL);
    else {
        TRYI(arrays(frame, n_indices, &values, &indices, &o));
        verdict = PyObject_CallFunctionObjArgs(check_entries_top, indices, values, n_obj, limit, NULL);
    }
    TRY(keep(&o, verdict));
    if (!PyTuple_Check(verdict) || PyTuple_GET_SIZE(verdict) != 2) {
        PyErr_SetString(PyExc_TypeError, "_shortpath: the entry check gave no (verdict, top)");
        goto error;
    }
    long long code = as_ll(PyTuple_GET_ITEM(verdict, 0));
    if (code == -1 && PyErr_Occurred())
        goto error;
    if (code != entries_ok)
        goto none;
    double top = PyFloat_AsDouble(PyTuple_GET_ITEM(verdict, 1));
    if (top == -1.0 && PyErr_Occurred())
        goto error;

    /* Nothing has changed so far (but for the look at Θ, if it was due). From here on, the push is applied. */
    TRYI(PyObject_SetAttr(ps, NAME(_peer), peer));
    TRYI(PyObject_SetAttr(ps, NAME(_principal), principal));
    PyObject *meter, *hooks, *now, *wall, *virt;
    TRY(meter = GET(ps, meter));
    long long push_n = as_ll(nbytes);
    if (push_n == -1 && PyErr_Occurred())
        goto error;
    TRYI(count(meter, nbytes, push_n, d, 1));
    TRY(hooks = GET(ps, hooks));
    PyObject *hooks_dict;
    TRY(hooks_dict = DICT(hooks));
    TRY(x = GET(hooks, clock));
    TRY(now = keep(&o, PyObject_CallNoArgs(x)));
    TRY(wall = keep(&o, PySequence_GetItem(now, 0)));
    TRY(virt = keep(&o, PySequence_GetItem(now, 1)));
    TRYI(PyObject_SetAttr(st, NAME(last_seen), wall));

    /* _apply_push: the rule's step, the version, the step's note, the device's counters */
    PyObject *staleness, *rule, *new_version, *sigma_mean, *sigma_max;
    TRY(staleness = keep(&o, PyNumber_Subtract(ps_version_obj, version)));
    TRY(rule = GET(ps, rule));
    /* rule.apply(d, staleness, values, indices), or its compiled step where the rule has one (AdaComp:
       what apply itself would call, without the Applied record around its (σ mean, σ max)) */
    PyObject *compiled, *applied = Py_None;
    TRY(compiled = keep(&o, PyObject_GetAttr(rule, NAME(compiled_step))));
    if (compiled != Py_None) {   /* on the frames as received (raw): no arrays made */
        PyObject *step_args[6] = {rule, d, staleness, frame[1], n_indices != Py_None ? frame[2] : Py_None, Py_True};
        TRY(applied = keep(&o, PyObject_Vectorcall(compiled, step_args, 6, NULL)));
        if (applied != Py_None && (!PyTuple_Check(applied) || PyTuple_GET_SIZE(applied) != 2)) {
            PyErr_SetString(PyExc_TypeError, "_shortpath: the rule's compiled_step gave no (sigma mean, sigma max)");
            goto error;
        }
    }
    if (applied != Py_None) {
        sigma_mean = PyTuple_GET_ITEM(applied, 0);
        sigma_max = PyTuple_GET_ITEM(applied, 1);
    } else {
        if (values == NULL)
            TRYI(arrays(frame, n_indices, &values, &indices, &o));
        TRY(x = keep(&o, PyObject_GetAttr(rule, NAME(apply))));
        TRY(applied = keep(&o, PyObject_CallFunctionObjArgs(x, d, staleness, values, indices, NULL)));
        TRY(sigma_mean = keep(&o, PyObject_GetAttr(applied, NAME(sigma_mean))));
        TRY(sigma_max = keep(&o, PyObject_GetAttr(applied, NAME(sigma_max))));
    }
    TRY(new_version = keep(&o, PyLong_FromLongLong(ps_version + 1)));
    TRYI(PyObject_SetAttr(ps, NAME(version), new_version));
    /* _note_step(d, values, top): step = top × the rule's step scale; the device's window */
    TRY(x = keep(&o, PyObject_CallMethodNoArgs(rule, NAME(step_scale))));
    double scale = PyFloat_AsDouble(x);
    if (scale == -1.0 && PyErr_Occurred())
        goto error;
    double step = top * scale;
    PyObject *window, *seen, *largest, *pushes;
    TRY(window = GET(ps, _window));
    seen = PyDict_Check(window) ? PyDict_GetItemWithError(window, d) : NULL;
    if (!PyDict_Check(window) || (seen == NULL && PyErr_Occurred())) {
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_TypeError, "_shortpath: ParameterServer._window is not a dict");
        goto error;
    }
    if (seen != NULL) {
        if (!PyTuple_Check(seen) || PyTuple_GET_SIZE(seen) != 2) {
            PyErr_SetString(PyExc_TypeError, "_shortpath: a ParameterServer._window entry is not (step, pushes)");
            goto error;
        }
        largest = PyTuple_GET_ITEM(seen, 0);
        double l = PyFloat_AsDouble(largest);
        if (l == -1.0 && PyErr_Occurred())
            goto error;
        TRY(largest = keep(&o, step > l ? PyFloat_FromDouble(step) : Py_NewRef(largest)));
        TRY(pushes = keep(&o, PyNumber_Add(PyTuple_GET_ITEM(seen, 1), one)));
    } else {   /* (max(0.0, step), 0 + 1) */
        TRY(largest = keep(&o, PyFloat_FromDouble(step > 0.0 ? step : 0.0)));
        TRY(pushes = keep(&o, PyLong_FromLong(1)));
    }
    TRY(x = keep(&o, PyTuple_Pack(2, largest, pushes)));
    TRYI(PyDict_SetItem(window, d, x));
    TRYI(PyObject_SetAttr(st, NAME(last_seq), seq));
    TRYI(add_item(st_dict, NAME(pushes), one));
    /* st.moved += step scale × aggregate.norm2(values): the harm the PS attributes (_apply_push) */
    if (values == NULL)
        TRYI(arrays(frame, n_indices, &values, &indices, &o));
    TRY(x = keep(&o, PyObject_CallMethodOneArg(aggregate, NAME(norm2), values)));
    double norm = PyFloat_AsDouble(x);
    if (norm == -1.0 && PyErr_Occurred())
        goto error;
    TRY(x = keep(&o, PyFloat_FromDouble(scale * norm)));
    TRYI(add_item(st_dict, NAME(moved), x));
    TRY(x = GET(hooks, consumed));
    TRY(keep(&o, PyObject_CallFunctionObjArgs(x, peer, Py_None, NULL)));

    /* _record_update: the updates row */
    PyObject *row, *speed_class;
    TRY(x = GET(config, class_of));
    TRY(speed_class = keep(&o, PyObject_CallOneArg(x, d)));
    TRY(row = keep(&o, PyDict_New()));
    if (PyDict_SetItem(row, NAME(update), new_version) < 0 || PyDict_SetItem(row, NAME(wall_time), wall) < 0
        || PyDict_SetItem(row, NAME(virtual_time), virt) < 0 || PyDict_SetItem(row, NAME(device), d) < 0
        || PyDict_SetItem(row, NAME(speed_class), speed_class) < 0
        || PyDict_SetItem(row, NAME(staleness), staleness) < 0
        || PyDict_SetItem(row, NAME(sigma_mean), sigma_mean) < 0
        || PyDict_SetItem(row, NAME(sigma_max), sigma_max) < 0 || PyDict_SetItem(row, NAME(entries), n_values) < 0
        || PyDict_SetItem(row, NAME(bytes_in), nbytes) < 0 || PyDict_SetItem(row, NAME(loss), loss) < 0)
        goto error;
    TRY(x = GET(hooks, record));
    TRY(keep(&o, PyObject_CallFunctionObjArgs(x, NAME(updates), row, NULL)));

    /* _after_apply's conditions, tested as it tests them: when one holds, it runs (in Python) */
    int due = 0, freeze = 0;
    long long every;
    TRY(x = GET(ps, _eval_step));
    TRYI(t = PyObject_IsTrue(x));
    if (t && (every = as_ll(x)) > 0 && (ps_version + 1) % every == 0)
        due = 1;
    TRY(x = GET(config, stop_updates));
    if (x != Py_None) {
        TRYI(t = PyObject_RichCompareBool(new_version, x, Py_GE));
        due |= t;
    }
    TRY(x = GET(config, crash_probability));
    double p = PyFloat_AsDouble(x);
    if (p == -1.0 && PyErr_Occurred())
        goto error;
    due |= p > 0;
    TRY(x = GET(config, crash_at));   /* failures.crash: its schedule is read by _after_apply */
    due |= x != Py_None;
    TRY(x = GET(config, checkpoint_every));
    TRYI(t = PyObject_IsTrue(x));
    if (t && (every = as_ll(x)) > 0 && (ps_version + 1) % every == 0)
        due = 1;
    TRY(x = GET(ps, anchor));
    double anchor = PyFloat_AsDouble(x);
    if (anchor == -1.0 && PyErr_Occurred())
        goto error;
    due |= step > anchor;
    if (PyErr_Occurred())
        goto error;
    if (due) {
        PyObject *step_obj;
        TRY(step_obj = keep(&o, PyFloat_FromDouble(step)));
        TRY(x = keep(&o, PyObject_CallMethodObjArgs(ps, NAME(_after_apply), d, st, step_obj, NULL)));
        TRYI(freeze = PyObject_IsTrue(x));
    }

    /* the reply: the Ack (as wire.ack_applied), or what _reply_frames makes of a crash */
    PyObject *head;
    if (freeze) {
        TRY(out = PyObject_CallMethodObjArgs(ps, NAME(_reply_frames), d, Py_True, NULL));
    } else {
        TRY(x = GET(ps, version));
        TRY(head = keep(&o, PyNumber_Remainder(ack_template, x)));
        TRY(out = PyList_New(1));
        PyList_SET_ITEM(out, 0, Py_NewRef(head));
    }
    TRY(x = GET(ps, _held));
    TRYI(t = PyObject_IsTrue(x));
    if (t)
        TRY(keep(&o, PyObject_CallMethodNoArgs(ps, NAME(_release))));
    TRY(head = keep(&o, PySequence_GetItem(out, 0)));
    Py_ssize_t head_n = PyObject_Length(head);
    if (head_n < 0)
        goto error;
    TRYI(count(meter, NULL, head_n, d, 0));
    drop(&o);
    return out;

none:
    drop(&o);
    Py_RETURN_NONE;
error:
    Py_XDECREF(out);
    drop(&o);
    return NULL;
}

/* setup(push_frames, aggregate, check_entries_top, frombuffer, f4, u4, ack_template, check_every,
 *       entries_ok): what the steps use (ps/server.py, at import). */
static PyObject *setup(PyObject *self, PyObject *args) {
    PyObject *a[7];
    long long every, ok;
    if (!PyArg_ParseTuple(args, "OOOOOOSLL", &a[0], &a[1], &a[2], &a[3], &a[4], &a[5], &a[6], &every, &ok))
        return NULL;
    PyObject **slots[7] = {&push_frames, &aggregate, &check_entries_top, &frombuffer, &f4, &u4, &ack_template};
    for (int i = 0; i < 7; i++)
        Py_XSETREF(*slots[i], Py_NewRef(a[i]));
    check_every = every;
    entries_ok = ok;
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"push", (PyCFunction)(void (*)(void))push, METH_FASTCALL,
     "push(ps, peer, frames, principal) -> the Ack's frames, or None: ParameterServer._push_py, compiled"},
    {"setup", setup, METH_VARARGS,
     "setup(push_frames, aggregate, check_entries_top, frombuffer, f4, u4, ack_template, check_every, entries_ok)"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_shortpath",
                                    "The PS's short path for pushes, compiled (see _shortpath.c).", -1, methods};

PyMODINIT_FUNC PyInit__shortpath(void) {
    if ((one = PyLong_FromLong(1)) == NULL)
        return NULL;
    for (int i = 0; i < N_NAMES; i++)
        if ((names[i] = PyUnicode_InternFromString(name_text[i])) == NULL)
            return NULL;
    if (PyType_Ready(&TallyType) < 0)
        return NULL;
    PyObject *m = PyModule_Create(&module);
    if (m != NULL && PyModule_AddObjectRef(m, "Tally", (PyObject *)&TallyType) < 0)
        Py_CLEAR(m);
    return m;
}
