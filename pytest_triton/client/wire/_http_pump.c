/* The load multiplexer's steady state over plain HTTP, without Python per request.
 *
 * A closed loop of small requests spends most of a Python generator's CPU on the glue
 * around two system calls: reading an answer, parsing its head, sending the next request.
 * turn() does that for every ready connection that has a Pump, in one call per epoll wake:
 * one recv() per ready socket, the head's status line and Content-Length, and, for a whole
 * 200 answer that keeps its connection and came within its timeout, the next request of its
 * slot (next() of slot.requests, its .wire sent with one send(), slot.started updated).
 * Anything else (an error status, "Connection: close", a malformed head, a failed socket, a
 * late answer, a stopped user) comes back unsent, for the Python multiplexer to handle as
 * its Python lanes do. Only plain sockets: TLS stays in Python.
 *
 * time.perf_counter() is CLOCK_MONOTONIC on Linux: the times written here compare with
 * Python's.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>

#define FIRST_BUFFER 65536

typedef struct {
    PyObject_HEAD
    int fd;
    PyObject *slot;    /* the multiplexer's slot: requests, active, timeout_s, started */
    PyObject *request; /* the request in flight (armed), or NULL */
    char *buffer;
    Py_ssize_t capacity;
    Py_ssize_t filled;
    Py_ssize_t body_at; /* where the body starts; -1 until the head is whole */
    Py_ssize_t body_size;
    int status;
    int slow; /* a head Python must read itself (not 200, close, no length, ...) */
} Pump;

static PyObject *s_requests, *s_active, *s_timeout_s, *s_started, *s_wire;

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void reset(Pump *p) {
    p->filled = 0;
    p->body_at = -1;
    p->body_size = 0;
    p->status = 0;
    p->slow = 0;
}

static int Pump_init(Pump *self, PyObject *args, PyObject *kwds) {
    static char *names[] = {"fd", "slot", NULL};
    int fd;
    PyObject *slot;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "iO", names, &fd, &slot))
        return -1;
    self->fd = fd;
    Py_XSETREF(self->slot, Py_NewRef(slot));
    Py_CLEAR(self->request);
    if (self->buffer == NULL) {
        self->buffer = PyMem_Malloc(FIRST_BUFFER);
        if (self->buffer == NULL) {
            PyErr_NoMemory();
            return -1;
        }
        self->capacity = FIRST_BUFFER;
    }
    reset(self);
    return 0;
}

static int Pump_traverse(Pump *self, visitproc visit, void *arg) {
    Py_VISIT(self->slot);
    Py_VISIT(self->request);
    return 0;
}

static int Pump_clear(Pump *self) {
    Py_CLEAR(self->slot);
    Py_CLEAR(self->request);
    return 0;
}

static void Pump_dealloc(Pump *self) {
    PyObject_GC_UnTrack(self);
    Pump_clear(self);
    PyMem_Free(self->buffer);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

/* arm(request): Python sent `request` on this connection; its answer is read here. */
static PyObject *Pump_arm(Pump *self, PyObject *request) {
    Py_XSETREF(self->request, Py_NewRef(request));
    reset(self);
    Py_RETURN_NONE;
}

/* disarm(): no answer awaited any more (a timeout, a stopped user). */
static PyObject *Pump_disarm(Pump *self, PyObject *Py_UNUSED(ignored)) {
    Py_CLEAR(self->request);
    reset(self);
    Py_RETURN_NONE;
}

static PyObject *Pump_get_request(Pump *self, void *Py_UNUSED(closure)) {
    return Py_NewRef(self->request != NULL ? self->request : Py_None);
}

/* A header's position in the head (case-insensitive, at a line start), or NULL. */
static const char *header(const char *head, Py_ssize_t size, const char *name) {
    size_t n = strlen(name);
    for (Py_ssize_t i = 0; i + 2 + (Py_ssize_t)n <= size; i++) {
        if (head[i] == '\r' && head[i + 1] == '\n' && strncasecmp(head + i + 2, name, n) == 0)
            return head + i + 2 + n;
    }
    return NULL;
}

/* The head's status and Content-Length; anything unusual leaves it to Python (slow). */
static void read_head(Pump *p, Py_ssize_t end) {
    const char *b = p->buffer;
    p->body_at = end + 4;
    if (end < 12 || strncmp(b, "HTTP/1.", 7) != 0 || b[8] != ' ') {
        p->slow = 1;
        return;
    }
    int status = 0;
    for (int i = 9; i < 12; i++) {
        if (b[i] < '0' || b[i] > '9') {
            p->slow = 1;
            return;
        }
        status = status * 10 + (b[i] - '0');
    }
    p->status = status;
    const char *length = header(b, end, "content-length:");
    if (status != 200 || length == NULL || header(b, end, "transfer-encoding:") != NULL) {
        p->slow = 1;
    }
    const char *close = header(b, end, "connection:");
    if (close != NULL) {
        while (*close == ' ')
            close++;
        if (strncasecmp(close, "close", 5) == 0)
            p->slow = 1;
    }
    if (length == NULL)
        return;
    while (*length == ' ')
        length++;
    Py_ssize_t size = 0;
    while (*length >= '0' && *length <= '9') {
        size = size * 10 + (*length - '0');
        length++;
    }
    p->body_size = size;
}

static int grow(Pump *p, Py_ssize_t needed) {
    if (needed <= p->capacity)
        return 0;
    char *bigger = PyMem_Realloc(p->buffer, needed);
    if (bigger == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    p->buffer = bigger;
    p->capacity = needed;
    return 0;
}

/* One read. 0: nothing whole yet; 1: an answer is whole; 2: the socket failed or the reply
 * is malformed (`code`, an errno, and `error` say how); -1: a Python error. */
static int pump_read(Pump *p, int *code, const char **error) {
    if (p->filled == p->capacity) {
        static char message[80];
        snprintf(message, sizeof message, "malformed HTTP reply: no end of headers in %zd bytes",
                 p->capacity);
        *code = EPROTO;
        *error = message;
        return 2;
    }
    ssize_t n = recv(p->fd, p->buffer + p->filled, p->capacity - p->filled, MSG_DONTWAIT);
    if (n < 0) {
        if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)
            return 0;
        *code = errno;
        *error = strerror(errno);
        return 2;
    }
    if (n == 0) {
        *code = ECONNRESET;
        *error = p->filled ? "the server closed the connection mid-reply"
                           : "the server closed the connection";
        return 2;
    }
    p->filled += n;
    if (p->body_at < 0) {
        const char *end = memmem(p->buffer, p->filled, "\r\n\r\n", 4);
        if (end == NULL)
            return 0;
        read_head(p, end - p->buffer);
        if (grow(p, p->body_at + p->body_size) < 0)
            return -1;
    }
    Py_ssize_t whole = p->body_at + p->body_size;
    if (p->filled < whole)
        return 0;
    if (p->filled > whole && !p->slow) {
        *code = EPROTO;
        *error = "HTTP reply longer than its Content-Length";
        return 2;
    }
    return 1;
}

/* Send the slot's next request when the answer just read allows it; the bytes sent, or -1
 * where Python sends it (or nothing was sent). */
static Py_ssize_t send_next(Pump *p, double latency) {
    PyObject *slot = p->slot;
    PyObject *value = PyObject_GetAttr(slot, s_timeout_s);
    if (value == NULL)
        return -2;
    double timeout = PyFloat_AsDouble(value);
    Py_DECREF(value);
    if (timeout == -1.0 && PyErr_Occurred())
        return -2;
    if (latency > timeout)
        return -1;
    value = PyObject_GetAttr(slot, s_active);
    if (value == NULL)
        return -2;
    int active = PyObject_IsTrue(value);
    Py_DECREF(value);
    if (active <= 0)
        return active < 0 ? -2 : -1;
    PyObject *requests = PyObject_GetAttr(slot, s_requests);
    if (requests == NULL)
        return -2;
    PyObject *next = PyIter_Next(requests);
    Py_DECREF(requests);
    if (next == NULL)
        return PyErr_Occurred() ? -2 : -1;
    PyObject *wire = PyObject_GetAttr(next, s_wire);
    if (wire == NULL || !PyBytes_Check(wire)) {
        Py_XDECREF(wire);
        Py_DECREF(next);
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_TypeError, "a prepared request's wire must be bytes");
        return -2;
    }
    double started = now_s();
    ssize_t sent = send(p->fd, PyBytes_AS_STRING(wire), PyBytes_GET_SIZE(wire),
                        MSG_DONTWAIT | MSG_NOSIGNAL);
    Py_DECREF(wire);
    if (sent < 0 && errno != EAGAIN && errno != EWOULDBLOCK) {
        Py_DECREF(next); /* Python sends again and meets the failure itself */
        return -1;
    }
    PyObject *when = PyFloat_FromDouble(started);
    if (when == NULL || PyObject_SetAttr(slot, s_started, when) < 0) {
        Py_XDECREF(when);
        Py_DECREF(next);
        return -2;
    }
    Py_DECREF(when);
    Py_XSETREF(p->request, next);
    return sent < 0 ? 0 : sent;
}

/* The answer just read, as (slot, latency_s, head, body, request, sent, failure): failure
 * None or (errno, message). */
static int answer(Pump *p, int outcome, int code, const char *error, PyObject *done) {
    double latency = 0.0;
    PyObject *slot = p->slot, *request = p->request;
    PyObject *head = NULL, *body = NULL, *failure = NULL, *item = NULL;
    Py_INCREF(slot);
    p->request = NULL; /* the reference moves into the answer */
    {
        PyObject *started = PyObject_GetAttr(slot, s_started);
        if (started == NULL)
            goto fail;
        latency = now_s() - PyFloat_AsDouble(started);
        Py_DECREF(started);
    }
    Py_ssize_t sent = -1;
    if (outcome == 1) {
        head = PyBytes_FromStringAndSize(p->buffer, p->body_at - 4);
        body = PyBytes_FromStringAndSize(p->buffer + p->body_at,
                                         p->slow ? p->filled - p->body_at : p->body_size);
        if (head == NULL || body == NULL)
            goto fail;
        int slow = p->slow;
        reset(p);
        if (!slow) {
            sent = send_next(p, latency);
            if (sent == -2)
                goto fail;
        }
        failure = Py_NewRef(Py_None);
    } else {
        head = Py_NewRef(Py_None);
        body = Py_NewRef(Py_None);
        failure = Py_BuildValue("(is)", code, error);
        if (failure == NULL)
            goto fail;
        reset(p);
    }
    item = Py_BuildValue("(OdOOOnO)", slot, latency, head, body, request, sent, failure);
    if (item == NULL || PyList_Append(done, item) < 0)
        goto fail;
    Py_DECREF(item);
    Py_DECREF(slot);
    Py_DECREF(request);
    Py_DECREF(head);
    Py_DECREF(body);
    Py_DECREF(failure);
    return 0;
fail:
    Py_XDECREF(item);
    Py_DECREF(slot);
    Py_XDECREF(request);
    Py_XDECREF(head);
    Py_XDECREF(body);
    Py_XDECREF(failure);
    return -1;
}

/* turn(events, pumps, done) -> the fds of `events` that are not an armed pump's */
static PyObject *turn(PyObject *Py_UNUSED(module), PyObject *args) {
    PyObject *events, *pumps, *done;
    if (!PyArg_ParseTuple(args, "O!O!O!", &PyList_Type, &events, &PyDict_Type, &pumps,
                          &PyList_Type, &done))
        return NULL;
    PyObject *rest = PyList_New(0);
    if (rest == NULL)
        return NULL;
    Py_ssize_t count = PyList_GET_SIZE(events);
    for (Py_ssize_t i = 0; i < count; i++) {
        PyObject *event = PyList_GET_ITEM(events, i);
        if (!PyTuple_Check(event) || PyTuple_GET_SIZE(event) < 1) {
            PyErr_SetString(PyExc_TypeError, "events must be epoll's (fd, mask) pairs");
            goto fail;
        }
        PyObject *fd = PyTuple_GET_ITEM(event, 0);
        PyObject *found = PyDict_GetItemWithError(pumps, fd);
        if (found == NULL && PyErr_Occurred())
            goto fail;
        Pump *pump = (Pump *)found;
        if (pump == NULL || pump->request == NULL) {
            if (PyList_Append(rest, fd) < 0)
                goto fail;
            continue;
        }
        Py_INCREF(pump);
        const char *error = NULL;
        int code = 0;
        int outcome = pump_read(pump, &code, &error);
        if (outcome < 0 || (outcome > 0 && answer(pump, outcome, code, error, done) < 0)) {
            Py_DECREF(pump);
            goto fail;
        }
        Py_DECREF(pump);
    }
    return rest;
fail:
    Py_DECREF(rest);
    return NULL;
}

static PyMethodDef Pump_methods[] = {
    {"arm", (PyCFunction)Pump_arm, METH_O, "Read the answer to a request Python sent."},
    {"disarm", (PyCFunction)Pump_disarm, METH_NOARGS, "Await no answer any more."},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef Pump_getset[] = {
    {"request", (getter)Pump_get_request, NULL, "The request in flight, or None.", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject PumpType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "pytest_triton.client.wire._http_pump.Pump",
    .tp_doc = PyDoc_STR("One plain HTTP connection's answers read, and next requests sent."),
    .tp_basicsize = sizeof(Pump),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Pump_init,
    .tp_dealloc = (destructor)Pump_dealloc,
    .tp_traverse = (traverseproc)Pump_traverse,
    .tp_clear = (inquiry)Pump_clear,
    .tp_methods = Pump_methods,
    .tp_getset = Pump_getset,
};

static PyMethodDef module_methods[] = {
    {"turn", turn, METH_VARARGS,
     "turn(events, pumps, done): read every ready pump, append its whole answers to done; "
     "the fds left for Python."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "_http_pump",
    .m_doc = "The load multiplexer's steady state over plain HTTP in C.",
    .m_size = -1,
    .m_methods = module_methods,
};

PyMODINIT_FUNC PyInit__http_pump(void) {
    if (PyType_Ready(&PumpType) < 0)
        return NULL;
    s_requests = PyUnicode_InternFromString("requests");
    s_active = PyUnicode_InternFromString("active");
    s_timeout_s = PyUnicode_InternFromString("timeout_s");
    s_started = PyUnicode_InternFromString("started");
    s_wire = PyUnicode_InternFromString("wire");
    if (!s_requests || !s_active || !s_timeout_s || !s_started || !s_wire)
        return NULL;
    PyObject *m = PyModule_Create(&module);
    if (m == NULL)
        return NULL;
    Py_INCREF(&PumpType);
    if (PyModule_AddObject(m, "Pump", (PyObject *)&PumpType) < 0) {
        Py_DECREF(&PumpType);
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
