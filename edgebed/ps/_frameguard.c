/* The PS's frame guard: a TCP relay in front of its ROUTER socket that reads ZMTP frame headers as the
 * bytes pass and cuts a connection at the first frame beyond the bound on a message's frames or bytes.
 *
 * libzmq assembles a multipart message whole before the PS can read its first frame (and then the PS
 * must read it to its end before any other peer's message): a message of a million empty frames is
 * 2 MB on the wire, 64 MB in libzmq's queue and seconds of the PS's time. Here each peer's stream is
 * parsed before libzmq sees it; the connection is closed (both sides) when a message has more than
 * max_frames frames or max_bytes bytes, so libzmq drops the few frames it had of it (an incomplete
 * message) and never queues the rest. Parsing costs one pass over frame headers, not bodies.
 *
 * One connection to the PS per peer (1:1), opened once the peer sent a valid ZMTP 3 signature, so the
 * PS's connection cap (ZAP) and its CURVE handshake still see one connection per peer. A stream whose
 * greeting is not ZMTP 3.x is cut; one whose mechanism is not NULL or PLAIN (CURVE) is relayed as it is,
 * unparsed: its frames are encrypted and their MORE flags are inside the box. A peer that sent no
 * signature within handshake_ms is cut. Descriptors: accept only while 3 per relayed connection + 1 per
 * pending one fit in cap_fds (set by Python from the process's descriptor budget, ps/fdbudget.py).
 *
 * Stalls: a relayed peer that owes bytes — a frame or message begun and not finished, or its first
 * message once the PS's handshake ended (an honest device's hello follows at once) — and sent none for
 * stall_ms is cut (ST_CUT_STALLED); so is one whose handshake the PS has not ended within stall_ms of
 * the accept (refused at the connection cap: libzmq holds it, and its place, for 30 s). Progress is what counts, never a
 * message's whole duration: a big push on a slow link sends bytes all along. A peer between two
 * messages owes nothing (it may compute for minutes) and a CURVE stream (unparsed) is not judged.
 *
 * Early data: libzmq resets a connection whose data frames arrive before its own handshake ended (its
 * ZAP answer), and a flood sent without waiting for it was then closed by the PS before the guard had
 * judged it — not counted as cut (issue 51: four floods counted as two). The guard reads the PS's
 * stream up to its READY command and, until then, relays the peer's handshake commands only: its data
 * frames are held (at most BUF bytes) and still parsed, so a flood among them is cut and counted.
 *
 * Buffers are taken from malloc for a read and given back once their bytes are written, so idle
 * connections hold none. Single thread, epoll, level-triggered; run() releases the GIL and returns after timeout_ms, so the
 * Python side (ps/frameguard.py) stops it and refreshes the cap between calls. Linux only.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#define BUF (256 * 1024)
#define GREETING 64u
#define STALE ((void *)1)   /* an event of a pair closed earlier in the same batch */
#define WAKE ((void *)2)    /* the wake descriptor: stop() wrote to it */

enum { PENDING, OPEN };
enum { P_GREET, P_FLAGS, P_SIZE, P_BODY, P_OPAQUE };

struct pair;
typedef struct { int fd; struct pair *p; int k; uint32_t mask; } side_t;

typedef struct pair {
    side_t s[2];                 /* 0: the peer, 1: the PS */
    unsigned char *buf[2];       /* buf[d]: bytes read from s[d], to be written to s[1-d] */
    size_t off[2], len[2];
    int state;
    double since;                /* ms, monotonic: when accepted */
    double heard;                /* ms, monotonic: when the peer last sent a byte */
    double ready_at;             /* ms, monotonic: when the PS's READY passed (0: not yet) */
    uint64_t msgs;               /* messages the peer completed (commands not counted) */
    int holding;                 /* the peer sent a data frame before the PS's READY: held from buf[0][hold] */
    size_t hold;
    /* parser of the PS's stream, until its READY command */
    int ps_ready, ps_phase, ps_need, ps_got;
    uint64_t ps_left;
    size_t ps_seen;
    unsigned char ps_hdr[8];
    /* parser of the peer's stream */
    int phase, cmd, more;
    unsigned char hdr[8];
    int need, got;               /* size bytes needed / read */
    uint64_t body_left, frames, bytes;
    unsigned char greet[GREETING];
    size_t greet_len;
    struct pair *prev, *next;
} pair_t;

enum { ST_PAIRED, ST_PENDING, ST_ACCEPTED, ST_SHED, ST_CUT_FRAMES, ST_CUT_BYTES, ST_CUT_PROTOCOL, ST_CUT_SLOW,
       ST_OPAQUE, ST_UPSTREAM_FAILED, ST_CUT_STALLED, ST_N };

typedef struct {
    int ep, lfd, listening;
    struct sockaddr_un up;
    uint64_t max_frames, max_bytes;
    long cap_fds;
    double handshake_ms, stall_ms;
    pair_t *head;
    unsigned long long st[ST_N];
} guard_t;

static int parse_ps(pair_t *p, const unsigned char *b, size_t n);

static double now_ms(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

static void set_mask(guard_t *g, side_t *s, uint32_t mask) {
    if (s->fd < 0 || s->mask == mask)
        return;
    struct epoll_event ev = {.events = mask, .data.ptr = s};
    epoll_ctl(g->ep, EPOLL_CTL_MOD, s->fd, &ev);
    s->mask = mask;
}

/* Read from a side while its buffer is empty; write to it while the other side's buffer holds bytes. */
static void update(guard_t *g, pair_t *p) {
    if (p->state == PENDING) {
        set_mask(g, &p->s[0], EPOLLIN);
        return;
    }
    for (int k = 0; k < 2; k++) {
        int d = 1 - k;   /* bytes for side k come from buf[d]; a peer's held data goes nowhere yet */
        size_t upto = d == 0 && p->holding ? p->hold : p->len[d];
        int more_in = p->len[k] == 0 || (k == 0 && p->holding && p->len[0] < BUF);
        set_mask(g, &p->s[k], (more_in ? EPOLLIN : 0) | (p->off[d] < upto ? EPOLLOUT : 0));
    }
}

static void close_pair(guard_t *g, pair_t *p) {
    for (int k = 0; k < 2; k++) {
        if (p->s[k].fd >= 0) {
            epoll_ctl(g->ep, EPOLL_CTL_DEL, p->s[k].fd, NULL);
            close(p->s[k].fd);
        }
        free(p->buf[k]);
    }
    g->st[p->state == OPEN ? ST_PAIRED : ST_PENDING]--;
    if (p->prev) p->prev->next = p->next; else g->head = p->next;
    if (p->next) p->next->prev = p->prev;
    free(p);
}

/* Parse bytes the peer sent, at offset ``at`` of buf[0]. → 0: pass them on; 1: cut the connection (stats counted). */
static int parse(guard_t *g, pair_t *p, const unsigned char *b, size_t n, size_t at) {
    size_t i = 0;
    while (i < n) {
        switch (p->phase) {
        case P_OPAQUE:
            return 0;
        case P_GREET: {
            size_t take = GREETING - p->greet_len < n - i ? GREETING - p->greet_len : n - i;
            memcpy(p->greet + p->greet_len, b + i, take);
            p->greet_len += take;
            i += take;
            if (p->greet_len >= 1 && p->greet[0] != 0xff) goto protocol;
            if (p->greet_len >= 10 && !(p->greet[9] & 1)) goto protocol;   /* not a ZMTP 2/3 signature */
            if (p->greet_len >= 11 && p->greet[10] < 3) goto protocol;     /* ZMTP 1 or 2: not relayed */
            if (p->greet_len == GREETING) {
                const char *mech = (const char *)p->greet + 12;
                if (!strncmp(mech, "NULL", 20) || !strncmp(mech, "PLAIN", 20)) {
                    p->phase = P_FLAGS;
                } else {
                    g->st[ST_OPAQUE]++;
                    p->phase = P_OPAQUE;
                }
            }
            break;
        }
        case P_FLAGS: {
            unsigned char f = b[i++];
            if (f & ~0x07) goto protocol;
            p->more = f & 1;
            p->cmd = (f & 4) != 0;
            if (p->cmd && p->more) goto protocol;
            if (!p->cmd && !p->ps_ready && !p->holding) {   /* data before the PS's READY: hold it */
                p->holding = 1;
                p->hold = at + i - 1;
            }
            p->need = (f & 2) ? 8 : 1;
            p->got = 0;
            p->phase = P_SIZE;
            break;
        }
        case P_SIZE:
            p->hdr[p->got++] = b[i++];
            if (p->got == p->need) {
                uint64_t size = 0;
                for (int k = 0; k < p->need; k++)
                    size = (size << 8) | p->hdr[k];
                if (p->cmd) {
                    if (size > g->max_bytes) { g->st[ST_CUT_BYTES]++; return 1; }
                } else {
                    p->frames++;
                    p->bytes += size;
                    if (p->frames > g->max_frames) { g->st[ST_CUT_FRAMES]++; return 1; }
                    if (p->bytes > g->max_bytes) { g->st[ST_CUT_BYTES]++; return 1; }
                    if (!p->more) {
                        p->frames = p->bytes = 0;
                        p->msgs++;
                    }
                }
                p->body_left = size;
                p->phase = size ? P_BODY : P_FLAGS;
            }
            break;
        case P_BODY: {
            uint64_t take = p->body_left < n - i ? p->body_left : n - i;
            i += take;
            p->body_left -= take;
            if (!p->body_left)
                p->phase = P_FLAGS;
            break;
        }
        }
    }
    return 0;
protocol:
    g->st[ST_CUT_PROTOCOL]++;
    return 1;
}

static int add_fd(guard_t *g, side_t *s) {
    struct epoll_event ev = {.events = EPOLLIN, .data.ptr = s};
    s->mask = EPOLLIN;
    return epoll_ctl(g->ep, EPOLL_CTL_ADD, s->fd, &ev);
}

/* The peer sent a valid signature: connect to the PS. → 0, or -1 (the pair is to be closed). */
static int open_upstream(guard_t *g, pair_t *p) {
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) { g->st[ST_UPSTREAM_FAILED]++; return -1; }
    if (connect(fd, (struct sockaddr *)&g->up, sizeof g->up) < 0 && errno != EINPROGRESS) {
        close(fd);
        g->st[ST_UPSTREAM_FAILED]++;
        return -1;
    }
    p->s[1].fd = fd;
    if (add_fd(g, &p->s[1]) < 0) { g->st[ST_UPSTREAM_FAILED]++; return -1; }
    p->state = OPEN;
    g->st[ST_PENDING]--;
    g->st[ST_PAIRED]++;
    return 0;
}

/* Write what buf[d] holds to the other side. → 0, or -1 on an error (close the pair). */
static int flush(pair_t *p, int d) {
    int to = p->s[1 - d].fd;
    if (to < 0)
        return 0;
    size_t upto = d == 0 && p->holding ? p->hold : p->len[d];   /* held data stays until the PS's READY */
    while (p->off[d] < upto) {
        ssize_t w = send(to, p->buf[d] + p->off[d], upto - p->off[d], MSG_NOSIGNAL | MSG_DONTWAIT);
        if (w < 0) {
            if (errno == EINTR) continue;
            if (errno == EAGAIN || errno == EWOULDBLOCK) return 0;
            return -1;
        }
        p->off[d] += w;
    }
    if (upto < p->len[d])
        return 0;
    p->off[d] = p->len[d] = 0;
    free(p->buf[d]);   /* an idle connection holds no buffer (a 256 kB one each way for 400 peers: 200 MB) */
    p->buf[d] = NULL;
    return 0;
}

/* Side k of p is readable. → 0, or -1 (close the pair). A pending pair's greeting bytes are kept
 * (appended) until its connection to the PS is open. */
static int readable(guard_t *g, pair_t *p, int k) {
    size_t at = p->len[k];
    if (at && p->state == OPEN && !(k == 0 && p->holding && at < BUF))
        return 0;
    if (!p->buf[k] && !(p->buf[k] = malloc(BUF)))
        return -1;
    ssize_t r;
    do r = recv(p->s[k].fd, p->buf[k] + at, BUF - at, MSG_DONTWAIT); while (r < 0 && errno == EINTR);
    if (r == 0) return -1;
    if (r < 0) return (errno == EAGAIN || errno == EWOULDBLOCK) ? 0 : -1;
    if (k == 0)
        p->heard = now_ms();
    if (k == 0 && parse(g, p, p->buf[0] + at, r, at))
        return -1;
    p->len[k] = at + r;
    if (k == 1 && !p->ps_ready && parse_ps(p, p->buf[1] + at, r) && p->holding) {
        p->holding = 0;   /* the PS's handshake ended: what the peer sent may go on to it */
        if (flush(p, 0) < 0)
            return -1;
    }
    if (k == 0 && p->state == PENDING && p->greet_len >= 10 && open_upstream(g, p) < 0)
        return -1;
    return flush(p, k);
}

static void accept_all(guard_t *g) {
    for (;;) {
        int fd = accept4(g->lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) {
            if (errno == EINTR || errno == ECONNABORTED) continue;
            if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
                epoll_ctl(g->ep, EPOLL_CTL_DEL, g->lfd, NULL);   /* until the next run(): no busy loop */
                g->listening = 0;
            }
            return;
        }
        g->st[ST_ACCEPTED]++;
        long held = 3 * (long)g->st[ST_PAIRED] + (long)g->st[ST_PENDING];
        pair_t *p = held + 3 <= g->cap_fds ? calloc(1, sizeof *p) : NULL;
        if (!p) {
            close(fd);
            g->st[ST_SHED]++;
            continue;
        }
        p->s[0] = (side_t){fd, p, 0, 0};
        p->s[1] = (side_t){-1, p, 1, 0};
        p->state = PENDING;
        p->since = p->heard = now_ms();
        g->st[ST_PENDING]++;
        p->next = g->head;
        if (g->head) g->head->prev = p;
        g->head = p;
        if (add_fd(g, &p->s[0]) < 0)
            close_pair(g, p);
    }
}

static void destroy(PyObject *cap) {
    guard_t *g = PyCapsule_GetPointer(cap, "frameguard");
    if (!g) return;
    while (g->head) close_pair(g, g->head);
    close(g->ep);
    free(g);
}

/* Read the PS's stream until its READY command (greeting, then command frames). → whether it came. */
static int parse_ps(pair_t *p, const unsigned char *b, size_t n) {
    enum { S_GREET, S_FLAGS, S_SIZE, S_BODY };
    for (size_t i = 0; i < n && !p->ps_ready;) {
        switch (p->ps_phase) {
        case S_GREET: {
            size_t take = GREETING - p->ps_seen < n - i ? GREETING - p->ps_seen : n - i;
            p->ps_seen += take;
            i += take;
            if (p->ps_seen == GREETING) p->ps_phase = S_FLAGS;
            break;
        }
        case S_FLAGS:
            p->ps_need = (b[i++] & 2) ? 8 : 1;
            p->ps_got = 0;
            p->ps_phase = S_SIZE;
            break;
        case S_SIZE:
            p->ps_hdr[p->ps_got++] = b[i++];
            if (p->ps_got == p->ps_need) {
                p->ps_left = 0;
                for (int k = 0; k < p->ps_need; k++) p->ps_left = (p->ps_left << 8) | p->ps_hdr[k];
                p->ps_seen = 0;   /* now: bytes of this body seen */
                p->ps_phase = p->ps_left ? S_BODY : S_FLAGS;
            }
            break;
        case S_BODY: {
            static const char ready[] = "\x05READY";
            while (i < n && p->ps_left) {
                if (p->ps_seen < 6 && b[i] != (unsigned char)ready[p->ps_seen])
                    p->ps_seen = 100;   /* not READY */
                else if (p->ps_seen < 6)
                    p->ps_seen++;
                i++;
                p->ps_left--;
            }
            if (p->ps_seen == 6) {
                p->ps_ready = 1;
                p->ready_at = now_ms();
            }
            if (!p->ps_left) p->ps_phase = S_FLAGS;
            break;
        }
        }
    }
    return p->ps_ready;
}

/* Since when (ms) has the peer of an open pair owed bytes it has not sent: a frame or message begun
 * (since its last byte), or its first message once the PS's handshake ended; or since when has the PS
 * not ended its handshake (since the accept). 0: nothing is owed. */
static double owes_since(const pair_t *p) {
    if (p->phase == P_OPAQUE)
        return 0;
    if (!p->ps_ready)   /* its handshake not answered: refused at the cap (libzmq keeps it open 30 s) */
        return p->since;
    if (p->phase != P_FLAGS || p->more)
        return p->heard;
    if (p->msgs == 0 && p->ps_ready)
        return p->heard > p->ready_at ? p->heard : p->ready_at;
    return 0;
}

/* new(listen_fd, wake_fd, ps_path, max_frames, max_bytes, cap_fds, handshake_ms, stall_ms) -> handle. A byte on
 * wake_fd (never read: it stays readable) makes every run() return at once: stop without a tick's wait. */
static PyObject *guard_new(PyObject *self, PyObject *args) {
    int lfd, wfd;
    const char *path;
    unsigned long long mf, mb;
    long cap;
    double hs, stall;
    if (!PyArg_ParseTuple(args, "iisKKldd", &lfd, &wfd, &path, &mf, &mb, &cap, &hs, &stall))
        return NULL;
    if (strlen(path) >= sizeof(((struct sockaddr_un *)0)->sun_path))
        return PyErr_Format(PyExc_ValueError, "socket path too long: %s", path);
    guard_t *g = calloc(1, sizeof *g);
    if (!g) return PyErr_NoMemory();
    g->ep = epoll_create1(EPOLL_CLOEXEC);
    if (g->ep < 0) { free(g); return PyErr_SetFromErrno(PyExc_OSError); }
    struct epoll_event wake = {.events = EPOLLIN, .data.ptr = WAKE};
    if (epoll_ctl(g->ep, EPOLL_CTL_ADD, wfd, &wake) < 0) {
        close(g->ep);
        free(g);
        return PyErr_SetFromErrno(PyExc_OSError);
    }
    g->lfd = lfd;
    g->up.sun_family = AF_UNIX;
    strcpy(g->up.sun_path, path);
    g->max_frames = mf;
    g->max_bytes = mb;
    g->cap_fds = cap;
    g->handshake_ms = hs;
    g->stall_ms = stall;
    return PyCapsule_New(g, "frameguard", destroy);
}

/* run(handle, timeout_ms): relay for timeout_ms without the GIL. */
static PyObject *guard_run(PyObject *self, PyObject *args) {
    PyObject *cap;
    int timeout;
    if (!PyArg_ParseTuple(args, "Oi", &cap, &timeout))
        return NULL;
    guard_t *g = PyCapsule_GetPointer(cap, "frameguard");
    if (!g) return NULL;
    Py_BEGIN_ALLOW_THREADS
    if (!g->listening) {
        struct epoll_event ev = {.events = EPOLLIN, .data.ptr = NULL};
        if (epoll_ctl(g->ep, EPOLL_CTL_ADD, g->lfd, &ev) == 0 || errno == EEXIST)
            g->listening = 1;
    }
    double end = now_ms() + timeout, t;
    struct epoll_event evs[64];
    int woken = 0;
    while (!woken && (t = now_ms()) < end) {
        int n = epoll_wait(g->ep, evs, 64, (int)(end - t) + 1);
        for (int i = 0; i < n; i++) {
            side_t *s = evs[i].data.ptr;
            if (!s) { accept_all(g); continue; }
            if (s == WAKE) { woken = 1; continue; }   /* stop(): finish this batch, then return */
            if (s == STALE) continue;   /* its pair was closed earlier in this batch */
            pair_t *p = s->p;
            int k = s->k, bad = (evs[i].events & EPOLLERR) != 0;
            if (!bad && (evs[i].events & EPOLLOUT))
                bad = flush(p, 1 - k) < 0;
            if (!bad && (evs[i].events & (EPOLLIN | EPOLLHUP)))
                bad = readable(g, p, k) < 0;
            /* hung up while its bytes wait for the other side: nothing more will come from it */
            if (!bad && (evs[i].events & EPOLLHUP) && p->len[k] && p->state == OPEN)
                bad = 1;
            if (bad) {
                close_pair(g, p);   /* later events of this batch may name it: mark them stale */
                for (int j = i + 1; j < n; j++) {
                    side_t *o = evs[j].data.ptr;
                    if (o == &p->s[0] || o == &p->s[1]) evs[j].data.ptr = STALE;
                }
                continue;
            }
            update(g, p);
        }
    }
    /* peers that sent no signature in time, and relayed ones stalled while they owe bytes */
    t = now_ms();
    double since;
    for (pair_t *p = g->head, *next; p; p = next) {
        next = p->next;
        if (p->state == PENDING && t - p->since > g->handshake_ms) {
            g->st[ST_CUT_SLOW]++;
            close_pair(g, p);
        } else if (p->state == OPEN && g->stall_ms > 0 && (since = owes_since(p)) > 0 && t - since > g->stall_ms) {
            g->st[ST_CUT_STALLED]++;
            close_pair(g, p);
        }
    }
    Py_END_ALLOW_THREADS
    Py_RETURN_NONE;
}

static PyObject *guard_set_cap(PyObject *self, PyObject *args) {
    PyObject *cap;
    long fds;
    if (!PyArg_ParseTuple(args, "Ol", &cap, &fds))
        return NULL;
    guard_t *g = PyCapsule_GetPointer(cap, "frameguard");
    if (!g) return NULL;
    g->cap_fds = fds;
    Py_RETURN_NONE;
}

/* stats(handle) -> (paired, pending, accepted, shed, cut_frames, cut_bytes, cut_protocol, cut_slow,
 * opaque, upstream_failed, cut_stalled). Call it from the thread that calls run(), between two runs. */
static PyObject *guard_stats(PyObject *self, PyObject *args) {
    PyObject *cap;
    if (!PyArg_ParseTuple(args, "O", &cap))
        return NULL;
    guard_t *g = PyCapsule_GetPointer(cap, "frameguard");
    if (!g) return NULL;
    PyObject *t = PyTuple_New(ST_N);
    for (int i = 0; i < ST_N; i++)
        PyTuple_SET_ITEM(t, i, PyLong_FromUnsignedLongLong(g->st[i]));
    return t;
}

static PyMethodDef methods[] = {
    {"new", guard_new, METH_VARARGS,
     "new(listen_fd, wake_fd, ps_path, max_frames, max_bytes, cap_fds, handshake_ms, stall_ms)"},
    {"run", guard_run, METH_VARARGS, "run(handle, timeout_ms): relay for timeout_ms, GIL released"},
    {"set_cap", guard_set_cap, METH_VARARGS, "set_cap(handle, fds): descriptors relayed connections may hold"},
    {"stats", guard_stats, METH_VARARGS, "stats(handle) -> counters"},
    {NULL, NULL, 0, NULL}};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_frameguard", NULL, -1, methods};

PyMODINIT_FUNC PyInit__frameguard(void) { return PyModule_Create(&module); }
