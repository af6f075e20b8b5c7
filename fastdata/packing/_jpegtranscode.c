/*
 * fastdata.packing._jpegtranscode: lossless JPEG transcoding to a random-access layout.
 *
 * The DCT coefficients are read with jpeg_read_coefficients and written back unchanged with
 * jpeg_write_coefficients (so every decoder gives the same pixels), as a baseline sequential
 * JPEG with optimized Huffman tables and a restart marker every K MCUs, K a divisor of the
 * MCUs per row (so restart intervals tile MCU rows). Written against the libjpeg API.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jpeglib.h>
#include <jerror.h>

PyDoc_STRVAR(module_doc,
"Lossless JPEG transcoding with libjpeg(-turbo).\n"
"\n"
"transcode(data, mcus=1, min_bytes=0, max_pixels=1<<30) -> bytes | None\n"
"    The JPEG `data` rewritten losslessly (the same DCT coefficients, so the same pixels in\n"
"    any decoder): baseline sequential Huffman coding with optimized tables (progressive and\n"
"    arithmetic-coded input becomes baseline), a restart marker every K MCUs where K is the\n"
"    divisor of the MCUs per row nearest above max(`mcus`, the MCUs that hold about `min_bytes`\n"
"    of `data` on average), or below when the one above is more than twice that (so restart\n"
"    intervals tile the MCU rows, and a flat image of tiny MCUs does not get a marker per\n"
"    MCU), the JFIF (APP0) or Adobe (APP14) marker libjpeg writes for the colour space, and\n"
"    no other marker (EXIF, ICC, comments are dropped). With `fit` (the default) the result is\n"
"    never larger than a baseline Huffman `data`: a larger one is written again with the next\n"
"    larger divisor K that should drop enough markers (up to one interval per row), else None.\n"
"    Progressive and arithmetic-coded input gets the same larger K but stays re-coded even when\n"
"    larger (it decodes several times slower as it is). None also when libjpeg refuses the\n"
"    data, warns while reading it (corrupt data), or the image has more than max_pixels pixels:\n"
"    the caller keeps the original bytes. The GIL is released while libjpeg works.\n"
"\n"
"restart_interval(data) -> (interval, mcus_per_row) | None\n"
"    What the header of `data` says: the restart interval in MCUs (0: none) and the MCUs per\n"
"    row of its (first) scan; None when the header does not parse.\n");

/* ---- libjpeg error manager: longjmp back, never exit() or print ---------------------- */

typedef struct {
    struct jpeg_error_mgr pub;
    jmp_buf jump;
    int warned;
} ErrorMgr;

static void
tc_error_exit(j_common_ptr cinfo)
{
    longjmp(((ErrorMgr *)cinfo->err)->jump, 1);
}

static void
tc_emit_message(j_common_ptr cinfo, int level)
{
    if (level < 0)
        ((ErrorMgr *)cinfo->err)->warned = 1;  /* corrupt data: the original is kept */
}

static void
tc_output_message(j_common_ptr cinfo)
{
    (void)cinfo;
}

/* ---- a growing output buffer that this module owns (freed on every path, error or not) -- */

typedef struct {
    struct jpeg_destination_mgr pub;
    unsigned char *buf;
    size_t size;                 /* bytes allocated */
    int failed;
} OutBuf;

static void
out_init(j_compress_ptr cinfo)
{
    OutBuf *out = (OutBuf *)cinfo->dest;
    out->pub.next_output_byte = out->buf;
    out->pub.free_in_buffer = out->size;
}

static boolean
out_grow(j_compress_ptr cinfo)
{
    OutBuf *out = (OutBuf *)cinfo->dest;
    size_t used = out->size;     /* libjpeg calls this when the buffer is full */
    unsigned char *bigger = realloc(out->buf, out->size * 2);
    if (bigger == NULL) {
        out->failed = 1;
        ERREXIT1(cinfo, JERR_OUT_OF_MEMORY, 10);
    }
    out->buf = bigger;
    out->size *= 2;
    out->pub.next_output_byte = out->buf + used;
    out->pub.free_in_buffer = out->size - used;
    return TRUE;
}

static void
out_term(j_compress_ptr cinfo)
{
    (void)cinfo;
}

/* ---- the work, without the GIL -------------------------------------------------------- */

typedef struct {
    const unsigned char *in;
    size_t in_size;
    unsigned int mcus;
    unsigned long long min_bytes;
    unsigned long long max_pixels;
    int fit;                     /* never larger than a baseline input: raise K, else refuse */
    unsigned int interval;       /* the restart interval written (MCUs) */
    OutBuf out;                  /* out.buf is freed by the caller */
    struct jpeg_decompress_struct src;
    struct jpeg_compress_struct dst;
    ErrorMgr err;                /* shared by both objects: one jump target */
} Job;

static unsigned int
mcus_per_row(int num_components, jpeg_component_info *comps, unsigned int width)
{
    int max_h = 1;
    if (num_components == 1)
        return (width + DCTSIZE - 1) / DCTSIZE;  /* a one-component scan's MCU is one block */
    for (int c = 0; c < num_components; c++)
        if (comps[c].h_samp_factor > max_h)
            max_h = comps[c].h_samp_factor;
    return (width + max_h * DCTSIZE - 1) / (max_h * DCTSIZE);
}

/* A divisor of per_row near `wanted` (so restart intervals tile the MCU rows): the smallest one >= wanted
 * unless that is more than twice wanted (a row of a prime number of MCUs), then the largest one <= wanted. */
static unsigned int
interval_for(unsigned int per_row, unsigned int wanted)
{
    unsigned int up, down;
    if (wanted <= 1 || per_row <= 1)
        return 1;
    if (wanted >= per_row)
        return per_row > 65535 ? 65535 : per_row;
    for (up = wanted; per_row % up != 0; up++)
        ;
    for (down = wanted; per_row % down != 0; down--)
        ;
    up = up / 2 <= wanted ? up : down;
    return up > 65535 ? 65535 : up;
}

static unsigned long long
mcu_rows(const Job *job)
{
    int max_v = 1;
    if (job->dst.num_components == 1)
        return (job->dst.image_height + DCTSIZE - 1) / DCTSIZE;
    for (int c = 0; c < job->dst.num_components; c++)
        if (job->dst.comp_info[c].v_samp_factor > max_v)
            max_v = job->dst.comp_info[c].v_samp_factor;
    return (job->dst.image_height + max_v * DCTSIZE - 1) / (max_v * DCTSIZE);
}

/* MCUs per interval: `mcus`, raised so that an interval holds about min_bytes of the input's data
 * (a marker costs 2-3 bytes; in a flat image of tiny MCUs one per MCU would multiply the size). */
static unsigned int
wanted_mcus(const Job *job, unsigned int per_row)
{
    unsigned long long total = mcu_rows(job) * per_row;
    unsigned long long by_size = job->min_bytes && job->in_size
        ? (job->min_bytes * total + job->in_size - 1) / job->in_size : 1;
    return by_size > job->mcus ? (unsigned int)(by_size < 65535 ? by_size : 65535) : job->mcus;
}

/* The next restart interval to try when the output came out `excess` bytes larger than the input: a divisor of
 * per_row (so intervals still tile the rows) above `interval`, large enough to drop about excess / 3 markers (a
 * marker costs its 2 bytes, the padding to a byte and the DC re-prediction: about 3). 0: none left (whole rows
 * already, or a row longer than a DRI can say). */
static unsigned int
larger_interval(unsigned int per_row, unsigned long long total, unsigned int interval, size_t excess)
{
    if (interval >= per_row || per_row > 65535)
        return 0;
    unsigned long long markers = (total + interval - 1) / interval;
    unsigned long long drop = (excess + 2) / 3 + 1;
    unsigned long long keep = markers > drop ? markers - drop : 1;
    unsigned long long wanted = (total + keep - 1) / keep;
    if (wanted <= interval)
        wanted = interval + 1;
    if (wanted >= per_row)
        return per_row;
    while (per_row % wanted != 0)
        wanted++;
    return (unsigned int)wanted;
}

/* 1: done (job->out holds the JPEG), 0: refused. Every libjpeg object is destroyed on return. */
static int
run_job(Job *job)
{
    volatile int dst_created = 0;
    job->src.err = jpeg_std_error(&job->err.pub);
    job->err.pub.error_exit = tc_error_exit;
    job->err.pub.emit_message = tc_emit_message;
    job->err.pub.output_message = tc_output_message;
    job->err.warned = 0;
    job->dst.err = &job->err.pub;
    jpeg_create_decompress(&job->src);
    if (setjmp(job->err.jump)) {
        if (dst_created)
            jpeg_destroy_compress(&job->dst);
        jpeg_destroy_decompress(&job->src);
        return 0;
    }
    jpeg_mem_src(&job->src, job->in, (unsigned long)job->in_size);
    jpeg_read_header(&job->src, TRUE);
    if ((unsigned long long)job->src.image_width * job->src.image_height > job->max_pixels
        || job->src.data_precision != 8) {
        jpeg_destroy_decompress(&job->src);
        return 0;
    }
    jvirt_barray_ptr *coefs = jpeg_read_coefficients(&job->src);
    if (job->err.warned) {
        jpeg_destroy_decompress(&job->src);
        return 0;
    }
    for (;;) { /* one pass per restart interval tried; the coefficients are read once */
        jpeg_create_compress(&job->dst);
        dst_created = 1;
        jpeg_copy_critical_parameters(&job->src, &job->dst);
        job->dst.optimize_coding = TRUE;
        job->dst.arith_code = FALSE;
        job->dst.restart_in_rows = 0;
        unsigned int per_row = mcus_per_row(job->dst.num_components, job->dst.comp_info, job->dst.image_width);
        if (job->interval == 0)
            job->interval = interval_for(per_row, wanted_mcus(job, per_row));
        job->dst.restart_interval = job->interval;
        if (job->out.buf == NULL) {
            job->out.size = job->in_size + 4096;  /* re-coded files are about the size of the input */
            job->out.buf = malloc(job->out.size);
            if (job->out.buf == NULL)
                ERREXIT1(&job->dst, JERR_OUT_OF_MEMORY, 11);
        }
        job->out.pub.init_destination = out_init;
        job->out.pub.empty_output_buffer = out_grow;
        job->out.pub.term_destination = out_term;
        job->dst.dest = &job->out.pub;
        jpeg_write_coefficients(&job->dst, coefs);
        jpeg_finish_compress(&job->dst);
        unsigned long long total = mcu_rows(job) * per_row;
        jpeg_destroy_compress(&job->dst);
        dst_created = 0;
        size_t written = job->out.size - job->out.pub.free_in_buffer;
        if (!job->fit || written <= job->in_size)
            break;
        unsigned int next = larger_interval(per_row, total, job->interval, written - job->in_size);
        if (next == 0) { /* larger than the input even with one interval per row */
            if (job->src.progressive_mode || job->src.arith_code)
                break; /* kept re-coded: as they are, they decode several times slower */
            jpeg_destroy_decompress(&job->src);
            return 0; /* the caller keeps the input */
        }
        job->interval = next;
    }
    jpeg_finish_decompress(&job->src);
    int warned = job->err.warned;
    jpeg_destroy_decompress(&job->src);
    return !warned;
}

static PyObject *
transcode(PyObject *module, PyObject *args, PyObject *kwargs)
{
    static char *keywords[] = {"data", "mcus", "min_bytes", "max_pixels", "fit", NULL};
    Py_buffer view;
    unsigned int mcus = 1;
    unsigned long long min_bytes = 0;
    unsigned long long max_pixels = 1ULL << 30;
    int fit = 1;
    (void)module;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "y*|IKKp:transcode", keywords, &view, &mcus, &min_bytes,
                                     &max_pixels, &fit))
        return NULL;
    if (mcus < 1) {
        PyBuffer_Release(&view);
        return PyErr_Format(PyExc_ValueError, "mcus must be >= 1 (MCUs per restart interval), got %u", mcus);
    }
    Job *job = calloc(1, sizeof(Job));
    if (job == NULL) {
        PyBuffer_Release(&view);
        return PyErr_NoMemory();
    }
    job->in = view.buf;
    job->in_size = (size_t)view.len;
    job->mcus = mcus;
    job->min_bytes = min_bytes;
    job->max_pixels = max_pixels;
    job->fit = fit;
    int ok = 0;
    if (job->in_size > 0) {
        Py_BEGIN_ALLOW_THREADS
        ok = run_job(job);
        Py_END_ALLOW_THREADS
    }
    PyBuffer_Release(&view);
    PyObject *result;
    if (ok) {
        size_t written = job->out.size - job->out.pub.free_in_buffer;
        result = PyBytes_FromStringAndSize((const char *)job->out.buf, (Py_ssize_t)written);
    } else {
        result = Py_None;
        Py_INCREF(result);
    }
    free(job->out.buf);
    free(job);
    return result;
}

static PyObject *
restart_interval(PyObject *module, PyObject *arg)
{
    Py_buffer view;
    struct jpeg_decompress_struct src;
    ErrorMgr err;
    (void)module;
    if (PyObject_GetBuffer(arg, &view, PyBUF_SIMPLE) < 0)
        return NULL;
    if (view.len == 0) {
        PyBuffer_Release(&view);
        Py_RETURN_NONE;
    }
    src.err = jpeg_std_error(&err.pub);
    err.pub.error_exit = tc_error_exit;
    err.pub.emit_message = tc_emit_message;
    err.pub.output_message = tc_output_message;
    jpeg_create_decompress(&src);
    if (setjmp(err.jump)) {
        jpeg_destroy_decompress(&src);
        PyBuffer_Release(&view);
        Py_RETURN_NONE;
    }
    jpeg_mem_src(&src, view.buf, (unsigned long)view.len);
    jpeg_read_header(&src, TRUE);
    unsigned int per_row = mcus_per_row(src.num_components, src.comp_info, src.image_width);
    unsigned int interval = src.restart_interval;
    jpeg_destroy_decompress(&src);
    PyBuffer_Release(&view);
    return Py_BuildValue("(II)", interval, per_row);
}

static PyMethodDef methods[] = {
    {"transcode", (PyCFunction)(void (*)(void))transcode, METH_VARARGS | METH_KEYWORDS,
     "transcode(data, mcus=1, min_bytes=0, max_pixels=1<<30) -> bytes | None (see the module docstring)"},
    {"restart_interval", (PyCFunction)restart_interval, METH_O,
     "restart_interval(data) -> (interval, mcus_per_row) | None (see the module docstring)"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef transcode_module = {
    PyModuleDef_HEAD_INIT, "fastdata.packing._jpegtranscode", module_doc, -1, methods,
    NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC
PyInit__jpegtranscode(void)
{
    PyObject *m = PyModule_Create(&transcode_module);
#ifdef Py_GIL_DISABLED
    if (m != NULL)
        PyUnstable_Module_SetGIL(m, Py_MOD_GIL_NOT_USED); /* no module state: each call has its own libjpeg objects */
#endif
    return m;
}
