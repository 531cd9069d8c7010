/*
 * Sparsifiers: top-k, random-k, threshold and DGC's sampled threshold. Each
 * picks a set of indices, sends them (except random-k) and passes the kept
 * values to a dense codec (fp32 unless the spec composes one, e.g.
 * "topk:ratio=0.01|qsgd:bits=4": sparsify, then quantize, the hybrid of
 * the seed paper).
 *
 * Index lists are ascending, so they are sent as gaps (first index, then
 * differences minus one) in Golomb-Rice code with parameter r chosen from
 * the mean gap (r = floor(log2(0.69 mean)), the usual geometric-source
 * rule): about log2(n/k) + 1.5 bits per index at 1 %, against 32 raw.
 * The total is at most k (r + 1) + n / 2^r bits, which bounds the size.
 *
 * random-k (Stich et al. 2018 style) sends no indices: they come from the
 * Philox stream (seed, counter) carried in the payload. The vector is cut
 * into k equal blocks (+-1) and one index is drawn in each (stratified
 * sampling: index i is chosen with probability 1 / |block|), so scale=1
 * (multiplying by |block|, which is n/k rounded) makes it unbiased.
 * threshold keeps |v| >= t. DGC (Lin et al. 2018, section 3.1 and the
 * released code) estimates the threshold from a random 1 % sample, counts,
 * and refines (halving the threshold, or an exact top-k among the
 * selection when too many pass) until the count is within [0.7, 1.3] k.
 *
 * Kept values go through the inner codec with a seed derived from (seed,
 * counter), so its rounding is independent of the index draws. Decoding
 * validates the whole index list and the inner payload into temporaries
 * before y is touched.
 */
#include "compress/compress_impl.h"
#include "core/bits.h"

#include <math.h>
#include <stdlib.h>

/* --- helpers ------------------------------------------------------------ */

static size_t
s_k_of(const rumor_codec *c, size_t n)
{
    if (n == 0)
        return 0;
    size_t k = c->k > 0 ? c->k : (size_t)ceil(c->ratio * (double)n);
    if (k < 1)
        k = 1;
    return k > n ? n : k;
}

unsigned
compress_sparse_rice_param(size_t n, size_t k)
{
    if (k == 0)
        return 0;
    double mean = (double)(n - k) / (double)k * 0.69;
    unsigned r = 0;
    while (r < 30 && (double)(2u << r) <= mean)
        r++;
    return mean < 1 ? 0 : r;
}

static size_t
s_rice_bound_bytes(size_t n, size_t k, unsigned r)
{
    return ((uint64_t)k * (r + 1) + (n >> r) + 7) / 8;
}

/* Block j of k over n: [lo, hi). */
static void
s_block(size_t n, size_t k, size_t j, size_t *lo, size_t *hi)
{
    *lo = (size_t)((uint64_t)j * n / k);
    *hi = (size_t)((uint64_t)(j + 1) * n / k);
}

static void
s_randk_indices(uint64_t seed,
                uint64_t counter,
                size_t n,
                size_t k,
                uint32_t *idx)
{
    struct rumor_rng rng;
    rumor_rng_init(&rng, seed, counter);
    for (size_t j = 0; j < k; j++) {
        size_t lo, hi;
        s_block(n, k, j, &lo, &hi);
        uint64_t r = rumor_rng_u64(&rng);
        idx[j] =
            (uint32_t)(lo + (size_t)(((unsigned __int128)r * (hi - lo)) >> 64));
    }
}

static uint64_t
s_inner_seed(uint64_t seed, uint64_t counter)
{
    return rumor_seed_derive(seed, counter, 0x1e);
}

/* --- DGC selection ---------------------------------------------------------
 */

struct compress_dgc_plan
compress_dgc_plan(size_t n, size_t k)
{
    struct compress_dgc_plan p;
    p.m = n / 100 > 0 ? n / 100 : 1; /* the 1 % sample */
    p.cap = 2 * k + 1024;
    p.cap = p.cap > n ? n : p.cap;
    p.ks = (size_t)(((uint64_t)k * p.m + n - 1) / n);
    p.ks = p.ks < 1 ? 1 : p.ks > p.m ? p.m : p.ks;
    p.lo = (size_t)ceil(0.7 * (double)k);
    p.hi = (size_t)floor(1.3 * (double)k);
    p.lo = p.lo < 1 ? 1 : p.lo;
    p.hi = p.hi < p.lo ? p.lo : p.hi;
    return p;
}

uint64_t
compress_dgc_seed(uint64_t seed, uint64_t counter)
{
    return rumor_seed_derive(seed, counter, 0xd6c);
}

static rumor_err
s_dgc_select(const float *x,
             size_t n,
             size_t k,
             uint64_t seed,
             uint64_t counter,
             uint32_t **idx_out,
             size_t *count_out)
{
    rumor_err rc = RUMOR_OK;
    uint32_t *keys = NULL, *cand = NULL, *idx = NULL;
    struct compress_dgc_plan p = compress_dgc_plan(n, k);
    size_t m = p.m, cap = p.cap, ks = p.ks, lo = p.lo, hi = p.hi;
    keys = malloc((m > cap ? m : cap) * sizeof *keys);
    cand = malloc(cap * sizeof *cand);
    idx = malloc(k * sizeof *idx * 2 + 4);
    if (keys == NULL || cand == NULL || idx == NULL) {
        rc = RUMOR_ENOMEM;
        goto done;
    }
    struct rumor_rng rng;
    rumor_rng_init(&rng, compress_dgc_seed(seed, counter), 0);
    float t = 0;
    for (size_t j = 0; j < m; j++) {
        uint32_t at = (uint32_t)(((uint64_t)rumor_rng_u32(&rng) * n) >> 32);
        keys[j] = compress_f2u(x[at]) & 0x7fffffffu;
    }
    /* The sample's ks-th largest magnitude is the first threshold. */
    uint32_t T = UINT32_MAX;
    {
        float *sv = malloc(m * sizeof *sv);
        uint32_t *si = malloc(ks * sizeof *si);
        if (sv == NULL || si == NULL) {
            free(sv);
            free(si);
            rc = RUMOR_ENOMEM;
            goto done;
        }
        for (size_t j = 0; j < m; j++)
            sv[j] = compress_u2f(keys[j]);
        rc = compress_topk_select(sv, m, ks, si, NULL);
        for (size_t j = 0; rc == RUMOR_OK && j < ks; j++)
            T = keys[si[j]] < T ? keys[si[j]] : T;
        free(sv);
        free(si);
        if (rc != RUMOR_OK)
            goto done;
    }
    t = compress_u2f(T);
    for (int tries = 0; tries < COMPRESS_DGC_TRIES; tries++) {
        bool finite = true;
        size_t count = compress_select_ge(x, n, t, cand, NULL, cap, &finite);
        if (!finite) {
            rc = RUMOR_ENUMERIC;
            goto done;
        }
        if (count >= lo && count <= hi) {
            memcpy(idx, cand, count * sizeof *idx);
            *count_out = count;
            goto done;
        }
        if (count > hi && count <= cap) {
            /* Too many: exact top-k among the selected (DGC's
             * hierarchical selection). */
            float *v = malloc(count * sizeof *v);
            uint32_t *pick = malloc(k * sizeof *pick);
            if (v == NULL || pick == NULL) {
                free(v);
                free(pick);
                rc = RUMOR_ENOMEM;
                goto done;
            }
            for (size_t j = 0; j < count; j++)
                v[j] = x[cand[j]];
            rc = compress_topk_select(v, count, k, pick, NULL);
            for (size_t j = 0; rc == RUMOR_OK && j < k; j++)
                idx[j] = cand[pick[j]];
            free(v);
            free(pick);
            *count_out = k;
            goto done;
        }
        /* Far too many: raise the threshold; too few: lower it. */
        t = count > hi ? t * 2.0f : t * 0.5f;
        if (!isfinite(t))
            break;
    }
    /* No luck within S_DGC_TRIES (pathological data): exact top-k. */
    rc = compress_topk_select(x, n, k, idx, NULL);
    *count_out = k;
done:
    free(keys);
    free(cand);
    if (rc != RUMOR_OK) {
        free(idx);
        idx = NULL;
    }
    *idx_out = idx;
    return rc;
}

/* --- size ------------------------------------------------------------------
 */

static void
s_size(const rumor_codec *c, size_t n, size_t *bytes, bool *exact)
{
    size_t inner = 0;
    bool inner_exact = false;
    if (c->id == RUMOR_CODEC_TOPK || c->id == RUMOR_CODEC_RANDK) {
        size_t k = s_k_of(c, n);
        c->inner->ops->size(c->inner, k, &inner, &inner_exact);
        if (c->id == RUMOR_CODEC_RANDK) {
            *bytes = RUMOR_COMPRESS_HEADER_BYTES + 16 + inner;
            *exact = inner_exact;
            return;
        }
        *bytes = RUMOR_COMPRESS_HEADER_BYTES + 4 +
                 s_rice_bound_bytes(n, k, compress_sparse_rice_param(n, k)) +
                 inner;
        *exact = false;
        return;
    }
    /* threshold, dgc: any count up to n; the Rice stream is <= 2n bits. */
    c->inner->ops->size(c->inner, n, &inner, &inner_exact);
    *bytes = RUMOR_COMPRESS_HEADER_BYTES + 4 + (2 * n + 7) / 8 + inner;
    *exact = false;
}

/* --- encode ------------------------------------------------------------------
 */

/* The Rice codes of the index gaps, from the first on, while each fits
 * 32 bits and 8 bytes of room are left: every code is or-ed in and 8
 * bytes stored, the whole bytes then skipped, so there is no branch on
 * "the accumulator is full" (data-dependent, it mispredicts). The same
 * bits as core_bw_put's; returns the count done, w and *prev ready
 * for the general loop. */
static size_t
s_rice_fast(struct core_bw *w,
            const uint32_t *idx,
            size_t k,
            unsigned r,
            uint64_t *prev)
{
    uint8_t *p = w->p;
    uint64_t acc = w->acc;
    unsigned nacc = w->nacc; /* 0 here: a fresh writer */
    size_t j = 0;
    uint64_t last = *prev;
    for (; j < k && w->end - p >= 8; j++) {
        uint64_t gap = j == 0 ? idx[0] : idx[j] - last - 1;
        uint64_t q = gap >> r, low = gap & ((1ull << r) - 1);
        if (q + 1 + r > 32)
            break;
        last = idx[j];
        acc |= ((1ull << q) | low << (q + 1)) << nacc;
        nacc += (unsigned)(q + 1 + r);
        core_put_u64(p, acc);
        p += nacc / 8;
        acc >>= nacc & ~7u;
        nacc &= 7u;
    }
    w->p = p;
    w->acc = acc;
    w->nacc = nacc;
    *prev = last;
    return j;
}

/* Sends idx[0..k) and the values: gathered[] when given (top-k collects
 * them during its scan), else x[idx[j]]. */
static rumor_err
s_encode_indices(const rumor_codec *c,
                 const float *x,
                 size_t n,
                 const uint32_t *idx,
                 const float *gathered,
                 size_t k,
                 uint64_t seed,
                 uint64_t counter,
                 uint8_t *out,
                 size_t cap,
                 size_t *written,
                 float *approx)
{
    rumor_err rc = RUMOR_OK;
    bool randk = c->id == RUMOR_CODEC_RANDK;
    /* Values already gathered (top-k) are sent as they are. */
    float *vals = gathered && !(randk && c->scale)
                      ? NULL
                      : malloc((k ? k : 1) * sizeof *vals);
    const float *send = vals ? vals : gathered;
    float *vapprox = approx ? malloc((k ? k : 1) * sizeof *vapprox) : NULL;
    if (send == NULL || (approx != NULL && vapprox == NULL)) {
        rc = RUMOR_ENOMEM;
        goto done;
    }
    for (size_t j = 0; vals != NULL && j < k; j++) {
        float v = gathered ? gathered[j] : x[idx[j]];
        if (randk && c->scale) {
            size_t lo, hi;
            s_block(n, k, j, &lo, &hi);
            v *= (float)(hi - lo);
        }
        vals[j] = v;
    }
    if (!compress_all_finite(send, k)) { /* scaling overflowed */
        rc = RUMOR_ENUMERIC;
        goto done;
    }
    unsigned r = compress_sparse_rice_param(n, k);
    size_t at = RUMOR_COMPRESS_HEADER_BYTES;
    if (randk) {
        if (cap - at < 16) {
            rc = RUMOR_ETOOBIG;
            goto done;
        }
        core_put_u64(out + at, seed);
        core_put_u64(out + at + 8, counter);
        at += 16;
        r = 0;
    } else {
        if (cap - at < 4) {
            rc = RUMOR_ETOOBIG;
            goto done;
        }
        struct core_bw w;
        core_bw_init(&w, out + at + 4, cap - at - 4);
        uint64_t prev = 0;
        size_t j = s_rice_fast(&w, idx, k, r, &prev);
        for (; j < k; j++) {
            uint64_t gap = j == 0 ? idx[0] : idx[j] - prev - 1;
            prev = idx[j];
            uint64_t q = gap >> r, low = gap & ((1ull << r) - 1);
            if (q + 1 + r <= 32) { /* the usual case: one write */
                core_bw_put(&w,
                            (1ull << q) | low << (q + 1),
                            (unsigned)(q + 1 + r));
                continue;
            }
            for (; q > 0;) {
                unsigned z = q > 31 ? 31 : (unsigned)q;
                core_bw_put(&w, 0, z);
                q -= z;
            }
            core_bw_put(&w, 1, 1);
            core_bw_put(&w, low, r);
        }
        size_t body = core_bw_finish(&w, out + at + 4);
        if (body == SIZE_MAX) {
            rc = RUMOR_ETOOBIG;
            goto done;
        }
        core_put_u32(out + at, (uint32_t)body);
        at += 4 + body;
    }
    if (cap - at < RUMOR_COMPRESS_HEADER_BYTES) {
        rc = RUMOR_ETOOBIG;
        goto done;
    }
    size_t got = 0;
    rc = c->inner->ops->encode(c->inner,
                               send,
                               k,
                               s_inner_seed(seed, counter),
                               0,
                               out + at,
                               cap - at,
                               &got,
                               vapprox);
    if (rc != RUMOR_OK)
        goto done;
    struct compress_header h = {(uint8_t)c->id,
                                RUMOR_COMPRESS_VERSION,
                                (uint8_t)r,
                                (uint8_t)(randk && c->scale),
                                (uint32_t)n,
                                (uint32_t)k};
    compress_header_write(out, &h);
    *written = at + got;
    if (approx != NULL) {
        memset(approx, 0, n * sizeof *approx);
        for (size_t j = 0; j < k; j++)
            approx[idx[j]] = vapprox[j];
    }
done:
    free(vals);
    free(vapprox);
    return rc;
}

rumor_err
compress_sparse_encode_k(const rumor_codec *c,
                         const float *x,
                         size_t n,
                         size_t k,
                         uint64_t seed,
                         uint64_t counter,
                         uint8_t *out,
                         size_t cap,
                         size_t *written,
                         float *approx,
                         uint8_t *selected)
{
    rumor_err rc = RUMOR_OK;
    uint32_t *idx = NULL;
    float *vals = NULL;
    size_t count = k;
    *written = 0;
    if (c->id == RUMOR_CODEC_DGC && k > 0 && k < n) {
        rc = s_dgc_select(x, n, k, seed, counter, &idx, &count);
    } else if (c->id == RUMOR_CODEC_THRESHOLD) {
        bool finite = true;
        count = compress_select_ge(x, n, c->threshold, NULL, NULL, 0, &finite);
        idx = malloc((count ? count : 1) * sizeof *idx);
        if (!finite)
            rc = RUMOR_ENUMERIC;
        else if (idx == NULL)
            rc = RUMOR_ENOMEM;
        else
            compress_select_ge(x, n, c->threshold, idx, NULL, count, NULL);
    } else if (c->id == RUMOR_CODEC_RANDK || c->id == RUMOR_CODEC_DGC) {
        /* randk reads only k values, dgc with k in {0, n} none: check. */
        idx = malloc((k ? k : 1) * sizeof *idx);
        if (!compress_all_finite(x, n))
            rc = RUMOR_ENUMERIC;
        else if (idx == NULL)
            rc = RUMOR_ENOMEM;
        else if (c->id == RUMOR_CODEC_RANDK)
            s_randk_indices(seed, counter, n, k, idx);
        else
            rc = compress_topk_select(x, n, k, idx, NULL);
    } else { /* topk: its selection checks x and gathers the values */
        idx = malloc((k ? k : 1) * sizeof *idx);
        vals = malloc((k ? k : 1) * sizeof *vals);
        if (idx == NULL || vals == NULL)
            rc = RUMOR_ENOMEM;
        else
            rc = compress_topk_select(x, n, k, idx, vals);
    }
    if (rc == RUMOR_OK)
        rc = s_encode_indices(c,
                              x,
                              n,
                              idx,
                              vals,
                              count,
                              seed,
                              counter,
                              out,
                              cap,
                              written,
                              approx);
    if (rc == RUMOR_OK && selected != NULL) {
        memset(selected, 0, n);
        for (size_t j = 0; j < count; j++)
            selected[idx[j]] = 1;
    }
    free(idx);
    free(vals);
    return rc;
}

size_t
compress_sparse_k(const rumor_codec *c, size_t n)
{
    return s_k_of(c, n);
}

size_t
compress_sparse_size_any(const rumor_codec *c, size_t n)
{
    size_t inner = 0;
    bool exact = false;
    c->inner->ops->size(c->inner, n, &inner, &exact);
    /* a Rice stream of any count is <= 2n bits (see s_size) */
    return RUMOR_COMPRESS_HEADER_BYTES + 16 + (2 * n + 7) / 8 + inner;
}

static rumor_err
s_encode(const rumor_codec *c,
         const float *x,
         size_t n,
         uint64_t seed,
         uint64_t counter,
         uint8_t *out,
         size_t cap,
         size_t *written,
         float *approx)
{
    return compress_sparse_encode_k(c,
                                    x,
                                    n,
                                    s_k_of(c, n),
                                    seed,
                                    counter,
                                    out,
                                    cap,
                                    written,
                                    approx,
                                    NULL);
}

/* --- decode ------------------------------------------------------------------
 */

/* Reads k ascending indices < n from a Rice stream of exactly len bytes. */
static rumor_err
s_read_indices(const uint8_t *in,
               size_t len,
               unsigned r,
               size_t n,
               size_t k,
               uint32_t *idx)
{
    struct core_br br;
    core_br_init(&br, in, len);
    uint64_t prev = 0;
    uint64_t qmax = n >> r;
    for (size_t j = 0; j < k; j++) {
        uint64_t q = 0;
        for (;;) {
            uint64_t win = core_br_peek(&br, 32);
            if (win != 0) {
                unsigned z = (unsigned)__builtin_ctzll(win);
                q += z;
                core_br_skip(&br, z + 1);
                break;
            }
            core_br_skip(&br, 32);
            q += 32;
            if (br.overrun || q > qmax)
                return RUMOR_EPROTO;
        }
        if (q > qmax)
            return RUMOR_EPROTO;
        uint64_t gap = q << r | core_br_get(&br, r);
        if (br.overrun)
            return RUMOR_EPROTO;
        uint64_t at = j == 0 ? gap : prev + 1 + gap;
        if (at >= n)
            return RUMOR_EPROTO;
        idx[j] = (uint32_t)at;
        prev = at;
    }
    if (core_br_used(&br, in) != len)
        return RUMOR_EPROTO;
    return RUMOR_OK;
}

rumor_err
compress_sparse_indices(const rumor_codec *c,
                        const uint8_t *in,
                        size_t len,
                        size_t n,
                        uint32_t **idx_out,
                        size_t *k_out,
                        size_t *at_out)
{
    unsigned r = in[2];
    size_t k = core_get_u32(in + 8);
    bool randk = c->id == RUMOR_CODEC_RANDK;
    *idx_out = NULL;
    if (k > n || r > 30 || in[3] > (randk ? 1 : 0) || (randk && r != 0))
        return RUMOR_EPROTO;
    if ((c->id == RUMOR_CODEC_TOPK || randk) && k != s_k_of(c, n))
        return RUMOR_EPROTO;
    size_t at = RUMOR_COMPRESS_HEADER_BYTES;
    size_t ilen = 0;
    if (randk) {
        if (len - at < 16)
            return RUMOR_EPROTO;
        at += 16;
    } else {
        if (len - at < 4)
            return RUMOR_EPROTO;
        ilen = core_get_u32(in + at);
        at += 4;
        /* Each index takes at least r + 1 bits. */
        if (ilen > len - at || (uint64_t)ilen * 8 < (uint64_t)k * (r + 1))
            return RUMOR_EPROTO;
    }
    struct compress_header ih;
    rumor_err rc = compress_header_read(in + at + ilen,
                                        len - at - ilen,
                                        c->inner->id,
                                        k,
                                        &ih);
    if (rc != RUMOR_OK)
        return rc;
    uint32_t *idx = malloc((k ? k : 1) * sizeof *idx);
    if (idx == NULL)
        return RUMOR_ENOMEM;
    if (randk)
        s_randk_indices(core_get_u64(in + RUMOR_COMPRESS_HEADER_BYTES),
                        core_get_u64(in + RUMOR_COMPRESS_HEADER_BYTES + 8),
                        n,
                        k,
                        idx);
    else
        rc = s_read_indices(in + at, ilen, r, n, k, idx);
    if (rc != RUMOR_OK) {
        free(idx);
        return rc;
    }
    *idx_out = idx;
    *k_out = k;
    *at_out = at + ilen;
    return RUMOR_OK;
}

static rumor_err
s_decode(const rumor_codec *c,
         const uint8_t *in,
         size_t len,
         bool add,
         float alpha,
         float *y,
         size_t n)
{
    uint32_t *idx = NULL;
    float *vals = NULL;
    size_t k = 0, at = 0;
    rumor_err rc = compress_sparse_indices(c, in, len, n, &idx, &k, &at);
    if (rc != RUMOR_OK)
        return rc;
    vals = malloc((k ? k : 1) * sizeof *vals);
    if (vals == NULL) {
        rc = RUMOR_ENOMEM;
        goto done;
    }
    rc = c->inner->ops
             ->decode(c->inner, in + at, len - at, false, 1.0f, vals, k);
    if (rc != RUMOR_OK)
        goto done;
    if (add) {
        for (size_t j = 0; j < k; j++)
            y[idx[j]] += alpha * vals[j];
    } else {
        memset(y, 0, n * sizeof *y);
        for (size_t j = 0; j < k; j++)
            y[idx[j]] = vals[j];
    }
done:
    free(idx);
    free(vals);
    return rc;
}

/* Every path scans x for NaN/Inf itself (fused into top-k's and the
 * threshold's scan), so the dispatcher skips its own pass. */
const struct compress_ops compress_sparse_ops = {s_size,
                                                 s_encode,
                                                 true,
                                                 s_decode};
