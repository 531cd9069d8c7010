/*
 * Exact top-k by magnitude in linear time, never a full sort.
 *
 * Keys: for finite floats the bit pattern of |x| (sign cleared) orders like
 * |x| as an unsigned integer, denormals and zero included. The k-th largest
 * key comes from a radix select on key - lo, [lo, hi] a range holding every
 * key: histograms of 11-bit digits from the top of the bits hi - lo spans
 * (at most three passes), each pass on the keys of the bucket where the
 * k-th one lay, compacted by a vector kernel (kernels.c); large histograms
 * are counted in four interleaved copies, so runs of equal digits do not
 * serialise on one counter.
 *
 * Fast path (k << n): a sample of 65536 keys (256 runs of 256 contiguous
 * values, spread evenly) gives, by radix select over the whole key range
 * (no min/max pass), a threshold that about 1.125 k values exceed; one
 * vector scan (kernels.c) collects the indices and values at or above it,
 * in index order, checking for NaN/Inf on the way; the exact radix select
 * then runs on those candidates' bit patterns only, over [sample
 * threshold, scan maximum], which spreads the first pass although every
 * candidate shares its top bits. So the vector is read once, at close to
 * memory bandwidth. When the sample misleads (fewer than k candidates, or
 * too many to hold), the full radix select runs instead: still exact.
 *
 * Ties: among equal magnitudes at the threshold the lowest indices win, as
 * in the sort-based reference (ref.c), so outputs are equal index for
 * index. When every key equal to the threshold is taken (distinct values,
 * the usual case) key >= T alone decides, and the output is one more vector
 * selection; otherwise a loop carries the tie count. Rejected: quickselect
 * (nth_element) moves and compares floats in several passes with
 * unpredictable branches; the benchmark measures it side by side.
 */
#include "compress/compress_impl.h"

#include <stdlib.h>

#define S_SAMPLE     65536
#define S_BLOCKS     256
#define S_HIST_SPLIT 8192

/* The magnitude key of a float bit pattern: the sign cleared. */
#define S_KEY 0x7fffffffu

/* Histogram of the digit ((key - base) >> sh) & mask of the keys
 * keys[0..m) & S_KEY into hist[0][0..mask]. From S_HIST_SPLIT keys on,
 * in four interleaved copies summed at the end: runs of equal digits then
 * do not serialise on one counter's store-to-load chain. Below that,
 * clearing and summing four copies of up to 2048 bins would cost more than
 * the chains, so one copy. */
static void
s_hist(const uint32_t *keys,
       size_t m,
       uint32_t base,
       unsigned sh,
       uint32_t mask,
       uint32_t hist[4][2048])
{
    size_t copies = m >= S_HIST_SPLIT ? 4 : 1, i = 0;
    for (size_t c = 0; c < copies; c++)
        memset(hist[c], 0, ((size_t)mask + 1) * sizeof hist[c][0]);
    for (; copies == 4 && i + 4 <= m; i += 4) {
        hist[0][(((keys[i] & S_KEY) - base) >> sh) & mask]++;
        hist[1][(((keys[i + 1] & S_KEY) - base) >> sh) & mask]++;
        hist[2][(((keys[i + 2] & S_KEY) - base) >> sh) & mask]++;
        hist[3][(((keys[i + 3] & S_KEY) - base) >> sh) & mask]++;
    }
    for (; i < m; i++)
        hist[0][(((keys[i] & S_KEY) - base) >> sh) & mask]++;
    for (uint32_t d = 0; copies == 4 && d <= mask; d++)
        hist[0][d] += hist[1][d] + hist[2][d] + hist[3][d];
}

/* Smallest and largest of keys[0..m) (m >= 1). */
static void
s_minmax(const uint32_t *keys, size_t m, uint32_t *lo, uint32_t *hi)
{
    uint32_t a = UINT32_MAX, b = 0;
    for (size_t i = 0; i < m; i++) {
        a = keys[i] < a ? keys[i] : a;
        b = keys[i] > b ? keys[i] : b;
    }
    *lo = a;
    *hi = b;
}

/* Finds T, the k-th largest of the keys keys[0..m) & S_KEY (float bit
 * patterns: the sign is ignored; 1 <= k <= m, lo <= every key <= hi),
 * how many keys are strictly greater and how many equal T. The digits are taken
 * from key - min over the bits that max - min spans, 11 at a time from the top,
 * so the first pass spreads the keys even when they all share their top
 * bits (the candidates above a threshold do). scratch (m slots) receives,
 * branch-free, the keys in the chosen bucket after each pass, so later
 * passes read only those. */
static void
s_kth_largest(const uint32_t *keys,
              size_t m,
              size_t k,
              uint32_t lo,
              uint32_t hi,
              uint32_t *scratch,
              uint32_t *T,
              size_t *gt,
              size_t *eq)
{
    uint32_t hist[4][2048];
    unsigned bits = hi > lo ? 32u - (unsigned)__builtin_clz(hi - lo) : 0;
    uint32_t base = lo;
    size_t above = 0;
    const uint32_t *src = keys;
    for (;;) {
        unsigned w = bits > 11 ? 11 : bits, sh = bits - w;
        uint32_t mask = (1u << w) - 1;
        s_hist(src, m, base, sh, mask, hist);
        uint32_t bin = mask;
        for (;; bin--) {
            if (above + hist[0][bin] >= k)
                break;
            above += hist[0][bin];
        }
        base += bin << sh;
        *eq = hist[0][bin]; /* after the last pass: the keys equal to T */
        if (sh == 0)
            break;
        /* Keep the keys of the chosen bucket: base <= key < base + 2^sh
         * (keys below base wrap to large differences). */
        m = compress_select_range(src,
                                  src,
                                  m,
                                  base,
                                  1u << sh,
                                  scratch,
                                  NULL,
                                  m);
        src = scratch;
        bits = sh;
    }
    *T = base;
    *gt = above;
}

/* Writes the k selected indices: keys > T, and ties == T by lowest index,
 * scanning m candidates in ascending index order: cand[i] (NULL: i) with
 * key keys[i] & S_KEY and value bit pattern bits[i] (NULL: taken from x).
 * eq keys equal T, of which ties are taken. */
static void
s_emit(const float *x,
       const uint32_t *cand,
       const uint32_t *keys,
       const uint32_t *bits,
       size_t m,
       uint32_t T,
       size_t k,
       size_t eq,
       size_t ties,
       uint32_t *idx,
       float *vals)
{
    size_t out = 0;
    if (eq == ties && cand != NULL && bits == keys) {
        /* Every key equal to T is taken (the usual case: distinct
         * values): key >= T alone decides (key - T below 2^31 - T), no
         * tie count to carry, so the vector kernel does it. */
        compress_select_range(bits, cand, m, T, 0x80000000u - T, idx, vals, k);
        return;
    }
    /* Branch-free: write every candidate, advance only over the taken
     * ones; stop once k are out, so the write never passes idx[k - 1]. */
    for (size_t i = 0; i < m && out < k; i++) {
        uint32_t key = keys[i] & S_KEY;
        size_t tie = (size_t)(key == T) & (size_t)(ties > 0);
        size_t take = (size_t)(key > T) | tie;
        ties -= tie;
        uint32_t at = cand ? cand[i] : (uint32_t)i;
        idx[out] = at;
        if (vals != NULL)
            vals[out] = bits ? compress_u2f(bits[i]) : x[at];
        out += take;
    }
}

static rumor_err
s_full(const float *x, size_t n, size_t k, uint32_t *idx, float *vals)
{
    /* keys, then the scratch of the selection. */
    uint32_t *keys = calloc(2 * n, sizeof *keys);
    if (keys == NULL)
        return RUMOR_ENOMEM;
    uint32_t worst = 0;
    for (size_t i = 0; i < n; i++) {
        keys[i] = compress_f2u(x[i]) & 0x7fffffffu;
        worst = keys[i] > worst ? keys[i] : worst;
    }
    if (worst >= 0x7f800000u) {
        free(keys);
        return RUMOR_ENUMERIC;
    }
    uint32_t T = 0, lo = 0, hi = 0;
    size_t gt = 0, eq = 0;
    s_minmax(keys, n, &lo, &hi);
    s_kth_largest(keys, n, k, lo, hi, keys + n, &T, &gt, &eq);
    s_emit(x, NULL, keys, NULL, n, T, k, eq, k - gt, idx, vals);
    free(keys);
    return RUMOR_OK;
}

rumor_err
compress_topk_select(const float *x,
                     size_t n,
                     size_t k,
                     uint32_t *idx,
                     float *vals)
{
    rumor_err rc = RUMOR_OK;
    uint32_t *sample = NULL, *cand = NULL, *bits = NULL;
    if (k == 0 || k >= n) {
        if (!compress_all_finite(x, n))
            return RUMOR_ENUMERIC;
        for (size_t i = 0; i < k; i++) {
            idx[i] = (uint32_t)i;
            if (vals != NULL)
                vals[i] = x[i];
        }
        return RUMOR_OK;
    }
    /* Small vectors or large k: the sample saves nothing. */
    if (n < 4 * S_SAMPLE || k > n / 8)
        return s_full(x, n, k, idx, vals);
    size_t m = S_SAMPLE;
    size_t want = (size_t)(((uint64_t)k * m + n - 1) / n);
    /* About 1.125 k values reach the sample's r-th largest; the margin
     * (want / 8 + 64) is several standard deviations (sqrt(want)) of the
     * sample count, and a miss only costs the full radix select. */
    size_t r = want + want / 8 + 64;
    size_t cap = 2 * k + 4096;
    /* One block for the sample, the candidates and the selection's
     * scratch: fewer fresh pages to fault in per call than four separate
     * allocations. */
    size_t room = m > cap ? m : cap;
    sample = malloc((m + 2 * cap + room) * sizeof *sample);
    if (sample == NULL) {
        rc = RUMOR_ENOMEM;
        goto done;
    }
    cand = sample + m;
    bits = cand + cap;
    uint32_t *scratch = bits + cap;
    /* S_BLOCKS runs of contiguous values spread over x: a few hundred
     * cache-line streams instead of m scattered misses. */
    size_t run = m / S_BLOCKS;
    for (size_t b = 0; b < S_BLOCKS; b++) {
        size_t at = (size_t)((uint64_t)b * (n - run) / (S_BLOCKS - 1));
        for (size_t j = 0; j < run; j++)
            sample[b * run + j] = compress_f2u(x[at + j]) & 0x7fffffffu;
    }
    /* The whole key range, not the sample's minimum and maximum (a pass):
     * the first digit is then the exponent and 3 mantissa bits, and the
     * bucket where the r-th key lies holds a small part of the sample. */
    uint32_t T = 0, lo = 0, hi = S_KEY;
    size_t gt = 0, eq = 0;
    s_kth_largest(sample, m, r, 0, S_KEY, scratch, &T, &gt, &eq);
    /* The scan's largest key is the candidates' largest too, and T is
     * at most their smallest: no pass over the candidates for the range;
     * their keys are their bit patterns & S_KEY, not copied out. */
    lo = T;
    size_t count =
        compress_select_ge_top(x, n, compress_u2f(T), cand, bits, cap, &hi);
    if (hi >= 0x7f800000u) { /* NaN or Inf */
        rc = RUMOR_ENUMERIC;
        goto done;
    }
    if (count < k || count > cap) {
        rc = s_full(x, n, k, idx, vals);
        goto done;
    }
    s_kth_largest(bits, count, k, lo, hi, scratch, &T, &gt, &eq);
    s_emit(x, cand, bits, bits, count, T, k, eq, k - gt, idx, vals);
done:
    free(sample);
    return rc;
}
