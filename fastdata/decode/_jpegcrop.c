/*
 * fastdata.decode._jpegcrop: decode a rectangle of a JPEG, at a DCT scale, to packed RGB.
 *
 * Written against the libjpeg API of libjpeg-turbo (>= 1.5 for jpeg_crop_scanline and
 * jpeg_skip_scanlines; built and tested with 2.1.5). See the module docstring below.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <jpeglib.h>
#include <jerror.h>

#ifndef LIBJPEG_TURBO_VERSION_NUMBER
#error "fastdata._jpegcrop needs libjpeg-turbo (jpeg_crop_scanline / jpeg_skip_scanlines)"
#endif

PyDoc_STRVAR(module_doc,
"Crop-region JPEG decoding with libjpeg(-turbo).\n"
"\n"
"Decompressor(max_pixels=1<<30, max_memory=1<<31, max_scans=1000)\n"
"    One libjpeg decompressor, created once and reused for every image; use one per\n"
"    thread (a Decompressor used by two threads at once raises RuntimeError). The\n"
"    limits refuse absurd input before libjpeg allocates for it: images of more than\n"
"    max_pixels pixels, more than max_memory bytes of libjpeg working memory (the\n"
"    coefficient buffer of progressive JPEGs) and more than max_scans scans raise\n"
"    JpegError (header() applies max_pixels too).\n"
"\n"
"    header(data) -> (height, width, num_components, jpeg_color_space)\n"
"        Read only the header. jpeg_color_space is libjpeg's J_COLOR_SPACE number\n"
"        (1 GRAYSCALE, 2 RGB, 3 YCbCr, 4 CMYK, 5 YCCK).\n"
"\n"
"    decode_region(data, scale_denom, y0, y1, x0, x1, out) -> (rows, cols, warnings)\n"
"        Decode the image at DCT scale 1/scale_denom (1, 2, 4 or 8; the scaled size is\n"
"        ceil(h / d) x ceil(w / d)) and write rows [y0, y1) and columns [x0, x1) of the\n"
"        scaled image (coordinates in scaled pixels) as packed RGB uint8, row stride\n"
"        cols * 3, to the start of the writable C-contiguous buffer `out` (at least\n"
"        rows * cols * 3 bytes). Columns are cropped with jpeg_crop_scanline, rows above\n"
"        y0 are skipped with jpeg_skip_scanlines and decoding stops after row y1 - 1.\n"
"        The pixels equal those of a full decode at the same scale. Grayscale is\n"
"        replicated to RGB; CMYK/YCCK are converted like Pillow's convert('RGB') (Adobe\n"
"        inverted CMYK). warnings counts libjpeg's recoverable warnings (corrupt data,\n"
"        premature end of file): the image is still returned; the first warning's text\n"
"        is in last_warning (None when there was none). The GIL is released while\n"
"        libjpeg works.\n"
"\n"
"    last_warning: str | None, the first libjpeg warning of the last call.\n"
"\n"
"JpegError(ValueError): libjpeg refused the data; the message is libjpeg's (or\n"
"    'empty file'). ValueError: a bad scale, an empty or out-of-range box, or an `out`\n"
"    buffer that is too small. The Decompressor stays usable after any error.\n");

#define DEFAULT_MAX_PIXELS (1ULL << 30)
#define DEFAULT_MAX_MEMORY (1ULL << 31)
#define DEFAULT_MAX_SCANS 1000

static PyObject *JpegError;

/* ---- libjpeg error manager: longjmp back, never exit() or print ---------------------- */

typedef struct {
    struct jpeg_error_mgr pub; /* first member: libjpeg casts cinfo->err to this */
    jmp_buf jump;
    int num_warnings;
    int max_scans;
    char message[JMSG_LENGTH_MAX];       /* the fatal error */
    char first_warning[JMSG_LENGTH_MAX]; /* the first warning of this call */
} CropErrorMgr;

static void
crop_error_exit(j_common_ptr cinfo)
{
    CropErrorMgr *err = (CropErrorMgr *)cinfo->err;
    if (err->pub.msg_code == JERR_NO_BACKING_STORE) {
        snprintf(err->message, sizeof(err->message),
                 "image needs more decoder memory than the %lu byte limit",
                 (unsigned long)cinfo->mem->max_memory_to_use);
    } else {
        (*cinfo->err->format_message)(cinfo, err->message);
    }
    longjmp(err->jump, 1);
}

static void
crop_emit_message(j_common_ptr cinfo, int msg_level)
{
    CropErrorMgr *err = (CropErrorMgr *)cinfo->err;
    if (msg_level >= 0) /* trace messages */
        return;
    if (err->num_warnings == 0)
        (*cinfo->err->format_message)(cinfo, err->first_warning);
    if (err->num_warnings < INT_MAX)
        err->num_warnings++;
}

static void
crop_output_message(j_common_ptr cinfo)
{
    (void)cinfo; /* libjpeg must never write to stderr from a library */
}

/* Called during jpeg_start_decompress's consumption of multi-scan files: bounds the
 * number of scans, which is what makes a small malformed progressive file expensive. */
static void
crop_progress(j_common_ptr cinfo)
{
    CropErrorMgr *err = (CropErrorMgr *)cinfo->err;
    if (cinfo->is_decompressor &&
        ((j_decompress_ptr)cinfo)->input_scan_number > err->max_scans) {
        snprintf(err->message, sizeof(err->message),
                 "too many scans (more than %d)", err->max_scans);
        longjmp(err->jump, 1);
    }
}

/* ---- the Decompressor type ------------------------------------------------------------ */

typedef struct {
    PyObject_HEAD
    struct jpeg_decompress_struct cinfo;
    CropErrorMgr err;
    struct jpeg_progress_mgr progress;
    int created;
    int busy;
    unsigned char *scratch; /* one decoded row, cropped width x 3 or 4 */
    size_t scratch_size;
    unsigned long long max_pixels;
    PyObject *last_warning;
} Decompressor;

enum {
    JOB_OK = 0,
    JOB_JPEG_ERROR,   /* JpegError(err.message) */
    JOB_VALUE_ERROR,  /* ValueError(job.message) */
    JOB_MEMORY_ERROR, /* MemoryError */
};

typedef struct {
    /* in */
    const unsigned char *src;
    size_t len;
    int denom;
    Py_ssize_t y0, y1, x0, x1;
    unsigned char *out;
    Py_ssize_t out_len;
    /* out */
    int rows, cols;
    int height, width, components, color_space;
    char message[160];
} Job;

static int
Decompressor_init(Decompressor *self, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"max_pixels", "max_memory", "max_scans", NULL};
    unsigned long long max_pixels = DEFAULT_MAX_PIXELS, max_memory = DEFAULT_MAX_MEMORY;
    int max_scans = DEFAULT_MAX_SCANS;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "|KKi:Decompressor", kwlist,
                                     &max_pixels, &max_memory, &max_scans))
        return -1;
    if (max_pixels == 0 || max_memory == 0 || max_memory > (unsigned long long)LONG_MAX ||
        max_scans <= 0) {
        PyErr_SetString(PyExc_ValueError, "the limits must be positive (max_memory < 2**63)");
        return -1;
    }
    if (self->busy) {
        PyErr_SetString(PyExc_RuntimeError, "Decompressor is in use by another thread");
        return -1;
    }
    if (!self->created) {
        self->cinfo.err = jpeg_std_error(&self->err.pub);
        self->err.pub.error_exit = crop_error_exit;
        self->err.pub.emit_message = crop_emit_message;
        self->err.pub.output_message = crop_output_message;
        if (setjmp(self->err.jump)) { /* jpeg_create_decompress can only fail on memory */
            PyErr_Format(PyExc_MemoryError, "libjpeg: %s", self->err.message);
            return -1;
        }
        jpeg_create_decompress(&self->cinfo);
        self->created = 1;
        self->progress.progress_monitor = crop_progress;
        self->cinfo.progress = &self->progress;
    }
    self->cinfo.mem->max_memory_to_use = (long)max_memory;
    self->err.max_scans = max_scans;
    self->max_pixels = max_pixels;
    return 0;
}

static void
Decompressor_dealloc(Decompressor *self)
{
    if (self->created)
        jpeg_destroy_decompress(&self->cinfo);
    PyMem_RawFree(self->scratch);
    Py_XDECREF(self->last_warning);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

/* Pillow's CMYK -> RGB for an Adobe (inverted) CMYK JPEG: it unpacks "CMYK;I" (255 - v)
 * and converts with r = k' - (c' * k' + 128 + ((c' * k' + 128) >> 8)) >> 8, k' = 255 - K. */
static inline unsigned char
cmyk_channel(unsigned int raw_ink, unsigned int raw_k)
{
    unsigned int tmp = (255u - raw_ink) * raw_k + 128u;
    return (unsigned char)(raw_k - (((tmp >> 8) + tmp) >> 8));
}

static void
cmyk_row_to_rgb(unsigned char *dst, const unsigned char *src, int n)
{
    for (int i = 0; i < n; i++, dst += 3, src += 4) {
        dst[0] = cmyk_channel(src[0], src[3]);
        dst[1] = cmyk_channel(src[1], src[3]);
        dst[2] = cmyk_channel(src[2], src[3]);
    }
}

static int
grow_scratch(Decompressor *self, size_t need)
{
    if (need <= self->scratch_size)
        return 0;
    unsigned char *grown = PyMem_RawRealloc(self->scratch, need);
    if (grown == NULL)
        return -1;
    self->scratch = grown;
    self->scratch_size = need;
    return 0;
}

/* Start a cycle: source, header, size limit. Must run under the caller's setjmp. */
static int
read_header(Decompressor *self, Job *job)
{
    j_decompress_ptr cinfo = &self->cinfo;
    jpeg_mem_src(cinfo, job->src, (unsigned long)job->len);
    jpeg_read_header(cinfo, TRUE);
    job->height = (int)cinfo->image_height;
    job->width = (int)cinfo->image_width;
    job->components = cinfo->num_components;
    job->color_space = (int)cinfo->jpeg_color_space;
    if ((unsigned long long)cinfo->image_width * cinfo->image_height > self->max_pixels) {
        snprintf(self->err.message, sizeof(self->err.message),
                 "image too large: %u x %u pixels (limit %llu)", cinfo->image_width,
                 cinfo->image_height, self->max_pixels);
        return JOB_JPEG_ERROR;
    }
    return JOB_OK;
}

/* Runs without the GIL. Every path leaves libjpeg in its start state (jpeg_abort_decompress). */
static int
run_header(Decompressor *self, Job *job)
{
    j_decompress_ptr cinfo = &self->cinfo;
    if (setjmp(self->err.jump)) {
        jpeg_abort_decompress(cinfo);
        return JOB_JPEG_ERROR;
    }
    int status = read_header(self, job);
    jpeg_abort_decompress(cinfo);
    return status;
}

static int
run_region(Decompressor *self, Job *job)
{
    j_decompress_ptr cinfo = &self->cinfo;
    /* Nothing assigned between setjmp and longjmp is read after the jump. */
    if (setjmp(self->err.jump)) {
        jpeg_abort_decompress(cinfo);
        return JOB_JPEG_ERROR;
    }
    int status = read_header(self, job);
    if (status != JOB_OK)
        goto done;

    int cmyk = cinfo->jpeg_color_space == JCS_CMYK || cinfo->jpeg_color_space == JCS_YCCK;
    cinfo->out_color_space = cmyk ? JCS_CMYK : JCS_RGB;
    cinfo->scale_num = 1;
    cinfo->scale_denom = (unsigned int)job->denom;
    /* jpeg_read_header reset the rest to the defaults Pillow uses too: JDCT_ISLOW IDCT,
     * fancy upsampling, no block smoothing change, no quantization. */
    jpeg_calc_output_dimensions(cinfo);
    Py_ssize_t out_h = cinfo->output_height, out_w = cinfo->output_width;
    if (job->y0 < 0 || job->x0 < 0 || job->y1 > out_h || job->x1 > out_w ||
        job->y0 >= job->y1 || job->x0 >= job->x1) {
        snprintf(job->message, sizeof(job->message),
                 "box rows [%zd, %zd) x columns [%zd, %zd) is empty or outside the "
                 "%zd x %zd image at scale 1/%d", job->y0, job->y1, job->x0, job->x1,
                 out_h, out_w, job->denom);
        status = JOB_VALUE_ERROR;
        goto done;
    }
    Py_ssize_t rows = job->y1 - job->y0, cols = job->x1 - job->x0;
    if (job->out_len / 3 / cols < rows) {
        snprintf(job->message, sizeof(job->message),
                 "out holds %zd bytes, the %zd x %zd region needs %zd", job->out_len, rows,
                 cols, rows * cols * 3);
        status = JOB_VALUE_ERROR;
        goto done;
    }
    job->rows = (int)rows;
    job->cols = (int)cols;

    /* The columns to ask jpeg_crop_scanline for: one pixel of margin on each side that is
     * not an image edge, because fancy upsampling treats the crop's edges as image edges
     * (only the outermost column changes); with the margin the requested pixels are exact.
     * jpeg_crop_scanline in libjpeg-turbo < 3.0 miscomputes the chroma width for 4x2/2x4
     * sampling factors under DCT scaling, so unusual sampling decodes the full width. */
    JDIMENSION crop_x = 0, crop_w = (JDIMENSION)out_w;
    int can_crop = cinfo->max_h_samp_factor <= 2 && cinfo->max_v_samp_factor <= 2;
    if (can_crop && (job->x0 > 0 || job->x1 < out_w)) {
        Py_ssize_t start = job->x0 > 0 ? job->x0 - 1 : 0;
        Py_ssize_t end = job->x1 < out_w ? job->x1 + 1 : out_w;
        /* libjpeg picks plain (not fancy) upsampling for a component whose cropped width
         * is 2 samples or less, so a crop is at least 2 * max_h_samp_factor + 1 wide. */
        Py_ssize_t min_w = 2 * (Py_ssize_t)cinfo->max_h_samp_factor + 1;
        if (end - start < min_w) {
            end = start + min_w < out_w ? start + min_w : out_w;
            start = end - min_w > 0 ? end - min_w : 0;
        }
        crop_x = (JDIMENSION)start;
        crop_w = (JDIMENSION)(end - start);
    }

    jpeg_start_decompress(cinfo);
    if (crop_w < (JDIMENSION)out_w)
        jpeg_crop_scanline(cinfo, &crop_x, &crop_w); /* moves crop_x left to an iMCU edge */
    size_t skip_cols = (size_t)(job->x0 - (Py_ssize_t)crop_x);
    int components = cinfo->output_components;
    int direct = !cmyk && crop_w == (JDIMENSION)cols; /* rows go straight into out */
    if (!direct && grow_scratch(self, (size_t)cinfo->output_width * components) < 0) {
        status = JOB_MEMORY_ERROR;
        goto done;
    }
    if (job->y0 > 0)
        jpeg_skip_scanlines(cinfo, (JDIMENSION)job->y0);
    size_t out_stride = (size_t)cols * 3;
    while (cinfo->output_scanline < (JDIMENSION)job->y1) {
        unsigned char *dst = job->out + (size_t)(cinfo->output_scanline - job->y0) * out_stride;
        JSAMPROW row = direct ? dst : self->scratch;
        if (jpeg_read_scanlines(cinfo, &row, 1) != 1) {
            snprintf(job->message, sizeof(job->message), "libjpeg returned no scanline");
            status = JOB_VALUE_ERROR;
            goto done;
        }
        if (direct)
            continue;
        if (cmyk)
            cmyk_row_to_rgb(dst, self->scratch + skip_cols * 4, (int)cols);
        else
            memcpy(dst, self->scratch + skip_cols * 3, out_stride);
    }
done:
    jpeg_abort_decompress(cinfo); /* stop here: rows below y1 are never decoded */
    return status;
}

/* Shared argument handling: takes the buffer, runs `fn` without the GIL, raises. */
static int
run_job(Decompressor *self, Job *job, int (*fn)(Decompressor *, Job *))
{
    if (!self->created) {
        PyErr_SetString(PyExc_RuntimeError, "Decompressor.__init__ was not called");
        return -1;
    }
    if (job->len == 0) {
        PyErr_SetString(JpegError, "empty file");
        return -1;
    }
    if (self->busy) {
        PyErr_SetString(PyExc_RuntimeError,
                        "Decompressor is in use by another thread; use one per thread");
        return -1;
    }
    self->busy = 1;
    self->err.num_warnings = 0;
    self->err.first_warning[0] = '\0';
    self->err.message[0] = '\0';
    job->message[0] = '\0';
    int status;
    Py_BEGIN_ALLOW_THREADS
    status = fn(self, job);
    Py_END_ALLOW_THREADS
    self->busy = 0;

    PyObject *warning = Py_None;
    Py_INCREF(Py_None);
    if (self->err.num_warnings > 0) {
        Py_DECREF(Py_None);
        warning = PyUnicode_DecodeLatin1(self->err.first_warning,
                                         (Py_ssize_t)strlen(self->err.first_warning), NULL);
        if (warning == NULL)
            return -1;
    }
    Py_XSETREF(self->last_warning, warning);

    switch (status) {
    case JOB_OK:
        return 0;
    case JOB_JPEG_ERROR:
        PyErr_SetString(JpegError, self->err.message);
        return -1;
    case JOB_VALUE_ERROR:
        PyErr_SetString(PyExc_ValueError, job->message);
        return -1;
    default:
        PyErr_NoMemory();
        return -1;
    }
}

static PyObject *
Decompressor_header(Decompressor *self, PyObject *arg)
{
    Py_buffer data;
    if (PyObject_GetBuffer(arg, &data, PyBUF_SIMPLE) < 0)
        return NULL;
    Job job = {0};
    job.src = data.buf;
    job.len = (size_t)data.len;
    int rc = run_job(self, &job, run_header);
    PyBuffer_Release(&data);
    if (rc < 0)
        return NULL;
    return Py_BuildValue("iiii", job.height, job.width, job.components, job.color_space);
}

static PyObject *
Decompressor_decode_region(Decompressor *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 7) {
        PyErr_Format(PyExc_TypeError,
                     "decode_region(data, scale_denom, y0, y1, x0, x1, out) takes 7 arguments "
                     "(%zd given)", nargs);
        return NULL;
    }
    Job job = {0};
    long denom = PyLong_AsLong(args[1]);
    if (denom == -1 && PyErr_Occurred())
        return NULL;
    if (denom != 1 && denom != 2 && denom != 4 && denom != 8) {
        PyErr_Format(PyExc_ValueError, "scale_denom must be 1, 2, 4 or 8, got %ld", denom);
        return NULL;
    }
    job.denom = (int)denom;
    Py_ssize_t *coords[4] = {&job.y0, &job.y1, &job.x0, &job.x1};
    for (int i = 0; i < 4; i++) {
        *coords[i] = PyNumber_AsSsize_t(args[2 + i], PyExc_OverflowError);
        if (*coords[i] == -1 && PyErr_Occurred())
            return NULL;
    }
    Py_buffer data, out;
    if (PyObject_GetBuffer(args[0], &data, PyBUF_SIMPLE) < 0)
        return NULL;
    if (PyObject_GetBuffer(args[6], &out, PyBUF_WRITABLE) < 0) { /* C-contiguous bytes */
        PyBuffer_Release(&data);
        return NULL;
    }
    job.src = data.buf;
    job.len = (size_t)data.len;
    job.out = out.buf;
    job.out_len = out.len;
    int rc = run_job(self, &job, run_region);
    PyBuffer_Release(&out);
    PyBuffer_Release(&data);
    if (rc < 0)
        return NULL;
    return Py_BuildValue("iii", job.rows, job.cols, self->err.num_warnings);
}

static PyObject *
Decompressor_get_last_warning(Decompressor *self, void *closure)
{
    (void)closure;
    PyObject *value = self->last_warning ? self->last_warning : Py_None;
    Py_INCREF(value);
    return value;
}

static PyMethodDef Decompressor_methods[] = {
    {"header", (PyCFunction)Decompressor_header, METH_O,
     "header(data) -> (height, width, num_components, jpeg_color_space)"},
    {"decode_region", (PyCFunction)(void (*)(void))Decompressor_decode_region, METH_FASTCALL,
     "decode_region(data, scale_denom, y0, y1, x0, x1, out) -> (rows, cols, warnings)"},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef Decompressor_getset[] = {
    {"last_warning", (getter)Decompressor_get_last_warning, NULL,
     "The first libjpeg warning of the last call, or None.", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject DecompressorType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "fastdata.decode._jpegcrop.Decompressor",
    .tp_basicsize = sizeof(Decompressor),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Decompressor(max_pixels=1<<30, max_memory=1<<31, max_scans=1000): a reusable "
              "libjpeg decompressor; one per thread. See the module docstring.",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Decompressor_init,
    .tp_dealloc = (destructor)Decompressor_dealloc,
    .tp_methods = Decompressor_methods,
    .tp_getset = Decompressor_getset,
};

static struct PyModuleDef jpegcrop_module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "fastdata.decode._jpegcrop",
    .m_doc = module_doc,
    .m_size = -1,
};

PyMODINIT_FUNC
PyInit__jpegcrop(void)
{
    if (PyType_Ready(&DecompressorType) < 0)
        return NULL;
    PyObject *module = PyModule_Create(&jpegcrop_module);
    if (module == NULL)
        return NULL;
    JpegError = PyErr_NewExceptionWithDoc(
        "fastdata.decode._jpegcrop.JpegError",
        "libjpeg could not decode the data; the message is libjpeg's.", PyExc_ValueError, NULL);
    if (JpegError == NULL || PyModule_AddObject(module, "JpegError", JpegError) < 0) {
        Py_XDECREF(JpegError);
        Py_DECREF(module);
        return NULL;
    }
    Py_INCREF(JpegError); /* PyModule_AddObject stole one; the static keeps one */
    Py_INCREF(&DecompressorType);
    if (PyModule_AddObject(module, "Decompressor", (PyObject *)&DecompressorType) < 0) {
        Py_DECREF(&DecompressorType);
        Py_DECREF(module);
        return NULL;
    }
    if (PyModule_AddIntConstant(module, "LIBJPEG_TURBO_VERSION_NUMBER",
                                LIBJPEG_TURBO_VERSION_NUMBER) < 0) {
        Py_DECREF(module);
        return NULL;
    }
    return module;
}
