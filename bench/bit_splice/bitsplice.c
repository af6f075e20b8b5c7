/*
 * bench/bit_splice/bitsplice.c: the bit-level splice experiment (issue 16, item 2). Not package code.
 *
 * Builds, from a baseline Huffman JPEG with NO restart markers, a sub-JPEG holding only the MCUs of a crop's MCU
 * box, using an index made at "pack time" by one Huffman-decoding pass: for every MCU row, at columns 0, K, 2K, ...
 * the bit position in the entropy-coded data and the DC predictor of every component. For each MCU row of the box
 * the bits of its MCUs are copied (they are contiguous in the stream) into a new scan; only the first block of each
 * component at the start of a row segment changes, because its DC difference is relative to a predictor that
 * differs in the new stream: that first MCU is Huffman-decoded (its AC codes too, to find the later components'
 * first DC), those DC differences are re-encoded with the same DC tables, and everything else is copied bit for bit.
 * With the optional `offs` index (each component's first DC code's bit offset inside the indexed MCU) only the DC
 * codes are decoded.
 * Byte stuffing (0xFF 0x00) is removed on read and added on write; the last byte is padded with 1-bits.
 *
 * Optimized DC tables only code the categories the image used; a new difference may need one they lack. The
 * sub-JPEG's header therefore redefines each DC table with the missing categories appended under the table's one
 * free code prefix (libjpeg's optimized tables keep the all-ones code free): every original code is unchanged, so
 * the copied bits decode the same. Where a table has no room, bs_splice_bits returns 0 (not spliced).
 *
 * Also here, for a like-for-like comparison, the restart-interval (DRI) splice done the same way (bs_splice_dri):
 * the intervals covering the box, RST markers renumbered. Both share the box planning (bs_plan), which asks
 * libjpeg for the output size and whether chroma is upsampled at the chosen scale (the one-pixel margin rule of
 * fastdata/decode/_jpegcrop.c). Decoding the sub-JPEG is left to fastdata's kernel, called from Python.
 *
 * Single-threaded (one static libjpeg decompressor); entry points return 0 (not applicable), > 0 (bytes written)
 * or < 0 (error).
 */
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <jpeglib.h>

/* ---- the JPEG header, parsed by hand ----------------------------------------------------- */

typedef struct {
    uint8_t bits[17];   /* bits[l]: codes of length l */
    uint8_t vals[256];
    int nvals;
    int defined;
    /* decoding: 9-bit look-ahead, then canonical maxcode/valptr */
    uint16_t look[512]; /* (length << 8) | symbol, 0: longer than 9 bits */
    int32_t maxcode[18], valptr[17], mincode[17];
    /* encoding (DC only) */
    uint16_t code[256];
    uint8_t size[256];
} Huff;

typedef struct {
    int width, height, ncomp, h[4], v[4], dc_tbl[4], ac_tbl[4];
    int max_h, max_v, mcu_w, mcu_h, per_row, mcu_rows, blocks_in_mcu;
    int restart;                        /* DRI, 0 if none */
    size_t sof, sos, entropy;           /* segment offsets; entropy: first byte after SOS */
    Huff dc[4], ac[4];
} Header;

static void
huff_build(Huff *t)
{
    int code = 0, p = 0;
    memset(t->look, 0, sizeof(t->look));
    for (int l = 1; l <= 16; l++) {
        t->valptr[l] = p;
        t->mincode[l] = code;
        for (int i = 0; i < t->bits[l]; i++, p++, code++) {
            int sym = t->vals[p];
            t->code[sym] = (uint16_t)code;
            t->size[sym] = (uint8_t)l;
            if (l <= 9) {
                int first = code << (9 - l), count = 1 << (9 - l);
                for (int j = 0; j < count; j++)
                    t->look[first + j] = (uint16_t)((l << 8) | sym);
            }
        }
        t->maxcode[l] = t->bits[l] ? code - 1 : -1;
        code <<= 1;
    }
    t->maxcode[17] = 0x7fffffff;
}

/* 0 on success. Only what the experiment needs: 8-bit baseline/extended Huffman, one scan. */
static int
parse_header(const uint8_t *s, size_t len, Header *hd)
{
    memset(hd, 0, sizeof(*hd));
    if (len < 4 || s[0] != 0xFF || s[1] != 0xD8)
        return -1;
    size_t p = 2;
    while (p + 4 <= len) {
        if (s[p] != 0xFF)
            return -1;
        int m = s[p + 1];
        if (m == 0xFF) {
            p++;
            continue;
        }
        size_t seg = ((size_t)s[p + 2] << 8) | s[p + 3];
        if (seg < 2 || p + 2 + seg > len)
            return -1;
        const uint8_t *d = s + p + 4, *end = s + p + 2 + seg;
        if (m == 0xC0 || m == 0xC1) {
            if (d[0] != 8)
                return -1;
            hd->sof = p;
            hd->height = (d[1] << 8) | d[2];
            hd->width = (d[3] << 8) | d[4];
            hd->ncomp = d[5];
            if (hd->ncomp < 1 || hd->ncomp > 4)
                return -1;
            for (int c = 0; c < hd->ncomp; c++) {
                hd->h[c] = d[6 + 3 * c + 1] >> 4;
                hd->v[c] = d[6 + 3 * c + 1] & 15;
                if (hd->h[c] > hd->max_h)
                    hd->max_h = hd->h[c];
            }
        } else if (m >= 0xC2 && m <= 0xCF && m != 0xC4 && m != 0xC8 && m != 0xCC) {
            return -1; /* progressive, lossless, arithmetic */
        } else if (m == 0xC4) {
            while (d < end) {
                int tc = d[0] >> 4, th = d[0] & 3, n = 0;
                Huff *t = tc ? &hd->ac[th] : &hd->dc[th];
                for (int l = 1; l <= 16; l++) {
                    t->bits[l] = d[l];
                    n += d[l];
                }
                if (n > 256 || d + 17 + n > end)
                    return -1;
                memcpy(t->vals, d + 17, n);
                t->nvals = n;
                t->defined = 1;
                huff_build(t);
                d += 17 + n;
            }
        } else if (m == 0xDD) {
            hd->restart = (d[0] << 8) | d[1];
        } else if (m == 0xDA) {
            if (d[0] != hd->ncomp)
                return -1; /* a scan of fewer components than the frame: multi-scan */
            for (int c = 0; c < hd->ncomp; c++) {
                hd->dc_tbl[c] = d[1 + 2 * c + 1] >> 4 & 3;
                hd->ac_tbl[c] = d[1 + 2 * c + 1] & 3;
                if (!hd->dc[hd->dc_tbl[c]].defined || !hd->ac[hd->ac_tbl[c]].defined)
                    return -1;
            }
            hd->sos = p;
            hd->entropy = p + 2 + seg;
            break;
        }
        p += 2 + seg;
    }
    if (!hd->sos || !hd->sof || !hd->width || !hd->height)
        return -1;
    hd->max_v = 0;
    for (int c = 0; c < hd->ncomp; c++)
        if (hd->v[c] > hd->max_v)
            hd->max_v = hd->v[c];
    if (hd->ncomp == 1) { /* a one-component scan codes single blocks */
        hd->h[0] = hd->v[0] = 1;
        hd->mcu_w = hd->mcu_h = 8;
        hd->blocks_in_mcu = 1;
    } else {
        hd->mcu_w = 8 * hd->max_h;
        hd->mcu_h = 8 * hd->max_v;
        for (int c = 0; c < hd->ncomp; c++)
            hd->blocks_in_mcu += hd->h[c] * hd->v[c];
    }
    hd->per_row = (hd->width + hd->mcu_w - 1) / hd->mcu_w;
    hd->mcu_rows = (hd->height + hd->mcu_h - 1) / hd->mcu_h;
    return 0;
}

/* ---- bits in (stuffed), bits out (stuffed) -------------------------------------------------- */

typedef struct {
    const uint8_t *s;
    size_t len, p;      /* next byte to load */
    uint64_t acc;       /* bits left-aligned */
    int n;              /* bits in acc */
    uint64_t loaded;    /* data bytes loaded so far */
    size_t off[16];     /* file offset of data byte i, at [i & 15] */
} Reader;

static inline void
rd_fill(Reader *r)
{
    while (r->n <= 56) {
        unsigned b = 0;
        size_t at = r->p;
        if (r->p < r->len) {
            b = r->s[r->p];
            if (b == 0xFF) {
                if (r->p + 1 < r->len && r->s[r->p + 1] == 0x00)
                    r->p += 2;
                else
                    b = 0; /* a marker: feed zeros, stay */
            } else {
                r->p++;
            }
        }
        r->off[r->loaded & 15] = at;
        r->loaded++;
        r->acc |= (uint64_t)b << (56 - r->n);
        r->n += 8;
    }
}

/* Start at file byte `byte`, bit `bit` (0 = most significant). */
static void
rd_init(Reader *r, const uint8_t *s, size_t len, size_t byte, int bit)
{
    r->s = s;
    r->len = len;
    r->p = byte;
    r->acc = 0;
    r->n = 0;
    r->loaded = 0;
    rd_fill(r);
    r->acc <<= bit;
    r->n -= bit;
}

static inline unsigned
rd_bits(Reader *r, int k) /* k <= 32 */
{
    if (k == 0)
        return 0;
    if (r->n < k)
        rd_fill(r);
    unsigned v = (unsigned)(r->acc >> (64 - k));
    r->acc <<= k;
    r->n -= k;
    return v;
}

/* The position of the next unread bit as (file byte << 3) | bit. */
static inline uint64_t
rd_pos(const Reader *r)
{
    uint64_t consumed = r->loaded * 8 - (uint64_t)r->n;
    uint64_t i = consumed >> 3;
    size_t byte = i < r->loaded ? r->off[i & 15] : r->p;
    return ((uint64_t)byte << 3) | (consumed & 7);
}

static inline int
rd_huff(Reader *r, const Huff *t)
{
    if (r->n < 16)
        rd_fill(r);
    unsigned look = (unsigned)(r->acc >> 55);
    unsigned e = t->look[look];
    if (e) {
        int l = e >> 8;
        r->acc <<= l;
        r->n -= l;
        return e & 255;
    }
    int l = 10;
    int code = (int)(r->acc >> (64 - l));
    while (l <= 16 && code > t->maxcode[l]) {
        l++;
        code = (int)(r->acc >> (64 - l));
    }
    if (l > 16)
        return -1;
    r->acc <<= l;
    r->n -= l;
    return t->vals[t->valptr[l] + code - t->mincode[l]];
}

static inline int
extend(unsigned v, int s)
{
    return s == 0 ? 0 : (v < (1u << (s - 1)) ? (int)v - (1 << s) + 1 : (int)v);
}

typedef struct {
    uint8_t *d;
    size_t n, cap;
    uint64_t acc; /* low `bits` bits pending */
    int bits;
    int overflow;
} Writer;

static inline void
wr_put(Writer *w, unsigned v, int k) /* k <= 32 */
{
    if (k == 0)
        return;
    w->acc = (w->acc << k) | (v & ((k == 32) ? 0xFFFFFFFFu : ((1u << k) - 1)));
    w->bits += k;
    while (w->bits >= 8) {
        w->bits -= 8;
        uint8_t b = (uint8_t)(w->acc >> w->bits);
        if (w->n + 2 > w->cap) {
            w->overflow = 1;
            return;
        }
        w->d[w->n++] = b;
        if (b == 0xFF)
            w->d[w->n++] = 0x00;
    }
}

static void
wr_flush(Writer *w) /* pad with 1-bits */
{
    if (w->bits)
        wr_put(w, 0x7F, 8 - w->bits);
}

/* 64-bit word helpers: has some byte equal to 0xFF; big-endian load/store. */
static inline int
has_ff(uint64_t x)
{
    uint64_t v = ~x;
    return ((v - 0x0101010101010101ULL) & ~v & 0x8080808080808080ULL) != 0;
}

static inline uint64_t
load_be(const uint8_t *p)
{
    uint64_t x;
    memcpy(&x, p, 8);
    return __builtin_bswap64(x);
}

/* Write 64 data bits `x` (no 0xFF among its bytes) after the writer's pending bits, stuffing where the shifted
 * word has an 0xFF; the caller has checked room for 16 bytes. */
static inline void
wr_word(Writer *w, uint64_t x)
{
    uint64_t out = w->bits ? ((w->acc & ((1ULL << w->bits) - 1)) << (64 - w->bits)) | (x >> w->bits) : x;
    w->acc = x; /* the low w->bits bits are pending */
    if (has_ff(out)) {
        for (int i = 56; i >= 0; i -= 8) {
            uint8_t byte = (uint8_t)(out >> i);
            w->d[w->n++] = byte;
            if (byte == 0xFF)
                w->d[w->n++] = 0x00;
        }
    } else {
        uint64_t be = __builtin_bswap64(out);
        memcpy(w->d + w->n, &be, 8);
        w->n += 8;
    }
}

/* Advance the stuffed position *pp ((byte << 3) | bit) past one data byte's remaining bits. */
static inline size_t
next_data_byte(const uint8_t *s, size_t p)
{
    return s[p] == 0xFF ? p + 2 : p + 1;
}

/* Skip `count` (< 64) data bits at *pp. */
static void
skip_bits(const uint8_t *s, uint64_t *pp, uint64_t count)
{
    size_t p = (size_t)(*pp >> 3);
    uint64_t b = (*pp & 7) + count;
    while (b >= 8) {
        p = next_data_byte(s, p);
        b -= 8;
    }
    *pp = ((uint64_t)p << 3) | b;
}

/* Copy `count` data bits starting at the stuffed position *pp to the writer, unstuffing and restuffing, eight
 * bytes at a time where neither side has an 0xFF; *pp advances. The caller knows the bits exist (index). */
static void
copy_fast(const uint8_t *s, size_t len, uint64_t *pp, uint64_t count, Writer *w)
{
    size_t p = (size_t)(*pp >> 3);
    int b = (int)(*pp & 7);
    if (b && count) { /* the rest of a partly used byte */
        int avail = 8 - b, k = count < (uint64_t)avail ? (int)count : avail;
        wr_put(w, (unsigned)(s[p] >> (avail - k)) & ((1u << k) - 1), k);
        count -= (uint64_t)k;
        b += k;
        if (b == 8) {
            p = next_data_byte(s, p);
            b = 0;
        }
    }
    while (count >= 64 && p + 8 <= len && w->n + 16 <= w->cap) {
        uint64_t x = load_be(s + p);
        if (has_ff(x)) { /* one byte the slow way (a stuffed 0xFF 0x00 is one data byte) */
            wr_put(w, s[p], 8);
            p = next_data_byte(s, p);
            count -= 8;
            continue;
        }
        wr_word(w, x);
        p += 8;
        count -= 64;
    }
    while (count >= 8) {
        wr_put(w, s[p], 8);
        p = next_data_byte(s, p);
        count -= 8;
    }
    if (count) {
        wr_put(w, (unsigned)(s[p] >> (8 - count)) & ((1u << count) - 1), (int)count);
        b = (int)count;
    }
    *pp = ((uint64_t)p << 3) | (uint64_t)b;
}

/* Copy the data bits from the stuffed position *pp up to the stuffed position `end` (no bit count needed, so no
 * scan for stuffed bytes first); *pp becomes `end`. */
static void
copy_to(const uint8_t *s, size_t len, uint64_t *pp, uint64_t end, Writer *w)
{
    size_t p = (size_t)(*pp >> 3), e = (size_t)(end >> 3);
    int b = (int)(*pp & 7), eb = (int)(end & 7);
    if (p == e) {
        if (eb > b)
            wr_put(w, (unsigned)(s[p] >> (8 - eb)) & ((1u << (eb - b)) - 1), eb - b);
        *pp = end;
        return;
    }
    if (b) {
        wr_put(w, (unsigned)s[p] & ((1u << (8 - b)) - 1), 8 - b);
        p = next_data_byte(s, p);
    }
    while (p + 8 <= e && w->n + 16 <= w->cap) {
        uint64_t x = load_be(s + p);
        if (has_ff(x)) {
            wr_put(w, s[p], 8);
            p = next_data_byte(s, p);
            continue;
        }
        wr_word(w, x);
        p += 8;
    }
    while (p < e) {
        wr_put(w, s[p], 8);
        p = next_data_byte(s, p);
    }
    if (eb && p < len)
        wr_put(w, (unsigned)(s[p] >> (8 - eb)), eb);
    *pp = ((uint64_t)p << 3) | (uint64_t)eb;
    (void)len;
}

/* ---- the index ------------------------------------------------------------------------------- */

/* Entries per MCU row at granularity K: columns 0, K, 2K, ... below per_row. */
static inline int
per_row_entries(const Header *hd, int K)
{
    return (hd->per_row + K - 1) / K;
}

/* info[8]: width, height, ncomp, per_row, mcu_rows, mcu_w, mcu_h, restart. */
int
bs_info(const uint8_t *s, size_t len, int32_t *info)
{
    Header hd;
    if (parse_header(s, len, &hd))
        return -1;
    int32_t v[8] = {hd.width, hd.height, hd.ncomp, hd.per_row, hd.mcu_rows, hd.mcu_w, hd.mcu_h, hd.restart};
    memcpy(info, v, sizeof(v));
    return 0;
}

/* Decode one MCU's blocks; returns -1 on bad data. pred is updated. */
static inline int
decode_mcu(Reader *r, const Header *hd, int *pred, uint16_t *dc_at)
{
    uint64_t base = r->loaded * 8 - (uint64_t)r->n;
    for (int c = 0; c < hd->ncomp; c++) {
        if (dc_at)
            dc_at[c] = (uint16_t)(r->loaded * 8 - (uint64_t)r->n - base);
        const Huff *dc = &hd->dc[hd->dc_tbl[c]], *ac = &hd->ac[hd->ac_tbl[c]];
        for (int b = 0; b < hd->h[c] * hd->v[c]; b++) {
            int s = rd_huff(r, dc);
            if (s < 0 || s > 11)
                return -1;
            pred[c] += extend(rd_bits(r, s), s);
            for (int k = 1; k < 64; k++) {
                int rs = rd_huff(r, ac);
                if (rs < 0)
                    return -1;
                int run = rs >> 4, sz = rs & 15;
                if (sz == 0) {
                    if (run != 15)
                        break;
                    k += 15;
                } else {
                    k += run;
                    rd_bits(r, sz);
                }
            }
        }
    }
    return 0;
}

/* One Huffman-decoding pass over a no-DRI baseline JPEG. pos gets mcu_rows * E + 1 entries ((byte << 3) | bit,
 * E = ceil(per_row / K)), dc gets ncomp predictors per entry; the last entry is the end of the scan. Returns the
 * number of entries, or -1. */
int
bs_index(const uint8_t *s, size_t len, int K, uint64_t *pos, int16_t *dc, uint16_t *offs, size_t max_entries)
{
    Header hd;
    if (K < 1 || parse_header(s, len, &hd) || hd.restart)
        return -1;
    int E = per_row_entries(&hd, K);
    size_t need = (size_t)hd.mcu_rows * E + 1, e = 0;
    if (need > max_entries)
        return -1;
    Reader r;
    rd_init(&r, s, len, hd.entropy, 0);
    int pred[4] = {0, 0, 0, 0};
    for (int row = 0; row < hd.mcu_rows; row++) {
        for (int col = 0; col < hd.per_row; col++) {
            if (col % K == 0) {
                pos[e] = rd_pos(&r);
                for (int c = 0; c < hd.ncomp; c++)
                    dc[e * hd.ncomp + c] = (int16_t)pred[c];
                e++;
            }
            uint16_t *at = offs && col % K == 0 ? offs + (e - 1) * hd.ncomp : NULL;
            if (decode_mcu(&r, &hd, pred, at))
                return -1;
        }
    }
    pos[e] = rd_pos(&r);
    for (int c = 0; c < hd.ncomp; c++)
        dc[e * hd.ncomp + c] = (int16_t)pred[c];
    return (int)(e + 1);
}

/* ---- planning the MCU box (shared by both splices) ------------------------------------------ */

static struct jpeg_decompress_struct cinfo;
static struct {
    struct jpeg_error_mgr pub;
    jmp_buf jump;
} jerr;
static int cinfo_ready;

static void
on_error(j_common_ptr c)
{
    (void)c;
    longjmp(jerr.jump, 1);
}

static void
on_message(j_common_ptr c, int level)
{
    (void)c;
    (void)level;
}

/* 1 when libjpeg's fancy upsampler upsamples some component at the current scale (as fastdata's kernel). */
static int
needs_margin(void)
{
#if JPEG_LIB_VERSION >= 70
    int min_h = cinfo.min_DCT_h_scaled_size, min_v = cinfo.min_DCT_v_scaled_size;
#else
    int min_h = cinfo.min_DCT_scaled_size, min_v = cinfo.min_DCT_scaled_size;
#endif
    if (!cinfo.do_fancy_upsampling || (min_h <= 1 && min_v <= 1))
        return 0;
    for (int ci = 0; ci < cinfo.num_components; ci++) {
        jpeg_component_info *comp = &cinfo.comp_info[ci];
#if JPEG_LIB_VERSION >= 70
        int h = comp->DCT_h_scaled_size, v = comp->DCT_v_scaled_size;
#else
        int h = comp->DCT_scaled_size, v = comp->DCT_scaled_size;
#endif
        if (comp->h_samp_factor * h != cinfo.max_h_samp_factor * min_h ||
            comp->v_samp_factor * v != cinfo.max_v_samp_factor * min_v)
            return 1;
    }
    return 0;
}

/* The MCU box [col0, col1) x [row0, row1) covering scaled box [y0, y1) x [x0, x1) at 1/denom with the margin,
 * columns in steps of K (col1 may stop at the row's end), at least 2 * max_h + 1 scaled pixels wide. box[4] in,
 * mcu[4] out (col0, col1, row0, row1). 0: the whole image (nothing to save), 1: a box, -1: error. */
static int
plan(const uint8_t *s, size_t len, const Header *hd, int denom, const int32_t *box, int K, int *mcu)
{
    if (!cinfo_ready) {
        cinfo.err = jpeg_std_error(&jerr.pub);
        jerr.pub.error_exit = on_error;
        jerr.pub.emit_message = on_message;
        jpeg_create_decompress(&cinfo);
        cinfo_ready = 1;
    }
    if (setjmp(jerr.jump)) {
        jpeg_abort_decompress(&cinfo);
        return -1;
    }
    jpeg_mem_src(&cinfo, s, (unsigned long)len);
    jpeg_read_header(&cinfo, TRUE);
    cinfo.out_color_space = cinfo.num_components == 4 ? JCS_CMYK : JCS_RGB;
    cinfo.scale_num = 1;
    cinfo.scale_denom = (unsigned)denom;
    jpeg_calc_output_dimensions(&cinfo);
    size_t out_w = cinfo.output_width, out_h = cinfo.output_height, margin = (size_t)needs_margin();
    int max_h = cinfo.max_h_samp_factor;
    jpeg_abort_decompress(&cinfo);

    size_t x0 = (size_t)box[2], x1 = (size_t)box[3], y0 = (size_t)box[0], y1 = (size_t)box[1];
    x0 = x0 > margin ? x0 - margin : 0;
    y0 = y0 > margin ? y0 - margin : 0;
    x1 = x1 + margin < out_w ? x1 + margin : out_w;
    y1 = y1 + margin < out_h ? y1 + margin : out_h;
    size_t smw = (size_t)hd->mcu_w / denom, smh = (size_t)hd->mcu_h / denom, pr = (size_t)hd->per_row;
    size_t col0 = x0 / smw / K * K, col1 = (x1 + smw - 1) / smw;
    col1 = (col1 + K - 1) / K * K;
    if (col1 > pr)
        col1 = pr;
    size_t min_w = 2 * (size_t)max_h + 1, width = (size_t)hd->width, mw = (size_t)hd->mcu_w;
    if (min_w > out_w)
        min_w = out_w;
    for (;;) {
        size_t right = col1 * mw < width ? col1 * mw : width;
        if ((right - col0 * mw + denom - 1) / denom >= min_w)
            break;
        if (col1 < pr)
            col1 = col1 + K < pr ? col1 + K : pr;
        else
            col0 -= K;
    }
    size_t row0 = y0 / smh, row1 = (y1 + smh - 1) / smh;
    if (row1 > (size_t)hd->mcu_rows)
        row1 = (size_t)hd->mcu_rows;
    if (col0 == 0 && col1 == pr && row0 == 0 && row1 == (size_t)hd->mcu_rows)
        return 0;
    mcu[0] = (int)col0;
    mcu[1] = (int)col1;
    mcu[2] = (int)row0;
    mcu[3] = (int)row1;
    return 1;
}

/* Header of the sub-JPEG: SOI, the segments up to SOS without APP1-13/APP15/COM (and without DRI when drop_dri),
 * SOF's size set to sub_w x sub_h, `extra` (e.g. a DHT) inserted before SOS, then SOS. Returns bytes written. */
static size_t
write_header(const uint8_t *s, const Header *hd, uint8_t *d, int sub_w, int sub_h, int drop_dri,
             const uint8_t *extra, size_t extra_len)
{
    size_t n = 0, p = 2, sof_out = 0;
    d[n++] = 0xFF;
    d[n++] = 0xD8;
    while (p < hd->sos) {
        int m = s[p + 1];
        if (m == 0xFF) {
            p++;
            continue;
        }
        size_t seg = ((size_t)s[p + 2] << 8) | s[p + 3];
        int drop = (m >= 0xE1 && m <= 0xED) || m == 0xEF || m == 0xFE || (drop_dri && m == 0xDD);
        if (!drop) {
            if (p == hd->sof)
                sof_out = n;
            memcpy(d + n, s + p, 2 + seg);
            n += 2 + seg;
        }
        p += 2 + seg;
    }
    memcpy(d + n, extra, extra_len);
    n += extra_len;
    size_t seg = ((size_t)s[hd->sos + 2] << 8) | s[hd->sos + 3];
    memcpy(d + n, s + hd->sos, 2 + seg);
    n += 2 + seg;
    d[sof_out + 5] = (uint8_t)(sub_h >> 8);
    d[sof_out + 6] = (uint8_t)sub_h;
    d[sof_out + 7] = (uint8_t)(sub_w >> 8);
    d[sof_out + 8] = (uint8_t)sub_w;
    return n;
}

static void
sub_size(const Header *hd, const int *mcu, int *sub_w, int *sub_h, int32_t *shift, int denom)
{
    int right = mcu[1] * hd->mcu_w < hd->width ? mcu[1] * hd->mcu_w : hd->width;
    int bottom = mcu[3] * hd->mcu_h < hd->height ? mcu[3] * hd->mcu_h : hd->height;
    *sub_w = right - mcu[0] * hd->mcu_w;
    *sub_h = bottom - mcu[2] * hd->mcu_h;
    shift[0] = mcu[2] * hd->mcu_h / denom; /* rows to subtract from the scaled box */
    shift[1] = mcu[0] * hd->mcu_w / denom; /* columns */
}

/* ---- the DRI splice (restart interval K MCUs dividing the MCUs per row) --------------------- */

/* box[4] = scaled (y0, y1, x0, x1); shift[2] out. Returns the sub-JPEG's length, 0 if not applicable, -1. */
long
bs_splice_dri(const uint8_t *s, size_t len, int denom, const int32_t *box, uint8_t *d, size_t cap,
              int32_t *shift)
{
    Header hd;
    if (parse_header(s, len, &hd) || hd.restart == 0 || hd.per_row % hd.restart)
        return 0;
    int K = hd.restart, mcu[4];
    int planned = plan(s, len, &hd, denom, box, K, mcu);
    if (planned <= 0)
        return planned;
    int sub_w, sub_h;
    sub_size(&hd, mcu, &sub_w, &sub_h, shift, denom);
    if (cap < hd.sos + 1024 + (len - hd.entropy) * 2)
        return -1;
    size_t n = write_header(s, &hd, d, sub_w, sub_h, 0, NULL, 0);
    size_t ipr = (size_t)hd.per_row / K, c0 = (size_t)mcu[0] / K, c1 = ((size_t)mcu[1] + K - 1) / K;
    size_t first = (size_t)mcu[2] * ipr + c0, last = ((size_t)mcu[3] - 1) * ipr + c1 - 1;
    size_t needed = (size_t)(mcu[3] - mcu[2]) * (c1 - c0), copied = 0, k = 0;
    size_t start = hd.entropy, q = hd.entropy;
    for (;;) {
        const uint8_t *ff = q < len ? memchr(s + q, 0xFF, len - q) : NULL;
        if (ff == NULL || (size_t)(ff - s) + 1 >= len)
            return 0;
        size_t at = (size_t)(ff - s);
        unsigned b = s[at + 1];
        if (b == 0x00) {
            q = at + 2;
            continue;
        }
        if (b == 0xFF) {
            q = at + 1;
            continue;
        }
        int is_rst = b >= 0xD0 && b <= 0xD7;
        if (!is_rst && b != 0xD9)
            return 0;
        if (k >= first) {
            size_t row = k / ipr, col = k % ipr;
            if (row >= (size_t)mcu[2] && row < (size_t)mcu[3] && col >= c0 && col < c1) {
                memcpy(d + n, s + start, at - start);
                n += at - start;
                if (copied + 1 < needed) {
                    d[n++] = 0xFF;
                    d[n++] = (uint8_t)(0xD0 + (copied & 7));
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
    d[n++] = 0xFF;
    d[n++] = 0xD9;
    return (long)n;
}

/* ---- the bit-level splice -------------------------------------------------------------------- */

/* A DHT segment redefining every DC table the scan uses with categories 0..11 all coded, the original codes kept;
 * the encoders' tables are rebuilt from it. Returns its length, or 0 when some table has no free code prefix. */
static long long appended_uses; /* DC differences coded with a category the original table lacked */

long long
bs_appended_uses(void)
{
    return appended_uses;
}

static size_t
complete_dc_tables(Header *hd, uint8_t *d, int original_count[4])
{
    size_t n = 4;
    int done[4] = {0, 0, 0, 0};
    for (int c = 0; c < hd->ncomp; c++) {
        int id = hd->dc_tbl[c];
        if (done[id])
            continue;
        done[id] = 1;
        Huff *t = &hd->dc[id];
        original_count[id] = t->nvals;
        int present[16] = {0}, missing = 0, L = 0;
        for (int i = 0; i < t->nvals; i++)
            if (t->vals[i] < 16)
                present[t->vals[i]] = 1;
        for (int sym = 0; sym <= 11; sym++)
            missing += !present[sym];
        for (int l = 1; l <= 16; l++)
            if (t->bits[l])
                L = l;
        if (missing) {
            /* the next free code at length L, and how many codes are free there (all-ones excluded) */
            int next = 0;
            for (int l = 1; l <= L; l++) {
                next += t->bits[l];
                if (l < L)
                    next <<= 1;
            }
            long free_at_L = (1L << L) - next; /* codes next .. 2^L - 1 */
            int L2 = L;
            while (L2 <= 16 && free_at_L * (1L << (L2 - L)) - 1 < missing)
                L2++;
            if (L2 > 16 || free_at_L < 1)
                return 0;
            for (int sym = 0; sym <= 11; sym++)
                if (!present[sym])
                    t->vals[t->nvals++] = (uint8_t)sym;
            t->bits[L2] += (uint8_t)missing;
            huff_build(t);
        }
        d[n++] = (uint8_t)id; /* class 0 (DC), table id */
        memcpy(d + n, t->bits + 1, 16);
        n += 16;
        memcpy(d + n, t->vals, t->nvals);
        n += t->nvals;
    }
    d[0] = 0xFF;
    d[1] = 0xC4;
    d[2] = (uint8_t)((n - 2) >> 8);
    d[3] = (uint8_t)(n - 2);
    return n;
}

static inline int
category(int v)
{
    unsigned a = (unsigned)(v < 0 ? -v : v);
    int s = 0;
    while (a) {
        s++;
        a >>= 1;
    }
    return s;
}

/* The index as made by bs_index with the same K. box[4] = scaled (y0, y1, x0, x1); shift[2] out; stats[2] out
 * (first MCUs decoded, stuffed bits copied). Returns the sub-JPEG's length, 0 if not applicable, -1 on error. */
long
bs_splice_bits(const uint8_t *s, size_t len, const uint64_t *pos, const int16_t *dcp, const uint16_t *offs, int K,
               int denom,
               const int32_t *box, uint8_t *d, size_t cap, int32_t *shift, int64_t *stats)
{
    Header hd;
    if (parse_header(s, len, &hd) || hd.restart)
        return 0;
    int mcu[4];
    int planned = plan(s, len, &hd, denom, box, K, mcu);
    if (planned <= 0)
        return planned;
    uint8_t dht[4 + 4 * (17 + 16)];
    int original_count[4] = {0, 0, 0, 0};
    size_t dht_len = complete_dc_tables(&hd, dht, original_count);
    if (dht_len == 0)
        return 0;
    int sub_w, sub_h;
    sub_size(&hd, mcu, &sub_w, &sub_h, shift, denom);
    if (cap < hd.sos + 1024 + (len - hd.entropy) * 2)
        return -1;
    Writer w = {d, 0, cap, 0, 0, 0};
    w.n = write_header(s, &hd, d, sub_w, sub_h, 1, dht, dht_len);
    int E = per_row_entries(&hd, K), nc = hd.ncomp;
    int new_pred[4] = {0, 0, 0, 0};
    int64_t decoded = 0, copied = 0;
    for (int row = mcu[2]; row < mcu[3]; row++) {
        size_t a = (size_t)row * E + mcu[0] / K;
        size_t b = mcu[1] == hd.per_row ? (size_t)(row + 1) * E : (size_t)row * E + mcu[1] / K;
        /* decode the segment's first MCU, noting where each component's first DC code starts and ends */
        Reader r;
        rd_init(&r, s, len, (size_t)(pos[a] >> 3), (int)(pos[a] & 7));
        uint64_t base = r.loaded * 8 - (uint64_t)r.n, dc_start[4], dc_end[4];
        int value[4];
        if (offs) { /* the index says where each first DC code starts: decode only those */
            for (int c = 0; c < nc; c++) {
                uint64_t target = offs[a * nc + c], cur = r.loaded * 8 - (uint64_t)r.n - base;
                while (cur < target) {
                    int k = target - cur > 32 ? 32 : (int)(target - cur);
                    rd_bits(&r, k);
                    cur += (uint64_t)k;
                }
                int sz = rd_huff(&r, &hd.dc[hd.dc_tbl[c]]);
                if (sz < 0 || sz > 11)
                    return -1;
                int diff = extend(rd_bits(&r, sz), sz);
                dc_start[c] = target;
                dc_end[c] = r.loaded * 8 - (uint64_t)r.n - base;
                value[c] = dcp[a * nc + c] + diff;
            }
            goto decoded_first;
        }
        for (int c = 0; c < nc; c++) {
            const Huff *dct = &hd.dc[hd.dc_tbl[c]], *act = &hd.ac[hd.ac_tbl[c]];
            for (int blk = 0; blk < hd.h[c] * hd.v[c]; blk++) {
                uint64_t at = r.loaded * 8 - (uint64_t)r.n - base;
                int sz = rd_huff(&r, dct);
                if (sz < 0 || sz > 11)
                    return -1;
                int diff = extend(rd_bits(&r, sz), sz);
                if (blk == 0) {
                    dc_start[c] = at;
                    dc_end[c] = r.loaded * 8 - (uint64_t)r.n - base;
                    value[c] = dcp[a * nc + c] + diff;
                    if (c == nc - 1)
                        goto decoded_first; /* the last component's AC codes are only copied */
                }
                for (int k = 1; k < 64; k++) {
                    int rs = rd_huff(&r, act);
                    if (rs < 0)
                        return -1;
                    int run = rs >> 4, z = rs & 15;
                    if (z == 0) {
                        if (run != 15)
                            break;
                        k += 15;
                    } else {
                        k += run;
                        rd_bits(&r, z);
                    }
                }
            }
        }
    decoded_first:
        decoded++;
        /* copy, replacing the first DC of each component */
        uint64_t at = pos[a], cursor = 0;
        for (int c = 0; c < nc; c++) {
            copy_fast(s, len, &at, dc_start[c] - cursor, &w);
            skip_bits(s, &at, dc_end[c] - dc_start[c]);
            const Huff *dct = &hd.dc[hd.dc_tbl[c]];
            int diff = value[c] - new_pred[c], sz = category(diff);
            if (dct->size[sz] == 0)
                return 0;
            for (int i = original_count[hd.dc_tbl[c]]; i < dct->nvals; i++)
                appended_uses += dct->vals[i] == sz;
            wr_put(&w, dct->code[sz], dct->size[sz]);
            wr_put(&w, (unsigned)(diff < 0 ? diff - 1 : diff) & ((1u << sz) - 1), sz);
            cursor = dc_end[c];
        }
        copy_to(s, len, &at, pos[b], &w);
        copied += (int64_t)(pos[b] - pos[a]);
        for (int c = 0; c < nc; c++)
            new_pred[c] = dcp[b * nc + c];
        if (w.overflow)
            return -1;
    }
    wr_flush(&w);
    if (w.overflow || w.n + 2 > cap)
        return -1;
    d[w.n++] = 0xFF;
    d[w.n++] = 0xD9;
    if (stats) {
        stats[0] = decoded;
        stats[1] = copied;
    }
    return (long)w.n;
}
