/*
 * fastdata.loader._floatbatch: uint8 NHWC images -> normalized float32 NHWC, one pass, GIL released.
 *
 * out[n, y, x, c] = in[n, y, x', c] * scale[c] + offset[c], with x' = W - 1 - x where flip[n] is set.
 * With scale = 1 / (255 * std) and offset = -mean / std this is ToFloat + Normalize (+ a horizontal
 * flip) of a whole batch in one read of the uint8 pixels and one write of the floats.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

static void normalize_row(const uint8_t *src, float *dst, Py_ssize_t width, const float *scale,
                          const float *offset, int flip)
{
    const float s0 = scale[0], s1 = scale[1], s2 = scale[2];
    const float o0 = offset[0], o1 = offset[1], o2 = offset[2];
    if (!flip) {
        for (Py_ssize_t x = 0; x < width; x++) {
            dst[3 * x + 0] = (float)src[3 * x + 0] * s0 + o0;
            dst[3 * x + 1] = (float)src[3 * x + 1] * s1 + o1;
            dst[3 * x + 2] = (float)src[3 * x + 2] * s2 + o2;
        }
    } else {
        const uint8_t *last = src + 3 * (width - 1);
        for (Py_ssize_t x = 0; x < width; x++) {
            dst[3 * x + 0] = (float)last[-3 * x + 0] * s0 + o0;
            dst[3 * x + 1] = (float)last[-3 * x + 1] * s1 + o1;
            dst[3 * x + 2] = (float)last[-3 * x + 2] * s2 + o2;
        }
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
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 0; i < n; i++) {
        for (Py_ssize_t y = 0; y < height; y++) {
            Py_ssize_t row = (i * height + y) * width * 3;
            normalize_row(in + row, out + row, width, scale, offset, flip[i] != 0);
        }
    }
    Py_END_ALLOW_THREADS
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

PyMODINIT_FUNC PyInit__floatbatch(void) { return PyModule_Create(&module); }
