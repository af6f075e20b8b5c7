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
 * The kernel's weights are computed once per output pixel, for a whole row at a time in vectorized loops. A row none
 * of whose sample points has a fraction down (every row of a shear along x) is filtered from the 4 taps of one input
 * row, and one with no fraction across (a shear along y) from the 4 of one column: a zero fraction makes the other
 * weights zero, so these are the same values as the 4 x 4 taps give, in a quarter of the work. A pixel's taps are
 * filtered with its three channels in the lanes of one vector (SSE2 on x86-64, gcc's vector extensions elsewhere);
 * on a CPU with AVX2 two neighbouring pixels share a 256-bit vector, with AVX-512 four share a 512-bit one (checked at
 * import; the build targets any x86-64), with the same operations in the same order: every kernel writes the same
 * bytes (bicubic(..., kernel=) picks one of KERNELS; the tests compare them). The cubic through taps p0..p3 is
 * p1 + w0 (p0 - p1) + w2 (p2 - p1) + w3 (p3 - p1): exactly p1 on a flat
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

/* A pixel's value clipped to 0..255, then truncated (Pillow's rule), its three channels stored at out. */
static inline void store(lanes v, uint8_t *out)
{
#if defined(__SSE2__) /* in four instructions */
    __m128i wide = _mm_cvttps_epi32(_mm_min_ps(_mm_max_ps((__m128)v, _mm_setzero_ps()), _mm_set1_ps(255.0f)));
    __m128i bytes = _mm_packus_epi16(_mm_packs_epi32(wide, wide), wide);
    int32_t word = _mm_cvtsi128_si32(bytes);
    memcpy(out, &word, 3); /* little-endian: the first three bytes are R, G, B */
#else
    for (int c = 0; c < 3; c++)
        out[c] = v[c] <= 0.0f ? 0 : v[c] >= 255.0f ? 255 : (uint8_t)v[c];
#endif
}

/* One output pixel from 4 rows of 13 readable bytes (4 taps of RGB, and one more byte) at first + r * stride: the
 * cubic along each row (weights ws), then down the four results (weights wt). */
static inline void bicubic_pixel(const uint8_t *first, Py_ssize_t stride, weights ws, weights wt, uint8_t *out)
{
    lanes across[4];
    for (int r = 0; r < 4; r++) {
        const uint8_t *p = first + r * stride;
        across[r] = cubic(tap(p), tap(p + 3), tap(p + 6), tap(p + 9), ws);
    }
    store(cubic(across[0], across[1], across[2], across[3], wt), out);
}

static inline int clamp(int i, int size) { return i < 0 ? 0 : i >= size ? size - 1 : i; }

/* Where each output pixel of a row samples, for the whole row in loops that gcc vectorizes (-fno-trapping-math lets it
 * evaluate both sides of a select): the first tap's column and row (column OUTSIDE: the sample point is outside),
 * and the kernel's weights across and down. Inlined into each kernel (always_inline), so that the AVX2 and AVX-512
 * kernels' copies are vectorized four doubles wide (no contraction into fused multiply-adds: the same values). */
#define OUTSIDE (-3)
#define INLINE static inline __attribute__((always_inline))

typedef struct {
    double *u, *v;              /* the sample point less half a pixel (-2 where it is outside) */
    int *column, *row;          /* the first tap's */
    float *s, *t;               /* the fractions across and down */
    float *across[3], *down[3]; /* the kernel's weights: before, after, second */
} row_plan;

INLINE void locate(const double m[6], int y, int width, int height, double *restrict u, double *restrict v)
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
INLINE void split(const double *restrict u, int *restrict first, float *restrict frac, int n)
{
    for (int x = 0; x < n; x++) {
        double whole = (double)(int)u[x];   /* toward zero ... */
        whole -= whole > u[x] ? 1.0 : 0.0; /* ... then down: floor */
        first[x] = (int)whole - 1;
        frac[x] = (float)(u[x] - whole);
    }
}

INLINE void kernel_weights(const float *restrict frac, float *restrict before, float *restrict after,
                           float *restrict second, int n)
{
    for (int x = 0; x < n; x++) {
        const float s = frac[x];
        before[x] = s * (-1.0f + s * (2.0f - s));
        after[x] = s * (1.0f + s * (1.0f - s));
        second[x] = s * s * (s - 1.0f);
    }
}

/* How a row's pixels are filtered. A fraction of 0 makes the kernel's weights 0 (the cubic is then its tap at 0,
 * exactly), so a row none of whose sample points has a fraction down (a shear along x: t = 0) needs only the taps of
 * one input row, and one none of whose points has a fraction across (a shear along y) only those of one column: the
 * same values as the 4 x 4 taps, in a quarter of the work. Outside points have both fractions 0. */
enum { TWO_D, ALONG_ROW, DOWN_COLUMN };

INLINE int plan_row(const row_plan *p, int y, int width, int height, const double m[6])
{
    locate(m, y, width, height, p->u, p->v);
    split(p->u, p->column, p->s, width);
    split(p->v, p->row, p->t, width);
    kernel_weights(p->s, p->across[0], p->across[1], p->across[2], width);
    kernel_weights(p->t, p->down[0], p->down[1], p->down[2], width);
    int across = 0, down = 0;
    for (int x = 0; x < width; x++) {
        across |= p->s[x] != 0.0f;
        down |= p->t[x] != 0.0f;
    }
    return down ? (across ? TWO_D : DOWN_COLUMN) : ALONG_ROW;
}

/* Whether pixel x's taps (in the row's mode) and the byte after the last one lie inside the image, unclamped. With
 * t = 0 the sample row j + 1 is in the image, and with s = 0 the column i + 1 (the point is inside). */
INLINE int unclamped(const row_plan *p, int mode, int x, int width, int height)
{
    const int i = p->column[x], j = p->row[x];
    if (mode == ALONG_ROW)
        return i >= 0 && i + 4 < width;
    if (mode == DOWN_COLUMN)
        return j >= 0 && j + 3 < height && i + 2 < width;
    return i >= 0 && i + 4 < width && j >= 0 && j + 3 < height;
}

/* One output pixel, with one pixel's channels in the lanes of a vector: the taps its mode needs, unclamped. */
INLINE void one_pixel(const row_plan *p, int mode, int x, const uint8_t *src, Py_ssize_t stride, uint8_t *out)
{
    const weights ws = {p->across[0][x], p->across[1][x], p->across[2][x]};
    const weights wt = {p->down[0][x], p->down[1][x], p->down[2][x]};
    const uint8_t *first = src + p->row[x] * stride + (Py_ssize_t)p->column[x] * 3;
    if (mode == ALONG_ROW) {
        first += stride;
        store(cubic(tap(first), tap(first + 3), tap(first + 6), tap(first + 9), ws), out);
    } else if (mode == DOWN_COLUMN) {
        first += 3;
        store(cubic(tap(first), tap(first + stride), tap(first + 2 * stride), tap(first + 3 * stride), wt), out);
    } else {
        bicubic_pixel(first, stride, ws, wt, out);
    }
}

/* One output pixel whose taps reach past the edge: the 4 x 4 taps clamped into a patch (any mode: the same value). */
static void edge_pixel(const row_plan *p, int x, const uint8_t *src, int width, int height, uint8_t *out)
{
    const Py_ssize_t stride = (Py_ssize_t)width * 3;
    uint8_t patch[4 * 16] = {0}; /* rows of 16 bytes: 12 used, 1 read */
    const int i = p->column[x], j = p->row[x];
    for (int r = 0; r < 4; r++) {
        const uint8_t *line = src + clamp(j + r, height) * stride;
        for (int k = 0; k < 4; k++)
            memcpy(patch + 16 * r + 3 * k, line + 3 * clamp(i + k, width), 3);
    }
    const weights ws = {p->across[0][x], p->across[1][x], p->across[2][x]};
    const weights wt = {p->down[0][x], p->down[1][x], p->down[2][x]};
    bicubic_pixel(patch, 16, ws, wt, out);
}

#if defined(__x86_64__) && defined(__GNUC__)
/* The AVX2 kernel: two neighbouring output pixels at a time, each pixel's channels in one 128-bit half of a vector,
 * with the very operations of the one-pixel kernel in the same order (no fused multiply-add): the same bytes. Chosen
 * at run time (the build targets any x86-64). */
#include <immintrin.h>
#define AVX2 static inline __attribute__((target("avx2")))
#define HAVE_AVX2 1

AVX2 __m256 tap2(const uint8_t *a, const uint8_t *b)
{
    int32_t wa, wb;
    memcpy(&wa, a, 4);
    memcpy(&wb, b, 4);
    return _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_insert_epi32(_mm_cvtsi32_si128(wa), wb, 1)));
}

/* [w[0] x 4 | w[1] x 4]: the weights of pixels x and x + 1 */
AVX2 __m256 weight2(const float *w)
{
    const __m128 two = _mm_castsi128_ps(_mm_loadl_epi64((const __m128i *)w));
    return _mm256_permutevar8x32_ps(_mm256_castps128_ps256(two), _mm256_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1));
}

AVX2 __m256 cubic2(__m256 p0, __m256 p1, __m256 p2, __m256 p3, float *const w[3], int x)
{
    __m256 v = _mm256_add_ps(p1, _mm256_mul_ps(weight2(w[0] + x), _mm256_sub_ps(p0, p1)));
    v = _mm256_add_ps(v, _mm256_mul_ps(weight2(w[1] + x), _mm256_sub_ps(p2, p1)));
    return _mm256_add_ps(v, _mm256_mul_ps(weight2(w[2] + x), _mm256_sub_ps(p3, p1)));
}

AVX2 void store2(__m256 v, uint8_t *out)
{
    __m256i wide = _mm256_cvttps_epi32(_mm256_min_ps(_mm256_max_ps(v, _mm256_setzero_ps()), _mm256_set1_ps(255.0f)));
    __m128i words = _mm_packs_epi32(_mm256_castsi256_si128(wide), _mm256_extracti128_si256(wide, 1));
    __m128i bytes = _mm_shuffle_epi8(_mm_packus_epi16(words, words),
                                     _mm_setr_epi8(0, 1, 2, 4, 5, 6, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1));
    int64_t both = _mm_cvtsi128_si64(bytes);
    memcpy(out, &both, 6); /* little-endian: pixel x's R, G, B, then pixel x + 1's */
}

/* The 4 taps of a row for pixels x and x + 1: 16 bytes from each (12 used), tap k's RGB widened to the lanes of
 * taps[k] by one shuffle. */
AVX2 void row_taps(const uint8_t *a, const uint8_t *b, __m256 taps[4])
{
    const __m256i both = _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_loadu_si128((const __m128i *)a)),
                                                 _mm_loadu_si128((const __m128i *)b), 1);
    for (int k = 0; k < 4; k++) {
        const char c = (char)(3 * k);
        const __m256i spread = _mm256_setr_epi8(c, -1, -1, -1, c + 1, -1, -1, -1, c + 2, -1, -1, -1, -1, -1, -1, -1,
                                                c, -1, -1, -1, c + 1, -1, -1, -1, c + 2, -1, -1, -1, -1, -1, -1, -1);
        taps[k] = _mm256_cvtepi32_ps(_mm256_shuffle_epi8(both, spread));
    }
}

/* The cubic along a row for pixels x and x + 1 (16 readable bytes at a and at b). */
AVX2 __m256 along2(const uint8_t *a, const uint8_t *b, float *const w[3], int x)
{
    __m256 taps[4];
    row_taps(a, b, taps);
    return cubic2(taps[0], taps[1], taps[2], taps[3], w, x);
}

/* Output pixels x and x + 1, both unclamped in the row's mode, and the 16 bytes from each first tap of a row
 * readable (their columns at most width - 6); one function per mode (a function with the three branches is slower
 * for the AVX-512 kernel). */
#define AVX2_CALLED static __attribute__((target("avx2"), noinline))

AVX2_CALLED void two_along(const row_plan *p, int x, const uint8_t *src, Py_ssize_t stride, uint8_t *out)
{
    const uint8_t *a = src + (p->row[x] + 1) * stride + (Py_ssize_t)p->column[x] * 3;
    const uint8_t *b = src + (p->row[x + 1] + 1) * stride + (Py_ssize_t)p->column[x + 1] * 3;
    store2(along2(a, b, p->across, x), out);
}

AVX2_CALLED void two_down(const row_plan *p, int x, const uint8_t *src, Py_ssize_t stride, uint8_t *out)
{
    const uint8_t *a = src + p->row[x] * stride + (Py_ssize_t)p->column[x] * 3 + 3;
    const uint8_t *b = src + p->row[x + 1] * stride + (Py_ssize_t)p->column[x + 1] * 3 + 3;
    const Py_ssize_t s1 = stride, s2 = 2 * stride, s3 = 3 * stride;
    store2(cubic2(tap2(a, b), tap2(a + s1, b + s1), tap2(a + s2, b + s2), tap2(a + s3, b + s3), p->down, x), out);
}

AVX2_CALLED void two_both(const row_plan *p, int x, const uint8_t *src, Py_ssize_t stride, uint8_t *out)
{
    const uint8_t *a = src + p->row[x] * stride + (Py_ssize_t)p->column[x] * 3;
    const uint8_t *b = src + p->row[x + 1] * stride + (Py_ssize_t)p->column[x + 1] * 3;
    __m256 across[4];
    for (int r = 0; r < 4; r++, a += stride, b += stride)
        across[r] = along2(a, b, p->across, x);
    store2(cubic2(across[0], across[1], across[2], across[3], p->down, x), out);
}

AVX2 void two_pixels(const row_plan *p, int mode, int x, const uint8_t *src, Py_ssize_t stride, uint8_t *out)
{
    if (mode == ALONG_ROW)
        two_along(p, x, src, stride, out);
    else if (mode == DOWN_COLUMN)
        two_down(p, x, src, stride, out);
    else
        two_both(p, x, src, stride, out);
}

/* Whether pixels x and x + 1 take two_pixels: both unclamped, and 16 bytes readable from each first tap of a row. */
INLINE int pair(const row_plan *p, int mode, int x, int width, int height)
{
    if (x + 1 >= width || p->column[x + 1] == OUTSIDE || !unclamped(p, mode, x + 1, width, height))
        return 0;
    return mode == DOWN_COLUMN || (p->column[x] + 6 <= width && p->column[x + 1] + 6 <= width);
}

/* The AVX-512 kernel: four neighbouring output pixels at a time, a pixel's channels in each 128-bit quarter of a
 * 512-bit vector, again with the one-pixel kernel's operations in its order; pairs and single pixels as AVX2's. */
#define AVX512 static inline __attribute__((target("avx512f,avx512bw,avx2")))
#define AVX512_CALLED static __attribute__((target("avx512f,avx512bw,avx2"), noinline))

AVX512 __m512 tap4(const uint8_t *const q[4], Py_ssize_t offset)
{
    int32_t w[4];
    for (int k = 0; k < 4; k++)
        memcpy(&w[k], q[k] + offset, 4);
    return _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_setr_epi32(w[0], w[1], w[2], w[3])));
}

/* [w[0] x 4 | w[1] x 4 | w[2] x 4 | w[3] x 4]: the weights of pixels x .. x + 3 */
AVX512 __m512 weight4(const float *w)
{
    return _mm512_permutexvar_ps(_mm512_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3),
                                 _mm512_castps128_ps512(_mm_loadu_ps(w)));
}

AVX512 __m512 cubic4(__m512 p0, __m512 p1, __m512 p2, __m512 p3, float *const w[3], int x)
{
    __m512 v = _mm512_add_ps(p1, _mm512_mul_ps(weight4(w[0] + x), _mm512_sub_ps(p0, p1)));
    v = _mm512_add_ps(v, _mm512_mul_ps(weight4(w[1] + x), _mm512_sub_ps(p2, p1)));
    return _mm512_add_ps(v, _mm512_mul_ps(weight4(w[2] + x), _mm512_sub_ps(p3, p1)));
}

AVX512 void store4(__m512 v, uint8_t *out)
{
    __m512i wide = _mm512_cvttps_epi32(_mm512_min_ps(_mm512_max_ps(v, _mm512_setzero_ps()), _mm512_set1_ps(255.0f)));
    __m128i bytes = _mm_shuffle_epi8(_mm512_cvtepi32_epi8(wide), /* 0..255 already: the low byte of each lane */
                                     _mm_setr_epi8(0, 1, 2, 4, 5, 6, 8, 9, 10, 12, 13, 14, -1, -1, -1, -1));
    int64_t first = _mm_cvtsi128_si64(bytes);
    int32_t last = _mm_extract_epi32(bytes, 2);
    memcpy(out, &first, 8); /* the four pixels' R, G, B in order */
    memcpy(out + 8, &last, 4);
}

/* The cubic along a row for pixels x .. x + 3 (16 readable bytes at each q[k] + offset). */
AVX512 __m512 along4(const uint8_t *const q[4], Py_ssize_t offset, float *const w[3], int x)
{
    __m512i all = _mm512_castsi128_si512(_mm_loadu_si128((const __m128i *)(q[0] + offset)));
    all = _mm512_inserti32x4(all, _mm_loadu_si128((const __m128i *)(q[1] + offset)), 1); /* immediates: unrolled */
    all = _mm512_inserti32x4(all, _mm_loadu_si128((const __m128i *)(q[2] + offset)), 2);
    all = _mm512_inserti32x4(all, _mm_loadu_si128((const __m128i *)(q[3] + offset)), 3);
    __m512 taps[4];
    for (int k = 0; k < 4; k++) {
        const char c = (char)(3 * k);
        const __m128i spread = _mm_setr_epi8(c, -1, -1, -1, c + 1, -1, -1, -1, c + 2, -1, -1, -1, -1, -1, -1, -1);
        taps[k] = _mm512_cvtepi32_ps(_mm512_shuffle_epi8(all, _mm512_broadcast_i32x4(spread)));
    }
    return cubic4(taps[0], taps[1], taps[2], taps[3], w, x);
}

/* Output pixels x .. x + 3, all unclamped in the row's mode, 16 bytes readable from each first tap of a row; one
 * function per mode, as two_pixels. */
AVX512_CALLED void four_along(const row_plan *p, int x, const uint8_t *src, Py_ssize_t stride, uint8_t *out)
{
    const uint8_t *q[4];
    for (int k = 0; k < 4; k++)
        q[k] = src + p->row[x + k] * stride + (Py_ssize_t)p->column[x + k] * 3;
    store4(along4(q, stride, p->across, x), out);
}

AVX512_CALLED void four_down(const row_plan *p, int x, const uint8_t *src, Py_ssize_t stride, uint8_t *out)
{
    const uint8_t *q[4];
    for (int k = 0; k < 4; k++)
        q[k] = src + p->row[x + k] * stride + (Py_ssize_t)p->column[x + k] * 3 + 3;
    store4(cubic4(tap4(q, 0), tap4(q, stride), tap4(q, 2 * stride), tap4(q, 3 * stride), p->down, x), out);
}

AVX512_CALLED void four_both(const row_plan *p, int x, const uint8_t *src, Py_ssize_t stride, uint8_t *out)
{
    const uint8_t *q[4];
    for (int k = 0; k < 4; k++)
        q[k] = src + p->row[x + k] * stride + (Py_ssize_t)p->column[x + k] * 3;
    __m512 across[4];
    for (int r = 0; r < 4; r++)
        across[r] = along4(q, r * stride, p->across, x);
    store4(cubic4(across[0], across[1], across[2], across[3], p->down, x), out);
}

AVX512 void four_pixels(const row_plan *p, int mode, int x, const uint8_t *src, Py_ssize_t stride, uint8_t *out)
{
    if (mode == ALONG_ROW)
        four_along(p, x, src, stride, out);
    else if (mode == DOWN_COLUMN)
        four_down(p, x, src, stride, out);
    else
        four_both(p, x, src, stride, out);
}

/* Whether pixels x .. x + 3 take four_pixels (pixel x already unclamped). */
INLINE int quad(const row_plan *p, int mode, int x, int width, int height)
{
    if (x + 3 >= width)
        return 0;
    for (int k = 1; k < 4; k++)
        if (p->column[x + k] == OUTSIDE || !unclamped(p, mode, x + k, width, height))
            return 0;
    if (mode != DOWN_COLUMN)
        for (int k = 0; k < 4; k++)
            if (p->column[x + k] + 6 > width)
                return 0;
    return 1;
}
#else
#define HAVE_AVX2 0
static inline void two_pixels(const row_plan *p, int mode, int x, const uint8_t *src, Py_ssize_t stride, uint8_t *out)
{
    (void)p, (void)mode, (void)x, (void)src, (void)stride, (void)out;
}

static inline int pair(const row_plan *p, int mode, int x, int width, int height)
{
    (void)p, (void)mode, (void)x, (void)width, (void)height;
    return 0;
}

static inline void four_pixels(const row_plan *p, int mode, int x, const uint8_t *src, Py_ssize_t stride, uint8_t *out)
{
    (void)p, (void)mode, (void)x, (void)src, (void)stride, (void)out;
}

static inline int quad(const row_plan *p, int mode, int x, int width, int height)
{
    (void)p, (void)mode, (void)x, (void)width, (void)height;
    return 0;
}
#endif

/* The whole warp: dst (height x width x 3) from src (height x width x 3), both C-contiguous; plan: room for a row;
 * lanes: the most pixels filtered at once (1: the baseline kernel; 2: AVX2's two_pixels; 4: AVX-512's four_pixels,
 * then pairs), where the pixels allow. */
INLINE void warp_rows(const uint8_t *src, uint8_t *dst, int height, int width, const double m[6],
                      const uint8_t fill[3], const row_plan *plan, const int lanes)
{
    const Py_ssize_t stride = (Py_ssize_t)width * 3;
    for (int y = 0; y < height; y++) {
        const int mode = plan_row(plan, y, width, height, m);
        uint8_t *out = dst + y * stride;
        for (int x = 0; x < width; x++) {
            if (plan->column[x] == OUTSIDE) {
                memcpy(out + 3 * x, fill, 3);
            } else if (!unclamped(plan, mode, x, width, height)) {
                edge_pixel(plan, x, src, width, height, out + 3 * x);
            } else if (lanes >= 4 && quad(plan, mode, x, width, height)) {
                four_pixels(plan, mode, x, src, stride, out + 3 * x);
                x += 3;
            } else if (lanes >= 2 && pair(plan, mode, x, width, height)) {
                two_pixels(plan, mode, x, src, stride, out + 3 * x);
                x++;
            } else {
                one_pixel(plan, mode, x, src, stride, out + 3 * x);
            }
        }
    }
}

static void warp_baseline(const uint8_t *src, uint8_t *dst, int height, int width, const double m[6],
                          const uint8_t fill[3], const row_plan *plan)
{
    warp_rows(src, dst, height, width, m, fill, plan, 1);
}

#if HAVE_AVX2
__attribute__((target("avx2"))) static void warp_avx2(const uint8_t *src, uint8_t *dst, int height, int width,
                                                      const double m[6], const uint8_t fill[3], const row_plan *plan)
{
    warp_rows(src, dst, height, width, m, fill, plan, 2);
}

__attribute__((target("avx512f,avx512bw,avx2"))) static void warp_avx512(const uint8_t *src, uint8_t *dst,
                                                                         int height, int width, const double m[6],
                                                                         const uint8_t fill[3], const row_plan *plan)
{
    warp_rows(src, dst, height, width, m, fill, plan, 4);
}
#endif

typedef void (*warp_fn)(const uint8_t *, uint8_t *, int, int, const double[6], const uint8_t[3], const row_plan *);
static const char *const kernel_names[] = {"baseline", "avx2", "avx512"};
static const warp_fn kernel_fns[] = {warp_baseline,
#if HAVE_AVX2
                                     warp_avx2, warp_avx512
#else
                                     NULL, NULL
#endif
};
static int kernels_available = 1; /* the first n of kernel_names; set at import */

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
"bicubic(image, out, coeffs, fill, *, kernel=None)\n\n"
"out[...] = PIL's image.transform((W, H), AFFINE, coeffs, BICUBIC, fillcolor=fill) for RGB uint8 arrays.\n\n"
"image: C-contiguous uint8 (H, W, 3); out: a writable C-contiguous uint8 array of the same shape, not overlapping\n"
"image; coeffs: 6 finite floats (a, b, c, d, e, f), PIL's output-to-input map; fill: 3 ints in 0..255;\n"
"kernel: one of KERNELS (None: the last, the fastest this CPU runs); every kernel writes the same bytes.\n"
"Raises TypeError for a non-array or a dtype other than uint8, ValueError for a bad shape, layout, coefficient,\n"
"fill or kernel.");

static PyObject *bicubic(PyObject *self, PyObject *args, PyObject *kwargs)
{
    static char *keywords[] = {"image", "out", "coeffs", "fill", "kernel", NULL};
    PyObject *image_obj, *out_obj;
    double m[6];
    int fill_in[3];
    const char *kernel_name = NULL;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "OO(dddddd)(iii)|$z:bicubic", keywords, &image_obj, &out_obj,
                                     &m[0], &m[1], &m[2], &m[3], &m[4], &m[5], &fill_in[0], &fill_in[1], &fill_in[2],
                                     &kernel_name))
        return NULL;
    int kernel = kernels_available - 1;
    if (kernel_name != NULL) {
        for (kernel = kernels_available - 1; kernel >= 0 && strcmp(kernel_name, kernel_names[kernel]) != 0; kernel--)
            ;
        if (kernel < 0) {
            PyErr_Format(PyExc_ValueError, "bicubic: kernel must be one of _affine.KERNELS (%s%s%s%s%s), got '%.50s'",
                         kernel_names[0], kernels_available > 1 ? ", " : "", kernels_available > 1 ? kernel_names[1] : "",
                         kernels_available > 2 ? ", " : "", kernels_available > 2 ? kernel_names[2] : "", kernel_name);
            return NULL;
        }
    }
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
            kernel_fns[kernel]((const uint8_t *)image.buf, (uint8_t *)out.buf, height, width, m, fill, &plan);
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
    {"bicubic", (PyCFunction)(void (*)(void))bicubic, METH_VARARGS | METH_KEYWORDS, bicubic_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_affine", "PIL's affine bicubic warp on RGB uint8 images.", -1, methods,
};

PyMODINIT_FUNC PyInit__affine(void)
{
#if HAVE_AVX2
    __builtin_cpu_init();
    kernels_available = !__builtin_cpu_supports("avx2") ? 1
                        : __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") ? 3 : 2;
#endif
    PyObject *m = PyModule_Create(&module);
    if (m == NULL)
        return NULL;
#ifdef Py_GIL_DISABLED
    PyUnstable_Module_SetGIL(m, Py_MOD_GIL_NOT_USED); /* kernels_available is written once, here, before any call */
#endif
    PyObject *names = PyTuple_New(kernels_available);
    for (int k = 0; names != NULL && k < kernels_available; k++) {
        PyObject *name = PyUnicode_FromString(kernel_names[k]);
        if (name == NULL)
            Py_CLEAR(names);
        else
            PyTuple_SET_ITEM(names, k, name);
    }
    if (PyModule_AddObject(m, "KERNELS", names) < 0) { /* steals names on success */
        Py_XDECREF(names);
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
