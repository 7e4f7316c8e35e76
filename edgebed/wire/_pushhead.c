/* The PS's reading of a canonical version-1 push header, compiled (edgebed/wire/__init__.py,
 * ``push_fields``).
 *
 * Optional: setup.py builds it when a C compiler is there; without it ``push_fields`` reads the header
 * with the regular expression ``_PUSH_V1``, which is this parser's specification. push_v1 accepts
 * exactly the headers that expression fully matches and gives the same fields
 * (tests/unit/wire/test_pushhead.py compares the two on every boundary of the expression and on
 * thousands of mutated headers):
 *
 *   EB \x01 \x05 {"session":"S","seq":N,"version":N,"loss":L,
 *                 "arrays":[["values","<f4",[C]]] }             (a dense push)
 *                 "arrays":[["values","<f4",[C]],["indices","<u4",[C]]]}   (a sparse one)
 *
 *   S  [0-9A-Za-z_-]{1,256}
 *   N  0 | [1-9][0-9]{0,17}
 *   L  null | -?(0|[1-9][0-9]{0,19})(\.[0-9]{1,20})?([eE][-+]?[0-9]{1,3})?
 *   C  0 | [1-9][0-9]{0,9}
 *
 * Every part of the expression is followed by a character its own class does not contain, so reading
 * each part greedily and then the literal after it accepts what the expression does, no more.
 *
 * Why: the expression, its groups and four int() calls were 2 of the ~3 µs ``push_fields`` took per
 * push (benchmarks/results/ps-breakdown.json), on the path every push of every run takes.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>
#include <string.h>

typedef struct {
    const char *p, *end;
} cursor;

/* The literal s next (advancing past it), or 0. */
static int literal(cursor *c, const char *s, size_t n) {
    if ((size_t)(c->end - c->p) < n || memcmp(c->p, s, n) != 0)
        return 0;
    c->p += n;
    return 1;
}
#define LITERAL(c, s) literal((c), (s), sizeof(s) - 1)

static int at_digit(cursor *c) { return c->p < c->end && *c->p >= '0' && *c->p <= '9'; }

/* 0 | [1-9][0-9]{0,more}: its value in *out (at most 19 digits fit a long long), or 0. */
static int number(cursor *c, int more, long long *out) {
    if (!at_digit(c))
        return 0;
    long long v = *c->p++ - '0';
    if (v == 0) {
        *out = 0;
        return 1;
    }
    for (int i = 0; i < more && at_digit(c); i++)
        v = 10 * v + (*c->p++ - '0');
    *out = v;
    return 1;
}

/* Up to `most` digits (at least `least`): how many, or -1. */
static int digits(cursor *c, int least, int most) {
    int k = 0;
    while (k < most && at_digit(c)) {
        c->p++;
        k++;
    }
    return k >= least ? k : -1;
}

static int session_char(char ch) {
    return (ch >= '0' && ch <= '9') || (ch >= 'A' && ch <= 'Z') || (ch >= 'a' && ch <= 'z') || ch == '_' || ch == '-';
}

/* The loss: NaN for null; float(int(text)) for an integer (so "-0" is 0.0); float(text) otherwise.
 * → 1 with *out set, 0 when the text is not L's, -1 with a Python error set. */
static int loss(cursor *c, double *out) {
    if (LITERAL(c, "null")) {
        *out = Py_NAN;
        return 1;
    }
    const char *start = c->p;
    if (c->p < c->end && *c->p == '-')
        c->p++;
    if (!at_digit(c))
        return 0;
    if (*c->p++ != '0')
        digits(c, 0, 19);
    int integer = 1;
    if (c->p < c->end && *c->p == '.') {
        c->p++;
        if (digits(c, 1, 20) < 0)
            return 0;
        integer = 0;
    }
    if (c->p < c->end && (*c->p == 'e' || *c->p == 'E')) {
        c->p++;
        if (c->p < c->end && (*c->p == '-' || *c->p == '+'))
            c->p++;
        if (digits(c, 1, 3) < 0)
            return 0;
        integer = 0;
    }
    char text[64];   /* at most 1 + 20 + 1 + 20 + 1 + 1 + 3 = 47 characters */
    size_t n = (size_t)(c->p - start);
    memcpy(text, start, n);
    text[n] = '\0';
    if (integer) {   /* Python's path: float(int(text)), rounded as PyLong_AsDouble rounds */
        PyObject *v = PyLong_FromString(text, NULL, 10);
        if (v == NULL)
            return -1;
        *out = PyLong_AsDouble(v);
        Py_DECREF(v);
        return *out == -1.0 && PyErr_Occurred() ? -1 : 1;
    }
    *out = PyOS_string_to_double(text, NULL, NULL);   /* float(text)'s own conversion */
    return *out == -1.0 && PyErr_Occurred() ? -1 : 1;
}

/* push_v1(header) -> (session, seq, version, loss, n_values, n_indices | None) or None
 *   None when the header is not a canonical version-1 push, or its loss is ±Inf (the general decoder
 *   then reads the message and words the refusal). */
static PyObject *push_v1(PyObject *self, PyObject *arg) {
    Py_buffer hb;
    if (PyObject_GetBuffer(arg, &hb, PyBUF_SIMPLE) < 0)
        return NULL;
    cursor c = {(const char *)hb.buf, (const char *)hb.buf + hb.len};
    PyObject *ret = NULL;
    long long seq, version, n_values, n_indices = -1;
    double lossv = 0.0;
    int have = 0;
    if (!LITERAL(&c, "EB\x01\x05{\"session\":\""))
        goto none;
    const char *session = c.p;
    while (c.p < c.end && c.p - session < 256 && session_char(*c.p))
        c.p++;
    Py_ssize_t session_n = c.p - session;
    if (session_n == 0 || !LITERAL(&c, "\",\"seq\":") || !number(&c, 17, &seq) || !LITERAL(&c, ",\"version\":")
        || !number(&c, 17, &version) || !LITERAL(&c, ",\"loss\":"))
        goto none;
    have = loss(&c, &lossv);
    if (have < 0)
        goto done;
    if (!have || !LITERAL(&c, ",\"arrays\":[[\"values\",\"<f4\",[") || !number(&c, 9, &n_values)
        || !LITERAL(&c, "]]"))
        goto none;
    if (LITERAL(&c, ",[\"indices\",\"<u4\",[") && (!number(&c, 9, &n_indices) || !LITERAL(&c, "]]")))
        goto none;
    if (!LITERAL(&c, "]}") || c.p != c.end || isinf(lossv))
        goto none;
    if (n_indices < 0)
        ret = Py_BuildValue("s#LLdLO", session, session_n, seq, version, lossv, n_values, Py_None);
    else
        ret = Py_BuildValue("s#LLdLL", session, session_n, seq, version, lossv, n_values, n_indices);
    goto done;
none:
    ret = Py_NewRef(Py_None);
done:
    PyBuffer_Release(&hb);
    return ret;
}

/* Bytes of a frame's buffer (contiguous), or -1 (no Python error left set) where it has none. */
static Py_ssize_t frame_len(PyObject *frame) {
    Py_buffer b;
    if (PyObject_GetBuffer(frame, &b, PyBUF_SIMPLE) < 0) {
        PyErr_Clear();
        return -1;
    }
    Py_ssize_t n = b.len;
    PyBuffer_Release(&b);
    return n;
}

/* push_frames(frames, max_bytes) -> (session, seq, version, loss, nbytes, n_values, n_indices | None) or None
 *   The whole of ``wire.push_fields`` but the two np.frombuffer calls: a list or tuple of 2 or 3 frames,
 *   the first bytes or a memoryview holding a canonical version-1 push header (push_v1), as many
 *   array frames as it announces, each of exactly 4 × its entries bytes, the message no larger than
 *   max_bytes (``nbytes``: its bytes, ``frames_nbytes``). None for anything else (a frame without a
 *   contiguous buffer included): the general decoder then reads it. */
static PyObject *push_frames(PyObject *self, PyObject *args) {
    PyObject *frames;
    Py_ssize_t max_bytes;
    if (!PyArg_ParseTuple(args, "On", &frames, &max_bytes))
        return NULL;
    if (!PyList_CheckExact(frames) && !PyTuple_CheckExact(frames))
        Py_RETURN_NONE;
    Py_ssize_t count = PySequence_Fast_GET_SIZE(frames);
    PyObject **frame = PySequence_Fast_ITEMS(frames);
    if (count < 2 || count > 3 || !(PyBytes_CheckExact(frame[0]) || PyMemoryView_Check(frame[0])))
        Py_RETURN_NONE;
    PyObject *head = push_v1(self, frame[0]);
    if (head == NULL)   /* a header without a contiguous buffer: the general way reads (and words) it */
        PyErr_Clear();
    if (head == NULL || head == Py_None) {
        Py_XDECREF(head);
        Py_RETURN_NONE;
    }
    PyObject *n_indices = PyTuple_GET_ITEM(head, 5);
    Py_ssize_t nbytes = frame_len(frame[0]), sizes[2];
    if (count != (n_indices == Py_None ? 2 : 3))
        goto done;
    for (Py_ssize_t i = 1; i < count; i++) {
        Py_ssize_t n = frame_len(frame[i]);
        if (n < 0)
            goto done;
        sizes[i - 1] = n;
        nbytes += n;
    }
    if (nbytes > max_bytes || sizes[0] != 4 * PyLong_AsSsize_t(PyTuple_GET_ITEM(head, 4))
        || (count == 3 && sizes[1] != 4 * PyLong_AsSsize_t(n_indices)))
        goto done;
    PyObject *size = PyLong_FromSsize_t(nbytes), *ret = NULL;
    if (size != NULL)
        ret = PyTuple_Pack(7, PyTuple_GET_ITEM(head, 0), PyTuple_GET_ITEM(head, 1), PyTuple_GET_ITEM(head, 2),
                           PyTuple_GET_ITEM(head, 3), size, PyTuple_GET_ITEM(head, 4), n_indices);
    Py_XDECREF(size);
    Py_DECREF(head);
    return ret;
done:
    Py_DECREF(head);
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"push_v1", push_v1, METH_O, "push_v1(header) -> (session, seq, version, loss, n_values, n_indices|None), "
     "or None if the header is not a canonical version-1 push (or its loss is infinite)"},
    {"push_frames", push_frames, METH_VARARGS, "push_frames(frames, max_bytes) -> (session, seq, version, loss, "
     "nbytes, n_values, n_indices|None), or None if the frames are not a canonical version-1 push that fits max_bytes"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_pushhead",
                                    "The PS's compiled reading of a canonical push header (see _pushhead.c).", -1,
                                    methods};

PyMODINIT_FUNC PyInit__pushhead(void) { return PyModule_Create(&module); }
