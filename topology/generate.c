/*
 * Topology generators. Each one only lists edges into a struct topo_builder;
 * weights (Metropolis-Hastings) and every check come from topo_build, the
 * same path a hand-written file takes.
 *
 * Random kinds are seeded through the core Philox generator, so a
 * (kind, args, seed) triple gives the same graph on every machine:
 * - random-regular N D: Steger and Wormald's pairing (1999): join two random
 *   free stubs when that makes neither a loop nor a double edge, restart
 *   when stuck. Unlike the plain configuration model with rejection of the
 *   whole graph, it works for any D that fits.
 * - watts-strogatz N K P: ring lattice with K/2 neighbours on each side,
 *   each lattice edge rewired with probability P to a uniform new end
 *   (Watts and Strogatz, Nature 1998).
 * Both retry with the next stream of the same seed until the graph is
 * connected (a bounded number of times).
 * one-peer-exp N is the time-varying exponential graph in its symmetric
 * form: at phase k node i pairs with i XOR 2^k (weights 1/2), so each phase
 * is a perfect matching and the product of log2 N phases is the exact
 * average. (The directed one-peer exponential graph of Ying et al., 2021,
 * has a non-symmetric W, which PowerGossip's sign rule cannot use.)
 */
#include "rumor/topology.h"

#include "topology/topology_impl.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define GEN_MAX_ATTEMPTS 200

struct gen_args {
    unsigned long n[3]; /* integer arguments */
    double p;           /* probability argument (watts-strogatz) */
};

typedef rumor_err (*gen_fn)(struct topo_builder *b,
                            const struct gen_args *a,
                            uint64_t seed,
                            struct rumor_diag *diag);

static rumor_err
s_edge(struct topo_builder *b,
       size_t u,
       size_t v,
       uint32_t phase,
       struct rumor_diag *diag)
{
    struct topo_edge e = {.a = (uint32_t)u, .b = (uint32_t)v, .phase = phase};
    return topo_builder_add_edge(b, &e, diag);
}

static bool
s_power_of_two(unsigned long n)
{
    return n >= 2 && (n & (n - 1)) == 0;
}

static unsigned
s_log2(unsigned long n)
{
    unsigned k = 0;
    while ((1ul << (k + 1)) <= n)
        k++;
    return k;
}

/* --- deterministic kinds ------------------------------------------------- */

static rumor_err
s_ring(struct topo_builder *b,
       const struct gen_args *a,
       uint64_t seed,
       struct rumor_diag *diag)
{
    (void)seed;
    size_t n = a->n[0];
    rumor_err rc = RUMOR_OK;
    for (size_t i = 0; i < n && rc == RUMOR_OK; i++)
        if (n > 2 || i == 0)
            rc = s_edge(b, i, (i + 1) % n, 0, diag);
    return rc;
}

static rumor_err
s_torus(struct topo_builder *b,
        const struct gen_args *a,
        uint64_t seed,
        struct rumor_diag *diag)
{
    (void)seed;
    size_t rows = a->n[0], cols = a->n[1];
    rumor_err rc = RUMOR_OK;
    for (size_t r = 0; r < rows && rc == RUMOR_OK; r++) {
        for (size_t c = 0; c < cols && rc == RUMOR_OK; c++) {
            size_t me = r * cols + c;
            /* Size 2 along a dimension: both wrap directions reach the same
             * node, so only one edge is added; size 1 adds none. */
            if (cols > 2 || (cols == 2 && c == 0))
                rc = s_edge(b, me, r * cols + (c + 1) % cols, 0, diag);
            if (rc == RUMOR_OK && (rows > 2 || (rows == 2 && r == 0)))
                rc = s_edge(b, me, ((r + 1) % rows) * cols + c, 0, diag);
        }
    }
    return rc;
}

static rumor_err
s_complete(struct topo_builder *b,
           const struct gen_args *a,
           uint64_t seed,
           struct rumor_diag *diag)
{
    (void)seed;
    rumor_err rc = RUMOR_OK;
    for (size_t i = 0; i < a->n[0] && rc == RUMOR_OK; i++)
        for (size_t j = i + 1; j < a->n[0] && rc == RUMOR_OK; j++)
            rc = s_edge(b, i, j, 0, diag);
    return rc;
}

static rumor_err
s_star(struct topo_builder *b,
       const struct gen_args *a,
       uint64_t seed,
       struct rumor_diag *diag)
{
    (void)seed;
    rumor_err rc = RUMOR_OK;
    for (size_t i = 1; i < a->n[0] && rc == RUMOR_OK; i++)
        rc = s_edge(b, 0, i, 0, diag);
    return rc;
}

static rumor_err
s_hypercube(struct topo_builder *b,
            const struct gen_args *a,
            uint64_t seed,
            struct rumor_diag *diag)
{
    (void)seed;
    size_t n = a->n[0];
    rumor_err rc = RUMOR_OK;
    for (size_t i = 0; i < n && rc == RUMOR_OK; i++)
        for (size_t bit = 1; bit < n && rc == RUMOR_OK; bit <<= 1)
            if ((i ^ bit) > i)
                rc = s_edge(b, i, i ^ bit, 0, diag);
    return rc;
}

static int
s_compare_pair(const void *pa, const void *pb)
{
    const uint32_t *a = pa, *b = pb;
    if (a[0] != b[0])
        return a[0] < b[0] ? -1 : 1;
    return (a[1] > b[1]) - (a[1] < b[1]);
}

/* Node i links to i + 2^k (mod N) for every 2^k < N; a pair reached from
 * both ends (as when N is a power of two and 2^k = N/2) is added once. */
static rumor_err
s_exponential(struct topo_builder *b,
              const struct gen_args *a,
              uint64_t seed,
              struct rumor_diag *diag)
{
    (void)seed;
    size_t n = a->n[0], hops = s_log2(n - 1) + 1, count = 0;
    uint32_t(*pairs)[2] = malloc(n * hops * sizeof *pairs);
    if (pairs == NULL)
        return RUMOR_ENOMEM;
    for (size_t i = 0; i < n; i++) {
        for (size_t hop = 1; hop < n; hop <<= 1) {
            size_t j = (i + hop) % n;
            pairs[count][0] = (uint32_t)(i < j ? i : j);
            pairs[count][1] = (uint32_t)(i < j ? j : i);
            count++;
        }
    }
    qsort(pairs, count, sizeof *pairs, s_compare_pair);
    rumor_err rc = RUMOR_OK;
    for (size_t k = 0; k < count && rc == RUMOR_OK; k++)
        if (k == 0 || s_compare_pair(pairs[k], pairs[k - 1]) != 0)
            rc = s_edge(b, pairs[k][0], pairs[k][1], 0, diag);
    free(pairs);
    return rc;
}

static rumor_err
s_one_peer_exp(struct topo_builder *b,
               const struct gen_args *a,
               uint64_t seed,
               struct rumor_diag *diag)
{
    (void)seed;
    size_t n = a->n[0];
    rumor_err rc = RUMOR_OK;
    unsigned phases = s_log2(n);
    for (unsigned k = 0; k < phases && rc == RUMOR_OK; k++)
        for (size_t i = 0; i < n && rc == RUMOR_OK; i++)
            if ((i ^ (1ul << k)) > i)
                rc = s_edge(b, i, i ^ (1ul << k), k, diag);
    return rc;
}

/* --- random kinds ------------------------------------------------------ */

static bool
s_has_edge(const uint32_t *adj,
           const uint32_t *deg,
           size_t d,
           size_t u,
           size_t v)
{
    for (size_t k = 0; k < deg[u]; k++)
        if (adj[u * d + k] == v)
            return true;
    return false;
}

/* One Steger-Wormald attempt: false when it got stuck. */
static bool
s_pair_stubs(struct rumor_rng *rng,
             size_t n,
             size_t d,
             uint32_t *stubs,
             uint32_t *adj,
             uint32_t *deg)
{
    size_t free_stubs = n * d;
    for (size_t i = 0; i < n * d; i++)
        stubs[i] = (uint32_t)(i / d);
    memset(deg, 0, n * sizeof *deg);
    while (free_stubs > 0) {
        bool paired = false;
        for (int tries = 0; tries < 100 && !paired; tries++) {
            size_t x = rumor_rng_below(rng, (uint32_t)free_stubs);
            size_t y = rumor_rng_below(rng, (uint32_t)free_stubs);
            uint32_t u = stubs[x], v = stubs[y];
            if (x == y || u == v || s_has_edge(adj, deg, d, u, v))
                continue;
            adj[u * d + deg[u]++] = v;
            adj[v * d + deg[v]++] = u;
            size_t hi = x > y ? x : y, lo = x > y ? y : x;
            stubs[hi] = stubs[--free_stubs];
            stubs[lo] = stubs[--free_stubs];
            paired = true;
        }
        if (!paired)
            return false;
    }
    return true;
}

static bool
s_connected(const uint32_t *adj, const uint32_t *deg, size_t d, size_t n)
{
    uint32_t *queue = malloc(n * sizeof *queue);
    uint8_t *seen = calloc(n, 1);
    size_t head = 0, tail = 0;
    if (queue == NULL || seen == NULL) {
        free(queue);
        free(seen);
        return false;
    }
    queue[tail++] = 0;
    seen[0] = 1;
    while (head < tail) {
        uint32_t u = queue[head++];
        for (size_t k = 0; k < deg[u]; k++) {
            uint32_t v = adj[u * d + k];
            if (!seen[v]) {
                seen[v] = 1;
                queue[tail++] = v;
            }
        }
    }
    free(queue);
    free(seen);
    return tail == n;
}

static rumor_err
s_add_adjacency(struct topo_builder *b,
                const uint32_t *adj,
                const uint32_t *deg,
                size_t d,
                size_t n,
                struct rumor_diag *diag)
{
    rumor_err rc = RUMOR_OK;
    for (size_t u = 0; u < n && rc == RUMOR_OK; u++)
        for (size_t k = 0; k < deg[u] && rc == RUMOR_OK; k++)
            if (adj[u * d + k] > u)
                rc = s_edge(b, u, adj[u * d + k], 0, diag);
    return rc;
}

static rumor_err
s_random_regular(struct topo_builder *b,
                 const struct gen_args *a,
                 uint64_t seed,
                 struct rumor_diag *diag)
{
    size_t n = a->n[0], d = a->n[1];
    rumor_err rc = RUMOR_OK;
    uint32_t *stubs = malloc(n * d * sizeof *stubs);
    uint32_t *adj = malloc(n * d * sizeof *adj);
    uint32_t *deg = malloc(n * sizeof *deg);
    if (stubs == NULL || adj == NULL || deg == NULL) {
        rc = RUMOR_ENOMEM;
        goto done;
    }
    for (uint64_t attempt = 0; attempt < GEN_MAX_ATTEMPTS; attempt++) {
        struct rumor_rng rng;
        rumor_rng_init(&rng, seed, attempt);
        if (s_pair_stubs(&rng, n, d, stubs, adj, deg) &&
            s_connected(adj, deg, d, n)) {
            rc = s_add_adjacency(b, adj, deg, d, n, diag);
            goto done;
        }
    }
    rumor_diag_set(diag,
                   "",
                   0,
                   0,
                   "no connected %zu-regular graph on %zu nodes found in %d "
                   "attempts",
                   d,
                   n,
                   GEN_MAX_ATTEMPTS);
    rc = RUMOR_EINVAL;
done:
    free(stubs);
    free(adj);
    free(deg);
    return rc;
}

/* One rewiring of the lattice; adj rows hold up to n - 1 neighbours. */
static void
s_watts_strogatz_once(struct rumor_rng *rng,
                      size_t n,
                      size_t half,
                      double p,
                      uint32_t *adj,
                      uint32_t *deg)
{
    size_t d = n - 1;
    memset(deg, 0, n * sizeof *deg);
    for (size_t u = 0; u < n; u++) {
        for (size_t k = 1; k <= half; k++) {
            size_t v = (u + k) % n;
            if (rumor_rng_uniform_double(rng) < p) {
                /* Rewire to a uniform node that is neither u nor already
                 * adjacent; keep the lattice edge when u is saturated. */
                for (int tries = 0; tries < 64; tries++) {
                    size_t w = rumor_rng_below(rng, (uint32_t)n);
                    if (w != u && !s_has_edge(adj, deg, d, u, w)) {
                        v = w;
                        break;
                    }
                }
            }
            if (v != u && !s_has_edge(adj, deg, d, u, v)) {
                adj[u * d + deg[u]++] = (uint32_t)v;
                adj[v * d + deg[v]++] = (uint32_t)u;
            }
        }
    }
}

static rumor_err
s_watts_strogatz(struct topo_builder *b,
                 const struct gen_args *a,
                 uint64_t seed,
                 struct rumor_diag *diag)
{
    size_t n = a->n[0], k = a->n[1];
    rumor_err rc = RUMOR_OK;
    uint32_t *adj = malloc(n * (n - 1) * sizeof *adj);
    uint32_t *deg = malloc(n * sizeof *deg);
    if (adj == NULL || deg == NULL) {
        rc = RUMOR_ENOMEM;
        goto done;
    }
    for (uint64_t attempt = 0; attempt < GEN_MAX_ATTEMPTS; attempt++) {
        struct rumor_rng rng;
        rumor_rng_init(&rng, seed, attempt);
        s_watts_strogatz_once(&rng, n, k / 2, a->p, adj, deg);
        if (s_connected(adj, deg, n - 1, n)) {
            rc = s_add_adjacency(b, adj, deg, n - 1, n, diag);
            goto done;
        }
    }
    rumor_diag_set(diag, "", 0, 0, "no connected Watts-Strogatz graph found");
    rc = RUMOR_EINVAL;
done:
    free(adj);
    free(deg);
    return rc;
}

/* --- the table -------------------------------------------------------------
 */

enum arg_rule {
    ARG_NODES2, /* N >= 2 */
    ARG_POW2,   /* N a power of two, >= 2 */
};

static const struct {
    const char *kind;
    const char *usage;
    size_t ints; /* integer arguments */
    bool has_p;  /* then one probability */
    enum arg_rule rule;
    gen_fn fn;
} s_kinds[] = {
    {"ring", "ring N", 1, false, ARG_NODES2, s_ring},
    {"torus", "torus R C", 2, false, ARG_NODES2, s_torus},
    {"complete", "complete N", 1, false, ARG_NODES2, s_complete},
    {"star", "star N", 1, false, ARG_NODES2, s_star},
    {"hypercube",
     "hypercube N (N a power of 2)",
     1,
     false,
     ARG_POW2,
     s_hypercube},
    {"random-regular",
     "random-regular N D",
     2,
     false,
     ARG_NODES2,
     s_random_regular},
    {"watts-strogatz",
     "watts-strogatz N K P",
     2,
     true,
     ARG_NODES2,
     s_watts_strogatz},
    {"exponential", "exponential N", 1, false, ARG_NODES2, s_exponential},
    {"one-peer-exp",
     "one-peer-exp N (N a power of 2)",
     1,
     false,
     ARG_POW2,
     s_one_peer_exp},
};

#define KIND_COUNT (sizeof s_kinds / sizeof s_kinds[0])

static rumor_err
s_parse_args(size_t k,
             const char *const *args,
             size_t nargs,
             struct gen_args *out,
             struct rumor_diag *diag)
{
    size_t want = s_kinds[k].ints + (s_kinds[k].has_p ? 1 : 0);
    if (nargs != want) {
        rumor_diag_set(diag, "", 0, 0, "usage: %s", s_kinds[k].usage);
        return RUMOR_EINVAL;
    }
    for (size_t i = 0; i < s_kinds[k].ints; i++) {
        char *end = NULL;
        errno = 0;
        unsigned long v = strtoul(args[i], &end, 10);
        if (args[i][0] < '0' || args[i][0] > '9' || *end != '\0' || errno ||
            v > RUMOR_TOPOLOGY_MAX_NODES) {
            rumor_diag_set(diag,
                           "",
                           0,
                           0,
                           "%s: '%s' is not a whole number up to %d",
                           s_kinds[k].usage,
                           args[i],
                           RUMOR_TOPOLOGY_MAX_NODES);
            return RUMOR_EINVAL;
        }
        out->n[i] = v;
    }
    if (s_kinds[k].has_p) {
        char *end = NULL;
        const char *text = args[s_kinds[k].ints];
        out->p = strtod(text, &end);
        if (end == text || *end != '\0' || !(out->p >= 0 && out->p <= 1)) {
            rumor_diag_set(diag,
                           "",
                           0,
                           0,
                           "%s: P must be a probability in [0, 1], got '%s'",
                           s_kinds[k].usage,
                           text);
            return RUMOR_EINVAL;
        }
    }
    return RUMOR_OK;
}

/* Kind-specific sanity beyond "numbers parse". */
static rumor_err
s_check_args(size_t k, const struct gen_args *a, struct rumor_diag *diag)
{
    const char *usage = s_kinds[k].usage;
    size_t n = s_kinds[k].fn == s_torus ? a->n[0] * a->n[1] : a->n[0];
    const char *why = NULL;
    if (n < 2 || n > RUMOR_TOPOLOGY_MAX_NODES)
        why = "needs between 2 and 4096 nodes";
    else if (s_kinds[k].rule == ARG_POW2 && !s_power_of_two(n))
        why = "N must be a power of 2";
    else if (s_kinds[k].fn == s_random_regular &&
             (a->n[1] < 1 || a->n[1] >= n || (n * a->n[1]) % 2 != 0))
        why = "needs 1 <= D < N and N * D even";
    else if (s_kinds[k].fn == s_watts_strogatz &&
             (a->n[1] < 2 || a->n[1] % 2 != 0 || a->n[1] >= n))
        why = "K must be even, at least 2 and below N";
    if (why == NULL)
        return RUMOR_OK;
    rumor_diag_set(diag, "", 0, 0, "%s: %s", usage, why);
    return RUMOR_EINVAL;
}

rumor_err
rumor_topology_generate(const char *kind,
                        const char *const *args,
                        size_t nargs,
                        uint64_t seed,
                        rumor_topology **out,
                        struct rumor_diag *diag)
{
    *out = NULL;
    size_t k = 0;
    while (k < KIND_COUNT && strcmp(s_kinds[k].kind, kind) != 0)
        k++;
    if (k == KIND_COUNT) {
        rumor_diag_set(diag,
                       "",
                       0,
                       0,
                       "unknown topology kind '%s' (ring, torus, complete, "
                       "star, hypercube, random-regular, watts-strogatz, "
                       "exponential, one-peer-exp)",
                       kind);
        return RUMOR_EINVAL;
    }
    struct gen_args a = {{0}, 0};
    rumor_err rc = s_parse_args(k, args, nargs, &a, diag);
    if (rc == RUMOR_OK)
        rc = s_check_args(k, &a, diag);
    if (rc != RUMOR_OK)
        return rc;
    struct topo_builder b;
    topo_builder_init(&b, kind);
    b.nodes = s_kinds[k].fn == s_torus ? a.n[0] * a.n[1] : a.n[0];
    rc = s_kinds[k].fn(&b, &a, seed, diag);
    if (rc == RUMOR_OK)
        rc = topo_build(&b, out, diag);
    topo_builder_free(&b);
    return rc;
}

rumor_err
rumor_topology_from_spec(const char *spec,
                         uint64_t seed,
                         rumor_topology **out,
                         struct rumor_diag *diag)
{
    *out = NULL;
    const char *colon = strchr(spec, ':');
    if (colon == NULL || access(spec, R_OK) == 0)
        return rumor_topology_load_file(spec, out, diag);
    char kind[64], rest[256];
    size_t kind_len = (size_t)(colon - spec);
    if (kind_len >= sizeof kind || strlen(colon + 1) >= sizeof rest) {
        rumor_diag_set(diag, "", 0, 0, "topology spec '%s' is too long", spec);
        return RUMOR_EINVAL;
    }
    memcpy(kind, spec, kind_len);
    kind[kind_len] = '\0';
    snprintf(rest, sizeof rest, "%s", colon + 1);
    const char *args[4];
    size_t nargs = 0;
    char *cursor = rest;
    while (*cursor != '\0') {
        if (nargs == 4) {
            rumor_diag_set(diag, "", 0, 0, "too many arguments in '%s'", spec);
            return RUMOR_EINVAL;
        }
        args[nargs++] = cursor;
        size_t len = strcspn(cursor, ",x");
        /* 'x' separates torus sizes ("4x4") but never starts a number. */
        if (cursor[len] == '\0')
            break;
        cursor[len] = '\0';
        cursor += len + 1;
    }
    return rumor_topology_generate(kind, args, nargs, seed, out, diag);
}
