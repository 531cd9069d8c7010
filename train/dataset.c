/*
 * train/dataset.c: datasets in memory, the embedded digits, seeded
 * generators (Gaussian clusters, least squares with a known optimum), the
 * held-out split and subsets.
 *
 * A dataset is a plain struct of three arrays (features row-major, labels,
 * regression targets) so workloads can hand rows straight to BLAS. All
 * randomness comes from the core Philox streams keyed by the run seed and
 * a purpose constant (rumor_seed_derive), so every node computes the same
 * split and the same synthetic data without talking, on any machine.
 *
 * The embedded default is the 8x8 digits set (UCI "Optical Recognition of
 * Handwritten Digits", via scikit-learn; data/README.md). data/digits.csv
 * is pulled into the library by the assembler's .incbin at build time, so
 * the binary needs no data path at run time and the shipped file stays a
 * plain, readable CSV parsed by the same code as users' CSV files
 * (dataset_io.c). Rejected: a generated C array (a second 265 KB copy of
 * the data in the tree) and a gzip copy (57 KB saved, for an inflate at
 * every start and a file no longer readable in the tree).
 * Limit: make does not track data/digits.csv as a dependency of this
 * object; touch this file after editing the data.
 */
#include "rumor/train.h"

#include "train/train_impl.h"

#include <assert.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The bytes of data/digits.csv (paths are relative to the repository
 * root, where make runs the compiler). */
__asm__(".section .rodata\n"
        ".balign 16\n"
        ".globl train_digits_csv_begin\n"
        ".hidden train_digits_csv_begin\n"
        "train_digits_csv_begin:\n"
        ".incbin \"data/digits.csv\"\n"
        ".globl train_digits_csv_end\n"
        ".hidden train_digits_csv_end\n"
        "train_digits_csv_end:\n"
        ".previous\n");
extern const uint8_t train_digits_csv_begin[];
extern const uint8_t train_digits_csv_end[];

#define DIGITS_SAMPLES  1797
#define DIGITS_FEATURES 64
#define DIGITS_CLASSES  10
#define DIGITS_MAXVAL   16.0f /* pixel counts are 0..16 (4x4 blocks) */

/* Purpose constants for rumor_seed_derive: one stream family each. */
#define SEED_SPLIT 0x53504c49u /* "SPLI" */
#define SEED_SYNTH 0x53594e54u /* "SYNT" */
#define SEED_LSQ   0x4c535121u /* "LSQ!" */

/* --- allocation ---------------------------------------------------------- */

rumor_err
rumor_dataset_new(size_t n,
                  size_t dim,
                  size_t classes,
                  size_t outputs,
                  struct rumor_dataset **out)
{
    assert(out != NULL);
    *out = NULL;
    if (n == 0 || dim == 0 || (classes == 0) == (outputs == 0))
        return RUMOR_EINVAL;
    if (n > RUMOR_DATASET_MAX_SAMPLES || dim > RUMOR_DATASET_MAX_FEATURES ||
        classes > RUMOR_DATASET_MAX_CLASSES ||
        outputs > RUMOR_DATASET_MAX_FEATURES ||
        (uint64_t)n * dim > RUMOR_DATASET_MAX_VALUES ||
        (uint64_t)n * outputs > RUMOR_DATASET_MAX_VALUES)
        return RUMOR_ETOOBIG;
    struct rumor_dataset *d = calloc(1, sizeof *d);
    if (d == NULL)
        return RUMOR_ENOMEM;
    d->n = n;
    d->dim = dim;
    d->classes = classes;
    d->outputs = outputs;
    d->x = calloc(n * dim, sizeof *d->x);
    if (classes > 0)
        d->y = calloc(n, sizeof *d->y);
    else
        d->target = calloc(n * outputs, sizeof *d->target);
    if (d->x == NULL || (d->y == NULL && d->target == NULL)) {
        rumor_dataset_destroy(&d);
        return RUMOR_ENOMEM;
    }
    *out = d;
    return RUMOR_OK;
}

void
rumor_dataset_destroy(struct rumor_dataset **self_p)
{
    if (self_p == NULL || *self_p == NULL)
        return;
    struct rumor_dataset *d = *self_p;
    free(d->x);
    free(d->y);
    free(d->target);
    free(d);
    *self_p = NULL;
}

/* --- the embedded digits ---------------------------------------------- */

rumor_err
rumor_dataset_load_digits(struct rumor_dataset **out)
{
    assert(out != NULL);
    *out = NULL;
    size_t len = (size_t)(train_digits_csv_end - train_digits_csv_begin);
    struct rumor_diag diag;
    memset(&diag, 0, sizeof diag);
    struct rumor_dataset *d = NULL;
    rumor_err rc = rumor_dataset_parse_csv(train_digits_csv_begin,
                                           len,
                                           "digits",
                                           &d,
                                           &diag);
    if (rc != RUMOR_OK) {
        char text[2 * RUMOR_DIAG_TEXT_BYTES];
        rumor_diag_format(&diag, text, sizeof text);
        rumor_log(RUMOR_LOG_ERROR, "embedded digits: %s", text);
        return rc;
    }
    /* The shipped file is fixed: anything else means a broken build. */
    if (RUMOR_NEVER(d->n != DIGITS_SAMPLES || d->dim != DIGITS_FEATURES ||
                    d->classes != DIGITS_CLASSES)) {
        rumor_dataset_destroy(&d);
        return RUMOR_EPROTO;
    }
    for (size_t i = 0; i < d->n * d->dim; i++)
        d->x[i] /= DIGITS_MAXVAL;
    snprintf(d->name, sizeof d->name, "digits");
    *out = d;
    return RUMOR_OK;
}

/* --- generators ---------------------------------------------------------- */

void
rumor_synth_opts_default(struct rumor_synth_opts *opts)
{
    assert(opts != NULL);
    memset(opts, 0, sizeof *opts);
    opts->n = 10000;
    opts->dim = 64;
    opts->classes = 10;
    opts->separation = 2.0;
    opts->seed = 1;
}

rumor_err
rumor_dataset_synthetic(const struct rumor_synth_opts *o,
                        struct rumor_dataset **out)
{
    assert(o != NULL);
    assert(out != NULL);
    *out = NULL;
    if (o->classes < 2 || !(o->separation >= 0) || !isfinite(o->separation))
        return RUMOR_EINVAL;
    if ((uint64_t)o->classes * o->dim > RUMOR_DATASET_MAX_VALUES)
        return RUMOR_ETOOBIG;
    struct rumor_dataset *d = NULL;
    rumor_err rc = rumor_dataset_new(o->n, o->dim, o->classes, 0, &d);
    if (rc != RUMOR_OK)
        return rc;
    float *means = malloc(o->classes * o->dim * sizeof *means);
    if (means == NULL) {
        rumor_dataset_destroy(&d);
        return RUMOR_ENOMEM;
    }
    uint64_t seed = rumor_seed_derive(o->seed, SEED_SYNTH, 0);
    struct rumor_rng rng;
    rumor_rng_init(&rng, seed, 0);
    for (size_t i = 0; i < o->classes * o->dim; i++)
        means[i] = (float)(o->separation * rumor_rng_normal(&rng));
    /* One stream per sample: sample i does not depend on n. */
    for (size_t i = 0; i < o->n; i++) {
        rumor_rng_init(&rng, seed, 1 + (uint64_t)i);
        uint32_t c = rumor_rng_below(&rng, (uint32_t)o->classes);
        d->y[i] = (int32_t)c;
        for (size_t j = 0; j < o->dim; j++)
            d->x[i * o->dim + j] =
                means[c * o->dim + j] + (float)rumor_rng_normal(&rng);
    }
    free(means);
    snprintf(d->name, sizeof d->name, "synthetic");
    *out = d;
    return RUMOR_OK;
}

rumor_err
rumor_dataset_least_squares(size_t n,
                            size_t dim,
                            size_t outputs,
                            double noise,
                            uint64_t seed,
                            struct rumor_dataset **out,
                            float **w_star)
{
    assert(out != NULL);
    assert(w_star != NULL);
    *out = NULL;
    *w_star = NULL;
    if (outputs == 0 || !(noise >= 0) || !isfinite(noise))
        return RUMOR_EINVAL;
    struct rumor_dataset *d = NULL;
    rumor_err rc = rumor_dataset_new(n, dim, 0, outputs, &d);
    if (rc != RUMOR_OK)
        return rc;
    float *w = malloc(outputs * dim * sizeof *w);
    if (w == NULL) {
        rumor_dataset_destroy(&d);
        return RUMOR_ENOMEM;
    }
    uint64_t s = rumor_seed_derive(seed, SEED_LSQ, 0);
    struct rumor_rng rng;
    rumor_rng_init(&rng, s, 0);
    double wscale = 1.0 / sqrt((double)dim);
    for (size_t i = 0; i < outputs * dim; i++)
        w[i] = (float)(wscale * rumor_rng_normal(&rng));
    for (size_t i = 0; i < n; i++) {
        rumor_rng_init(&rng, s, 1 + (uint64_t)i);
        float *a = d->x + i * dim;
        for (size_t j = 0; j < dim; j++)
            a[j] = (float)rumor_rng_normal(&rng);
        for (size_t o = 0; o < outputs; o++) {
            double t = 0;
            for (size_t j = 0; j < dim; j++)
                t += (double)w[o * dim + j] * a[j];
            if (noise > 0)
                t += noise * rumor_rng_normal(&rng);
            d->target[i * outputs + o] = (float)t;
        }
    }
    snprintf(d->name, sizeof d->name, "least-squares");
    *out = d;
    *w_star = w;
    return RUMOR_OK;
}

/* --- split and subsets ------------------------------------------------- */

rumor_err
rumor_dataset_subset(const struct rumor_dataset *src,
                     const size_t *idx,
                     size_t count,
                     struct rumor_dataset **out)
{
    assert(src != NULL);
    assert(out != NULL);
    *out = NULL;
    if (count > 0 && idx == NULL)
        return RUMOR_EINVAL;
    for (size_t i = 0; i < count; i++)
        if (idx[i] >= src->n)
            return RUMOR_EINVAL;
    struct rumor_dataset *d = NULL;
    rumor_err rc =
        rumor_dataset_new(count, src->dim, src->classes, src->outputs, &d);
    if (rc != RUMOR_OK)
        return rc;
    for (size_t i = 0; i < count; i++) {
        size_t k = idx[i];
        memcpy(d->x + i * src->dim,
               src->x + k * src->dim,
               src->dim * sizeof *d->x);
        if (src->y != NULL)
            d->y[i] = src->y[k];
        else
            memcpy(d->target + i * src->outputs,
                   src->target + k * src->outputs,
                   src->outputs * sizeof *d->target);
    }
    snprintf(d->name, sizeof d->name, "%s", src->name);
    *out = d;
    return RUMOR_OK;
}

void
train_permutation(uint64_t seed, uint64_t stream, size_t *perm, size_t n)
{
    /* Fisher-Yates with unbiased draws (rumor_rng_below). */
    struct rumor_rng rng;
    rumor_rng_init(&rng, seed, stream);
    for (size_t i = 0; i < n; i++)
        perm[i] = i;
    for (size_t i = n; i > 1; i--) {
        size_t j = rumor_rng_below(&rng, (uint32_t)i);
        size_t t = perm[i - 1];
        perm[i - 1] = perm[j];
        perm[j] = t;
    }
}

static int
s_cmp_size(const void *a, const void *b)
{
    size_t x = *(const size_t *)a;
    size_t y = *(const size_t *)b;
    return (x > y) - (x < y);
}

rumor_err
rumor_dataset_split(const struct rumor_dataset *all,
                    double test_fraction,
                    uint64_t seed,
                    struct rumor_dataset **train,
                    struct rumor_dataset **test)
{
    assert(all != NULL);
    assert(train != NULL);
    assert(test != NULL);
    *train = NULL;
    *test = NULL;
    size_t n_test = all->test_n;
    if (n_test == 0) {
        if (!(test_fraction > 0 && test_fraction < 1))
            return RUMOR_EINVAL;
        n_test = (size_t)llround(test_fraction * (double)all->n);
    }
    if (n_test == 0 || n_test >= all->n)
        return RUMOR_EINVAL;
    size_t *perm = malloc(all->n * sizeof *perm);
    if (perm == NULL)
        return RUMOR_ENOMEM;
    if (all->test_n > 0) {
        /* The dataset's own held-out set: [n - n_test, n), listed first. */
        for (size_t i = 0; i < all->n; i++)
            perm[i] = (all->n - n_test + i) % all->n;
    } else {
        train_permutation(rumor_seed_derive(seed, SEED_SPLIT, 0),
                          0,
                          perm,
                          all->n);
        /* Keep the original order inside each part (readable, fast). */
        qsort(perm, n_test, sizeof *perm, s_cmp_size);
        qsort(perm + n_test, all->n - n_test, sizeof *perm, s_cmp_size);
    }
    rumor_err rc = rumor_dataset_subset(all, perm, n_test, test);
    if (rc == RUMOR_OK)
        rc = rumor_dataset_subset(all, perm + n_test, all->n - n_test, train);
    if (rc != RUMOR_OK) {
        rumor_dataset_destroy(test);
        rumor_dataset_destroy(train);
    }
    free(perm);
    return rc;
}
