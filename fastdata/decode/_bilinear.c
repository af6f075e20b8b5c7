/*
 * fastdata.decode._bilinear: PIL's antialiased bilinear resize of interleaved RGB, straight into the caller's slot.
 *
 * resize(src, out, box) gives, value for value, what Pillow gives for
 *     Image.fromarray(src).resize((W, H), Image.BILINEAR, box=box, reducing_gap=None)
 * (torchvision's RandomResizedCrop on a PIL image, timm's training transform): the same triangle filter whose
 * support grows with the shrink, the same coefficients (double precision, normalized per output pixel, then
 * rounded to 22-bit fixed point), the same two passes in the same order (horizontal over the rows the vertical pass
 * needs, each value rounded to 8 bits, then vertical), the same integer sums. What differs is only the work around
 * it: no conversion to PIL's 4-byte pixels and back, no copies, the output written into `out` (a batch slot), the
 * vertical pass vectorized (every value of a row shares its coefficients), and the GIL released throughout.
 *
 * The algorithm is the published one (Pillow's libImaging/Resample.c describes it); this file is our own code.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#define PRECISION_BITS (32 - 8 - 2) /* Pillow's: 8 bits of result, 2 of headroom in an int32 sum */
#define HALF (1 << (PRECISION_BITS - 1))

#if defined(__GNUC__) && !defined(__clang__) && (defined(__x86_64__) || defined(__i386__)) && defined(__linux__)
#define MULTIVERSION __attribute__((target_clones("avx2", "default")))
#else
#define MULTIVERSION
#endif

static inline uint8_t clip8(int32_t sum)
{
    int32_t v = sum >> PRECISION_BITS;
    return (uint8_t)(v < 0 ? 0 : (v > 255 ? 255 : v));
}

static double triangle(double x)
{
    if (x < 0.0)
        x = -x;
    return x < 1.0 ? 1.0 - x : 0.0;
}

/* The taps of each of `out_size` outputs over `in_size` inputs, for the span [in0, in1): first input (`bounds[2i]`),
 * count (`bounds[2i + 1]`), fixed-point weights (`weights[i * ksize ...]`). Returns ksize, or 0 when out of memory.
 * in0 and in1 are single precision, as Pillow receives the box. */
static int coefficients(int in_size, float in0, float in1, int out_size, int **bounds_out, int32_t **weights_out)
{
    double scale = (double)(in1 - in0) / out_size;
    double filterscale = scale < 1.0 ? 1.0 : scale;
    double support = 1.0 * filterscale; /* the triangle's support is 1 */
    int ksize = (int)ceil(support) * 2 + 1;
    if (out_size > INT_MAX / (ksize * (int)sizeof(double)))
        return 0;
    double *k = malloc((size_t)ksize * sizeof(double));
    int *bounds = malloc((size_t)out_size * 2 * sizeof(int));
    int32_t *weights = malloc((size_t)out_size * ksize * sizeof(int32_t));
    if (k == NULL || bounds == NULL || weights == NULL) {
        free(k);
        free(bounds);
        free(weights);
        return 0;
    }
    double ss = 1.0 / filterscale;
    for (int xx = 0; xx < out_size; xx++) {
        double center = in0 + (xx + 0.5) * scale;
        int xmin = (int)(center - support + 0.5);
        if (xmin < 0)
            xmin = 0;
        int xmax = (int)(center + support + 0.5);
        if (xmax > in_size)
            xmax = in_size;
        xmax -= xmin;
        double ww = 0.0;
        for (int x = 0; x < xmax; x++) {
            k[x] = triangle((x + xmin - center + 0.5) * ss);
            ww += k[x];
        }
        for (int x = 0; x < ksize; x++) {
            double w = x < xmax ? (ww != 0.0 ? k[x] / ww : k[x]) : 0.0;
            /* the triangle is never negative: Pillow's rounding of a positive weight */
            weights[xx * ksize + x] = (int32_t)(0.5 + w * (1 << PRECISION_BITS));
        }
        bounds[xx * 2] = xmin;
        bounds[xx * 2 + 1] = xmax;
    }
    free(k);
    *bounds_out = bounds;
    *weights_out = weights;
    return ksize;
}

/* Output pixel xx of one row: the three sums over its taps (the reference's loop, one value at a time). */
static inline void horizontal_pixel(const uint8_t *row, uint8_t *o, int xx, int ksize, const int *bounds,
                                    const int32_t *weights)
{
    const uint8_t *p = row + (Py_ssize_t)bounds[xx * 2] * 3;
    const int32_t *k = weights + (Py_ssize_t)xx * ksize;
    int n = bounds[xx * 2 + 1];
    int32_t s0 = HALF, s1 = HALF, s2 = HALF;
    for (int x = 0; x < n; x++, p += 3) {
        s0 += p[0] * k[x];
        s1 += p[1] * k[x];
        s2 += p[2] * k[x];
    }
    o[xx * 3] = clip8(s0);
    o[xx * 3 + 1] = clip8(s1);
    o[xx * 3 + 2] = clip8(s2);
}

static void horizontal_scalar(const uint8_t *src, Py_ssize_t src_stride, int first, int rows, uint8_t *dst,
                              Py_ssize_t dst_stride, int out_w, int ksize, const int *bounds, const int32_t *weights)
{
    for (int y = 0; y < rows; y++) {
        const uint8_t *row = src + (Py_ssize_t)(first + y) * src_stride;
        for (int xx = 0; xx < out_w; xx++)
            horizontal_pixel(row, dst + (Py_ssize_t)y * dst_stride, xx, ksize, bounds, weights);
    }
}

#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && defined(__linux__)
#include <immintrin.h>
#define HAVE_AVX2_PATH 1

/* The same sums for one output pixel of two rows at once, in one AVX2 register: lanes 0-2 the upper row's red,
 * green and blue, lanes 4-6 the lower row's (lanes 3 and 7 carry the next byte of each row, summed and dropped).
 * Both rows share the pixel's taps and weights, so each tap is one broadcast weight, and each lane is the
 * reference's int32 sum, tap by tap in the same order: the same values. The 4-byte read of a row's last pixel
 * passes the row's end by one byte: inside `src` except for the last row of `src`, whose last pixel (when it is a
 * tap) the caller leaves to the scalar path. */
__attribute__((target("avx2"))) static inline void two_rows_pixel(const uint8_t *p0, const uint8_t *p1,
                                                                   uint8_t *o0, uint8_t *o1, const int32_t *k,
                                                                   int n)
{
    __m256i sum = _mm256_set1_epi32(HALF);
    for (int x = 0; x < n; x++, p0 += 3, p1 += 3) {
        uint32_t v0, v1;
        memcpy(&v0, p0, 4);
        memcpy(&v1, p1, 4);
        __m256i values = _mm256_cvtepu8_epi32(_mm_cvtsi64_si128((long long)(((uint64_t)v1 << 32) | v0)));
        sum = _mm256_add_epi32(sum, _mm256_mullo_epi32(values, _mm256_set1_epi32(k[x])));
    }
    const __m256i zero = _mm256_setzero_si256(), top = _mm256_set1_epi32(255);
    sum = _mm256_min_epi32(_mm256_max_epi32(_mm256_srai_epi32(sum, PRECISION_BITS), zero), top);
    int32_t lanes[8];
    _mm256_storeu_si256((__m256i *)lanes, sum);
    o0[0] = (uint8_t)lanes[0];
    o0[1] = (uint8_t)lanes[1];
    o0[2] = (uint8_t)lanes[2];
    o1[0] = (uint8_t)lanes[4];
    o1[1] = (uint8_t)lanes[5];
    o1[2] = (uint8_t)lanes[6];
}

__attribute__((target("avx2"))) static void horizontal_avx2(const uint8_t *src, Py_ssize_t src_stride, int first,
                                                             int rows, int in_rows, uint8_t *dst,
                                                             Py_ssize_t dst_stride, int out_w, int ksize,
                                                             const int *bounds, const int32_t *weights)
{
    int in_w = (int)(src_stride / 3);
    int y = 0;
    for (; y + 1 < rows; y += 2) {
        const uint8_t *row0 = src + (Py_ssize_t)(first + y) * src_stride, *row1 = row0 + src_stride;
        uint8_t *o0 = dst + (Py_ssize_t)y * dst_stride, *o1 = o0 + dst_stride;
        int lower_is_last = first + y + 1 == in_rows - 1;
        for (int xx = 0; xx < out_w; xx++) {
            int x0 = bounds[xx * 2], n = bounds[xx * 2 + 1];
            if (lower_is_last && x0 + n == in_w) {
                horizontal_pixel(row0, o0, xx, ksize, bounds, weights);
                horizontal_pixel(row1, o1, xx, ksize, bounds, weights);
                continue;
            }
            two_rows_pixel(row0 + x0 * 3, row1 + x0 * 3, o0 + xx * 3, o1 + xx * 3,
                           weights + (Py_ssize_t)xx * ksize, n);
        }
    }
    if (y < rows) /* an odd row out */
        horizontal_scalar(src, src_stride, first + y, 1, dst + (Py_ssize_t)y * dst_stride, dst_stride, out_w, ksize,
                          bounds, weights);
}
#endif

/* Rows [first, first + rows) of src (in_rows rows of width in_w) resized horizontally into dst (width out_w). */
static void horizontal(const uint8_t *src, Py_ssize_t src_stride, int first, int rows, int in_rows, uint8_t *dst,
                       Py_ssize_t dst_stride, int out_w, int ksize, const int *bounds, const int32_t *weights)
{
#ifdef HAVE_AVX2_PATH
    if (__builtin_cpu_supports("avx2")) {
        horizontal_avx2(src, src_stride, first, rows, in_rows, dst, dst_stride, out_w, ksize, bounds, weights);
        return;
    }
#endif
    horizontal_scalar(src, src_stride, first, rows, dst, dst_stride, out_w, ksize, bounds, weights);
}

/* Every output row of the vertical pass: `values` values a row, each a sum over the same taps (vectorized). */
MULTIVERSION
static void vertical(const uint8_t *src, Py_ssize_t src_stride, uint8_t *dst, Py_ssize_t dst_stride, int out_h,
                     Py_ssize_t values, int ksize, const int *bounds, const int32_t *weights, int32_t *sums)
{
    for (int yy = 0; yy < out_h; yy++) {
        const int32_t *k = weights + (Py_ssize_t)yy * ksize;
        const uint8_t *rows = src + (Py_ssize_t)bounds[yy * 2] * src_stride;
        int n = bounds[yy * 2 + 1];
        for (Py_ssize_t i = 0; i < values; i++)
            sums[i] = HALF;
        for (int y = 0; y < n; y++) {
            const uint8_t *row = rows + (Py_ssize_t)y * src_stride;
            const int32_t w = k[y];
            for (Py_ssize_t i = 0; i < values; i++)
                sums[i] += row[i] * w;
        }
        uint8_t *o = dst + (Py_ssize_t)yy * dst_stride;
        for (Py_ssize_t i = 0; i < values; i++)
            o[i] = clip8(sums[i]);
    }
}

static int rgb_buffer(PyObject *obj, Py_buffer *view, int writable, const char *name)
{
    if (PyObject_GetBuffer(obj, view, PyBUF_STRIDES | PyBUF_FORMAT | (writable ? PyBUF_WRITABLE : 0)) < 0) {
        PyErr_Clear();
        PyErr_Format(PyExc_ValueError, "%s must be a %sC-contiguous uint8 (height, width, 3) array", name,
                     writable ? "writable " : "");
        return -1;
    }
    if (view->ndim != 3 || view->shape[2] != 3 || view->itemsize != 1 || !PyBuffer_IsContiguous(view, 'C') ||
        (view->format != NULL && strcmp(view->format, "B") != 0)) {
        PyErr_Format(PyExc_ValueError, "%s must be a C-contiguous uint8 (height, width, 3) array", name);
        PyBuffer_Release(view);
        return -1;
    }
    if (view->shape[0] < 1 || view->shape[1] < 1 || view->shape[0] > INT_MAX / 4 || view->shape[1] > INT_MAX / 4) {
        PyErr_Format(PyExc_ValueError, "%s must not be empty or larger than %d pixels a side", name, INT_MAX / 4);
        PyBuffer_Release(view);
        return -1;
    }
    return 0;
}

/* Whether the vertical pass goes first: Pillow 13's rule (the height shrinks by more than twice as many pixels as
 * the width), when `pillow13` is set; earlier Pillows always go horizontal first. */
static int vertical_first(int in_h, int in_w, int out_h, int out_w, int pillow13)
{
    return pillow13 && in_h - out_h > 0 && in_h - out_h > (in_w - out_w) * 2;
}

/* Returns 0, or -1 when memory runs out. Runs without the GIL. */
static int resize_rgb(const uint8_t *src, int in_h, int in_w, uint8_t *out, int out_h, int out_w, const float box[4],
                      int pillow13)
{
    int need_h = out_w != in_w || box[0] != 0.0f || box[2] != (float)out_w;
    int need_v = out_h != in_h || box[1] != 0.0f || box[3] != (float)out_h;
    Py_ssize_t in_stride = (Py_ssize_t)in_w * 3, out_stride = (Py_ssize_t)out_w * 3;
    if (!need_h && !need_v) {
        memcpy(out, src, (size_t)in_h * in_stride);
        return 0;
    }
    int *vbounds = NULL, *hbounds = NULL;
    int32_t *vweights = NULL, *hweights = NULL;
    uint8_t *temp = NULL;
    int32_t *sums = NULL;
    int status = -1, vk = 0, hk = 0;
    if (need_v && (vk = coefficients(in_h, box[1], box[3], out_h, &vbounds, &vweights)) == 0)
        goto done;
    if (need_h && (hk = coefficients(in_w, box[0], box[2], out_w, &hbounds, &hweights)) == 0)
        goto done;
    if (!need_v) { /* one horizontal pass over every row, straight into out */
        horizontal(src, in_stride, 0, in_h, in_h, out, out_stride, out_w, hk, hbounds, hweights);
        status = 0;
        goto done;
    }
    if (need_h && vertical_first(in_h, in_w, out_h, out_w, pillow13)) {
        /* every column, out_h rows; then the horizontal pass from there into out */
        temp = malloc((size_t)out_h * in_stride);
        sums = malloc((size_t)in_stride * sizeof(int32_t));
        if (temp == NULL || sums == NULL)
            goto done;
        vertical(src, in_stride, temp, in_stride, out_h, in_stride, vk, vbounds, vweights, sums);
        horizontal(temp, in_stride, 0, out_h, out_h, out, out_stride, out_w, hk, hbounds, hweights);
        status = 0;
        goto done;
    }
    const uint8_t *vsrc = src;
    Py_ssize_t vstride = in_stride;
    if (need_h) { /* only the rows the vertical pass reads: first..last */
        int first = vbounds[0], last = vbounds[out_h * 2 - 2] + vbounds[out_h * 2 - 1];
        temp = malloc((size_t)(last - first) * out_stride);
        if (temp == NULL)
            goto done;
        horizontal(src, in_stride, first, last - first, in_h, temp, out_stride, out_w, hk, hbounds, hweights);
        for (int i = 0; i < out_h; i++)
            vbounds[i * 2] -= first;
        vsrc = temp;
        vstride = out_stride;
    }
    sums = malloc((size_t)out_stride * sizeof(int32_t));
    if (sums == NULL)
        goto done;
    vertical(vsrc, vstride, out, out_stride, out_h, out_stride, vk, vbounds, vweights, sums);
    status = 0;
done:
    free(vbounds);
    free(vweights);
    free(hbounds);
    free(hweights);
    free(temp);
    free(sums);
    return status;
}

PyDoc_STRVAR(resize_doc,
             "resize(src, out, box, pillow13)\n--\n\n"
             "PIL's antialiased bilinear resize of ``box`` of ``src`` into ``out`` (uint8 RGB, C-contiguous; the\n"
             "values of ``Image.resize(out size, BILINEAR, box=box, reducing_gap=None)``). ``box`` is PIL's\n"
             "``(left, upper, right, lower)`` in ``src``'s pixels, taken in single precision as PIL takes it.\n"
             "``pillow13``: order the two passes as Pillow 13 does (vertical first where the height shrinks by more\n"
             "than twice as many pixels as the width), else as earlier Pillows (horizontal first).\n"
             "The GIL is released while it runs.");

static PyObject *resize(PyObject *self, PyObject *args)
{
    PyObject *src_obj, *out_obj;
    float box[4];
    int pillow13;
    if (!PyArg_ParseTuple(args, "OO(ffff)p:resize", &src_obj, &out_obj, &box[0], &box[1], &box[2], &box[3],
                          &pillow13))
        return NULL;
    Py_buffer src, out;
    if (rgb_buffer(src_obj, &src, 0, "src") < 0)
        return NULL;
    if (rgb_buffer(out_obj, &out, 1, "out") < 0) {
        PyBuffer_Release(&src);
        return NULL;
    }
    int in_h = (int)src.shape[0], in_w = (int)src.shape[1];
    if (!(box[0] >= 0.0f && box[1] >= 0.0f && box[2] <= (float)in_w && box[3] <= (float)in_h && box[2] >= box[0] &&
          box[3] >= box[1])) {
        PyObject *shown = Py_BuildValue("(dddd)", (double)box[0], (double)box[1], (double)box[2], (double)box[3]);
        if (shown != NULL) {
            PyErr_Format(PyExc_ValueError,
                         "box %R (left, upper, right, lower) must lie inside the %dx%d source, left <= right, "
                         "upper <= lower", shown, in_w, in_h);
            Py_DECREF(shown);
        }
        PyBuffer_Release(&src);
        PyBuffer_Release(&out);
        return NULL;
    }
    int status;
    Py_BEGIN_ALLOW_THREADS
    status = resize_rgb(src.buf, in_h, in_w, out.buf, (int)out.shape[0], (int)out.shape[1], box, pillow13);
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&src);
    PyBuffer_Release(&out);
    if (status < 0)
        return PyErr_NoMemory();
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"resize", resize, METH_VARARGS, resize_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_bilinear", "PIL's antialiased bilinear resize of RGB, into the caller's buffer.", -1,
    methods,
};

PyMODINIT_FUNC PyInit__bilinear(void)
{
    PyObject *m = PyModule_Create(&module);
#ifdef Py_GIL_DISABLED
    if (m != NULL)
        PyUnstable_Module_SetGIL(m, Py_MOD_GIL_NOT_USED); /* no module state: each call works on its arguments */
#endif
    return m;
}
