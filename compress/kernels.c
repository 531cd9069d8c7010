/*
 * Fast kernels shared by the codecs, each with a plain-C reference in
 * ref.c that the tests compare against bit for bit (R7.4).
 *
 * The build uses plain -O2 without -march, so fast paths are compiled per
 * function with target attributes and chosen at run time
 * (core/cpu.h's probe, made once per process) in two tiers:
 * AVX2 (+FMA, F16C, BMI2) on every x86-64 host we target, and AVX-512
 * (F, VL, BW, DQ) where a kernel gains from it: Philox (16 lanes, vpmulld,
 * vpternlogd), the stochastic levels and natural compression (decisions
 * as mask registers), the bucket norms and maxima, and the threshold scan
 * (vpcompressw, with VBMI2). BMI2's pext/pdep pack and unpack the level
 * codes.
 *
 * Philox: the rounding byte stream (compress_impl.h,
 * compress_stream_bytes) is Philox4x32-10 (core/rng.c) in groups of 16
 * blocks stored word-major, which is how the vector generator holds them:
 * 16 counters in the lanes of four vectors (one per Philox word), the
 * 32x32 -> 64-bit products from mul_epu32 on the even lanes and on the
 * odd lanes shifted down, and each word vector stored as it is. (Until
 * 2026-11 the stream was in block order, and a transpose plus a join pass
 * that widened bytes into 16-bit draws cost a sixth of a qsgd encode; the
 * kernels now take the draws' bytes straight from the generator's
 * stores: 16 consecutive high bytes are one load.) Two groups run with
 * their rounds interleaved: a round is a chain of multiply, shuffle and
 * xor, and one group alone leaves the vector units waiting on it (1.3x
 * faster than one group on Zen 4). Stochastic rounding uses a 16-bit
 * draw per element, so the rounding probability is exact to 2^-17, far
 * below any statistical effect, but generates only 8.5 bits of it: draw
 * i = 256 S(i) + S(2^63 + i / 16), S(j) byte j of the stream. The high
 * byte alone decides unless it ties with the fraction's top 8 bits (1 in
 * 256); the low byte that then decides is shared by 16 elements, which
 * correlates two roundings only when both tie. Each draw is still
 * exactly uniform on 16 bits. Philox runs at about 0.09 ns per byte on
 * one Zen 4 core, bound by vector issue (12 operations per round and 16
 * blocks; a 64-bit-lane variant with fewer multiplies measured the same).
 *
 * Alternatives rejected: a second, faster generator for rounding only (two
 * generators to test against each other and a second definition of "the
 * same bytes on every machine"); AVX-512 as the only fast path (not on
 * every host).
 */
#include "compress/compress_impl.h"
#include "core/cpu.h"
#include "core/philox.h"

#include <immintrin.h>
#include <math.h>

#define S_TARGET __attribute__((target("avx2,fma,f16c,bmi2")))

/* Outputs of at least this many values (4 MB of floats: past the L2) use
 * non-temporal stores. */
#define S_STREAM_MIN ((size_t)1 << 20)

/* Values the fused quantizer and natural compression prefetch ahead of
 * their codes, one line per 16 codes: they compute for a while per chunk,
 * so the hardware prefetcher (driven by the loads) falls behind and each
 * bucket would start with a DRAM stall. Prefetch never faults past the
 * end of x. */
#define S_AHEAD 2048

/* The AVX-512 tier (F, VL, BW, DQ on top of the AVX2 set): 512-bit
 * compress for the threshold scan, ternary logic in Philox. */
#define S_TARGET512                                                       \
    __attribute__((target("avx2,fma,f16c,bmi2,avx512f,avx512vl,avx512bw," \
                          "avx512dq")))

/* -1: not probed yet, 0: reference paths, 1: AVX2, 2: AVX2 and AVX-512.
 * Threads that race on the first probe all store the same value. */
static int s_simd = -1;

static int
s_probe(void)
{
    const struct core_cpu *cpu = core_cpu();
    if (!(cpu->avx2_fma && cpu->f16c && cpu->bmi2))
        return 0;
    return cpu->avx512 ? 2 : 1;
}

int
compress_set_simd(int level)
{
    int best = s_probe();
    s_simd = level < best ? (level < 0 ? 0 : level) : best;
    return s_simd;
}

int
compress_simd_level(void)
{
    int cached = s_simd;
    if (cached < 0) {
        cached = s_probe();
        s_simd = cached;
    }
    return cached;
}

bool
compress_have_avx2(void)
{
    return compress_simd_level() >= 1;
}

/* --- Philox ------------------------------------------------------------- */

static S_TARGET inline void
s_mul_hilo(__m256i a, __m256i m, __m256i *hi, __m256i *lo)
{
    __m256i even = _mm256_mul_epu32(a, m);
    __m256i odd = _mm256_mul_epu32(_mm256_srli_epi64(a, 32), m);
    *lo = _mm256_blend_epi32(even, _mm256_slli_epi64(odd, 32), 0xAA);
    *hi = _mm256_blend_epi32(_mm256_srli_epi64(even, 32), odd, 0xAA);
}

/* The first Philox counter words of the 8 blocks block .. block + 7:
 * c0 = low word + lane, c1 = high word plus the carry of that add. */
static S_TARGET inline void
s_counters(uint64_t block, __m256i *c0, __m256i *c1)
{
    const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    const __m256i flip = _mm256_set1_epi32((int)0x80000000u);
    __m256i base = _mm256_set1_epi32((int)(uint32_t)block);
    *c0 = _mm256_add_epi32(base, lane);
    /* Carry into the high counter word when the low word wraps. */
    __m256i wrapped = _mm256_cmpgt_epi32(_mm256_xor_si256(base, flip),
                                         _mm256_xor_si256(*c0, flip));
    *c1 = _mm256_sub_epi32(_mm256_set1_epi32((int)(uint32_t)(block >> 32)),
                           wrapped);
}

/* Stores the four word vectors of 8 blocks in the word-major layout of
 * the byte stream: word j of lane b at out + 64 j + 4 b (out is where the
 * group's first or second eight lanes go; little-endian host). */
static S_TARGET inline void
s_store8(__m256i c0, __m256i c1, __m256i c2, __m256i c3, uint8_t *out)
{
    _mm256_storeu_si256((__m256i *)(out + 0), c0);
    _mm256_storeu_si256((__m256i *)(out + 64), c1);
    _mm256_storeu_si256((__m256i *)(out + 128), c2);
    _mm256_storeu_si256((__m256i *)(out + 192), c3);
}

/* Writes group `group` of the byte stream (the 16 Philox blocks 16 group
 * .. 16 group + 15, 256 bytes) to out: two independent sets of 8 blocks
 * whose rounds interleave, so one set's multiplies fill the other's
 * latency; kk holds the round keys broadcast (kk[2 r], kk[2 r + 1]). */
static S_TARGET inline void
s_philox16(const __m256i *kk,
           __m256i c2i,
           __m256i c3i,
           uint64_t group,
           uint8_t *out)
{
    const __m256i m0 = _mm256_set1_epi32((int)PHILOX_M0);
    const __m256i m1 = _mm256_set1_epi32((int)PHILOX_M1);
    __m256i a0, a1, b0, b1;
    s_counters(16 * group, &a0, &a1);
    s_counters(16 * group + 8, &b0, &b1);
    __m256i a2 = c2i, a3 = c3i, b2 = c2i, b3 = c3i;
    for (int round = 0; round < 10; round++) {
        __m256i ahi0, alo0, ahi1, alo1, bhi0, blo0, bhi1, blo1;
        s_mul_hilo(a0, m0, &ahi0, &alo0);
        s_mul_hilo(b0, m0, &bhi0, &blo0);
        s_mul_hilo(a2, m1, &ahi1, &alo1);
        s_mul_hilo(b2, m1, &bhi1, &blo1);
        __m256i k0 = kk[2 * round], k1 = kk[2 * round + 1];
        a0 = _mm256_xor_si256(ahi1, _mm256_xor_si256(a1, k0));
        b0 = _mm256_xor_si256(bhi1, _mm256_xor_si256(b1, k0));
        a1 = alo1;
        b1 = blo1;
        a2 = _mm256_xor_si256(ahi0, _mm256_xor_si256(a3, k1));
        b2 = _mm256_xor_si256(bhi0, _mm256_xor_si256(b3, k1));
        a3 = alo0;
        b3 = blo0;
    }
    s_store8(a0, a1, a2, a3, out);
    s_store8(b0, b1, b2, b3, out + 32);
}

/* Groups group .. group + count - 1 of the byte stream to out. */
static S_TARGET void
s_stream_avx2(uint64_t seed,
              uint64_t stream,
              uint64_t group,
              uint8_t *out,
              size_t count)
{
    __m256i kk[20]; /* the round keys, broadcast once per call */
    uint32_t k0 = (uint32_t)seed, k1 = (uint32_t)(seed >> 32);
    for (int round = 0; round < 10; round++) {
        kk[2 * round] = _mm256_set1_epi32((int)k0);
        kk[2 * round + 1] = _mm256_set1_epi32((int)k1);
        k0 += PHILOX_W0;
        k1 += PHILOX_W1;
    }
    __m256i c2 = _mm256_set1_epi32((int)(uint32_t)stream);
    __m256i c3 = _mm256_set1_epi32((int)(uint32_t)(stream >> 32));
    for (size_t g = 0; g < count; g++)
        s_philox16(kk, c2, c3, group + g, out + 256 * g);
}

/* s_mul_hilo on 16 lanes: the low words from one vpmulld, the high words
 * merged under a lane mask (one masked shuffle instead of a shift and a
 * blend). */
static S_TARGET512 inline void
s_mul_hilo512(__m512i a, __m512i m, __m512i *hi, __m512i *lo)
{
    __m512i even = _mm512_mul_epu32(a, m);
    __m512i odd = _mm512_mul_epu32(_mm512_srli_epi64(a, 32), m);
    *lo = _mm512_mullo_epi32(a, m);
    /* even lanes: word 1 of each 64-bit product of even; odd lanes: odd */
    *hi = _mm512_mask_shuffle_epi32(odd, 0x5555, even, _MM_PERM_DDBB);
}

/* s_counters for the 16 blocks block .. block + 15. */
static S_TARGET512 inline void
s_counters512(uint64_t block, __m512i *c0, __m512i *c1)
{
    const __m512i lane =
        _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    __m512i base = _mm512_set1_epi32((int)(uint32_t)block);
    *c0 = _mm512_add_epi32(base, lane);
    __m512i hi = _mm512_set1_epi32((int)(uint32_t)(block >> 32));
    /* Carry into the high counter word where the low word wrapped. */
    *c1 = _mm512_mask_add_epi32(hi,
                                _mm512_cmplt_epu32_mask(*c0, base),
                                hi,
                                _mm512_set1_epi32(1));
}

/* s_philox16 on the AVX-512 tier: groups group and group + 1 (512
 * bytes), a group's 16 blocks in the lanes of one vector, the two
 * groups' rounds interleaved, the three-way xors as one vpternlogd each;
 * the word-major layout makes the stores plain (no transpose). 1.6x the
 * AVX2 version's speed on Zen 4 (which runs 512-bit operations as two
 * 256-bit halves: the gain is fewer instructions, not wider units). */
static S_TARGET512 inline void
s_philox32_512(const __m512i *kk,
               __m512i c2i,
               __m512i c3i,
               uint64_t group,
               uint8_t *out)
{
    const __m512i m0 = _mm512_set1_epi32((int)PHILOX_M0);
    const __m512i m1 = _mm512_set1_epi32((int)PHILOX_M1);
    __m512i a0, a1, b0, b1;
    s_counters512(16 * group, &a0, &a1);
    s_counters512(16 * group + 16, &b0, &b1);
    __m512i a2 = c2i, a3 = c3i, b2 = c2i, b3 = c3i;
    for (int round = 0; round < 10; round++) {
        __m512i ahi0, alo0, ahi1, alo1, bhi0, blo0, bhi1, blo1;
        s_mul_hilo512(a0, m0, &ahi0, &alo0);
        s_mul_hilo512(b0, m0, &bhi0, &blo0);
        s_mul_hilo512(a2, m1, &ahi1, &alo1);
        s_mul_hilo512(b2, m1, &bhi1, &blo1);
        __m512i k0 = kk[2 * round], k1 = kk[2 * round + 1];
        a0 = _mm512_ternarylogic_epi32(ahi1, a1, k0, 0x96);
        b0 = _mm512_ternarylogic_epi32(bhi1, b1, k0, 0x96);
        a1 = alo1;
        b1 = blo1;
        a2 = _mm512_ternarylogic_epi32(ahi0, a3, k1, 0x96);
        b2 = _mm512_ternarylogic_epi32(bhi0, b3, k1, 0x96);
        a3 = alo0;
        b3 = blo0;
    }
    const __m512i words[8] = {a0, a1, a2, a3, b0, b1, b2, b3};
    for (int j = 0; j < 8; j++)
        _mm512_storeu_si512(out + 64 * j, words[j]);
}

/* Pairs of groups from group on; returns the groups written. */
static S_TARGET512 size_t
s_stream_avx512(uint64_t seed,
                uint64_t stream,
                uint64_t group,
                uint8_t *out,
                size_t count)
{
    __m512i kk[20];
    uint32_t k0 = (uint32_t)seed, k1 = (uint32_t)(seed >> 32);
    for (int round = 0; round < 10; round++) {
        kk[2 * round] = _mm512_set1_epi32((int)k0);
        kk[2 * round + 1] = _mm512_set1_epi32((int)k1);
        k0 += PHILOX_W0;
        k1 += PHILOX_W1;
    }
    __m512i c2 = _mm512_set1_epi32((int)(uint32_t)stream);
    __m512i c3 = _mm512_set1_epi32((int)(uint32_t)(stream >> 32));
    size_t g = 0;
    for (; g + 2 <= count; g += 2)
        s_philox32_512(kk, c2, c3, group + g, out + 256 * g);
    return g;
}

/* Groups group .. group + count - 1 of the byte stream to out. */
static void
s_stream_groups(uint64_t seed,
                uint64_t stream,
                uint64_t group,
                uint8_t *out,
                size_t count)
{
    int level = compress_simd_level();
    size_t done = 0;
    if (level >= 2)
        done = s_stream_avx512(seed, stream, group, out, count);
    if (level >= 1)
        s_stream_avx2(seed,
                      stream,
                      group + done,
                      out + 256 * done,
                      count - done);
    else
        compress_stream_bytes_ref(seed, stream, 256 * group, out, 256 * count);
}

void
compress_stream_bytes(uint64_t seed,
                      uint64_t stream,
                      uint64_t first,
                      uint8_t *out,
                      size_t n)
{
    uint8_t part[256];
    for (size_t i = 0; i < n;) {
        uint64_t at = first + i;
        size_t skip = (size_t)(at % 256), whole = (n - i) / 256;
        if (skip == 0 && whole > 0) {
            s_stream_groups(seed, stream, at / 256, out + i, whole);
            i += 256 * whole;
            continue;
        }
        /* A part of a group: the whole group, then the part wanted. */
        size_t take = 256 - skip < n - i ? 256 - skip : n - i;
        s_stream_groups(seed, stream, at / 256, part, 1);
        memcpy(out + i, part + skip, take);
        i += take;
    }
}

/* out[i] = hi[i] 256 + lo[i / 16] for i < n (n a multiple of 32): 32 at a
 * time, the bytes widened and the two shared low bytes broadcast. hi may
 * be the second half of out's bytes: each step writes below what later
 * steps read. */
static S_TARGET512 void
s_join_draws512(const uint8_t *hi, const uint8_t *lo, size_t n, uint16_t *out)
{
    for (size_t i = 0; i < n; i += 32) {
        __m512i h =
            _mm512_cvtepu8_epi16(_mm256_loadu_si256((const __m256i *)(hi + i)));
        __m512i l = _mm512_inserti64x4(
            _mm512_castsi256_si512(_mm256_set1_epi16(lo[i / 16])),
            _mm256_set1_epi16(lo[i / 16 + 1]),
            1);
        _mm512_storeu_si512(out + i,
                            _mm512_or_si512(_mm512_slli_epi16(h, 8), l));
    }
}

/* s_join_draws512 on 16 draws per step (n a multiple of 16). */
static S_TARGET void
s_join_draws_avx2(const uint8_t *hi, const uint8_t *lo, size_t n, uint16_t *out)
{
    for (size_t i = 0; i < n; i += 16) {
        __m256i h =
            _mm256_cvtepu8_epi16(_mm_loadu_si128((const __m128i *)(hi + i)));
        __m256i l = _mm256_set1_epi16(lo[i / 16]);
        _mm256_storeu_si256((__m256i *)(out + i),
                            _mm256_or_si256(_mm256_slli_epi16(h, 8), l));
    }
}

void
compress_join_draws(const uint8_t *hi,
                    const uint8_t *lo,
                    size_t phase,
                    size_t n,
                    uint16_t *out)
{
    size_t i = 0;
    int level = phase == 0 ? compress_simd_level() : 0;
    if (level >= 2) {
        i = n & ~(size_t)31;
        s_join_draws512(hi, lo, i, out);
    }
    if (level >= 1) {
        size_t more = (n - i) & ~(size_t)15;
        s_join_draws_avx2(hi + i, lo + i / 16, more, out + i);
        i += more;
    }
    for (; i < n; i++)
        out[i] = (uint16_t)(hi[i] << 8 | lo[(phase + i) / 16]);
}

void
compress_draw_bytes(uint64_t seed,
                    uint64_t stream,
                    uint64_t first,
                    uint8_t *hi,
                    uint8_t *lo,
                    size_t n)
{
    compress_stream_bytes(seed, stream, first, hi, n);
    compress_stream_bytes(seed,
                          stream,
                          COMPRESS_DRAW_LOW + first / 16,
                          lo,
                          (n + 15) / 16);
}

/* --- finite check --------------------------------------------------------- */

static S_TARGET bool
s_all_finite_avx2(const float *x, size_t n)
{
    const __m256i expo = _mm256_set1_epi32(0x7f800000);
    __m256i bad = _mm256_setzero_si256();
    size_t i = 0;
    for (; i + 32 <= n; i += 32) {
        for (int j = 0; j < 4; j++) {
            __m256i v = _mm256_loadu_si256((const __m256i *)(x + i + 8 * j));
            bad = _mm256_or_si256(
                bad,
                _mm256_cmpeq_epi32(_mm256_and_si256(v, expo), expo));
        }
    }
    if (!_mm256_testz_si256(bad, bad))
        return false;
    return compress_all_finite_ref(x + i, n - i);
}

bool
compress_all_finite(const float *x, size_t n)
{
    if (compress_have_avx2())
        return s_all_finite_avx2(x, n);
    return compress_all_finite_ref(x, n);
}

/* --- threshold scan ------------------------------------------------------- */

/* Byte j of s_pack_lanes[m] is the lane of the j-th set bit of m (zero
 * past the last): the vpermd indices that left-pack the selected lanes of
 * a vector, so the scan emits without a branch per hit. */
/* clang-format off */
static const uint64_t s_pack_lanes[256] = {
    0x0, 0x0, 0x1, 0x100, 0x2, 0x200, 0x201, 0x20100, 0x3, 0x300, 0x301,
    0x30100, 0x302, 0x30200, 0x30201, 0x3020100, 0x4, 0x400, 0x401, 0x40100,
    0x402, 0x40200, 0x40201, 0x4020100, 0x403, 0x40300, 0x40301, 0x4030100,
    0x40302, 0x4030200, 0x4030201, 0x403020100, 0x5, 0x500, 0x501, 0x50100,
    0x502, 0x50200, 0x50201, 0x5020100, 0x503, 0x50300, 0x50301, 0x5030100,
    0x50302, 0x5030200, 0x5030201, 0x503020100, 0x504, 0x50400, 0x50401,
    0x5040100, 0x50402, 0x5040200, 0x5040201, 0x504020100, 0x50403, 0x5040300,
    0x5040301, 0x504030100, 0x5040302, 0x504030200, 0x504030201, 0x50403020100,
    0x6, 0x600, 0x601, 0x60100, 0x602, 0x60200, 0x60201, 0x6020100, 0x603,
    0x60300, 0x60301, 0x6030100, 0x60302, 0x6030200, 0x6030201, 0x603020100,
    0x604, 0x60400, 0x60401, 0x6040100, 0x60402, 0x6040200, 0x6040201,
    0x604020100, 0x60403, 0x6040300, 0x6040301, 0x604030100, 0x6040302,
    0x604030200, 0x604030201, 0x60403020100, 0x605, 0x60500, 0x60501, 0x6050100,
    0x60502, 0x6050200, 0x6050201, 0x605020100, 0x60503, 0x6050300, 0x6050301,
    0x605030100, 0x6050302, 0x605030200, 0x605030201, 0x60503020100, 0x60504,
    0x6050400, 0x6050401, 0x605040100, 0x6050402, 0x605040200, 0x605040201,
    0x60504020100, 0x6050403, 0x605040300, 0x605040301, 0x60504030100,
    0x605040302, 0x60504030200, 0x60504030201, 0x6050403020100, 0x7, 0x700,
    0x701, 0x70100, 0x702, 0x70200, 0x70201, 0x7020100, 0x703, 0x70300, 0x70301,
    0x7030100, 0x70302, 0x7030200, 0x7030201, 0x703020100, 0x704, 0x70400,
    0x70401, 0x7040100, 0x70402, 0x7040200, 0x7040201, 0x704020100, 0x70403,
    0x7040300, 0x7040301, 0x704030100, 0x7040302, 0x704030200, 0x704030201,
    0x70403020100, 0x705, 0x70500, 0x70501, 0x7050100, 0x70502, 0x7050200,
    0x7050201, 0x705020100, 0x70503, 0x7050300, 0x7050301, 0x705030100,
    0x7050302, 0x705030200, 0x705030201, 0x70503020100, 0x70504, 0x7050400,
    0x7050401, 0x705040100, 0x7050402, 0x705040200, 0x705040201, 0x70504020100,
    0x7050403, 0x705040300, 0x705040301, 0x70504030100, 0x705040302,
    0x70504030200, 0x70504030201, 0x7050403020100, 0x706, 0x70600, 0x70601,
    0x7060100, 0x70602, 0x7060200, 0x7060201, 0x706020100, 0x70603, 0x7060300,
    0x7060301, 0x706030100, 0x7060302, 0x706030200, 0x706030201, 0x70603020100,
    0x70604, 0x7060400, 0x7060401, 0x706040100, 0x7060402, 0x706040200,
    0x706040201, 0x70604020100, 0x7060403, 0x706040300, 0x706040301,
    0x70604030100, 0x706040302, 0x70604030200, 0x70604030201, 0x7060403020100,
    0x70605, 0x7060500, 0x7060501, 0x706050100, 0x7060502, 0x706050200,
    0x706050201, 0x70605020100, 0x7060503, 0x706050300, 0x706050301,
    0x70605030100, 0x706050302, 0x70605030200, 0x70605030201, 0x7060503020100,
    0x7060504, 0x706050400, 0x706050401, 0x70605040100, 0x706050402,
    0x70605040200, 0x70605040201, 0x7060504020100, 0x706050403, 0x70605040300,
    0x70605040301, 0x7060504030100, 0x70605040302, 0x7060504030200,
    0x7060504030201, 0x706050403020100,
};
/* clang-format on */

/* The AVX-512 tier plus VBMI2 (vpcompressw), for the threshold scan only:
 * it checks for VBMI2 itself (core/cpu.h). */
#define S_TARGET512V                                                      \
    __attribute__((target("avx2,fma,f16c,bmi2,avx512f,avx512vl,avx512bw," \
                          "avx512dq,avx512vbmi2")))

/* Values per chunk of the fast scans: a chunk's positions fit in 16 bits,
 * and its 16 KB are still in L1 when the values of its hits are gathered. */
#define S_SCAN_CHUNK 4096

/* Length of the chunk at i: S_SCAN_CHUNK, or what is left rounded down to
 * a multiple of 32 (0 at the end: the reference takes the tail). */
static size_t
s_chunk_len(size_t n, size_t i)
{
    return n - i < S_SCAN_CHUNK ? (n - i) & ~(size_t)31 : S_SCAN_CHUNK;
}

/* Left-packs the positions at + lane of the lanes selected by m (8 bits)
 * into pos[count..]; writes 8 slots whatever m is (the caller has room),
 * returns the new count. */
static S_TARGET inline size_t
s_emit8(unsigned m, uint32_t at, uint32_t *pos, size_t count)
{
    __m256i lanes =
        _mm256_cvtepu8_epi32(_mm_cvtsi64_si128((long long)s_pack_lanes[m]));
    _mm256_storeu_si256((__m256i *)(pos + count),
                        _mm256_add_epi32(lanes, _mm256_set1_epi32((int)at)));
    return count + (size_t)__builtin_popcount(m);
}

/* Bit j set when lane j's magnitude key exceeds tk; top keeps the
 * largest key seen. */
static S_TARGET inline uint32_t
s_mask8(__m256i v, __m256i tk, __m256i mag, __m256i *top)
{
    __m256i key = _mm256_and_si256(v, mag);
    *top = _mm256_max_epi32(*top, key);
    return (uint32_t)_mm256_movemask_ps(
        _mm256_castsi256_ps(_mm256_cmpgt_epi32(key, tk)));
}

/* The positions (from 0) of the keys > tk among the len values at x (len
 * a multiple of 32, at most S_SCAN_CHUNK) into pos, left-packed by a vpermd
 * per 8 lanes: a data-dependent branch per hit would mispredict at the 1 %
 * densities top-k uses. Returns their count; top keeps the largest key. */
static S_TARGET size_t
s_chunk_avx2(const float *x,
             size_t len,
             __m256i tk,
             uint32_t *pos,
             __m256i *top)
{
    const __m256i mag = _mm256_set1_epi32(0x7fffffff);
    __m256i hi = *top;
    size_t hits = 0;
    for (size_t i = 0; i < len; i += 32) {
        const __m256i *at = (const __m256i *)(x + i);
        uint32_t m0 = s_mask8(_mm256_loadu_si256(at), tk, mag, &hi);
        uint32_t m1 = s_mask8(_mm256_loadu_si256(at + 1), tk, mag, &hi);
        uint32_t m2 = s_mask8(_mm256_loadu_si256(at + 2), tk, mag, &hi);
        uint32_t m3 = s_mask8(_mm256_loadu_si256(at + 3), tk, mag, &hi);
        hits = s_emit8(m0, (uint32_t)i, pos, hits);
        hits = s_emit8(m1, (uint32_t)i + 8, pos, hits);
        hits = s_emit8(m2, (uint32_t)i + 16, pos, hits);
        hits = s_emit8(m3, (uint32_t)i + 24, pos, hits);
    }
    *top = hi;
    return hits;
}

/* Appends a chunk's hits (positions pos[0..hits) in the values at x, the
 * chunk starting at element base) to idx, and their bit patterns gathered
 * from x (still in L1) to bits, as far as cap allows; returns count + hits:
 * every hit is counted, written or not. */
static S_TARGET size_t
s_append_avx2(const float *x,
              uint32_t base,
              const uint32_t *pos,
              size_t hits,
              uint32_t *idx,
              uint32_t *bits,
              size_t cap,
              size_t count)
{
    size_t room = cap > count ? cap - count : 0;
    size_t m = hits < room ? hits : room, j = 0;
    const __m256i at = _mm256_set1_epi32((int)base);
    for (; j + 8 <= m; j += 8) {
        __m256i p = _mm256_loadu_si256((const __m256i *)(pos + j));
        _mm256_storeu_si256((__m256i *)(idx + count + j),
                            _mm256_add_epi32(p, at));
        if (bits != NULL)
            _mm256_storeu_si256((__m256i *)(bits + count + j),
                                _mm256_i32gather_epi32((const int *)x, p, 4));
    }
    for (; j < m; j++) {
        idx[count + j] = base + pos[j];
        if (bits != NULL)
            bits[count + j] = compress_f2u(x[pos[j]]);
    }
    return count + hits;
}

/* The threshold scan, chunk by chunk: the positions of the hits first
 * (only them: a vpermd and a store per 8 lanes), then their values with a
 * gather from L1. Left-packing the values too, in the same pass, took
 * 1.2x the time on Zen 4. */
static S_TARGET size_t
s_select_ge_avx2(const float *x,
                 size_t n,
                 uint32_t tkey,
                 uint32_t *idx,
                 uint32_t *bits,
                 size_t cap,
                 uint32_t *top_key)
{
    /* Magnitude keys are non-negative int32: compare key > tkey - 1
     * (unsigned wrap-around, so tkey 0 selects every key). */
    const __m256i tk = _mm256_set1_epi32((int)(tkey - 1u));
    __m256i top = _mm256_setzero_si256(); /* largest key: Inf/NaN show */
    uint32_t pos[S_SCAN_CHUNK];
    size_t count = 0, i = 0;
    for (size_t len = s_chunk_len(n, i); len > 0; len = s_chunk_len(n, i)) {
        size_t hits = s_chunk_avx2(x + i, len, tk, pos, &top);
        count =
            s_append_avx2(x + i, (uint32_t)i, pos, hits, idx, bits, cap, count);
        i += len;
    }
    uint32_t lanes[8], worst = 0;
    _mm256_storeu_si256((__m256i *)lanes, top);
    for (int j = 0; j < 8; j++)
        worst = lanes[j] > worst ? lanes[j] : worst;
    *top_key = worst;
    return compress_select_ge_ref(x + i,
                                  n - i,
                                  tkey,
                                  idx,
                                  bits,
                                  cap,
                                  count,
                                  i,
                                  top_key);
}

/* The 16-bit positions of the 32 lanes of the first step of a chunk. */
static const uint16_t s_lane16[32] = {
    0,  1,  2,  3,  4,  5,  6,  7,  8,  9,  10, 11, 12, 13, 14, 15,
    16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 30, 31};

/* The positions (from 0) of the keys >= tk among the len values at x (len
 * a multiple of 32, at most S_SCAN_CHUNK) into pos: two 16-lane compares
 * make a 32-bit mask, and one vpcompressw (register form, then a plain
 * store: the memory form is microcoded on Zen 4) left-packs 32 16-bit
 * positions. Returns their count; top keeps the largest key. */
static S_TARGET512V size_t
s_chunk_avx512(const float *x,
               size_t len,
               __m512i tk,
               uint16_t *pos,
               __m512i *top)
{
    const __m512i mag = _mm512_set1_epi32(0x7fffffff);
    const __m512i step = _mm512_set1_epi16(32);
    __m512i at = _mm512_loadu_si512(s_lane16);
    __m512i hi = *top;
    size_t hits = 0;
    for (size_t i = 0; i < len; i += 32) {
        __m512i k0 = _mm512_and_si512(_mm512_loadu_si512(x + i), mag);
        __m512i k1 = _mm512_and_si512(_mm512_loadu_si512(x + i + 16), mag);
        hi = _mm512_max_epu32(hi, _mm512_max_epu32(k0, k1));
        __mmask32 m = _mm512_kunpackw(_mm512_cmpge_epu32_mask(k1, tk),
                                      _mm512_cmpge_epu32_mask(k0, tk));
        _mm512_storeu_si512(pos + hits, _mm512_maskz_compress_epi16(m, at));
        hits += (size_t)__builtin_popcount(m);
        at = _mm512_add_epi16(at, step);
    }
    *top = hi;
    return hits;
}

/* s_append_avx2 for 16-bit positions, 16 at a time with masked loads,
 * gathers and stores, so nothing is written past cap. */
static S_TARGET512V size_t
s_append_avx512(const float *x,
                uint32_t base,
                const uint16_t *pos,
                size_t hits,
                uint32_t *idx,
                uint32_t *bits,
                size_t cap,
                size_t count)
{
    size_t room = cap > count ? cap - count : 0;
    size_t m = hits < room ? hits : room;
    const __m512i at = _mm512_set1_epi32((int)base);
    for (size_t j = 0; j < m; j += 16) {
        __mmask16 keep =
            (__mmask16)(m - j >= 16 ? 0xffffu : (1u << (m - j)) - 1);
        __m512i p =
            _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(keep, pos + j));
        _mm512_mask_storeu_epi32(idx + count + j,
                                 keep,
                                 _mm512_add_epi32(p, at));
        if (bits != NULL)
            _mm512_mask_storeu_epi32(
                bits + count + j,
                keep,
                _mm512_mask_i32gather_epi32(_mm512_setzero_si512(),
                                            keep,
                                            p,
                                            x,
                                            4));
    }
    return count + hits;
}

/* The AVX2 scan's two steps with AVX-512: one vpcompressw per 32 values
 * instead of four vpcompressd (positions and values of each 16 lanes),
 * which left the scan bound by the compress unit on Zen 4 (1.25x the time
 * of this one on 64 MB, 1.9x in cache). */
static S_TARGET512V size_t
s_select_ge_avx512(const float *x,
                   size_t n,
                   uint32_t tkey,
                   uint32_t *idx,
                   uint32_t *bits,
                   size_t cap,
                   uint32_t *top_key)
{
    const __m512i tk = _mm512_set1_epi32((int)tkey);
    __m512i top = _mm512_setzero_si512();
    uint16_t pos[S_SCAN_CHUNK];
    size_t count = 0, i = 0;
    for (size_t len = s_chunk_len(n, i); len > 0; len = s_chunk_len(n, i)) {
        size_t hits = s_chunk_avx512(x + i, len, tk, pos, &top);
        count = s_append_avx512(x + i,
                                (uint32_t)i,
                                pos,
                                hits,
                                idx,
                                bits,
                                cap,
                                count);
        i += len;
    }
    *top_key = _mm512_reduce_max_epu32(top);
    return compress_select_ge_ref(x + i,
                                  n - i,
                                  tkey,
                                  idx,
                                  bits,
                                  cap,
                                  count,
                                  i,
                                  top_key);
}

size_t
compress_select_ge_top(const float *x,
                       size_t n,
                       float t,
                       uint32_t *idx,
                       uint32_t *bits,
                       size_t cap,
                       uint32_t *top)
{
    uint32_t tkey = compress_f2u(t);
    int level = compress_simd_level();
    *top = 0;
    /* AVX-512 hosts without VBMI2 (Skylake-SP, Cascade Lake) take the AVX2
     * scan, so every scan that runs is one the tests run here. */
    if (level >= 2 && core_cpu()->vbmi2)
        return s_select_ge_avx512(x, n, tkey, idx, bits, cap, top);
    if (level >= 1)
        return s_select_ge_avx2(x, n, tkey, idx, bits, cap, top);
    return compress_select_ge_ref(x, n, tkey, idx, bits, cap, 0, 0, top);
}

size_t
compress_select_ge(const float *x,
                   size_t n,
                   float t,
                   uint32_t *idx,
                   uint32_t *bits,
                   size_t cap,
                   bool *finite)
{
    uint32_t top = 0;
    size_t count = compress_select_ge_top(x, n, t, idx, bits, cap, &top);
    if (finite != NULL)
        *finite = top < 0x7f800000u;
    return count;
}

/* --- selection by key range ------------------------------------------------
 */

/* 8 lanes per step, left-packed by the vpermd table of the scan; the
 * unsigned compare is a signed one on both sides flipped by 2^31. */
static S_TARGET size_t
s_select_range_avx2(const uint32_t *bits,
                    const uint32_t *tag,
                    size_t m,
                    uint32_t lo,
                    uint32_t span,
                    uint32_t *out_tag,
                    float *out_vals,
                    size_t cap)
{
    const __m256i mag = _mm256_set1_epi32(0x7fffffff);
    const __m256i flip = _mm256_set1_epi32((int)0x80000000u);
    const __m256i vlo = _mm256_set1_epi32((int)lo);
    const __m256i vspan = _mm256_set1_epi32((int)(span ^ 0x80000000u));
    size_t count = 0, i = 0;
    for (; i + 8 <= m; i += 8) {
        __m256i b = _mm256_loadu_si256((const __m256i *)(bits + i));
        __m256i d = _mm256_sub_epi32(_mm256_and_si256(b, mag), vlo);
        __m256i sel = _mm256_cmpgt_epi32(vspan, _mm256_xor_si256(d, flip));
        unsigned s = (unsigned)_mm256_movemask_ps(_mm256_castsi256_ps(sel));
        if (cap < 8 || count > cap - 8) { /* near cap: one at a time */
            count = compress_select_range_ref(bits + i,
                                              tag + i,
                                              8,
                                              lo,
                                              span,
                                              out_tag,
                                              out_vals,
                                              cap,
                                              count);
            continue;
        }
        __m256i lanes =
            _mm256_cvtepu8_epi32(_mm_cvtsi64_si128((long long)s_pack_lanes[s]));
        __m256i t = _mm256_loadu_si256((const __m256i *)(tag + i));
        _mm256_storeu_si256((__m256i *)(out_tag + count),
                            _mm256_permutevar8x32_epi32(t, lanes));
        if (out_vals != NULL)
            _mm256_storeu_si256((__m256i *)(out_vals + count),
                                _mm256_permutevar8x32_epi32(b, lanes));
        count += (size_t)__builtin_popcount(s);
    }
    return compress_select_range_ref(bits + i,
                                     tag + i,
                                     m - i,
                                     lo,
                                     span,
                                     out_tag,
                                     out_vals,
                                     cap,
                                     count);
}

/* 16 lanes per step: a compare into a mask, vpcompressd (register form),
 * masked stores that stop at cap. */
static S_TARGET512 size_t
s_select_range_avx512(const uint32_t *bits,
                      const uint32_t *tag,
                      size_t m,
                      uint32_t lo,
                      uint32_t span,
                      uint32_t *out_tag,
                      float *out_vals,
                      size_t cap)
{
    const __m512i mag = _mm512_set1_epi32(0x7fffffff);
    const __m512i vlo = _mm512_set1_epi32((int)lo);
    const __m512i vspan = _mm512_set1_epi32((int)span);
    size_t count = 0, i = 0;
    for (; i + 16 <= m; i += 16) {
        __m512i b = _mm512_loadu_si512(bits + i);
        __m512i d = _mm512_sub_epi32(_mm512_and_si512(b, mag), vlo);
        __mmask16 sel = _mm512_cmplt_epu32_mask(d, vspan);
        __m512i t = _mm512_loadu_si512(tag + i);
        if (cap >= 16 && count <= cap - 16) {
            _mm512_storeu_si512(out_tag + count,
                                _mm512_maskz_compress_epi32(sel, t));
            if (out_vals != NULL)
                _mm512_storeu_si512(out_vals + count,
                                    _mm512_maskz_compress_epi32(sel, b));
        } else if (count < cap) { /* the last slots: stop at cap */
            __mmask16 keep = (__mmask16)((1u << (cap - count)) - 1);
            _mm512_mask_storeu_epi32(out_tag + count,
                                     keep,
                                     _mm512_maskz_compress_epi32(sel, t));
            if (out_vals != NULL)
                _mm512_mask_storeu_epi32(out_vals + count,
                                         keep,
                                         _mm512_maskz_compress_epi32(sel, b));
        }
        count += (size_t)__builtin_popcount(sel);
    }
    return compress_select_range_ref(bits + i,
                                     tag + i,
                                     m - i,
                                     lo,
                                     span,
                                     out_tag,
                                     out_vals,
                                     cap,
                                     count);
}

size_t
compress_select_range(const uint32_t *bits,
                      const uint32_t *tag,
                      size_t m,
                      uint32_t lo,
                      uint32_t span,
                      uint32_t *out_tag,
                      float *out_vals,
                      size_t cap)
{
    int level = compress_simd_level();
    if (level >= 2)
        return s_select_range_avx512(bits,
                                     tag,
                                     m,
                                     lo,
                                     span,
                                     out_tag,
                                     out_vals,
                                     cap);
    if (level == 1)
        return s_select_range_avx2(bits,
                                   tag,
                                   m,
                                   lo,
                                   span,
                                   out_tag,
                                   out_vals,
                                   cap);
    return compress_select_range_ref(bits,
                                     tag,
                                     m,
                                     lo,
                                     span,
                                     out_tag,
                                     out_vals,
                                     cap,
                                     0);
}

/* --- scaled sign ------------------------------------------------------------
 */

static S_TARGET double
s_sign_bucket_avx2(const float *x, size_t n, uint8_t *bits)
{
    const __m256 mag = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
    __m256d s0 = _mm256_setzero_pd(), s1 = _mm256_setzero_pd();
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 v = _mm256_loadu_ps(x + i);
        bits[i / 8] = (uint8_t)_mm256_movemask_ps(v);
        __m256 a = _mm256_and_ps(v, mag);
        s0 = _mm256_add_pd(s0, _mm256_cvtps_pd(_mm256_castps256_ps128(a)));
        s1 = _mm256_add_pd(s1, _mm256_cvtps_pd(_mm256_extractf128_ps(a, 1)));
    }
    /* lanes[j] = l_j + l_(j+4): the reference's pairwise order. */
    double lanes[4], tail = 0;
    _mm256_storeu_pd(lanes, _mm256_add_pd(s0, s1));
    if (i < n) {
        bits[i / 8] = 0;
        for (size_t j = i; j < n; j++) {
            tail += fabs((double)x[j]);
            if (signbit(x[j]))
                bits[j / 8] |= (uint8_t)(1u << (j % 8));
        }
    }
    return ((lanes[0] + lanes[1]) + (lanes[2] + lanes[3])) + tail;
}

double
compress_sign_bucket(const float *x, size_t n, uint8_t *bits)
{
    if (compress_have_avx2())
        return s_sign_bucket_avx2(x, n, bits);
    return compress_sign_bucket_ref(x, n, bits);
}

/* --- fp16 ----------------------------------------------------------------- */

static S_TARGET bool
s_f32_to_f16_avx2(const float *x, size_t n, uint16_t *h)
{
    const __m256 hi = _mm256_set1_ps(65504.0f), lo = _mm256_set1_ps(-65504.0f);
    const __m256i expo = _mm256_set1_epi32(0x7f800000);
    __m256i bad = _mm256_setzero_si256();
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 v = _mm256_loadu_ps(x + i);
        __m256i e = _mm256_and_si256(_mm256_castps_si256(v), expo);
        bad = _mm256_or_si256(bad, _mm256_cmpeq_epi32(e, expo));
        v = _mm256_min_ps(_mm256_max_ps(v, lo), hi);
        _mm_storeu_si128((__m128i *)(h + i),
                         _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT));
    }
    bool tail = compress_f32_to_f16_ref(x + i, n - i, h + i);
    return tail && _mm256_testz_si256(bad, bad);
}

bool
compress_f32_to_f16(const float *x, size_t n, uint16_t *h)
{
    if (compress_have_avx2())
        return s_f32_to_f16_avx2(x, n, h);
    return compress_f32_to_f16_ref(x, n, h);
}

/* Eight floats to eight halves: F16C for fp16 (clamped to +-65504 first:
 * saturation), the reference's integer rounding for bf16. */
static S_TARGET inline __m128i
s_narrow8(__m256 v, bool bf16)
{
    if (!bf16) {
        const __m256 hi = _mm256_set1_ps(65504.0f);
        const __m256 lo = _mm256_set1_ps(-65504.0f);
        return _mm256_cvtps_ph(_mm256_min_ps(_mm256_max_ps(v, lo), hi),
                               _MM_FROUND_TO_NEAREST_INT);
    }
    const __m256i expo = _mm256_set1_epi32(0x7f800000);
    __m256i u = _mm256_castps_si256(v);
    __m256i r = _mm256_add_epi32(
        _mm256_add_epi32(u, _mm256_set1_epi32(0x7fff)),
        _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1)));
    __m256i sat = _mm256_or_si256(
        _mm256_and_si256(u, _mm256_set1_epi32((int)0x80000000u)),
        _mm256_set1_epi32(0x7f7f0000));
    __m256i inf = _mm256_cmpeq_epi32(_mm256_and_si256(r, expo), expo);
    r = _mm256_srli_epi32(_mm256_blendv_epi8(r, sat, inf), 16);
    r = _mm256_permute4x64_epi64(_mm256_packus_epi32(r, r), 0x08);
    return _mm256_castsi256_si128(r);
}

/* The reverse: eight halves to eight floats. */
static S_TARGET inline __m256
s_widen8(__m128i h, bool bf16)
{
    if (!bf16)
        return _mm256_cvtph_ps(h);
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}

/* One body, two instances (below): the format is a constant in each. */
__attribute__((target("avx2,fma,f16c,bmi2"), always_inline)) static inline bool
s_f32_to_half_bytes_avx2(const float *x, size_t n, bool bf16, uint8_t *out)
{
    const __m256i expo = _mm256_set1_epi32(0x7f800000);
    __m256i bad = _mm256_setzero_si256();
    size_t i = 0;
    /* Large outputs: non-temporal stores once out + 2 i is 16-byte
     * aligned (no read-for-ownership of lines about to be overwritten,
     * which is a third of the memory traffic of this kernel). */
    bool stream = n >= S_STREAM_MIN && ((uintptr_t)out & 1u) == 0;
    size_t lead = stream ? ((16 - ((uintptr_t)out & 15u)) & 15u) / 2 : 0;
    bool head = compress_to_half_bytes_ref(x, lead, bf16, out);
    for (i = lead; i + 8 <= n; i += 8) {
        __m256 v = _mm256_loadu_ps(x + i);
        __m256i e = _mm256_and_si256(_mm256_castps_si256(v), expo);
        bad = _mm256_or_si256(bad, _mm256_cmpeq_epi32(e, expo));
        __m128i q = s_narrow8(v, bf16);
        if (stream)
            _mm_stream_si128((__m128i *)(out + 2 * i), q);
        else
            _mm_storeu_si128((__m128i *)(out + 2 * i), q);
    }
    if (stream)
        _mm_sfence();
    bool tail =
        compress_to_half_bytes_ref(x + i, n - i, bf16, out + 2 * i) && head;
    return tail && _mm256_testz_si256(bad, bad);
}

static S_TARGET bool
s_f32_to_f16_bytes_avx2(const float *x, size_t n, uint8_t *out)
{
    return s_f32_to_half_bytes_avx2(x, n, false, out);
}

static S_TARGET bool
s_f32_to_bf16_bytes_avx2(const float *x, size_t n, uint8_t *out)
{
    return s_f32_to_half_bytes_avx2(x, n, true, out);
}

bool
compress_f32_to_half_bytes(const float *x, size_t n, bool bf16, uint8_t *out)
{
    if (compress_have_avx2())
        return bf16 ? s_f32_to_bf16_bytes_avx2(x, n, out)
                    : s_f32_to_f16_bytes_avx2(x, n, out);
    return compress_to_half_bytes_ref(x, n, bf16, out);
}

__attribute__((target("avx2,fma,f16c,bmi2"), always_inline)) static inline bool
s_half_bytes_to_f32_avx2(const uint8_t *in, size_t n, bool bf16, float *y)
{
    const __m128i expo = _mm_set1_epi16(bf16 ? 0x7f80 : 0x7c00);
    __m128i bad = _mm_setzero_si128();
    /* Large outputs: non-temporal stores from the first 32-byte aligned
     * y + i on (see the encoder). */
    bool stream = n >= S_STREAM_MIN && ((uintptr_t)y & 3u) == 0;
    size_t i = stream ? ((32 - ((uintptr_t)y & 31u)) & 31u) / 4 : 0;
    i = i < n ? i : n;
    bool ok = compress_half_bytes_ref(in, i, bf16, y);
    for (; i + 8 <= n; i += 8) {
        __m128i h = _mm_loadu_si128((const __m128i *)(in + 2 * i));
        bad = _mm_or_si128(bad, _mm_cmpeq_epi16(_mm_and_si128(h, expo), expo));
        __m256 v = s_widen8(h, bf16);
        if (stream)
            _mm256_stream_ps(y + i, v);
        else
            _mm256_storeu_ps(y + i, v);
    }
    if (stream)
        _mm_sfence();
    ok = compress_half_bytes_ref(in + 2 * i, n - i, bf16, y + i) && ok;
    return ok && _mm_testz_si128(bad, bad);
}

static S_TARGET bool
s_f16_bytes_to_f32_avx2(const uint8_t *in, size_t n, float *y)
{
    return s_half_bytes_to_f32_avx2(in, n, false, y);
}

static S_TARGET bool
s_bf16_bytes_to_f32_avx2(const uint8_t *in, size_t n, float *y)
{
    return s_half_bytes_to_f32_avx2(in, n, true, y);
}

bool
compress_half_bytes_to_f32(const uint8_t *in, size_t n, bool bf16, float *y)
{
    if (compress_have_avx2())
        return bf16 ? s_bf16_bytes_to_f32_avx2(in, n, y)
                    : s_f16_bytes_to_f32_avx2(in, n, y);
    return compress_half_bytes_ref(in, n, bf16, y);
}

static S_TARGET void
s_f16_to_f32_avx2(const uint16_t *h, size_t n, float *y)
{
    size_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(
            y + i,
            _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(h + i))));
    for (; i < n; i++)
        y[i] = compress_f16_to_f32_ref(h[i]);
}

void
compress_f16_to_f32(const uint16_t *h, size_t n, float *y)
{
    if (compress_have_avx2()) {
        s_f16_to_f32_avx2(h, n, y);
        return;
    }
    for (size_t i = 0; i < n; i++)
        y[i] = compress_f16_to_f32_ref(h[i]);
}

/* --- bucket norms ------------------------------------------------------------
 */

/* Eight 8-lane accumulators: acc[k] holds lanes 8k .. 8k + 7. */
static S_TARGET double
s_sumsq_avx2(const float *x, size_t n)
{
    __m256 a[8];
    for (int k = 0; k < 8; k++)
        a[k] = _mm256_setzero_ps();
    size_t i = 0;
    for (; i + 64 <= n; i += 64) {
        __m256 v0 = _mm256_loadu_ps(x + i), v1 = _mm256_loadu_ps(x + i + 8);
        __m256 v2 = _mm256_loadu_ps(x + i + 16);
        __m256 v3 = _mm256_loadu_ps(x + i + 24);
        __m256 v4 = _mm256_loadu_ps(x + i + 32);
        __m256 v5 = _mm256_loadu_ps(x + i + 40);
        __m256 v6 = _mm256_loadu_ps(x + i + 48);
        __m256 v7 = _mm256_loadu_ps(x + i + 56);
        a[0] = _mm256_fmadd_ps(v0, v0, a[0]);
        a[1] = _mm256_fmadd_ps(v1, v1, a[1]);
        a[2] = _mm256_fmadd_ps(v2, v2, a[2]);
        a[3] = _mm256_fmadd_ps(v3, v3, a[3]);
        a[4] = _mm256_fmadd_ps(v4, v4, a[4]);
        a[5] = _mm256_fmadd_ps(v5, v5, a[5]);
        a[6] = _mm256_fmadd_ps(v6, v6, a[6]);
        a[7] = _mm256_fmadd_ps(v7, v7, a[7]);
    }
    /* Halving as the reference: w = 32 (acc k += acc k + 4), 16, 8, then
     * 4, 2, 1 within the last eight lanes. */
    __m256 h0 =
        _mm256_add_ps(_mm256_add_ps(a[0], a[4]), _mm256_add_ps(a[2], a[6]));
    __m256 h1 =
        _mm256_add_ps(_mm256_add_ps(a[1], a[5]), _mm256_add_ps(a[3], a[7]));
    float l[8], tail = 0;
    _mm256_storeu_ps(l, _mm256_add_ps(h0, h1));
    for (; i < n; i++)
        tail = _mm_cvtss_f32(
            _mm_fmadd_ss(_mm_set_ss(x[i]), _mm_set_ss(x[i]), _mm_set_ss(tail)));
    float s = ((l[0] + l[4]) + (l[2] + l[6])) + ((l[1] + l[5]) + (l[3] + l[7]));
    return compress_sumsq_finish(s + tail, x, n);
}

/* Four 16-lane accumulators: acc[k] holds lanes 16k .. 16k + 15. */
static S_TARGET512 double
s_sumsq_avx512(const float *x, size_t n)
{
    __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    size_t i = 0;
    for (; i + 64 <= n; i += 64) {
        __m512 v0 = _mm512_loadu_ps(x + i), v1 = _mm512_loadu_ps(x + i + 16);
        __m512 v2 = _mm512_loadu_ps(x + i + 32);
        __m512 v3 = _mm512_loadu_ps(x + i + 48);
        a0 = _mm512_fmadd_ps(v0, v0, a0);
        a1 = _mm512_fmadd_ps(v1, v1, a1);
        a2 = _mm512_fmadd_ps(v2, v2, a2);
        a3 = _mm512_fmadd_ps(v3, v3, a3);
    }
    /* Halving as the reference: w = 32, 16, 8, then 4, 2, 1. */
    __m512 h = _mm512_add_ps(_mm512_add_ps(a0, a2), _mm512_add_ps(a1, a3));
    __m256 q =
        _mm256_add_ps(_mm512_castps512_ps256(h), _mm512_extractf32x8_ps(h, 1));
    float l[8], tail = 0;
    _mm256_storeu_ps(l, q);
    for (; i < n; i++)
        tail = _mm_cvtss_f32(
            _mm_fmadd_ss(_mm_set_ss(x[i]), _mm_set_ss(x[i]), _mm_set_ss(tail)));
    float s = ((l[0] + l[4]) + (l[2] + l[6])) + ((l[1] + l[5]) + (l[3] + l[7]));
    return compress_sumsq_finish(s + tail, x, n);
}

double
compress_sumsq(const float *x, size_t n)
{
    int level = compress_simd_level();
    if (level >= 2)
        return s_sumsq_avx512(x, n);
    if (level == 1)
        return s_sumsq_avx2(x, n);
    return compress_sumsq_ref(x, n);
}

/* Max over the magnitude bit patterns: orders like |x| for finite values
 * and puts Inf and NaN above every finite one, so a non-finite input
 * shows in the result (NaN-propagation rules of max_ps would lose it). */
static S_TARGET float
s_maxabs_avx2(const float *x, size_t n)
{
    const __m256i mag = _mm256_set1_epi32(0x7fffffff);
    __m256i m = _mm256_setzero_si256();
    size_t i = 0;
    for (; i + 8 <= n; i += 8)
        m = _mm256_max_epi32(
            m,
            _mm256_and_si256(_mm256_loadu_si256((const __m256i *)(x + i)),
                             mag));
    uint32_t lanes[8], best = 0;
    _mm256_storeu_si256((__m256i *)lanes, m);
    for (int j = 0; j < 8; j++)
        best = lanes[j] > best ? lanes[j] : best;
    for (; i < n; i++) {
        uint32_t key = compress_f2u(x[i]) & 0x7fffffffu;
        best = key > best ? key : best;
    }
    return compress_u2f(best);
}

/* The same on 16 lanes, two accumulators (max is order-free: any split
 * gives the same result). */
static S_TARGET512 float
s_maxabs_avx512(const float *x, size_t n)
{
    const __m512i mag = _mm512_set1_epi32(0x7fffffff);
    __m512i m0 = _mm512_setzero_si512(), m1 = m0;
    size_t i = 0;
    for (; i + 32 <= n; i += 32) {
        m0 = _mm512_max_epu32(m0,
                              _mm512_and_si512(_mm512_loadu_si512(x + i), mag));
        m1 = _mm512_max_epu32(
            m1,
            _mm512_and_si512(_mm512_loadu_si512(x + i + 16), mag));
    }
    uint32_t best = _mm512_reduce_max_epu32(_mm512_max_epu32(m0, m1));
    for (; i < n; i++) {
        uint32_t key = compress_f2u(x[i]) & 0x7fffffffu;
        best = key > best ? key : best;
    }
    return compress_u2f(best);
}

float
compress_maxabs(const float *x, size_t n)
{
    if (compress_simd_level() >= 2)
        return s_maxabs_avx512(x, n);
    if (compress_have_avx2())
        return s_maxabs_avx2(x, n);
    uint32_t best = 0;
    for (size_t i = 0; i < n; i++) {
        uint32_t key = compress_f2u(x[i]) & 0x7fffffffu;
        best = key > best ? key : best;
    }
    return compress_u2f(best);
}

/* --- stochastic levels
 * --------------------------------------------------------- */

/* Codes of 8 values: l = min(s, trunc(|v| inv + u)), and the sign at bit
 * b when l > 0 (l + s carries into bit b exactly when l >= 1). u = (r +
 * 0.5) 2^-16 is exact, so the FMA r 2^-16 + 2^-17 gives the reference's
 * value; |v| inv + u is one FMA, as in the reference. */
static S_TARGET inline __m256i
s_codes8(const float *x, const uint16_t *r, __m256 vinv, __m256i vs, unsigned b)
{
    const __m256 mag = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
    __m256 v = _mm256_loadu_ps(x);
    __m256i rr = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)r));
    __m256 u = _mm256_fmadd_ps(_mm256_cvtepi32_ps(rr),
                               _mm256_set1_ps(0x1.0p-16f),
                               _mm256_set1_ps(0x1.0p-17f));
    __m256 a = _mm256_fmadd_ps(_mm256_and_ps(v, mag), vinv, u);
    __m256i l = _mm256_min_epu32(_mm256_cvttps_epi32(a), vs);
    __m256i sign =
        _mm256_slli_epi32(_mm256_srli_epi32(_mm256_castps_si256(v), 31),
                          (int)b);
    __m256i neg = _mm256_and_si256(_mm256_add_epi32(l, vs), sign);
    return _mm256_or_si256(l, neg);
}

/* s_codes8 for 16 values on the AVX-512 tier, from the values v and
 * their uniforms u: the sign goes in under a mask (negative and l > 0)
 * instead of shifts, an add and an and. */
static S_TARGET512 inline __m512i
s_levels16_512(__m512 v, __m512 u, __m512 vinv, __m512i vs, __m512i bit)
{
    const __m512 mag = _mm512_castsi512_ps(_mm512_set1_epi32(0x7fffffff));
    __m512 a = _mm512_fmadd_ps(_mm512_and_ps(v, mag), vinv, u);
    __m512i l = _mm512_min_epu32(_mm512_cvttps_epi32(a), vs);
    __mmask16 neg = _mm512_mask_test_epi32_mask(
        _mm512_movepi32_mask(_mm512_castps_si512(v)),
        l,
        l);
    return _mm512_mask_or_epi32(l, neg, l, bit);
}

/* s_levels16_512 of x[0 .. 16) with 16-bit draws r. */
static S_TARGET512 inline __m512i
s_codes16_512(const float *x,
              const uint16_t *r,
              __m512 vinv,
              __m512i vs,
              __m512i bit)
{
    __m512 v = _mm512_loadu_ps(x);
    __m512i rr = _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)r));
    __m512 u = _mm512_fmadd_ps(_mm512_cvtepi32_ps(rr),
                               _mm512_set1_ps(0x1.0p-16f),
                               _mm512_set1_ps(0x1.0p-17f));
    return s_levels16_512(v, u, vinv, vs, bit);
}

/* s_levels16_512 of x[0 .. 16) with the draws' high bytes hi and low
 * part ulo = (lo + 0.5) 2^-16: u = hi 2^-8 + ulo is exact, the value the
 * joined 16-bit draw gives. */
static S_TARGET512 inline __m512i
s_codes16_bytes512(const float *x,
                   const uint8_t *hi,
                   __m512 ulo,
                   __m512 vinv,
                   __m512i vs,
                   __m512i bit)
{
    __m512 v = _mm512_loadu_ps(x);
    __m512i rr = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)hi));
    __m512 u =
        _mm512_fmadd_ps(_mm512_cvtepi32_ps(rr), _mm512_set1_ps(0x1.0p-8f), ulo);
    return s_levels16_512(v, u, vinv, vs, bit);
}

/* Four code vectors (32 codes) to 32 bytes in order. */
static S_TARGET inline void
s_store_codes32(__m256i c0, __m256i c1, __m256i c2, __m256i c3, uint8_t *out)
{
    const __m256i perm = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
    __m256i p = _mm256_packus_epi16(_mm256_packus_epi32(c0, c1),
                                    _mm256_packus_epi32(c2, c3));
    _mm256_storeu_si256((__m256i *)out, _mm256_permutevar8x32_epi32(p, perm));
}

/* One code vector (8 codes) to 8 bytes. */
static S_TARGET inline void
s_store_codes8(__m256i code, uint8_t *out)
{
    const __m256i perm = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
    __m256i p16 = _mm256_packus_epi32(code, code); /* per 128-bit lane */
    __m256i p8 = _mm256_packus_epi16(p16, p16);
    p8 = _mm256_permutevar8x32_epi32(p8, perm);
    _mm_storel_epi64((__m128i *)out, _mm256_castsi256_si128(p8));
}

static S_TARGET void
s_levels_avx2(const float *x,
              size_t n,
              float inv,
              uint32_t s,
              unsigned b,
              const uint16_t *r,
              uint8_t *codes)
{
    const __m256 vinv = _mm256_set1_ps(inv);
    const __m256i vs = _mm256_set1_epi32((int)s);
    size_t i = 0;
    for (; i + 32 <= n; i += 32)
        s_store_codes32(s_codes8(x + i, r + i, vinv, vs, b),
                        s_codes8(x + i + 8, r + i + 8, vinv, vs, b),
                        s_codes8(x + i + 16, r + i + 16, vinv, vs, b),
                        s_codes8(x + i + 24, r + i + 24, vinv, vs, b),
                        codes + i);
    for (; i + 8 <= n; i += 8)
        s_store_codes8(s_codes8(x + i, r + i, vinv, vs, b), codes + i);
    compress_levels_ref(x + i, n - i, inv, s, b, r + i, codes + i);
}

static S_TARGET512 void
s_levels_avx512(const float *x,
                size_t n,
                float inv,
                uint32_t s,
                unsigned b,
                const uint16_t *r,
                uint8_t *codes)
{
    const __m512 vinv = _mm512_set1_ps(inv);
    const __m512i vs = _mm512_set1_epi32((int)s);
    const __m512i bit = _mm512_set1_epi32((int)(1u << b));
    size_t i = 0;
    for (; i + 16 <= n; i += 16)
        _mm_storeu_si128(
            (__m128i *)(codes + i),
            _mm512_cvtepi32_epi8(s_codes16_512(x + i, r + i, vinv, vs, bit)));
    s_levels_avx2(x + i, n - i, inv, s, b, r + i, codes + i);
}

void
compress_levels(const float *x,
                size_t n,
                float inv,
                uint32_t s,
                unsigned b,
                const uint16_t *r,
                uint8_t *codes)
{
    int level = compress_simd_level();
    if (level >= 2)
        s_levels_avx512(x, n, inv, s, b, r, codes);
    else if (level == 1)
        s_levels_avx2(x, n, inv, s, b, r, codes);
    else
        compress_levels_ref(x, n, inv, s, b, r, codes);
}

/* Stores the w low bytes of bits at out (8 bytes when there is room). */
static inline void
s_put_group(uint64_t bits, unsigned w, uint8_t *out, const uint8_t *end)
{
    if (end - out >= 8) {
        memcpy(out, &bits, 8); /* little-endian host: LSB first */
        return;
    }
    for (unsigned k = 0; k < w; k++)
        out[k] = (uint8_t)(bits >> (8 * k));
}

/* Two packed groups of eight codes (p0, p1: w bytes each) at out: when
 * roomy (8 bytes of room past them) as whole 8-byte stores, one when both
 * fit in it (w <= 4), and with no test of the end. */
static inline void
s_put_groups2(uint64_t p0,
              uint64_t p1,
              unsigned w,
              bool roomy,
              uint8_t *out,
              const uint8_t *end)
{
    if (!roomy) {
        s_put_group(p0, w, out, end);
        s_put_group(p1, w, out + w, end);
    } else if (w <= 4) {
        uint64_t both = p0 | p1 << (8 * w);
        memcpy(out, &both, 8);
    } else {
        memcpy(out, &p0, 8);
        memcpy(out + w, &p1, 8);
    }
}

static S_TARGET void
s_levels_packed_avx2(const float *x,
                     size_t n,
                     float inv,
                     uint32_t s,
                     unsigned b,
                     const uint16_t *r,
                     uint8_t *out,
                     const uint8_t *end)
{
    const __m256 vinv = _mm256_set1_ps(inv);
    const __m256i vs = _mm256_set1_epi32((int)s);
    const unsigned w = b + 1;
    const uint64_t mask = 0x0101010101010101ull * ((1u << w) - 1);
    uint8_t codes[8];
    for (size_t i = 0; i < n; i += 8, out += w) {
        s_store_codes8(s_codes8(x + i, r + i, vinv, vs, b), codes);
        uint64_t c;
        memcpy(&c, codes, 8);
        s_put_group(_pext_u64(c, mask), w, out, end);
    }
}

/* 16 codes per step, packed from the register as two groups of eight:
 * the scalar pext work overlaps the vector work of the next step. */
static S_TARGET512 void
s_levels_packed_avx512(const float *x,
                       size_t n,
                       float inv,
                       uint32_t s,
                       unsigned b,
                       const uint16_t *r,
                       uint8_t *out,
                       const uint8_t *end)
{
    const __m512 vinv = _mm512_set1_ps(inv);
    const __m512i vs = _mm512_set1_epi32((int)s);
    const __m512i bit = _mm512_set1_epi32((int)(1u << b));
    const unsigned w = b + 1;
    const uint64_t mask = 0x0101010101010101ull * ((1u << w) - 1);
    size_t i = 0;
    for (; i + 16 <= n; i += 16, out += 2 * w) {
        __m128i c =
            _mm512_cvtepi32_epi8(s_codes16_512(x + i, r + i, vinv, vs, bit));
        s_put_group(_pext_u64((uint64_t)_mm_cvtsi128_si64(c), mask),
                    w,
                    out,
                    end);
        s_put_group(_pext_u64((uint64_t)_mm_extract_epi64(c, 1), mask),
                    w,
                    out + w,
                    end);
    }
    if (i < n) /* one group of eight left */
        s_levels_packed_avx2(x + i, n - i, inv, s, b, r + i, out, end);
}

void
compress_levels_packed(const float *x,
                       size_t n,
                       float inv,
                       uint32_t s,
                       unsigned b,
                       const uint16_t *r,
                       uint8_t *out,
                       const uint8_t *end)
{
    int level = compress_simd_level();
    if (level >= 2) {
        s_levels_packed_avx512(x, n, inv, s, b, r, out, end);
        return;
    }
    if (level == 1) {
        s_levels_packed_avx2(x, n, inv, s, b, r, out, end);
        return;
    }
    uint8_t codes[256];
    for (size_t i = 0; i < n; i += 256) {
        size_t m = n - i < 256 ? n - i : 256;
        compress_levels_ref(x + i, m, inv, s, b, r + i, codes);
        compress_pack(codes, m / 8, b + 1, out + i / 8 * (b + 1), end);
    }
}

/* --- fused QSGD / TernGrad buckets ------------------------------------------
 */

/* The norm and inverse scale of one bucket (compress_bucket_scale). */
static S_TARGET512 inline bool
s_bucket_scale512(const float *x,
                  size_t m,
                  uint32_t s,
                  bool tern,
                  float *norm,
                  float *inv)
{
    double acc =
        tern ? (double)s_maxabs_avx512(x, m) : sqrt(s_sumsq_avx512(x, m));
    return compress_bucket_scale(acc, s, norm, inv);
}

/* The low parts of the draws as floats, ulo[q] = (lo[q] + 0.5) 2^-16 for
 * q < count: each then enters a 16-value step as one broadcast operand. */
static S_TARGET512 void
s_low_uniforms512(const uint8_t *lo, size_t count, float *ulo)
{
    for (size_t q = 0; q < count; q += 16) {
        size_t left = count - q < 16 ? count - q : 16;
        __mmask16 in = (__mmask16)((1u << left) - 1);
        __m512i l = _mm512_cvtepu8_epi32(_mm_maskz_loadu_epi8(in, lo + q));
        _mm512_storeu_ps(ulo + q,
                         _mm512_fmadd_ps(_mm512_cvtepi32_ps(l),
                                         _mm512_set1_ps(0x1.0p-16f),
                                         _mm512_set1_ps(0x1.0p-17f)));
    }
}

/* The decoded values of 16 codes: +-l scale, the sign under a mask, as
 * compress_dequant computes them. */
static S_TARGET512 inline void
s_approx16_512(__m512i code, __m512i vs, __m512i bit, __m512 vscale, float *y)
{
    __m512 q =
        _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_and_si512(code, vs)), vscale);
    __mmask16 neg = _mm512_test_epi32_mask(code, bit);
    _mm512_storeu_ps(y, _mm512_mask_xor_ps(q, neg, q, _mm512_set1_ps(-0.0f)));
}

/* 16 codes of 9 bits (b = 8) packed LSB-first at out (18 bytes): two
 * groups of eight, each from two 36-bit pexts of four 16-bit codes. */
static S_TARGET512 inline void
s_put_codes9x16(__m512i code, uint8_t *out)
{
    const uint64_t mask = 0x01ff01ff01ff01ffull;
    __m256i w = _mm512_cvtepi32_epi16(code);
    __m128i h[2] = {_mm256_castsi256_si128(w), _mm256_extracti128_si256(w, 1)};
    for (int g = 0; g < 2; g++) {
        uint64_t p0 = _pext_u64((uint64_t)_mm_cvtsi128_si64(h[g]), mask);
        uint64_t p1 = _pext_u64((uint64_t)_mm_extract_epi64(h[g], 1), mask);
        uint64_t low = p0 | p1 << 36;
        memcpy(out + 9 * g, &low, 8);
        out[9 * g + 8] = (uint8_t)(p1 >> 28);
    }
}

/* compress_quant_buckets on the AVX-512 tier (m a multiple of 16): one
 * call for many buckets, software-pipelined: the norm of bucket k + 1 (its
 * reduction, square root and division: a latency chain of ~50 cycles) is
 * computed before the codes of bucket k, so it overlaps them instead of
 * stalling each bucket's start; each bucket is read by its norm and then
 * again from L1 by its codes, which take the draws' bytes as the
 * generator stored them (16 high bytes and one low part per step). */
static S_TARGET512 bool
s_quant_buckets_avx512(const struct compress_bucket_run *run)
{
    const float *x = run->x;
    const uint8_t *hi = run->hi;
    float *approx = run->approx;
    uint8_t *out = run->out;
    size_t m = run->m;
    const __m512i vs = _mm512_set1_epi32((int)run->s);
    const __m512i bit = _mm512_set1_epi32((int)(1u << run->b));
    const unsigned w = run->b + 1;
    const uint64_t mask =
        w <= 8 ? 0x0101010101010101ull * ((1u << w) - 1) : 0; /* unused at 9 */
    float ulo[COMPRESS_FUSED_MAX / 16 + 16];
    s_low_uniforms512(run->lo, run->nbk * m / 16, ulo);
    const float *u = ulo;
    float norm = 0, inv = 0, norm1 = 0, inv1 = 0;
    if (!s_bucket_scale512(x, m, run->s, run->tern, &norm1, &inv1))
        return false;
    for (size_t k = 0; k < run->nbk; k++, x += m, hi += m, u += m / 16) {
        norm = norm1;
        inv = inv1;
        if (k + 1 < run->nbk &&
            !s_bucket_scale512(x + m, m, run->s, run->tern, &norm1, &inv1))
            return false;
        compress_put_f32(run->norms + 4 * k, norm);
        const __m512 vinv = _mm512_set1_ps(inv);
        const __m512 vscale = _mm512_set1_ps(norm / (float)run->s);
        bool roomy = (size_t)(run->end - out) >= m / 8 * w + 8;
        for (size_t i = 0; i < m; i += 16, out += 2 * w) {
            _mm_prefetch((const char *)(x + i + S_AHEAD), _MM_HINT_T0);
            __m512i code = s_codes16_bytes512(x + i,
                                              hi + i,
                                              _mm512_set1_ps(u[i / 16]),
                                              vinv,
                                              vs,
                                              bit);
            if (w == 9) {
                s_put_codes9x16(code, out);
            } else {
                __m128i c = _mm512_cvtepi32_epi8(code);
                uint64_t p0 = _pext_u64((uint64_t)_mm_cvtsi128_si64(c), mask);
                uint64_t p1 =
                    _pext_u64((uint64_t)_mm_extract_epi64(c, 1), mask);
                s_put_groups2(p0, p1, w, roomy, out, run->end);
            }
            if (approx != NULL)
                s_approx16_512(code, vs, bit, vscale, approx + k * m + i);
        }
    }
    return true;
}

/* compress_quant_buckets with the draws joined first: the AVX2 tier, and
 * buckets of an odd number of 8-value groups (whose 16-value steps would
 * straddle two low bytes). */
static bool
s_quant_buckets_joined(const struct compress_bucket_run *run)
{
    uint16_t r[COMPRESS_FUSED_MAX];
    uint8_t codes[COMPRESS_FUSED_MAX];
    const float *x = run->x;
    size_t m = run->m;
    unsigned b = run->b;
    uint8_t *out = run->out;
    compress_join_draws(run->hi, run->lo, 0, run->nbk * m, r);
    for (size_t k = 0; k < run->nbk; k++, x += m, out += m / 8 * (b + 1)) {
        double acc = run->tern ? (double)compress_maxabs(x, m)
                               : sqrt(compress_sumsq(x, m));
        float norm = 0, inv = 0;
        if (!compress_bucket_scale(acc, run->s, &norm, &inv))
            return false;
        compress_put_f32(run->norms + 4 * k, norm);
        const uint16_t *rk = r + k * m;
        if (run->approx == NULL) {
            compress_levels_packed(x, m, inv, run->s, b, rk, out, run->end);
            continue;
        }
        compress_levels(x, m, inv, run->s, b, rk, codes);
        compress_pack(codes, m / 8, b + 1, out, run->end);
        compress_dequant(codes,
                         m,
                         b,
                         norm / (float)run->s,
                         false,
                         1,
                         run->approx + k * m);
    }
    return true;
}

bool
compress_quant_buckets_wide(size_t m)
{
    return compress_simd_level() >= 2 && m % 16 == 0;
}

bool
compress_quant_buckets(const struct compress_bucket_run *run)
{
    if (compress_simd_level() >= 2 && run->m % 16 == 0)
        return s_quant_buckets_avx512(run);
    return s_quant_buckets_joined(run);
}

/* --- bit packing of groups of eight codes ------------------------------------
 */

static uint64_t
s_byte_mask(unsigned w)
{
    return 0x0101010101010101ull * ((1u << w) - 1);
}

static S_TARGET void
s_pack_bmi2(const uint8_t *codes,
            size_t groups,
            unsigned w,
            uint8_t *out,
            const uint8_t *end)
{
    const uint64_t mask = s_byte_mask(w);
    for (size_t g = 0; g < groups; g++, out += w) {
        uint64_t c;
        memcpy(&c, codes + 8 * g, 8);
        uint64_t bits = _pext_u64(c, mask);
        if (end - out >= 8)
            memcpy(out, &bits, 8); /* little-endian host: LSB first */
        else
            for (unsigned k = 0; k < w; k++)
                out[k] = (uint8_t)(bits >> (8 * k));
    }
}

void
compress_pack(const uint8_t *codes,
              size_t groups,
              unsigned w,
              uint8_t *out,
              const uint8_t *end)
{
    if (compress_have_avx2()) {
        s_pack_bmi2(codes, groups, w, out, end);
        return;
    }
    for (size_t g = 0; g < groups; g++, out += w) {
        uint64_t bits = 0;
        for (unsigned j = 0; j < 8; j++)
            bits |= (uint64_t)codes[8 * g + j] << (j * w);
        for (unsigned k = 0; k < w; k++)
            out[k] = (uint8_t)(bits >> (8 * k));
    }
}

static S_TARGET void
s_unpack_bmi2(const uint8_t *in,
              const uint8_t *end,
              size_t groups,
              unsigned w,
              uint8_t *codes)
{
    const uint64_t mask = s_byte_mask(w);
    for (size_t g = 0; g < groups; g++, in += w) {
        uint64_t bits = 0;
        if (end - in >= 8) {
            memcpy(&bits, in, 8);
        } else { /* the last group may be partial: stop at end */
            size_t left = (size_t)(end - in);
            for (unsigned k = 0; k < w && k < left; k++)
                bits |= (uint64_t)in[k] << (8 * k);
        }
        uint64_t c = _pdep_u64(bits, mask);
        memcpy(codes + 8 * g, &c, 8);
    }
}

void
compress_unpack(const uint8_t *in,
                const uint8_t *end,
                size_t groups,
                unsigned w,
                uint8_t *codes)
{
    if (compress_have_avx2()) {
        s_unpack_bmi2(in, end, groups, w, codes);
        return;
    }
    for (size_t g = 0; g < groups; g++, in += w) {
        uint64_t bits = 0;
        size_t left = (size_t)(end - in); /* the last group may be partial */
        for (unsigned k = 0; k < w && k < left; k++)
            bits |= (uint64_t)in[k] << (8 * k);
        for (unsigned j = 0; j < 8; j++)
            codes[8 * g + j] = (uint8_t)((bits >> (j * w)) & ((1u << w) - 1));
    }
}

/* --- dequantization
 * ------------------------------------------------------------ */

static S_TARGET void
s_dequant_avx2(const uint8_t *codes,
               size_t n,
               unsigned b,
               float scale,
               bool add,
               float alpha,
               float *y)
{
    const __m256i vs = _mm256_set1_epi32((int)((1u << b) - 1));
    const __m256 vscale = _mm256_set1_ps(scale), va = _mm256_set1_ps(alpha);
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m128i c8 = _mm_loadl_epi64((const __m128i *)(codes + i));
        __m256i c = _mm256_cvtepu8_epi32(c8);
        __m256 q =
            _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_and_si256(c, vs)), vscale);
        __m256i sign = _mm256_slli_epi32(_mm256_srli_epi32(c, (int)b), 31);
        q = _mm256_or_ps(q, _mm256_castsi256_ps(sign));
        if (add)
            q = _mm256_add_ps(_mm256_loadu_ps(y + i), _mm256_mul_ps(va, q));
        _mm256_storeu_ps(y + i, q);
    }
    for (; i < n; i++) {
        float q = (float)(codes[i] & ((1u << b) - 1)) * scale;
        q = codes[i] >> b ? -q : q;
        y[i] = add ? y[i] + alpha * q : q;
    }
}

void
compress_dequant(const uint8_t *codes,
                 size_t n,
                 unsigned b,
                 float scale,
                 bool add,
                 float alpha,
                 float *y)
{
    if (compress_have_avx2()) {
        s_dequant_avx2(codes, n, b, scale, add, alpha, y);
        return;
    }
    for (size_t i = 0; i < n; i++) {
        float q = (float)(codes[i] & ((1u << b) - 1)) * scale;
        q = codes[i] >> b ? -q : q;
        y[i] = add ? y[i] + alpha * q : q;
    }
}

/* --- 9-bit codes (qsgd bits = 8) ------------------------------------------
 */

/* The 72 bits of a group of eight 9-bit codes: low 64 and the top 8; a
 * last group that end cuts short reads as zero-padded. */
static inline void
s_group9(const uint8_t *in, const uint8_t *end, uint64_t *low, uint64_t *top)
{
    if (end - in >= 9) {
        memcpy(low, in, 8);
        *top = in[8];
        return;
    }
    uint8_t b[9] = {0};
    memcpy(b, in, (size_t)(end - in));
    memcpy(low, b, 8);
    *top = b[8];
}

static S_TARGET void
s_unpack9_bmi2(const uint8_t *in,
               const uint8_t *end,
               size_t groups,
               uint16_t *codes)
{
    const uint64_t mask = 0x01ff01ff01ff01ffull;
    for (size_t g = 0; g < groups; g++, in += 9) {
        uint64_t low = 0, top = 0;
        s_group9(in, end, &low, &top);
        uint64_t c0 = _pdep_u64(low, mask);
        uint64_t c1 = _pdep_u64(low >> 36 | top << 28, mask);
        memcpy(codes + 8 * g, &c0, 8);
        memcpy(codes + 8 * g + 4, &c1, 8);
    }
}

void
compress_unpack9(const uint8_t *in,
                 const uint8_t *end,
                 size_t groups,
                 uint16_t *codes)
{
    if (compress_have_avx2()) {
        s_unpack9_bmi2(in, end, groups, codes);
        return;
    }
    for (size_t g = 0; g < groups; g++, in += 9) {
        uint64_t low = 0, top = 0;
        s_group9(in, end, &low, &top);
        for (unsigned j = 0; j < 8; j++) {
            unsigned at = 9 * j; /* bit offset in the group */
            uint64_t v = at < 64 ? low >> at : 0;
            if (at + 9 > 64)
                v |= top << (64 - at);
            codes[8 * g + j] = (uint16_t)(v & 0x1ffu);
        }
    }
}

static S_TARGET bool
s_has_u16_avx2(const uint16_t *a, size_t n, uint16_t v, size_t *done)
{
    const __m256i want = _mm256_set1_epi16((short)v);
    __m256i hit = _mm256_setzero_si256();
    size_t i = 0;
    for (; i + 16 <= n; i += 16)
        hit = _mm256_or_si256(
            hit,
            _mm256_cmpeq_epi16(_mm256_loadu_si256((const __m256i *)(a + i)),
                               want));
    *done = i;
    return !_mm256_testz_si256(hit, hit);
}

bool
compress_has_u16(const uint16_t *a, size_t n, uint16_t v)
{
    size_t i = 0;
    if (compress_have_avx2() && s_has_u16_avx2(a, n, v, &i))
        return true;
    for (; i < n; i++)
        if (a[i] == v)
            return true;
    return false;
}

/* The vector part of compress_dequant9: returns the values done. */
static S_TARGET size_t
s_dequant9_avx2(const uint16_t *codes,
                size_t n,
                float scale,
                bool add,
                float alpha,
                float *y)
{
    const __m256i level = _mm256_set1_epi32(0xff);
    const __m256 vscale = _mm256_set1_ps(scale), va = _mm256_set1_ps(alpha);
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256i c = _mm256_cvtepu16_epi32(
            _mm_loadu_si128((const __m128i *)(codes + i)));
        __m256 q = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_and_si256(c, level)),
                                 vscale);
        __m256i sign = _mm256_slli_epi32(_mm256_srli_epi32(c, 8), 31);
        q = _mm256_or_ps(q, _mm256_castsi256_ps(sign));
        if (add)
            q = _mm256_add_ps(_mm256_loadu_ps(y + i), _mm256_mul_ps(va, q));
        _mm256_storeu_ps(y + i, q);
    }
    return i;
}

void
compress_dequant9(const uint16_t *codes,
                  size_t n,
                  float scale,
                  bool add,
                  float alpha,
                  float *y)
{
    size_t i = compress_have_avx2()
                   ? s_dequant9_avx2(codes, n, scale, add, alpha, y)
                   : 0;
    for (; i < n; i++) {
        float q = (float)(codes[i] & 0xffu) * scale;
        q = codes[i] >> 8 ? -q : q;
        y[i] = add ? y[i] + alpha * q : q;
    }
}

/* --- natural compression
 * ------------------------------------------------------ */

/* natural compression's "round up" draws of 8 values from a multiple of
 * 8: (draw << 7) | 2^6 with draw = hi 256 + lo, as 32-bit lanes. */
static S_TARGET inline __m256i
s_natural_draws8(const uint8_t *hi, uint8_t lo)
{
    __m256i h = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)hi));
    return _mm256_or_si256(_mm256_slli_epi32(h, 15),
                           _mm256_set1_epi32((int)((uint32_t)lo << 7 | 0x40)));
}

static S_TARGET bool
s_natural_avx2(const float *x,
               size_t n,
               const uint8_t *hi,
               const uint8_t *lo,
               uint8_t *expo,
               uint8_t *signs)
{
    __m256i bad = _mm256_setzero_si256();
    const __m256i mant_mask = _mm256_set1_epi32(0x7fffff);
    const __m256i ff = _mm256_set1_epi32(0xff), top = _mm256_set1_epi32(254);
    const __m256i perm = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
    for (size_t i = 0; i < n; i += 8) {
        __m256i u = _mm256_loadu_si256((const __m256i *)(x + i));
        __m256i draw = s_natural_draws8(hi + i, lo[i / 16]);
        /* up = draw < mantissa (both below 2^23: signed compare is fine) */
        __m256i up = _mm256_cmpgt_epi32(_mm256_and_si256(u, mant_mask), draw);
        __m256i e = _mm256_and_si256(_mm256_srli_epi32(u, 23), ff);
        bad = _mm256_or_si256(bad, _mm256_cmpeq_epi32(e, ff));
        e = _mm256_min_epu32(_mm256_sub_epi32(e, up), top);
        __m256i p16 = _mm256_packus_epi32(e, e);
        __m256i p8 = _mm256_packus_epi16(p16, p16);
        p8 = _mm256_permutevar8x32_epi32(p8, perm);
        _mm_storel_epi64((__m128i *)(expo + i), _mm256_castsi256_si128(p8));
        signs[i / 8] = (uint8_t)_mm256_movemask_ps(_mm256_castsi256_ps(u));
    }
    return _mm256_testz_si256(bad, bad);
}

/* The same on 16 lanes: "round up" and "not finite" as mask registers,
 * the exponent bytes by one vpmovdb, the sign bits by one vpmovd2m. */
static S_TARGET512 bool
s_natural_avx512(const float *x,
                 size_t n,
                 const uint8_t *hi,
                 const uint8_t *lo,
                 uint8_t *expo,
                 uint8_t *signs)
{
    const __m512i mant_mask = _mm512_set1_epi32(0x7fffff);
    const __m512i ff = _mm512_set1_epi32(0xff), top = _mm512_set1_epi32(254);
    const __m512i one = _mm512_set1_epi32(1);
    __mmask16 bad = 0;
    size_t i = 0;
    for (; i + 16 <= n; i += 16) {
        _mm_prefetch((const char *)(x + i + S_AHEAD), _MM_HINT_T0);
        __m512i u = _mm512_loadu_si512(x + i);
        __m512i h =
            _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(hi + i)));
        __m512i draw = _mm512_or_si512(
            _mm512_slli_epi32(h, 15),
            _mm512_set1_epi32((int)((uint32_t)lo[i / 16] << 7 | 0x40)));
        /* up = draw < mantissa (both below 2^23) */
        __mmask16 up =
            _mm512_cmplt_epu32_mask(draw, _mm512_and_si512(u, mant_mask));
        __m512i e = _mm512_and_si512(_mm512_srli_epi32(u, 23), ff);
        bad |= _mm512_cmpeq_epi32_mask(e, ff);
        e = _mm512_min_epu32(_mm512_mask_add_epi32(e, up, e, one), top);
        _mm_storeu_si128((__m128i *)(expo + i), _mm512_cvtepi32_epi8(e));
        uint16_t sg = (uint16_t)_mm512_movepi32_mask(u);
        memcpy(signs + i / 8, &sg, 2);
    }
    bool ok = s_natural_avx2(x + i,
                             n - i,
                             hi + i,
                             lo + i / 16,
                             expo + i,
                             signs + i / 8);
    return ok && bad == 0;
}

bool
compress_natural(const float *x,
                 size_t n,
                 const uint8_t *hi,
                 const uint8_t *lo,
                 uint8_t *expo,
                 uint8_t *signs)
{
    if (compress_simd_level() >= 2)
        return s_natural_avx512(x, n, hi, lo, expo, signs);
    if (compress_have_avx2())
        return s_natural_avx2(x, n, hi, lo, expo, signs);
    return compress_natural_ref(x, n, hi, lo, expo, signs);
}

/* Eight values: the exponent bytes shifted into place, the sign bits of
 * one byte spread to lanes by a compare with the lane's bit. */
static S_TARGET void
s_natural_expand_avx2(const uint8_t *expo,
                      const uint8_t *signs,
                      size_t n,
                      bool add,
                      float alpha,
                      float *y)
{
    const __m256i sel = _mm256_setr_epi32(1, 2, 4, 8, 16, 32, 64, 128);
    const __m256i top = _mm256_set1_epi32((int)0x80000000u);
    const __m256 va = _mm256_set1_ps(alpha);
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256i e =
            _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(expo + i)));
        __m256i b = _mm256_and_si256(_mm256_set1_epi32(signs[i / 8]), sel);
        __m256i neg = _mm256_and_si256(_mm256_cmpeq_epi32(b, sel), top);
        __m256 q =
            _mm256_castsi256_ps(_mm256_or_si256(_mm256_slli_epi32(e, 23), neg));
        if (add)
            q = _mm256_add_ps(_mm256_loadu_ps(y + i), _mm256_mul_ps(va, q));
        _mm256_storeu_ps(y + i, q);
    }
    compress_natural_expand_ref(expo + i,
                                signs + i / 8,
                                n - i,
                                add,
                                alpha,
                                y + i);
}

/* Sixteen values: the sign bits of two bytes are a mask register. */
static S_TARGET512 void
s_natural_expand_avx512(const uint8_t *expo,
                        const uint8_t *signs,
                        size_t n,
                        bool add,
                        float alpha,
                        float *y)
{
    const __m512i top = _mm512_set1_epi32((int)0x80000000u);
    const __m512 va = _mm512_set1_ps(alpha);
    size_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m512i e =
            _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(expo + i)));
        uint16_t sg;
        memcpy(&sg, signs + i / 8, 2);
        __m512i u = _mm512_slli_epi32(e, 23);
        __m512 q =
            _mm512_castsi512_ps(_mm512_mask_or_epi32(u, (__mmask16)sg, u, top));
        if (add)
            q = _mm512_add_ps(_mm512_loadu_ps(y + i), _mm512_mul_ps(va, q));
        _mm512_storeu_ps(y + i, q);
    }
    s_natural_expand_avx2(expo + i, signs + i / 8, n - i, add, alpha, y + i);
}

void
compress_natural_expand(const uint8_t *expo,
                        const uint8_t *signs,
                        size_t n,
                        bool add,
                        float alpha,
                        float *y)
{
    int level = compress_simd_level();
    if (level >= 2)
        s_natural_expand_avx512(expo, signs, n, add, alpha, y);
    else if (level == 1)
        s_natural_expand_avx2(expo, signs, n, add, alpha, y);
    else
        compress_natural_expand_ref(expo, signs, n, add, alpha, y);
}

/* --- scaled sign expansion
 * ---------------------------------------------------- */

static S_TARGET void
s_sign_expand_avx2(const uint8_t *bits,
                   size_t nbytes,
                   float scale,
                   bool add,
                   float alpha,
                   float *y)
{
    const __m256i sel = _mm256_setr_epi32(1, 2, 4, 8, 16, 32, 64, 128);
    const __m256i top = _mm256_set1_epi32((int)0x80000000u);
    const __m256 vs = _mm256_set1_ps(scale), va = _mm256_set1_ps(alpha);
    for (size_t k = 0; k < nbytes; k++) {
        __m256i b = _mm256_and_si256(_mm256_set1_epi32(bits[k]), sel);
        __m256i neg = _mm256_and_si256(_mm256_cmpeq_epi32(b, sel), top);
        __m256 q = _mm256_or_ps(vs, _mm256_castsi256_ps(neg));
        if (add)
            q = _mm256_add_ps(_mm256_loadu_ps(y + 8 * k), _mm256_mul_ps(va, q));
        _mm256_storeu_ps(y + 8 * k, q);
    }
}

void
compress_sign_expand(const uint8_t *bits,
                     size_t nbytes,
                     float scale,
                     bool add,
                     float alpha,
                     float *y)
{
    if (compress_have_avx2()) {
        s_sign_expand_avx2(bits, nbytes, scale, add, alpha, y);
        return;
    }
    for (size_t i = 0; i < 8 * nbytes; i++) {
        float q = (bits[i / 8] >> (i % 8)) & 1u ? -scale : scale;
        y[i] = add ? y[i] + alpha * q : q;
    }
}

/* --- fp8 / fp4 symbols ------------------------------------------------------
 */

static S_TARGET void
s_fp8_symbols_avx2(const float *x,
                   size_t n,
                   float s1,
                   float s2,
                   unsigned M,
                   unsigned E,
                   uint8_t *sym)
{
    const __m256 mag = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
    const __m256 v1 = _mm256_set1_ps(s1), v2 = _mm256_set1_ps(s2);
    const __m256 two = _mm256_set1_ps(2.0f);
    const __m256 lift = _mm256_set1_ps((float)(1u << (M - 1)));
    const unsigned sh = 23 - M;
    const __m256i bias = _mm256_set1_epi32((int)((1u << (sh - 1)) - 1));
    const __m256i one = _mm256_set1_epi32(1);
    const __m256i rebias = _mm256_set1_epi32((int)(127u << M));
    const __m256i cmax = _mm256_set1_epi32((int)((1u << (E + M)) - 1));
    const __m256i perm = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 v = _mm256_loadu_ps(x + i);
        /* Same operations in the same order as the scalar path. */
        __m256 a = _mm256_mul_ps(_mm256_mul_ps(_mm256_and_ps(v, mag), v1), v2);
        __m256i small = _mm256_cvtps_epi32(
            _mm256_round_ps(_mm256_mul_ps(a, lift),
                            _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
        __m256i u = _mm256_castps_si256(a);
        u = _mm256_add_epi32(
            u,
            _mm256_add_epi32(
                bias,
                _mm256_and_si256(_mm256_srli_epi32(u, (int)sh), one)));
        __m256i big = _mm256_sub_epi32(_mm256_srli_epi32(u, (int)sh), rebias);
        __m256 is_small = _mm256_cmp_ps(a, two, _CMP_LT_OQ);
        __m256i c =
            _mm256_castps_si256(_mm256_blendv_ps(_mm256_castsi256_ps(big),
                                                 _mm256_castsi256_ps(small),
                                                 is_small));
        c = _mm256_min_epu32(c, cmax);
        __m256i sign =
            _mm256_slli_epi32(_mm256_srli_epi32(_mm256_castps_si256(v), 31),
                              (int)(E + M));
        c = _mm256_or_si256(c, sign);
        __m256i p16 = _mm256_packus_epi32(c, c);
        __m256i p8 = _mm256_packus_epi16(p16, p16);
        p8 = _mm256_permutevar8x32_epi32(p8, perm);
        _mm_storel_epi64((__m128i *)(sym + i), _mm256_castsi256_si128(p8));
    }
    compress_fp8_symbols_ref(x + i, n - i, s1, s2, M, E, sym + i);
}

void
compress_fp8_symbols(const float *x,
                     size_t n,
                     float s1,
                     float s2,
                     unsigned M,
                     unsigned E,
                     uint8_t *sym)
{
    if (compress_have_avx2())
        s_fp8_symbols_avx2(x, n, s1, s2, M, E, sym);
    else
        compress_fp8_symbols_ref(x, n, s1, s2, M, E, sym);
}
