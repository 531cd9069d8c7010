/*
 * train/dataset_shard.c: how the training split is shared among nodes.
 *
 * iid: a seeded permutation of [0, n) cut into `nodes` contiguous parts
 * whose sizes differ by at most one. Dirichlet (Hsu, Qi & Brown 2019,
 * "Measuring the effects of non-identical data distribution for federated
 * visual classification", section 3): for each class c, the samples of c
 * are shuffled and cut among the nodes in proportions p_c ~ Dir(alpha 1);
 * small alpha gives each node few classes, large alpha approaches iid.
 * Decentralized methods are sensitive to this skew, hence the option.
 *
 * Every node runs the same computation on the same (n, labels, seed) and
 * keeps only its own part, so the parts partition the data with no
 * communication. Dirichlet vectors are normalised Gamma(alpha) draws
 * (Marsaglia & Tsang 2000, "A simple method for generating gamma
 * variables", ACM TOMS 26(3); shape < 1 via Gamma(a + 1) U^(1/a), their
 * section 6) from the core Philox streams. When a draw leaves a node with
 * no sample at all, the whole draw is redone on the next stream (a node
 * with an empty shard could not train); this is deterministic and rare
 * unless alpha is tiny and nodes many.
 */
#include "rumor/train.h"

#include "train/train_impl.h"

#include <assert.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define SEED_SHARD      0x53484152u /* "SHAR" */
#define SHARD_MAX_TRIES 64

rumor_err
rumor_shard_mode_parse(const char *name, rumor_shard_mode *out)
{
    assert(name != NULL);
    assert(out != NULL);
    if (strcmp(name, "iid") == 0)
        *out = RUMOR_SHARD_IID;
    else if (strcmp(name, "dirichlet") == 0)
        *out = RUMOR_SHARD_DIRICHLET;
    else
        return RUMOR_EINVAL;
    return RUMOR_OK;
}

double
train_rng_gamma(struct rumor_rng *rng, double shape)
{
    assert(rng != NULL);
    assert(shape > 0);
    if (shape < 1) {
        double u = rumor_rng_uniform_double(rng);
        /* u may be 0: then the draw is 0, which the caller tolerates. */
        return train_rng_gamma(rng, shape + 1) * pow(u, 1.0 / shape);
    }
    double d = shape - 1.0 / 3.0;
    double c = 1.0 / sqrt(9.0 * d);
    for (;;) {
        double x = rumor_rng_normal(rng);
        double v = 1 + c * x;
        if (v <= 0)
            continue;
        v = v * v * v;
        double u = rumor_rng_uniform_double(rng);
        if (u < 1 - 0.0331 * x * x * x * x)
            return d * v;
        if (u > 0 && log(u) < 0.5 * x * x + d * (1 - v + log(v)))
            return d * v;
    }
}

static int
s_cmp_size(const void *a, const void *b)
{
    size_t x = *(const size_t *)a;
    size_t y = *(const size_t *)b;
    return (x > y) - (x < y);
}

/* Fills owner[i] (the node of sample i) for one Dirichlet draw on stream
 * `stream`; counts[k] receives node k's share. */
static rumor_err
s_dirichlet_owners(const struct rumor_dataset *data,
                   double alpha,
                   uint64_t seed,
                   uint64_t stream,
                   uint32_t nodes,
                   uint32_t *owner,
                   size_t *counts)
{
    rumor_err rc = RUMOR_OK;
    size_t *members = malloc(data->n * sizeof *members);
    size_t *perm = malloc(data->n * sizeof *perm);
    size_t *start = calloc(data->classes + 1, sizeof *start);
    double *p = malloc(nodes * sizeof *p);
    if (members == NULL || perm == NULL || start == NULL || p == NULL) {
        rc = RUMOR_ENOMEM;
        goto done;
    }
    /* Counting sort of the sample indices by label: class c's samples are
     * members[start[c] .. start[c + 1]), in index order. */
    for (size_t i = 0; i < data->n; i++)
        start[data->y[i] + 1]++;
    for (size_t c = 0; c < data->classes; c++)
        start[c + 1] += start[c];
    for (size_t i = 0; i < data->n; i++)
        members[start[data->y[i]]++] = i;
    for (size_t c = data->classes; c > 0; c--)
        start[c] = start[c - 1];
    start[0] = 0;
    memset(counts, 0, nodes * sizeof *counts);
    struct rumor_rng rng;
    for (size_t c = 0; c < data->classes; c++) {
        size_t m = start[c + 1] - start[c];
        const size_t *mem = members + start[c];
        if (m == 0)
            continue;
        /* Class c's own streams: proportions, then the shuffle. */
        rumor_rng_init(&rng, seed, stream * (2 * data->classes + 2) + 2 * c);
        double sum = 0;
        for (uint32_t k = 0; k < nodes; k++) {
            p[k] = train_rng_gamma(&rng, alpha);
            sum += p[k];
        }
        train_permutation(seed,
                          stream * (2 * data->classes + 2) + 2 * c + 1,
                          perm,
                          m);
        /* Cut points round(m * cumulative share); when every draw
         * underflowed to 0, give the class to one node. */
        double acc = 0;
        size_t at = 0;
        for (uint32_t k = 0; k < nodes; k++) {
            acc += sum > 0 ? p[k] / sum : (k == 0 ? 1.0 : 0.0);
            size_t cut = k + 1 == nodes ? m : (size_t)llround(acc * (double)m);
            if (cut > m)
                cut = m;
            for (; at < cut; at++)
                owner[mem[perm[at]]] = k;
        }
    }
    for (size_t i = 0; i < data->n; i++)
        counts[owner[i]]++;
done:
    free(members);
    free(perm);
    free(start);
    free(p);
    return rc;
}

rumor_err
rumor_shard_indices(const struct rumor_dataset *data,
                    rumor_shard_mode mode,
                    double alpha,
                    uint64_t seed,
                    uint32_t node,
                    uint32_t nodes,
                    size_t **idx,
                    size_t *count)
{
    assert(data != NULL);
    assert(idx != NULL);
    assert(count != NULL);
    *idx = NULL;
    *count = 0;
    if (nodes == 0 || node >= nodes || data->n < nodes)
        return RUMOR_EINVAL;
    uint64_t s = rumor_seed_derive(seed, SEED_SHARD, 0);
    rumor_err rc = RUMOR_OK;
    size_t *out = NULL;
    size_t n_out = 0;
    if (mode == RUMOR_SHARD_IID) {
        size_t *perm = malloc(data->n * sizeof *perm);
        if (perm == NULL)
            return RUMOR_ENOMEM;
        train_permutation(s, 0, perm, data->n);
        size_t lo = data->n * node / nodes;
        size_t hi = data->n * ((size_t)node + 1) / nodes;
        n_out = hi - lo;
        memmove(perm, perm + lo, n_out * sizeof *perm);
        qsort(perm, n_out, sizeof *perm, s_cmp_size);
        *idx = perm;
        *count = n_out;
        return RUMOR_OK;
    }
    if (mode != RUMOR_SHARD_DIRICHLET || data->y == NULL || !(alpha > 0) ||
        !isfinite(alpha))
        return RUMOR_EINVAL;
    for (size_t i = 0; i < data->n; i++)
        if (data->y[i] < 0 || (size_t)data->y[i] >= data->classes)
            return RUMOR_EINVAL;
    uint32_t *owner = malloc(data->n * sizeof *owner);
    size_t *counts = malloc(nodes * sizeof *counts);
    if (owner == NULL || counts == NULL) {
        rc = RUMOR_ENOMEM;
        goto done;
    }
    bool ok = false;
    for (uint64_t t = 0; t < SHARD_MAX_TRIES && !ok; t++) {
        rc = s_dirichlet_owners(data, alpha, s, t, nodes, owner, counts);
        if (rc != RUMOR_OK)
            goto done;
        ok = true;
        for (uint32_t k = 0; k < nodes; k++)
            ok = ok && counts[k] > 0;
    }
    if (!ok) {
        rumor_log(RUMOR_LOG_ERROR,
                  "dirichlet shard: alpha %g leaves a node empty in %d draws",
                  alpha,
                  SHARD_MAX_TRIES);
        rc = RUMOR_EINVAL;
        goto done;
    }
    out = malloc(counts[node] * sizeof *out);
    if (out == NULL) {
        rc = RUMOR_ENOMEM;
        goto done;
    }
    for (size_t i = 0; i < data->n; i++)
        if (owner[i] == node)
            out[n_out++] = i;
    *idx = out;
    *count = n_out;
done:
    free(owner);
    free(counts);
    return rc;
}
