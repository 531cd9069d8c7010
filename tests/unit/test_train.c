/*
 * train: datasets (embedded digits, IDX, CIFAR-10, CSV, synthetic), the
 * held-out split, iid and Dirichlet sharding, workload gradients against
 * central finite differences of an independent double-precision forward
 * pass, least squares trained to its known optimum, the MLP on the digits,
 * optimizers against PyTorch's torch.optim.SGD, and CUDA against CPU
 * (skipped without a GPU).
 */
#include "tests/cmocka_compat.h"

#include "rumor/train.h"

#include "gossip/backend.h"
#include "train/train_impl.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* --- helpers ------------------------------------------------------------- */

static struct rumor_dataset *
s_tagged(size_t n, size_t classes)
{
    /* x[i][0] = i identifies a sample after copies; labels cycle. */
    struct rumor_dataset *d = NULL;
    assert_int_equal(rumor_dataset_new(n, 2, classes, 0, &d), RUMOR_OK);
    for (size_t i = 0; i < n; i++) {
        d->x[i * 2] = (float)i;
        d->y[i] = (int32_t)(i % classes);
    }
    return d;
}

static bool
s_contains(const char *hay, const char *needle)
{
    return strstr(hay, needle) != NULL;
}

/* --- datasets ------------------------------------------------------------ */

static void
test_digits__embedded__is_the_uci_set(void **state)
{
    (void)state;
    struct rumor_dataset *d = NULL;
    assert_int_equal(rumor_dataset_load_digits(&d), RUMOR_OK);
    assert_int_equal(d->n, 1797);
    assert_int_equal(d->dim, 64);
    assert_int_equal(d->classes, 10);
    /* Class sizes of sklearn's digits (np.bincount(load_digits().target)). */
    static const size_t per_class[10] =
        {178, 182, 177, 183, 181, 182, 181, 179, 174, 180};
    size_t count[10] = {0};
    for (size_t i = 0; i < d->n; i++) {
        assert_in_range(d->y[i], 0, 9);
        count[d->y[i]]++;
    }
    for (int c = 0; c < 10; c++)
        assert_int_equal(count[c], per_class[c]);
    for (size_t i = 0; i < d->n * d->dim; i++)
        assert_true(d->x[i] >= 0.0f && d->x[i] <= 1.0f);
    /* First sample of the file: a 0 whose first row is 0,0,5,13,9,1,0,0. */
    assert_int_equal(d->y[0], 0);
    assert_float_equal(d->x[2], 5.0f / 16, 1e-7);
    assert_float_equal(d->x[3], 13.0f / 16, 1e-7);
    rumor_dataset_destroy(&d);
    rumor_dataset_destroy(&d);
    assert_null(d);
}

static void
test_split__seeded__partitions_and_repeats(void **state)
{
    (void)state;
    struct rumor_dataset *all = s_tagged(1797, 10);
    struct rumor_dataset *tr = NULL, *te = NULL, *tr2 = NULL, *te2 = NULL;
    assert_int_equal(rumor_dataset_split(all, 0.2, 7, &tr, &te), RUMOR_OK);
    assert_int_equal(te->n, 359);
    assert_int_equal(tr->n, 1797 - 359);
    char *seen = calloc(all->n, 1);
    for (size_t i = 0; i < tr->n; i++)
        seen[(size_t)tr->x[i * 2]]++;
    for (size_t i = 0; i < te->n; i++)
        seen[(size_t)te->x[i * 2]]++;
    for (size_t i = 0; i < all->n; i++)
        assert_int_equal(seen[i], 1);
    assert_int_equal(rumor_dataset_split(all, 0.2, 7, &tr2, &te2), RUMOR_OK);
    assert_memory_equal(te->x, te2->x, te->n * 2 * sizeof(float));
    rumor_dataset_destroy(&te2);
    rumor_dataset_destroy(&tr2);
    assert_int_equal(rumor_dataset_split(all, 0.2, 8, &tr2, &te2), RUMOR_OK);
    assert_memory_not_equal(te->x, te2->x, te->n * 2 * sizeof(float));
    rumor_dataset_destroy(&te2);
    rumor_dataset_destroy(&tr2);
    assert_int_equal(rumor_dataset_split(all, 1.0, 7, &tr2, &te2),
                     RUMOR_EINVAL);
    assert_null(tr2);
    free(seen);
    rumor_dataset_destroy(&tr);
    rumor_dataset_destroy(&te);
    rumor_dataset_destroy(&all);
}

static void
test_synthetic__same_seed__same_bits(void **state)
{
    (void)state;
    struct rumor_synth_opts o;
    rumor_synth_opts_default(&o);
    o.n = 500;
    o.dim = 8;
    o.classes = 4;
    struct rumor_dataset *a = NULL, *b = NULL;
    assert_int_equal(rumor_dataset_synthetic(&o, &a), RUMOR_OK);
    assert_int_equal(rumor_dataset_synthetic(&o, &b), RUMOR_OK);
    assert_memory_equal(a->x, b->x, 500 * 8 * sizeof(float));
    assert_memory_equal(a->y, b->y, 500 * sizeof(int32_t));
    size_t count[4] = {0};
    for (size_t i = 0; i < a->n; i++) {
        assert_in_range(a->y[i], 0, 3);
        count[a->y[i]]++;
    }
    for (int c = 0; c < 4; c++)
        assert_in_range(count[c], 80, 170); /* 125 expected */
    rumor_dataset_destroy(&b);
    o.seed = 2;
    assert_int_equal(rumor_dataset_synthetic(&o, &b), RUMOR_OK);
    assert_memory_not_equal(a->x, b->x, 500 * 8 * sizeof(float));
    rumor_dataset_destroy(&a);
    rumor_dataset_destroy(&b);
    o.classes = 1;
    assert_int_equal(rumor_dataset_synthetic(&o, &a), RUMOR_EINVAL);
}

static void
test_gamma__marsaglia_tsang__mean_and_variance_match(void **state)
{
    (void)state;
    static const double shapes[] = {0.1, 0.5, 1.0, 2.5, 10.0};
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        struct rumor_rng rng;
        rumor_rng_init(&rng, 42, s);
        double k = shapes[s], sum = 0, sq = 0;
        const int n = 200000;
        for (int i = 0; i < n; i++) {
            double g = train_rng_gamma(&rng, k);
            assert_true(g >= 0);
            sum += g;
            sq += g * g;
        }
        double mean = sum / n, var = sq / n - mean * mean;
        /* Gamma(k, 1): mean k, variance k; 5 standard errors. */
        double se_mean = sqrt(k / n);
        assert_true(fabs(mean - k) < 5 * se_mean);
        assert_true(fabs(var - k) < 0.05 * k + 5 * se_mean);
    }
}

/* --- sharding ------------------------------------------------------------ */

static void
s_check_partition(const struct rumor_dataset *d,
                  rumor_shard_mode mode,
                  double alpha,
                  uint32_t nodes,
                  double *mean_tv)
{
    char *seen = calloc(d->n, 1);
    double tv_sum = 0;
    size_t global[16] = {0};
    for (size_t i = 0; i < d->n; i++)
        global[d->y[i]]++;
    for (uint32_t k = 0; k < nodes; k++) {
        size_t *idx = NULL, count = 0;
        assert_int_equal(
            rumor_shard_indices(d, mode, alpha, 3, k, nodes, &idx, &count),
            RUMOR_OK);
        assert_true(count > 0);
        size_t hist[16] = {0};
        for (size_t i = 0; i < count; i++) {
            assert_true(idx[i] < d->n);
            if (i > 0)
                assert_true(idx[i] > idx[i - 1]);
            seen[idx[i]]++;
            hist[d->y[idx[i]]]++;
        }
        if (mode == RUMOR_SHARD_IID) {
            assert_true(count == d->n / nodes || count == d->n / nodes + 1);
        }
        /* Total variation between this shard's label distribution and the
         * global one. */
        double tv = 0;
        for (size_t c = 0; c < d->classes; c++)
            tv += fabs((double)hist[c] / (double)count -
                       (double)global[c] / (double)d->n);
        tv_sum += tv / 2;
        free(idx);
    }
    for (size_t i = 0; i < d->n; i++)
        assert_int_equal(seen[i], 1);
    free(seen);
    *mean_tv = tv_sum / nodes;
}

static void
test_shard__iid__partitions_in_equal_parts(void **state)
{
    (void)state;
    struct rumor_dataset *d = s_tagged(1003, 10);
    double tv = 0;
    s_check_partition(d, RUMOR_SHARD_IID, 0, 7, &tv);
    assert_true(tv < 0.15);
    size_t *idx = NULL, count = 0;
    assert_int_equal(
        rumor_shard_indices(d, RUMOR_SHARD_IID, 0, 3, 7, 7, &idx, &count),
        RUMOR_EINVAL);
    rumor_dataset_destroy(&d);
}

static void
test_shard__dirichlet__small_alpha_skewed_large_alpha_uniform(void **state)
{
    (void)state;
    struct rumor_dataset *d = s_tagged(2000, 10);
    double tv_small = 0, tv_large = 0;
    s_check_partition(d, RUMOR_SHARD_DIRICHLET, 0.1, 8, &tv_small);
    s_check_partition(d, RUMOR_SHARD_DIRICHLET, 1000, 8, &tv_large);
    print_message("mean label TV distance: alpha 0.1 %.3f, alpha 1000 %.3f\n",
                  tv_small,
                  tv_large);
    assert_true(tv_small > 0.5);
    assert_true(tv_large < 0.08);
    size_t *idx = NULL, count = 0;
    assert_int_equal(
        rumor_shard_indices(d, RUMOR_SHARD_DIRICHLET, 0, 3, 0, 4, &idx, &count),
        RUMOR_EINVAL);
    rumor_dataset_destroy(&d);
}

/* --- IDX, CIFAR-10, CSV -------------------------------------------------- */

static void
test_idx__fixture_files__load(void **state)
{
    (void)state;
    struct rumor_dataset *d = NULL;
    struct rumor_diag diag;
    assert_int_equal(
        rumor_dataset_load_idx("tests/data/node/tiny-images-idx3-ubyte",
                               "tests/data/node/tiny-labels-idx1-ubyte",
                               &d,
                               &diag),
        RUMOR_OK);
    assert_int_equal(d->n, 3);
    assert_int_equal(d->dim, 4);
    assert_int_equal(d->classes, 8);
    assert_int_equal(d->y[0], 7);
    assert_int_equal(d->y[2], 3);
    assert_float_equal(d->x[1], 1.0f, 0);
    assert_float_equal(d->x[2], 128.0f / 255, 1e-7);
    assert_float_equal(d->x[7], 4.0f / 255, 1e-7);
    rumor_dataset_destroy(&d);
    assert_int_equal(rumor_dataset_load_idx("tests/data/node/missing",
                                            "tests/data/node/missing",
                                            &d,
                                            &diag),
                     RUMOR_ENOTFOUND);
    assert_string_equal(diag.file, "tests/data/node/missing");
}

static void
s_be(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)(v >> 24);
    p[1] = (uint8_t)(v >> 16);
    p[2] = (uint8_t)(v >> 8);
    p[3] = (uint8_t)v;
}

static void
test_idx__malformed__rejected_with_reason(void **state)
{
    (void)state;
    uint8_t img[16 + 8], lab[8 + 2];
    struct {
        uint32_t img_magic, n, rows, cols, lab_magic, n_labels;
        size_t img_len, lab_len;
        rumor_err rc;
        const char *file, *why;
    } rows[] = {
        {0x803, 2, 2, 2, 0x801, 2, 24, 10, RUMOR_OK, "", ""},
        {0x804, 2, 2, 2, 0x801, 2, 24, 10, RUMOR_EPROTO, "img", "magic"},
        {0x803, 2, 2, 2, 0x803, 2, 24, 10, RUMOR_EPROTO, "lab", "magic"},
        {0x803, 3, 2, 2, 0x801, 2, 24, 10, RUMOR_EPROTO, "img", "header"},
        {0x803, 2, 2, 2, 0x801, 2, 23, 10, RUMOR_EPROTO, "img", "header"},
        {0x803, 2, 2, 2, 0x801, 3, 24, 10, RUMOR_EPROTO, "lab", "labels"},
        {0x803, 2, 2, 2, 0x801, 2, 24, 9, RUMOR_EPROTO, "lab", "header"},
        {0x803, 2, 2, 2, 0x801, 2, 15, 10, RUMOR_EPROTO, "img", "truncated"},
        {0x803, 2, 2, 2, 0x801, 2, 24, 7, RUMOR_EPROTO, "lab", "truncated"},
        {0x803, 0, 2, 2, 0x801, 0, 16, 8, RUMOR_EPROTO, "img", "empty"},
        {0x803,
         0xffffffffu,
         0xffff,
         0xffff,
         0x801,
         2,
         24,
         10,
         RUMOR_ETOOBIG,
         "img",
         "too large"},
    };
    for (size_t r = 0; r < sizeof rows / sizeof rows[0]; r++) {
        memset(img, 9, sizeof img);
        memset(lab, 1, sizeof lab);
        s_be(img, rows[r].img_magic);
        s_be(img + 4, rows[r].n);
        s_be(img + 8, rows[r].rows);
        s_be(img + 12, rows[r].cols);
        s_be(lab, rows[r].lab_magic);
        s_be(lab + 4, rows[r].n_labels);
        struct rumor_dataset *d = NULL;
        struct rumor_diag diag;
        memset(&diag, 0, sizeof diag);
        rumor_err rc = rumor_dataset_parse_idx(img,
                                               rows[r].img_len,
                                               "img",
                                               lab,
                                               rows[r].lab_len,
                                               "lab",
                                               &d,
                                               &diag);
        if (rc != rows[r].rc)
            fail_msg("row %zu: got %s", r, rumor_errname(rc));
        if (rc == RUMOR_OK) {
            assert_int_equal(d->n, 2);
            rumor_dataset_destroy(&d);
            continue;
        }
        assert_null(d);
        assert_string_equal(diag.file, rows[r].file);
        if (!s_contains(diag.msg, rows[r].why))
            fail_msg("row %zu: '%s' lacks '%s'", r, diag.msg, rows[r].why);
    }
}

static void
test_cifar10__fixture_and_malformed(void **state)
{
    (void)state;
    struct rumor_dataset *d = NULL;
    struct rumor_diag diag;
    assert_int_equal(
        rumor_dataset_load_cifar10("tests/data/node/tiny_cifar10.bin",
                                   &d,
                                   &diag),
        RUMOR_OK);
    assert_int_equal(d->n, 2);
    assert_int_equal(d->dim, 3072);
    assert_int_equal(d->classes, 10);
    assert_int_equal(d->y[0], 3);
    assert_int_equal(d->y[1], 9);
    assert_float_equal(d->x[300], (float)(300 % 256) / 255, 1e-7);
    assert_float_equal(d->x[3072 + 5], 250.0f / 255, 1e-7);
    assert_string_equal(d->name, "tiny_cifar10.bin");
    rumor_dataset_destroy(&d);
    uint8_t bad[3073 * 2];
    memset(bad, 0, sizeof bad);
    assert_int_equal(
        rumor_dataset_parse_cifar10(bad, 3073 * 2 - 1, "b", &d, &diag),
        RUMOR_EPROTO);
    assert_null(d);
    assert_true(s_contains(diag.msg, "whole number"));
    bad[3073] = 10;
    assert_int_equal(
        rumor_dataset_parse_cifar10(bad, sizeof bad, "b", &d, &diag),
        RUMOR_EPROTO);
    assert_true(s_contains(diag.msg, "record 1"));
    assert_int_equal(rumor_dataset_parse_cifar10(bad, 0, "b", &d, &diag),
                     RUMOR_EPROTO);
}

static void
test_csv__fixture__header_comments_crlf(void **state)
{
    (void)state;
    struct rumor_dataset *d = NULL;
    struct rumor_diag diag;
    assert_int_equal(
        rumor_dataset_load_csv("tests/data/node/tiny.csv", &d, &diag),
        RUMOR_OK);
    assert_int_equal(d->n, 2);
    assert_int_equal(d->dim, 3);
    assert_int_equal(d->classes, 3);
    assert_int_equal(d->y[0], 2);
    assert_int_equal(d->y[1], 0);
    assert_float_equal(d->x[0], 0.5f, 0);
    assert_float_equal(d->x[1], -1.25f, 0);
    assert_float_equal(d->x[2], 300.0f, 0);
    assert_float_equal(d->x[5], 3.0f, 0);
    rumor_dataset_destroy(&d);
}

static void
test_csv__malformed__rejected_at_line_and_column(void **state)
{
    (void)state;
    static const struct {
        const char *text;
        rumor_err rc;
        int line, col;
        const char *why;
    } rows[] = {
        {"1,2,3\n0,4,5\n", RUMOR_OK, 0, 0, ""},
        {"1,2,3\n0,4\n", RUMOR_EPROTO, 2, 1, "fields"},
        {"1,2,x\n", RUMOR_EPROTO, 1, 5, "not a finite"},
        {"1,2,nan\n", RUMOR_EPROTO, 1, 5, "not a finite"},
        {"1,2,1e999\n", RUMOR_EPROTO, 1, 5, "not a finite"},
        {"1,2,3\n-1,2,3\n", RUMOR_EPROTO, 2, 1, "label"},
        {"1,2,3\n1.5,2,3\n", RUMOR_EPROTO, 2, 1, "label"},
        {"1,2,3\n99999,2,3\n", RUMOR_EPROTO, 2, 1, "label"},
        {"1,,3\n", RUMOR_EPROTO, 1, 3, "empty"},
        {"1,2,\n", RUMOR_EPROTO, 1, 5, "empty"},
        {"", RUMOR_EPROTO, 0, 0, "no data"},
        {"a,b\n# only a header\n", RUMOR_EPROTO, 0, 0, "no data"},
        {"3\n", RUMOR_EPROTO, 1, 1, "a label and"},
        {"1,000000000000000000000000000000000000000000000000000000000000000001"
         "\n",
         RUMOR_EPROTO,
         1,
         3,
         "longer"},
    };
    for (size_t r = 0; r < sizeof rows / sizeof rows[0]; r++) {
        struct rumor_dataset *d = NULL;
        struct rumor_diag diag;
        memset(&diag, 0, sizeof diag);
        rumor_err rc = rumor_dataset_parse_csv((const uint8_t *)rows[r].text,
                                               strlen(rows[r].text),
                                               "in.csv",
                                               &d,
                                               &diag);
        if (rc != rows[r].rc)
            fail_msg("row %zu: got %s (%s)", r, rumor_errname(rc), diag.msg);
        if (rc == RUMOR_OK) {
            rumor_dataset_destroy(&d);
            continue;
        }
        assert_null(d);
        assert_string_equal(diag.file, "in.csv");
        if (diag.line != rows[r].line || diag.col != rows[r].col ||
            !s_contains(diag.msg, rows[r].why))
            fail_msg("row %zu: %d:%d '%s', want %d:%d '%s'",
                     r,
                     diag.line,
                     diag.col,
                     diag.msg,
                     rows[r].line,
                     rows[r].col,
                     rows[r].why);
    }
}

static void
test_dataset_open__specs__load_or_explain(void **state)
{
    (void)state;
    struct rumor_dataset *d = NULL;
    struct rumor_diag diag;
    memset(&diag, 0, sizeof diag);
    assert_int_equal(rumor_dataset_open("digits", 1, &d, &diag), RUMOR_OK);
    assert_int_equal(d->n, 1797);
    rumor_dataset_destroy(&d);
    assert_int_equal(rumor_dataset_open("synthetic:n=100,dim=3,classes=5,"
                                        "separation=4",
                                        9,
                                        &d,
                                        &diag),
                     RUMOR_OK);
    assert_int_equal(d->n, 100);
    assert_int_equal(d->dim, 3);
    assert_int_equal(d->classes, 5);
    rumor_dataset_destroy(&d);
    assert_int_equal(rumor_dataset_open("mnist:tests/data/node/"
                                        "tiny-images-idx3-ubyte,tests/data/"
                                        "node/tiny-labels-idx1-ubyte",
                                        1,
                                        &d,
                                        &diag),
                     RUMOR_OK);
    assert_int_equal(d->n, 3);
    rumor_dataset_destroy(&d);
    assert_int_equal(rumor_dataset_open("cifar10:tests/data/node/"
                                        "tiny_cifar10.bin,tests/data/node/"
                                        "tiny_cifar10.bin",
                                        1,
                                        &d,
                                        &diag),
                     RUMOR_OK);
    assert_int_equal(d->n, 4);
    assert_int_equal(d->y[2], 3);
    assert_float_equal(d->x[2 * 3072 + 300], d->x[300], 0);
    rumor_dataset_destroy(&d);
    assert_int_equal(
        rumor_dataset_open("csv:tests/data/node/tiny.csv", 1, &d, &diag),
        RUMOR_OK);
    assert_int_equal(d->n, 2);
    rumor_dataset_destroy(&d);
    static const struct {
        const char *spec;
        rumor_err rc;
        const char *why;
    } bad[] = {
        {"imagenet", RUMOR_EINVAL, "unknown dataset"},
        {"csv:", RUMOR_EINVAL, "unknown dataset"},
        {"mnist:only-one", RUMOR_EINVAL, "IMAGES,LABELS"},
        {"synthetic:n=ten", RUMOR_EINVAL, "bad value"},
        {"synthetic:depth=3", RUMOR_EINVAL, "unknown parameter"},
        {"synthetic:classes=1", RUMOR_EINVAL, "classes"},
        {"cifar10:tests/data/node/tiny.csv", RUMOR_EPROTO, "whole number"},
        {"csv:tests/data/node/none.csv", RUMOR_ENOTFOUND, "cannot read"},
    };
    for (size_t r = 0; r < sizeof bad / sizeof bad[0]; r++) {
        rumor_err rc = rumor_dataset_open(bad[r].spec, 1, &d, &diag);
        if (rc != bad[r].rc || !s_contains(diag.msg, bad[r].why))
            fail_msg("'%s': %s '%s'", bad[r].spec, rumor_errname(rc), diag.msg);
        assert_null(d);
    }
}

/* --- gradients against finite differences ------------------------------- */

/* Independent reference: the mean loss of params (as doubles, in the
 * model's tensor order) on all of d, written from the definitions. */
static double
s_ref_loss(const struct rumor_dataset *d,
           const size_t *width,
           size_t layers,
           bool bias,
           const double *p)
{
    double total = 0;
    double a[64], z[64];
    for (size_t i = 0; i < d->n; i++) {
        for (size_t j = 0; j < width[0]; j++)
            a[j] = d->x[i * d->dim + j];
        const double *q = p;
        for (size_t l = 0; l < layers; l++) {
            size_t in = width[l], o = width[l + 1];
            const double *w = q, *b = q + o * in;
            q += o * in + (bias ? o : 0);
            for (size_t r = 0; r < o; r++) {
                double s = bias ? b[r] : 0;
                for (size_t c = 0; c < in; c++)
                    s += w[r * in + c] * a[c];
                z[r] = s;
            }
            for (size_t r = 0; r < o; r++)
                a[r] = l + 1 < layers && z[r] < 0 ? 0 : z[r];
        }
        size_t k = width[layers];
        if (d->y == NULL) {
            for (size_t r = 0; r < k; r++) {
                double e = a[r] - d->target[i * k + r];
                total += 0.5 * e * e;
            }
        } else {
            double mx = a[0], s = 0;
            for (size_t r = 1; r < k; r++)
                mx = a[r] > mx ? a[r] : mx;
            for (size_t r = 0; r < k; r++)
                s += exp(a[r] - mx);
            total += log(s) + mx - a[d->y[i]];
        }
    }
    return total / (double)d->n;
}

static void
s_check_gradient(rumor_workload_kind kind,
                 const size_t *hidden,
                 size_t hidden_count)
{
    struct rumor_dataset *data = NULL;
    float *w_star = NULL;
    if (kind == RUMOR_WORKLOAD_LSQ) {
        assert_int_equal(
            rumor_dataset_least_squares(30, 5, 3, 0.1, 4, &data, &w_star),
            RUMOR_OK);
    } else {
        struct rumor_synth_opts so;
        rumor_synth_opts_default(&so);
        so.n = 30;
        so.dim = 5;
        so.classes = 4;
        so.separation = 1;
        assert_int_equal(rumor_dataset_synthetic(&so, &data), RUMOR_OK);
    }
    struct rumor_workload_opts o;
    rumor_workload_opts_default(&o);
    o.kind = kind;
    o.dataset = data;
    o.batch = 0;
    o.seed = 11;
    o.hidden_count = hidden_count;
    for (size_t i = 0; i < hidden_count; i++)
        o.hidden[i] = hidden[i];
    rumor_workload *w = NULL;
    struct rumor_diag diag;
    assert_int_equal(rumor_workload_new(&o, &w, &diag), RUMOR_OK);
    struct rumor_model *m = rumor_workload_model(w);
    if (kind == RUMOR_WORKLOAD_LSQ) /* move away from the zero start */
        for (size_t j = 0; j < rumor_tensor_numel(&m->tensors[0]); j++)
            m->tensors[0].data[j] = 0.3f * (float)((int)(j % 7) - 3);
    struct rumor_model *g = NULL;
    assert_int_equal(rumor_model_clone(m, &g), RUMOR_OK);
    double loss = 0;
    assert_int_equal(rumor_workload_grad(w, 0, g, &loss), RUMOR_OK);

    size_t width[RUMOR_WORKLOAD_MAX_HIDDEN + 2], layers = 0;
    width[0] = m->tensors[0].shape[1];
    bool bias = kind != RUMOR_WORKLOAD_LSQ;
    for (size_t t = 0; t < m->count; t += bias ? 2 : 1)
        width[++layers] = m->tensors[t].shape[0];
    size_t total = 0;
    for (size_t t = 0; t < m->count; t++)
        total += rumor_tensor_numel(&m->tensors[t]);
    double *p = malloc(total * sizeof *p);
    float *ga = malloc(total * sizeof *ga);
    size_t at = 0;
    for (size_t t = 0; t < m->count; t++)
        for (size_t j = 0; j < rumor_tensor_numel(&m->tensors[t]); j++) {
            ga[at] = g->tensors[t].data[j];
            p[at++] = m->tensors[t].data[j];
        }
    const struct rumor_dataset *train = train_workload_shard(w);
    double ref = s_ref_loss(train, width, layers, bias, p);
    assert_true(fabs(loss - ref) <= 1e-5 * fmax(1, fabs(ref)));
    const double h = 1e-6;
    double err = 0, norm = 0;
    for (size_t j = 0; j < total; j++) {
        double keep = p[j];
        p[j] = keep + h;
        double up = s_ref_loss(train, width, layers, bias, p);
        p[j] = keep - h;
        double down = s_ref_loss(train, width, layers, bias, p);
        p[j] = keep;
        double fd = (up - down) / (2 * h);
        err = fmax(err, fabs(fd - ga[j]));
        norm = fmax(norm, fabs(fd));
    }
    print_message("%s: %zu parameters, max |grad - fd| %.2e (max |fd| "
                  "%.2e)\n",
                  rumor_workload_kind_name(kind),
                  total,
                  err,
                  norm);
    assert_true(norm > 1e-3);
    assert_true(err <= 1e-4 * fmax(1, norm));
    free(p);
    free(ga);
    free(w_star);
    rumor_model_free(&g);
    rumor_workload_destroy(&w);
    rumor_dataset_destroy(&data);
}

static void
test_grad__lsq__matches_finite_differences(void **state)
{
    (void)state;
    s_check_gradient(RUMOR_WORKLOAD_LSQ, NULL, 0);
}

static void
test_grad__logreg__matches_finite_differences(void **state)
{
    (void)state;
    s_check_gradient(RUMOR_WORKLOAD_LOGREG, NULL, 0);
}

static void
test_grad__mlp_two_hidden_layers__matches_finite_differences(void **state)
{
    (void)state;
    static const size_t hidden[] = {7, 6};
    s_check_gradient(RUMOR_WORKLOAD_MLP, hidden, 2);
}

/* --- workloads ----------------------------------------------------------- */

static void
test_lsq__full_batch_gd__reaches_known_optimum(void **state)
{
    (void)state;
    struct rumor_workload_opts o;
    rumor_workload_opts_default(&o);
    o.kind = RUMOR_WORKLOAD_LSQ;
    o.batch = 0;
    rumor_workload *w = NULL;
    assert_int_equal(rumor_workload_new(&o, &w, NULL), RUMOR_OK);
    const struct rumor_model *opt = NULL;
    assert_int_equal(rumor_workload_optimum(w, &opt), RUMOR_OK);
    struct rumor_model *m = rumor_workload_model(w);
    assert_int_equal(m->count, 1);
    assert_int_equal(m->tensors[0].shape[0], 8);
    assert_int_equal(m->tensors[0].shape[1], 32);
    struct rumor_model *g = NULL;
    assert_int_equal(rumor_model_clone(m, &g), RUMOR_OK);
    double first = 0, loss = 0;
    for (int s = 0; s < 300; s++) {
        assert_int_equal(rumor_workload_grad(w, (uint64_t)s, g, &loss),
                         RUMOR_OK);
        if (s == 0)
            first = loss;
        size_t n = rumor_tensor_numel(&m->tensors[0]);
        for (size_t j = 0; j < n; j++)
            m->tensors[0].data[j] -= 0.5f * g->tensors[0].data[j];
    }
    double dmax = 0;
    for (size_t j = 0; j < rumor_tensor_numel(&m->tensors[0]); j++)
        dmax =
            fmax(dmax, fabs(m->tensors[0].data[j] - opt->tensors[0].data[j]));
    print_message("lsq: loss %.3e -> %.3e, max |W - W*| = %.2e\n",
                  first,
                  loss,
                  dmax);
    assert_true(dmax < 1e-4);
    struct rumor_eval ev;
    assert_int_equal(rumor_workload_eval(w, NULL, RUMOR_EVAL_TEST, &ev),
                     RUMOR_OK);
    assert_true(ev.loss < 1e-8);
    assert_true(isnan(ev.accuracy));
    rumor_model_free(&g);
    rumor_workload_destroy(&w);
}

static void
test_minibatch__same_seed_node_step__same_gradient(void **state)
{
    (void)state;
    struct rumor_workload_opts o;
    rumor_workload_opts_default(&o);
    o.nodes = 4;
    o.node = 1;
    rumor_workload *a = NULL, *b = NULL;
    assert_int_equal(rumor_workload_new(&o, &a, NULL), RUMOR_OK);
    assert_int_equal(rumor_workload_new(&o, &b, NULL), RUMOR_OK);
    struct rumor_model *ga = NULL, *gb = NULL;
    assert_int_equal(rumor_model_clone(rumor_workload_model(a), &ga), RUMOR_OK);
    assert_int_equal(rumor_model_clone(rumor_workload_model(a), &gb), RUMOR_OK);
    /* Identical start on every node; identical batches for equal steps. */
    assert_memory_equal(rumor_workload_model(a)->tensors[0].data,
                        rumor_workload_model(b)->tensors[0].data,
                        64 * 32 * sizeof(float));
    double la = 0, lb = 0;
    assert_int_equal(rumor_workload_grad(a, 5, ga, &la), RUMOR_OK);
    assert_int_equal(rumor_workload_grad(b, 5, gb, &lb), RUMOR_OK);
    assert_true(la == lb);
    assert_memory_equal(ga->tensors[0].data,
                        gb->tensors[0].data,
                        64 * 32 * sizeof(float));
    assert_int_equal(rumor_workload_grad(b, 6, gb, &lb), RUMOR_OK);
    assert_true(la != lb);
    /* node 1 of 4 gets [1438 * 1 / 4, 1438 * 2 / 4) of the iid order */
    assert_int_equal(rumor_workload_train_size(a), 1438 * 2 / 4 - 1438 / 4);
    assert_int_equal(rumor_workload_test_size(a), 359);
    /* Wrong gradient shapes are the caller's bug. */
    struct rumor_model short_model = {ga->tensors, ga->count - 1};
    assert_int_equal(rumor_workload_grad(a, 0, &short_model, NULL),
                     RUMOR_EINVAL);
    rumor_model_free(&ga);
    rumor_model_free(&gb);
    rumor_workload_destroy(&a);
    rumor_workload_destroy(&b);
}

static void
test_workload__dirichlet_shards_of_digits__cover_the_training_split(
    void **state)
{
    (void)state;
    struct rumor_workload_opts o;
    rumor_workload_opts_default(&o);
    o.kind = RUMOR_WORKLOAD_LOGREG;
    o.nodes = 4;
    o.shard = RUMOR_SHARD_DIRICHLET;
    o.alpha = 0.3;
    size_t total = 0;
    for (uint32_t k = 0; k < 4; k++) {
        rumor_workload *w = NULL;
        o.node = k;
        assert_int_equal(rumor_workload_new(&o, &w, NULL), RUMOR_OK);
        total += rumor_workload_train_size(w);
        assert_int_equal(rumor_workload_test_size(w), 359);
        struct rumor_model *m = rumor_workload_model(w);
        assert_int_equal(m->count, 2);
        assert_int_equal(m->tensors[0].ndim, 2);
        assert_int_equal(m->tensors[0].shape[0], 10);
        assert_int_equal(m->tensors[0].shape[1], 64);
        assert_int_equal(m->tensors[1].ndim, 1);
        rumor_workload_destroy(&w);
    }
    assert_int_equal(total, 1797 - 359);
}

static void
test_workload__bad_options__refused_with_reason(void **state)
{
    (void)state;
    struct rumor_workload_opts o;
    rumor_workload *w = NULL;
    struct rumor_diag diag;
    rumor_workload_opts_default(&o);
    o.node = 4;
    o.nodes = 4;
    assert_int_equal(rumor_workload_new(&o, &w, &diag), RUMOR_EINVAL);
    assert_null(w);
    assert_true(s_contains(diag.msg, "node 4"));
    rumor_workload_opts_default(&o);
    o.hidden_count = 0;
    assert_int_equal(rumor_workload_new(&o, &w, &diag), RUMOR_EINVAL);
    rumor_workload_opts_default(&o);
    o.test_fraction = 0;
    assert_int_equal(rumor_workload_new(&o, &w, &diag), RUMOR_EINVAL);
    rumor_workload_opts_default(&o);
    o.kind = RUMOR_WORKLOAD_LSQ;
    struct rumor_dataset *digits = NULL;
    assert_int_equal(rumor_dataset_load_digits(&digits), RUMOR_OK);
    o.dataset = digits;
    assert_int_equal(rumor_workload_new(&o, &w, &diag), RUMOR_EINVAL);
    assert_true(s_contains(diag.msg, "regression"));
    o.kind = RUMOR_WORKLOAD_LOGREG;
    digits->y[5] = 10;
    assert_int_equal(rumor_workload_new(&o, &w, &diag), RUMOR_EINVAL);
    assert_true(s_contains(diag.msg, "sample 5 has label 10"));
    rumor_dataset_destroy(&digits);
    rumor_workload_kind k;
    assert_int_equal(rumor_workload_kind_parse("mlp", &k), RUMOR_OK);
    assert_int_equal(k, RUMOR_WORKLOAD_MLP);
    assert_int_equal(rumor_workload_kind_parse("cnn", &k), RUMOR_EINVAL);
}

static void
test_mlp__digits_sgd_400_steps__reaches_92_percent(void **state)
{
    (void)state;
    struct rumor_workload_opts o;
    rumor_workload_opts_default(&o); /* mlp 64-32-10 on the digits */
    rumor_workload *w = NULL;
    assert_int_equal(rumor_workload_new(&o, &w, NULL), RUMOR_OK);
    struct rumor_model *m = rumor_workload_model(w);
    struct rumor_model *g = NULL;
    assert_int_equal(rumor_model_clone(m, &g), RUMOR_OK);
    struct rumor_optim_opts oo;
    rumor_optim_opts_default(&oo);
    oo.kind = RUMOR_OPTIM_MOMENTUM;
    oo.lr = 0.05;
    rumor_optim *opt = NULL;
    assert_int_equal(rumor_optim_new(&oo, m, &opt), RUMOR_OK);
    struct rumor_eval before, after, own;
    assert_int_equal(rumor_workload_eval(w, NULL, RUMOR_EVAL_TEST, &before),
                     RUMOR_OK);
    for (uint64_t s = 0; s < 400; s++) {
        assert_int_equal(rumor_workload_grad(w, s, g, NULL), RUMOR_OK);
        assert_int_equal(rumor_optim_step(opt, s, m, g), RUMOR_OK);
    }
    assert_int_equal(rumor_workload_eval(w, NULL, RUMOR_EVAL_TEST, &after),
                     RUMOR_OK);
    print_message("mlp on digits: test accuracy %.3f -> %.3f, loss %.3f -> "
                  "%.3f\n",
                  before.accuracy,
                  after.accuracy,
                  before.loss,
                  after.loss);
    assert_int_equal(after.n, 359);
    assert_true(after.accuracy >= 0.92);
    assert_true(after.loss < before.loss);
    /* Evaluating a given parameter set: a copy gives the same numbers; a
     * zeroed copy predicts uniformly (loss log 10). */
    struct rumor_model *copy = NULL;
    assert_int_equal(rumor_model_clone(m, &copy), RUMOR_OK);
    assert_int_equal(rumor_workload_eval(w, copy, RUMOR_EVAL_TEST, &own),
                     RUMOR_OK);
    assert_true(own.loss == after.loss && own.accuracy == after.accuracy);
    for (size_t t = 0; t < copy->count; t++)
        memset(copy->tensors[t].data,
               0,
               rumor_tensor_numel(&copy->tensors[t]) * sizeof(float));
    assert_int_equal(rumor_workload_eval(w, copy, RUMOR_EVAL_TRAIN, &own),
                     RUMOR_OK);
    assert_float_equal(own.loss, log(10.0), 1e-6);
    rumor_model_free(&copy);
    rumor_optim_destroy(&opt);
    rumor_model_free(&g);
    rumor_workload_destroy(&w);
}

static void
test_cuda__gradients__match_cpu(void **state)
{
    (void)state;
    const char *why = NULL;
    if (rumor_cuda_device_count(&why) == 0) {
        print_message("skipped: no usable CUDA device (%s)\n", why);
        skip();
    }
    static const rumor_workload_kind kinds[] = {RUMOR_WORKLOAD_LSQ,
                                                RUMOR_WORKLOAD_LOGREG,
                                                RUMOR_WORKLOAD_MLP};
    for (size_t k = 0; k < 3; k++) {
        struct rumor_workload_opts o;
        rumor_workload_opts_default(&o);
        o.kind = kinds[k];
        o.hidden[1] = 16;
        o.hidden_count = 2;
        o.batch = 300;
        rumor_workload *cpu = NULL, *gpu = NULL;
        assert_int_equal(rumor_workload_new(&o, &cpu, NULL), RUMOR_OK);
        o.want_cuda = true;
        assert_int_equal(rumor_workload_new(&o, &gpu, NULL), RUMOR_OK);
        assert_int_equal(train_workload_device(gpu), RUMOR_DEVICE_CUDA);
        struct rumor_model *gc = NULL, *gg = NULL;
        assert_int_equal(rumor_model_clone(rumor_workload_model(cpu), &gc),
                         RUMOR_OK);
        assert_int_equal(rumor_model_clone(rumor_workload_model(cpu), &gg),
                         RUMOR_OK);
        if (kinds[k] == RUMOR_WORKLOAD_LSQ)
            for (size_t j = 0; j < 8 * 32; j++) {
                rumor_workload_model(cpu)->tensors[0].data[j] = 0.01f * j;
                rumor_workload_model(gpu)->tensors[0].data[j] = 0.01f * j;
            }
        double lc = 0, lg = 0;
        assert_int_equal(rumor_workload_grad(cpu, 3, gc, &lc), RUMOR_OK);
        assert_int_equal(rumor_workload_grad(gpu, 3, gg, &lg), RUMOR_OK);
        assert_true(fabs(lc - lg) <= 1e-4 * fmax(1, fabs(lc)));
        for (size_t t = 0; t < gc->count; t++) {
            double num = 0, den = 0;
            for (size_t j = 0; j < rumor_tensor_numel(&gc->tensors[t]); j++) {
                double d = gc->tensors[t].data[j] - gg->tensors[t].data[j];
                num += d * d;
                den += (double)gc->tensors[t].data[j] * gc->tensors[t].data[j];
            }
            /* NMSE as in ggml's test-backend-ops. */
            if (!(num <= 1e-8 * fmax(den, 1e-12)))
                fail_msg("%s tensor %zu: nmse %.3e",
                         rumor_workload_kind_name(kinds[k]),
                         t,
                         num / fmax(den, 1e-30));
        }
        struct rumor_eval ec, eg;
        assert_int_equal(rumor_workload_eval(cpu, NULL, RUMOR_EVAL_TEST, &ec),
                         RUMOR_OK);
        assert_int_equal(rumor_workload_eval(gpu, NULL, RUMOR_EVAL_TEST, &eg),
                         RUMOR_OK);
        assert_true(fabs(ec.loss - eg.loss) <= 1e-4 * fmax(1, ec.loss));
        rumor_model_free(&gc);
        rumor_model_free(&gg);
        rumor_workload_destroy(&cpu);
        rumor_workload_destroy(&gpu);
    }
}

/* --- optimizers ---------------------------------------------------------- */

/* Three steps of lr 0.1, weight decay 0.01 (momentum 0.9 where used) from
 * p = [1, -2, 0.5] with gradients gs; expected values printed by PyTorch
 * 2.x torch.optim.SGD on this machine (and the first element of
 * "momentum" checked by hand: 0.949, 0.932151, 0.9110548). */
static void
test_optim__three_steps__match_pytorch_sgd(void **state)
{
    (void)state;
    static const float gs[3][3] = {{0.5f, 0.25f, -1.0f},
                                   {-0.3f, 0.1f, 0.2f},
                                   {0.05f, -0.4f, 0.6f}};
    static const struct {
        rumor_optim_kind kind;
        float want[3];
    } rows[] = {
        {RUMOR_OPTIM_SGD, {0.972072959f, -1.98894608f, 0.518321633f}},
        {RUMOR_OPTIM_MOMENTUM, {0.91105479f, -2.03543472f, 0.669837475f}},
        {RUMOR_OPTIM_NESTEROV, {0.892221212f, -2.02071142f, 0.670725524f}},
    };
    for (size_t r = 0; r < 3; r++) {
        float p[3] = {1.0f, -2.0f, 0.5f}, g[3];
        struct rumor_tensor tp = {p, 1, {3}}, tg = {g, 1, {3}};
        struct rumor_model mp = {&tp, 1}, mg = {&tg, 1};
        struct rumor_optim_opts o;
        rumor_optim_opts_default(&o);
        o.kind = rows[r].kind;
        o.lr = 0.1;
        o.momentum = 0.9;
        o.weight_decay = 0.01;
        rumor_optim *opt = NULL;
        assert_int_equal(rumor_optim_new(&o, &mp, &opt), RUMOR_OK);
        for (int s = 0; s < 3; s++) {
            memcpy(g, gs[s], sizeof g);
            assert_int_equal(rumor_optim_step(opt, (uint64_t)s, &mp, &mg),
                             RUMOR_OK);
            assert_memory_equal(g, gs[s], sizeof g); /* grads untouched */
        }
        for (int j = 0; j < 3; j++)
            assert_float_equal(p[j], rows[r].want[j], 2e-7);
        rumor_optim_destroy(&opt);
        rumor_optim_destroy(&opt);
    }
}

static void
test_optim__warmup_and_step_decay__schedule(void **state)
{
    (void)state;
    float p = 0;
    struct rumor_tensor t = {&p, 0, {0}};
    struct rumor_model m = {&t, 1};
    struct rumor_optim_opts o;
    rumor_optim_opts_default(&o);
    o.lr = 0.1;
    o.warmup_steps = 4;
    o.decay_every = 10;
    o.decay_factor = 0.5;
    rumor_optim *opt = NULL;
    assert_int_equal(rumor_optim_new(&o, &m, &opt), RUMOR_OK);
    static const struct {
        uint64_t step;
        double lr;
    } rows[] = {{0, 0.025},
                {1, 0.05},
                {3, 0.1},
                {4, 0.1},
                {9, 0.1},
                {10, 0.05},
                {25, 0.025},
                {30, 0.0125}};
    for (size_t r = 0; r < sizeof rows / sizeof rows[0]; r++)
        assert_float_equal(rumor_optim_lr(opt, rows[r].step),
                           rows[r].lr,
                           1e-15);
    rumor_optim_destroy(&opt);
    o.momentum = 1.0;
    o.kind = RUMOR_OPTIM_NESTEROV;
    assert_int_equal(rumor_optim_new(&o, &m, &opt), RUMOR_EINVAL);
    rumor_optim_kind k;
    assert_int_equal(rumor_optim_kind_parse("nesterov", &k), RUMOR_OK);
    assert_int_equal(k, RUMOR_OPTIM_NESTEROV);
    assert_int_equal(rumor_optim_kind_parse("adam", &k), RUMOR_EINVAL);
}

static void
test_optim__state_saved_and_loaded__continues_identically(void **state)
{
    (void)state;
    float p1[4] = {1, 2, 3, 4}, p2[4], g[4] = {0.1f, -0.2f, 0.3f, -0.4f};
    float bias1[2] = {0.5f, -0.5f}, bias2[2], gb[2] = {1, -1};
    struct rumor_tensor t1[2] = {{p1, 2, {2, 2}}, {bias1, 1, {2}}};
    struct rumor_tensor t2[2] = {{p2, 2, {2, 2}}, {bias2, 1, {2}}};
    struct rumor_tensor tg[2] = {{g, 2, {2, 2}}, {gb, 1, {2}}};
    struct rumor_model m1 = {t1, 2}, m2 = {t2, 2}, mg = {tg, 2};
    struct rumor_optim_opts o;
    rumor_optim_opts_default(&o);
    o.kind = RUMOR_OPTIM_NESTEROV;
    rumor_optim *a = NULL, *b = NULL;
    assert_int_equal(rumor_optim_new(&o, &m1, &a), RUMOR_OK);
    assert_int_equal(rumor_optim_new(&o, &m2, &b), RUMOR_OK);
    for (uint64_t s = 0; s < 3; s++)
        assert_int_equal(rumor_optim_step(a, s, &m1, &mg), RUMOR_OK);
    uint8_t bytes[256];
    size_t len = 0;
    assert_int_equal(rumor_optim_state_bytes(a), 24 + 6 * 4);
    assert_int_equal(rumor_optim_save(a, bytes, 10, &len), RUMOR_ETOOBIG);
    assert_int_equal(rumor_optim_save(a, bytes, sizeof bytes, &len), RUMOR_OK);
    assert_int_equal(len, 48);
    /* Malformed states are refused and leave b as it was. */
    uint8_t bad[256];
    memcpy(bad, bytes, len);
    assert_int_equal(rumor_optim_load(b, bad, len - 1), RUMOR_EPROTO);
    bad[0] ^= 1;
    assert_int_equal(rumor_optim_load(b, bad, len), RUMOR_EPROTO);
    memcpy(bad, bytes, len);
    bad[8] = RUMOR_OPTIM_MOMENTUM;
    assert_int_equal(rumor_optim_load(b, bad, len), RUMOR_EPROTO);
    memcpy(bad, bytes, len);
    memset(bad + 24, 0xff, 4); /* a NaN in the momentum buffer */
    assert_int_equal(rumor_optim_load(b, bad, len), RUMOR_ENUMERIC);
    assert_int_equal(rumor_optim_load(b, bytes, len), RUMOR_OK);
    memcpy(p2, p1, sizeof p1);
    memcpy(bias2, bias1, sizeof bias1);
    assert_int_equal(rumor_optim_step(a, 3, &m1, &mg), RUMOR_OK);
    assert_int_equal(rumor_optim_step(b, 3, &m2, &mg), RUMOR_OK);
    assert_memory_equal(p1, p2, sizeof p1);
    assert_memory_equal(bias1, bias2, sizeof bias1);
    /* A different shape is refused. */
    struct rumor_model one = {t1, 1};
    assert_int_equal(rumor_optim_step(a, 4, &one, &mg), RUMOR_EINVAL);
    rumor_optim_destroy(&a);
    rumor_optim_destroy(&b);
}

/* The textbook loops of torch.optim.SGD (the optimizer's code before it
 * went through the backend table), the independent reference below. */
static void
s_textbook_step(rumor_optim_kind kind,
                float lr,
                float wd,
                float mu,
                float *p,
                const float *g,
                float *b,
                size_t n)
{
    for (size_t i = 0; i < n; i++) {
        float gi = g[i] + wd * p[i];
        if (kind == RUMOR_OPTIM_SGD) {
            p[i] -= lr * gi;
            continue;
        }
        b[i] = mu * b[i] + gi;
        p[i] -= lr * (kind == RUMOR_OPTIM_NESTEROV ? gi + mu * b[i] : b[i]);
    }
}

#define S_OPT_N 3
static const size_t s_opt_numel[S_OPT_N] = {300, 17, 1000};

static void
s_normals(struct rumor_rng *rng, float *x, size_t n)
{
    for (size_t i = 0; i < n; i++)
        x[i] = (float)rumor_rng_normal(rng);
}

/* Six steps (warm-up and a decay inside) of every kind with the
 * optimizer's vectors in be's memory, against the textbook loops on the
 * host: bit-equal, nothing copied by a step, the state's host copy
 * counted at save and loaded into a host optimizer that continues
 * identically. */
static void
s_optim_on_backend(const struct gossip_backend_i *be)
{
    enum { STEPS = 6, TOTAL = 1317 };
    for (int kind = RUMOR_OPTIM_SGD; kind <= RUMOR_OPTIM_NESTEROV; kind++) {
        float want[TOTAL], mom[TOTAL] = {0}, got[TOTAL], grad[TOTAL];
        float *dp = NULL, *dg = NULL;
        struct rumor_rng rng;
        rumor_rng_init(&rng, 7, (uint64_t)kind);
        s_normals(&rng, want, TOTAL);
        assert_int_equal(be->alloc(sizeof want, (void **)&dp), RUMOR_OK);
        assert_int_equal(be->alloc(sizeof want, (void **)&dg), RUMOR_OK);
        assert_int_equal(be->copy(dp, want, sizeof want, GOSSIP_TO_DEVICE),
                         RUMOR_OK);
        struct rumor_tensor tp[S_OPT_N], tg[S_OPT_N];
        size_t off = 0;
        for (size_t t = 0; t < S_OPT_N; t++) {
            tp[t] = (struct rumor_tensor){dp + off, 1, {s_opt_numel[t]}};
            tg[t] = (struct rumor_tensor){dg + off, 1, {s_opt_numel[t]}};
            off += s_opt_numel[t];
        }
        struct rumor_model mp = {tp, S_OPT_N}, mg = {tg, S_OPT_N};
        struct rumor_optim_opts o;
        rumor_optim_opts_default(&o);
        o.kind = (rumor_optim_kind)kind;
        o.lr = 0.05;
        o.weight_decay = 1e-3;
        o.momentum = 0.9;
        o.warmup_steps = 3;
        o.decay_every = 4;
        o.decay_factor = 0.5;
        rumor_optim *opt = NULL;
        assert_int_equal(train_optim_new_in(&o, &mp, be, &opt), RUMOR_OK);
        for (uint64_t s = 0; s < STEPS; s++) {
            s_normals(&rng, grad, TOTAL);
            assert_int_equal(be->copy(dg, grad, sizeof grad, GOSSIP_TO_DEVICE),
                             RUMOR_OK);
            assert_int_equal(rumor_optim_step(opt, s, &mp, &mg), RUMOR_OK);
            s_textbook_step(o.kind,
                            (float)rumor_optim_lr(opt, s),
                            (float)o.weight_decay,
                            (float)o.momentum,
                            want,
                            grad,
                            mom,
                            TOTAL);
        }
        assert_int_equal(be->copy(got, dp, sizeof got, GOSSIP_TO_HOST),
                         RUMOR_OK);
        assert_memory_equal(got, want, sizeof got);
        uint64_t h2d = 1, d2h = 1;
        train_optim_pcie(opt, &h2d, &d2h);
        assert_int_equal(h2d, 0);
        assert_int_equal(d2h, 0);
        /* the state through its host copy into a host optimizer */
        uint8_t bytes[24 + TOTAL * 4];
        size_t len = 0;
        assert_int_equal(rumor_optim_save(opt, bytes, sizeof bytes, &len),
                         RUMOR_OK);
        train_optim_pcie(opt, &h2d, &d2h);
        size_t state = kind == RUMOR_OPTIM_SGD ? 0 : sizeof mom;
        assert_int_equal(d2h, be->host_memory ? 0 : state);
        assert_int_equal(len, 24 + state);
        if (state > 0)
            assert_memory_equal(bytes + 24, mom, state);
        struct rumor_tensor th = {got, 1, {TOTAL}}, tgh = {grad, 1, {TOTAL}};
        struct rumor_model mh = {&th, 1}, mgh = {&tgh, 1};
        struct rumor_optim_opts flat = o;
        rumor_optim *host = NULL;
        assert_int_equal(rumor_optim_new(&flat, &mh, &host), RUMOR_OK);
        assert_int_equal(rumor_optim_load(host, bytes, len), RUMOR_OK);
        assert_int_equal(rumor_optim_step(host, STEPS, &mh, &mgh), RUMOR_OK);
        s_textbook_step(o.kind,
                        (float)rumor_optim_lr(opt, STEPS),
                        (float)o.weight_decay,
                        (float)o.momentum,
                        want,
                        grad,
                        mom,
                        TOTAL);
        assert_memory_equal(got, want, sizeof got);
        /* and back into the device optimizer: its copy in is counted */
        assert_int_equal(rumor_optim_load(opt, bytes, len), RUMOR_OK);
        train_optim_pcie(opt, &h2d, &d2h);
        assert_int_equal(h2d, be->host_memory ? 0 : state);
        rumor_optim_destroy(&host);
        rumor_optim_destroy(&opt);
        be->release(dp);
        be->release(dg);
    }
}

static void
test_optim__on_the_reference_device__bit_equal_to_textbook(void **state)
{
    (void)state;
    s_optim_on_backend(&gossip_backend_host);
    s_optim_on_backend(&gossip_backend_ref);
}

/* The same on CUDA memory (add_scaled's kernel, _rn intrinsics); skips
 * with the runtime's reason without a GPU. */
static void
test_optim__on_cuda__bit_equal_to_textbook(void **state)
{
    (void)state;
    const struct gossip_backend_i *cuda = NULL;
    const char *why = NULL;
    if (gossip_backend_cuda(&cuda, &why) != RUMOR_OK) {
        printf("skipped: %s\n", why);
        skip();
    }
    s_optim_on_backend(cuda);
}

/* A model of src's shapes in be's memory, zeroed; its tensors in t. */
static void
s_model_in(const struct gossip_backend_i *be,
           const struct rumor_model *src,
           struct rumor_tensor *t,
           struct rumor_model *out)
{
    for (size_t i = 0; i < src->count; i++) {
        t[i] = src->tensors[i];
        assert_int_equal(be->alloc(rumor_tensor_numel(&t[i]) * sizeof(float),
                                   (void **)&t[i].data),
                         RUMOR_OK);
    }
    *out = (struct rumor_model){t, src->count};
}

/* The model of w in host memory: its own, or a copy out of be's. */
static void
s_model_bytes(const struct gossip_backend_i *be,
              const struct rumor_model *m,
              float *out)
{
    for (size_t i = 0; i < m->count; i++) {
        size_t n = rumor_tensor_numel(&m->tensors[i]);
        assert_int_equal(
            be->copy(out,
                     m->tensors[i].data,
                     n * sizeof(float),
                     be->host_memory ? GOSSIP_ON_DEVICE : GOSSIP_TO_HOST),
            RUMOR_OK);
        out += n;
    }
}

/* The steps of `rumor node` without the exchange (gradient, optimizer,
 * held-out evaluation) with the model, the gradient and the optimizer's
 * state in be's memory, against the same on the host: the models bit for
 * bit (compute: CPU for a device without CUDA, else CUDA on both sides),
 * and only the batches, the losses and the one placement cross. */
static void
s_resident_steps(const struct gossip_backend_i *be, bool cuda)
{
    enum { STEPS = 15, BATCH = 32, FEATURES = 64 };
    struct rumor_workload_opts o;
    rumor_workload_opts_default(&o);
    o.kind = RUMOR_WORKLOAD_MLP;
    o.batch = BATCH;
    o.want_cuda = cuda;
    rumor_workload *host = NULL, *dev = NULL;
    assert_int_equal(rumor_workload_new(&o, &host, NULL), RUMOR_OK);
    assert_int_equal(rumor_workload_new(&o, &dev, NULL), RUMOR_OK);
    assert_int_equal(train_workload_place(host, &gossip_backend_host),
                     RUMOR_EINVAL);
    assert_int_equal(train_workload_place(dev, be), RUMOR_OK);
    assert_int_equal(train_workload_place(dev, be), RUMOR_EINVAL);
    struct rumor_model *mh = rumor_workload_model(host);
    struct rumor_model *md = rumor_workload_model(dev);
    struct rumor_model *gh = NULL, gd;
    struct rumor_tensor gt[2 * RUMOR_WORKLOAD_MAX_HIDDEN + 2];
    assert_int_equal(rumor_model_clone(mh, &gh), RUMOR_OK);
    s_model_in(be, mh, gt, &gd);
    struct rumor_optim_opts oo;
    rumor_optim_opts_default(&oo);
    oo.kind = RUMOR_OPTIM_NESTEROV;
    oo.weight_decay = 1e-4;
    rumor_optim *ph = NULL, *pd = NULL;
    assert_int_equal(rumor_optim_new(&oo, mh, &ph), RUMOR_OK);
    assert_int_equal(train_optim_new_in(&oo, md, be, &pd), RUMOR_OK);
    size_t floats = 0;
    for (size_t i = 0; i < mh->count; i++)
        floats += rumor_tensor_numel(&mh->tensors[i]);
    for (uint64_t t = 0; t < STEPS; t++) {
        double lh = 0, ld = 0;
        assert_int_equal(rumor_workload_grad(host, t, gh, &lh), RUMOR_OK);
        assert_int_equal(rumor_workload_grad(dev, t, &gd, &ld), RUMOR_OK);
        if (cuda) /* the loss is summed with atomics */
            assert_true(fabs(lh - ld) <= 1e-6 * fabs(lh));
        else
            assert_true(lh == ld);
        assert_int_equal(rumor_optim_step(ph, t, mh, gh), RUMOR_OK);
        assert_int_equal(rumor_optim_step(pd, t, md, &gd), RUMOR_OK);
    }
    struct rumor_eval eh, ed;
    assert_int_equal(rumor_workload_eval(host, NULL, RUMOR_EVAL_TEST, &eh),
                     RUMOR_OK);
    assert_int_equal(rumor_workload_eval(dev, NULL, RUMOR_EVAL_TEST, &ed),
                     RUMOR_OK);
    assert_true(eh.accuracy == ed.accuracy);
    float *a = malloc(floats * sizeof *a), *b = malloc(floats * sizeof *b);
    assert_non_null(a);
    assert_non_null(b);
    s_model_bytes(&gossip_backend_host, mh, a);
    s_model_bytes(be, md, b);
    assert_memory_equal(a, b, floats * sizeof *a);
    /* PCIe: the parameters once, then per pass the batch (64 features and
     * a label a row) up and a loss and a count down; the optimizer none */
    size_t eval_passes = (eh.n + 255) / 256; /* EVAL_CHUNK rows */
    uint64_t h2d = 0, d2h = 0;
    train_workload_pcie(dev, &h2d, &d2h);
    assert_int_equal(h2d,
                     floats * 4 + STEPS * BATCH * (FEATURES + 1) * 4 +
                         eh.n * (FEATURES + 1) * 4);
    assert_int_equal(d2h, (STEPS + eval_passes) * 16);
    train_workload_pcie(host, &h2d, &d2h);
    assert_int_equal(h2d + d2h, 0);
    train_optim_pcie(pd, &h2d, &d2h);
    assert_int_equal(h2d + d2h, 0);
    free(a);
    free(b);
    for (size_t i = 0; i < gd.count; i++)
        be->release(gd.tensors[i].data);
    rumor_model_free(&gh);
    rumor_optim_destroy(&ph);
    rumor_optim_destroy(&pd);
    rumor_workload_destroy(&host);
    rumor_workload_destroy(&dev);
}

static void
test_resident__ref_device_steps__bit_equal_to_host(void **state)
{
    (void)state;
    s_resident_steps(&gossip_backend_ref, false);
}

/* CUDA resident against CUDA staged (the same kernels): never run on a
 * GPU; skips with the runtime's reason without one. */
static void
test_resident__cuda_steps__bit_equal_to_staged(void **state)
{
    (void)state;
    const struct gossip_backend_i *cuda = NULL;
    const char *why = NULL;
    if (gossip_backend_cuda(&cuda, &why) != RUMOR_OK) {
        printf("skipped: %s\n", why);
        skip();
    }
    s_resident_steps(cuda, true);
}

int
main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_digits__embedded__is_the_uci_set),
        cmocka_unit_test(test_split__seeded__partitions_and_repeats),
        cmocka_unit_test(test_synthetic__same_seed__same_bits),
        cmocka_unit_test(test_gamma__marsaglia_tsang__mean_and_variance_match),
        cmocka_unit_test(test_shard__iid__partitions_in_equal_parts),
        cmocka_unit_test(
            test_shard__dirichlet__small_alpha_skewed_large_alpha_uniform),
        cmocka_unit_test(test_idx__fixture_files__load),
        cmocka_unit_test(test_idx__malformed__rejected_with_reason),
        cmocka_unit_test(test_cifar10__fixture_and_malformed),
        cmocka_unit_test(test_csv__fixture__header_comments_crlf),
        cmocka_unit_test(test_csv__malformed__rejected_at_line_and_column),
        cmocka_unit_test(test_dataset_open__specs__load_or_explain),
        cmocka_unit_test(test_grad__lsq__matches_finite_differences),
        cmocka_unit_test(test_grad__logreg__matches_finite_differences),
        cmocka_unit_test(
            test_grad__mlp_two_hidden_layers__matches_finite_differences),
        cmocka_unit_test(test_lsq__full_batch_gd__reaches_known_optimum),
        cmocka_unit_test(test_minibatch__same_seed_node_step__same_gradient),
        cmocka_unit_test(
            test_workload__dirichlet_shards_of_digits__cover_the_training_split),
        cmocka_unit_test(test_workload__bad_options__refused_with_reason),
        cmocka_unit_test(test_mlp__digits_sgd_400_steps__reaches_92_percent),
        cmocka_unit_test(test_cuda__gradients__match_cpu),
        cmocka_unit_test(test_optim__three_steps__match_pytorch_sgd),
        cmocka_unit_test(test_optim__warmup_and_step_decay__schedule),
        cmocka_unit_test(
            test_optim__state_saved_and_loaded__continues_identically),
        cmocka_unit_test(
            test_optim__on_the_reference_device__bit_equal_to_textbook),
        cmocka_unit_test(test_optim__on_cuda__bit_equal_to_textbook),
        cmocka_unit_test(test_resident__ref_device_steps__bit_equal_to_host),
        cmocka_unit_test(test_resident__cuda_steps__bit_equal_to_staged),
    };
    if (argc == 2)
        cmocka_set_test_filter(argv[1]);
    return cmocka_run_group_tests_name("node", tests, NULL, NULL);
}
