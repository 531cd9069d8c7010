/*
 * train/dataset_io.c: loaders for the dataset files users give us: MNIST
 * IDX pairs, CIFAR-10 binary batches and CSV (label first, then features).
 *
 * These read untrusted bytes, so they follow the decoder rules (R8.2,
 * R8.3, R5.5): each parser is a pure function of a byte range, checks
 * every count against RUMOR_DATASET_MAX_* and against the bytes actually
 * left before it allocates, never asserts on content, and reports
 * RUMOR_EPROTO with a diag naming the file and the problem (file:line:col
 * for CSV). tests/fuzz/fuzz_dataset.c drives all three from memory.
 *
 * Formats: IDX (LeCun et al., "THE MNIST DATABASE", yann.lecun.com/exdb/
 * mnist): big-endian magic 0x0000 0x08 ndim, then ndim big-endian u32
 * sizes, then the bytes. CIFAR-10 binary version (Krizhevsky 2009, "Binary
 * version" on www.cs.toronto.edu/~kriz/cifar.html): 10000 records of
 * 1 + 3072 bytes per batch file; we accept any whole number of records.
 * CSV is parsed in two passes (count, then fill) so the allocation is
 * sized by what was counted and checked, never by a claim in the file.
 * Numbers go through strtol/strtof on a bounded, NUL-terminated copy of
 * each field because the input itself is not NUL-terminated.
 *
 * IDX files may be gzip-compressed, as MNIST and Fashion-MNIST are
 * published and as Debian's dataset-fashion-mnist installs them. A file
 * is gzip when its first two bytes are 1f 8b (RFC 1952), whatever its
 * name. It is inflated from memory with zlib's inflate() rather than read
 * with gzread(), so rumor_dataset_parse_idx stays a pure function of
 * bytes and the fuzz harness covers decompression too; the output is
 * capped by the largest valid IDX file, so a small file that inflates to
 * gigabytes is refused early. A directory of the published file names
 * (fashion-mnist:DIR, mnist:DIR) gives the training pair followed by the
 * t10k pair, the official test set, which rumor_dataset_split then keeps
 * as the held-out set (test_n) instead of drawing one.
 */
#include "rumor/train.h"

#include <assert.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#define ZLIB_CONST /* next_in points at const input */
#include <zlib.h>

#define IDX_IMAGES_MAGIC 0x00000803u /* ubyte, 3 dimensions */
#define IDX_LABELS_MAGIC 0x00000801u /* ubyte, 1 dimension */
#define CIFAR_PIXELS     3072u       /* 3 x 32 x 32 */
#define CIFAR_RECORD     (1u + CIFAR_PIXELS)
#define CIFAR_CLASSES    10u
/* Where Debian's dataset-fashion-mnist package puts the four files. */
#define FASHION_MNIST_DIR "/usr/share/datasets/fashion-mnist"
#define FASHION_MNIST_HINT                                      \
    "install the Debian package dataset-fashion-mnist or pass " \
    "fashion-mnist:DIR"
#define GZIP_MAGIC0 0x1fu
#define GZIP_MAGIC1 0x8bu
#define GZIP_CHUNK  (1u << 20) /* inflate output per call */

/* --- helpers ------------------------------------------------------------- */

static uint32_t
s_be32(const uint8_t *p)
{
    return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) |
           ((uint32_t)p[2] << 8) | (uint32_t)p[3];
}

static rumor_err
s_read_file(const char *path, rumor_buf *buf, struct rumor_diag *diag)
{
    rumor_buf_init(buf, (size_t)RUMOR_DATASET_MAX_FILE_BYTES);
    rumor_err rc = rumor_buf_read_file(buf, path);
    if (rc == RUMOR_ETOOBIG)
        rumor_diag_set(diag,
                       path,
                       0,
                       0,
                       "file larger than %llu bytes",
                       (unsigned long long)RUMOR_DATASET_MAX_FILE_BYTES);
    else if (rc == RUMOR_EIO || rc == RUMOR_ENOTFOUND)
        (void)rumor_diag_errno(diag, path, "cannot read");
    else if (rc != RUMOR_OK)
        rumor_diag_set(diag,
                       path,
                       0,
                       0,
                       "cannot read file: %s",
                       rumor_strerror(rc));
    return rc;
}

static void
s_set_name(struct rumor_dataset *d, const char *name)
{
    /* Keep the last path component: it fits and says enough. */
    const char *slash = strrchr(name, '/');
    snprintf(d->name, sizeof d->name, "%s", slash ? slash + 1 : name);
}

/* --- gzip ----------------------------------------------------------------- */

static bool
s_is_gzip(const uint8_t *data, size_t len)
{
    return data != NULL && len >= 2 && data[0] == GZIP_MAGIC0 &&
           data[1] == GZIP_MAGIC1;
}

/* Inflates gzip data (one member or several concatenated, as gzip(1)
 * writes and reads them) into out, whose cap bounds the output: a small
 * file that inflates past what any valid input could hold is refused
 * before it is all in memory. zlib takes at most UINT_MAX input bytes per
 * call, so the input is fed in slices. */
static rumor_err
s_gunzip(const uint8_t *in,
         size_t len,
         const char *name,
         rumor_buf *out,
         struct rumor_diag *diag)
{
    z_stream z;
    memset(&z, 0, sizeof z);
    if (inflateInit2(&z, 15 + 16) != Z_OK) /* 16: gzip wrapper only */
        return RUMOR_ENOMEM;
    rumor_err rc = RUMOR_OK;
    size_t fed = 0;
    for (;;) {
        if (z.avail_in == 0 && fed < len) {
            size_t slice = len - fed < UINT_MAX ? len - fed : UINT_MAX;
            z.next_in = in + fed;
            z.avail_in = (uInt)slice;
            fed += slice;
        }
        size_t want =
            out->cap - out->len < GZIP_CHUNK ? out->cap - out->len : GZIP_CHUNK;
        if (want == 0) {
            rumor_diag_set(diag,
                           name,
                           0,
                           0,
                           "gzip data inflates past %zu bytes, more than "
                           "the caps allow",
                           out->cap);
            rc = RUMOR_ETOOBIG;
            break;
        }
        rc = rumor_buf_reserve(out, want);
        if (rc != RUMOR_OK)
            break;
        size_t room = out->alloc - out->len;
        room = room < UINT_MAX ? room : UINT_MAX;
        z.next_out = out->data + out->len;
        z.avail_out = (uInt)room;
        int zr = inflate(&z, Z_NO_FLUSH);
        out->len += room - z.avail_out;
        if (zr == Z_STREAM_END) {
            size_t at = fed - z.avail_in;
            if (at == len)
                break;
            if (!s_is_gzip(in + at, len - at)) {
                rumor_diag_set(diag,
                               name,
                               0,
                               0,
                               "gzip data followed by %zu bytes that are "
                               "not gzip",
                               len - at);
                rc = RUMOR_EPROTO;
                break;
            }
            inflateReset(&z); /* another member follows */
            continue;
        }
        if (zr == Z_OK)
            continue;
        if (zr == Z_BUF_ERROR && z.avail_in == 0 && fed == len) {
            rumor_diag_set(diag,
                           name,
                           0,
                           0,
                           "gzip data truncated: the stream ends early "
                           "(%zu compressed bytes, %zu inflated)",
                           len,
                           out->len);
            rc = RUMOR_EPROTO;
            break;
        }
        if (zr == Z_MEM_ERROR) {
            rc = RUMOR_ENOMEM;
            break;
        }
        rumor_diag_set(diag,
                       name,
                       0,
                       0,
                       "gzip data corrupt at compressed byte %zu: %s",
                       fed - z.avail_in,
                       z.msg != NULL ? z.msg : "inflate failed");
        rc = RUMOR_EPROTO;
        break;
    }
    inflateEnd(&z);
    return rc;
}

/* --- IDX ------------------------------------------------------------------ */

/* Parses an uncompressed IDX pair (the names are already defaulted). */
static rumor_err
s_parse_idx_raw(const uint8_t *images,
                size_t images_len,
                const char *images_name,
                const uint8_t *labels,
                size_t labels_len,
                const char *labels_name,
                struct rumor_dataset **out,
                struct rumor_diag *diag)
{
    if (images == NULL || images_len < 16) {
        rumor_diag_set(diag,
                       images_name,
                       0,
                       0,
                       "IDX images header truncated (%zu bytes, need 16)",
                       images_len);
        return RUMOR_EPROTO;
    }
    if (labels == NULL || labels_len < 8) {
        rumor_diag_set(diag,
                       labels_name,
                       0,
                       0,
                       "IDX labels header truncated (%zu bytes, need 8)",
                       labels_len);
        return RUMOR_EPROTO;
    }
    uint32_t magic = s_be32(images);
    if (magic != IDX_IMAGES_MAGIC) {
        rumor_diag_set(diag,
                       images_name,
                       0,
                       0,
                       "not IDX ubyte images: magic 0x%08x, want 0x%08x",
                       magic,
                       IDX_IMAGES_MAGIC);
        return RUMOR_EPROTO;
    }
    magic = s_be32(labels);
    if (magic != IDX_LABELS_MAGIC) {
        rumor_diag_set(diag,
                       labels_name,
                       0,
                       0,
                       "not IDX ubyte labels: magic 0x%08x, want 0x%08x",
                       magic,
                       IDX_LABELS_MAGIC);
        return RUMOR_EPROTO;
    }
    uint64_t n = s_be32(images + 4);
    uint64_t rows = s_be32(images + 8);
    uint64_t cols = s_be32(images + 12);
    uint64_t n_labels = s_be32(labels + 4);
    if (n == 0 || rows == 0 || cols == 0) {
        rumor_diag_set(diag,
                       images_name,
                       0,
                       0,
                       "IDX images has an empty dimension (%llu x %llu x "
                       "%llu)",
                       (unsigned long long)n,
                       (unsigned long long)rows,
                       (unsigned long long)cols);
        return RUMOR_EPROTO;
    }
    if (n > RUMOR_DATASET_MAX_SAMPLES ||
        rows * cols > RUMOR_DATASET_MAX_FEATURES ||
        n * rows * cols > RUMOR_DATASET_MAX_VALUES) {
        rumor_diag_set(diag,
                       images_name,
                       0,
                       0,
                       "IDX images too large: %llu x %llu x %llu (caps: %u "
                       "samples, %u features)",
                       (unsigned long long)n,
                       (unsigned long long)rows,
                       (unsigned long long)cols,
                       RUMOR_DATASET_MAX_SAMPLES,
                       RUMOR_DATASET_MAX_FEATURES);
        return RUMOR_ETOOBIG;
    }
    if (images_len - 16 != n * rows * cols) {
        rumor_diag_set(diag,
                       images_name,
                       0,
                       0,
                       "IDX images: %zu pixel bytes, header says %llu",
                       images_len - 16,
                       (unsigned long long)(n * rows * cols));
        return RUMOR_EPROTO;
    }
    if (n_labels != n) {
        rumor_diag_set(diag,
                       labels_name,
                       0,
                       0,
                       "IDX labels: %llu labels for %llu images",
                       (unsigned long long)n_labels,
                       (unsigned long long)n);
        return RUMOR_EPROTO;
    }
    if (labels_len - 8 != n) {
        rumor_diag_set(diag,
                       labels_name,
                       0,
                       0,
                       "IDX labels: %zu label bytes, header says %llu",
                       labels_len - 8,
                       (unsigned long long)n);
        return RUMOR_EPROTO;
    }
    size_t classes = 0;
    for (size_t i = 0; i < n; i++)
        if ((size_t)labels[8 + i] + 1 > classes)
            classes = (size_t)labels[8 + i] + 1;
    struct rumor_dataset *d = NULL;
    rumor_err rc =
        rumor_dataset_new((size_t)n, (size_t)(rows * cols), classes, 0, &d);
    if (rc != RUMOR_OK)
        return rc;
    for (size_t i = 0; i < n * rows * cols; i++)
        d->x[i] = (float)images[16 + i] / 255.0f;
    for (size_t i = 0; i < n; i++)
        d->y[i] = labels[8 + i];
    s_set_name(d, images_name);
    *out = d;
    return RUMOR_OK;
}

/* Points *bytes, *len at the inflated copy in buf when they hold gzip
 * data; leaves them alone otherwise. */
static rumor_err
s_maybe_gunzip(const uint8_t **bytes,
               size_t *len,
               uint64_t cap,
               const char *name,
               rumor_buf *buf,
               struct rumor_diag *diag)
{
    if (!s_is_gzip(*bytes, *len))
        return RUMOR_OK;
    rumor_buf_init(buf, (size_t)cap);
    rumor_err rc = s_gunzip(*bytes, *len, name, buf, diag);
    if (rc == RUMOR_OK) {
        *bytes = buf->data;
        *len = buf->len;
    }
    return rc;
}

rumor_err
rumor_dataset_parse_idx(const uint8_t *images,
                        size_t images_len,
                        const char *images_name,
                        const uint8_t *labels,
                        size_t labels_len,
                        const char *labels_name,
                        struct rumor_dataset **out,
                        struct rumor_diag *diag)
{
    assert(out != NULL);
    *out = NULL;
    if (images_name == NULL)
        images_name = "images";
    if (labels_name == NULL)
        labels_name = "labels";
    /* The caps bound the largest valid file of each kind, so they bound
     * what gzip data may inflate to as well. */
    rumor_buf img, lab;
    rumor_buf_init(&img, 0);
    rumor_buf_init(&lab, 0);
    rumor_err rc = s_maybe_gunzip(&images,
                                  &images_len,
                                  16 + RUMOR_DATASET_MAX_VALUES,
                                  images_name,
                                  &img,
                                  diag);
    if (rc == RUMOR_OK)
        rc = s_maybe_gunzip(&labels,
                            &labels_len,
                            8 + (uint64_t)RUMOR_DATASET_MAX_SAMPLES,
                            labels_name,
                            &lab,
                            diag);
    if (rc == RUMOR_OK)
        rc = s_parse_idx_raw(images,
                             images_len,
                             images_name,
                             labels,
                             labels_len,
                             labels_name,
                             out,
                             diag);
    rumor_buf_free(&img);
    rumor_buf_free(&lab);
    return rc;
}

rumor_err
rumor_dataset_load_idx(const char *images_path,
                       const char *labels_path,
                       struct rumor_dataset **out,
                       struct rumor_diag *diag)
{
    assert(images_path != NULL);
    assert(labels_path != NULL);
    assert(out != NULL);
    *out = NULL;
    rumor_buf img, lab;
    rumor_buf_init(&lab, 0);
    rumor_err rc = s_read_file(images_path, &img, diag);
    if (rc == RUMOR_OK)
        rc = s_read_file(labels_path, &lab, diag);
    if (rc == RUMOR_OK)
        rc = rumor_dataset_parse_idx(img.data,
                                     img.len,
                                     images_path,
                                     lab.data,
                                     lab.len,
                                     labels_path,
                                     out,
                                     diag);
    rumor_buf_free(&img);
    rumor_buf_free(&lab);
    return rc;
}

/* --- CIFAR-10 ------------------------------------------------------------ */

rumor_err
rumor_dataset_parse_cifar10(const uint8_t *data,
                            size_t len,
                            const char *name,
                            struct rumor_dataset **out,
                            struct rumor_diag *diag)
{
    assert(out != NULL);
    *out = NULL;
    if (name == NULL)
        name = "cifar10";
    if (data == NULL || len == 0 || len % CIFAR_RECORD != 0) {
        rumor_diag_set(diag,
                       name,
                       0,
                       0,
                       "CIFAR-10 batch: %zu bytes is not a whole number of "
                       "%u-byte records",
                       len,
                       CIFAR_RECORD);
        return RUMOR_EPROTO;
    }
    size_t n = len / CIFAR_RECORD;
    if (n > RUMOR_DATASET_MAX_SAMPLES ||
        (uint64_t)n * CIFAR_PIXELS > RUMOR_DATASET_MAX_VALUES) {
        rumor_diag_set(diag,
                       name,
                       0,
                       0,
                       "CIFAR-10 batch: %zu records exceed the cap",
                       n);
        return RUMOR_ETOOBIG;
    }
    for (size_t i = 0; i < n; i++) {
        uint8_t label = data[i * CIFAR_RECORD];
        if (label >= CIFAR_CLASSES) {
            rumor_diag_set(diag,
                           name,
                           0,
                           0,
                           "CIFAR-10 record %zu (byte offset %zu): label %u "
                           "is not in 0..9",
                           i,
                           i * CIFAR_RECORD,
                           label);
            return RUMOR_EPROTO;
        }
    }
    struct rumor_dataset *d = NULL;
    rumor_err rc = rumor_dataset_new(n, CIFAR_PIXELS, CIFAR_CLASSES, 0, &d);
    if (rc != RUMOR_OK)
        return rc;
    for (size_t i = 0; i < n; i++) {
        const uint8_t *rec = data + i * CIFAR_RECORD;
        d->y[i] = rec[0];
        for (size_t j = 0; j < CIFAR_PIXELS; j++)
            d->x[i * CIFAR_PIXELS + j] = (float)rec[1 + j] / 255.0f;
    }
    s_set_name(d, name);
    *out = d;
    return RUMOR_OK;
}

rumor_err
rumor_dataset_load_cifar10(const char *path,
                           struct rumor_dataset **out,
                           struct rumor_diag *diag)
{
    assert(path != NULL);
    assert(out != NULL);
    *out = NULL;
    rumor_buf b;
    rumor_err rc = s_read_file(path, &b, diag);
    if (rc == RUMOR_OK)
        rc = rumor_dataset_parse_cifar10(b.data, b.len, path, out, diag);
    rumor_buf_free(&b);
    return rc;
}

/* --- CSV ------------------------------------------------------------------ */

/* One line of the input: [begin, end) without the line break. */
struct csv_cursor {
    const uint8_t *data;
    size_t len;
    size_t pos;  /* start of the next line */
    size_t line; /* 1-based number of the line last returned */
};

static bool
s_next_line(struct csv_cursor *c, size_t *begin, size_t *end)
{
    if (c->pos >= c->len)
        return false;
    size_t b = c->pos;
    size_t e = b;
    while (e < c->len && c->data[e] != '\n')
        e++;
    c->pos = e < c->len ? e + 1 : e;
    if (e > b && c->data[e - 1] == '\r')
        e--;
    c->line++;
    *begin = b;
    *end = e;
    return true;
}

static bool
s_is_blank(const uint8_t *p, size_t b, size_t e)
{
    for (size_t i = b; i < e; i++)
        if (p[i] != ' ' && p[i] != '\t')
            return false;
    return true;
}

/* Copies field [b, e) trimmed of spaces into out (NUL-terminated); false
 * when it is empty or longer than the field cap. */
static bool
s_field(const uint8_t *p, size_t b, size_t e, char *out, size_t cap)
{
    while (b < e && (p[b] == ' ' || p[b] == '\t'))
        b++;
    while (e > b && (p[e - 1] == ' ' || p[e - 1] == '\t'))
        e--;
    if (e == b || e - b >= cap)
        return false;
    memcpy(out, p + b, e - b);
    out[e - b] = '\0';
    return true;
}

static bool
s_parse_label(const char *s, long *out)
{
    char *end = NULL;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno != 0 || end == s || *end != '\0')
        return false;
    *out = v;
    return true;
}

static bool
s_parse_float(const char *s, float *out)
{
    char *end = NULL;
    errno = 0;
    float v = strtof(s, &end);
    if (errno != 0 || end == s || *end != '\0' || !isfinite(v))
        return false;
    *out = v;
    return true;
}

static size_t
s_count_fields(const uint8_t *p, size_t b, size_t e)
{
    size_t n = 1;
    for (size_t i = b; i < e; i++)
        n += p[i] == ',';
    return n;
}

/* Is this line to be skipped (blank or a '#' comment)? */
static bool
s_skip_line(const uint8_t *p, size_t b, size_t e)
{
    if (s_is_blank(p, b, e))
        return true;
    while (b < e && (p[b] == ' ' || p[b] == '\t'))
        b++;
    return p[b] == '#';
}

rumor_err
rumor_dataset_parse_csv(const uint8_t *data,
                        size_t len,
                        const char *name,
                        struct rumor_dataset **out,
                        struct rumor_diag *diag)
{
    assert(out != NULL);
    *out = NULL;
    if (name == NULL)
        name = "csv";
    if (data == NULL)
        len = 0;
    char field[RUMOR_DATASET_CSV_FIELD_BYTES];
    /* Pass 1: rows, columns, header. */
    struct csv_cursor c = {data, len, 0, 0};
    size_t b = 0, e = 0, rows = 0, cols = 0, header_line = 0;
    bool first = true;
    while (s_next_line(&c, &b, &e)) {
        if (s_skip_line(data, b, e))
            continue;
        size_t nf = s_count_fields(data, b, e);
        if (first) {
            first = false;
            size_t comma = b;
            while (comma < e && data[comma] != ',')
                comma++;
            long label = 0;
            bool numeric = s_field(data, b, comma, field, sizeof field) &&
                           s_parse_label(field, &label);
            cols = nf;
            if (!numeric) {
                header_line = c.line;
                continue;
            }
        }
        if (nf != cols) {
            rumor_diag_set(diag,
                           name,
                           (int)c.line,
                           1,
                           "%zu fields, the first row has %zu",
                           nf,
                           cols);
            return RUMOR_EPROTO;
        }
        if (rows >= RUMOR_DATASET_MAX_SAMPLES) {
            rumor_diag_set(diag,
                           name,
                           (int)c.line,
                           1,
                           "more than %u samples",
                           RUMOR_DATASET_MAX_SAMPLES);
            return RUMOR_ETOOBIG;
        }
        rows++;
    }
    if (rows == 0) {
        rumor_diag_set(diag, name, 0, 0, "no data rows");
        return RUMOR_EPROTO;
    }
    if (cols < 2) {
        rumor_diag_set(diag,
                       name,
                       header_line ? (int)header_line + 1 : 1,
                       1,
                       "a row needs a label and at least one feature");
        return RUMOR_EPROTO;
    }
    if (cols - 1 > RUMOR_DATASET_MAX_FEATURES ||
        (uint64_t)rows * (cols - 1) > RUMOR_DATASET_MAX_VALUES) {
        rumor_diag_set(diag,
                       name,
                       0,
                       0,
                       "%zu rows of %zu features exceed the caps",
                       rows,
                       cols - 1);
        return RUMOR_ETOOBIG;
    }
    /* Pass 2: parse into arrays sized by pass 1 (classes found later). */
    size_t dim = cols - 1;
    float *x = malloc(rows * dim * sizeof *x);
    int32_t *y = malloc(rows * sizeof *y);
    rumor_err rc = RUMOR_OK;
    if (x == NULL || y == NULL) {
        rc = RUMOR_ENOMEM;
        goto done;
    }
    c = (struct csv_cursor){data, len, 0, 0};
    size_t row = 0;
    long max_label = -1;
    while (s_next_line(&c, &b, &e)) {
        if (s_skip_line(data, b, e) || c.line == header_line)
            continue;
        size_t fb = b;
        for (size_t k = 0; k < cols; k++) {
            size_t fe = fb;
            while (fe < e && data[fe] != ',')
                fe++;
            int col = (int)(fb - b) + 1;
            if (!s_field(data, fb, fe, field, sizeof field)) {
                rumor_diag_set(diag,
                               name,
                               (int)c.line,
                               col,
                               "field %zu is empty or longer than %d "
                               "characters",
                               k + 1,
                               RUMOR_DATASET_CSV_FIELD_BYTES - 1);
                rc = RUMOR_EPROTO;
                goto done;
            }
            if (k == 0) {
                long label = 0;
                if (!s_parse_label(field, &label) || label < 0 ||
                    label >= (long)RUMOR_DATASET_MAX_CLASSES) {
                    rumor_diag_set(diag,
                                   name,
                                   (int)c.line,
                                   col,
                                   "label '%s' is not an integer in 0..%u",
                                   field,
                                   RUMOR_DATASET_MAX_CLASSES - 1);
                    rc = RUMOR_EPROTO;
                    goto done;
                }
                y[row] = (int32_t)label;
                if (label > max_label)
                    max_label = label;
            } else if (!s_parse_float(field, &x[row * dim + k - 1])) {
                rumor_diag_set(diag,
                               name,
                               (int)c.line,
                               col,
                               "feature '%s' is not a finite number",
                               field);
                rc = RUMOR_EPROTO;
                goto done;
            }
            fb = fe + 1;
        }
        row++;
    }
    if (RUMOR_NEVER(row != rows)) {
        rc = RUMOR_EPROTO;
        goto done;
    }
    struct rumor_dataset *d = calloc(1, sizeof *d);
    if (d == NULL) {
        rc = RUMOR_ENOMEM;
        goto done;
    }
    d->n = rows;
    d->dim = dim;
    d->classes = (size_t)max_label + 1;
    d->x = x;
    d->y = y;
    x = NULL;
    y = NULL;
    s_set_name(d, name);
    *out = d;
done:
    free(x);
    free(y);
    return rc;
}

rumor_err
rumor_dataset_load_csv(const char *path,
                       struct rumor_dataset **out,
                       struct rumor_diag *diag)
{
    assert(path != NULL);
    assert(out != NULL);
    *out = NULL;
    rumor_buf b;
    rumor_err rc = s_read_file(path, &b, diag);
    if (rc == RUMOR_OK)
        rc = rumor_dataset_parse_csv(b.data, b.len, path, out, diag);
    rumor_buf_free(&b);
    return rc;
}

/* --- specs ---------------------------------------------------------------- */

/* Joins b's samples after a's into a new dataset (same dim, labels). */
static rumor_err
s_concat(const struct rumor_dataset *a,
         const struct rumor_dataset *b,
         struct rumor_dataset **out)
{
    *out = NULL;
    if (a->dim != b->dim || a->y == NULL || b->y == NULL)
        return RUMOR_EINVAL;
    if (a->n + b->n > RUMOR_DATASET_MAX_SAMPLES)
        return RUMOR_ETOOBIG;
    size_t classes = a->classes > b->classes ? a->classes : b->classes;
    struct rumor_dataset *d = NULL;
    rumor_err rc = rumor_dataset_new(a->n + b->n, a->dim, classes, 0, &d);
    if (rc != RUMOR_OK)
        return rc;
    memcpy(d->x, a->x, a->n * a->dim * sizeof *d->x);
    memcpy(d->x + a->n * a->dim, b->x, b->n * b->dim * sizeof *d->x);
    memcpy(d->y, a->y, a->n * sizeof *d->y);
    memcpy(d->y + a->n, b->y, b->n * sizeof *d->y);
    snprintf(d->name, sizeof d->name, "%s", a->name);
    *out = d;
    return RUMOR_OK;
}

/* Returns the next sep-separated token of *cursor (cut in place) and moves
 * the cursor past it; NULL when none is left. */
static char *
s_next_token(char **cursor, char sep)
{
    char *tok = *cursor;
    if (tok == NULL)
        return NULL;
    char *at = strchr(tok, sep);
    if (at != NULL) {
        *at = '\0';
        *cursor = at + 1;
    } else {
        *cursor = NULL;
    }
    return tok;
}

/* Parses "key=value" pairs of a synthetic spec into o. */
static rumor_err
s_synth_params(char *text, struct rumor_synth_opts *o, struct rumor_diag *d)
{
    char *cursor = text;
    for (char *kv = s_next_token(&cursor, ','); kv != NULL;
         kv = s_next_token(&cursor, ',')) {
        char *eq = strchr(kv, '=');
        if (eq == NULL) {
            rumor_diag_set(d, "", 0, 0, "synthetic: '%s' is not key=value", kv);
            return RUMOR_EINVAL;
        }
        *eq = '\0';
        const char *val = eq + 1;
        char *end = NULL;
        errno = 0;
        if (strcmp(kv, "separation") == 0) {
            o->separation = strtod(val, &end);
        } else {
            unsigned long long v = strtoull(val, &end, 10);
            if (strcmp(kv, "n") == 0)
                o->n = (size_t)v;
            else if (strcmp(kv, "dim") == 0)
                o->dim = (size_t)v;
            else if (strcmp(kv, "classes") == 0)
                o->classes = (size_t)v;
            else {
                rumor_diag_set(d,
                               "",
                               0,
                               0,
                               "synthetic: unknown parameter '%s' (n, dim, "
                               "classes, separation)",
                               kv);
                return RUMOR_EINVAL;
            }
        }
        if (errno != 0 || end == val || *end != '\0') {
            rumor_diag_set(d,
                           "",
                           0,
                           0,
                           "synthetic: bad value '%s' for %s",
                           val,
                           kv);
            return RUMOR_EINVAL;
        }
    }
    return RUMOR_OK;
}

/* --- IDX directories (MNIST, Fashion-MNIST) ---------------------------- */

/* Sets path to DIR/NAME or DIR/NAME.gz, whichever is a file (the plain
 * one first: nothing to inflate); false when neither is. */
static bool
s_find_idx_file(const char *dir, const char *name, char *path, size_t cap)
{
    static const char *const suffix[] = {"", ".gz"};
    for (size_t i = 0; i < sizeof suffix / sizeof suffix[0]; i++) {
        int n = snprintf(path, cap, "%s/%s%s", dir, name, suffix[i]);
        struct stat st;
        if (n > 0 && (size_t)n < cap && stat(path, &st) == 0 &&
            S_ISREG(st.st_mode))
            return true;
    }
    return false;
}

/* Loads DIR's PREFIX-images-idx3-ubyte and PREFIX-labels-idx1-ubyte (each
 * plain or .gz). *absent tells that neither file is there (then the
 * result is RUMOR_ENOTFOUND and diag is left for the caller). */
static rumor_err
s_load_idx_pair(const char *dir,
                const char *prefix,
                struct rumor_dataset **out,
                bool *absent,
                struct rumor_diag *diag)
{
    char img_name[32], lab_name[32];
    snprintf(img_name, sizeof img_name, "%s-images-idx3-ubyte", prefix);
    snprintf(lab_name, sizeof lab_name, "%s-labels-idx1-ubyte", prefix);
    char img[RUMOR_DATASET_SPEC_MAX + 64], lab[RUMOR_DATASET_SPEC_MAX + 64];
    bool has_img = s_find_idx_file(dir, img_name, img, sizeof img);
    bool has_lab = s_find_idx_file(dir, lab_name, lab, sizeof lab);
    *absent = !has_img && !has_lab;
    if (*absent)
        return RUMOR_ENOTFOUND;
    if (!has_img || !has_lab) {
        rumor_diag_set(diag,
                       dir,
                       0,
                       0,
                       "%s[.gz] is here but %s[.gz] is not",
                       has_img ? img_name : lab_name,
                       has_img ? lab_name : img_name);
        return RUMOR_ENOTFOUND;
    }
    return rumor_dataset_load_idx(img, lab, out, diag);
}

/* The train-* pair of dir, followed by the t10k-* pair when dir has one:
 * the official test set, marked as the dataset's own held-out part. hint
 * ends the error for a missing directory or training pair. */
static rumor_err
s_load_idx_dir(const char *dir,
               const char *kind,
               const char *hint,
               struct rumor_dataset **out,
               struct rumor_diag *diag)
{
    struct stat st;
    if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode)) {
        rumor_diag_set(diag,
                       dir,
                       0,
                       0,
                       "%s: no such directory; %s",
                       kind,
                       hint);
        return RUMOR_ENOTFOUND;
    }
    struct rumor_dataset *train = NULL, *test = NULL;
    bool absent = false;
    rumor_err rc = s_load_idx_pair(dir, "train", &train, &absent, diag);
    if (absent)
        rumor_diag_set(diag,
                       dir,
                       0,
                       0,
                       "%s: no train-images-idx3-ubyte[.gz] here; %s",
                       kind,
                       hint);
    if (rc != RUMOR_OK)
        return rc;
    rc = s_load_idx_pair(dir, "t10k", &test, &absent, diag);
    if (absent) {
        rc = RUMOR_OK; /* no official test set: the workload splits */
    } else if (rc == RUMOR_OK && test->dim != train->dim) {
        rumor_diag_set(diag,
                       dir,
                       0,
                       0,
                       "t10k images have %zu pixels, train images %zu",
                       test->dim,
                       train->dim);
        rc = RUMOR_EPROTO;
    } else if (rc == RUMOR_OK) {
        struct rumor_dataset *joined = NULL;
        rc = s_concat(train, test, &joined);
        if (rc == RUMOR_OK) {
            joined->test_n = test->n;
            rumor_dataset_destroy(&train);
            train = joined;
        } else {
            rumor_diag_set(diag,
                           dir,
                           0,
                           0,
                           "cannot join the train and t10k sets: %s",
                           rumor_strerror(rc));
        }
    }
    rumor_dataset_destroy(&test);
    if (rc != RUMOR_OK) {
        rumor_dataset_destroy(&train);
        return rc;
    }
    snprintf(train->name, sizeof train->name, "%s", kind);
    *out = train;
    return RUMOR_OK;
}

rumor_err
rumor_dataset_open(const char *spec,
                   uint64_t seed,
                   struct rumor_dataset **out,
                   struct rumor_diag *diag)
{
    assert(spec != NULL);
    assert(out != NULL);
    *out = NULL;
    size_t len = strlen(spec);
    if (len >= RUMOR_DATASET_SPEC_MAX) {
        rumor_diag_set(diag,
                       "",
                       0,
                       0,
                       "dataset spec longer than %d bytes",
                       RUMOR_DATASET_SPEC_MAX - 1);
        return RUMOR_EINVAL;
    }
    char text[RUMOR_DATASET_SPEC_MAX];
    memcpy(text, spec, len + 1);
    char *colon = strchr(text, ':');
    char *arg = NULL;
    if (colon != NULL) {
        *colon = '\0';
        arg = colon + 1;
    }
    rumor_err rc = RUMOR_OK;
    if (strcmp(text, "digits") == 0 && arg == NULL)
        return rumor_dataset_load_digits(out);
    if (strcmp(text, "synthetic") == 0) {
        struct rumor_synth_opts o;
        rumor_synth_opts_default(&o);
        o.seed = seed;
        if (arg != NULL) {
            rc = s_synth_params(arg, &o, diag);
            if (rc != RUMOR_OK)
                return rc;
        }
        rc = rumor_dataset_synthetic(&o, out);
        if (rc != RUMOR_OK)
            rumor_diag_set(diag,
                           "",
                           0,
                           0,
                           "synthetic %zu x %zu, %zu "
                           "classes: %s",
                           o.n,
                           o.dim,
                           o.classes,
                           rumor_strerror(rc));
        return rc;
    }
    if (strcmp(text, "fashion-mnist") == 0 && arg == NULL)
        return s_load_idx_dir(FASHION_MNIST_DIR,
                              text,
                              FASHION_MNIST_HINT,
                              out,
                              diag);
    if (arg == NULL || *arg == '\0') {
        rumor_diag_set(diag,
                       "",
                       0,
                       0,
                       "unknown dataset '%s' (digits, synthetic[:...], "
                       "fashion-mnist[:DIR], mnist:IMAGES,LABELS, mnist:DIR, "
                       "cifar10:FILE[,FILE...], csv:FILE)",
                       spec);
        return RUMOR_EINVAL;
    }
    if (strcmp(text, "csv") == 0)
        return rumor_dataset_load_csv(arg, out, diag);
    if (strcmp(text, "fashion-mnist") == 0)
        return s_load_idx_dir(arg, text, FASHION_MNIST_HINT, out, diag);
    if (strcmp(text, "mnist") == 0) {
        char *comma = strchr(arg, ',');
        struct stat st;
        if (comma == NULL && stat(arg, &st) == 0 && S_ISDIR(st.st_mode))
            return s_load_idx_dir(arg,
                                  text,
                                  "mnist:DIR needs the train-* files of MNIST",
                                  out,
                                  diag);
        if (comma == NULL) {
            rumor_diag_set(diag,
                           "",
                           0,
                           0,
                           "mnist needs IMAGES,LABELS or a directory (got "
                           "'%s')",
                           arg);
            return RUMOR_EINVAL;
        }
        *comma = '\0';
        return rumor_dataset_load_idx(arg, comma + 1, out, diag);
    }
    if (strcmp(text, "cifar10") == 0) {
        struct rumor_dataset *acc = NULL, *one = NULL, *joined = NULL;
        char *cursor = arg;
        for (char *path = s_next_token(&cursor, ','); path != NULL;
             path = s_next_token(&cursor, ',')) {
            rc = rumor_dataset_load_cifar10(path, &one, diag);
            if (rc != RUMOR_OK)
                break;
            if (acc == NULL) {
                acc = one;
                one = NULL;
                continue;
            }
            rc = s_concat(acc, one, &joined);
            rumor_dataset_destroy(&one);
            rumor_dataset_destroy(&acc);
            if (rc != RUMOR_OK) {
                rumor_diag_set(diag,
                               path,
                               0,
                               0,
                               "cannot join CIFAR-10 batches: %s",
                               rumor_strerror(rc));
                break;
            }
            acc = joined;
            joined = NULL;
        }
        if (rc != RUMOR_OK)
            rumor_dataset_destroy(&acc);
        *out = acc;
        return acc != NULL || rc != RUMOR_OK ? rc : RUMOR_EINVAL;
    }
    rumor_diag_set(diag, "", 0, 0, "unknown dataset kind '%s'", text);
    return RUMOR_EINVAL;
}
