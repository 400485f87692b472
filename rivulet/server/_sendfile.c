/* Optional accelerator for the zero-copy Fetch path (rivulet/server/file_sender.py).
 *
 * A Fetch answer over many partitions holds up to one file region per partition. Sent from
 * Python, every region is an os.sendfile call that drops and retakes the GIL; with a dozen
 * consumers the sender threads spend more time waiting for the GIL than copying. send_parts
 * writes a whole answer, header bytes and regions in order, with the GIL released once,
 * until it is done or the socket is full.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <errno.h>
#include <sys/sendfile.h>
#include <unistd.h>

typedef struct {
    int is_region;
    Py_buffer buf;   /* bytes part */
    int in_fd;       /* region part */
    long long position;
    long long size;
} part_t;

/* send_parts(out_fd, parts, index, offset) -> (index, offset)
 *
 * parts: a list of bytes-like objects and (in_fd, position, size) tuples. Writing starts
 * `offset` bytes into parts[index]; the answer is where writing stopped because the
 * socket would block, or (len(parts), 0) when everything is written. EOFError when a
 * region's file ends before its size; OSError for any other failure. */
static PyObject *
send_parts(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    int out_fd;
    Py_ssize_t index, n;
    long long offset;
    PyObject *list;

    if (nargs != 4) {
        PyErr_SetString(PyExc_TypeError, "send_parts(out_fd, parts, index, offset)");
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
    n = PyList_GET_SIZE(list);
    if (index < 0 || index > n || offset < 0) {
        PyErr_SetString(PyExc_ValueError, "index or offset out of range");
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
            if (errno != EAGAIN && errno != EWOULDBLOCK)
                err = errno;
            break;
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
     "send_parts(out_fd, parts, index, offset) -> (index, offset): write bytes parts and "
     "(in_fd, position, size) file regions in order, GIL released, until done or the socket is full."},
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
