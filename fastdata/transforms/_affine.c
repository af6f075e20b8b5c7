/*
 * fastdata.transforms._affine: PIL's affine warp with its bicubic filter on RGB uint8 (H, W, 3) images, GIL released.
 *
 * The semantics are those of Pillow's Image.transform(size, AFFINE, (a, b, c, d, e, f), BICUBIC, fillcolor=fill),
 * written here from the maths:
 *   - the output pixel (x, y) samples the input at (xs, ys) = (a (x + 0.5) + b (y + 0.5) + c,
 *     d (x + 0.5) + e (y + 0.5) + f), computed in double precision in that order;
 *   - it is `fill` when the sample point is outside [0, W) x [0, H), decided per pixel;
 *   - else, with u = xs - 0.5 = i + s (i = floor(u), 0 <= s < 1) and likewise v = ys - 0.5 = j + t, the value is the
 *     cubic convolution (Keys' kernel with a = -1) of the 4 x 4 taps at columns i - 1 .. i + 2 and rows j - 1 .. j + 2,
 *     each index clamped into the image (the edge pixels repeated), first along each row, then down the column
 *     (Pillow repeats the last row it read for a row past the edge: the same as clamping);
 *   - the result is 0 at or below 0, 255 at or above 255, else truncated toward zero.
 * The kernel's weights are computed once per output pixel, for a whole row at a time in vectorized loops; a pixel's
 * 16 taps are filtered with its three channels in the lanes of one vector (SSE2 on x86-64, gcc's vector extensions
 * elsewhere). The cubic through taps p0..p3 is p1 + w0 (p0 - p1) + w2 (p2 - p1) + w3 (p3 - p1): exactly p1 on a flat
 * patch, as Pillow's nested form is (a weighted sum of the four would round some flat pixels a level down before the
 * truncation). The arithmetic is float32 where Pillow's is double: a value that lands within a rounding of an
 * integer may truncate to the other side (one level; 0.01% of the pixels of a shear, fewer of a rotation).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <string.h>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#if !defined(__GNUC__)
#error "fastdata.transforms._affine needs gcc's or clang's vector extensions (the build then goes on without it)"
#endif

typedef float lanes __attribute__((vector_size(16))); /* the three channels of a tap, and one unused lane */

/* The tap of 4 bytes at p (its RGB and the byte after it, which only fills the unused lane) as floats. */
static inline lanes tap(const uint8_t *p)
{
#if defined(__SSE2__) /* gcc would widen a byte vector lane by lane: two unpacks do it at once */
    int32_t word;
    memcpy(&word, p, 4);
    const __m128i zero = _mm_setzero_si128();
    return (lanes)_mm_cvtepi32_ps(_mm_unpacklo_epi16(_mm_unpacklo_epi8(_mm_cvtsi32_si128(word), zero), zero));
#else
    typedef uint8_t bytes4 __attribute__((vector_size(4)));
    typedef int32_t ints4 __attribute__((vector_size(16)));
    bytes4 b;
    memcpy(&b, p, 4);
    return __builtin_convertvector(__builtin_convertvector(b, ints4), lanes);
#endif
}

/* Keys' cubic kernel with a = -1 (Pillow's affine bicubic) at a fraction s in [0, 1): the weights of the taps at
 * -1, +1 and +2 (plan_row computes them); the tap at 0 weighs 1 minus their sum. */
typedef struct {
    float before, after, second;
} weights;

/* The cubic through the taps p0..p3 at -1, 0, 1, 2, lane by lane, as p1 plus the weighted differences from p1:
 * exactly p1 on a flat run (a weighted sum of the four would round some flat pixels a level down before the
 * truncation). */
static inline lanes cubic(lanes p0, lanes p1, lanes p2, lanes p3, weights w)
{
    return p1 + w.before * (p0 - p1) + w.after * (p2 - p1) + w.second * (p3 - p1);
}

/* One output pixel from 4 rows of 13 readable bytes (4 taps of RGB, and one more byte) at first + r * stride: the
 * cubic along each row (weights ws), then down the four results (weights wt), clipped and truncated as Pillow does. */
static inline void bicubic_pixel(const uint8_t *first, Py_ssize_t stride, weights ws, weights wt, uint8_t *out)
{
    lanes across[4];
    for (int r = 0; r < 4; r++) {
        const uint8_t *p = first + r * stride;
        across[r] = cubic(tap(p), tap(p + 3), tap(p + 6), tap(p + 9), ws);
    }
    lanes v = cubic(across[0], across[1], across[2], across[3], wt);
#if defined(__SSE2__) /* clipped to 0..255, then truncated: Pillow's rule, in four instructions */
    __m128i wide = _mm_cvttps_epi32(_mm_min_ps(_mm_max_ps((__m128)v, _mm_setzero_ps()), _mm_set1_ps(255.0f)));
    __m128i bytes = _mm_packus_epi16(_mm_packs_epi32(wide, wide), wide);
    int32_t word = _mm_cvtsi128_si32(bytes);
    memcpy(out, &word, 3); /* little-endian: the first three bytes are R, G, B */
#else
    for (int c = 0; c < 3; c++)
        out[c] = v[c] <= 0.0f ? 0 : v[c] >= 255.0f ? 255 : (uint8_t)v[c];
#endif
}

static inline int clamp(int i, int size) { return i < 0 ? 0 : i >= size ? size - 1 : i; }

/* Where each output pixel of a row samples, for the whole row in loops that gcc vectorizes (-fno-trapping-math lets it
 * evaluate both sides of a select): the first tap's column and row (column OUTSIDE: the sample point is outside),
 * and the kernel's weights across and down. */
#define OUTSIDE (-3)

typedef struct {
    double *u, *v;              /* the sample point less half a pixel (-2 where it is outside) */
    int *column, *row;          /* the first tap's */
    float *s, *t;               /* the fractions across and down */
    float *across[3], *down[3]; /* the kernel's weights: before, after, second */
} row_plan;

static void locate(const double m[6], int y, int width, int height, double *restrict u, double *restrict v)
{
    const double yc = (double)y + 0.5;
    for (int x = 0; x < width; x++) {
        const double xc = (double)x + 0.5;
        const double xs = m[0] * xc + m[1] * yc + m[2]; /* Pillow's expression, evaluated in its order */
        const double ys = m[3] * xc + m[4] * yc + m[5];
        const int in = (xs >= 0.0) & (xs < (double)width) & (ys >= 0.0) & (ys < (double)height);
        u[x] = in ? xs - 0.5 : -2.0; /* -0.5 <= u < width - 0.5 inside; a value made outside never overflows an int */
        v[x] = in ? ys - 0.5 : -2.0;
    }
}

/* first[x] = floor(u[x]) - 1 (OUTSIDE for u = -2), frac[x] = u[x] - floor(u[x]). */
static void split(const double *restrict u, int *restrict first, float *restrict frac, int n)
{
    for (int x = 0; x < n; x++) {
        double whole = (double)(int)u[x];   /* toward zero ... */
        whole -= whole > u[x] ? 1.0 : 0.0; /* ... then down: floor */
        first[x] = (int)whole - 1;
        frac[x] = (float)(u[x] - whole);
    }
}

static void kernel_weights(const float *restrict frac, float *restrict before, float *restrict after,
                           float *restrict second, int n)
{
    for (int x = 0; x < n; x++) {
        const float s = frac[x];
        before[x] = s * (-1.0f + s * (2.0f - s));
        after[x] = s * (1.0f + s * (1.0f - s));
        second[x] = s * s * (s - 1.0f);
    }
}

static void plan_row(const row_plan *p, int y, int width, int height, const double m[6])
{
    locate(m, y, width, height, p->u, p->v);
    split(p->u, p->column, p->s, width);
    split(p->v, p->row, p->t, width);
    kernel_weights(p->s, p->across[0], p->across[1], p->across[2], width);
    kernel_weights(p->t, p->down[0], p->down[1], p->down[2], width);
}

/* The whole warp: dst (height x width x 3) from src (height x width x 3), both C-contiguous; plan: room for a row. */
static void warp(const uint8_t *src, uint8_t *dst, int height, int width, const double m[6], const uint8_t fill[3],
                 row_plan *plan)
{
    const Py_ssize_t stride = (Py_ssize_t)width * 3;
    uint8_t patch[4 * 16]; /* the taps of a pixel near the edge, clamped (rows of 16 bytes: 12 used, 1 read) */
    for (int y = 0; y < height; y++) {
        plan_row(plan, y, width, height, m);
        uint8_t *out = dst + y * stride;
        for (int x = 0; x < width; x++, out += 3) {
            if (plan->column[x] == OUTSIDE) {
                out[0] = fill[0];
                out[1] = fill[1];
                out[2] = fill[2];
                continue;
            }
            const int i = plan->column[x], j = plan->row[x]; /* the first tap's column and row */
            const weights ws = {plan->across[0][x], plan->across[1][x], plan->across[2][x]};
            const weights wt = {plan->down[0][x], plan->down[1][x], plan->down[2][x]};
            if (i >= 0 && i + 4 < width && j >= 0 && j + 3 < height) { /* + 4: the byte after the last tap exists */
                bicubic_pixel(src + j * stride + (Py_ssize_t)i * 3, stride, ws, wt, out);
            } else {
                memset(patch, 0, sizeof(patch));
                for (int r = 0; r < 4; r++) {
                    const uint8_t *line = src + clamp(j + r, height) * stride;
                    for (int k = 0; k < 4; k++)
                        memcpy(patch + 16 * r + 3 * k, line + 3 * clamp(i + k, width), 3);
                }
                bicubic_pixel(patch, 16, ws, wt, out);
            }
        }
    }
}

/* A buffer checked to be a C-contiguous uint8 (H, W, 3) array (writable when `writable`), or NULL with the error. */
static int get_image(PyObject *obj, Py_buffer *view, const char *name, int writable)
{
    if (!PyObject_CheckBuffer(obj)) {
        PyErr_Format(PyExc_TypeError, "bicubic: %s must be a uint8 numpy array of shape (H, W, 3), got %.100s", name,
                     Py_TYPE(obj)->tp_name);
        return -1;
    }
    if (PyObject_GetBuffer(obj, view, PyBUF_RECORDS_RO) < 0) /* strides and format: any layout is accepted here */
        return -1;
    const char *format = view->format ? view->format : "B";
    if (format[0] == '@' || format[0] == '=' || format[0] == '<' || format[0] == '>' || format[0] == '!')
        format++;
    if (strcmp(format, "B") != 0) {
        PyErr_Format(PyExc_TypeError, "bicubic: %s must be uint8 (buffer format 'B'), got format '%s'; convert it "
                     "with image.astype(np.uint8)", name, view->format);
    } else if (view->ndim != 3) {
        PyErr_Format(PyExc_ValueError, "bicubic: %s must be RGB of shape (H, W, 3), got %d dimensions", name,
                     view->ndim);
    } else if (view->shape[2] != 3) {
        PyErr_Format(PyExc_ValueError, "bicubic: %s must be RGB of shape (H, W, 3), got (%zd, %zd, %zd)", name,
                     view->shape[0], view->shape[1], view->shape[2]);
    } else if (!PyBuffer_IsContiguous(view, 'C')) {
        PyErr_Format(PyExc_ValueError, "bicubic: %s must be C-contiguous; pass np.ascontiguousarray(%s)", name, name);
    } else if (writable && view->readonly) {
        PyErr_Format(PyExc_ValueError, "bicubic: %s must be writable", name);
    } else {
        return 0;
    }
    PyBuffer_Release(view);
    return -1;
}

PyDoc_STRVAR(bicubic_doc,
"bicubic(image, out, coeffs, fill)\n\n"
"out[...] = PIL's image.transform((W, H), AFFINE, coeffs, BICUBIC, fillcolor=fill) for RGB uint8 arrays.\n\n"
"image: C-contiguous uint8 (H, W, 3); out: a writable C-contiguous uint8 array of the same shape, not overlapping\n"
"image; coeffs: 6 finite floats (a, b, c, d, e, f), PIL's output-to-input map; fill: 3 ints in 0..255.\n"
"Raises TypeError for a non-array or a dtype other than uint8, ValueError for a bad shape, layout, coefficient\n"
"or fill.");

static PyObject *bicubic(PyObject *self, PyObject *args)
{
    PyObject *image_obj, *out_obj;
    double m[6];
    int fill_in[3];
    if (!PyArg_ParseTuple(args, "OO(dddddd)(iii):bicubic", &image_obj, &out_obj, &m[0], &m[1], &m[2], &m[3], &m[4],
                          &m[5], &fill_in[0], &fill_in[1], &fill_in[2]))
        return NULL;
    for (int k = 0; k < 6; k++) {
        if (!isfinite(m[k])) {
            PyErr_Format(PyExc_ValueError, "bicubic: coeffs must be finite numbers, got %s at index %d",
                         isnan(m[k]) ? "nan" : m[k] > 0 ? "inf" : "-inf", k);
            return NULL;
        }
    }
    uint8_t fill[3];
    for (int k = 0; k < 3; k++) {
        if (fill_in[k] < 0 || fill_in[k] > 255) {
            PyErr_Format(PyExc_ValueError, "bicubic: fill must be 3 ints in 0..255, got %d at index %d", fill_in[k],
                         k);
            return NULL;
        }
        fill[k] = (uint8_t)fill_in[k];
    }
    Py_buffer image, out;
    if (get_image(image_obj, &image, "image", 0) < 0)
        return NULL;
    if (get_image(out_obj, &out, "out", 1) < 0) {
        PyBuffer_Release(&image);
        return NULL;
    }
    PyObject *result = NULL;
    const char *a = image.buf, *b = out.buf;
    if (out.shape[0] != image.shape[0] || out.shape[1] != image.shape[1]) {
        PyErr_Format(PyExc_ValueError, "bicubic: out must have the image's shape (%zd, %zd, 3), got (%zd, %zd, 3)",
                     image.shape[0], image.shape[1], out.shape[0], out.shape[1]);
    } else if (image.len > 0 && a < b + out.len && b < a + image.len) {
        PyErr_SetString(PyExc_ValueError, "bicubic: out must not overlap image; pass a new array");
    } else if (image.shape[0] > INT_MAX / 4 || image.shape[1] > INT_MAX / 4) {
        PyErr_Format(PyExc_ValueError, "bicubic: image of %zd x %zd pixels is too large (at most %d a side)",
                     image.shape[0], image.shape[1], INT_MAX / 4);
    } else {
        int height = (int)image.shape[0], width = (int)image.shape[1];
        size_t n = width > 0 ? (size_t)width : 1;
        void *scratch = PyMem_RawMalloc(n * 14 * sizeof(float)); /* 2 double, 2 int and 8 float arrays of a row */
        if (scratch == NULL) {
            PyErr_NoMemory();
        } else {
            double *d = (double *)scratch; /* first: aligned for doubles */
            int *i = (int *)(d + 2 * n);
            float *f = (float *)(i + 2 * n);
            row_plan plan = {d, d + n, i, i + n, f, f + n, {f + 2 * n, f + 3 * n, f + 4 * n},
                             {f + 5 * n, f + 6 * n, f + 7 * n}};
            Py_BEGIN_ALLOW_THREADS
            warp((const uint8_t *)image.buf, (uint8_t *)out.buf, height, width, m, fill, &plan);
            Py_END_ALLOW_THREADS
            PyMem_RawFree(scratch);
            result = Py_NewRef(Py_None);
        }
    }
    PyBuffer_Release(&image);
    PyBuffer_Release(&out);
    return result;
}

static PyMethodDef methods[] = {
    {"bicubic", bicubic, METH_VARARGS, bicubic_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_affine", "PIL's affine bicubic warp on RGB uint8 images.", -1, methods,
};

PyMODINIT_FUNC PyInit__affine(void) { return PyModule_Create(&module); }
