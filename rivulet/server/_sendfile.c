/* Optional accelerator for the zero-copy Fetch path (rivulet/server/file_sender.py).
 *
 * A Fetch answer over many partitions holds up to one file region per partition. Sent from
 * Python, every region is an os.sendfile call that drops and retakes the GIL; with a dozen
 * consumers the sender threads spend more time waiting for the GIL than copying. send_parts
 * writes a whole answer, header bytes and regions in order, with the GIL released once.
 * When the socket is full it waits for it in poll() still without the GIL: a 100 KiB send
 * buffer fills thousands of times a second at loopback speed, and retaking the GIL for each
 * wait, behind an event loop that holds it, left the socket idle.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <errno.h>
#include <poll.h>
#include <time.h>
#include <sys/sendfile.h>
#include <unistd.h>

typedef struct {
    int is_region;
    Py_buffer buf;   /* bytes part */
    int in_fd;       /* region part */
    long long position;
    long long size;
} part_t;

static long long
now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* send_parts(out_fd, parts, index, offset, wait_ms) -> (index, offset)
 *
 * parts: a list of bytes-like objects and (in_fd, position, size) tuples. Writing starts
 * `offset` bytes into parts[index]; when the socket is full it waits for it, and the answer
 * is where writing stopped once wait_ms have passed since the call (so that the caller can
 * look whether the send was cancelled or has stalled too long), or (len(parts), 0) when
 * everything is written. wait_ms 0: stop as soon as the socket would block. EOFError when a
 * region's file ends before its size; OSError for any other failure. */
static PyObject *
send_parts(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    int out_fd;
    Py_ssize_t index, n;
    long long offset;
    PyObject *list;

    if (nargs != 5) {
        PyErr_SetString(PyExc_TypeError, "send_parts(out_fd, parts, index, offset, wait_ms)");
        return NULL;
    }
    out_fd = _PyLong_AsInt(args[0]);
    if (out_fd == -1 && PyErr_Occurred())
        return NULL;
    list = args[1];
    if (!PyList_Check(list)) {
        PyErr_SetString(PyExc_TypeError, "parts must be a list");
        return NULL;
    }
    index = PyLong_AsSsize_t(args[2]);
    if (index == -1 && PyErr_Occurred())
        return NULL;
    offset = PyLong_AsLongLong(args[3]);
    if (offset == -1 && PyErr_Occurred())
        return NULL;
    int wait_ms = _PyLong_AsInt(args[4]);
    if (wait_ms == -1 && PyErr_Occurred())
        return NULL;
    n = PyList_GET_SIZE(list);
    if (wait_ms < 0 || index < 0 || index > n || offset < 0) {
        PyErr_SetString(PyExc_ValueError, "index, offset or wait_ms out of range");
        return NULL;
    }
    if (index == n)
        return Py_BuildValue("(nL)", n, 0LL);

    Py_ssize_t count = n - index, ready = 0;
    part_t *parts = PyMem_Calloc((size_t)count, sizeof(part_t));
    if (parts == NULL)
        return PyErr_NoMemory();
    PyObject *result = NULL;

    for (; ready < count; ready++) {
        PyObject *item = PyList_GET_ITEM(list, index + ready);
        part_t *p = &parts[ready];
        if (PyTuple_Check(item)) {
            if (PyTuple_GET_SIZE(item) != 3) {
                PyErr_SetString(PyExc_TypeError, "a region is (in_fd, position, size)");
                goto done;
            }
            p->is_region = 1;
            p->in_fd = _PyLong_AsInt(PyTuple_GET_ITEM(item, 0));
            p->position = PyLong_AsLongLong(PyTuple_GET_ITEM(item, 1));
            p->size = PyLong_AsLongLong(PyTuple_GET_ITEM(item, 2));
            if (PyErr_Occurred())
                goto done;
            if (p->in_fd < 0 || p->position < 0 || p->size < 0) {
                PyErr_SetString(PyExc_ValueError, "a region's descriptor, position or size is negative");
                goto done;
            }
        } else if (PyObject_GetBuffer(item, &p->buf, PyBUF_SIMPLE) < 0) {
            goto done;
        }
    }
    if (offset > (parts[0].is_region ? parts[0].size : (long long)parts[0].buf.len)) {
        PyErr_SetString(PyExc_ValueError, "offset past the end of its part");
        goto done;
    }

    Py_ssize_t i = 0;
    long long off = offset;
    int err = 0, eof = 0;
    Py_BEGIN_ALLOW_THREADS
    long long until = wait_ms ? now_ms() + wait_ms : 0;
    while (i < count) {
        part_t *p = &parts[i];
        long long left = p->is_region ? p->size - off : (long long)p->buf.len - off;
        if (left == 0) {
            i++;
            off = 0;
            continue;
        }
        ssize_t w;
        if (p->is_region) {
            off_t pos = (off_t)(p->position + off);
            size_t chunk = left > 0x7ffff000LL ? 0x7ffff000 : (size_t)left;
            w = sendfile(out_fd, p->in_fd, &pos, chunk);
            if (w == 0) {
                eof = 1;
                break;
            }
        } else {
            w = write(out_fd, (const char *)p->buf.buf + off, (size_t)left);
        }
        if (w < 0) {
            if (errno == EINTR)
                continue;
            if (errno != EAGAIN && errno != EWOULDBLOCK) {
                err = errno;
                break;
            }
            long long left_ms = wait_ms ? until - now_ms() : 0;
            if (left_ms <= 0)
                break;
            struct pollfd pfd = {out_fd, POLLOUT, 0};
            int ready = poll(&pfd, 1, (int)left_ms);
            if (ready < 0 && errno != EINTR) {
                err = errno;
                break;
            }
            continue; /* writable, timed out (the next write says which), or an error it reports */
        }
        off += w;
    }
    Py_END_ALLOW_THREADS

    if (eof) {
        PyErr_Format(PyExc_EOFError, "%lld bytes of a file region were truncated away while it was sent",
                     parts[i].size - off);
    } else if (err) {
        errno = err;
        PyErr_SetFromErrno(PyExc_OSError);
    } else if (i == count) {
        result = Py_BuildValue("(nL)", n, 0LL);
    } else {
        result = Py_BuildValue("(nL)", index + i, off);
    }

done:
    for (Py_ssize_t k = 0; k < ready; k++)
        if (!parts[k].is_region)
            PyBuffer_Release(&parts[k].buf);
    PyMem_Free(parts);
    return result;
}

static PyMethodDef sendfile_methods[] = {
    {"send_parts", (PyCFunction)(void (*)(void))send_parts, METH_FASTCALL,
     "send_parts(out_fd, parts, index, offset, wait_ms) -> (index, offset): write bytes parts and "
     "(in_fd, position, size) file regions in order, GIL released, waiting for the socket, until "
     "done or wait_ms have passed."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef sendfile_module = {
    PyModuleDef_HEAD_INIT, "_sendfile", NULL, -1, sendfile_methods,
};

PyMODINIT_FUNC
PyInit__sendfile(void)
{
    return PyModule_Create(&sendfile_module);
}
