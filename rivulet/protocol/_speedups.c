/* Optional C accelerator for rivulet.protocol.records, the record-batch module: that module
 * is the reference, and the layout constants below mirror its own.
 *
 * parse_records(buf, pos, end, count, base_offset, base_timestamp, log_append_time)
 * does what records._py_parse_records does: decode ``count`` magic v2 records that must
 * fill buf[pos:end] exactly, returning a list of records.Record. Same arguments, same
 * results, same errors: every malformed input raises records._invalid(message)
 * (ApiError INVALID_RECORD) with the message the Python code uses. Nothing at or past
 * ``end`` is read; a read that would go there is "record runs past the end of the batch",
 * as in the Python version, and so is an ``end`` past the end of ``buf``.
 *
 * Inputs outside the fast path (a buffer that is not bytes, a negative pos, integers
 * beyond 64 bits) are handed to the Python implementation, so the results stay the
 * same for every input.
 *
 * records.py calls setup(Record, _invalid, _py_parse_records) once after import; the
 * module keeps references to those three objects.
 *
 * encode_records(records, base_timestamp, header) writes a batch's records section as
 * records._py_encode_records does, byte for byte, for the usual kinds of records, and returns
 * None for anything else so that the Python encoder handles it (and raises its errors); see
 * the "encoding" section. records.py calls setup_encoder(crc32c) once after import.
 *
 * check_records walks a produced batch's records as records._py_check_records does and
 * defers to it for anything it would reject; records.py calls setup_checker(it) once.
 *
 * encode_fetch_partitions writes a Fetch response topic's partitions straight from the
 * replica manager's results (rivulet.protocol.fetch_answer); see the "Fetch response" section.
 *
 * For the producer: make_record (its PendingRecord, left untracked by the garbage collector
 * when it can be) and murmur2 (Java's Utils.murmur2, for the default partitioner).
 */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>

#if PY_VERSION_HEX < 0x030C0000
#include <structmember.h>
#define RIV_T_OBJECT_EX T_OBJECT_EX
#define RIV_READONLY READONLY
#else
#define RIV_T_OBJECT_EX Py_T_OBJECT_EX
#define RIV_READONLY Py_READONLY
#endif

/* --- state set by setup() ------------------------------------------------------------ */

static PyObject *record_type = NULL;   /* records.Record */
static PyObject *invalid_fn = NULL;    /* records._invalid: message -> exception */
static PyObject *fallback_fn = NULL;   /* records._py_parse_records */

/* Byte offsets of Record's slots, in constructor order; valid when fast_record is 1. */
#define N_FIELDS 5
static const char *const field_names[N_FIELDS] = {"offset", "timestamp", "key", "value", "headers"};
static Py_ssize_t field_offsets[N_FIELDS];
static int fast_record = 0;

/* Offsets of ``names``' slots in instances of ``type``: 1 when each is a plain writable
 * object slot of a heap type without a __dict__ (so C may fill them directly), else 0. */
static int
probe_slots(PyObject *type, PyObject *const *names, int n, Py_ssize_t *offsets)
{
    if (!PyType_Check(type))
        return 0;
    PyTypeObject *tp = (PyTypeObject *)type;
    if (!(tp->tp_flags & Py_TPFLAGS_HEAPTYPE) || tp->tp_alloc == NULL || tp->tp_dictoffset != 0)
        return 0;
    for (int i = 0; i < n; i++) {
        PyObject *descr = PyDict_GetItemWithError(tp->tp_dict, names[i]); /* borrowed */
        if (descr == NULL || Py_TYPE(descr) != &PyMemberDescr_Type) {
            PyErr_Clear();
            return 0;
        }
        PyMemberDef *m = ((PyMemberDescrObject *)descr)->d_member;
        if (m->type != RIV_T_OBJECT_EX || (m->flags & RIV_READONLY))
            return 0;
        if (m->offset < (Py_ssize_t)sizeof(PyObject) || m->offset + (Py_ssize_t)sizeof(PyObject *) > tp->tp_basicsize)
            return 0;
        offsets[i] = m->offset;
    }
    return 1;
}

/* Decide whether Record instances can be made by allocating the object and filling its
 * slots directly (what the dataclass __init__ does, without running Python code): the
 * type must be a heap type whose five fields are plain writable object slots. */
static int
probe_fast_record(PyObject *type)
{
    PyObject *names[N_FIELDS];
    int n = 0, ok = 0;
    for (; n < N_FIELDS; n++) {
        names[n] = PyUnicode_InternFromString(field_names[n]);
        if (names[n] == NULL) {
            PyErr_Clear();
            goto done;
        }
    }
    ok = probe_slots(type, names, N_FIELDS, field_offsets);
done:
    for (int i = 0; i < n; i++)
        Py_DECREF(names[i]);
    return ok;
}

static PyObject *
speedups_setup(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    (void)module;
    if (nargs != 3) {
        PyErr_SetString(PyExc_TypeError, "setup(record_type, invalid, fallback) takes 3 arguments");
        return NULL;
    }
    if (!PyCallable_Check(args[0]) || !PyCallable_Check(args[1]) || !PyCallable_Check(args[2])) {
        PyErr_SetString(PyExc_TypeError, "setup() arguments must be callable");
        return NULL;
    }
    Py_INCREF(args[0]);
    Py_XSETREF(record_type, args[0]);
    Py_INCREF(args[1]);
    Py_XSETREF(invalid_fn, args[1]);
    Py_INCREF(args[2]);
    Py_XSETREF(fallback_fn, args[2]);
    fast_record = probe_fast_record(record_type);
    return PyBool_FromLong(fast_record);
}

/* The consumer's Message type (rivulet.client.types.Message), set by setup_messages(). */
#define N_MSG_FIELDS 11
static const char *const msg_field_names[N_MSG_FIELDS] = {
    "_topic", "_partition", "_offset", "_key", "_value", "_headers",
    "_ts_type", "_ts", "_error", "_leader_epoch", "_latency",
};
#define N_MSG_ARGS 10 /* Message(topic, partition, offset, key, value, headers, ts_type, ts, error, leader_epoch) */
static PyObject *message_type = NULL;
static Py_ssize_t msg_offsets[N_MSG_FIELDS];
static int fast_message = 0;

/* Can Messages be made by filling slots? The type's own slots must be exactly the eleven
 * above, and constructing one in Python must store argument i in slot i and None in
 * _latency: checked here once with sentinel objects, so a changed __init__ is noticed. */
static int
probe_fast_message(PyObject *type)
{
    if (!PyType_Check(type))
        return 0;
    PyTypeObject *tp = (PyTypeObject *)type;
    if (!(tp->tp_flags & Py_TPFLAGS_HEAPTYPE) || tp->tp_alloc == NULL || tp->tp_dictoffset != 0
        || tp->tp_base != &PyBaseObject_Type || tp->tp_members == NULL)
        return 0;
    int n_members = 0;
    for (PyMemberDef *m = tp->tp_members; m->name != NULL; m++) {
        int known = 0;
        for (int i = 0; i < N_MSG_FIELDS; i++) {
            if (strcmp(m->name, msg_field_names[i]) == 0) {
                known = 1;
                msg_offsets[i] = m->offset;
            }
        }
        if (!known || m->type != RIV_T_OBJECT_EX || (m->flags & RIV_READONLY)
            || m->offset < (Py_ssize_t)sizeof(PyObject) || m->offset + (Py_ssize_t)sizeof(PyObject *) > tp->tp_basicsize)
            return 0;
        n_members++;
    }
    if (n_members != N_MSG_FIELDS)
        return 0;
    PyObject *sentinels[N_MSG_ARGS] = {NULL};
    int ok = 0;
    PyObject *msg = NULL;
    for (int i = 0; i < N_MSG_ARGS; i++) {
        sentinels[i] = PyObject_CallNoArgs((PyObject *)&PyBaseObject_Type);
        if (sentinels[i] == NULL)
            goto done;
    }
    msg = PyObject_Vectorcall(type, sentinels, N_MSG_ARGS, NULL);
    if (msg == NULL || Py_TYPE(msg) != tp)
        goto done;
    for (int i = 0; i < N_MSG_FIELDS; i++) {
        PyObject *got = *(PyObject **)((char *)msg + msg_offsets[i]);
        PyObject *want = i < N_MSG_ARGS ? sentinels[i] : Py_None;
        if (got != want)
            goto done;
    }
    ok = 1;
done:
    PyErr_Clear();
    Py_XDECREF(msg);
    for (int i = 0; i < N_MSG_ARGS; i++)
        Py_XDECREF(sentinels[i]);
    return ok;
}

static PyObject *
speedups_setup_messages(PyObject *module, PyObject *type)
{
    (void)module;
    if (!PyCallable_Check(type)) {
        PyErr_SetString(PyExc_TypeError, "setup_messages() needs the Message type");
        return NULL;
    }
    int fast = probe_fast_message(type);
    Py_INCREF(type);
    Py_XSETREF(message_type, type);
    fast_message = fast;
    return PyBool_FromLong(fast_message);
}

/* --- errors ---------------------------------------------------------------------------- */

/* Raise invalid_fn(msg); consumes msg. `suppress` mirrors Python's "raise ... from None". */
static void
raise_invalid(PyObject *msg, int suppress)
{
    if (msg == NULL)
        return;
    PyObject *exc = PyObject_CallOneArg(invalid_fn, msg);
    Py_DECREF(msg);
    if (exc == NULL)
        return;
    if (suppress && PyExceptionInstance_Check(exc))
        PyException_SetCause(exc, NULL); /* also sets __suppress_context__ */
    PyErr_SetObject((PyObject *)Py_TYPE(exc), exc);
    Py_DECREF(exc);
}

static void
raise_invalid_str(const char *text, int suppress)
{
    raise_invalid(PyUnicode_FromString(text), suppress);
}

static void
raise_invalid_num(const char *fmt, long long n)
{
    raise_invalid(PyUnicode_FromFormat(fmt, n), 0);
}

/* --- varints --------------------------------------------------------------------------- */

enum { VARINT_OK = 0, VARINT_PAST_END = 1, VARINT_TOO_LONG = 2 };

/* Unsigned varint of at most max_bytes bytes at *pp, never reading at or after limit.
 * With max_bytes 10 the value can exceed 64 bits; only its low 64 bits are returned and
 * the caller detects the overflow from the last byte. */
static inline int
read_uvarint(const unsigned char *buf, Py_ssize_t limit, Py_ssize_t *pp, int max_bytes, uint64_t *out)
{
    Py_ssize_t p = *pp;
    if (p < limit && buf[p] < 0x80) { /* one byte: nearly every length and delta */
        *out = buf[p];
        *pp = p + 1;
        return VARINT_OK;
    }
    uint64_t result = 0;
    int shift = 0;
    for (int i = 0; i < max_bytes; i++) {
        if (p >= limit)
            return VARINT_PAST_END;
        unsigned int b = buf[p++];
        result |= (uint64_t)(b & 0x7F) << shift;
        if (b < 0x80) {
            *out = result;
            *pp = p;
            return VARINT_OK;
        }
        shift += 7;
    }
    return VARINT_TOO_LONG;
}

static inline int64_t
zigzag(uint64_t v)
{
    return (int64_t)(v >> 1) ^ -(int64_t)(v & 1);
}

/* Zigzag-decoded value of a 10-byte varint that does not fit in 64 bits, as a Python int. */
static PyObject *
zigzag_big(const unsigned char *start)
{
    uint64_t low = 0;
    for (int i = 0; i < 9; i++)
        low |= (uint64_t)(start[i] & 0x7F) << (7 * i); /* 63 bits */
    PyObject *v = NULL, *hi = NULL, *shift = NULL, *tmp = NULL, *half = NULL, *one = NULL, *sign = NULL, *res = NULL;
    v = PyLong_FromUnsignedLongLong(low);
    hi = PyLong_FromLong(start[9] & 0x7F);
    shift = PyLong_FromLong(63);
    one = PyLong_FromLong(1);
    if (v == NULL || hi == NULL || shift == NULL || one == NULL)
        goto done;
    tmp = PyNumber_Lshift(hi, shift);
    if (tmp == NULL)
        goto done;
    Py_SETREF(v, PyNumber_Or(v, tmp));
    if (v == NULL)
        goto done;
    half = PyNumber_Rshift(v, one);
    Py_SETREF(tmp, PyNumber_And(v, one));
    if (half == NULL || tmp == NULL)
        goto done;
    sign = PyNumber_Negative(tmp);
    if (sign == NULL)
        goto done;
    res = PyNumber_Xor(half, sign);
done:
    Py_XDECREF(v);
    Py_XDECREF(hi);
    Py_XDECREF(shift);
    Py_XDECREF(tmp);
    Py_XDECREF(half);
    Py_XDECREF(one);
    Py_XDECREF(sign);
    return res;
}

/* Whether a + b leaves the int64 range; if not, *sum is set. */
static inline int
add_overflows(int64_t a, int64_t b, int64_t *sum)
{
    if ((b > 0 && a > INT64_MAX - b) || (b < 0 && a < INT64_MIN - b))
        return 1;
    *sum = a + b;
    return 0;
}

/* a + b as a Python int, exact for any 64-bit operands. */
static PyObject *
add_i64(int64_t a, int64_t b)
{
    int64_t sum;
    if (add_overflows(a, b, &sum)) {
        PyObject *x = PyLong_FromLongLong(a), *y = PyLong_FromLongLong(b), *r = NULL;
        if (x != NULL && y != NULL)
            r = PyNumber_Add(x, y);
        Py_XDECREF(x);
        Py_XDECREF(y);
        return r;
    }
    return PyLong_FromLongLong(sum);
}

/* --- records --------------------------------------------------------------------------- */

/* A new Record(offset, timestamp, key, value, headers); steals the five references (also on
 * failure). */
static PyObject *
make_record(PyObject *offset, PyObject *timestamp, PyObject *key, PyObject *value, PyObject *headers)
{
    PyObject *fields[N_FIELDS] = {offset, timestamp, key, value, headers};
    PyObject *r;
    if (fast_record) {
        PyTypeObject *tp = (PyTypeObject *)record_type;
        r = tp->tp_alloc(tp, 0);
        if (r != NULL) {
            for (int i = 0; i < N_FIELDS; i++)
                *(PyObject **)((char *)r + field_offsets[i]) = fields[i];
            return r;
        }
    }
    else {
        r = PyObject_Vectorcall(record_type, fields, N_FIELDS, NULL);
    }
    for (int i = 0; i < N_FIELDS; i++)
        Py_DECREF(fields[i]);
    return r;
}

/* What parse_messages puts in every Message besides the record's own fields. */
typedef struct {
    PyObject *topic, *partition, *ts_type, *leader_epoch;
    PyObject *min_offset_obj;
    int min_fits; /* min_offset_obj is an int within int64, in min_offset */
    long long min_offset;
} msg_ctx;

/* A new Message(topic, partition, offset, key, value, headers, ts_type, ts, None,
 * leader_epoch); steals offset, ts, key, value and headers (also on failure). */
static PyObject *
make_message(const msg_ctx *mc, PyObject *offset, PyObject *ts, PyObject *key, PyObject *value, PyObject *headers)
{
    PyObject *fields[N_MSG_FIELDS] = {
        mc->topic, mc->partition, offset, key, value, headers, mc->ts_type, ts, Py_None, mc->leader_epoch, Py_None,
    };
    PyObject *m;
    if (fast_message) {
        PyTypeObject *tp = (PyTypeObject *)message_type;
        m = tp->tp_alloc(tp, 0);
        if (m != NULL) {
            Py_INCREF(mc->topic);
            Py_INCREF(mc->partition);
            Py_INCREF(mc->ts_type);
            Py_INCREF(Py_None);
            Py_INCREF(mc->leader_epoch);
            Py_INCREF(Py_None);
            for (int i = 0; i < N_MSG_FIELDS; i++)
                *(PyObject **)((char *)m + msg_offsets[i]) = fields[i];
            return m;
        }
    }
    else {
        m = PyObject_Vectorcall(message_type, fields, N_MSG_ARGS, NULL);
    }
    Py_DECREF(offset);
    Py_DECREF(ts);
    Py_DECREF(key);
    Py_DECREF(value);
    Py_DECREF(headers);
    return m;
}

/* A Python int argument as a C integer; 0 if it is not an exact int in range. */
static int
as_i64(PyObject *o, long long *out)
{
    if (!PyLong_CheckExact(o))
        return 0;
    int overflow = 0;
    long long v = PyLong_AsLongLongAndOverflow(o, &overflow);
    if (overflow || (v == -1 && PyErr_Occurred())) {
        PyErr_Clear();
        return 0;
    }
    *out = v;
    return 1;
}

/* A key or a value: a varint length, then that many bytes, which must end by rec_end; -1 is
 * null and leaves *at at -1. Returns a VARINT_* status, or -1 with bad_length raised. */
static inline int
read_nullable(const unsigned char *buf, Py_ssize_t limit, Py_ssize_t *pp, long long rec_end, const char *bad_length,
              Py_ssize_t *at, Py_ssize_t *len)
{
    uint64_t v;
    int st = read_uvarint(buf, limit, pp, 5, &v);
    if (st)
        return st;
    int64_t n = zigzag(v);
    if (n != -1) {
        if (n < 0 || *pp + n > rec_end) {
            raise_invalid_num(bad_length, n);
            return -1;
        }
        *at = *pp;
        *len = (Py_ssize_t)n;
        *pp += *len;
    }
    return VARINT_OK;
}

/* The decoder proper, for both entry points: Records when mc is NULL, else Messages of the
 * records at or after mc->min_offset (empty header lists become None, as the consumer
 * wants them). Validation is the same either way: all records are checked. */
static PyObject *
parse(const unsigned char *buf, Py_ssize_t len, Py_ssize_t pos, long long end, long long count,
      long long base_offset, long long base_timestamp, PyObject *log_append_time, const msg_ctx *mc)
{
    if (end > (long long)len) { /* records said to reach past the buffer */
        raise_invalid_str("record runs past the end of the batch", 0);
        return NULL;
    }
    /* Nothing at or past `end` is read: every slice also ends by a record's end <= end. */
    Py_ssize_t limit = end < 0 ? 0 : (Py_ssize_t)end;
    int use_lat = log_append_time != Py_None;

    /* Every record takes at least 7 bytes (a size varint and 6), so at most `room` records
     * can succeed: that many slots are preallocated, and a larger count (which can only
     * fail) goes on by appending. Slots left unfilled are NULL, which list dealloc skips. */
    Py_ssize_t room = limit > pos ? (Py_ssize_t)((limit - pos) / 7) : 0;
    Py_ssize_t cap = count <= 0 ? 0 : (count < (long long)room ? (Py_ssize_t)count : room);
    Py_ssize_t n_out = 0;
    PyObject *records = PyList_New(cap);
    if (records == NULL)
        return NULL;
    PyObject *headers = NULL;
    uint64_t v;
    int st;

    for (long long i = 0; i < count; i++) {
        st = read_uvarint(buf, limit, &pos, 5, &v);
        if (st)
            goto varint_error;
        int64_t size = zigzag(v);
        long long rec_end = pos + size;
        if (size < 6 || rec_end > end) {
            raise_invalid_num("invalid record size %lld", size);
            goto error;
        }
        Py_ssize_t p = pos + 1; /* attributes: unused */

        Py_ssize_t ts_start = p;
        st = read_uvarint(buf, limit, &p, 10, &v);
        if (st)
            goto varint_error;
        int ts_big = (p - ts_start == 10 && buf[p - 1] > 1);
        int64_t ts_delta = zigzag(v);

        st = read_uvarint(buf, limit, &p, 5, &v);
        if (st)
            goto varint_error;
        int64_t offset_delta = zigzag(v);

        Py_ssize_t key_at = -1, key_len = 0, value_at = -1, value_len = 0;
        st = read_nullable(buf, limit, &p, rec_end, "invalid key length %lld", &key_at, &key_len);
        if (st == 0)
            st = read_nullable(buf, limit, &p, rec_end, "invalid value length %lld", &value_at, &value_len);
        if (st < 0)
            goto error;
        if (st)
            goto varint_error;

        st = read_uvarint(buf, limit, &p, 5, &v);
        if (st)
            goto varint_error;
        int64_t n = zigzag(v);
        if (n < 0) {
            raise_invalid_num("invalid header count %lld", n);
            goto error;
        }
        if (n == 0 && mc != NULL) {
            headers = Py_NewRef(Py_None);
        }
        else {
            headers = PyList_New(0);
            if (headers == NULL)
                goto error;
        }
        /* Each header takes at least two bytes, so a bogus count runs into an error soon. */
        for (int64_t h = 0; h < n; h++) {
            st = read_uvarint(buf, limit, &p, 5, &v);
            if (st)
                goto varint_error;
            int64_t kl = zigzag(v);
            if (kl < 0 || p + kl > rec_end) {
                raise_invalid_num("invalid header key length %lld", kl);
                goto error;
            }
            /* Java's client decodes header keys leniently as well. */
            PyObject *name = PyUnicode_DecodeUTF8((const char *)buf + p, (Py_ssize_t)kl, "replace");
            if (name == NULL)
                goto error;
            p += (Py_ssize_t)kl;
            st = read_uvarint(buf, limit, &p, 5, &v);
            if (st) {
                Py_DECREF(name);
                goto varint_error;
            }
            int64_t vl = zigzag(v);
            PyObject *hv;
            if (vl == -1) {
                hv = Py_NewRef(Py_None);
            }
            else if (vl < 0 || p + vl > rec_end) {
                Py_DECREF(name);
                raise_invalid_num("invalid header value length %lld", vl);
                goto error;
            }
            else {
                hv = PyBytes_FromStringAndSize((const char *)buf + p, (Py_ssize_t)vl);
                if (hv == NULL) {
                    Py_DECREF(name);
                    goto error;
                }
                p += (Py_ssize_t)vl;
            }
            PyObject *pair = PyTuple_New(2);
            if (pair == NULL) {
                Py_DECREF(name);
                Py_DECREF(hv);
                goto error;
            }
            PyTuple_SET_ITEM(pair, 0, name);
            PyTuple_SET_ITEM(pair, 1, hv);
            int rc = PyList_Append(headers, pair);
            Py_DECREF(pair);
            if (rc < 0)
                goto error;
            /* A null value's length read at the record's end ran past it: the record is
               short of its fields, as the Python walk says (not the next key's length). */
            if (p > rec_end)
                break;
        }
        if (p != rec_end) {
            raise_invalid_str("record fields do not fill the record's declared size", 0);
            goto error;
        }

        PyObject *key, *value, *offset_obj, *ts_obj;
        offset_obj = add_i64(base_offset, offset_delta);
        if (offset_obj == NULL)
            goto error;
        if (mc != NULL) { /* below the fetch position: validated, not kept */
            int keep;
            int64_t off;
            if (mc->min_fits && !add_overflows(base_offset, offset_delta, &off))
                keep = off >= mc->min_offset;
            else
                keep = PyObject_RichCompareBool(offset_obj, mc->min_offset_obj, Py_GE);
            if (keep <= 0) {
                Py_DECREF(offset_obj);
                Py_CLEAR(headers);
                if (keep < 0)
                    goto error;
                pos = (Py_ssize_t)rec_end;
                continue;
            }
        }
        if (use_lat) {
            ts_obj = Py_NewRef(log_append_time);
        }
        else if (ts_big) {
            PyObject *d = zigzag_big(buf + ts_start), *b = NULL;
            ts_obj = NULL;
            if (d != NULL && (b = PyLong_FromLongLong(base_timestamp)) != NULL)
                ts_obj = PyNumber_Add(b, d);
            Py_XDECREF(d);
            Py_XDECREF(b);
        }
        else {
            ts_obj = add_i64(base_timestamp, ts_delta);
        }
        key = key_at < 0 ? Py_NewRef(Py_None) : PyBytes_FromStringAndSize((const char *)buf + key_at, key_len);
        value = value_at < 0 ? Py_NewRef(Py_None)
                             : PyBytes_FromStringAndSize((const char *)buf + value_at, value_len);
        if (offset_obj == NULL || ts_obj == NULL || key == NULL || value == NULL) {
            Py_XDECREF(offset_obj);
            Py_XDECREF(ts_obj);
            Py_XDECREF(key);
            Py_XDECREF(value);
            goto error;
        }
        PyObject *record = mc == NULL ? make_record(offset_obj, ts_obj, key, value, headers)
                                      : make_message(mc, offset_obj, ts_obj, key, value, headers);
        headers = NULL; /* stolen */
        if (record == NULL)
            goto error;
        if (n_out < cap) {
            PyList_SET_ITEM(records, n_out, record);
        }
        else {
            int rc = PyList_Append(records, record);
            Py_DECREF(record);
            if (rc < 0)
                goto error;
        }
        n_out++;
        pos = (Py_ssize_t)rec_end;
    }
    if (pos != end) {
        raise_invalid_str("bytes left after the batch's declared record count", 0);
        goto error;
    }
    if (n_out < cap)
        Py_SET_SIZE(records, n_out); /* records skipped below min_offset */
    return records;

varint_error:
    if (st == VARINT_TOO_LONG)
        raise_invalid_str("varint is too long", 0);
    else
        raise_invalid_str("record runs past the end of the batch", 1);
error:
    Py_XDECREF(headers);
    Py_DECREF(records); /* unfilled preallocated slots are NULL, which list dealloc skips */
    return NULL;
}

/* The integer arguments shared by both entry points, if they are on the fast path. */
static int
fast_args(PyObject *const *args, Py_ssize_t *pos, long long *end, long long *count, long long *base_offset,
          long long *base_timestamp)
{
    long long pos0;
    if (!as_i64(args[1], &pos0) || pos0 < 0 || pos0 > PY_SSIZE_T_MAX / 2
        || !as_i64(args[2], end) || !as_i64(args[3], count) || !as_i64(args[4], base_offset)
        || !as_i64(args[5], base_timestamp))
        return 0;
    *pos = (Py_ssize_t)pos0;
    return 1;
}

static PyObject *
speedups_parse_records(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    (void)module;
    if (nargs != 7) {
        PyErr_Format(PyExc_TypeError, "parse_records() takes 7 positional arguments but %zd were given", nargs);
        return NULL;
    }
    if (record_type == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "rivulet.protocol._speedups.setup() has not been called");
        return NULL;
    }
    Py_ssize_t pos;
    long long end, count, base_offset, base_timestamp;
    /* Anything unusual goes to the Python implementation, which defines the behaviour. */
    if (!PyBytes_CheckExact(args[0]) || !fast_args(args, &pos, &end, &count, &base_offset, &base_timestamp))
        return PyObject_Vectorcall(fallback_fn, args, 7, NULL);
    return parse((const unsigned char *)PyBytes_AS_STRING(args[0]), PyBytes_GET_SIZE(args[0]), pos, end, count,
                 base_offset, base_timestamp, args[6], NULL);
}

/* Messages from Records the Python implementation decoded (the unusual-arguments path). */
static PyObject *
records_to_messages(PyObject *records, const msg_ctx *mc)
{
    PyObject *out = PyList_New(0);
    if (out == NULL)
        return NULL;
    Py_ssize_t n = PyList_GET_SIZE(records);
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *r = PyList_GET_ITEM(records, i);
        PyObject *f[N_FIELDS] = {NULL};
        PyObject *m = NULL;
        int ok = 0, keep, has;
        for (int j = 0; j < N_FIELDS; j++) {
            f[j] = PyObject_GetAttrString(r, field_names[j]);
            if (f[j] == NULL)
                goto next;
        }
        keep = PyObject_RichCompareBool(f[0], mc->min_offset_obj, Py_GE);
        if (keep < 0)
            goto next;
        if (keep) {
            has = PyObject_IsTrue(f[4]); /* r.headers or None */
            if (has < 0)
                goto next;
            if (!has)
                Py_SETREF(f[4], Py_NewRef(Py_None));
            m = make_message(mc, f[0], f[1], f[2], f[3], f[4]);
            for (int j = 0; j < N_FIELDS; j++)
                f[j] = NULL; /* stolen */
            if (m == NULL || PyList_Append(out, m) < 0)
                goto next;
        }
        ok = 1;
    next:
        Py_XDECREF(m);
        for (int j = 0; j < N_FIELDS; j++)
            Py_XDECREF(f[j]);
        if (!ok) {
            Py_DECREF(out);
            return NULL;
        }
    }
    return out;
}

static PyObject *
speedups_parse_messages(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    (void)module;
    if (nargs != 12) {
        PyErr_Format(PyExc_TypeError, "parse_messages() takes 12 positional arguments but %zd were given", nargs);
        return NULL;
    }
    if (record_type == NULL || message_type == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "rivulet.protocol._speedups: setup() and setup_messages() come first");
        return NULL;
    }
    msg_ctx mc;
    mc.min_offset_obj = args[7];
    mc.topic = args[8];
    mc.partition = args[9];
    mc.ts_type = args[10];
    mc.leader_epoch = args[11];
    mc.min_fits = as_i64(args[7], &mc.min_offset);
    Py_ssize_t pos;
    long long end, count, base_offset, base_timestamp;
    PyObject *buf_obj = args[0];
    if (fast_args(args, &pos, &end, &count, &base_offset, &base_timestamp)) {
        if (PyBytes_CheckExact(buf_obj))
            return parse((const unsigned char *)PyBytes_AS_STRING(buf_obj), PyBytes_GET_SIZE(buf_obj), pos, end,
                         count, base_offset, base_timestamp, args[6], &mc);
        /* Any contiguous buffer (the fetcher passes a view of the response) is read in
         * place: keys and values are copied out of it anyway. */
        Py_buffer view;
        if (PyObject_CheckBuffer(buf_obj) && PyObject_GetBuffer(buf_obj, &view, PyBUF_SIMPLE) == 0) {
            PyObject *out = parse((const unsigned char *)view.buf, view.len, pos, end, count, base_offset,
                                  base_timestamp, args[6], &mc);
            PyBuffer_Release(&view);
            return out;
        }
        PyErr_Clear();
    }
    {
        /* The Python decoder, on the bytes of the buffer: keys and values are always bytes. */
        PyObject *fargs[7];
        for (int i = 0; i < 7; i++)
            fargs[i] = args[i];
        PyObject *copy = NULL;
        if (!PyBytes_CheckExact(buf_obj)) {
            copy = PyBytes_FromObject(buf_obj);
            if (copy == NULL)
                return NULL;
            fargs[0] = copy;
        }
        PyObject *records = PyObject_Vectorcall(fallback_fn, fargs, 7, NULL);
        Py_XDECREF(copy);
        if (records == NULL)
            return NULL;
        if (!PyList_CheckExact(records)) {
            Py_DECREF(records);
            PyErr_SetString(PyExc_TypeError, "the record decoder did not return a list");
            return NULL;
        }
        PyObject *out = records_to_messages(records, &mc);
        Py_DECREF(records);
        return out;
    }
}

/* --- encoding --------------------------------------------------------------------------- */

/* encode_records(records, base_timestamp, header) writes the records section of a batch the
 * way records.encode_batch does, byte for byte. It only ever takes the common case: records
 * an exact list or tuple of objects whose key/value/headers/timestamp it can read without
 * running Python code (named tuples such as the producer's PendingRecord, __slots__ classes
 * such as Record, plain classes), keys, values and header values bytes or None, header names
 * str or bytes, headers None or a list/tuple of 2-tuples, timestamps None or ints whose
 * deltas fit in 64 bits. For anything else it returns None, and records.py runs the
 * pure-Python encoder, which then defines the result or the exception. So the C code never
 * raises for bad input (only MemoryError), and never has to mirror Python's error messages.
 *
 * With ``header`` a 61-byte batch header (lengths, maxTimestamp and CRC left for here), the
 * result is the whole uncompressed batch; with None it is (records section, maxTimestamp), for
 * records.py to compress. records.py calls setup_encoder(crc32c) once after import. */

static PyObject *crc_fn = NULL;                 /* crc32c.crc32c */
static PyTypeObject *tuplegetter_type = NULL;   /* collections._tuplegetter: named-tuple fields */
static PyObject *probe_tuple = NULL;            /* (0, 1, ..., PROBE_LEN - 1): finds a field's index */
#define N_ENC_FIELDS 4
#define PROBE_LEN 16
static PyObject *enc_names[N_ENC_FIELDS];       /* "key", "value", "headers", "timestamp" */
static const char *const enc_name_strs[N_ENC_FIELDS] = {"key", "value", "headers", "timestamp"};

/* Limit on any length summed here: far beyond any real batch, and no sum can overflow. */
#define ENC_LIMIT (PY_SSIZE_T_MAX / 16)

enum { ACCESS_NONE = 0, ACCESS_INDEX = 1, ACCESS_ATTR = 2 };

/* How to read the fields of one record type, decided once per type and call. */
typedef struct {
    PyTypeObject *type;
    int mode;
    Py_ssize_t index[N_ENC_FIELDS]; /* ACCESS_INDEX: tuple positions */
    Py_ssize_t min_len;
} access_t;

static void
probe_access(PyTypeObject *tp, access_t *ac)
{
    ac->type = tp;
    ac->mode = ACCESS_NONE;
    /* No __getattribute__ or __getattr__ of the class's own. */
    if (tp->tp_getattro != PyObject_GenericGetAttr)
        return;
    int by_index = tuplegetter_type != NULL && probe_tuple != NULL && PyType_IsSubtype(tp, &PyTuple_Type);
    Py_ssize_t min_len = 0;
    for (int i = 0; i < N_ENC_FIELDS; i++) {
        PyObject *d = _PyType_Lookup(tp, enc_names[i]); /* borrowed; sets no error */
        if (d == NULL) { /* an instance attribute */
            by_index = 0;
            continue;
        }
        PyTypeObject *dt = Py_TYPE(d);
        if (dt == tuplegetter_type) {
            if (by_index) {
                /* Read the probe tuple through the field: the result is the field's index. */
                PyObject *v = dt->tp_descr_get(d, probe_tuple, (PyObject *)&PyTuple_Type);
                if (v != NULL && PyLong_CheckExact(v)) {
                    ac->index[i] = PyLong_AsSsize_t(v);
                    if (ac->index[i] + 1 > min_len)
                        min_len = ac->index[i] + 1;
                }
                else {
                    PyErr_Clear();
                    by_index = 0;
                }
                Py_XDECREF(v);
            }
            continue;
        }
        by_index = 0;
        if (dt == &PyMemberDescr_Type || dt->tp_descr_get == NULL)
            continue; /* a __slots__ field, or a plain class attribute */
        return;       /* a property or another descriptor: Python code could run */
    }
    ac->min_len = min_len;
    ac->mode = by_index ? ACCESS_INDEX : ACCESS_ATTR;
}

/* The record's key, value, headers and timestamp as new references; -1 (no error set) when
 * the record is not for the fast path. */
static int
get_fields(PyObject *r, access_t *ac, PyObject **f)
{
    if (Py_TYPE(r) != ac->type)
        probe_access(Py_TYPE(r), ac);
    if (ac->mode == ACCESS_INDEX) {
        if (PyTuple_GET_SIZE(r) < ac->min_len)
            return -1;
        for (int i = 0; i < N_ENC_FIELDS; i++)
            f[i] = Py_NewRef(PyTuple_GET_ITEM(r, ac->index[i]));
        return 0;
    }
    if (ac->mode == ACCESS_ATTR) {
        for (int i = 0; i < N_ENC_FIELDS; i++) {
            f[i] = PyObject_GetAttr(r, enc_names[i]);
            if (f[i] == NULL) {
                PyErr_Clear();
                for (int j = 0; j < i; j++)
                    Py_DECREF(f[j]);
                return -1;
            }
        }
        return 0;
    }
    return -1;
}

static void
release_fields(PyObject **f)
{
    for (int i = 0; i < N_ENC_FIELDS; i++)
        Py_DECREF(f[i]);
}

/* Zigzag: 0, -1, 1, -2 ... -> 0, 1, 2, 3 ... */
static inline uint64_t
zz64(int64_t n)
{
    return ((uint64_t)n << 1) ^ (n < 0 ? UINT64_MAX : 0);
}

static inline Py_ssize_t
uvarint_len(uint64_t v)
{
    Py_ssize_t n = 1;
    while (v > 0x7F) {
        v >>= 7;
        n++;
    }
    return n;
}

static inline unsigned char *
put_uvarint(unsigned char *p, uint64_t v)
{
    while (v > 0x7F) {
        *p++ = (unsigned char)((v & 0x7F) | 0x80);
        v >>= 7;
    }
    *p++ = (unsigned char)v;
    return p;
}

static inline unsigned char *
put_bytes(unsigned char *p, const char *s, Py_ssize_t n)
{
    if (n > 0) {
        memcpy(p, s, (size_t)n);
        p += n;
    }
    return p;
}

/* A header name's bytes (borrowed from the object), or NULL (no error set) off the fast path. */
static const char *
header_name(PyObject *name, Py_ssize_t *len)
{
    if (PyUnicode_CheckExact(name)) {
        const char *s = PyUnicode_AsUTF8AndSize(name, len); /* cached in the str */
        if (s == NULL)
            PyErr_Clear(); /* lone surrogates: the Python encoder raises its own error */
        return s;
    }
    if (PyBytes_CheckExact(name)) {
        *len = PyBytes_GET_SIZE(name);
        return PyBytes_AS_STRING(name);
    }
    return NULL;
}

/* Bytes the headers field takes (count and headers), or -1 off the fast path. */
static Py_ssize_t
headers_size(PyObject *h)
{
    if (h == Py_None)
        return 1;
    if (!PyList_CheckExact(h) && !PyTuple_CheckExact(h))
        return -1;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(h);
    Py_ssize_t size = uvarint_len(zz64(n));
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *item = PySequence_Fast_GET_ITEM(h, i);
        if (!PyTuple_CheckExact(item) || PyTuple_GET_SIZE(item) != 2)
            return -1;
        Py_ssize_t kl, vl;
        if (header_name(PyTuple_GET_ITEM(item, 0), &kl) == NULL)
            return -1;
        PyObject *v = PyTuple_GET_ITEM(item, 1);
        if (v == Py_None)
            vl = 0;
        else if (PyBytes_CheckExact(v))
            vl = PyBytes_GET_SIZE(v);
        else
            return -1;
        if (kl > ENC_LIMIT || vl > ENC_LIMIT)
            return -1;
        size += uvarint_len(zz64(kl)) + kl + (v == Py_None ? 1 : uvarint_len(zz64(vl)) + vl);
        if (size > ENC_LIMIT)
            return -1;
    }
    return size;
}

static unsigned char *
put_headers(unsigned char *p, PyObject *h)
{
    if (h == Py_None) {
        *p++ = 0;
        return p;
    }
    /* headers_size() has checked every item just before, and no Python code ran since. */
    Py_ssize_t n = PySequence_Fast_GET_SIZE(h);
    p = put_uvarint(p, zz64(n));
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *item = PySequence_Fast_GET_ITEM(h, i);
        Py_ssize_t kl;
        const char *k = header_name(PyTuple_GET_ITEM(item, 0), &kl);
        p = put_uvarint(p, zz64(kl));
        p = put_bytes(p, k, kl);
        PyObject *v = PyTuple_GET_ITEM(item, 1);
        if (v == Py_None) {
            *p++ = 1; /* zigzag -1: null */
        }
        else {
            p = put_uvarint(p, zz64(PyBytes_GET_SIZE(v)));
            p = put_bytes(p, PyBytes_AS_STRING(v), PyBytes_GET_SIZE(v));
        }
    }
    return p;
}

/* One record, measured: everything put_record needs besides the headers object. */
typedef struct {
    int64_t ts;
    uint64_t ts_zz, off_zz;
    const char *key, *value; /* NULL: null */
    Py_ssize_t key_len, value_len, headers_len;
    Py_ssize_t size;  /* the record's length field */
    Py_ssize_t total; /* with the length field itself */
} rec_plan;

static int
plan_record(PyObject **f, Py_ssize_t i, int64_t base, rec_plan *pl)
{
    PyObject *key = f[0], *value = f[1], *headers = f[2], *tso = f[3];
    int64_t ts;
    if (tso == Py_None) {
        ts = base;
    }
    else {
        if (!PyLong_CheckExact(tso))
            return -1;
        int overflow = 0;
        long long v = PyLong_AsLongLongAndOverflow(tso, &overflow);
        if (overflow || (v == -1 && PyErr_Occurred())) {
            PyErr_Clear();
            return -1;
        }
        ts = (int64_t)v;
    }
    /* The delta must fit in 64 bits (the Python encoder takes any int; it gets the rest). */
    if ((base < 0 && ts > INT64_MAX + base) || (base > 0 && ts < INT64_MIN + base))
        return -1;
    pl->ts = ts;
    pl->ts_zz = zz64(ts - base);
    pl->off_zz = zz64((int64_t)i);
    Py_ssize_t size = 1 + uvarint_len(pl->ts_zz) + uvarint_len(pl->off_zz);
    if (key == Py_None) {
        pl->key = NULL;
        pl->key_len = 0;
        size += 1;
    }
    else if (PyBytes_CheckExact(key)) {
        pl->key = PyBytes_AS_STRING(key);
        pl->key_len = PyBytes_GET_SIZE(key);
        size += uvarint_len(zz64(pl->key_len));
    }
    else {
        return -1;
    }
    if (value == Py_None) {
        pl->value = NULL;
        pl->value_len = 0;
        size += 1;
    }
    else if (PyBytes_CheckExact(value)) {
        pl->value = PyBytes_AS_STRING(value);
        pl->value_len = PyBytes_GET_SIZE(value);
        size += uvarint_len(zz64(pl->value_len));
    }
    else {
        return -1;
    }
    /* Python: ``_encode_headers(headers) if headers else b"\x00"``; an empty list or tuple
     * gives b"\x00" either way. */
    pl->headers_len = headers_size(headers);
    if (pl->headers_len < 0 || pl->key_len > ENC_LIMIT || pl->value_len > ENC_LIMIT)
        return -1;
    size += pl->key_len + pl->value_len + pl->headers_len;
    pl->size = size;
    pl->total = uvarint_len(zz64(size)) + size;
    return 0;
}

static unsigned char *
put_record(unsigned char *p, const rec_plan *pl, PyObject *headers)
{
    p = put_uvarint(p, zz64(pl->size));
    *p++ = 0; /* record attributes: unused */
    p = put_uvarint(p, pl->ts_zz);
    p = put_uvarint(p, pl->off_zz);
    if (pl->key == NULL) {
        *p++ = 1;
    }
    else {
        p = put_uvarint(p, zz64(pl->key_len));
        p = put_bytes(p, pl->key, pl->key_len);
    }
    if (pl->value == NULL) {
        *p++ = 1;
    }
    else {
        p = put_uvarint(p, zz64(pl->value_len));
        p = put_bytes(p, pl->value, pl->value_len);
    }
    return put_headers(p, headers);
}

static inline void
put_be32(unsigned char *p, uint32_t v)
{
    p[0] = (unsigned char)(v >> 24);
    p[1] = (unsigned char)(v >> 16);
    p[2] = (unsigned char)(v >> 8);
    p[3] = (unsigned char)v;
}

static inline void
put_be64(unsigned char *p, uint64_t v)
{
    put_be32(p, (uint32_t)(v >> 32));
    put_be32(p + 4, (uint32_t)v);
}

/* The batch header layout mirrors rivulet/protocol/records.py, the reference and the one
 * home of the format (HEADER_SIZE, LENGTH_OFFSET, CRC_OFFSET, ATTRIBUTES_OFFSET,
 * MAX_TIMESTAMP_OFFSET, RECORDS_COUNT_OFFSET, LOG_OVERHEAD); change them together. */
#define B_HEADER_SIZE 61
#define B_LENGTH_OFFSET 8
#define B_CRC_OFFSET 17
#define B_ATTRIBUTES_OFFSET 21
#define B_MAX_TIMESTAMP_OFFSET 35
#define B_COUNT_OFFSET 57
#define B_LOG_OVERHEAD 12

/* CRC-32C of buf[start:] through crc_fn; -1 (no error set) if it does not give a uint32. */
static long long
batch_crc(PyObject *out, Py_ssize_t start)
{
    PyObject *view = PyMemoryView_FromObject(out);
    if (view == NULL) {
        PyErr_Clear();
        return -1;
    }
    PyObject *part = PySequence_GetSlice(view, start, PyBytes_GET_SIZE(out));
    Py_DECREF(view);
    if (part == NULL) {
        PyErr_Clear();
        return -1;
    }
    PyObject *res = PyObject_CallOneArg(crc_fn, part);
    Py_DECREF(part);
    long long crc = -1;
    if (res != NULL && PyLong_CheckExact(res)) {
        int overflow = 0;
        crc = PyLong_AsLongLongAndOverflow(res, &overflow);
        if (overflow || crc < 0 || crc > 0xFFFFFFFFLL)
            crc = -1;
    }
    Py_XDECREF(res);
    PyErr_Clear();
    return crc;
}

static PyObject *
speedups_encode_records(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    (void)module;
    if (nargs != 3) {
        PyErr_Format(PyExc_TypeError, "encode_records() takes 3 positional arguments but %zd were given", nargs);
        return NULL;
    }
    if (crc_fn == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "rivulet.protocol._speedups.setup_encoder() has not been called");
        return NULL;
    }
    PyObject *records = args[0], *header = args[2];
    if (header != Py_None && (!PyBytes_CheckExact(header) || PyBytes_GET_SIZE(header) != B_HEADER_SIZE)) {
        PyErr_SetString(PyExc_TypeError, "encode_records() needs a 61-byte batch header or None");
        return NULL;
    }
    long long base;
    if ((!PyList_CheckExact(records) && !PyTuple_CheckExact(records)) || !as_i64(args[1], &base))
        Py_RETURN_NONE;

    /* Pass 1: the size of every record, to allocate the result once. */
    access_t ac = {NULL, ACCESS_NONE, {0}, 0};
    PyObject *f[N_ENC_FIELDS];
    rec_plan pl;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(records);
    Py_ssize_t total = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        if (get_fields(PySequence_Fast_GET_ITEM(records, i), &ac, f) < 0)
            Py_RETURN_NONE;
        int rc = plan_record(f, i, (int64_t)base, &pl);
        release_fields(f);
        if (rc < 0)
            Py_RETURN_NONE;
        total += pl.total;
        if (total > ENC_LIMIT)
            Py_RETURN_NONE;
    }
    Py_ssize_t start = header == Py_None ? 0 : B_HEADER_SIZE;
    if (header != Py_None) {
        const unsigned char *h = (const unsigned char *)PyBytes_AS_STRING(header);
        uint32_t count = ((uint32_t)h[B_COUNT_OFFSET] << 24) | ((uint32_t)h[B_COUNT_OFFSET + 1] << 16)
                         | ((uint32_t)h[B_COUNT_OFFSET + 2] << 8) | (uint32_t)h[B_COUNT_OFFSET + 3];
        /* batchLength is an int32: a larger batch is the Python encoder's error to raise. */
        if ((long long)count != (long long)n || total > (Py_ssize_t)INT32_MAX - (B_HEADER_SIZE - B_LOG_OVERHEAD))
            Py_RETURN_NONE;
    }
    PyObject *out = PyBytes_FromStringAndSize(NULL, start + total);
    if (out == NULL)
        return NULL;
    unsigned char *buf = (unsigned char *)PyBytes_AS_STRING(out);
    unsigned char *p = buf + start, *end = buf + start + total;

    /* Pass 2: the same records again (no Python code ran in between), written out. */
    int64_t max_ts = INT64_MIN;
    for (Py_ssize_t i = 0; i < n; i++) {
        if (i >= PySequence_Fast_GET_SIZE(records)
            || get_fields(PySequence_Fast_GET_ITEM(records, i), &ac, f) < 0)
            goto fallback;
        if (plan_record(f, i, (int64_t)base, &pl) < 0 || pl.total > end - p) {
            release_fields(f);
            goto fallback;
        }
        p = put_record(p, &pl, f[2]);
        release_fields(f);
        if (pl.ts > max_ts)
            max_ts = pl.ts;
    }
    if (p != end)
        goto fallback;

    if (header == Py_None) {
        PyObject *mt = PyLong_FromLongLong(max_ts);
        if (mt == NULL) {
            Py_DECREF(out);
            return NULL;
        }
        PyObject *res = PyTuple_Pack(2, out, mt);
        Py_DECREF(out);
        Py_DECREF(mt);
        return res;
    }
    memcpy(buf, PyBytes_AS_STRING(header), B_HEADER_SIZE);
    put_be32(buf + B_LENGTH_OFFSET, (uint32_t)(total + B_HEADER_SIZE - B_LOG_OVERHEAD));
    put_be64(buf + B_MAX_TIMESTAMP_OFFSET, (uint64_t)max_ts);
    long long crc = batch_crc(out, B_ATTRIBUTES_OFFSET);
    if (crc < 0)
        goto fallback;
    put_be32(buf + B_CRC_OFFSET, (uint32_t)crc);
    return out;

fallback:
    Py_DECREF(out);
    Py_RETURN_NONE;
}

static PyObject *
speedups_setup_encoder(PyObject *module, PyObject *crc)
{
    (void)module;
    if (!PyCallable_Check(crc)) {
        PyErr_SetString(PyExc_TypeError, "setup_encoder() needs the crc32c function");
        return NULL;
    }
    for (int i = 0; i < N_ENC_FIELDS; i++) {
        if (enc_names[i] == NULL) {
            enc_names[i] = PyUnicode_InternFromString(enc_name_strs[i]);
            if (enc_names[i] == NULL)
                return NULL;
        }
    }
    if (probe_tuple == NULL) {
        PyObject *t = PyTuple_New(PROBE_LEN);
        if (t == NULL)
            return NULL;
        for (int i = 0; i < PROBE_LEN; i++) {
            PyObject *v = PyLong_FromLong(i);
            if (v == NULL) {
                Py_DECREF(t);
                return NULL;
            }
            PyTuple_SET_ITEM(t, i, v);
        }
        probe_tuple = t;
    }
    if (tuplegetter_type == NULL) {
        /* Named tuples read their fields through this descriptor; without it they are read
         * by attribute (still in C), which works on every version. */
        PyObject *mod = PyImport_ImportModule("collections");
        PyObject *tg = mod == NULL ? NULL : PyObject_GetAttrString(mod, "_tuplegetter");
        Py_XDECREF(mod);
        if (tg != NULL && PyType_Check(tg))
            tuplegetter_type = (PyTypeObject *)Py_NewRef(tg);
        Py_XDECREF(tg);
        PyErr_Clear();
    }
    Py_INCREF(crc);
    Py_XSETREF(crc_fn, crc);
    Py_RETURN_NONE;
}

/* make_record(cls, *items): tuple.__new__(cls, items) for a tuple subclass cls (the producer's
 * PendingRecord), without the temporary tuple. The record is also left untracked by the
 * cyclic garbage collector when none of its items can take part in a cycle (bytes, str, int,
 * None, untracked tuples), as CPython does for plain tuples by itself: it does not do so for
 * subclasses, so every queued record would otherwise survive into the oldest generation and
 * make the collector walk the whole heap again and again while a producer is busy. */
static PyObject *
speedups_make_record(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    (void)module;
    if (nargs < 1 || !PyType_Check(args[0]) || !PyType_IsSubtype((PyTypeObject *)args[0], &PyTuple_Type)) {
        PyErr_SetString(PyExc_TypeError, "make_record(cls, *items) needs a tuple subclass");
        return NULL;
    }
    PyTypeObject *tp = (PyTypeObject *)args[0];
    Py_ssize_t n = nargs - 1;
    PyObject *r;
#if PY_VERSION_HEX < 0x030E0000
    /* What tuple.__new__ does for a subclass (tuple_subtype_new). */
    r = tp->tp_alloc(tp, n);
    if (r == NULL)
        return NULL;
    for (Py_ssize_t i = 0; i < n; i++)
        PyTuple_SET_ITEM(r, i, Py_NewRef(args[i + 1]));
#else
    {
        PyObject *items = PyTuple_New(n);
        if (items == NULL)
            return NULL;
        for (Py_ssize_t i = 0; i < n; i++)
            PyTuple_SET_ITEM(items, i, Py_NewRef(args[i + 1]));
        PyObject *targs = PyTuple_Pack(1, items);
        Py_DECREF(items);
        if (targs == NULL)
            return NULL;
        r = PyTuple_Type.tp_new(tp, targs, NULL);
        Py_DECREF(targs);
        if (r == NULL)
            return NULL;
    }
#endif
    if (PyObject_GC_IsTracked(r) && tp->tp_dictoffset == 0 && tp->tp_basicsize == PyTuple_Type.tp_basicsize) {
        for (Py_ssize_t i = 0; i < n; i++) {
            PyObject *x = args[i + 1];
            if (PyObject_IS_GC(x) && (!PyTuple_CheckExact(x) || PyObject_GC_IsTracked(x)))
                return r; /* may be part of a cycle: stays tracked */
        }
        PyObject_GC_UnTrack(r);
    }
    return r;
}

/* Kafka's murmur2 (Java's Utils.murmur2) of a bytes object, as a signed 32-bit int. */
static PyObject *
speedups_murmur2(PyObject *module, PyObject *data)
{
    (void)module;
    if (!PyBytes_CheckExact(data)) {
        PyErr_SetString(PyExc_TypeError, "murmur2() needs bytes");
        return NULL;
    }
    const unsigned char *b = (const unsigned char *)PyBytes_AS_STRING(data);
    Py_ssize_t len = PyBytes_GET_SIZE(data);
    const uint32_t m = 0x5BD1E995u;
    uint32_t h = 0x9747B28Cu ^ (uint32_t)len;
    Py_ssize_t n4 = len >> 2;
    for (Py_ssize_t i = 0; i < n4; i++) {
        const unsigned char *q = b + 4 * i;
        uint32_t k = (uint32_t)q[0] | ((uint32_t)q[1] << 8) | ((uint32_t)q[2] << 16) | ((uint32_t)q[3] << 24);
        k *= m;
        k ^= k >> 24;
        k *= m;
        h *= m;
        h ^= k;
    }
    const unsigned char *t = b + 4 * n4;
    switch (len & 3) {
    case 3:
        h ^= (uint32_t)t[2] << 16;
        /* fall through */
    case 2:
        h ^= (uint32_t)t[1] << 8;
        /* fall through */
    case 1:
        h ^= (uint32_t)t[0];
        h *= m;
    }
    h ^= h >> 13;
    h *= m;
    h ^= h >> 15;
    return PyLong_FromLong((long)(int32_t)h);
}

/* --- the produce path's record walk ---------------------------------------------------- */

static PyObject *check_fallback = NULL; /* records._py_check_records */

/* check_records(buf, pos, end, count, require_keys, base_timestamp, timestamp_bounds,
 * record_errors) -> int: records._py_check_records for a well-formed batch, without creating
 * a Python object per field. Anything that the Python walk would report (a structural error
 * it raises, a record error it appends) or that leaves 64-bit arithmetic is handed to that
 * walk from the start, so errors, their order and their messages are the reference's. */
static PyObject *
speedups_check_records(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    (void)module;
    if (nargs != 8) {
        PyErr_SetString(PyExc_TypeError, "check_records() takes 8 arguments");
        return NULL;
    }
    if (check_fallback == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "check_records() called before setup_checker()");
        return NULL;
    }
    Py_buffer view;
    int have_view = 0;
    int ok = 0;
    int64_t max_ts = -1;
    Py_ssize_t pos = PyLong_AsSsize_t(args[1]);
    Py_ssize_t end = PyLong_AsSsize_t(args[2]);
    Py_ssize_t count = PyLong_AsSsize_t(args[3]);
    int64_t base_ts = PyLong_AsLongLong(args[5]);
    int require_keys = PyObject_IsTrue(args[4]);
    int check_ts = args[6] != Py_None;
    int64_t lo = 0, hi = 0;
    if (PyErr_Occurred() || require_keys < 0)
        goto done;
    if (check_ts) {
        if (!PyTuple_CheckExact(args[6]) || PyTuple_GET_SIZE(args[6]) != 2)
            goto done;
        lo = PyLong_AsLongLong(PyTuple_GET_ITEM(args[6], 0));
        hi = PyLong_AsLongLong(PyTuple_GET_ITEM(args[6], 1));
        if (PyErr_Occurred())
            goto done;
    }
    if (pos < 0 || end < pos || count < 0)
        goto done;
    if (PyObject_GetBuffer(args[0], &view, PyBUF_SIMPLE) < 0)
        goto done;
    have_view = 1;
    const unsigned char *buf = (const unsigned char *)view.buf;
    const Py_ssize_t limit = view.len; /* the Python walk may read up to the buffer's end */
    uint64_t v;
    for (Py_ssize_t i = 0; i < count; i++) {
        if (read_uvarint(buf, limit, &pos, 5, &v) != VARINT_OK)
            goto done;
        int64_t size = zigzag(v);
        if (size < 6 || size > end - pos)
            goto done;
        Py_ssize_t rec_end = pos + (Py_ssize_t)size;
        Py_ssize_t p = pos + 1; /* attributes: unused */
        Py_ssize_t start = p;
        if (read_uvarint(buf, limit, &p, 10, &v) != VARINT_OK || p - start == 10)
            goto done; /* a 10-byte delta may not fit in 64 bits: the Python walk decides */
        int64_t ts;
        if (__builtin_add_overflow(base_ts, zigzag(v), &ts))
            goto done;
        if (ts > max_ts)
            max_ts = ts;
        if (check_ts && (ts < lo || ts > hi) && ts != -1)
            goto done;
        if (read_uvarint(buf, limit, &p, 5, &v) != VARINT_OK || v != ((uint64_t)i << 1))
            goto done;
        /* key, then value: a length, -1 for null */
        for (int field = 0; field < 2; field++) {
            if (read_uvarint(buf, limit, &p, 5, &v) != VARINT_OK)
                goto done;
            int64_t n = zigzag(v);
            if (n >= 0)
                p += (Py_ssize_t)n;
            else if (n != -1 || (field == 0 && require_keys))
                goto done;
        }
        if (read_uvarint(buf, limit, &p, 5, &v) != VARINT_OK)
            goto done;
        int64_t n_headers = zigzag(v);
        if (n_headers < 0)
            goto done;
        for (int64_t h = 0; h < n_headers; h++) {
            if (read_uvarint(buf, limit, &p, 5, &v) != VARINT_OK)
                goto done;
            int64_t n = zigzag(v);
            if (n < 0 || n > limit - p)
                goto done;
            p += (Py_ssize_t)n;
            if (read_uvarint(buf, limit, &p, 5, &v) != VARINT_OK)
                goto done;
            n = zigzag(v);
            if (n >= 0)
                p += (Py_ssize_t)n;
            else if (n != -1)
                goto done;
            if (p > rec_end)
                goto done;
        }
        if (p != rec_end)
            goto done;
        pos = rec_end;
    }
    ok = pos == end;
done:
    if (have_view)
        PyBuffer_Release(&view);
    if (ok)
        return PyLong_FromLongLong(max_ts);
    PyErr_Clear();
    return PyObject_Vectorcall(check_fallback, args, (size_t)nargs, NULL);
}

static PyObject *
speedups_setup_checker(PyObject *module, PyObject *fn)
{
    (void)module;
    if (!PyCallable_Check(fn)) {
        PyErr_SetString(PyExc_TypeError, "setup_checker() needs the Python record walk");
        return NULL;
    }
    Py_INCREF(fn);
    Py_XSETREF(check_fallback, fn);
    Py_RETURN_NONE;
}

/* --- record layout for Arrow (the Spark source, Iceberg translation) ------------------- */

/* Zigzag varint of at most max_bytes at *pp below limit; 0 when absent or too long. */
static inline int
read_zz(const unsigned char *buf, Py_ssize_t limit, Py_ssize_t *pp, int max_bytes, int64_t *out)
{
    uint64_t v;
    if (read_uvarint(buf, limit, pp, max_bytes, &v) != VARINT_OK)
        return 0;
    *out = zigzag(v);
    return 1;
}

typedef struct {
    Py_ssize_t start, stop, count;
    int64_t base_off, base_ts, lat;
    int has_lat;
} layout_batch;

typedef struct {
    Py_ssize_t index, value_end, record_end;
} layout_headers;

/* The walk of record_layout over a pinned buffer: plain C, run without the GIL. 1 when the
 * layout describes every record, 0 when not, -1 when out of memory. Records with headers are
 * appended to *hs (PyMem_Raw memory, the caller frees it). */
static int
layout_walk(const unsigned char *buf, const layout_batch *bs, Py_ssize_t nb, int want_headers, int32_t *pos,
            int64_t *offs, int64_t *tss, Py_ssize_t n, layout_headers **hs, Py_ssize_t *nh)
{
    Py_ssize_t i = 0, cap = 0;
    int32_t last_ve = 0;
    for (Py_ssize_t b = 0; b < nb; b++) {
        const layout_batch *t = &bs[b];
        Py_ssize_t q = t->start, stop = t->stop;
        for (Py_ssize_t r = 0; r < t->count; r++, i++) {
            int64_t size, tsd, od, kl, vl;
            if (!read_zz(buf, stop, &q, 5, &size) || size < 6 || size > stop - q)
                return 0;
            Py_ssize_t rec_end = q + (Py_ssize_t)size;
            Py_ssize_t p = q + 1; /* attributes */
            Py_ssize_t before = p;
            if (!read_zz(buf, rec_end, &p, 9, &tsd) || p - before > 9)
                return 0;
            if (!read_zz(buf, rec_end, &p, 5, &od))
                return 0;
            before = p;
            if (!read_zz(buf, rec_end, &p, 5, &kl) || kl < -1 || (kl == -1 && p - before != 1))
                return 0;
            Py_ssize_t ks = p, ke = p + (kl > 0 ? (Py_ssize_t)kl : 0);
            if (ke > rec_end)
                return 0;
            p = ke;
            before = p;
            if (!read_zz(buf, rec_end, &p, 5, &vl) || vl < -1 || (vl == -1 && p - before != 1))
                return 0;
            Py_ssize_t vs = p, ve = p + (vl > 0 ? (Py_ssize_t)vl : 0);
            if (ve >= rec_end)
                return 0; /* the header count must follow */
            if (buf[ve] == 0) {
                if (ve + 1 != rec_end)
                    return 0;
            } else if (want_headers) {
                if (*nh == cap) {
                    cap = cap ? 2 * cap : 64;
                    layout_headers *grown = PyMem_RawRealloc(*hs, (size_t)cap * sizeof(layout_headers));
                    if (grown == NULL)
                        return -1;
                    *hs = grown;
                }
                (*hs)[(*nh)++] = (layout_headers){i, ve, rec_end};
            }
            pos[4 * i] = (int32_t)ks;
            pos[4 * i + 1] = (int32_t)ke;
            pos[4 * i + 2] = (int32_t)vs;
            pos[4 * i + 3] = last_ve = (int32_t)ve;
            if (__builtin_add_overflow(t->base_off, od, &offs[i]))
                return 0;
            if (!t->has_lat) {
                if (__builtin_add_overflow(t->base_ts, tsd, &tss[i]))
                    return 0;
            } else {
                tss[i] = t->lat;
            }
            q = rec_end;
        }
        if (q != stop)
            return 0;
    }
    pos[4 * n] = last_ve;
    return 1;
}

/* record_span(data, pos, stop, first, last) -> (start, end) | None
 *
 * For records.cut_batch: where records first..last (indexes in the batch) lie among the
 * records laid out from pos to stop, reading only their length varints. None when the
 * records do not frame (the caller then leaves the batch whole). */
static PyObject *
speedups_record_span(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    (void)module;
    if (nargs != 5) {
        PyErr_SetString(PyExc_TypeError, "record_span(data, pos, stop, first, last) takes 5 arguments");
        return NULL;
    }
    Py_ssize_t pos = PyLong_AsSsize_t(args[1]);
    Py_ssize_t stop = PyLong_AsSsize_t(args[2]);
    Py_ssize_t first = PyLong_AsSsize_t(args[3]);
    Py_ssize_t last = PyLong_AsSsize_t(args[4]);
    if (PyErr_Occurred())
        return NULL;
    Py_buffer view;
    if (PyObject_GetBuffer(args[0], &view, PyBUF_SIMPLE) < 0)
        return NULL;
    const unsigned char *buf = (const unsigned char *)view.buf;
    Py_ssize_t start = -1;
    int ok = pos >= 0 && stop <= view.len && first >= 0 && first <= last;
    uint64_t v;
    for (Py_ssize_t i = 0; ok && i <= last; i++) {
        if (i == first)
            start = pos;
        if (read_uvarint(buf, stop, &pos, 5, &v) != VARINT_OK) {
            ok = 0;
            break;
        }
        int64_t size = zigzag(v);
        if (size < 0 || size > stop - pos)
            ok = 0;
        else
            pos += (Py_ssize_t)size;
    }
    PyBuffer_Release(&view);
    if (!ok)
        Py_RETURN_NONE;
    return Py_BuildValue("(nn)", start, pos);
}

/* rebase_records(data, pos, stop, count, offset_shift, timestamp_shift) -> bytes | None
 *
 * For records.join_batches: the count records laid out from pos to stop with their offset
 * and timestamp deltas raised by the shifts (their batch joins an earlier one), lengths
 * rewritten, the rest copied. None when the records do not frame or the new deltas leave
 * their range (the caller then leaves the batches apart). */
static PyObject *
speedups_rebase_records(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    (void)module;
    if (nargs != 6) {
        PyErr_SetString(PyExc_TypeError,
                        "rebase_records(data, pos, stop, count, offset_shift, timestamp_shift) takes 6 arguments");
        return NULL;
    }
    Py_ssize_t pos = PyLong_AsSsize_t(args[1]);
    Py_ssize_t stop = PyLong_AsSsize_t(args[2]);
    Py_ssize_t count = PyLong_AsSsize_t(args[3]);
    long long d_off = PyLong_AsLongLong(args[4]);
    long long d_ts = PyLong_AsLongLong(args[5]);
    if (PyErr_Occurred())
        return NULL;
    Py_buffer view;
    if (PyObject_GetBuffer(args[0], &view, PyBUF_SIMPLE) < 0)
        return NULL;
    const unsigned char *buf = (const unsigned char *)view.buf;
    PyObject *out = NULL;
    int ok = pos >= 0 && stop <= view.len && pos <= stop && count >= 0 && d_off >= 0;
    /* A record grows by at most 9 bytes a delta and 4 its length (all three stay in range). */
    if (ok)
        out = PyBytes_FromStringAndSize(NULL, (stop - pos) + count * 32);
    if (out == NULL) {
        PyBuffer_Release(&view);
        if (ok)
            return NULL;
        Py_RETURN_NONE;
    }
    unsigned char *w = (unsigned char *)PyBytes_AS_STRING(out);
    int64_t size, ts_delta, off_delta;
    for (Py_ssize_t i = 0; ok && i < count; i++) {
        Py_ssize_t p = pos;
        if (!read_zz(buf, stop, &p, 5, &size) || size < 2 || size > stop - p) {
            ok = 0;
            break;
        }
        Py_ssize_t end = p + (Py_ssize_t)size, q = p + 1; /* past the attributes byte */
        if (!read_zz(buf, end, &q, 9, &ts_delta) || !read_zz(buf, end, &q, 5, &off_delta)
                || __builtin_add_overflow(ts_delta, (int64_t)d_ts, &ts_delta)
                || __builtin_add_overflow(off_delta, (int64_t)d_off, &off_delta) || off_delta > INT32_MAX) {
            ok = 0;
            break;
        }
        uint64_t ts_zz = zz64(ts_delta), off_zz = zz64(off_delta);
        Py_ssize_t body = 1 + uvarint_len(ts_zz) + uvarint_len(off_zz) + (end - q);
        if (body > INT32_MAX) {
            ok = 0;
            break;
        }
        w = put_uvarint(w, zz64(body));
        *w++ = buf[p];
        w = put_uvarint(w, ts_zz);
        w = put_uvarint(w, off_zz);
        w = put_bytes(w, (const char *)buf + q, end - q);
        pos = end;
    }
    ok = ok && pos == stop;
    PyBuffer_Release(&view);
    if (!ok) {
        Py_DECREF(out);
        Py_RETURN_NONE;
    }
    if (_PyBytes_Resize(&out, w - (unsigned char *)PyBytes_AS_STRING(out)) < 0)
        return NULL;
    return out;
}

/* record_layout(data, batches, want_headers) -> (pos, offsets, timestamps, headers) | None
 *
 * For rivulet.arrow.records.Chunk: where each record's key and value lie in ``data`` and each
 * record's offset and timestamp, in one pass. ``batches`` holds (start, stop, count, base
 * offset, base timestamp, contiguous, log append time or None) per batch. ``pos`` is int32
 * [key start, key end, value start, value end] per record plus the last value end; offsets and
 * timestamps are int64; ``headers`` lists (record index, value end, record end) of records
 * with headers, when asked. None for anything the vectorized layout does not describe
 * (malformed records, varints it would not read, a null written in more than one byte): the
 * caller's other paths then decide, and report errors. The walk itself runs without the GIL
 * (the buffer is pinned by its export, the outputs are new objects no one else sees), so
 * that a thread translating records leaves the interpreter to the broker's event loop. */
static PyObject *
speedups_record_layout(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    (void)module;
    if (nargs != 3) {
        PyErr_SetString(PyExc_TypeError, "record_layout(data, batches, want_headers) takes 3 arguments");
        return NULL;
    }
    if (!PyList_Check(args[1])) {
        PyErr_SetString(PyExc_TypeError, "record_layout() needs a list of batches");
        return NULL;
    }
    int want_headers = PyObject_IsTrue(args[2]);
    if (want_headers < 0)
        return NULL;
    Py_buffer view;
    if (PyObject_GetBuffer(args[0], &view, PyBUF_SIMPLE) < 0)
        return NULL;
    const unsigned char *buf = (const unsigned char *)view.buf;
    const Py_ssize_t len = view.len;
    PyObject *batches = args[1];
    Py_ssize_t nb = PyList_GET_SIZE(batches);
    PyObject *pos_b = NULL, *off_b = NULL, *ts_b = NULL, *headers = NULL, *result = NULL;
    layout_batch *bs = NULL;
    layout_headers *hs = NULL;
    Py_ssize_t nh = 0;
    int ok = 0;
    bs = PyMem_Malloc((size_t)(nb ? nb : 1) * sizeof(layout_batch));
    if (bs == NULL) {
        PyErr_NoMemory();
        goto fail;
    }
    /* the batches' facts, read while the GIL is held; the records counted */
    Py_ssize_t n = 0;
    for (Py_ssize_t b = 0; b < nb; b++) {
        PyObject *t = PyList_GET_ITEM(batches, b);
        if (!PyTuple_Check(t) || PyTuple_GET_SIZE(t) != 7)
            goto done;
        layout_batch *lb = &bs[b];
        lb->start = PyLong_AsSsize_t(PyTuple_GET_ITEM(t, 0));
        lb->stop = PyLong_AsSsize_t(PyTuple_GET_ITEM(t, 1));
        lb->count = PyLong_AsSsize_t(PyTuple_GET_ITEM(t, 2));
        lb->base_off = PyLong_AsLongLong(PyTuple_GET_ITEM(t, 3));
        lb->base_ts = PyLong_AsLongLong(PyTuple_GET_ITEM(t, 4));
        PyObject *lat_o = PyTuple_GET_ITEM(t, 6);
        lb->has_lat = lat_o != Py_None;
        lb->lat = lb->has_lat ? PyLong_AsLongLong(lat_o) : 0;
        if (PyErr_Occurred() || lb->start < 0 || lb->stop > len || lb->start > lb->stop)
            goto done;
        if (lb->count < 0 || lb->count > (PY_SSIZE_T_MAX / 16) - n)
            goto done;
        n += lb->count;
    }
    if (n == 0 || len > 0x7FFFFFFF)
        goto done;
    pos_b = PyBytes_FromStringAndSize(NULL, (4 * n + 1) * 4);
    off_b = PyBytes_FromStringAndSize(NULL, n * 8);
    ts_b = PyBytes_FromStringAndSize(NULL, n * 8);
    if (pos_b == NULL || off_b == NULL || ts_b == NULL)
        goto fail;
    int32_t *pos = (int32_t *)PyBytes_AS_STRING(pos_b);
    int64_t *offs = (int64_t *)PyBytes_AS_STRING(off_b);
    int64_t *tss = (int64_t *)PyBytes_AS_STRING(ts_b);
    int walked;
    Py_BEGIN_ALLOW_THREADS
    walked = layout_walk(buf, bs, nb, want_headers, pos, offs, tss, n, &hs, &nh);
    Py_END_ALLOW_THREADS
    if (walked < 0) {
        PyErr_NoMemory();
        goto fail;
    }
    if (walked == 0)
        goto done;
    headers = PyList_New(nh);
    if (headers == NULL)
        goto fail;
    for (Py_ssize_t h = 0; h < nh; h++) {
        PyObject *item = Py_BuildValue("(nnn)", hs[h].index, hs[h].value_end, hs[h].record_end);
        if (item == NULL)
            goto fail;
        PyList_SET_ITEM(headers, h, item);
    }
    ok = 1;
done:
    PyErr_Clear();
    if (ok)
        result = PyTuple_Pack(4, pos_b, off_b, ts_b, headers);
    else {
        result = Py_None;
        Py_INCREF(result);
    }
fail:
    PyBuffer_Release(&view);
    PyMem_Free(bs);
    PyMem_RawFree(hs);
    Py_XDECREF(pos_b);
    Py_XDECREF(off_b);
    Py_XDECREF(ts_b);
    Py_XDECREF(headers);
    return result;
}

/* replica_manager.FetchResult, bound by setup_fetch_read: read_caught_up makes them and
 * encode_fetch_partitions writes them. When it is a plain __slots__ class (dataclass
 * slots=True) its fields, in this order, are read and written at their slots' offsets. */
static PyObject *fetch_result_type = NULL;
#define N_RESULT_FIELDS 9
enum { RF_ERROR, RF_HW, RF_LSO, RF_LOG_START, RF_RECORDS, RF_ABORTED, RF_POSITION, RF_DIVERGING, RF_PREFERRED };
static Py_ssize_t result_offsets[N_RESULT_FIELDS];
static int fast_result = 0;

/* --- Fetch response partitions --------------------------------------------------------- */

/* encode_fetch_partitions(out, version, indexes, entries, other) writes a Fetch response
 * topic's ``partitions`` array (its length, then each PartitionData) as the generated writer
 * of rivulet.protocol.messages.fetch_response does, byte for byte, without a PartitionData
 * per partition: each entry is the replica manager's result for the partition at the same
 * place of ``indexes`` (its error, high_watermark, last_stable_offset, log_start_offset,
 * aborted_transactions, diverging_epoch, preferred_read_replica and records attributes),
 * or, for the few answers the handler builds itself, a PartitionData, which ``other`` (its
 * writer at this version) writes. rivulet.protocol.fetch_answer is the reference and binds
 * the OutBuf type and its chunk threshold with setup_fetch(OutBuf, CHUNK_MIN, PartitionData). */

static PyObject *outbuf_type = NULL;
static PyObject *partition_data_type = NULL;
static Py_ssize_t chunk_min = 0;
static PyObject *fetch_names[8];
enum { FN_ERROR, FN_HW, FN_LSO, FN_LOG_START, FN_ABORTED, FN_DIVERGING, FN_PREFERRED, FN_RECORDS };

static int
fb_put(PyObject *out, const void *src, Py_ssize_t n)
{
    Py_ssize_t old = PyByteArray_GET_SIZE(out);
    if (PyByteArray_Resize(out, old + n) < 0)
        return -1;
    memcpy(PyByteArray_AS_STRING(out) + old, src, (size_t)n);
    return 0;
}

static inline char *
fb_be32(char *p, uint32_t v)
{
    p[0] = (char)(v >> 24); p[1] = (char)(v >> 16); p[2] = (char)(v >> 8); p[3] = (char)v;
    return p + 4;
}

static inline char *
fb_be64(char *p, uint64_t v)
{
    p = fb_be32(p, (uint32_t)(v >> 32));
    return fb_be32(p, (uint32_t)v);
}

static inline char *
fb_uvarint(char *p, uint64_t v)
{
    while (v > 0x7F) {
        *p++ = (char)((v & 0x7F) | 0x80);
        v >>= 7;
    }
    *p++ = (char)v;
    return p;
}

/* A result's attribute (a new reference): from its slot when it is a FetchResult. */
static PyObject *
fb_get(PyObject *obj, int name)
{
    static const int field_of[8] = {RF_ERROR, RF_HW, RF_LSO, RF_LOG_START, RF_ABORTED, RF_DIVERGING,
                                    RF_PREFERRED, RF_RECORDS};
    if (fast_result && (PyObject *)Py_TYPE(obj) == fetch_result_type) {
        PyObject *v = *(PyObject **)((char *)obj + result_offsets[field_of[name]]);
        if (v != NULL)
            return Py_NewRef(v);
    }
    return PyObject_GetAttr(obj, fetch_names[name]);
}

/* An attribute as a C integer; -1 with an exception set on failure (checked by the caller). */
static int
fb_attr_ll(PyObject *obj, int name, long long *value)
{
    PyObject *v = fb_get(obj, name);
    if (v == NULL)
        return -1;
    *value = PyLong_AsLongLong(v);
    Py_DECREF(v);
    return (*value == -1 && PyErr_Occurred()) ? -1 : 0;
}

/* An array's length: compact (uvarint of n + 1, 0 for null) or int32 (-1 for null). */
static char *
fb_array_len(char *p, int flex, Py_ssize_t n)
{
    if (flex)
        return fb_uvarint(p, n < 0 ? 0 : (uint64_t)n + 1);
    return fb_be32(p, n < 0 ? 0xFFFFFFFFu : (uint32_t)n);
}

static int
fb_write_result(PyObject *out, int version, int flex, long long index, PyObject *r)
{
    char head[64], *p = head;
    long long error, hw, lso, log_start, preferred = -1;
    if (fb_attr_ll(r, FN_ERROR, &error) < 0 || fb_attr_ll(r, FN_HW, &hw) < 0
        || fb_attr_ll(r, FN_LSO, &lso) < 0 || fb_attr_ll(r, FN_LOG_START, &log_start) < 0)
        return -1;
    p = fb_be32(p, (uint32_t)index);
    *p++ = (char)(error >> 8); *p++ = (char)error;
    p = fb_be64(p, (uint64_t)hw);
    if (version >= 4)
        p = fb_be64(p, (uint64_t)lso);
    if (version >= 5)
        p = fb_be64(p, (uint64_t)log_start);
    if (version >= 4) {
        PyObject *aborted = fb_get(r, FN_ABORTED);
        if (aborted == NULL)
            return -1;
        if (aborted == Py_None) {
            p = fb_array_len(p, flex, -1);
            Py_DECREF(aborted);
        }
        else {
            PyObject *seq = PySequence_Fast(aborted, "aborted_transactions must be a sequence");
            Py_DECREF(aborted);
            if (seq == NULL)
                return -1;
            Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
            p = fb_array_len(p, flex, n);
            if (fb_put(out, head, p - head) < 0) {
                Py_DECREF(seq);
                return -1;
            }
            p = head;
            for (Py_ssize_t i = 0; i < n; i++) {
                long long pid, first;
                PyObject *t = PySequence_Fast_GET_ITEM(seq, i);
                if (!PyArg_ParseTuple(t, "LL", &pid, &first)) {
                    Py_DECREF(seq);
                    return -1;
                }
                char item[17], *q = fb_be64(item, (uint64_t)pid);
                q = fb_be64(q, (uint64_t)first);
                if (flex)
                    *q++ = 0;
                if (fb_put(out, item, q - item) < 0) {
                    Py_DECREF(seq);
                    return -1;
                }
            }
            Py_DECREF(seq);
        }
    }
    if (version >= 11) {
        if (fb_attr_ll(r, FN_PREFERRED, &preferred) < 0)
            return -1;
        p = fb_be32(p, (uint32_t)preferred);
    }
    PyObject *records = fb_get(r, FN_RECORDS);
    if (records == NULL)
        return -1;
    Py_ssize_t size = records == Py_None ? 0 : PyObject_Size(records);
    if (size < 0) {
        Py_DECREF(records);
        return -1;
    }
    p = flex ? fb_uvarint(p, (uint64_t)size + 1) : fb_be32(p, (uint32_t)size);
    int rc = fb_put(out, head, p - head);
    if (rc == 0 && size > 0) {
        if (size >= chunk_min && (PyObject *)Py_TYPE(out) == outbuf_type) {
            /* Large record sets travel as their own buffer, as the generated writer does. */
            PyObject *chunks = PyObject_GetAttrString(out, "chunks");
            PyObject *pair = chunks == NULL ? NULL
                : Py_BuildValue("(nO)", PyByteArray_GET_SIZE(out), records);
            rc = (pair == NULL || PyList_Append(chunks, pair) < 0) ? -1 : 0;
            Py_XDECREF(pair);
            Py_XDECREF(chunks);
        }
        else {
            Py_buffer view;
            rc = PyObject_GetBuffer(records, &view, PyBUF_SIMPLE);
            if (rc == 0) {
                rc = fb_put(out, view.buf, view.len);
                PyBuffer_Release(&view);
            }
        }
    }
    Py_DECREF(records);
    if (rc < 0 || !flex)
        return rc;
    /* Tagged fields: only diverging_epoch (tag 0) comes from a result; current_leader and
     * snapshot_id are never set on one (the handler writes those answers as PartitionData). */
    PyObject *div = fb_get(r, FN_DIVERGING);
    if (div == NULL)
        return -1;
    char tags[32], *t = tags;
    if (div == Py_None) {
        *t++ = 0;
    }
    else {
        int epoch;
        long long end_offset;
        if (!PyArg_ParseTuple(div, "iL", &epoch, &end_offset)) {
            Py_DECREF(div);
            return -1;
        }
        if (epoch == -1 && end_offset == -1) {
            *t++ = 0;  /* the default: not written, as the generated writer compares */
        }
        else {
            *t++ = 1; *t++ = 0; *t++ = 13;
            t = fb_be32(t, (uint32_t)epoch);
            t = fb_be64(t, (uint64_t)end_offset);
            *t++ = 0;
        }
    }
    Py_DECREF(div);
    return fb_put(out, tags, t - tags);
}

static PyObject *
speedups_encode_fetch_partitions(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 5) {
        PyErr_SetString(PyExc_TypeError, "encode_fetch_partitions takes 5 arguments");
        return NULL;
    }
    PyObject *out = args[0], *indexes = args[2], *entries = args[3], *other = args[4];
    int version = PyLong_AsLong(args[1]);
    if (version == -1 && PyErr_Occurred())
        return NULL;
    if (outbuf_type == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "setup_fetch() was not called");
        return NULL;
    }
    if (!PyByteArray_Check(out) || !PyList_Check(indexes) || !PyList_Check(entries)
        || PyList_GET_SIZE(indexes) != PyList_GET_SIZE(entries)) {
        PyErr_SetString(PyExc_TypeError, "encode_fetch_partitions(bytearray, int, list, list of the same length, writer)");
        return NULL;
    }
    int flex = version >= 12;
    Py_ssize_t n = PyList_GET_SIZE(entries);
    char len[8];
    if (fb_put(out, len, fb_array_len(len, flex, n) - len) < 0)
        return NULL;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *e = PyList_GET_ITEM(entries, i);
        if ((PyObject *)Py_TYPE(e) == partition_data_type) {
            PyObject *res = PyObject_CallFunctionObjArgs(other, e, out, NULL);
            if (res == NULL)
                return NULL;
            Py_DECREF(res);
            continue;
        }
        long long index = PyLong_AsLongLong(PyList_GET_ITEM(indexes, i));
        if (index == -1 && PyErr_Occurred())
            return NULL;
        if (fb_write_result(out, version, flex, index, e) < 0)
            return NULL;
    }
    Py_RETURN_NONE;
}

static PyObject *
speedups_setup_fetch(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    static const char *names[8] = {"error", "high_watermark", "last_stable_offset", "log_start_offset",
                                   "aborted_transactions", "diverging_epoch", "preferred_read_replica", "records"};
    if (nargs != 3) {
        PyErr_SetString(PyExc_TypeError, "setup_fetch(OutBuf, CHUNK_MIN, PartitionData)");
        return NULL;
    }
    Py_ssize_t threshold = PyLong_AsSsize_t(args[1]);
    if (threshold == -1 && PyErr_Occurred())
        return NULL;
    for (int i = 0; i < 8; i++) {
        if (fetch_names[i] == NULL && (fetch_names[i] = PyUnicode_InternFromString(names[i])) == NULL)
            return NULL;
    }
    Py_INCREF(args[0]);
    Py_XSETREF(outbuf_type, args[0]);
    Py_INCREF(args[2]);
    Py_XSETREF(partition_data_type, args[2]);
    chunk_min = threshold;
    Py_RETURN_NONE;
}

/* fetch_wanted's (below) types and names, bound by setup_fetch_read. */
static PyObject *topic_partition_type = NULL;  /* rivulet.common.types.TopicPartition */
enum { WN_PARTITION, WN_FETCH_OFFSET, WN_MAX_BYTES, WN_LEADER_EPOCH, WN_LOG_START, WN_LAST_EPOCH, WN_COUNT };
static PyObject *wanted_names[WN_COUNT];   /* the request struct's fields */
static PyObject *request_names[WN_COUNT];  /* FetchRequestPartition's fields, in its order */
static Py_ssize_t wanted_offsets[WN_COUNT];
static int fast_wanted = 0;
static const char *const wanted_name_strs[WN_COUNT] = {
    "partition", "fetch_offset", "partition_max_bytes", "current_leader_epoch", "log_start_offset",
    "last_fetched_epoch"};
static const char *const request_name_strs[WN_COUNT] = {
    "tp", "fetch_offset", "max_bytes", "current_leader_epoch", "log_start_offset", "last_fetched_epoch"};

/* --- a consumer fetch's caught-up partitions ---------------------------------------------- */

/* read_caught_up(fps, partitions, results, fetch_only_leader, read_committed, read) fills
 * ``results`` for a consumer's Fetch as rivulet.replication.replica_manager's read loop does
 * (``results[fp.tp] = read(fp)`` for each FetchRequestPartition, in order; that loop is the
 * reference), answering itself the partitions with nothing to read: a partition this broker
 * has and leads (when ``fetch_only_leader``) at the epoch asked, whose log is open, holds no
 * undecided transaction (so its LSO is its HW) and whose fetch offset is in range and at or
 * past the HW. Its result is FetchResult(NO_ERROR, hw, hw, log start) with the records and
 * position of the log's shared empty read (NOTHING_READ), and an empty aborted list when
 * read_committed. Any other partition, or anything unexpected about one, goes to ``read``.
 * A full fetch of a thousand partitions of which a few have records spends most of its
 * time here. Of the Log it reads only its public LogState (``log.state``: hw, leo, log_start,
 * closed, offline; rivulet.storage.log documents it as this walk's view) and its producer
 * state's transaction dicts: the differential test in tests/unit/test_fetch_caught_up.py
 * compares both walks over every kind of partition. */

static PyObject *no_error = NULL;            /* ErrorCode.NONE */
static PyObject *nothing_records = NULL;     /* NOTHING_READ.records */
static PyObject *nothing_position = NULL;    /* NOTHING_READ.fetch_offset_metadata */
static PyObject *no_args = NULL;             /* () for FetchResult's tp_new */
static PyObject *request_partition_type = NULL;  /* replica_manager.FetchRequestPartition */
/* Where FetchRequestPartition's fields (RN_TP, RN_FETCH_OFFSET, RN_LEADER_EPOCH_ASKED) lie,
 * when it is a plain __slots__ class: read there directly, else through getattr. */
static Py_ssize_t request_offsets[3];
static int fast_request = 0;
enum {
    RN_TP, RN_FETCH_OFFSET, RN_LEADER_EPOCH_ASKED, RN_DELETED, RN_LEADER_EPOCH, RN_IS_LEADER, RN_LOG,
    RN_STATE, RN_CLOSED, RN_OFFLINE, RN_HW, RN_LEO, RN_LOG_START, RN_PRODUCER_STATE, RN_ONGOING, RN_UNREPLICATED,
    RN_ERROR, RN_HIGH_WATERMARK, RN_LSO, RN_LOG_START_OFFSET, RN_RECORDS, RN_ABORTED, RN_POSITION,
    RN_DIVERGING, RN_PREFERRED, RN_COUNT
};
static PyObject *read_names[RN_COUNT];
/* rivulet.storage.log.LogState and where its five fields (RN_CLOSED .. RN_LOG_START) lie:
 * read there directly when it is a plain __slots__ class, else through getattr. */
#define N_STATE_FIELDS 5
static PyObject *log_state_type = NULL;
static Py_ssize_t state_offsets[N_STATE_FIELDS];
static int fast_state = 0;
static const char *const read_name_strs[RN_COUNT] = {
    "tp", "fetch_offset", "current_leader_epoch", "deleted", "leader_epoch", "is_leader", "log",
    "state", "closed", "offline", "hw", "leo", "log_start", "producer_state", "ongoing_txns", "unreplicated_txns",
    "error", "high_watermark", "last_stable_offset", "log_start_offset", "records", "aborted_transactions",
    "fetch_offset_metadata", "diverging_epoch", "preferred_read_replica",
};

/* obj.<name> (a new reference), from its slot when obj is a FetchRequestPartition or a
 * LogState. */
static PyObject *
rd_get(PyObject *obj, int name)
{
    if (fast_request && name <= RN_LEADER_EPOCH_ASKED && (PyObject *)Py_TYPE(obj) == request_partition_type) {
        PyObject *v = *(PyObject **)((char *)obj + request_offsets[name]);
        if (v != NULL)
            return Py_NewRef(v);
    }
    if (fast_state && name >= RN_CLOSED && name <= RN_LOG_START && (PyObject *)Py_TYPE(obj) == log_state_type) {
        PyObject *v = *(PyObject **)((char *)obj + state_offsets[name - RN_CLOSED]);
        if (v != NULL)
            return Py_NewRef(v);
    }
    return PyObject_GetAttr(obj, read_names[name]);
}

/* obj.<name> as a C integer: 1 when read, 0 when not an int that fits (the caller hands the
 * partition to the Python read), -1 with an exception. */
static int
rd_ll(PyObject *obj, int name, long long *value)
{
    PyObject *v = rd_get(obj, name);
    if (v == NULL)
        return -1;
    int ok = PyLong_CheckExact(v);
    if (ok) {
        int overflow;
        *value = PyLong_AsLongLongAndOverflow(v, &overflow);
        ok = overflow == 0 && !(*value == -1 && PyErr_Occurred());
    }
    Py_DECREF(v);
    return PyErr_Occurred() ? -1 : ok;
}

/* Whether obj.<name> is true: 1, 0, or -1 with an exception. */
static int
rd_true(PyObject *obj, int name)
{
    PyObject *v = rd_get(obj, name);
    if (v == NULL)
        return -1;
    int t = PyObject_IsTrue(v);
    Py_DECREF(v);
    return t;
}

/* Whether partition ``p`` is caught up for ``fp``: 1 (with its HW and log start), 0, or -1 with
 * an exception. Caught up: this broker has it and leads it (when ``fetch_only_leader``) at the
 * epoch asked, its log is open, holds no undecided transaction (so its LSO is its HW), and the
 * fetch offset is in range and at or past the HW (``exact``: at the HW). */
static int
caught_up_state(PyObject *fp, PyObject *p, int fetch_only_leader, int exact, long long *hw, long long *start)
{
    long long asked, epoch, fetch_offset, leo;
    int r, t;
    if ((t = rd_true(p, RN_DELETED)) != 0)
        return t < 0 ? -1 : 0;
    if ((r = rd_ll(fp, RN_LEADER_EPOCH_ASKED, &asked)) <= 0)
        return r;
    if (asked >= 0) {
        if ((r = rd_ll(p, RN_LEADER_EPOCH, &epoch)) <= 0)
            return r;
        if (asked != epoch)
            return 0;  /* fenced or unknown epoch: the read answers the error */
    }
    if (fetch_only_leader && (t = rd_true(p, RN_IS_LEADER)) != 1)
        return t < 0 ? -1 : 0;
    PyObject *lg = PyObject_GetAttr(p, read_names[RN_LOG]);
    if (lg == NULL)
        return -1;
    PyObject *ps = NULL;
    PyObject *st = PyObject_GetAttr(lg, read_names[RN_STATE]);  /* the Log's LogState */
    if (st == NULL) {
        Py_DECREF(lg);
        return -1;
    }
    if ((t = rd_true(st, RN_CLOSED)) != 0 || (t = rd_true(st, RN_OFFLINE)) != 0) {
        t = t < 0 ? -1 : 0;
        goto done;
    }
    if ((t = rd_ll(st, RN_HW, hw)) <= 0 || (t = rd_ll(st, RN_LEO, &leo)) <= 0
        || (t = rd_ll(st, RN_LOG_START, start)) <= 0 || (t = rd_ll(fp, RN_FETCH_OFFSET, &fetch_offset)) <= 0)
        goto done;
    /* Out of range, or something to read below the HW (which is also the LSO, checked next). */
    t = 0;
    if (fetch_offset > leo || fetch_offset < *start || fetch_offset < (*hw < leo ? *hw : leo)
        || (exact && fetch_offset != *hw))
        goto done;
    if ((ps = PyObject_GetAttr(lg, read_names[RN_PRODUCER_STATE])) == NULL) {
        t = -1;
        goto done;
    }
    if ((t = rd_true(ps, RN_ONGOING)) != 0 || (t = rd_true(ps, RN_UNREPLICATED)) != 0) {
        t = t < 0 ? -1 : 0;  /* an undecided transaction may hold the LSO below the HW */
        goto done;
    }
    t = 1;
done:
    Py_XDECREF(ps);
    Py_DECREF(st);
    Py_DECREF(lg);
    return t;
}

/* The result of a caught-up partition (new reference), Py_None (borrowed: hand it to the
 * Python read) or NULL with an exception. */
static PyObject *
caught_up_result(PyObject *fp, PyObject *p, int fetch_only_leader, int read_committed)
{
    long long hw, start;
    int t = caught_up_state(fp, p, fetch_only_leader, 0, &hw, &start);
    if (t <= 0)
        return t < 0 ? NULL : Py_None;
    PyTypeObject *rt = (PyTypeObject *)fetch_result_type;
    PyObject *res = fast_result ? rt->tp_alloc(rt, 0) : rt->tp_new(rt, no_args, NULL);
    if (res == NULL)
        return NULL;
    PyObject *hw_obj = PyLong_FromLongLong(hw), *start_obj = PyLong_FromLongLong(start), *minus_one = PyLong_FromLong(-1);
    PyObject *aborted = read_committed ? PyList_New(0) : Py_NewRef(Py_None);
    PyObject *values[N_RESULT_FIELDS] = {no_error, hw_obj, hw_obj, start_obj, nothing_records, aborted,
                                         nothing_position, Py_None, minus_one};
    int fail = hw_obj == NULL || start_obj == NULL || minus_one == NULL || aborted == NULL;
    for (int k = 0; !fail && k < N_RESULT_FIELDS; k++) {
        if (fast_result)
            *(PyObject **)((char *)res + result_offsets[k]) = Py_NewRef(values[k]);  /* fresh: all NULL */
        else
            fail = PyObject_SetAttr(res, read_names[RN_ERROR + k], values[k]) < 0;
    }
    Py_XDECREF(hw_obj);
    Py_XDECREF(start_obj);
    Py_XDECREF(minus_one);
    Py_XDECREF(aborted);
    if (fail) {
        Py_DECREF(res);
        return NULL;
    }
    return res;
}

/* skip_caught_up(fps, partitions, i, fetch_only_leader) -> int: the index of the first of the
 * FetchRequestPartitions fps[i:] of a waiting consumer Fetch that is not caught up exactly at
 * its HW (see caught_up_state), len(fps) if none. rivulet.replication.replica_manager's
 * DelayedFetch.try_complete checks those one by one in Python and lets this walk pass over the
 * rest, each of which its own check would pass over too (nothing readable: Kafka's case G with
 * nothing accumulated). Without the Python calls of that check, a thousand partitions each time
 * an append, a HW move or the timer tries the fetch. */
static PyObject *
speedups_skip_caught_up(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 4 || !PyList_Check(args[0]) || !PyDict_Check(args[1])) {
        PyErr_SetString(PyExc_TypeError, "skip_caught_up(list, dict, int, bool)");
        return NULL;
    }
    if (fetch_result_type == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "setup_fetch_read() was not called");
        return NULL;
    }
    PyObject *fps = args[0], *partitions = args[1];
    Py_ssize_t i = PyLong_AsSsize_t(args[2]);
    if (i == -1 && PyErr_Occurred())
        return NULL;
    int fetch_only_leader = PyObject_IsTrue(args[3]);
    if (fetch_only_leader < 0)
        return NULL;
    if (i < 0)
        i = 0;
    for (; i < PyList_GET_SIZE(fps); i++) {
        PyObject *fp = PyList_GET_ITEM(fps, i);
        PyObject *tp = rd_get(fp, RN_TP);
        if (tp == NULL)
            return NULL;
        PyObject *p = PyDict_GetItemWithError(partitions, tp);
        Py_DECREF(tp);
        if (p == NULL) {
            if (PyErr_Occurred())
                return NULL;
            break;
        }
        long long hw, start;
        Py_INCREF(p);
        Py_INCREF(fp);
        int t = caught_up_state(fp, p, fetch_only_leader, 1, &hw, &start);
        Py_DECREF(fp);
        Py_DECREF(p);
        if (t < 0)
            return NULL;
        if (t == 0)
            break;
    }
    return PyLong_FromSsize_t(i);
}

static PyObject *
speedups_read_caught_up(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 6) {
        PyErr_SetString(PyExc_TypeError, "read_caught_up takes 6 arguments");
        return NULL;
    }
    PyObject *fps = args[0], *partitions = args[1], *results = args[2], *read = args[5];
    if (fetch_result_type == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "setup_fetch_read() was not called");
        return NULL;
    }
    if (!PyList_Check(fps) || !PyDict_Check(partitions) || !PyDict_Check(results)) {
        PyErr_SetString(PyExc_TypeError, "read_caught_up(list, dict, dict, bool, bool, read)");
        return NULL;
    }
    int fetch_only_leader = PyObject_IsTrue(args[3]), read_committed = PyObject_IsTrue(args[4]);
    if (fetch_only_leader < 0 || read_committed < 0)
        return NULL;
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(fps); i++) {
        PyObject *fp = PyList_GET_ITEM(fps, i);
        Py_INCREF(fp);  /* ``read`` may change the list */
        PyObject *tp = rd_get(fp, RN_TP), *res = NULL;
        if (tp == NULL) {
            Py_DECREF(fp);
            return NULL;
        }
        PyObject *p = PyDict_GetItemWithError(partitions, tp);
        if (p != NULL) {
            Py_INCREF(p);
            res = caught_up_result(fp, p, fetch_only_leader, read_committed);
            Py_DECREF(p);
            if (res == Py_None)
                res = NULL;
            else if (res == NULL)
                goto fail;
        }
        else if (PyErr_Occurred()) {
            goto fail;
        }
        if (res == NULL && (res = PyObject_CallOneArg(read, fp)) == NULL)
            goto fail;
        int rc = PyDict_SetItem(results, tp, res);
        Py_DECREF(res);
        Py_DECREF(tp);
        Py_DECREF(fp);
        if (rc < 0)
            return NULL;
        continue;
    fail:
        Py_DECREF(tp);
        Py_DECREF(fp);
        return NULL;
    }
    Py_RETURN_NONE;
}

static PyObject *
speedups_setup_fetch_read(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 6 || !PyType_Check(args[0]) || !PyType_Check(args[1]) || !PyType_Check(args[4])
        || !PyType_IsSubtype((PyTypeObject *)args[4], &PyTuple_Type) || !PyType_Check(args[5])) {
        PyErr_SetString(PyExc_TypeError, "setup_fetch_read(FetchResult, FetchRequestPartition, NO_ERROR, "
                                         "NOTHING_READ, TopicPartition, LogState)");
        return NULL;
    }
    for (int i = 0; i < WN_COUNT; i++) {
        if (wanted_names[i] == NULL && (wanted_names[i] = PyUnicode_InternFromString(wanted_name_strs[i])) == NULL)
            return NULL;
        if (request_names[i] == NULL && (request_names[i] = PyUnicode_InternFromString(request_name_strs[i])) == NULL)
            return NULL;
    }
    for (int i = 0; i < RN_COUNT; i++) {
        if (read_names[i] == NULL && (read_names[i] = PyUnicode_InternFromString(read_name_strs[i])) == NULL)
            return NULL;
    }
    PyObject *records = PyObject_GetAttr(args[3], read_names[RN_RECORDS]);
    PyObject *position = records == NULL ? NULL : PyObject_GetAttr(args[3], read_names[RN_POSITION]);
    if (position == NULL) {
        Py_XDECREF(records);
        return NULL;
    }
    if (no_args == NULL && (no_args = PyTuple_New(0)) == NULL) {
        Py_DECREF(records);
        Py_DECREF(position);
        return NULL;
    }
    Py_XSETREF(nothing_records, records);
    Py_XSETREF(nothing_position, position);
    Py_XSETREF(fetch_result_type, Py_NewRef(args[0]));
    Py_XSETREF(request_partition_type, Py_NewRef(args[1]));
    Py_XSETREF(no_error, Py_NewRef(args[2]));
    fast_result = probe_slots(args[0], read_names + RN_ERROR, N_RESULT_FIELDS, result_offsets);
    fast_request = probe_slots(args[1], read_names, 3, request_offsets);
    /* tp_alloc fills a FetchRequestPartition only when its slots are all there is to it. */
    fast_wanted = probe_slots(args[1], request_names, WN_COUNT, wanted_offsets)
        && ((PyTypeObject *)args[1])->tp_basicsize == (Py_ssize_t)(sizeof(PyObject) + WN_COUNT * sizeof(PyObject *));
    Py_XSETREF(topic_partition_type, Py_NewRef(args[4]));
    Py_XSETREF(log_state_type, Py_NewRef(args[5]));
    fast_state = probe_slots(args[5], read_names + RN_CLOSED, N_STATE_FIELDS, state_offsets);
    Py_RETURN_NONE;
}

/* fetch_wanted(parts, name, version, wanted) -> list[TopicPartition]: a Fetch request topic's
 * partitions (FetchPartition structs) as rivulet.server.handlers.records._py_fetch_wanted
 * makes them (the reference): a TopicPartition(name, partition) each, returned in order, and
 * a FetchRequestPartition each appended to ``wanted``, with the fields the version lacks at
 * -1. Without the Python calls a TopicPartition and a FetchRequestPartition cost. */


static PyObject *
speedups_fetch_wanted(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 4) {
        PyErr_SetString(PyExc_TypeError, "fetch_wanted takes 4 arguments");
        return NULL;
    }
    PyObject *parts = args[0], *name = args[1], *wanted = args[3];
    long version = PyLong_AsLong(args[2]);
    if (version == -1 && PyErr_Occurred())
        return NULL;
    if (topic_partition_type == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "setup_fetch_read() was not called");
        return NULL;
    }
    if (!PyList_Check(parts) || !PyList_Check(wanted)) {
        PyErr_SetString(PyExc_TypeError, "fetch_wanted(list, str, int, list)");
        return NULL;
    }
    /* Which request fields the version has; the others are -1, as the handler's loop says. */
    const int present[WN_COUNT] = {1, 1, 1, version >= 9, version >= 5, version >= 12};
    PyTypeObject *tpt = (PyTypeObject *)topic_partition_type, *rpt = (PyTypeObject *)request_partition_type;
    Py_ssize_t n = PyList_GET_SIZE(parts);
    PyObject *tps = PyList_New(n), *minus_one = PyLong_FromLong(-1);
    if (tps == NULL || minus_one == NULL)
        goto fail;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *fp = PyList_GET_ITEM(parts, i), *v[WN_COUNT] = {NULL};
        for (int k = 0; k < WN_COUNT; k++) {
            v[k] = present[k] ? PyObject_GetAttr(fp, wanted_names[k]) : Py_NewRef(minus_one);
            if (v[k] == NULL) {
                for (int j = 0; j < k; j++)
                    Py_DECREF(v[j]);
                goto fail;
            }
        }
        /* TopicPartition(name, partition): what tuple.__new__ does for the subclass. */
        PyObject *tp = tpt->tp_alloc(tpt, 2);
        if (tp == NULL) {
            for (int k = 0; k < WN_COUNT; k++)
                Py_DECREF(v[k]);
            goto fail;
        }
        PyTuple_SET_ITEM(tp, 0, Py_NewRef(name));
        PyTuple_SET_ITEM(tp, 1, v[WN_PARTITION]);  /* the reference moves into the tuple */
        PyList_SET_ITEM(tps, i, tp);
        v[WN_PARTITION] = Py_NewRef(tp);  /* FetchRequestPartition's first field is the key */
        PyObject *frp;
        if (fast_wanted) {
            frp = rpt->tp_alloc(rpt, 0);
            if (frp != NULL) {
                for (int k = 0; k < WN_COUNT; k++) {
                    *(PyObject **)((char *)frp + wanted_offsets[k]) = v[k];  /* fresh: all NULL */
                    v[k] = NULL;
                }
            }
        }
        else {
            frp = PyObject_Vectorcall(request_partition_type, v, WN_COUNT, NULL);
        }
        for (int k = 0; k < WN_COUNT; k++)
            Py_XDECREF(v[k]);
        if (frp == NULL)
            goto fail;
        int rc = PyList_Append(wanted, frp);
        Py_DECREF(frp);
        if (rc < 0)
            goto fail;
    }
    Py_DECREF(minus_one);
    return tps;
fail:
    Py_XDECREF(tps);
    Py_XDECREF(minus_one);
    return NULL;
}

/* --- arrays of integer structs (message decoding) ---------------------------------------- */

/* read_int_structs(buf, pos, end, n, cls, codes, names, absent, flex, reader) -> (list, pos)
 * reads ``n`` elements of an array of ``cls`` as rivulet.protocol.schema's compiled reader
 * ``reader`` does, for a struct whose fields at this version are big-endian integers only
 * (``codes``: one of b"bhiq" per field, in order, named by ``names``); ``absent`` holds the
 * (name, value) of the fields the version lacks. An element with tagged fields, or one that
 * would reach past ``end`` or the buffer, is read by ``reader`` from its start, so results and
 * errors stay the Python reader's (schema.py, the reference). A Fetch request names
 * thousands of partitions this way. */
static PyObject *
speedups_read_int_structs(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 10) {
        PyErr_SetString(PyExc_TypeError, "read_int_structs takes 10 arguments");
        return NULL;
    }
    PyObject *bufobj = args[0], *codes = args[5], *names = args[6], *absent = args[7], *reader = args[9];
    PyTypeObject *cls = (PyTypeObject *)args[4];
    Py_ssize_t pos = PyLong_AsSsize_t(args[1]), end = PyLong_AsSsize_t(args[2]), n = PyLong_AsSsize_t(args[3]);
    int flex = PyObject_IsTrue(args[8]);
    if (PyErr_Occurred() || flex < 0)
        return NULL;
    if (!PyType_Check(args[4]) || !PyBytes_Check(codes) || !PyTuple_Check(names) || !PyTuple_Check(absent)
        || PyTuple_GET_SIZE(names) != PyBytes_GET_SIZE(codes) || n < 0 || pos < 0) {
        PyErr_SetString(PyExc_TypeError, "read_int_structs: bad arguments");
        return NULL;
    }
    Py_buffer view;
    if (PyObject_GetBuffer(bufobj, &view, PyBUF_SIMPLE) < 0)
        return NULL;
    const unsigned char *b = (const unsigned char *)view.buf;
    Py_ssize_t limit = end < view.len ? end : view.len;
    const char *code = PyBytes_AS_STRING(codes);
    Py_ssize_t nfields = PyBytes_GET_SIZE(codes), fixed = 0;
    for (Py_ssize_t k = 0; k < nfields; k++)
        fixed += code[k] == 'b' ? 1 : code[k] == 'h' ? 2 : code[k] == 'i' ? 4 : 8;
    PyObject *lst = PyList_New(0), *empty = PyTuple_New(0);
    if (lst == NULL || empty == NULL)
        goto fail;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *e = NULL;
        if (pos + fixed + (flex ? 1 : 0) <= limit && (!flex || b[pos + fixed] == 0)) {
            e = cls->tp_new(cls, empty, NULL);
            if (e == NULL)
                goto fail;
            const unsigned char *p = b + pos;
            for (Py_ssize_t k = 0; k < nfields; k++) {
                long long v;
                switch (code[k]) {
                case 'b': v = (int8_t)p[0]; p += 1; break;
                case 'h': v = (int16_t)(((uint16_t)p[0] << 8) | p[1]); p += 2; break;
                case 'i': v = (int32_t)(((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | p[3]); p += 4; break;
                default: {
                    uint64_t u = 0;
                    for (int j = 0; j < 8; j++)
                        u = (u << 8) | p[j];
                    v = (long long)u;
                    p += 8;
                }
                }
                PyObject *num = PyLong_FromLongLong(v);
                if (num == NULL || PyObject_SetAttr(e, PyTuple_GET_ITEM(names, k), num) < 0) {
                    Py_XDECREF(num);
                    Py_DECREF(e);
                    goto fail;
                }
                Py_DECREF(num);
            }
            for (Py_ssize_t k = 0; k < PyTuple_GET_SIZE(absent); k++) {
                PyObject *pair = PyTuple_GET_ITEM(absent, k);
                if (PyObject_SetAttr(e, PyTuple_GET_ITEM(pair, 0), PyTuple_GET_ITEM(pair, 1)) < 0) {
                    Py_DECREF(e);
                    goto fail;
                }
            }
            pos += fixed + (flex ? 1 : 0);
        }
        else {
            PyObject *pos_obj = PyLong_FromSsize_t(pos);
            PyObject *res = pos_obj == NULL ? NULL
                : PyObject_CallFunctionObjArgs(reader, bufobj, pos_obj, args[2], NULL);
            Py_XDECREF(pos_obj);
            if (res == NULL)
                goto fail;
            if (!PyTuple_Check(res) || PyTuple_GET_SIZE(res) != 2) {
                Py_DECREF(res);
                PyErr_SetString(PyExc_TypeError, "reader must return (element, pos)");
                goto fail;
            }
            e = PyTuple_GET_ITEM(res, 0);
            Py_INCREF(e);
            pos = PyLong_AsSsize_t(PyTuple_GET_ITEM(res, 1));
            Py_DECREF(res);
            if (pos == -1 && PyErr_Occurred()) {
                Py_DECREF(e);
                goto fail;
            }
        }
        int rc = PyList_Append(lst, e);
        Py_DECREF(e);
        if (rc < 0)
            goto fail;
    }
    PyBuffer_Release(&view);
    Py_DECREF(empty);
    PyObject *out = Py_BuildValue("(Nn)", lst, pos);
    return out;
fail:
    PyBuffer_Release(&view);
    Py_XDECREF(empty);
    Py_XDECREF(lst);
    return NULL;
}

/* --- unfilled buffers ------------------------------------------------------------------ */

/* A bytearray of n bytes whose contents are left as the allocator gives them: bytearray(n)
   zero-fills, which for a request frame is a pass over memory the socket reads overwrite
   anyway. Only for buffers every byte of which is written before any is read. */
static PyObject *
speedups_unfilled_bytearray(PyObject *module, PyObject *arg)
{
    (void)module;
    Py_ssize_t n = PyLong_AsSsize_t(arg);
    if (n == -1 && PyErr_Occurred())
        return NULL;
    if (n < 0) {
        PyErr_SetString(PyExc_ValueError, "unfilled_bytearray() needs a size >= 0");
        return NULL;
    }
    return PyByteArray_FromStringAndSize(NULL, n);
}

/* The fetch purgatory's watch lists (rivulet.delayed.purgatory, whose Python loops are the
 * reference): watchers maps a key to a dict {id(operation): operation}. A waiting Fetch of a
 * thousand partitions is watched under a thousand keys. Each insert is mostly a cache miss
 * (a thousand dicts), so this saves only the Python steps: a quarter to a third. */

/* watch_keys(watchers, keys, ident, op) -> None: watchers[key][ident] = op for every key,
 * a new dict for a key not watched yet. */
static PyObject *
speedups_watch_keys(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 4 || !PyDict_CheckExact(args[0])) {
        PyErr_SetString(PyExc_TypeError, "watch_keys(dict, keys, ident, op)");
        return NULL;
    }
    PyObject *watchers = args[0], *ident = args[2], *op = args[3];
    PyObject *keys = PySequence_Fast(args[1], "watch_keys: keys must be a sequence");
    if (keys == NULL)
        return NULL;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(keys);
    PyObject **items = PySequence_Fast_ITEMS(keys);
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *w = PyDict_GetItemWithError(watchers, items[i]);  /* borrowed */
        if (w == NULL) {
            if (PyErr_Occurred() || (w = PyDict_New()) == NULL)
                goto fail;
            int r = PyDict_SetItem(watchers, items[i], w);
            Py_DECREF(w);  /* watchers holds it */
            if (r < 0)
                goto fail;
        }
        else if (!PyDict_CheckExact(w)) {
            PyErr_SetString(PyExc_TypeError, "watch_keys: a watch list is not a dict");
            goto fail;
        }
        if (PyDict_SetItem(w, ident, op) < 0)
            goto fail;
    }
    Py_DECREF(keys);
    Py_RETURN_NONE;
fail:
    Py_DECREF(keys);
    return NULL;
}

/* --- module ---------------------------------------------------------------------------- */

static PyMethodDef speedups_methods[] = {
    {"parse_records", (PyCFunction)(void (*)(void))speedups_parse_records, METH_FASTCALL,
     "parse_records(buf, pos, end, count, base_offset, base_timestamp, log_append_time) -> list[Record]\n\n"
     "C version of rivulet.protocol.records._py_parse_records."},
    {"parse_messages", (PyCFunction)(void (*)(void))speedups_parse_messages, METH_FASTCALL,
     "parse_messages(buf, pos, end, count, base_offset, base_timestamp, log_append_time,\n"
     "               min_offset, topic, partition, timestamp_type, leader_epoch) -> list[Message]\n\n"
     "parse_records() made into the consumer's Messages in one step: the records at or after\n"
     "min_offset, as Message(topic, partition, r.offset, r.key, r.value, r.headers or None,\n"
     "timestamp_type, r.timestamp, None, leader_epoch). Same validation and errors. buf may\n"
     "be any bytes-like object; the result is that of bytes(buf)."},
    {"setup_messages", (PyCFunction)speedups_setup_messages, METH_O,
     "setup_messages(Message) -> bool\n\n"
     "Bind the consumer's Message type; returns whether Messages are built by filling their\n"
     "slots directly (checked against a Message built by the type itself)."},
    {"encode_records", (PyCFunction)(void (*)(void))speedups_encode_records, METH_FASTCALL,
     "encode_records(records, base_timestamp, header) -> bytes | tuple[bytes, int] | None\n\n"
     "The records section of a batch as records.encode_batch writes it: with header (the\n"
     "batch's 61-byte header) the whole uncompressed batch, lengths, maxTimestamp and CRC\n"
     "filled in; with None (records, maxTimestamp). None when the input is off the fast path:\n"
     "the pure-Python encoder then handles it."},
    {"setup_encoder", (PyCFunction)speedups_setup_encoder, METH_O,
     "setup_encoder(crc32c) -> None\n\nBind the CRC-32C function encode_records uses."},
    {"make_record", (PyCFunction)(void (*)(void))speedups_make_record, METH_FASTCALL,
     "make_record(cls, *items) -> cls\n\n"
     "tuple.__new__(cls, items) for a tuple subclass, left untracked by the garbage collector\n"
     "when no item can be part of a reference cycle."},
    {"check_records", (PyCFunction)(void (*)(void))speedups_check_records, METH_FASTCALL,
     "check_records(buf, pos, end, count, require_keys, base_timestamp, timestamp_bounds,\n"
     "              record_errors) -> int\n\n"
     "C version of rivulet.protocol.records._py_check_records for well-formed records; any\n"
     "input the Python walk would reject is handed to it whole."},
    {"setup_checker", (PyCFunction)speedups_setup_checker, METH_O,
     "setup_checker(fn) -> None\n\nBind the Python record walk check_records defers to."},
    {"record_layout", (PyCFunction)(void (*)(void))speedups_record_layout, METH_FASTCALL,
     "record_layout(data, batches, want_headers) -> tuple[bytes, bytes, bytes, list] | None\n\n"
     "Key and value positions, offsets and timestamps of the records of a chunk\n"
     "(rivulet.arrow.records.Chunk), walked without the GIL; None for anything its layout does not describe."},
    {"record_span", (PyCFunction)(void (*)(void))speedups_record_span, METH_FASTCALL,
     "record_span(data, pos, stop, first, last) -> (start, end) | None\n\n"
     "Where records first..last of those laid out from pos to stop lie (length varints only)."},
    {"rebase_records", (PyCFunction)(void (*)(void))speedups_rebase_records, METH_FASTCALL,
     "rebase_records(data, pos, stop, count, offset_shift, timestamp_shift) -> bytes | None\n\n"
     "The records laid out from pos to stop with their offset and timestamp deltas raised (records.join_batches)."},
    {"unfilled_bytearray", (PyCFunction)speedups_unfilled_bytearray, METH_O,
     "unfilled_bytearray(n) -> bytearray\n\n"
     "A bytearray of n bytes left unset (bytearray(n) zero-fills): for a buffer whose every byte\n"
     "is written before any is read."},
    {"murmur2", (PyCFunction)speedups_murmur2, METH_O,
     "murmur2(data: bytes) -> int\n\nKafka's murmur2 hash (Java's Utils.murmur2), a signed 32-bit int."},
    {"encode_fetch_partitions", (PyCFunction)(void (*)(void))speedups_encode_fetch_partitions, METH_FASTCALL,
     "encode_fetch_partitions(out, version, indexes, entries, other) -> None\n\n"
     "A Fetch response topic's partitions array written from the replica manager's results\n"
     "(rivulet.protocol.fetch_answer is the reference); PartitionData entries go to other."},
    {"setup_fetch", (PyCFunction)(void (*)(void))speedups_setup_fetch, METH_FASTCALL,
     "setup_fetch(OutBuf, CHUNK_MIN, PartitionData) -> None\n\nBind what encode_fetch_partitions needs."},
    {"read_caught_up", (PyCFunction)(void (*)(void))speedups_read_caught_up, METH_FASTCALL,
     "read_caught_up(fps, partitions, results, fetch_only_leader, read_committed, read) -> None\n\n"
     "A consumer fetch's read loop (rivulet.replication.replica_manager is the reference): the\n"
     "partitions with nothing to read answered here, the others by read(fp), in order."},
    {"skip_caught_up", (PyCFunction)(void (*)(void))speedups_skip_caught_up, METH_FASTCALL,
     "skip_caught_up(fps, partitions, i, fetch_only_leader) -> int\n\n"
     "The index of the first of fps[i:] not caught up exactly at its HW (len(fps) if none): what\n"
     "a waiting consumer fetch's check (DelayedFetch.try_complete, the reference) must look at."},
    {"setup_fetch_read", (PyCFunction)(void (*)(void))speedups_setup_fetch_read, METH_FASTCALL,
     "setup_fetch_read(FetchResult, FetchRequestPartition, NO_ERROR, NOTHING_READ, TopicPartition, LogState)"
     " -> None\n\nBind what read_caught_up needs."},
    {"fetch_wanted", (PyCFunction)(void (*)(void))speedups_fetch_wanted, METH_FASTCALL,
     "fetch_wanted(parts, name, version, wanted) -> list[TopicPartition]\n\n"
     "A Fetch request topic's partitions as the handler's keys and FetchRequestPartitions\n"
     "(rivulet.server.handlers.records._py_fetch_wanted is the reference)."},
    {"read_int_structs", (PyCFunction)(void (*)(void))speedups_read_int_structs, METH_FASTCALL,
     "read_int_structs(buf, pos, end, n, cls, codes, names, absent, flex, reader) -> (list, pos)\n\n"
     "An array of integer-only structs read as rivulet.protocol.schema's compiled reader does."},
    {"watch_keys", (PyCFunction)(void (*)(void))speedups_watch_keys, METH_FASTCALL,
     "watch_keys(watchers, keys, ident, op) -> None\n\n"
     "watchers[key][ident] = op for every key (a new dict for a new key): a purgatory's watch."},
    {"setup", (PyCFunction)(void (*)(void))speedups_setup, METH_FASTCALL,
     "setup(record_type, invalid, fallback) -> bool\n\n"
     "Bind the Record type, the error factory and the Python fallback; returns whether\n"
     "records are built by filling their slots directly."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef speedups_module = {
    PyModuleDef_HEAD_INIT,
    "rivulet.protocol._speedups",
    "Optional C accelerator for rivulet.protocol.records (record decoding and encoding) and murmur2.",
    -1,
    speedups_methods,
    NULL,
    NULL,
    NULL,
    NULL,
};

PyMODINIT_FUNC
PyInit__speedups(void)
{
    return PyModule_Create(&speedups_module);
}
