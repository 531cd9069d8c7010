/*
 * bench compress: encode and decode GB/s of every codec on a 16 M-element
 * Gaussian vector (GB/s of float32 input, 1e9 bytes/s, best of a few
 * runs), each next to this machine's single-core memory read bandwidth
 * measured in the same run; top-k selection against a plain quickselect
 * (nth_element-style) on the same data; fp8's Huffman stage against the
 * empirical entropy of its symbols and against zstd level 1 on the same
 * symbol bytes. The vectors, like the floor's buffer, are on transparent
 * huge pages where the system allows (rumor_mem_alloc_large).
 *
 * usage: rumor bench compress [--n N] [--reps R] [--topk] [--approx]
 * [SPEC...] (--topk: the top-k against quickselect comparison only, plus
 * any SPECs given; --approx: every encode also writes C(x), as error
 * feedback asks for it).
 */
#include "bench/bench.h"

#include "rumor/compress.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <zstd.h>

int bench_compress_main(int argc, char **argv);

static const char *const s_default_specs[] = {
    "fp32",
    "fp16",
    "bf16",
    "sign",
    "qsgd:bits=4",
    "qsgd:bits=4,elias=1",
    "qsgd:bits=8",
    "terngrad",
    "natural",
    "fp8",
    "fp4",
    "huffman",
    "topk:ratio=0.01",
    "topk:ratio=0.01|qsgd:bits=4",
    "randk:ratio=0.01",
    "threshold:t=2.576",
    "dgc:ratio=0.01",
};

static double
s_gbps(size_t bytes, uint64_t ns)
{
    return ns == 0 ? 0 : (double)bytes / (double)ns;
}

/* --- quickselect reference (nth_element-style) -----------------------------
 */

static void
s_swap(float *a, float *b)
{
    float t = *a;
    *a = *b;
    *b = t;
}

/* Rearranges a[0..n) so a[k] is the k-th smallest (0-based): Hoare
 * partition around a median of three, as std::nth_element does. */
static void
s_quickselect(float *a, size_t n, size_t k)
{
    size_t lo = 0, hi = n - 1;
    while (hi > lo) {
        size_t mid = lo + (hi - lo) / 2;
        if (a[mid] < a[lo])
            s_swap(&a[mid], &a[lo]);
        if (a[hi] < a[lo])
            s_swap(&a[hi], &a[lo]);
        if (a[hi] < a[mid])
            s_swap(&a[hi], &a[mid]);
        float pivot = a[mid];
        size_t i = lo, j = hi;
        while (i <= j) {
            while (a[i] < pivot)
                i++;
            while (a[j] > pivot)
                j--;
            if (i <= j) {
                s_swap(&a[i], &a[j]);
                i++;
                if (j == 0)
                    break;
                j--;
            }
        }
        if (k <= j)
            hi = j;
        else if (k >= i)
            lo = i;
        else
            return;
    }
}

/* Plain top-k: |x| copy, quickselect the threshold, one scan for indices
 * (ties at the threshold by lowest index, like the library). */
static size_t
s_topk_quickselect(const float *x,
                   size_t n,
                   size_t k,
                   float *work,
                   uint32_t *idx)
{
    for (size_t i = 0; i < n; i++)
        work[i] = fabsf(x[i]);
    s_quickselect(work, n, n - k);
    float t = work[n - k];
    size_t gt = 0, out = 0;
    for (size_t i = 0; i < n; i++)
        gt += fabsf(x[i]) > t;
    size_t ties = k - gt;
    for (size_t i = 0; i < n; i++) {
        float a = fabsf(x[i]);
        if (a > t || (a == t && ties > 0)) {
            if (a == t)
                ties--;
            idx[out++] = (uint32_t)i;
        }
    }
    return out;
}

/* --- main
 * ------------------------------------------------------------------------ */

struct s_row {
    const char *spec;
    double bits; /* per value */
    double enc;  /* GB/s */
    double dec;  /* GB/s */
};

/* Buffers every codec's row shares, allocated once on huge pages for the
 * largest payload: freed and allocated again per codec, the later rows'
 * buffers came from heap memory already touched on 4 KiB pages (glibc
 * serves blocks under its mmap threshold from the heap), and those rows
 * measured the allocator's history (qsgd:bits=4 after four other codecs
 * encoded at 7.9 GB/s instead of 10). */
struct s_bufs {
    float *y;      /* decode output, n floats */
    float *approx; /* C(x) with --approx, else NULL */
    uint8_t *buf;  /* payload */
    size_t cap;
};

static rumor_codec *
s_codec(const char *spec)
{
    rumor_codec *c = NULL;
    struct rumor_diag diag;
    memset(&diag, 0, sizeof diag);
    if (rumor_codec_new(spec, &c, &diag) != RUMOR_OK)
        fprintf(stderr, "bench compress: %s: %s\n", spec, diag.msg);
    return c;
}

/* The largest payload bound of specs for n values; 0 on a bad spec. */
static size_t
s_max_cap(const char *const *specs, size_t count, size_t n)
{
    size_t most = RUMOR_COMPRESS_HEADER_BYTES;
    for (size_t i = 0; i < count; i++) {
        rumor_codec *c = s_codec(specs[i]);
        size_t cap = 0;
        bool exact = false;
        if (c == NULL || rumor_codec_encoded_size(c, n, &cap, &exact)) {
            rumor_codec_destroy(&c);
            return 0;
        }
        most = cap > most ? cap : most;
        rumor_codec_destroy(&c);
    }
    return most;
}

static int
s_bench_codec(const char *spec,
              const float *x,
              size_t n,
              int reps,
              const struct s_bufs *b,
              struct s_row *row)
{
    rumor_codec *c = s_codec(spec);
    if (c == NULL)
        return 1;
    size_t len = 0;
    int status = 0;
    uint64_t enc = UINT64_MAX, dec = UINT64_MAX;
    for (int r = 0; r < reps; r++) {
        uint64_t t0 = rumor_clock_ns();
        rumor_err rc = rumor_codec_encode(c,
                                          x,
                                          n,
                                          1,
                                          (uint64_t)r,
                                          b->buf,
                                          b->cap,
                                          &len,
                                          b->approx);
        uint64_t t1 = rumor_clock_ns();
        rumor_err rd = rumor_codec_decode(c, b->buf, len, b->y, n);
        uint64_t t2 = rumor_clock_ns();
        if (rc != RUMOR_OK || rd != RUMOR_OK) {
            fprintf(stderr,
                    "bench compress: %s: %s / %s\n",
                    spec,
                    rumor_errname(rc),
                    rumor_errname(rd));
            status = 1;
            break;
        }
        enc = t1 - t0 < enc ? t1 - t0 : enc;
        dec = t2 - t1 < dec ? t2 - t1 : dec;
    }
    row->spec = spec;
    row->bits = 8.0 * (double)len / (double)n;
    row->enc = s_gbps(4 * n, enc);
    row->dec = s_gbps(4 * n, dec);
    rumor_codec_destroy(&c);
    return status;
}

static int
s_bench_topk(const float *x,
             size_t n,
             int reps,
             double *gq,
             double *gr,
             bool *same)
{
    size_t k = n / 100;
    uint32_t *a = malloc(k * sizeof *a);
    uint32_t *b = malloc(k * sizeof *b);
    float *work = rumor_mem_alloc_large(n * sizeof *work);
    rumor_codec *c = NULL;
    int status = 0;
    if (a == NULL || b == NULL || work == NULL ||
        rumor_codec_new("topk:ratio=0.01", &c, NULL) != RUMOR_OK) {
        status = 1;
        goto done;
    }
    /* The codec's selection alone: decode of the payload gives the set. */
    size_t cap = 0, len = 0;
    bool exact = false;
    if (rumor_codec_encoded_size(c, n, &cap, &exact) != RUMOR_OK) {
        status = 1;
        goto done;
    }
    uint8_t *buf = rumor_mem_alloc_large(cap);
    float *y = rumor_mem_alloc_large(n * sizeof *y);
    uint64_t best_q = UINT64_MAX, best_r = UINT64_MAX;
    for (int r = 0; r < reps; r++) {
        uint64_t t0 = rumor_clock_ns();
        size_t got = s_topk_quickselect(x, n, k, work, b);
        uint64_t t1 = rumor_clock_ns();
        rumor_err rc = rumor_codec_encode(c, x, n, 0, 0, buf, cap, &len, NULL);
        uint64_t t2 = rumor_clock_ns();
        if (got != k || rc != RUMOR_OK) {
            status = 1;
            break;
        }
        best_q = t1 - t0 < best_q ? t1 - t0 : best_q;
        best_r = t2 - t1 < best_r ? t2 - t1 : best_r;
    }
    /* Same set of indices as the reference? */
    size_t agree = 0;
    if (status == 0 && rumor_codec_decode(c, buf, len, y, n) == RUMOR_OK)
        for (size_t j = 0; j < k; j++)
            agree += y[b[j]] != 0 || x[b[j]] == 0;
    *gq = s_gbps(4 * n, best_q);
    *gr = s_gbps(4 * n, best_r);
    *same = agree == k;
    free(buf);
    free(y);
done:
    free(a);
    free(b);
    free(work);
    rumor_codec_destroy(&c);
    return status;
}

static int
s_bench_entropy(const float *x, size_t n, int reps)
{
    rumor_codec *c = NULL;
    int status = 0;
    size_t cap = 0, len = 0;
    bool exact = false;
    if (rumor_codec_new("fp8", &c, NULL) != RUMOR_OK ||
        rumor_codec_encoded_size(c, n, &cap, &exact) != RUMOR_OK)
        return 1;
    /* On huge pages like the codec buffers and the floor's (the stages
     * and zstd are compared on equal memory). */
    uint8_t *buf = rumor_mem_alloc_large(cap), *sym = rumor_mem_alloc_large(n),
            *back = rumor_mem_alloc_large(n);
    size_t zcap = ZSTD_compressBound(n);
    uint8_t *z = rumor_mem_alloc_large(zcap),
            *h = rumor_mem_alloc_large(rumor_huffman_bound(n));
    if (buf == NULL || sym == NULL || back == NULL || z == NULL || h == NULL ||
        rumor_codec_encode(c, x, n, 0, 0, buf, cap, &len, NULL) != RUMOR_OK ||
        rumor_huffman_decode(buf + RUMOR_COMPRESS_HEADER_BYTES,
                             len - RUMOR_COMPRESS_HEADER_BYTES,
                             sym,
                             n) != RUMOR_OK) {
        status = 1;
        goto done;
    }
    uint64_t count[256] = {0};
    for (size_t i = 0; i < n; i++)
        count[sym[i]]++;
    double bits = 0;
    for (int s = 0; s < 256; s++)
        if (count[s] > 0)
            bits -= (double)count[s] * log2((double)count[s] / (double)n);
    uint64_t he = UINT64_MAX, hd = UINT64_MAX, ze = UINT64_MAX, zd = UINT64_MAX;
    size_t hlen = 0, zlen = 0;
    for (int r = 0; r < reps; r++) {
        uint64_t t0 = rumor_clock_ns();
        rumor_err rc =
            rumor_huffman_encode(sym, n, h, rumor_huffman_bound(n), &hlen);
        uint64_t t1 = rumor_clock_ns();
        rumor_err rd = rumor_huffman_decode(h, hlen, back, n);
        uint64_t t2 = rumor_clock_ns();
        zlen = ZSTD_compress(z, zcap, sym, n, 1);
        uint64_t t3 = rumor_clock_ns();
        size_t zback = ZSTD_decompress(back, n, z, zlen);
        uint64_t t4 = rumor_clock_ns();
        if (rc != RUMOR_OK || rd != RUMOR_OK || ZSTD_isError(zlen) ||
            ZSTD_isError(zback) || zback != n) {
            status = 1;
            goto done;
        }
        he = t1 - t0 < he ? t1 - t0 : he;
        hd = t2 - t1 < hd ? t2 - t1 : hd;
        ze = t3 - t2 < ze ? t3 - t2 : ze;
        zd = t4 - t3 < zd ? t4 - t3 : zd;
    }
    double entropy_bytes = bits / 8;
    printf("\nfp8 symbols of %zu values: empirical entropy %.4f bits/symbol "
           "(%.0f bytes)\n",
           n,
           bits / (double)n,
           entropy_bytes);
    printf("  fp8 payload (Huffman)  %10zu bytes  %+.3f %% vs entropy\n",
           len,
           100.0 * ((double)len / entropy_bytes - 1));
    printf("  Huffman stage alone    %10zu bytes  %+.3f %% vs entropy  "
           "enc %6.2f GB/s  dec %6.2f GB/s (of symbol bytes)\n",
           hlen,
           100.0 * ((double)hlen / entropy_bytes - 1),
           s_gbps(n, he),
           s_gbps(n, hd));
    printf("  zstd -1 (libzstd %s)  %10zu bytes  %+.3f %% vs entropy  "
           "enc %6.2f GB/s  dec %6.2f GB/s (of symbol bytes)\n",
           ZSTD_versionString(),
           zlen,
           100.0 * ((double)zlen / entropy_bytes - 1),
           s_gbps(n, ze),
           s_gbps(n, zd));
done:
    free(buf);
    free(sym);
    free(back);
    free(z);
    free(h);
    rumor_codec_destroy(&c);
    return status;
}

int
bench_compress_main(int argc, char **argv)
{
    size_t n = (size_t)16 << 20;
    int reps = 3, first_spec = argc;
    bool topk_only = false, with_approx = false;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--n") == 0 && i + 1 < argc) {
            n = (size_t)strtoull(argv[++i], NULL, 10);
        } else if (strcmp(argv[i], "--reps") == 0 && i + 1 < argc) {
            reps = (int)strtol(argv[++i], NULL, 10);
        } else if (strcmp(argv[i], "--topk") == 0) {
            topk_only = true;
        } else if (strcmp(argv[i], "--approx") == 0) {
            with_approx = true;
        } else {
            first_spec = i;
            break;
        }
    }
    if (n < 1000 || n > RUMOR_COMPRESS_MAX_ELEMS || reps < 1) {
        fprintf(stderr,
                "usage: rumor bench compress [--n N>=1000] [--reps R] "
                "[--topk] [--approx] [SPEC...]\n");
        return 2;
    }
    /* On huge pages, as the floor's buffer is (bench/membw.c). */
    float *x = rumor_mem_alloc_large(n * sizeof *x);
    struct s_bufs bufs = {rumor_mem_alloc_large(n * sizeof(float)),
                          with_approx ? rumor_mem_alloc_large(n * sizeof(float))
                                      : NULL,
                          NULL,
                          0};
    if (x == NULL || bufs.y == NULL || (with_approx && bufs.approx == NULL)) {
        fprintf(stderr, "bench compress: out of memory\n");
        return 1;
    }
    struct rumor_rng rng;
    rumor_rng_init(&rng, 2026, 0);
    for (size_t i = 0; i < n; i++)
        x[i] = (float)rumor_rng_normal(&rng);
    /* The floor is measured before and after (the machine is shared):
     * ratios use the larger, so they are never flattered by a slow moment
     * of the reference. */
    double floor0 = bench_mem_read_gbps();
    const char *const *specs = s_default_specs;
    size_t count = sizeof s_default_specs / sizeof s_default_specs[0];
    if (first_spec < argc || topk_only) {
        specs = (const char *const *)(argv + first_spec);
        count = (size_t)(argc - first_spec);
    }
    bool topk = first_spec == argc || topk_only;
    struct s_row *rows = calloc(count ? count : 1, sizeof *rows);
    bufs.cap = s_max_cap(specs, count, n);
    bufs.buf = bufs.cap > 0 ? rumor_mem_alloc_large(bufs.cap) : NULL;
    int status = rows == NULL || bufs.buf == NULL;
    if (bufs.buf != NULL) /* touched once, outside the timed region */
        memset(bufs.buf, 0, bufs.cap);
    for (size_t i = 0; status == 0 && i < count; i++)
        status |= s_bench_codec(specs[i], x, n, reps, &bufs, &rows[i]);
    double gq = 0, gr = 0;
    bool same = false;
    if (status == 0 && topk)
        status |= s_bench_topk(x, n, reps, &gq, &gr, &same);
    double floor1 = bench_mem_read_gbps();
    double floor = floor0 > floor1 ? floor0 : floor1;
    printf("memory read (1 core)  %.2f GB/s  reference (%.2f before, %.2f "
           "after)\n",
           floor,
           floor0,
           floor1);
    printf("%zu float32 values (%.0f MB), Gaussian; GB/s of float32 data, "
           "best of %d%s\n\n",
           n,
           4.0 * (double)n / 1e6,
           reps,
           with_approx ? "; encode also writes C(x) (error feedback)" : "");
    printf("%-30s %7s %8s %7s %8s %7s\n",
           "codec",
           "bits/v",
           "enc GB/s",
           "x read",
           "dec GB/s",
           "x read");
    for (size_t i = 0; status == 0 && i < count; i++)
        printf("%-30s %7.3f %8.2f %6.2fx %8.2f %6.2fx\n",
               rows[i].spec,
               rows[i].bits,
               rows[i].enc,
               rows[i].enc / floor,
               rows[i].dec,
               rows[i].dec / floor);
    if (status == 0 && topk) {
        printf("\ntop-k 1 %% of %zu (k = %zu), selection + Rice-coded "
               "payload:\n",
               n,
               n / 100);
        printf("  quickselect (nth_element)  %8.2f GB/s  %6.2fx of memory "
               "read  reference\n",
               gq,
               gq / floor);
        printf("  radix select (topk codec)  %8.2f GB/s  %6.2fx of memory "
               "read  %.1fx quickselect, %s\n",
               gr,
               gr / floor,
               gr / gq,
               same ? "same indices" : "DIFFERENT INDICES");
        if (!topk_only)
            status |= s_bench_entropy(x, n, reps);
    }
    free(rows);
    free(x);
    free(bufs.y);
    free(bufs.approx);
    free(bufs.buf);
    return status;
}
