/*
 * Fuzz target: the dataset file parsers (MNIST IDX pair, each file plain
 * or gzip, CIFAR-10 binary batch, CSV), which read files users give us.
 * The first input byte picks the parser (mod 3); for IDX the next two
 * bytes (little-endian) pick where the images file ends and the labels
 * file begins (the idx_gz_* seeds hold gzip files). A parsed dataset
 * is checked for the invariants workloads rely on: every label in
 * [0, classes), every feature finite, shapes within the caps.
 */
#include "rumor/train.h"

#include <math.h>
#include <stdlib.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void
s_check(const struct rumor_dataset *d)
{
    if (d->n == 0 || d->n > RUMOR_DATASET_MAX_SAMPLES || d->dim == 0 ||
        d->dim > RUMOR_DATASET_MAX_FEATURES || d->classes == 0 ||
        d->classes > RUMOR_DATASET_MAX_CLASSES || d->y == NULL)
        abort();
    for (size_t i = 0; i < d->n; i++)
        if (d->y[i] < 0 || (size_t)d->y[i] >= d->classes)
            abort();
    for (size_t i = 0; i < d->n * d->dim; i++)
        if (!isfinite(d->x[i]))
            abort();
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    struct rumor_dataset *d = NULL;
    struct rumor_diag diag;
    rumor_err rc = RUMOR_OK;
    const uint8_t *body = data + 1;
    size_t len = size - 1;
    switch (data[0] % 3) {
    case 0: {
        if (len < 2)
            return 0;
        size_t split = ((size_t)body[0] | ((size_t)body[1] << 8));
        body += 2;
        len -= 2;
        if (split > len)
            split = len;
        rc = rumor_dataset_parse_idx(body,
                                     split,
                                     "images",
                                     body + split,
                                     len - split,
                                     "labels",
                                     &d,
                                     &diag);
        break;
    }
    case 1:
        rc = rumor_dataset_parse_cifar10(body, len, "cifar", &d, &diag);
        break;
    default:
        rc = rumor_dataset_parse_csv(body, len, "csv", &d, &diag);
        break;
    }
    if (rc == RUMOR_OK)
        s_check(d);
    else if (d != NULL)
        abort(); /* *out must stay NULL on error */
    rumor_dataset_destroy(&d);
    return 0;
}
