/*
 * fastdata.formats._records: a batch of records read, checked and cut out of their shard in one call, GIL released.
 *
 * The readers' fast path (formats/tfrecord.py, formats/lmdb_shards.py). Python hands over where the records lie;
 * with the GIL released, each one is read with one preadv straight into the `bytes` that will hold it, and every
 * byte is checked: a TFRecord's length CRC and data CRC (CRC32C, masked) and its Example's structure (the plain
 * shape of formats/example_wire.py: every tag, length and varint, keys ASCII), an LMDB value's overflow-page header
 * and its CRC32C against the one the shard stores. A record this path does not take as sound and plain (a short
 * read, a bad CRC, an odd or damaged Example, a non-ASCII key) comes back as None, and the caller reads it the plain
 * way, which gives its exact answer or error: this module never makes an error message of its own.
 *
 * No state is shared between calls but the CRC table, written once at import: safe without the GIL.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>
#include <limits.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <unistd.h>
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <nmmintrin.h>
#define HAVE_SSE42_DISPATCH 1
#endif
#if defined(__aarch64__) && defined(__ARM_FEATURE_CRC32)
#include <arm_acle.h>
#endif

/* ---- CRC32C (Castagnoli, reflected 0x82F63B78): the instruction where the CPU has it, else slice-by-8 ---- */

static uint32_t crc_table[8][256];

static void crc_init(void)
{
    for (uint32_t n = 0; n < 256; n++) {
        uint32_t c = n;
        for (int k = 0; k < 8; k++)
            c = c & 1 ? (c >> 1) ^ 0x82F63B78u : c >> 1;
        crc_table[0][n] = c;
    }
    for (uint32_t n = 0; n < 256; n++)
        for (int t = 1; t < 8; t++)
            crc_table[t][n] = (crc_table[t - 1][n] >> 8) ^ crc_table[0][crc_table[t - 1][n] & 0xFF];
}

static uint32_t crc_soft(uint32_t crc, const uint8_t *p, size_t n)
{
    for (; n && ((uintptr_t)p & 7); n--)
        crc = (crc >> 8) ^ crc_table[0][(crc ^ *p++) & 0xFF];
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    for (; n >= 8; n -= 8, p += 8) {
        uint64_t w;
        memcpy(&w, p, 8);
        w ^= crc; /* little-endian: the CRC lines up with the first four bytes */
        crc = crc_table[7][w & 0xFF] ^ crc_table[6][(w >> 8) & 0xFF] ^ crc_table[5][(w >> 16) & 0xFF] ^
              crc_table[4][(w >> 24) & 0xFF] ^ crc_table[3][(w >> 32) & 0xFF] ^ crc_table[2][(w >> 40) & 0xFF] ^
              crc_table[1][(w >> 48) & 0xFF] ^ crc_table[0][w >> 56];
    }
#endif
    for (; n; n--)
        crc = (crc >> 8) ^ crc_table[0][(crc ^ *p++) & 0xFF];
    return crc;
}

#if defined(HAVE_SSE42_DISPATCH)
__attribute__((target("sse4.2"))) static uint32_t crc_sse42(uint32_t crc, const uint8_t *p, size_t n)
{
    for (; n && ((uintptr_t)p & 7); n--)
        crc = _mm_crc32_u8(crc, *p++);
    uint64_t c = crc;
    for (; n >= 8; n -= 8, p += 8) {
        uint64_t w;
        memcpy(&w, p, 8);
        c = _mm_crc32_u64(c, w);
    }
    crc = (uint32_t)c;
    for (; n; n--)
        crc = _mm_crc32_u8(crc, *p++);
    return crc;
}
static int have_sse42;
#endif

#if defined(__aarch64__) && defined(__ARM_FEATURE_CRC32)
static uint32_t crc_arm(uint32_t crc, const uint8_t *p, size_t n)
{
    for (; n && ((uintptr_t)p & 7); n--)
        crc = __crc32cb(crc, *p++);
    for (; n >= 8; n -= 8, p += 8) {
        uint64_t w;
        memcpy(&w, p, 8);
        crc = __crc32cd(crc, w);
    }
    for (; n; n--)
        crc = __crc32cb(crc, *p++);
    return crc;
}
#endif

/* CRC32C of p[0:n] continued from `crc` (0 to start), as google_crc32c.extend(crc, data) */
static uint32_t crc32c_extend(uint32_t crc, const uint8_t *p, size_t n)
{
    crc = ~crc;
#if defined(__aarch64__) && defined(__ARM_FEATURE_CRC32)
    crc = crc_arm(crc, p, n);
#else
#if defined(HAVE_SSE42_DISPATCH)
    if (have_sse42)
        crc = crc_sse42(crc, p, n);
    else
#endif
        crc = crc_soft(crc, p, n);
#endif
    return ~crc;
}

/* TFRecord's masked CRC (tfrecord_framing.mask) */
static uint32_t masked(uint32_t crc) { return ((crc >> 15) | (crc << 17)) + 0xA282EAD8u; }

static uint64_t load_le(const uint8_t *p, int n)
{
    uint64_t v = 0;
    for (int k = n - 1; k >= 0; k--)
        v = v << 8 | p[k];
    return v;
}

/* ---- the Example walk: formats/example_wire.py's plain shape, over the whole payload ---- */

enum { FIRST = 0x0A, VALUE = 0x12, BYTES = 0x0A, FLOATS = 0x12, INTS = 0x1A };

/* the varint at b[*i] (at most 10 bytes, 64 bits, before `end`); 0, or -1: not plain */
static int varint(const uint8_t *b, size_t *i, size_t end, uint64_t *out)
{
    uint64_t v = 0;
    for (int shift = 0;; shift += 7) {
        if (*i >= end)
            return -1;
        uint8_t c = b[(*i)++];
        if (shift == 63 && c > 1)
            return -1;
        v |= (uint64_t)(c & 0x7F) << shift;
        if (c < 0x80) {
            *out = v;
            return 0;
        }
        if (shift == 63)
            return -1;
    }
}

/* the values of one Feature's list b[i:end] (packed lists only); *first: the first int64, when `first` is given */
static int lists(const uint8_t *b, size_t i, size_t end, int kind, int *has_first, int64_t *first)
{
    while (i < end) {
        uint64_t len;
        if (b[i] != FIRST)
            return -1;
        i++;
        if (varint(b, &i, end, &len) || len > end - i || (kind == FLOATS && len % 4))
            return -1;
        size_t stop = i + (size_t)len;
        if (kind == INTS)
            while (i < stop) {
                uint64_t v;
                if (varint(b, &i, stop, &v))
                    return -1;
                if (has_first && !*has_first) {
                    *has_first = 1;
                    *first = (int64_t)v;
                }
            }
        i = stop;
    }
    return 0;
}

static const char IMAGE_KEY[] = "image/encoded";
static const char LABEL_KEY[] = "image/class/label";

static int key_is(const uint8_t *key, size_t n, const char *name)
{
    return n == strlen(name) && memcmp(key, name, n) == 0;
}

/* Walk a payload of `length` bytes: 0 with the image's [start, start + size) and the label (has_label 0: none),
 * or -1: not the plain shape (the caller takes the plain read). */
static int walk(const uint8_t *b, size_t length, size_t *start, size_t *size, int *has_label, int64_t *label)
{
    size_t i = 1, end = length;
    uint64_t n;
    int has_image = 0;
    *has_label = 0;
    if (!length || b[0] != FIRST || varint(b, &i, length, &n) || n != length - i)
        return -1;
    while (i < end) { /* Features.feature: map entries, each exactly a key then a value (a Feature) */
        if (b[i] != FIRST)
            return -1;
        i++;
        if (varint(b, &i, end, &n) || n > end - i)
            return -1;
        size_t stop = i + (size_t)n;
        if (i >= stop || b[i] != FIRST)
            return -1;
        i++;
        if (varint(b, &i, stop, &n) || n >= stop - i)
            return -1;
        const uint8_t *key = b + i;
        size_t key_size = (size_t)n;
        for (size_t k = 0; k < key_size; k++)
            if (key[k] >= 0x80) /* UTF-8 to check: the plain read does */
                return -1;
        i += key_size;
        if (b[i] != VALUE)
            return -1;
        i++;
        if (varint(b, &i, stop, &n) || n != stop - i)
            return -1;
        int image = key_is(key, key_size, IMAGE_KEY), is_label = key_is(key, key_size, LABEL_KEY);
        if (i == stop) { /* a Feature with no list */
            if (image || is_label)
                return -1;
            continue;
        }
        int kind = b[i++];
        if (kind != BYTES && kind != FLOATS && kind != INTS)
            return -1;
        if (varint(b, &i, stop, &n) || n != stop - i)
            return -1;
        if (image) {
            if (has_image || kind != BYTES || i >= stop || b[i] != FIRST)
                return -1; /* a repeated key (protobuf keeps the last), another list, no value */
            i++;
            if (varint(b, &i, stop, &n) || n > stop - i)
                return -1;
            has_image = 1;
            *start = i;
            *size = (size_t)n;
            i += (size_t)n;
        } else if (is_label) {
            if (*has_label || kind != INTS)
                return -1;
            if (lists(b, i, stop, kind, has_label, label) || !*has_label)
                return -1;
            i = stop;
        }
        if (lists(b, i, stop, kind, NULL, NULL))
            return -1;
        i = stop;
    }
    return has_image ? 0 : -1;
}

/* ---- argument helpers ---- */

/* `seq` (a sequence of ints) into a new array of n int64 (n: its length); NULL with an exception set */
static int64_t *int64s(PyObject *seq, Py_ssize_t *n, const char *what)
{
    if (!PySequence_Check(seq)) {
        PyErr_Format(PyExc_TypeError, "%s must be a sequence of ints, not %.100s", what, Py_TYPE(seq)->tp_name);
        return NULL;
    }
    PyObject *fast = PySequence_Fast(seq, "a sequence of ints");
    if (fast == NULL)
        return NULL;
    *n = PySequence_Fast_GET_SIZE(fast);
    int64_t *out = PyMem_Malloc(sizeof(int64_t) * (size_t)(*n ? *n : 1));
    if (out == NULL) {
        Py_DECREF(fast);
        PyErr_NoMemory();
        return NULL;
    }
    for (Py_ssize_t k = 0; k < *n; k++) {
        long long v = PyLong_AsLongLong(PySequence_Fast_GET_ITEM(fast, k));
        if (v == -1 && PyErr_Occurred()) {
            Py_DECREF(fast);
            PyMem_Free(out);
            return NULL;
        }
        out[k] = v;
    }
    Py_DECREF(fast);
    return out;
}

/* a file descriptor from a Python int; -1 with an exception set */
static int as_fd(PyObject *obj)
{
    long v = PyLong_AsLong(obj);
    if (v == -1 && PyErr_Occurred())
        return -1;
    if (v < 0 || v > INT_MAX) {
        PyErr_SetString(PyExc_ValueError, "fd must be an open file descriptor");
        return -1;
    }
    return (int)v;
}

/* the size of the file open at fd, or -1 (then no record is taken: the plain read says why) */
static int64_t file_size(int fd)
{
    struct stat st;
    return fstat(fd, &st) == 0 ? (int64_t)st.st_size : -1;
}

/* ---- the records of one call: each read into its own bytes with the GIL released ---- */

typedef struct {
    int64_t at, size;  /* TFRecord: the record's position and size; LMDB: the value's offset and size */
    int64_t page;      /* LMDB: the overflow run's first page, or -1 (a value inside its leaf) */
    uint32_t crc;      /* LMDB: the CRC32C the value must have */
    int64_t alloc;     /* the bytes to make for it; -1: not read (the plain read says why) */
    PyObject *bytes;   /* read in place; then resized to `keep` */
    size_t keep;
    int ok, has_label;
    int64_t label;
} Job;

typedef void (*ReadOne)(int fd, Job *job, int64_t page_size, int check_crc);

/* A TFRecord record: header, payload (into the bytes), footer in one preadv; the CRCs; the walk; the image moved to
 * the front of the bytes. */
static void read_tfrecord(int fd, Job *job, int64_t page_size, int check_crc)
{
    uint8_t header[12], footer[4];
    int64_t length = job->size - 16;
    uint8_t *payload = (uint8_t *)PyBytes_AS_STRING(job->bytes);
    struct iovec parts[3] = {{header, 12}, {payload, (size_t)length}, {footer, 4}};
    (void)page_size;
    if (preadv(fd, parts, 3, (off_t)job->at) != job->size)
        return; /* short (a truncated shard) or an error: the plain read names it */
    if ((int64_t)load_le(header, 8) != length)
        return;
    if (check_crc && (load_le(header + 8, 4) != masked(crc32c_extend(0, header, 8)) ||
                      load_le(footer, 4) != masked(crc32c_extend(0, payload, (size_t)length))))
        return;
    size_t start, size;
    if (walk(payload, (size_t)length, &start, &size, &job->has_label, &job->label))
        return;
    memmove(payload, payload + start, size);
    job->keep = size;
    job->ok = 1;
}

/* An LMDB value: with its overflow run's header where it has one (checked), then its CRC32C. */
static void read_value(int fd, Job *job, int64_t page_size, int check_crc)
{
    uint8_t header[16];
    uint8_t *value = (uint8_t *)PyBytes_AS_STRING(job->bytes);
    if (job->page < 0) {
        if (pread(fd, value, (size_t)job->size, (off_t)job->at) != job->size)
            return;
    } else {
        struct iovec parts[2] = {{header, 16}, {value, (size_t)job->size}};
        if (preadv(fd, parts, 2, (off_t)(job->at - 16)) != job->size + 16)
            return;
        /* the run's header: its page number, the overflow flag (0x04), pages enough for the value */
        uint64_t pages = load_le(header + 12, 4);
        if ((int64_t)load_le(header, 8) != job->page || !(load_le(header + 10, 2) & 0x04) ||
            (uint64_t)(16 + job->size) > pages * (uint64_t)page_size)
            return;
    }
    if (check_crc && crc32c_extend(0, value, (size_t)job->size) != job->crc)
        return;
    job->keep = (size_t)job->size;
    job->ok = 1;
}

/* Make each job's bytes, read them all with the GIL released, and return the list: per job its bytes (with its
 * label, `labelled`) or None. Frees the jobs. */
static PyObject *run_jobs(int fd, Job *jobs, Py_ssize_t n, int64_t page_size, int check_crc, ReadOne read_one,
                          int labelled)
{
    PyObject *result = NULL;
    for (Py_ssize_t k = 0; k < n; k++)
        if (jobs[k].alloc >= 0 && (jobs[k].bytes = PyBytes_FromStringAndSize(NULL, jobs[k].alloc)) == NULL)
            goto done;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t k = 0; k < n; k++)
        if (jobs[k].bytes != NULL)
            read_one(fd, &jobs[k], page_size, check_crc);
    Py_END_ALLOW_THREADS
    result = PyList_New(n);
    for (Py_ssize_t k = 0; result != NULL && k < n; k++) {
        PyObject *item = Py_None;
        if (!jobs[k].ok)
            Py_INCREF(item);
        else if (_PyBytes_Resize(&jobs[k].bytes, (Py_ssize_t)jobs[k].keep) < 0)
            item = NULL;
        else if (!labelled)
            item = Py_NewRef(jobs[k].bytes);
        else if (jobs[k].has_label)
            item = Py_BuildValue("(OL)", jobs[k].bytes, (long long)jobs[k].label);
        else
            item = Py_BuildValue("(OO)", jobs[k].bytes, Py_None);
        if (item == NULL)
            Py_CLEAR(result);
        else
            PyList_SET_ITEM(result, k, item);
    }
done:
    for (Py_ssize_t k = 0; k < n; k++)
        Py_XDECREF(jobs[k].bytes);
    PyMem_Free(jobs);
    return result;
}

/* `count` columns of ints (each as long as the first) into int64 arrays, and a job for each row (zeroed): the jobs
 * (their number in *n), or NULL with an exception set. The caller frees the columns either way. */
static Job *jobs_of(PyObject *const *sources, const char *const *names, int count, int64_t **columns, Py_ssize_t *n)
{
    for (int c = 0; c < count; c++) {
        Py_ssize_t rows;
        columns[c] = int64s(sources[c], &rows, names[c]);
        if (columns[c] == NULL)
            return NULL;
        if (c == 0)
            *n = rows;
        else if (rows != *n) {
            PyErr_Format(PyExc_ValueError, "%s and %s differ in length", names[0], names[c]);
            return NULL;
        }
    }
    Job *jobs = PyMem_Calloc((size_t)(*n ? *n : 1), sizeof(Job));
    if (jobs == NULL)
        PyErr_NoMemory();
    return jobs;
}

PyDoc_STRVAR(read_tfrecords_doc,
             "read_tfrecords(fd, positions, sizes, check_crc) -> list\n\n"
             "The records of `sizes[i]` bytes at `positions[i]` of the TFRecord file open at `fd`, each "
             "(image bytes, label or None) when it is sound and of the plain Example shape, else None (the caller "
             "reads it the plain way). The reads and checks run with the GIL released.");

static PyObject *records_read_tfrecords(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 4) {
        PyErr_SetString(PyExc_TypeError, "read_tfrecords(fd, positions, sizes, check_crc)");
        return NULL;
    }
    int fd = as_fd(args[0]);
    int check_crc = fd < 0 ? -1 : PyObject_IsTrue(args[3]);
    if (check_crc < 0)
        return NULL;
    int64_t end = file_size(fd);
    const char *const names[2] = {"positions", "sizes"};
    int64_t *columns[2] = {NULL, NULL};
    PyObject *result = NULL;
    Py_ssize_t n = 0;
    Job *jobs = jobs_of(args + 1, names, 2, columns, &n);
    if (jobs != NULL) {
        for (Py_ssize_t k = 0; k < n; k++) {
            int64_t at = columns[0][k], size = columns[1][k];
            jobs[k].at = at;
            jobs[k].size = size;
            jobs[k].alloc = at >= 0 && size >= 16 && size <= end - at ? size - 16 : -1;
        }
        result = run_jobs(fd, jobs, n, 0, check_crc, read_tfrecord, 1);
    }
    PyMem_Free(columns[0]);
    PyMem_Free(columns[1]);
    return result;
}

PyDoc_STRVAR(read_values_doc,
             "read_values(fd, offsets, sizes, pages, page_size, crcs, check_crc) -> list\n\n"
             "The LMDB values of `sizes[i]` bytes at `offsets[i]` of the file open at `fd` (`pages[i]`: the "
             "overflow run's first page, whose header is checked, or -1), each as bytes when it reads whole and "
             "its CRC32C is `crcs[i]` (with `check_crc`), else None (the caller reads it the plain way). The reads "
             "and checks run with the GIL released.");

static PyObject *records_read_values(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 7) {
        PyErr_SetString(PyExc_TypeError, "read_values(fd, offsets, sizes, pages, page_size, crcs, check_crc)");
        return NULL;
    }
    int fd = as_fd(args[0]);
    long long page_size = fd < 0 ? -1 : PyLong_AsLongLong(args[4]);
    int check_crc = page_size == -1 && PyErr_Occurred() ? -1 : PyObject_IsTrue(args[6]);
    if (fd < 0 || check_crc < 0)
        return NULL;
    int64_t end = file_size(fd);
    const char *const names[4] = {"offsets", "sizes", "pages", "crcs"};
    PyObject *const sources[4] = {args[1], args[2], args[3], args[5]};
    int64_t *columns[4] = {NULL, NULL, NULL, NULL};
    PyObject *result = NULL;
    Py_ssize_t n = 0;
    Job *jobs = jobs_of(sources, names, 4, columns, &n);
    if (jobs != NULL) {
        for (Py_ssize_t k = 0; k < n; k++) {
            Job *job = &jobs[k];
            job->at = columns[0][k];
            job->size = columns[1][k];
            job->page = columns[2][k];
            job->crc = (uint32_t)columns[3][k];
            job->alloc = job->at >= 16 && page_size > 0 && job->size >= 0 && job->size <= end - job->at ? job->size
                                                                                                            : -1;
        }
        result = run_jobs(fd, jobs, n, page_size, check_crc, read_value, 0);
    }
    for (int c = 0; c < 4; c++)
        PyMem_Free(columns[c]);
    return result;
}

PyDoc_STRVAR(crc32c_doc, "crc32c(data, crc=0, table=False) -> int\n\nCRC32C of `data` continued from `crc`, as "
                         "google_crc32c.extend(crc, data) (this module's own, for its tests and the GIL-free reads); "
                         "`table`: by the table, as on a CPU without a CRC32C instruction.");

static PyObject *records_crc32c(PyObject *self, PyObject *args)
{
    Py_buffer data;
    unsigned int crc = 0;
    int table = 0;
    if (!PyArg_ParseTuple(args, "y*|Ip:crc32c", &data, &crc, &table))
        return NULL;
    uint32_t value;
    Py_BEGIN_ALLOW_THREADS
    value = table ? ~crc_soft(~(uint32_t)crc, data.buf, (size_t)data.len)
                  : crc32c_extend(crc, data.buf, (size_t)data.len);
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&data);
    return PyLong_FromUnsignedLong(value);
}

static PyMethodDef records_functions[] = {
    {"read_tfrecords", (PyCFunction)(void (*)(void))records_read_tfrecords, METH_FASTCALL, read_tfrecords_doc},
    {"read_values", (PyCFunction)(void (*)(void))records_read_values, METH_FASTCALL, read_values_doc},
    {"crc32c", records_crc32c, METH_VARARGS, crc32c_doc},
    {NULL, NULL, 0, NULL},
};

PyDoc_STRVAR(module_doc, "Records read, checked and cut out of their shard in one GIL-free call (fastdata's readers).");

static struct PyModuleDef records_module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "fastdata.formats._records",
    .m_doc = module_doc,
    .m_size = -1,
    .m_methods = records_functions,
};

PyMODINIT_FUNC
PyInit__records(void)
{
    crc_init();
#if defined(HAVE_SSE42_DISPATCH)
    have_sse42 = __builtin_cpu_supports("sse4.2");
#endif
    PyObject *module = PyModule_Create(&records_module);
#ifdef Py_GIL_DISABLED
    if (module != NULL)
        PyUnstable_Module_SetGIL(module, Py_MOD_GIL_NOT_USED); /* no shared mutable state after this init */
#endif
    if (module != NULL && PyModule_AddStringConstant(module, "CRC32C_PATH",
#if defined(__aarch64__) && defined(__ARM_FEATURE_CRC32)
                                                     "armv8-crc"
#elif defined(HAVE_SSE42_DISPATCH)
                                                     have_sse42 ? "sse4.2" : "table"
#else
                                                     "table"
#endif
                                                     ) < 0) {
        Py_DECREF(module);
        return NULL;
    }
    return module;
}
