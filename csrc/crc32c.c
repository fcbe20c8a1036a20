/* CRC-32C (Castagnoli): hardware paths with run-time dispatch, slicing-by-8 fallback.
 *
 * Why three streams: the crc32 instruction has a latency of 3 cycles and a throughput of
 * one per cycle (x86 since Nehalem, most ARMv8 cores alike), so a single dependency chain
 * runs at a third of the unit's speed. A large buffer is cut into three adjacent blocks
 * whose CRCs run interleaved from zero; the results are joined with
 *     crc(A || B) = shift_|B|(crc(A)) ^ crc0(B)
 * where shift_n is the (linear, GF(2)) effect of n zero bytes on the register. shift_n is a
 * 32x32 bit matrix, applied here as four 256-entry tables per block size: 8 loads per
 * 3 blocks, noise next to the 3*8 KiB they cover. (Adler's crc32c.c does the same.)
 *
 * Register convention: the public value is inverted on entry and exit; everything in
 * between (including the tables) works on the raw reflected register.
 */
#include "crc32c.h"

#include <string.h>

#define POLY 0x82F63B78u /* reflected Castagnoli polynomial */
#define LONG_BLOCK 8192
#define SHORT_BLOCK 256

static uint32_t table8[8][256];           /* slicing-by-8 */
static uint32_t long_shift[4][256];       /* register after LONG_BLOCK zero bytes */
static uint32_t short_shift[4][256];      /* register after SHORT_BLOCK zero bytes */
static pb_crc32c_fn dispatch = NULL;
static pb_crc32c_fn hw_fn = NULL;
static const char *impl_name = "slicing-by-8";

/* ---- GF(2) matrix helpers: mat[n] is the image of bit n --------------------------- */

static uint32_t gf2_times(const uint32_t *mat, uint32_t vec) {
    uint32_t sum = 0;
    while (vec) {
        if (vec & 1) sum ^= *mat;
        vec >>= 1;
        mat++;
    }
    return sum;
}

/* out = a after b (powers of one operator commute, so the order is moot) */
static void gf2_compose(uint32_t *out, const uint32_t *a, const uint32_t *b) {
    uint32_t tmp[32];
    for (int n = 0; n < 32; n++) tmp[n] = gf2_times(a, b[n]);
    memcpy(out, tmp, sizeof(tmp));
}

static void zeros_operator(uint32_t *op, size_t nbytes) {
    uint32_t base[32], bit[32];
    bit[0] = POLY; /* one zero bit: r = (r >> 1) ^ (r & 1 ? POLY : 0) */
    for (int n = 1; n < 32; n++) bit[n] = 1u << (n - 1);
    memcpy(base, bit, sizeof(base));
    for (int i = 0; i < 3; i++) gf2_compose(base, base, base); /* 8 bits = one byte */
    for (int n = 0; n < 32; n++) op[n] = 1u << n;              /* identity */
    while (nbytes) {
        if (nbytes & 1) gf2_compose(op, op, base);
        gf2_compose(base, base, base);
        nbytes >>= 1;
    }
}

static void shift_tables(uint32_t tab[4][256], size_t nbytes) {
    uint32_t op[32];
    zeros_operator(op, nbytes);
    for (int k = 0; k < 4; k++)
        for (uint32_t b = 0; b < 256; b++) tab[k][b] = gf2_times(op, b << (8 * k));
}

static inline uint32_t shift(uint32_t tab[4][256], uint32_t crc) {
    return tab[0][crc & 0xff] ^ tab[1][(crc >> 8) & 0xff] ^ tab[2][(crc >> 16) & 0xff] ^
           tab[3][crc >> 24];
}

/* ---- portable slicing-by-8 ------------------------------------------------------- */

static inline uint32_t load_le32(const unsigned char *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static inline uint64_t load_u64(const unsigned char *p) {
    uint64_t v;
    memcpy(&v, p, 8); /* unaligned-safe; compiles to one load */
    return v;
}

uint32_t pb_crc32c_sw(uint32_t value, const void *buf, size_t len) {
    const unsigned char *p = (const unsigned char *)buf;
    uint32_t crc = ~value;
    while (len && ((uintptr_t)p & 7)) {
        crc = table8[0][(crc ^ *p++) & 0xff] ^ (crc >> 8);
        len--;
    }
    while (len >= 8) {
        crc ^= load_le32(p);
        crc = table8[7][crc & 0xff] ^ table8[6][(crc >> 8) & 0xff] ^
              table8[5][(crc >> 16) & 0xff] ^ table8[4][crc >> 24] ^ table8[3][p[4]] ^
              table8[2][p[5]] ^ table8[1][p[6]] ^ table8[0][p[7]];
        p += 8;
        len -= 8;
    }
    while (len--) crc = table8[0][(crc ^ *p++) & 0xff] ^ (crc >> 8);
    return ~crc;
}

/* ---- hardware paths: one body, instantiated per ISA ------------------------------ */

#define PB_DEFINE_HW_CRC(NAME, ATTR, CRC64, CRC8)                                        \
    ATTR uint32_t NAME(uint32_t value, const void *buf, size_t len) {                    \
        const unsigned char *p = (const unsigned char *)buf;                             \
        uint64_t crc0 = (uint32_t)~value, crc1, crc2;                                    \
        while (len && ((uintptr_t)p & 7)) {                                              \
            crc0 = CRC8((uint32_t)crc0, *p++);                                           \
            len--;                                                                       \
        }                                                                                \
        while (len >= 3 * LONG_BLOCK) {                                                  \
            crc1 = crc2 = 0;                                                             \
            const unsigned char *end = p + LONG_BLOCK;                                   \
            do {                                                                         \
                crc0 = CRC64(crc0, load_u64(p));                                         \
                crc1 = CRC64(crc1, load_u64(p + LONG_BLOCK));                            \
                crc2 = CRC64(crc2, load_u64(p + 2 * LONG_BLOCK));                        \
                p += 8;                                                                  \
            } while (p < end);                                                           \
            crc0 = shift(long_shift, (uint32_t)crc0) ^ (uint32_t)crc1;                   \
            crc0 = shift(long_shift, (uint32_t)crc0) ^ (uint32_t)crc2;                   \
            p += 2 * LONG_BLOCK;                                                         \
            len -= 3 * LONG_BLOCK;                                                       \
        }                                                                                \
        while (len >= 3 * SHORT_BLOCK) {                                                 \
            crc1 = crc2 = 0;                                                             \
            const unsigned char *end = p + SHORT_BLOCK;                                  \
            do {                                                                         \
                crc0 = CRC64(crc0, load_u64(p));                                         \
                crc1 = CRC64(crc1, load_u64(p + SHORT_BLOCK));                           \
                crc2 = CRC64(crc2, load_u64(p + 2 * SHORT_BLOCK));                       \
                p += 8;                                                                  \
            } while (p < end);                                                           \
            crc0 = shift(short_shift, (uint32_t)crc0) ^ (uint32_t)crc1;                  \
            crc0 = shift(short_shift, (uint32_t)crc0) ^ (uint32_t)crc2;                  \
            p += 2 * SHORT_BLOCK;                                                        \
            len -= 3 * SHORT_BLOCK;                                                      \
        }                                                                                \
        while (len >= 8) {                                                               \
            crc0 = CRC64(crc0, load_u64(p));                                             \
            p += 8;                                                                      \
            len -= 8;                                                                    \
        }                                                                                \
        while (len--) crc0 = CRC8((uint32_t)crc0, *p++);                                 \
        return ~(uint32_t)crc0;                                                          \
    }

#if (defined(__x86_64__) || defined(_M_X64)) && (defined(__GNUC__) || defined(__clang__))
#define PB_HAVE_X86 1
#include <nmmintrin.h>
#define X86_CRC64(c, v) _mm_crc32_u64((c), (v))
#define X86_CRC8(c, v) _mm_crc32_u8((c), (v))
PB_DEFINE_HW_CRC(crc32c_sse42, __attribute__((target("sse4.2"))), X86_CRC64, X86_CRC8)
#endif

#if defined(__aarch64__) && (defined(__GNUC__) || defined(__clang__))
#define PB_HAVE_ARM 1
#include <arm_acle.h>
#if defined(__linux__)
#include <sys/auxv.h>
#ifndef HWCAP_CRC32
#define HWCAP_CRC32 (1 << 7)
#endif
#endif
#define ARM_CRC64(c, v) __crc32cd((uint32_t)(c), (v))
#define ARM_CRC8(c, v) __crc32cb((c), (v))
PB_DEFINE_HW_CRC(crc32c_armv8, __attribute__((target("+crc"))), ARM_CRC64, ARM_CRC8)
#endif

/* ---- init and dispatch ----------------------------------------------------------- */

void pb_crc32c_init(void) {
    if (dispatch) return;
    for (uint32_t n = 0; n < 256; n++) {
        uint32_t c = n;
        for (int k = 0; k < 8; k++) c = c & 1 ? (c >> 1) ^ POLY : c >> 1;
        table8[0][n] = c;
    }
    for (uint32_t n = 0; n < 256; n++)
        for (int k = 1; k < 8; k++)
            table8[k][n] = (table8[k - 1][n] >> 8) ^ table8[0][table8[k - 1][n] & 0xff];
    shift_tables(long_shift, LONG_BLOCK);
    shift_tables(short_shift, SHORT_BLOCK);
    pb_crc32c_fn chosen = pb_crc32c_sw;
#ifdef PB_HAVE_X86
    __builtin_cpu_init();
    if (__builtin_cpu_supports("sse4.2")) {
        hw_fn = crc32c_sse42;
        impl_name = "sse4.2";
    }
#endif
#ifdef PB_HAVE_ARM
#if defined(__APPLE__)
    hw_fn = crc32c_armv8; /* every Apple arm64 core has the CRC extension */
#elif defined(__linux__)
    if (getauxval(AT_HWCAP) & HWCAP_CRC32) hw_fn = crc32c_armv8;
#endif
    if (hw_fn) impl_name = "armv8-crc";
#endif
    if (hw_fn) chosen = hw_fn;
    dispatch = chosen; /* last: a reader seeing it non-NULL finds the tables ready */
}

uint32_t pb_crc32c(uint32_t value, const void *buf, size_t len) {
    if (!dispatch) pb_crc32c_init();
    return dispatch(value, buf, len);
}

pb_crc32c_fn pb_crc32c_hw(void) {
    pb_crc32c_init();
    return hw_fn;
}

const char *pb_crc32c_impl(void) {
    pb_crc32c_init();
    return impl_name;
}
