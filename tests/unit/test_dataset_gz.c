/*
 * IDX files compressed with gzip and IDX directories (MNIST and
 * Fashion-MNIST as published): tiny files written here with zlib's own
 * writer (gzopen/gzwrite, the code that made the published .gz files)
 * decode to the pixels and labels written; .gz and plain files give the
 * same dataset; the t10k-* pair becomes the held-out set; truncated,
 * corrupt, oversized and mismatched input and missing files are refused
 * with a message naming the problem; and the installed Debian package,
 * when present, loads with its published shape and class balance.
 */
#include "tests/cmocka_compat.h"

#include "rumor/train.h"

#include "train/train_impl.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#define ROWS 3
#define COLS 2
#define DIM  (ROWS * COLS)

/* --- writing test files ------------------------------------------------ */

/* The IDX bytes of n images (pixel j of image i is a function of seed, i,
 * j) or of their labels. */
static size_t
s_idx_bytes(bool images, size_t n, unsigned seed, uint8_t *out)
{
    uint32_t head[4] = {images ? 0x803u : 0x801u, (uint32_t)n, ROWS, COLS};
    size_t words = images ? 4 : 2, len = 0;
    for (size_t w = 0; w < words; w++)
        for (int b = 3; b >= 0; b--)
            out[len++] = (uint8_t)(head[w] >> (8 * b));
    for (size_t i = 0; i < n; i++) {
        if (!images) {
            out[len++] = (uint8_t)((i + seed) % 10);
            continue;
        }
        for (size_t j = 0; j < DIM; j++)
            out[len++] = (uint8_t)((i * 37 + j * 11 + seed * 101) % 256);
    }
    return len;
}

static void
s_write_raw(const char *path, const uint8_t *data, size_t len)
{
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(data, 1, len, f), len);
    assert_int_equal(fclose(f), 0);
}

/* gzip with zlib's writer; append adds a second gzip member. */
static void
s_write_gz(const char *path, const uint8_t *data, size_t len, bool append)
{
    gzFile g = gzopen(path, append ? "ab" : "wb");
    assert_non_null(g);
    assert_int_equal(gzwrite(g, data, (unsigned)len), (int)len);
    assert_int_equal(gzclose(g), Z_OK);
}

static void
s_write(const char *path, const uint8_t *data, size_t len, bool gz)
{
    if (gz)
        s_write_gz(path, data, len, false);
    else
        s_write_raw(path, data, len);
}

/* Writes DIR/PREFIX-{images-idx3,labels-idx1}-ubyte[.gz] of n samples. */
static void
s_write_pair(const char *dir, const char *prefix, size_t n, bool gz)
{
    uint8_t *buf = malloc(16 + n * DIM);
    assert_non_null(buf);
    char path[512];
    const char *ext = gz ? ".gz" : "";
    unsigned seed = prefix[0] == 't' && prefix[1] == '1' ? 2 : 1;
    size_t len = s_idx_bytes(true, n, seed, buf);
    snprintf(path, sizeof path, "%s/%s-images-idx3-ubyte%s", dir, prefix, ext);
    s_write(path, buf, len, gz);
    len = s_idx_bytes(false, n, seed, buf);
    snprintf(path, sizeof path, "%s/%s-labels-idx1-ubyte%s", dir, prefix, ext);
    s_write(path, buf, len, gz);
    free(buf);
}

static void
s_tmpdir(char *dir, size_t cap)
{
    snprintf(dir, cap, "/tmp/rumor-idxgz-XXXXXX");
    assert_non_null(mkdtemp(dir));
}

static void
s_rmdir(const char *dir)
{
    DIR *d = opendir(dir);
    assert_non_null(d);
    char path[512];
    for (struct dirent *e = readdir(d); e != NULL; e = readdir(d)) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
            continue;
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        assert_int_equal(unlink(path), 0);
    }
    closedir(d);
    assert_int_equal(rmdir(dir), 0);
}

static uint8_t *
s_slurp(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    uint8_t *buf = malloc(1 << 20);
    assert_non_null(buf);
    *len = fread(buf, 1, 1 << 20, f);
    fclose(f);
    return buf;
}

/* Checks sample k of d against image i of the pair written with seed. */
static void
s_check_sample(const struct rumor_dataset *d, size_t k, size_t i, unsigned s)
{
    uint8_t ref[16 + 64 * DIM];
    assert_true(i < 64);
    s_idx_bytes(true, i + 1, s, ref);
    for (size_t j = 0; j < DIM; j++)
        assert_float_equal(d->x[k * DIM + j],
                           (float)ref[16 + i * DIM + j] / 255.0f,
                           0);
    assert_int_equal(d->y[k], (int)((i + s) % 10));
}

static bool
s_contains(const char *hay, const char *needle)
{
    return strstr(hay, needle) != NULL;
}

/* --- decoding ------------------------------------------------------------ */

static void
test_idx_gz__tiny_pair__decodes_what_was_written(void **state)
{
    (void)state;
    char dir[64], img[128], lab[128];
    s_tmpdir(dir, sizeof dir);
    s_write_pair(dir, "train", 12, true);
    snprintf(img, sizeof img, "%s/train-images-idx3-ubyte.gz", dir);
    snprintf(lab, sizeof lab, "%s/train-labels-idx1-ubyte.gz", dir);
    struct rumor_dataset *d = NULL;
    struct rumor_diag diag;
    memset(&diag, 0, sizeof diag);
    assert_int_equal(rumor_dataset_load_idx(img, lab, &d, &diag), RUMOR_OK);
    assert_int_equal(d->n, 12);
    assert_int_equal(d->dim, DIM);
    assert_int_equal(d->classes, 10); /* labels 1..9, then 0, 1, 2 */
    assert_int_equal(d->test_n, 0);
    for (size_t i = 0; i < 12; i++)
        s_check_sample(d, i, i, 1);
    rumor_dataset_destroy(&d);
    s_rmdir(dir);
}

static void
test_idx_gz__same_dataset_as_plain_and_multi_member(void **state)
{
    (void)state;
    char dir[64], path[4][128];
    s_tmpdir(dir, sizeof dir);
    s_write_pair(dir, "train", 9, true);
    s_write_pair(dir, "train", 9, false);
    const char *names[4] = {"train-images-idx3-ubyte.gz",
                            "train-labels-idx1-ubyte.gz",
                            "train-images-idx3-ubyte",
                            "train-labels-idx1-ubyte"};
    for (int k = 0; k < 4; k++)
        snprintf(path[k], sizeof path[k], "%s/%s", dir, names[k]);
    struct rumor_dataset *gz = NULL, *plain = NULL, *mixed = NULL;
    struct rumor_diag diag;
    assert_int_equal(rumor_dataset_load_idx(path[0], path[1], &gz, &diag),
                     RUMOR_OK);
    assert_int_equal(rumor_dataset_load_idx(path[2], path[3], &plain, &diag),
                     RUMOR_OK);
    assert_int_equal(rumor_dataset_load_idx(path[0], path[3], &mixed, &diag),
                     RUMOR_OK);
    assert_int_equal(gz->n, plain->n);
    assert_memory_equal(gz->x, plain->x, plain->n * DIM * sizeof *gz->x);
    assert_memory_equal(gz->y, plain->y, plain->n * sizeof *gz->y);
    assert_memory_equal(mixed->x, plain->x, plain->n * DIM * sizeof *gz->x);
    rumor_dataset_destroy(&gz);
    rumor_dataset_destroy(&mixed);
    /* The labels split over two gzip members (gzopen "ab" appends one):
     * read as their concatenation, as gzip -d does. */
    uint8_t lab[8 + 9];
    size_t len = s_idx_bytes(false, 9, 1, lab);
    s_write_gz(path[1], lab, 5, false);
    s_write_gz(path[1], lab + 5, len - 5, true);
    size_t glen = 0;
    uint8_t *g = s_slurp(path[1], &glen);
    assert_true(glen > 40); /* two headers and trailers */
    free(g);
    assert_int_equal(rumor_dataset_load_idx(path[2], path[1], &gz, &diag),
                     RUMOR_OK);
    assert_memory_equal(gz->y, plain->y, plain->n * sizeof *gz->y);
    rumor_dataset_destroy(&gz);
    rumor_dataset_destroy(&plain);
    s_rmdir(dir);
}

/* --- directories and the held-out set ---------------------------------- */

static void
test_idx_dir__t10k_pair__is_the_held_out_set(void **state)
{
    (void)state;
    char dir[64], spec[128];
    s_tmpdir(dir, sizeof dir);
    s_write_pair(dir, "train", 20, true);
    s_write_pair(dir, "t10k", 7, false); /* plain and .gz mixed */
    snprintf(spec, sizeof spec, "fashion-mnist:%s", dir);
    struct rumor_dataset *d = NULL, *train = NULL, *test = NULL;
    struct rumor_diag diag;
    memset(&diag, 0, sizeof diag);
    assert_int_equal(rumor_dataset_open(spec, 1, &d, &diag), RUMOR_OK);
    assert_string_equal(d->name, "fashion-mnist");
    assert_int_equal(d->n, 27);
    assert_int_equal(d->test_n, 7);
    /* The fraction and the seed do not matter: the cut is the files'. */
    assert_int_equal(rumor_dataset_split(d, 0.5, 99, &train, &test), RUMOR_OK);
    assert_int_equal(train->n, 20);
    assert_int_equal(test->n, 7);
    assert_int_equal(test->test_n, 0);
    for (size_t i = 0; i < 20; i++)
        s_check_sample(train, i, i, 1);
    for (size_t i = 0; i < 7; i++)
        s_check_sample(test, i, i, 2);
    rumor_dataset_destroy(&train);
    rumor_dataset_destroy(&test);
    /* The workload evaluates on exactly those 7 and shards the 20. */
    struct rumor_workload_opts o;
    rumor_workload_opts_default(&o);
    o.dataset = d;
    o.nodes = 4;
    o.test_fraction = 0.5;
    rumor_workload *w = NULL;
    assert_int_equal(rumor_workload_new(&o, &w, &diag), RUMOR_OK);
    assert_int_equal(rumor_workload_test_size(w), 7);
    assert_int_equal(rumor_workload_train_size(w), 5);
    s_check_sample(train_workload_heldout(w), 6, 6, 2);
    rumor_workload_destroy(&w);
    rumor_dataset_destroy(&d);
    s_rmdir(dir);
}

static void
test_idx_dir__train_only__split_by_fraction(void **state)
{
    (void)state;
    char dir[64], spec[128];
    s_tmpdir(dir, sizeof dir);
    s_write_pair(dir, "train", 20, false);
    snprintf(spec, sizeof spec, "mnist:%s", dir);
    struct rumor_dataset *d = NULL, *train = NULL, *test = NULL;
    struct rumor_diag diag;
    assert_int_equal(rumor_dataset_open(spec, 1, &d, &diag), RUMOR_OK);
    assert_string_equal(d->name, "mnist");
    assert_int_equal(d->n, 20);
    assert_int_equal(d->test_n, 0);
    assert_int_equal(rumor_dataset_split(d, 0.25, 3, &train, &test), RUMOR_OK);
    assert_int_equal(test->n, 5);
    assert_int_equal(train->n, 15);
    rumor_dataset_destroy(&train);
    rumor_dataset_destroy(&test);
    rumor_dataset_destroy(&d);
    s_rmdir(dir);
}

static void
test_fashion_mnist__debian_package__published_shape(void **state)
{
    (void)state;
    const char *dir = "/usr/share/datasets/fashion-mnist";
    char probe[256];
    snprintf(probe, sizeof probe, "%s/train-images-idx3-ubyte.gz", dir);
    if (access(probe, R_OK) != 0) {
        print_message("skipped: %s not found (Debian package "
                      "dataset-fashion-mnist not installed)\n",
                      probe);
        skip();
    }
    struct rumor_dataset *d = NULL;
    struct rumor_diag diag;
    memset(&diag, 0, sizeof diag);
    rumor_err rc = rumor_dataset_open("fashion-mnist", 1, &d, &diag);
    if (rc != RUMOR_OK)
        fail_msg("%s: %s", diag.file, diag.msg);
    /* Xiao, Rasul & Vollgraf 2017: 60000 + 10000 images of 28 x 28, ten
     * classes of exactly 6000 training and 1000 test images each. */
    assert_int_equal(d->n, 70000);
    assert_int_equal(d->test_n, 10000);
    assert_int_equal(d->dim, 784);
    assert_int_equal(d->classes, 10);
    size_t hist[2][10] = {{0}};
    for (size_t i = 0; i < d->n; i++)
        hist[i >= 60000][d->y[i]]++;
    for (int c = 0; c < 10; c++) {
        assert_int_equal(hist[0][c], 6000);
        assert_int_equal(hist[1][c], 1000);
    }
    /* The first labels of each file (read with zcat | od): 9 0 0 3 and
     * 9 2 1 1. */
    static const int32_t head[2][4] = {{9, 0, 0, 3}, {9, 2, 1, 1}};
    for (int k = 0; k < 4; k++) {
        assert_int_equal(d->y[k], head[0][k]);
        assert_int_equal(d->y[60000 + k], head[1][k]);
    }
    for (size_t i = 0; i < d->n * d->dim; i++)
        if (!(d->x[i] >= 0 && d->x[i] <= 1))
            fail_msg("pixel %zu is %g", i, d->x[i]);
    rumor_dataset_destroy(&d);
}

/* --- refusals ------------------------------------------------------------ */

/* Loads the pair (img, lab): it must fail with want and a message
 * containing why. */
static void
s_refused(const char *img,
          const char *lab,
          rumor_err want,
          const char *why,
          const char *what)
{
    struct rumor_dataset *d = NULL;
    struct rumor_diag diag;
    memset(&diag, 0, sizeof diag);
    rumor_err rc = rumor_dataset_load_idx(img, lab, &d, &diag);
    if (rc != want || !s_contains(diag.msg, why))
        fail_msg("%s: %s '%s: %s'",
                 what,
                 rumor_errname(rc),
                 diag.file,
                 diag.msg);
    assert_null(d);
}

static void
test_idx_gz__bad_input__refused_with_the_reason(void **state)
{
    (void)state;
    char dir[64], img[128], lab[128], bad[128];
    s_tmpdir(dir, sizeof dir);
    s_write_pair(dir, "train", 30, true);
    snprintf(img, sizeof img, "%s/train-images-idx3-ubyte.gz", dir);
    snprintf(lab, sizeof lab, "%s/train-labels-idx1-ubyte.gz", dir);
    snprintf(bad, sizeof bad, "%s/bad.gz", dir);
    size_t len = 0;
    uint8_t *gz = s_slurp(img, &len);
    /* Truncated: every cut inside the stream (no trailer: cannot end). */
    for (size_t cut = 3; cut < len; cut += 7) {
        s_write_raw(bad, gz, cut);
        s_refused(bad, lab, RUMOR_EPROTO, "gzip data", "truncated");
    }
    s_write_raw(bad, gz, len - 1);
    s_refused(bad, lab, RUMOR_EPROTO, "truncated", "one byte short");
    /* A flipped bit in the CRC-32 of the trailer: corrupt. */
    gz[len - 6] ^= 0x10;
    s_write_raw(bad, gz, len);
    s_refused(bad, lab, RUMOR_EPROTO, "corrupt", "bad crc");
    gz[len - 6] ^= 0x10;
    /* Trailing bytes that are not another gzip member. */
    uint8_t *longer = malloc(len + 4);
    assert_non_null(longer);
    memcpy(longer, gz, len);
    memcpy(longer + len, "junk", 4);
    s_write_raw(bad, longer, len + 4);
    s_refused(bad, lab, RUMOR_EPROTO, "4 bytes that are not gzip", "junk");
    free(longer);
    free(gz);
    /* Labels where images belong: the IDX magic inside the gzip. */
    s_refused(lab, lab, RUMOR_EPROTO, "magic 0x00000801", "swapped files");
    /* 30 images, 29 labels. */
    uint8_t buf[16 + 30 * DIM];
    size_t n = s_idx_bytes(false, 29, 1, buf);
    s_write(bad, buf, n, true);
    s_refused(img, bad, RUMOR_EPROTO, "29 labels for 30 images", "counts");
    /* Pixel bytes cut short inside a valid gzip stream. */
    n = s_idx_bytes(true, 30, 1, buf);
    s_write(bad, buf, n - 1, true);
    s_refused(bad, lab, RUMOR_EPROTO, "header says", "short pixels");
    /* Labels that inflate past the largest valid labels file (8 bytes +
     * 4 Mi labels): refused before all of it is in memory. */
    size_t big = 8 + (size_t)RUMOR_DATASET_MAX_SAMPLES + 4096;
    uint8_t *zeros = calloc(big, 1);
    assert_non_null(zeros);
    s_write(bad, zeros, big, true);
    free(zeros);
    s_refused(img, bad, RUMOR_ETOOBIG, "inflates past", "bomb");
    s_rmdir(dir);
}

static void
test_idx_dir__missing_files__name_what_to_do(void **state)
{
    (void)state;
    char dir[64], spec[128], path[160];
    s_tmpdir(dir, sizeof dir);
    struct rumor_dataset *d = NULL;
    struct rumor_diag diag;
    struct {
        const char *spec_fmt;
        rumor_err rc;
        const char *why;
    } rows[] = {
        {"fashion-mnist:%s/none",
         RUMOR_ENOTFOUND,
         "install the Debian package dataset-fashion-mnist or pass "
         "fashion-mnist:DIR"},
        {"fashion-mnist:%s", RUMOR_ENOTFOUND, "no train-images-idx3-ubyte"},
        {"mnist:%s/none", RUMOR_EINVAL, "IMAGES,LABELS or a directory"},
    };
    for (size_t r = 0; r < sizeof rows / sizeof rows[0]; r++) {
        snprintf(spec, sizeof spec, rows[r].spec_fmt, dir);
        memset(&diag, 0, sizeof diag);
        rumor_err rc = rumor_dataset_open(spec, 1, &d, &diag);
        if (rc != rows[r].rc || !s_contains(diag.msg, rows[r].why))
            fail_msg("%s: %s '%s'", spec, rumor_errname(rc), diag.msg);
        assert_null(d);
    }
    snprintf(spec, sizeof spec, "fashion-mnist:%s", dir);
    /* Images without labels, then a t10k pair missing its labels. */
    s_write_pair(dir, "train", 4, true);
    snprintf(path, sizeof path, "%s/train-labels-idx1-ubyte.gz", dir);
    assert_int_equal(unlink(path), 0);
    assert_int_equal(rumor_dataset_open(spec, 1, &d, &diag), RUMOR_ENOTFOUND);
    assert_true(s_contains(diag.msg, "train-labels-idx1-ubyte[.gz] is not"));
    s_write_pair(dir, "train", 4, true);
    s_write_pair(dir, "t10k", 2, true);
    snprintf(path, sizeof path, "%s/t10k-labels-idx1-ubyte.gz", dir);
    assert_int_equal(unlink(path), 0);
    assert_int_equal(rumor_dataset_open(spec, 1, &d, &diag), RUMOR_ENOTFOUND);
    assert_true(s_contains(diag.msg, "t10k-labels-idx1-ubyte[.gz] is not"));
    assert_null(d);
    /* A t10k set of other image sizes than the training set. */
    uint8_t buf[16 + 2 * 4 * 4] = {0};
    size_t n = s_idx_bytes(false, 2, 2, buf);
    snprintf(path, sizeof path, "%s/t10k-labels-idx1-ubyte.gz", dir);
    s_write(path, buf, n, true);
    n = s_idx_bytes(true, 2, 2, buf);
    buf[11] = 4; /* 4 x 2 */
    snprintf(path, sizeof path, "%s/t10k-images-idx3-ubyte.gz", dir);
    s_write(path, buf, 16 + 2 * 8, true);
    assert_int_equal(rumor_dataset_open(spec, 1, &d, &diag), RUMOR_EPROTO);
    assert_true(s_contains(diag.msg, "t10k images have 8 pixels"));
    assert_null(d);
    s_rmdir(dir);
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_idx_gz__tiny_pair__decodes_what_was_written),
        cmocka_unit_test(test_idx_gz__same_dataset_as_plain_and_multi_member),
        cmocka_unit_test(test_idx_dir__t10k_pair__is_the_held_out_set),
        cmocka_unit_test(test_idx_dir__train_only__split_by_fraction),
        cmocka_unit_test(test_fashion_mnist__debian_package__published_shape),
        cmocka_unit_test(test_idx_gz__bad_input__refused_with_the_reason),
        cmocka_unit_test(test_idx_dir__missing_files__name_what_to_do),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
