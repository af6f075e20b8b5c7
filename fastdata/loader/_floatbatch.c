/*
 * fastdata.loader._floatbatch: uint8 NHWC images -> normalized float32 NHWC, one pass, GIL released.
 *
 * out[n, y, x, c] = in[n, y, x', c] * scale[c] + offset[c], with x' = W - 1 - x where flip[n] is set.
 * With scale = 1 / (255 * std) and offset = -mean / std this is ToFloat + Normalize (+ a horizontal
 * flip) of a whole batch in one read of the uint8 pixels and one write of the floats (streaming stores with SSE2).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

/* dst[j] = src[j] * scale[(phase + j) % 3] + offset[(phase + j) % 3] for j < count: one run of interleaved RGB
 * values whose first value is channel `phase`. The float batch is far larger than any cache, so with SSE2 the
 * floats go out with streaming stores (no read of the destination lines first: half the memory traffic of
 * ordinary stores); each value is the same product and sum as the scalar loop's (no fused multiply-add). */
static void convert_run(const uint8_t *src, float *dst, Py_ssize_t count, int phase, const float *scale,
                        const float *offset)
{
    Py_ssize_t j = 0;
#if defined(__SSE2__)
    for (; j < count && ((uintptr_t)(dst + j) & 15) != 0; j++) { /* up to an aligned float */
        dst[j] = (float)src[j] * scale[phase] + offset[phase];
        phase = phase == 2 ? 0 : phase + 1;
    }
    if (count - j >= 48) {
        int first = phase; /* the channel of value j; 48 values later it is again */
        __m128 s[3], o[3];
        for (int v = 0; v < 3; v++) {
            float sv[4], ov[4];
            for (int k = 0; k < 4; k++) {
                sv[k] = scale[(first + 4 * v + k) % 3];
                ov[k] = offset[(first + 4 * v + k) % 3];
            }
            s[v] = _mm_loadu_ps(sv);
            o[v] = _mm_loadu_ps(ov);
        }
        const __m128i zero = _mm_setzero_si128();
        for (; j + 48 <= count; j += 48) {
            for (int b = 0; b < 3; b++) { /* 16 bytes -> 4 vectors of 4 floats */
                __m128i bytes = _mm_loadu_si128((const __m128i *)(src + j + 16 * b));
                __m128i lo = _mm_unpacklo_epi8(bytes, zero), hi = _mm_unpackhi_epi8(bytes, zero);
                __m128i words[4] = {_mm_unpacklo_epi16(lo, zero), _mm_unpackhi_epi16(lo, zero),
                                    _mm_unpacklo_epi16(hi, zero), _mm_unpackhi_epi16(hi, zero)};
                for (int q = 0; q < 4; q++) {
                    int v = (4 * b + q) % 3;
                    __m128 x = _mm_add_ps(_mm_mul_ps(_mm_cvtepi32_ps(words[q]), s[v]), o[v]);
                    _mm_stream_ps(dst + j + 16 * b + 4 * q, x);
                }
            }
        }
    }
#endif
    for (; j < count; j++) { /* the tail (and everything without SSE2) */
        dst[j] = (float)src[j] * scale[phase] + offset[phase];
        phase = phase == 2 ? 0 : phase + 1;
    }
}

/* One image: its rows in order, or each row's pixels reversed first (a horizontal flip) through `row`. */
static void normalize_image(const uint8_t *src, float *dst, Py_ssize_t height, Py_ssize_t width, const float *scale,
                            const float *offset, int flip, uint8_t *row)
{
    Py_ssize_t stride = width * 3;
    if (!flip) {
        convert_run(src, dst, height * stride, 0, scale, offset); /* rows are whole pixels: one run */
        return;
    }
    for (Py_ssize_t y = 0; y < height; y++) {
        const uint8_t *in = src + y * stride;
        for (Py_ssize_t x = 0; x < width; x++)
            memcpy(row + 3 * x, in + 3 * (width - 1 - x), 3);
        convert_run(row, dst + y * stride, stride, 0, scale, offset);
    }
}

PyDoc_STRVAR(normalize_doc,
"normalize(src, dst, n, height, width, scale, offset, flips)\n\n"
"src: uint8 buffer of n*height*width*3 bytes (NHWC, RGB); dst: writable float32 buffer of the same\n"
"element count; scale, offset: 3 floats each; flips: bytes of length n (nonzero = flip image n).");

static PyObject *normalize(PyObject *self, PyObject *args)
{
    Py_buffer src, dst, flips;
    Py_ssize_t n, height, width;
    float scale[3], offset[3];
    if (!PyArg_ParseTuple(args, "y*w*nnn(fff)(fff)y*", &src, &dst, &n, &height, &width, &scale[0], &scale[1],
                          &scale[2], &offset[0], &offset[1], &offset[2], &flips))
        return NULL;
    PyObject *result = NULL;
    if (n < 0 || height <= 0 || width <= 0 || height > PY_SSIZE_T_MAX / width / 3 ||
        (n > 0 && height * width * 3 > PY_SSIZE_T_MAX / n)) {
        PyErr_SetString(PyExc_ValueError, "normalize: n, height and width must be positive and not overflow");
        goto done;
    }
    Py_ssize_t count = n * height * width * 3;
    if (src.len < count || dst.len < count * (Py_ssize_t)sizeof(float) || flips.len < n) {
        PyErr_Format(PyExc_ValueError, "normalize: buffers too small for %zd images of %zdx%zdx3", n, height, width);
        goto done;
    }
    const uint8_t *in = (const uint8_t *)src.buf;
    float *out = (float *)dst.buf;
    const uint8_t *flip = (const uint8_t *)flips.buf;
    uint8_t *row = PyMem_RawMalloc((size_t)width * 3);
    if (row == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    Py_BEGIN_ALLOW_THREADS
    Py_ssize_t image = height * width * 3;
    for (Py_ssize_t i = 0; i < n; i++)
        normalize_image(in + i * image, out + i * image, height, width, scale, offset, flip[i] != 0, row);
#if defined(__SSE2__)
    _mm_sfence(); /* the streaming stores are visible before the batch is handed on */
#endif
    Py_END_ALLOW_THREADS
    PyMem_RawFree(row);
    result = Py_NewRef(Py_None);
done:
    PyBuffer_Release(&src);
    PyBuffer_Release(&dst);
    PyBuffer_Release(&flips);
    return result;
}

static PyMethodDef methods[] = {
    {"normalize", normalize, METH_VARARGS, normalize_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_floatbatch", "uint8 NHWC batches to normalized float32, one pass.", -1, methods,
};

PyMODINIT_FUNC PyInit__floatbatch(void)
{
    PyObject *m = PyModule_Create(&module);
#ifdef Py_GIL_DISABLED
    if (m != NULL)
        PyUnstable_Module_SetGIL(m, Py_MOD_GIL_NOT_USED); /* no module state: each call works on its arguments */
#endif
    return m;
}
