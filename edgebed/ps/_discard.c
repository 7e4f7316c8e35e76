/* The rest of a message of too many frames, received and freed in C with the GIL let go.
 *
 * Optional: setup.py builds it when a C compiler is there; edgebed/ps/discard.py falls back to a
 * Python loop otherwise. libzmq makes a multipart message visible only once it is whole, and the
 * socket must be read to the end of a message before it yields another peer's: a million empty
 * frames cost the Python loop ~0.7 us each (0.71 s) with the GIL held, and honest devices waited.
 * Here each frame is one zmq_msg_recv, ~0.1 us, and other Python threads run meanwhile.
 *
 * libzmq's functions come as addresses (the copy pyzmq loaded, found by ctypes), so this links to
 * no libzmq of its own and uses the one the socket belongs to.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <errno.h>
#include <stdint.h>

typedef struct { _Alignas(8) unsigned char _[64]; } zmsg;   /* zmq_msg_t's size and alignment */
typedef int (*msg_init_t)(zmsg *);
typedef int (*msg_recv_t)(zmsg *, void *, int);
typedef int (*msg_close_t)(zmsg *);
typedef int (*msg_more_t)(const zmsg *);
typedef size_t (*msg_size_t)(const zmsg *);
typedef int (*errno_t)(void);

/* discard_rest(socket, init, recv, close, more, size, errno) -> (frames, bytes, errno or 0)
 * Receives frames of the message being read until its last one (or an error) and frees each. */
static PyObject *discard_rest(PyObject *self, PyObject *args) {
    unsigned long long sock, init, recv, close, more, size, err_fn;
    if (!PyArg_ParseTuple(args, "KKKKKKK", &sock, &init, &recv, &close, &more, &size, &err_fn))
        return NULL;
    msg_init_t f_init = (msg_init_t)(uintptr_t)init;
    msg_recv_t f_recv = (msg_recv_t)(uintptr_t)recv;
    msg_close_t f_close = (msg_close_t)(uintptr_t)close;
    msg_more_t f_more = (msg_more_t)(uintptr_t)more;
    msg_size_t f_size = (msg_size_t)(uintptr_t)size;
    errno_t f_errno = (errno_t)(uintptr_t)err_fn;
    unsigned long long frames = 0, bytes = 0;
    int err = 0, again = 1;
    zmsg msg;
    Py_BEGIN_ALLOW_THREADS
    while (again) {
        f_init(&msg);
        if (f_recv(&msg, (void *)(uintptr_t)sock, 0) < 0) {
            err = f_errno();
            f_close(&msg);
            if (err == EINTR)
                continue;
            break;
        }
        frames++;
        bytes += f_size(&msg);
        again = f_more(&msg);
        f_close(&msg);
    }
    Py_END_ALLOW_THREADS
    return Py_BuildValue("KKi", frames, bytes, err);
}

static PyMethodDef methods[] = {
    {"discard_rest", discard_rest, METH_VARARGS, "Receive and free the rest of a message: (frames, bytes, errno)."},
    {NULL, NULL, 0, NULL}};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_discard", NULL, -1, methods};

PyMODINIT_FUNC PyInit__discard(void) { return PyModule_Create(&module); }
