/*
 * Fast kernels shared by the codecs, each with a plain-C reference in
 * ref.c that the tests compare against bit for bit (R7.4).
 *
 * The build uses plain -O2 without -march, so fast paths are compiled per
 * function with __attribute__((target("avx2,fma,f16c,bmi2"))) and chosen
 * at run time (__builtin_cpu_supports and cpuid, checked once, cached).
 * BMI2's pext/pdep pack and unpack the level codes.
 *
 * Philox in AVX2: element w of stream (seed, s) is word w % 4 of
 * Philox4x32-10(counter = (w / 4, s), key = seed) (core/rng.c). Eight
 * counters run in the lanes of four vectors (one per Philox word); the
 * 32x32 -> 64-bit products come from _mm256_mul_epu32 on the even lanes
 * and on the odd lanes shifted down, and a 4x8 transpose puts the words
 * back in stream order, so the output equals the scalar generator's. Two
 * such groups (16 blocks) run with their rounds interleaved: a round is a
 * chain of multiply, shuffle and xor, and one group alone leaves the
 * vector units waiting on it (1.3x faster than one group on Zen 4).
 * Stochastic rounding uses 16 random bits per element (two elements per
 * word): the rounding probability is then exact to 2^-17, far below any
 * statistical effect, and the generator cost per element halves.
 *
 * Alternatives rejected: a second, faster generator for rounding only (two
 * generators to test against each other and a second definition of "the
 * same bytes on every machine"); AVX-512 (not on every x86-64 host we
 * target; AVX2 is).
 */
#include "compress/compress_impl.h"

#include <cpuid.h>
#include <immintrin.h>
#include <math.h>

#define S_TARGET __attribute__((target("avx2,fma,f16c,bmi2")))

/* Outputs of at least this many values (4 MB of floats: past the L2) use
 * non-temporal stores. */
#define S_STREAM_MIN ((size_t)1 << 20)

/* -1: not probed yet, 0: reference paths, 1: AVX2. Threads that race on
 * the first probe all store the same value. */
static int s_simd = -1;

void
compress_set_simd(bool on)
{
    s_simd = -1;
    if (on ? compress_have_avx2() : false)
        s_simd = 1;
    else
        s_simd = 0;
}

bool
compress_have_avx2(void)
{
    int cached = s_simd;
    if (cached < 0) {
        /* AVX2 and FMA (with the OS saving YMM state) from the builtin;
         * F16C (CPUID 1, ECX bit 29) and BMI2 (CPUID 7, EBX bit 8) from
         * cpuid, which clang's builtin does not name. */
        unsigned a = 0, b = 0, c = 0, d = 0;
        __builtin_cpu_init();
        bool avx2 =
            __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
        bool f16c = __get_cpuid(1, &a, &b, &c, &d) && (c >> 29 & 1u);
        bool bmi2 = __get_cpuid_count(7, 0, &a, &b, &c, &d) && (b >> 8 & 1u);
        cached = avx2 && f16c && bmi2;
        s_simd = cached;
    }
    return cached == 1;
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

/* Stores the four word vectors of 8 blocks as 64 16-bit halves in stream
 * order (a 4x8 transpose; little-endian host). */
static S_TARGET inline void
s_store8(__m256i c0, __m256i c1, __m256i c2, __m256i c3, uint16_t *out)
{
    __m256i t0 = _mm256_unpacklo_epi32(c0, c1);
    __m256i t1 = _mm256_unpacklo_epi32(c2, c3);
    __m256i t2 = _mm256_unpackhi_epi32(c0, c1);
    __m256i t3 = _mm256_unpackhi_epi32(c2, c3);
    __m256i r0 = _mm256_unpacklo_epi64(t0, t1);
    __m256i r1 = _mm256_unpackhi_epi64(t0, t1);
    __m256i r2 = _mm256_unpacklo_epi64(t2, t3);
    __m256i r3 = _mm256_unpackhi_epi64(t2, t3);
    _mm256_storeu_si256((__m256i *)(out + 0),
                        _mm256_permute2x128_si256(r0, r1, 0x20));
    _mm256_storeu_si256((__m256i *)(out + 16),
                        _mm256_permute2x128_si256(r2, r3, 0x20));
    _mm256_storeu_si256((__m256i *)(out + 32),
                        _mm256_permute2x128_si256(r0, r1, 0x31));
    _mm256_storeu_si256((__m256i *)(out + 48),
                        _mm256_permute2x128_si256(r2, r3, 0x31));
}

/* Writes the 64 words of the 16 Philox blocks block .. block + 15 to out
 * (16-bit halves in stream order): two independent groups of 8 blocks
 * whose rounds interleave, so one group's multiplies fill the other's
 * latency; key[r] holds the round-r key words broadcast (kk[2 r],
 * kk[2 r + 1]). */
static S_TARGET inline void
s_philox16(const __m256i *kk,
           __m256i c2i,
           __m256i c3i,
           uint64_t block,
           uint16_t *out)
{
    const __m256i m0 = _mm256_set1_epi32((int)0xD2511F53u);
    const __m256i m1 = _mm256_set1_epi32((int)0xCD9E8D57u);
    __m256i a0, a1, b0, b1;
    s_counters(block, &a0, &a1);
    s_counters(block + 8, &b0, &b1);
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
    s_store8(b0, b1, b2, b3, out + 64);
}

/* Whole groups of 128 draws from block on; returns the draws written. */
static S_TARGET size_t
s_rand16_avx2(uint64_t seed,
              uint64_t stream,
              uint64_t block,
              uint16_t *out,
              size_t n)
{
    __m256i kk[20]; /* the round keys, broadcast once per call */
    uint32_t k0 = (uint32_t)seed, k1 = (uint32_t)(seed >> 32);
    for (int round = 0; round < 10; round++) {
        kk[2 * round] = _mm256_set1_epi32((int)k0);
        kk[2 * round + 1] = _mm256_set1_epi32((int)k1);
        k0 += 0x9E3779B9u;
        k1 += 0xBB67AE85u;
    }
    __m256i c2 = _mm256_set1_epi32((int)(uint32_t)stream);
    __m256i c3 = _mm256_set1_epi32((int)(uint32_t)(stream >> 32));
    size_t i = 0;
    for (; i + 128 <= n; i += 128, block += 16)
        s_philox16(kk, c2, c3, block, out + i);
    return i;
}

void
compress_rand16(uint64_t seed,
                uint64_t stream,
                uint64_t first,
                uint16_t *out,
                size_t n)
{
    size_t i = 0;
    if (compress_have_avx2()) /* 8 halves per Philox block */
        i = s_rand16_avx2(seed, stream, first / 8, out, n);
    if (i < n)
        compress_rand16_ref(seed, stream, first + i, out + i, n - i);
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

static size_t
s_select_ge_ref(const float *x,
                size_t n,
                uint32_t tkey,
                uint32_t *idx,
                uint32_t *bits,
                size_t cap,
                size_t count,
                size_t base,
                bool *finite)
{
    for (size_t i = 0; i < n; i++) {
        uint32_t u = compress_f2u(x[i]), key = u & 0x7fffffffu;
        *finite = *finite && key < 0x7f800000u;
        if (key >= tkey) {
            if (count < cap) {
                idx[count] = (uint32_t)(base + i);
                if (bits != NULL)
                    bits[count] = u;
            }
            count++;
        }
    }
    return count;
}

/* Appends the indices (and bit patterns) of the set bits of m, positions
 * base + bit; the caller guarantees room for 32 more. */
static inline size_t
s_emit_bits(const float *x,
            size_t base,
            uint32_t m,
            uint32_t *idx,
            uint32_t *bits,
            size_t count)
{
    while (m != 0) {
        unsigned bit = (unsigned)__builtin_ctz(m);
        idx[count] = (uint32_t)(base + bit);
        if (bits != NULL)
            bits[count] = compress_f2u(x[base + bit]); /* in L1 */
        count++;
        m &= m - 1;
    }
    return count;
}

static S_TARGET size_t
s_select_ge_avx2(const float *x,
                 size_t n,
                 uint32_t tkey,
                 uint32_t *idx,
                 uint32_t *bits,
                 size_t cap,
                 bool *finite)
{
    const __m256i mag = _mm256_set1_epi32(0x7fffffff);
    /* Magnitude keys are non-negative int32: compare key > tkey - 1. */
    const __m256i tk = _mm256_set1_epi32((int)tkey - 1);
    __m256i top = _mm256_setzero_si256(); /* largest key: Inf/NaN show */
    size_t count = 0, i = 0;
    for (; i + 32 <= n; i += 32) {
        __m256i k0 =
            _mm256_and_si256(_mm256_loadu_si256((const __m256i *)(x + i)), mag);
        __m256i k1 =
            _mm256_and_si256(_mm256_loadu_si256((const __m256i *)(x + i + 8)),
                             mag);
        __m256i k2 =
            _mm256_and_si256(_mm256_loadu_si256((const __m256i *)(x + i + 16)),
                             mag);
        __m256i k3 =
            _mm256_and_si256(_mm256_loadu_si256((const __m256i *)(x + i + 24)),
                             mag);
        top = _mm256_max_epi32(top,
                               _mm256_max_epi32(_mm256_max_epi32(k0, k1),
                                                _mm256_max_epi32(k2, k3)));
        uint32_t m = (uint32_t)_mm256_movemask_ps(
                         _mm256_castsi256_ps(_mm256_cmpgt_epi32(k0, tk))) |
                     (uint32_t)_mm256_movemask_ps(
                         _mm256_castsi256_ps(_mm256_cmpgt_epi32(k1, tk)))
                         << 8 |
                     (uint32_t)_mm256_movemask_ps(
                         _mm256_castsi256_ps(_mm256_cmpgt_epi32(k2, tk)))
                         << 16 |
                     (uint32_t)_mm256_movemask_ps(
                         _mm256_castsi256_ps(_mm256_cmpgt_epi32(k3, tk)))
                         << 24;
        if (m == 0)
            continue;
        if (cap >= 32 && count <= cap - 32) {
            count = s_emit_bits(x, i, m, idx, bits, count);
            continue;
        }
        for (; m != 0; m &= m - 1) { /* near or past cap: count only */
            unsigned bit = (unsigned)__builtin_ctz(m);
            if (count < cap) {
                idx[count] = (uint32_t)(i + bit);
                if (bits != NULL)
                    bits[count] = compress_f2u(x[i + bit]);
            }
            count++;
        }
    }
    uint32_t lanes[8], worst = 0;
    _mm256_storeu_si256((__m256i *)lanes, top);
    for (int j = 0; j < 8; j++)
        worst = lanes[j] > worst ? lanes[j] : worst;
    bool ok = worst < 0x7f800000u;
    count = s_select_ge_ref(x + i, n - i, tkey, idx, bits, cap, count, i, &ok);
    *finite = ok;
    return count;
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
    bool ok = true;
    size_t count;
    uint32_t tkey = compress_f2u(t);
    if (compress_have_avx2())
        count = s_select_ge_avx2(x, n, tkey, idx, bits, cap, &ok);
    else
        count = s_select_ge_ref(x, n, tkey, idx, bits, cap, 0, 0, &ok);
    if (finite != NULL)
        *finite = ok;
    return count;
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

static S_TARGET bool
s_f32_to_f16_bytes_avx2(const float *x, size_t n, uint8_t *out)
{
    const __m256 hi = _mm256_set1_ps(65504.0f), lo = _mm256_set1_ps(-65504.0f);
    const __m256i expo = _mm256_set1_epi32(0x7f800000);
    __m256i bad = _mm256_setzero_si256();
    size_t i = 0;
    /* Large outputs: non-temporal stores once out + 2 i is 16-byte
     * aligned (no read-for-ownership of lines about to be overwritten,
     * which is a third of the memory traffic of this kernel). */
    bool stream = n >= S_STREAM_MIN && ((uintptr_t)out & 1u) == 0;
    size_t lead = stream ? ((16 - ((uintptr_t)out & 15u)) & 15u) / 2 : 0;
    uint16_t h[8];
    bool head = compress_f32_to_f16_ref(x, lead, h);
    for (size_t j = 0; j < lead; j++) {
        out[2 * j] = (uint8_t)h[j];
        out[2 * j + 1] = (uint8_t)(h[j] >> 8);
    }
    for (i = lead; i + 8 <= n; i += 8) {
        __m256 v = _mm256_loadu_ps(x + i);
        __m256i e = _mm256_and_si256(_mm256_castps_si256(v), expo);
        bad = _mm256_or_si256(bad, _mm256_cmpeq_epi32(e, expo));
        v = _mm256_min_ps(_mm256_max_ps(v, lo), hi);
        __m128i q = _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT);
        if (stream)
            _mm_stream_si128((__m128i *)(out + 2 * i), q);
        else
            _mm_storeu_si128((__m128i *)(out + 2 * i), q);
    }
    if (stream)
        _mm_sfence();
    bool tail = compress_f32_to_f16_ref(x + i, n - i, h) && head;
    for (size_t j = 0; j < n - i; j++) {
        out[2 * (i + j)] = (uint8_t)h[j];
        out[2 * (i + j) + 1] = (uint8_t)(h[j] >> 8);
    }
    return tail && _mm256_testz_si256(bad, bad);
}

bool
compress_f32_to_f16_bytes(const float *x, size_t n, uint8_t *out)
{
    if (compress_have_avx2())
        return s_f32_to_f16_bytes_avx2(x, n, out);
    bool finite = true;
    uint16_t h[256];
    for (size_t i = 0; i < n; i += 256) {
        size_t m = n - i < 256 ? n - i : 256;
        finite = compress_f32_to_f16_ref(x + i, m, h) && finite;
        for (size_t j = 0; j < m; j++) {
            out[2 * (i + j)] = (uint8_t)h[j];
            out[2 * (i + j) + 1] = (uint8_t)(h[j] >> 8);
        }
    }
    return finite;
}

static bool
s_f16_bytes_ref(const uint8_t *in, size_t n, float *y)
{
    bool finite = true;
    for (size_t i = 0; i < n; i++) {
        uint16_t h = (uint16_t)(in[2 * i] | in[2 * i + 1] << 8);
        finite = finite && (h & 0x7c00u) != 0x7c00u;
        y[i] = compress_f16_to_f32_ref(h);
    }
    return finite;
}

static S_TARGET bool
s_f16_bytes_to_f32_avx2(const uint8_t *in, size_t n, float *y)
{
    const __m128i expo = _mm_set1_epi16(0x7c00);
    __m128i bad = _mm_setzero_si128();
    /* Large outputs: non-temporal stores from the first 32-byte aligned
     * y + i on (see the encoder). */
    bool stream = n >= S_STREAM_MIN && ((uintptr_t)y & 3u) == 0;
    size_t i = stream ? ((32 - ((uintptr_t)y & 31u)) & 31u) / 4 : 0;
    i = i < n ? i : n;
    bool ok = s_f16_bytes_ref(in, i, y);
    for (; i + 8 <= n; i += 8) {
        __m128i h = _mm_loadu_si128((const __m128i *)(in + 2 * i));
        bad = _mm_or_si128(bad, _mm_cmpeq_epi16(_mm_and_si128(h, expo), expo));
        __m256 v = _mm256_cvtph_ps(h);
        if (stream)
            _mm256_stream_ps(y + i, v);
        else
            _mm256_storeu_ps(y + i, v);
    }
    if (stream)
        _mm_sfence();
    ok = s_f16_bytes_ref(in + 2 * i, n - i, y + i) && ok;
    return ok && _mm_testz_si128(bad, bad);
}

bool
compress_f16_bytes_to_f32(const uint8_t *in, size_t n, float *y)
{
    if (compress_have_avx2())
        return s_f16_bytes_to_f32_avx2(in, n, y);
    return s_f16_bytes_ref(in, n, y);
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

static S_TARGET double
s_sumsq_avx2(const float *x, size_t n)
{
    __m256d s0 = _mm256_setzero_pd(), s1 = _mm256_setzero_pd();
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 v = _mm256_loadu_ps(x + i);
        __m256d lo = _mm256_cvtps_pd(_mm256_castps256_ps128(v));
        __m256d hi = _mm256_cvtps_pd(_mm256_extractf128_ps(v, 1));
        /* Exact products (24-bit squares fit a double): fma == mul+add. */
        s0 = _mm256_fmadd_pd(lo, lo, s0);
        s1 = _mm256_fmadd_pd(hi, hi, s1);
    }
    double lanes[4], tail = 0;
    _mm256_storeu_pd(lanes, _mm256_add_pd(s0, s1));
    for (; i < n; i++)
        tail += (double)x[i] * x[i];
    return ((lanes[0] + lanes[1]) + (lanes[2] + lanes[3])) + tail;
}

double
compress_sumsq(const float *x, size_t n)
{
    if (compress_have_avx2())
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

float
compress_maxabs(const float *x, size_t n)
{
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
 * b when l > 0 (l + s carries into bit b exactly when l >= 1). */
static S_TARGET inline __m256i
s_codes8(const float *x, const uint16_t *r, __m256 vinv, __m256i vs, unsigned b)
{
    const __m256 mag = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
    const __m256 half = _mm256_set1_ps(0.5f);
    const __m256 unit = _mm256_set1_ps(0x1.0p-16f);
    __m256 v = _mm256_loadu_ps(x);
    __m256i rr = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)r));
    /* Same operations, same order as the reference: no FMA. */
    __m256 u = _mm256_mul_ps(_mm256_add_ps(_mm256_cvtepi32_ps(rr), half), unit);
    __m256 a = _mm256_add_ps(_mm256_mul_ps(_mm256_and_ps(v, mag), vinv), u);
    __m256i l = _mm256_min_epu32(_mm256_cvttps_epi32(a), vs);
    __m256i sign =
        _mm256_slli_epi32(_mm256_srli_epi32(_mm256_castps_si256(v), 31),
                          (int)b);
    __m256i neg = _mm256_and_si256(_mm256_add_epi32(l, vs), sign);
    return _mm256_or_si256(l, neg);
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
    const __m256i perm = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
    size_t i = 0;
    /* 32 codes at a time: three packs and one permute for four vectors. */
    for (; i + 32 <= n; i += 32) {
        __m256i c0 = s_codes8(x + i, r + i, vinv, vs, b);
        __m256i c1 = s_codes8(x + i + 8, r + i + 8, vinv, vs, b);
        __m256i c2 = s_codes8(x + i + 16, r + i + 16, vinv, vs, b);
        __m256i c3 = s_codes8(x + i + 24, r + i + 24, vinv, vs, b);
        __m256i p = _mm256_packus_epi16(_mm256_packus_epi32(c0, c1),
                                        _mm256_packus_epi32(c2, c3));
        _mm256_storeu_si256((__m256i *)(codes + i),
                            _mm256_permutevar8x32_epi32(p, perm));
    }
    for (; i + 8 <= n; i += 8) {
        __m256i code = s_codes8(x + i, r + i, vinv, vs, b);
        __m256i p16 = _mm256_packus_epi32(code, code); /* per 128-bit lane */
        __m256i p8 = _mm256_packus_epi16(p16, p16);
        p8 = _mm256_permutevar8x32_epi32(p8, perm);
        _mm_storel_epi64((__m128i *)(codes + i), _mm256_castsi256_si128(p8));
    }
    compress_levels_ref(x + i, n - i, inv, s, b, r + i, codes + i);
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
    if (compress_have_avx2())
        s_levels_avx2(x, n, inv, s, b, r, codes);
    else
        compress_levels_ref(x, n, inv, s, b, r, codes);
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

/* --- natural compression
 * ------------------------------------------------------ */

static S_TARGET bool
s_natural_avx2(const float *x,
               size_t n,
               const uint16_t *r,
               uint8_t *expo,
               uint8_t *signs)
{
    __m256i bad = _mm256_setzero_si256();
    const __m256i mant_mask = _mm256_set1_epi32(0x7fffff);
    const __m256i ff = _mm256_set1_epi32(0xff), top = _mm256_set1_epi32(254);
    const __m256i half = _mm256_set1_epi32(0x40);
    const __m256i perm = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
    for (size_t i = 0; i < n; i += 8) {
        __m256i u = _mm256_loadu_si256((const __m256i *)(x + i));
        __m256i rr =
            _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)(r + i)));
        __m256i draw = _mm256_or_si256(_mm256_slli_epi32(rr, 7), half);
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

bool
compress_natural(const float *x,
                 size_t n,
                 const uint16_t *r,
                 uint8_t *expo,
                 uint8_t *signs)
{
    if (compress_have_avx2())
        return s_natural_avx2(x, n, r, expo, signs);
    return compress_natural_ref(x, n, r, expo, signs);
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
