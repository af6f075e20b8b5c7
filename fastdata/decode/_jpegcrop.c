/*
 * fastdata.decode._jpegcrop: decode a rectangle of a JPEG, at a DCT scale, to packed RGB.
 *
 * Written against the libjpeg API of libjpeg-turbo (>= 1.5 for jpeg_crop_scanline and
 * jpeg_skip_scanlines; built and tested with 2.1.5). See the module docstring below.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <pthread.h>
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
"Decompressor(max_pixels=1<<30, max_memory=1<<31, max_scans=1000, splice=True)\n"
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
"    decode_region(data, scale, y0, y1, x0, x1, out) -> (rows, cols, warnings)\n"
"        Decode the image at DCT scale M/8: scale is (num, denom) with num/denom = M/8,\n"
"        M = 1..8 (libjpeg's scale_num/scale_denom), or an int d for 1/d (1, 2, 4 or 8).\n"
"        The scaled size is ceil(h * M / 8) x ceil(w * M / 8). It writes rows [y0, y1) and columns [x0, x1) of the\n"
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
"        A baseline Huffman JPEG whose restart intervals tile its MCU rows (DRI dividing\n"
"        the MCUs per row, or a whole number of rows) is not decoded from the top: the\n"
"        kernel copies the header and only the intervals covering the box (plus one\n"
"        scaled pixel where chroma is upsampled) into a sub-JPEG and decodes that. The\n"
"        pixels are the same; `spliced` counts the calls that did, `splice=False` (or\n"
"        setting the attribute) turns it off.\n"
"\n"
"    last_warning: str | None, the first libjpeg warning of the last call.\n"
"\n"
"JpegError(ValueError): libjpeg refused the data; the message is libjpeg's (or\n"
"    'empty file'). ValueError: a bad scale, an empty or out-of-range box, or an `out`\n"
"    buffer that is too small. The Decompressor stays usable after any error.\n");

#define DEFAULT_MAX_PIXELS (1ULL << 30)
#define DEFAULT_MAX_MEMORY (1ULL << 31)
#define DEFAULT_MAX_SCANS 1000

static PyObject *JpegError; /* set once, by the module's init */

/* A Decompressor is used by one call at a time: `busy` is claimed and released atomically, so of two threads
 * sharing one the second gets "in use", with or without the GIL (free-threaded Python). Its Python-object field
 * (last_warning) is read and replaced inside the object's critical section where there is no GIL. */
static inline int
claim(int *busy)
{
    return __atomic_exchange_n(busy, 1, __ATOMIC_ACQUIRE) == 0;
}

static inline void
unclaim(int *busy)
{
    __atomic_store_n(busy, 0, __ATOMIC_RELEASE);
}

#ifdef Py_GIL_DISABLED
#define OBJECT_LOCK(o) Py_BEGIN_CRITICAL_SECTION(o)
#define OBJECT_UNLOCK() Py_END_CRITICAL_SECTION()
#else
#define OBJECT_LOCK(o) {
#define OBJECT_UNLOCK() }
#endif

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
    unsigned char *splice_buf; /* the last sub-JPEG of a crop's restart intervals (grow-only) */
    size_t splice_size;
    int splice;                /* 1: decode_region may decode only the crop's restart intervals */
    unsigned long long spliced; /* calls that did */
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
    int eighths; /* the DCT scale is eighths / 8 (1..8) */
    Py_ssize_t y0, y1, x0, x1;
    unsigned char *out;
    Py_ssize_t out_len;
    /* out */
    int rows, cols;
    int height, width, components, color_space;
    char message[JMSG_LENGTH_MAX];
    int warnings; /* decode_batch: libjpeg's warnings for this job */
} Job;

static int
Decompressor_init(Decompressor *self, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"max_pixels", "max_memory", "max_scans", "splice", NULL};
    unsigned long long max_pixels = DEFAULT_MAX_PIXELS, max_memory = DEFAULT_MAX_MEMORY;
    int max_scans = DEFAULT_MAX_SCANS, splice = 1;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "|KKip:Decompressor", kwlist,
                                     &max_pixels, &max_memory, &max_scans, &splice))
        return -1;
    if (max_pixels == 0 || max_memory == 0 || max_memory > (unsigned long long)LONG_MAX ||
        max_scans <= 0) {
        PyErr_SetString(PyExc_ValueError, "the limits must be positive (max_memory < 2**63)");
        return -1;
    }
    if (!claim(&self->busy)) {
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
            unclaim(&self->busy);
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
    self->splice = splice;
    unclaim(&self->busy);
    return 0;
}

static void
Decompressor_dealloc(Decompressor *self)
{
    if (self->created)
        jpeg_destroy_decompress(&self->cinfo);
    PyMem_RawFree(self->scratch);
    PyMem_RawFree(self->splice_buf);
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

/* ---- the restart-interval splice ------------------------------------------------------
 *
 * A JPEG whose restart intervals tile its MCU rows (the interval divides the MCUs per row,
 * or is a whole number of rows) can have any rectangle of intervals decoded on its own:
 * each interval starts with fresh DC predictors and a byte-aligned bit stream. splice()
 * copies the header (SOF's size rewritten, APPn other than JFIF/Adobe and comments
 * dropped), the intervals that cover the region's MCU box with their RST markers
 * renumbered, and an EOI into splice_buf; decoding that sub-JPEG gives, inside the box,
 * the pixels of the full decode. Fancy upsampling treats the sub-image's edges as image
 * edges, so where chroma is upsampled the box keeps one scaled pixel of margin from every
 * side that is not an edge of the whole image. Anything unusual (no or non-tiling DRI,
 * progressive, arithmetic, multi-scan, an RST out of sequence, a truncated scan) returns
 * 0 and the whole file takes the ordinary path. Runs without the GIL; never longjmps. */

static inline size_t
div_up(size_t a, size_t b)
{
    return (a + b - 1) / b;
}

/* 1 when some component is upsampled by libjpeg's fancy upsampler at the current scale. */
static int
needs_margin(j_decompress_ptr cinfo)
{
#if JPEG_LIB_VERSION >= 70
    int min_h = cinfo->min_DCT_h_scaled_size, min_v = cinfo->min_DCT_v_scaled_size;
#else
    int min_h = cinfo->min_DCT_scaled_size, min_v = cinfo->min_DCT_scaled_size;
#endif
    if (!cinfo->do_fancy_upsampling || (min_h <= 1 && min_v <= 1))
        return 0; /* libjpeg-turbo upsamples by replication at scale 1/8 */
    for (int ci = 0; ci < cinfo->num_components; ci++) {
        jpeg_component_info *comp = &cinfo->comp_info[ci];
#if JPEG_LIB_VERSION >= 70
        int h = comp->DCT_h_scaled_size, v = comp->DCT_v_scaled_size;
#else
        int h = comp->DCT_scaled_size, v = comp->DCT_scaled_size;
#endif
        if (comp->h_samp_factor * h != cinfo->max_h_samp_factor * min_h ||
            comp->v_samp_factor * v != cinfo->max_v_samp_factor * min_v)
            return 1;
    }
    return 0;
}

static int
splice_reserve(Decompressor *self, size_t need)
{
    if (need <= self->splice_size)
        return 0;
    unsigned char *grown = PyMem_RawRealloc(self->splice_buf, need);
    if (grown == NULL)
        return -1;
    self->splice_buf = grown;
    self->splice_size = need;
    return 0;
}

/* After read_header and jpeg_calc_output_dimensions on job->src with a valid box: on
 * success job->src/len point at the sub-JPEG, the box is relative to it, and 1 returns. */
static int
splice(Decompressor *self, Job *job)
{
    j_decompress_ptr cinfo = &self->cinfo;
    if (!self->splice || cinfo->restart_interval == 0 || cinfo->progressive_mode ||
        cinfo->arith_code || cinfo->comps_in_scan != cinfo->num_components)
        return 0;
    const unsigned char *src = job->src;
    size_t len = job->len, width = cinfo->image_width, height = cinfo->image_height;
    size_t m = (size_t)job->eighths; /* scaled pixels = ceil(pixels * m / 8); an MCU is a multiple of 8 */
    size_t mcu_w = 8, mcu_h = 8; /* a one-component scan codes single blocks */
    if (cinfo->comps_in_scan > 1) {
        mcu_w = 8 * (size_t)cinfo->max_h_samp_factor;
        mcu_h = 8 * (size_t)cinfo->max_v_samp_factor;
    }
    size_t per_row = div_up(width, mcu_w), mcu_rows = div_up(height, mcu_h);
    size_t interval = cinfo->restart_interval, group = 1, intervals_per_row;
    if (per_row % interval == 0) {
        intervals_per_row = per_row / interval;
    } else if (interval % per_row == 0) {
        group = interval / per_row; /* MCU rows per interval; columns cannot be cut */
        intervals_per_row = 1;
    } else {
        return 0;
    }
    size_t total = div_up(per_row * mcu_rows, interval);

    /* The region plus margin, in scaled pixels, then MCUs, then whole intervals. */
    size_t out_w = cinfo->output_width, out_h = cinfo->output_height;
    size_t margin = (size_t)needs_margin(cinfo);
    size_t x0 = (size_t)job->x0, x1 = (size_t)job->x1, y0 = (size_t)job->y0, y1 = (size_t)job->y1;
    x0 = x0 > margin ? x0 - margin : 0;
    y0 = y0 > margin ? y0 - margin : 0;
    x1 = x1 + margin < out_w ? x1 + margin : out_w;
    y1 = y1 + margin < out_h ? y1 + margin : out_h;
    size_t smw = mcu_w * m / 8, smh = mcu_h * m / 8; /* MCU size in scaled pixels (exact: 8 divides mcu_w) */
    size_t col0 = 0, col1 = intervals_per_row; /* in intervals */
    if (group == 1) {
        col0 = x0 / smw / interval;
        col1 = div_up(div_up(x1, smw), interval);
        if (col1 > intervals_per_row)
            col1 = intervals_per_row;
    }
    /* libjpeg upsamples a component only 2 samples wide by replication, so the sub-image is
     * at least 2 * max_h_samp_factor + 1 scaled pixels wide, like the crop of the ordinary
     * path (or the whole width). */
    size_t min_w = 2 * (size_t)cinfo->max_h_samp_factor + 1;
    if (min_w > out_w)
        min_w = out_w;
    while (div_up(((col1 * interval * mcu_w < width ? col1 * interval * mcu_w : width) -
                   col0 * interval * mcu_w) * m, 8) < min_w) {
        if (col1 < intervals_per_row)
            col1++;
        else
            col0--; /* col0 > 0 here, or the width would be the whole image's */
    }
    size_t row0 = y0 / smh / group, row1 = div_up(div_up(y1, smh), group); /* in interval rows */
    size_t interval_rows = div_up(mcu_rows, group);
    if (row1 > interval_rows)
        row1 = interval_rows;
    if (col0 == 0 && col1 == intervals_per_row && row0 == 0 && row1 == interval_rows)
        return 0; /* the whole image: nothing to save */
    size_t first = row0 * intervals_per_row + col0, last = (row1 - 1) * intervals_per_row + col1 - 1;
    size_t needed = (row1 - row0) * (col1 - col0);

    /* Walk the header's segments up to SOS; libjpeg accepted them, but check every length. */
    size_t p = 2, sof = 0, entropy = 0;
    while (p + 4 <= len) {
        if (src[p] != 0xFF)
            return 0;
        unsigned int marker = src[p + 1];
        if (marker == 0xFF) {
            p++;
            continue;
        }
        size_t seglen = ((size_t)src[p + 2] << 8) | src[p + 3];
        if (marker < 0xC0 || marker == 0xD8 || (marker >= 0xD0 && marker <= 0xD7) || seglen < 2 ||
            p + 2 + seglen > len)
            return 0;
        if (marker == 0xC0 || marker == 0xC1) {
            if (seglen < 8)
                return 0;
            sof = p;
        } else if ((marker >= 0xC2 && marker <= 0xCF && marker != 0xC4 && marker != 0xC8 &&
                    marker != 0xCC)) {
            return 0; /* another SOF: not sequential Huffman */
        }
        if (marker == 0xDA) {
            entropy = p + 2 + seglen;
            break;
        }
        p += 2 + seglen;
    }
    if (entropy == 0 || sof == 0)
        return 0;

    if (splice_reserve(self, entropy + (len - entropy) + 2 * needed + 16) < 0)
        return 0; /* out of memory: the ordinary path needs none of this */
    unsigned char *dst = self->splice_buf;
    size_t n = 0, sof_out = 0;
    dst[n++] = 0xFF;
    dst[n++] = 0xD8;
    for (p = 2; p < entropy;) {
        unsigned int marker = src[p + 1];
        if (marker == 0xFF) {
            p++;
            continue;
        }
        size_t seglen = ((size_t)src[p + 2] << 8) | src[p + 3];
        /* Keep what decoding reads: tables, SOF, DRI, SOS, JFIF (APP0), Adobe (APP14). */
        if (!((marker >= 0xE1 && marker <= 0xED) || marker == 0xEF || marker == 0xFE)) {
            if (p == sof)
                sof_out = n;
            memcpy(dst + n, src + p, 2 + seglen);
            n += 2 + seglen;
        }
        p += 2 + seglen;
    }
    size_t sub_w = (col1 * interval * mcu_w < width ? col1 * interval * mcu_w : width) -
                   col0 * interval * mcu_w;
    size_t sub_h = ((row1 * group) * mcu_h < height ? (row1 * group) * mcu_h : height) -
                   row0 * group * mcu_h;
    if (group > 1)
        sub_w = width;
    dst[sof_out + 5] = (unsigned char)(sub_h >> 8);
    dst[sof_out + 6] = (unsigned char)sub_h;
    dst[sof_out + 7] = (unsigned char)(sub_w >> 8);
    dst[sof_out + 8] = (unsigned char)sub_w;

    /* One pass over the entropy-coded data, up to the end of the last interval needed. */
    size_t k = 0, start = entropy, q = entropy, copied = 0;
    for (;;) {
        const unsigned char *ff = q < len ? memchr(src + q, 0xFF, len - q) : NULL;
        if (ff == NULL || (size_t)(ff - src) + 1 >= len)
            return 0; /* truncated */
        size_t at = (size_t)(ff - src);
        unsigned int b = src[at + 1];
        if (b == 0x00) {
            q = at + 2;
            continue;
        }
        if (b == 0xFF) {
            q = at + 1;
            continue;
        }
        int is_rst = b >= 0xD0 && b <= 0xD7;
        if (is_rst ? (b - 0xD0u) != (k & 7u) : !(b == 0xD9 && k == total - 1))
            return 0; /* out of sequence, another scan, or too few intervals */
        if (k >= first) {
            size_t row = k / intervals_per_row, col = k % intervals_per_row;
            if (row >= row0 && row < row1 && col >= col0 && col < col1) {
                memcpy(dst + n, src + start, at - start);
                n += at - start;
                if (copied + 1 < needed) {
                    dst[n++] = 0xFF;
                    dst[n++] = (unsigned char)(0xD0 + (copied & 7u));
                }
                copied++;
            }
        }
        if (k == last || !is_rst)
            break;
        k++;
        start = q = at + 2;
    }
    if (copied != needed)
        return 0;
    dst[n++] = 0xFF;
    dst[n++] = 0xD9;

    job->src = dst;
    job->len = n;
    size_t dy = row0 * group * mcu_h * m / 8, dx = col0 * interval * mcu_w * m / 8;
    job->y0 -= (Py_ssize_t)dy;
    job->y1 -= (Py_ssize_t)dy;
    job->x0 -= (Py_ssize_t)dx;
    job->x1 -= (Py_ssize_t)dx;
    return 1;
}

/* Output colour space and scale, then the output size; refuses a box outside it. */
static int
setup_output(Decompressor *self, Job *job)
{
    j_decompress_ptr cinfo = &self->cinfo;
    int cmyk = cinfo->jpeg_color_space == JCS_CMYK || cinfo->jpeg_color_space == JCS_YCCK;
    cinfo->out_color_space = cmyk ? JCS_CMYK : JCS_RGB;
    cinfo->scale_num = (unsigned int)job->eighths; /* M/8: libjpeg-turbo's scaled IDCTs (1..16 over 8) */
    cinfo->scale_denom = 8;
    /* jpeg_read_header reset the rest to the defaults Pillow uses too: JDCT_ISLOW IDCT,
     * fancy upsampling, no block smoothing change, no quantization. */
    jpeg_calc_output_dimensions(cinfo);
    Py_ssize_t out_h = cinfo->output_height, out_w = cinfo->output_width;
    if (job->y0 < 0 || job->x0 < 0 || job->y1 > out_h || job->x1 > out_w ||
        job->y0 >= job->y1 || job->x0 >= job->x1) {
        snprintf(job->message, sizeof(job->message),
                 "box rows [%zd, %zd) x columns [%zd, %zd) is empty or outside the "
                 "%zd x %zd image at scale %d/8", job->y0, job->y1, job->x0, job->x1,
                 out_h, out_w, job->eighths);
        return JOB_VALUE_ERROR;
    }
    return JOB_OK;
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
    if (status == JOB_OK)
        status = setup_output(self, job);
    if (status != JOB_OK)
        goto done;
    Py_ssize_t rows = job->y1 - job->y0, cols = job->x1 - job->x0;
    if (job->out_len / 3 / cols < rows) {
        snprintf(job->message, sizeof(job->message),
                 "out holds %zd bytes, the %zd x %zd region needs %zd", job->out_len, rows,
                 cols, rows * cols * 3);
        status = JOB_VALUE_ERROR;
        goto done;
    }
    if (splice(self, job)) { /* decode the sub-JPEG of the box's intervals instead */
        jpeg_abort_decompress(cinfo);
        self->spliced++;
        status = read_header(self, job);
        if (status == JOB_OK)
            status = setup_output(self, job);
        if (status != JOB_OK)
            goto done;
    }
    int cmyk = cinfo->jpeg_color_space == JCS_CMYK || cinfo->jpeg_color_space == JCS_YCCK;
    Py_ssize_t out_w = cinfo->output_width;
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
    if (!claim(&self->busy)) {
        PyErr_SetString(PyExc_RuntimeError,
                        "Decompressor is in use by another thread; use one per thread");
        return -1;
    }
    self->err.num_warnings = 0;
    self->err.first_warning[0] = '\0';
    self->err.message[0] = '\0';
    job->message[0] = '\0';
    int status;
    Py_BEGIN_ALLOW_THREADS
    status = fn(self, job);
    Py_END_ALLOW_THREADS
    job->warnings = self->err.num_warnings;

    int rc = -1;
    PyObject *warning = Py_None;
    Py_INCREF(Py_None);
    if (self->err.num_warnings > 0) {
        Py_DECREF(Py_None);
        warning = PyUnicode_DecodeLatin1(self->err.first_warning,
                                         (Py_ssize_t)strlen(self->err.first_warning), NULL);
    }
    if (warning != NULL) {
        OBJECT_LOCK(self);
        Py_XSETREF(self->last_warning, warning);
        OBJECT_UNLOCK();
        switch (status) {
        case JOB_OK:
            rc = 0;
            break;
        case JOB_JPEG_ERROR:
            PyErr_SetString(JpegError, self->err.message);
            break;
        case JOB_VALUE_ERROR:
            PyErr_SetString(PyExc_ValueError, job->message);
            break;
        default:
            PyErr_NoMemory();
        }
    }
    unclaim(&self->busy); /* last: the error message and warnings above are this call's */
    return rc;
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

/* The scale argument: an int d (1/d, d = 1, 2, 4, 8) or a pair (num, denom) equal to M/8, M = 1..8. Sets
 * *eighths to M; on a bad value sets ValueError/TypeError naming `what` and returns -1. */
static int
parse_scale(PyObject *value, int *eighths, const char *what)
{
    long num = 1, denom;
    if (PyTuple_Check(value) && PyTuple_GET_SIZE(value) == 2) {
        num = PyLong_AsLong(PyTuple_GET_ITEM(value, 0));
        if (num == -1 && PyErr_Occurred())
            return -1;
        denom = PyLong_AsLong(PyTuple_GET_ITEM(value, 1));
    } else {
        denom = PyLong_AsLong(value);
    }
    if (denom == -1 && PyErr_Occurred())
        return -1;
    if (num >= 1 && denom >= 1 && denom <= 8 && 8 % denom == 0 && num * (8 / denom) <= 8) {
        *eighths = (int)(num * (8 / denom));
        return 0;
    }
    PyErr_Format(PyExc_ValueError, "%s: the scale must be M/8 with M = 1..8 (an int 1, 2, 4 or 8 for 1/d, or a "
                 "(num, denom) pair), got %ld/%ld", what, num, denom);
    return -1;
}

static PyObject *
Decompressor_decode_region(Decompressor *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 7) {
        PyErr_Format(PyExc_TypeError,
                     "decode_region(data, scale, y0, y1, x0, x1, out) takes 7 arguments "
                     "(%zd given)", nargs);
        return NULL;
    }
    Job job = {0};
    if (parse_scale(args[1], &job.eighths, "decode_region") < 0)
        return NULL;
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
    return Py_BuildValue("iii", job.rows, job.cols, job.warnings);
}

static PyObject *
Decompressor_get_last_warning(Decompressor *self, void *closure)
{
    (void)closure;
    PyObject *value;
    OBJECT_LOCK(self);
    value = self->last_warning ? self->last_warning : Py_None;
    Py_INCREF(value);
    OBJECT_UNLOCK();
    return value;
}

static PyMethodDef Decompressor_methods[] = {
    {"header", (PyCFunction)Decompressor_header, METH_O,
     "header(data) -> (height, width, num_components, jpeg_color_space)"},
    {"decode_region", (PyCFunction)(void (*)(void))Decompressor_decode_region, METH_FASTCALL,
     "decode_region(data, scale, y0, y1, x0, x1, out) -> (rows, cols, warnings)"},
    {NULL, NULL, 0, NULL},
};

static PyObject *
Decompressor_get_spliced(Decompressor *self, void *closure)
{
    (void)closure;
    return PyLong_FromUnsignedLongLong(self->spliced);
}

static PyObject *
Decompressor_get_splice(Decompressor *self, void *closure)
{
    (void)closure;
    return PyBool_FromLong(self->splice);
}

static int
Decompressor_set_splice(Decompressor *self, PyObject *value, void *closure)
{
    (void)closure;
    int flag = value == NULL ? -1 : PyObject_IsTrue(value);
    if (flag < 0) {
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_TypeError, "splice cannot be deleted");
        return -1;
    }
    self->splice = flag;
    return 0;
}

static PyGetSetDef Decompressor_getset[] = {
    {"spliced", (getter)Decompressor_get_spliced, NULL,
     "How many decode_region calls decoded only the box's restart intervals.", NULL},
    {"splice", (getter)Decompressor_get_splice, (setter)Decompressor_set_splice,
     "Whether decode_region may decode only the box's restart intervals (default True).", NULL},
    {"last_warning", (getter)Decompressor_get_last_warning, NULL,
     "The first libjpeg warning of the last call, or None.", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject DecompressorType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "fastdata.decode._jpegcrop.Decompressor",
    .tp_basicsize = sizeof(Decompressor),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Decompressor(max_pixels=1<<30, max_memory=1<<31, max_scans=1000, splice=True): a reusable "
              "libjpeg decompressor; one per thread. See the module docstring.",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Decompressor_init,
    .tp_dealloc = (destructor)Decompressor_dealloc,
    .tp_methods = Decompressor_methods,
    .tp_getset = Decompressor_getset,
};

/* ---- decode_batch: many regions, the GIL released once, optionally several threads ---- */

typedef struct {
    Decompressor **decompressors;
    Job *jobs;
    int *status;
    Py_ssize_t n;
    Py_ssize_t next; /* the next job to take (atomic) */
} Batch;

typedef struct {
    Batch *batch;
    Decompressor *self;
} Worker;

static void *
batch_worker(void *arg)
{
    Worker *worker = arg;
    Batch *batch = worker->batch;
    Decompressor *self = worker->self;
    for (;;) {
        Py_ssize_t i = __atomic_fetch_add(&batch->next, 1, __ATOMIC_RELAXED);
        if (i >= batch->n)
            break;
        Job *job = &batch->jobs[i];
        self->err.num_warnings = 0;
        self->err.first_warning[0] = '\0';
        self->err.message[0] = '\0';
        job->message[0] = '\0';
        if (job->len == 0) { /* the message run_job gives */
            snprintf(job->message, sizeof(job->message), "empty file");
            batch->status[i] = JOB_JPEG_ERROR;
            continue;
        }
        int status = run_region(self, job);
        if (status == JOB_JPEG_ERROR)
            memcpy(job->message, self->err.message, sizeof(job->message));
        else if (status == JOB_OK && self->err.num_warnings > 0)
            memcpy(job->message, self->err.first_warning, sizeof(job->message));
        job->warnings = self->err.num_warnings;
        batch->status[i] = status;
    }
    return NULL;
}

PyDoc_STRVAR(decode_batch_doc,
"decode_batch(decompressors, jobs) -> list of (status, warnings, message)\n"
"\n"
"Run decode_region for every job (data, scale, y0, y1, x0, x1, out) with the GIL\n"
"released once, on len(decompressors) threads (the calling one and len - 1 started for\n"
"the call), each with its own Decompressor. status: 0 decoded (warnings and the first\n"
"warning's text in message, '' when none), 1 libjpeg refused the data (message is\n"
"libjpeg's), 2 a bad box or buffer (message says which), 3 out of memory. Bad argument\n"
"types raise before anything is decoded.");

static PyObject *
jpegcrop_decode_batch(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    (void)module;
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "decode_batch(decompressors, jobs) takes 2 arguments");
        return NULL;
    }
    PyObject *decs = PySequence_Fast(args[0], "decompressors must be a sequence of Decompressor");
    if (decs == NULL)
        return NULL;
    PyObject *jobs_seq = PySequence_Fast(args[1], "jobs must be a sequence of tuples");
    if (jobs_seq == NULL) {
        Py_DECREF(decs);
        return NULL;
    }
    Py_ssize_t nthreads = PySequence_Fast_GET_SIZE(decs), n = PySequence_Fast_GET_SIZE(jobs_seq);
    PyObject *result = NULL;
    Decompressor **decompressors = PyMem_Calloc((size_t)(nthreads ? nthreads : 1), sizeof(*decompressors));
    Job *jobs = PyMem_Calloc((size_t)(n ? n : 1), sizeof(Job));
    int *status = PyMem_Calloc((size_t)(n ? n : 1), sizeof(int));
    Py_buffer *buffers = PyMem_Calloc((size_t)(2 * n + 1), sizeof(Py_buffer));
    Worker *workers = PyMem_Calloc((size_t)(nthreads ? nthreads : 1), sizeof(Worker));
    pthread_t *threads = PyMem_Calloc((size_t)(nthreads ? nthreads : 1), sizeof(pthread_t));
    Py_ssize_t held = 0, marked = 0;
    if (!decompressors || !jobs || !status || !buffers || !workers || !threads) {
        PyErr_NoMemory();
        goto cleanup;
    }
    if (nthreads < 1) {
        PyErr_SetString(PyExc_ValueError, "decode_batch needs at least one Decompressor");
        goto cleanup;
    }
    for (Py_ssize_t t = 0; t < nthreads; t++) {
        PyObject *item = PySequence_Fast_GET_ITEM(decs, t);
        if (!PyObject_TypeCheck(item, &DecompressorType) || !((Decompressor *)item)->created) {
            PyErr_SetString(PyExc_TypeError, "decompressors must be initialized Decompressor objects");
            goto cleanup;
        }
        for (Py_ssize_t u = 0; u < t; u++)
            if (decompressors[u] == (Decompressor *)item) {
                PyErr_SetString(PyExc_ValueError, "each thread needs its own Decompressor");
                goto cleanup;
            }
        decompressors[t] = (Decompressor *)item;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *tuple = PySequence_Fast_GET_ITEM(jobs_seq, i);
        if (!PyTuple_Check(tuple) || PyTuple_GET_SIZE(tuple) != 7) {
            PyErr_Format(PyExc_TypeError, "jobs[%zd] must be a tuple (data, scale, y0, y1, x0, x1, out)", i);
            goto cleanup;
        }
        if (parse_scale(PyTuple_GET_ITEM(tuple, 1), &jobs[i].eighths, "decode_batch") < 0)
            goto cleanup;
        Py_ssize_t *coords[4] = {&jobs[i].y0, &jobs[i].y1, &jobs[i].x0, &jobs[i].x1};
        for (int c = 0; c < 4; c++) {
            *coords[c] = PyNumber_AsSsize_t(PyTuple_GET_ITEM(tuple, 2 + c), PyExc_OverflowError);
            if (*coords[c] == -1 && PyErr_Occurred())
                goto cleanup;
        }
        if (PyObject_GetBuffer(PyTuple_GET_ITEM(tuple, 0), &buffers[2 * i], PyBUF_SIMPLE) < 0)
            goto cleanup;
        held = 2 * i + 1;
        if (PyObject_GetBuffer(PyTuple_GET_ITEM(tuple, 6), &buffers[2 * i + 1], PyBUF_WRITABLE) < 0)
            goto cleanup;
        held = 2 * i + 2;
        jobs[i].src = buffers[2 * i].buf;
        jobs[i].len = (size_t)buffers[2 * i].len;
        jobs[i].out = buffers[2 * i + 1].buf;
        jobs[i].out_len = buffers[2 * i + 1].len;
    }
    for (; marked < nthreads; marked++) {
        if (!claim(&decompressors[marked]->busy)) {
            PyErr_SetString(PyExc_RuntimeError, "a Decompressor is in use by another thread");
            goto cleanup;
        }
    }
    Batch batch = {decompressors, jobs, status, n, 0};
    Py_BEGIN_ALLOW_THREADS
    Py_ssize_t started = 0;
    for (Py_ssize_t t = 0; t < nthreads; t++) {
        workers[t].batch = &batch;
        workers[t].self = decompressors[t];
    }
    for (Py_ssize_t t = 1; t < nthreads && t < n; t++) {
        if (pthread_create(&threads[t], NULL, batch_worker, &workers[t]) != 0)
            break; /* fewer threads: the others take the work */
        started = t;
    }
    batch_worker(&workers[0]);
    for (Py_ssize_t t = 1; t <= started; t++)
        pthread_join(threads[t], NULL);
    Py_END_ALLOW_THREADS
    result = PyList_New(n);
    if (result == NULL)
        goto cleanup;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *message = PyUnicode_DecodeLatin1(jobs[i].message, (Py_ssize_t)strlen(jobs[i].message), NULL);
        PyObject *entry = message ? Py_BuildValue("(iiN)", status[i], jobs[i].warnings, message) : NULL;
        if (entry == NULL) {
            Py_CLEAR(result);
            goto cleanup;
        }
        PyList_SET_ITEM(result, i, entry);
    }
cleanup:
    for (Py_ssize_t t = 0; t < marked; t++)
        unclaim(&decompressors[t]->busy);
    for (Py_ssize_t b = 0; b < held; b++)
        PyBuffer_Release(&buffers[b]);
    PyMem_Free(threads);
    PyMem_Free(workers);
    PyMem_Free(buffers);
    PyMem_Free(status);
    PyMem_Free(jobs);
    PyMem_Free(decompressors);
    Py_DECREF(jobs_seq);
    Py_DECREF(decs);
    return result;
}

/* ---- philox_uniforms: the per-sample generators' first draws for a whole batch ---------------
 *
 * numpy's Generator(Philox(key=k, counter=[0, 0, p, i])).random(n) for many (k, p, i) at once: the draws of
 * RandomResizedCrop's crop sampling for a batch of seeded samples (fastdata.sampler.seeding), without making a
 * Generator per sample. Philox4x64-10 as Random123 and numpy define it: the counter is incremented before each
 * block of four 64-bit outputs, and a double is (x >> 11) * 2**-53. Bit for bit numpy's values. */

static inline uint64_t
mulhilo64(uint64_t a, uint64_t b, uint64_t *hi)
{
    __uint128_t product = (__uint128_t)a * b;
    *hi = (uint64_t)(product >> 64);
    return (uint64_t)product;
}

static void
philox4x64_10(const uint64_t ctr_in[4], const uint64_t key_in[2], uint64_t out[4])
{
    uint64_t c0 = ctr_in[0], c1 = ctr_in[1], c2 = ctr_in[2], c3 = ctr_in[3];
    uint64_t k0 = key_in[0], k1 = key_in[1];
    for (int round = 0; round < 10; round++) {
        if (round > 0) {
            k0 += 0x9E3779B97F4A7C15ULL;
            k1 += 0xBB67AE8584CAA73BULL;
        }
        uint64_t hi0, hi1;
        uint64_t lo0 = mulhilo64(0xD2E7470EE14C6C93ULL, c0, &hi0);
        uint64_t lo1 = mulhilo64(0xCA5A826395121157ULL, c2, &hi1);
        uint64_t n0 = hi1 ^ c1 ^ k0, n2 = hi0 ^ c3 ^ k1;
        c0 = n0;
        c1 = lo1;
        c2 = n2;
        c3 = lo0;
    }
    out[0] = c0;
    out[1] = c1;
    out[2] = c2;
    out[3] = c3;
}

PyDoc_STRVAR(philox_uniforms_doc,
"philox_uniforms(keys, positions, indices, out) -> None\n"
"\n"
"keys, positions, indices: uint64 buffers of n values each; out: a writable float64 buffer of n * d values.\n"
"Row i of out (d values) becomes numpy's\n"
"Generator(Philox(key=keys[i], counter=[0, 0, positions[i], indices[i]])).random(d). The GIL is released.");

static PyObject *
jpegcrop_philox_uniforms(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    (void)module;
    if (nargs != 4) {
        PyErr_SetString(PyExc_TypeError, "philox_uniforms(keys, positions, indices, out) takes 4 arguments");
        return NULL;
    }
    Py_buffer keys = {0}, positions = {0}, indices = {0}, out = {0};
    PyObject *result = NULL;
    if (PyObject_GetBuffer(args[0], &keys, PyBUF_SIMPLE) < 0)
        return NULL;
    if (PyObject_GetBuffer(args[1], &positions, PyBUF_SIMPLE) < 0)
        goto done;
    if (PyObject_GetBuffer(args[2], &indices, PyBUF_SIMPLE) < 0)
        goto done;
    if (PyObject_GetBuffer(args[3], &out, PyBUF_WRITABLE) < 0)
        goto done;
    Py_ssize_t n = keys.len / 8;
    if (keys.len % 8 || positions.len != keys.len || indices.len != keys.len || out.len % 8 ||
        (n > 0 && (out.len / 8) % n) || (n == 0 && out.len != 0)) {
        PyErr_SetString(PyExc_ValueError, "philox_uniforms: keys, positions and indices must hold n uint64 values "
                        "and out n * d float64 values");
        goto done;
    }
    Py_ssize_t draws = n ? out.len / 8 / n : 0;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 0; i < n; i++) {
        uint64_t key[2], ctr[4], block[4];
        memcpy(&key[0], (const char *)keys.buf + 8 * i, 8);
        key[1] = 0;
        ctr[0] = 0;
        ctr[1] = 0;
        memcpy(&ctr[2], (const char *)positions.buf + 8 * i, 8);
        memcpy(&ctr[3], (const char *)indices.buf + 8 * i, 8);
        double *row = (double *)out.buf + i * draws;
        for (Py_ssize_t k = 0; k < draws; k++) {
            if (k % 4 == 0) { /* numpy increments the 256-bit counter, then makes four outputs */
                if (++ctr[0] == 0 && ++ctr[1] == 0 && ++ctr[2] == 0)
                    ++ctr[3];
                philox4x64_10(ctr, key, block);
            }
            row[k] = (double)(block[k % 4] >> 11) * (1.0 / 9007199254740992.0);
        }
    }
    Py_END_ALLOW_THREADS
    result = Py_NewRef(Py_None);
done:
    if (out.obj)
        PyBuffer_Release(&out);
    if (indices.obj)
        PyBuffer_Release(&indices);
    if (positions.obj)
        PyBuffer_Release(&positions);
    PyBuffer_Release(&keys);
    return result;
}

static PyMethodDef jpegcrop_functions[] = {
    {"decode_batch", (PyCFunction)(void (*)(void))jpegcrop_decode_batch, METH_FASTCALL, decode_batch_doc},
    {"philox_uniforms", (PyCFunction)(void (*)(void))jpegcrop_philox_uniforms, METH_FASTCALL, philox_uniforms_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef jpegcrop_module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "fastdata.decode._jpegcrop",
    .m_doc = module_doc,
    .m_size = -1,
    .m_methods = jpegcrop_functions,
};

PyMODINIT_FUNC
PyInit__jpegcrop(void)
{
    if (PyType_Ready(&DecompressorType) < 0)
        return NULL;
    PyObject *module = PyModule_Create(&jpegcrop_module);
    if (module == NULL)
        return NULL;
#ifdef Py_GIL_DISABLED
    PyUnstable_Module_SetGIL(module, Py_MOD_GIL_NOT_USED); /* safe without it: see claim() */
#endif
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
