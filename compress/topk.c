/*
 * Exact top-k by magnitude in linear time, never a full sort.
 *
 * Keys: for finite floats the bit pattern of |x| (sign cleared) orders like
 * |x| as an unsigned integer, denormals and zero included, so selection
 * works on integers. The k-th largest key comes from a radix select: three
 * histogram passes on 11, 11 and 10 bits, each restricted to the keys whose
 * higher digits match the bucket where the k-th one lies.
 *
 * Fast path (the usual case, k << n): a sample of 65536 keys (256 runs of
 * 256 contiguous values, spread evenly) gives, by radix select, a
 * threshold that about 1.125 k values exceed; one AVX2 scan (kernels.c)
 * collects the indices at or above it, already in index order, and checks
 * for NaN/Inf on the way; the exact radix select then runs on those few
 * candidates only. So the full vector is read once, at close to memory
 * bandwidth. When the sample misleads (fewer than k candidates, or too many to
 * hold), the full radix select runs instead: still exact, still linear.
 *
 * Ties: among equal magnitudes at the threshold the lowest indices win, the
 * rule the sort-based reference (ref.c) implements, so outputs are equal
 * index for index. Alternatives rejected: quickselect (nth_element) moves
 * and compares floats, several passes with unpredictable branches; the
 * benchmark measures it side by side.
 */
#include "compress/compress_impl.h"

#include <stdlib.h>

#define S_SAMPLE 65536
#define S_BLOCKS 256

/* Finds T, the k-th largest of keys[0..m) (1 <= k <= m), and how many keys
 * are strictly greater. */
static void
s_kth_largest(const uint32_t *keys, size_t m, size_t k, uint32_t *T, size_t *gt)
{
    static const unsigned shift[3] = {21, 10, 0};
    static const unsigned width[3] = {11, 11, 10};
    uint32_t prefix = 0;
    size_t above = 0;
    uint32_t hist[2048];
    for (int pass = 0; pass < 3; pass++) {
        unsigned sh = shift[pass];
        uint32_t mask = (1u << width[pass]) - 1;
        memset(hist, 0, sizeof hist);
        if (pass == 0) {
            for (size_t i = 0; i < m; i++)
                hist[keys[i] >> sh]++;
        } else {
            unsigned hs = shift[pass - 1];
            for (size_t i = 0; i < m; i++)
                if (keys[i] >> hs == prefix)
                    hist[(keys[i] >> sh) & mask]++;
        }
        uint32_t bin = mask;
        for (;; bin--) {
            if (above + hist[bin] >= k)
                break;
            above += hist[bin];
        }
        prefix = prefix << width[pass] | bin;
    }
    *T = prefix;
    *gt = above;
}

/* Writes the k selected indices: keys > T, and ties == T by lowest index,
 * scanning m candidates in ascending index order: cand[i] (NULL: i) with
 * key keys[i] and value bit pattern bits[i] (NULL: taken from x). */
static void
s_emit(const float *x,
       const uint32_t *cand,
       const uint32_t *keys,
       const uint32_t *bits,
       size_t m,
       uint32_t T,
       size_t k,
       size_t ties,
       uint32_t *idx,
       float *vals)
{
    size_t out = 0;
    /* Branch-free: write every candidate, advance only over the taken
     * ones; stop once k are out, so the write never passes idx[k - 1]. */
    for (size_t i = 0; i < m && out < k; i++) {
        uint32_t key = keys[i];
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
    uint32_t *keys = calloc(n, sizeof *keys);
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
    uint32_t T = 0;
    size_t gt = 0;
    s_kth_largest(keys, n, k, &T, &gt);
    s_emit(x, NULL, keys, NULL, n, T, k, k - gt, idx, vals);
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
    /* One block for the sample and the candidates: fewer fresh pages to
     * fault in per call than three separate allocations. */
    sample = malloc((m + 2 * cap) * sizeof *sample);
    if (sample == NULL) {
        rc = RUMOR_ENOMEM;
        goto done;
    }
    cand = sample + m;
    bits = cand + cap;
    /* S_BLOCKS runs of contiguous values spread over x: a few hundred
     * cache-line streams instead of m scattered misses. */
    size_t run = m / S_BLOCKS;
    for (size_t b = 0; b < S_BLOCKS; b++) {
        size_t at = (size_t)((uint64_t)b * (n - run) / (S_BLOCKS - 1));
        for (size_t j = 0; j < run; j++)
            sample[b * run + j] = compress_f2u(x[at + j]) & 0x7fffffffu;
    }
    uint32_t T = 0;
    size_t gt = 0;
    s_kth_largest(sample, m, r, &T, &gt);
    bool finite = true;
    size_t count =
        compress_select_ge(x, n, compress_u2f(T), cand, bits, cap, &finite);
    if (!finite) {
        rc = RUMOR_ENUMERIC;
        goto done;
    }
    if (count < k || count > cap) {
        rc = s_full(x, n, k, idx, vals);
        goto done;
    }
    /* The candidates' keys go where the sample was when they fit. */
    uint32_t *keys = count <= m ? sample : malloc(count * sizeof *keys);
    if (keys == NULL) {
        rc = RUMOR_ENOMEM;
        goto done;
    }
    for (size_t i = 0; i < count; i++)
        keys[i] = bits[i] & 0x7fffffffu;
    s_kth_largest(keys, count, k, &T, &gt);
    s_emit(x, cand, keys, bits, count, T, k, k - gt, idx, vals);
    if (keys != sample)
        free(keys);
done:
    free(sample);
    return rc;
}
