/*
 * The topology object and its checks (docs/topology.md).
 *
 * Parser and generators both fill a struct topo_builder; topo_build turns it
 * into an immutable topology after checking, in this order: the node count,
 * ids in range, no duplicate edges, weights (Metropolis-Hastings where none
 * is given: w_ij = 1 / (1 + max(d_i, d_j)), w_ii = 1 - sum_j w_ij, which is
 * symmetric and doubly stochastic by construction), rows summing to at most
 * 1, connectivity of the union of all phases, and unique endpoints and keys.
 *
 * Storage is one CSR adjacency per phase (neighbours sorted ascending), so
 * gossip can walk a node's neighbours in a fixed order on every host.
 * Dense W is only built on demand (spectral gap, `topo check`): n is capped
 * at RUMOR_TOPOLOGY_MAX_NODES, so n^2 doubles stay at most 128 MiB.
 *
 * The spectral gap 1 - max(|lambda_2|, |lambda_n|) predicts how fast plain
 * gossip averages (Boyd et al., "Randomized gossip algorithms", 2006). For
 * a time-varying graph it is 1 - sigma_max(W_{K-1} ... W_0 - J), the
 * contraction of one period of K phases.
 */
#include "rumor/topology.h"

#include "topology/topology_impl.h"

#include <assert.h>
#include <cblas.h>
#include <lapacke.h>
#include <math.h>
#include <sodium.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zmq.h>

struct topo_phase {
    size_t edges;
    uint32_t *offset; /* n + 1 entries into nbr / w / given */
    uint32_t *nbr;    /* 2 * edges, ascending per node */
    double *w;        /* w_ij for each nbr entry */
    uint8_t *given;   /* 1 when the weight was written, not derived */
    double *self;     /* w_ii, n entries */
};

struct rumor_topology {
    size_t n;
    size_t phases;
    struct topo_phase *phase;
    char **endpoint; /* n entries, each owned or NULL */
    char (*key)[RUMOR_TOPOLOGY_KEY_TEXT_BYTES + 1]; /* "" when none */
};

/* One direction of an edge while building the CSR arrays. */
struct adj {
    uint32_t node, nbr;
    double w;
    bool given;
    int line;
};

/* --- builder ------------------------------------------------------------ */

void
topo_builder_init(struct topo_builder *b, const char *name)
{
    memset(b, 0, sizeof *b);
    b->name = name;
    b->phases = 1;
}

void
topo_builder_free(struct topo_builder *b)
{
    for (size_t i = 0; i < b->decl_count; i++)
        free(b->decl[i].endpoint);
    free(b->decl);
    free(b->edges);
    free(b->matrix);
    free(b->row_line);
    memset(b, 0, sizeof *b);
}

rumor_err
topo_builder_reserve_nodes(struct topo_builder *b,
                           size_t count,
                           struct rumor_diag *diag)
{
    if (count <= b->decl_count)
        return RUMOR_OK;
    if (count > RUMOR_TOPOLOGY_MAX_NODES) {
        rumor_diag_set(diag,
                       b->name,
                       0,
                       0,
                       "more than %d nodes",
                       RUMOR_TOPOLOGY_MAX_NODES);
        return RUMOR_ETOOBIG;
    }
    struct topo_decl *decl = realloc(b->decl, count * sizeof *decl);
    if (decl == NULL)
        return RUMOR_ENOMEM;
    memset(decl + b->decl_count, 0, (count - b->decl_count) * sizeof *decl);
    b->decl = decl;
    b->decl_count = count;
    return RUMOR_OK;
}

rumor_err
topo_builder_add_edge(struct topo_builder *b,
                      const struct topo_edge *edge,
                      struct rumor_diag *diag)
{
    if (b->edge_count == b->edge_alloc) {
        if (b->edge_alloc >= TOPO_MAX_EDGES) {
            rumor_diag_set(diag,
                           b->name,
                           edge->line,
                           0,
                           "more than %u edges",
                           TOPO_MAX_EDGES);
            return RUMOR_ETOOBIG;
        }
        size_t alloc = b->edge_alloc ? 2 * b->edge_alloc : 64;
        struct topo_edge *edges = realloc(b->edges, alloc * sizeof *edges);
        if (edges == NULL)
            return RUMOR_ENOMEM;
        b->edges = edges;
        b->edge_alloc = alloc;
    }
    b->edges[b->edge_count++] = *edge;
    if (edge->phase + 1 > b->phases)
        b->phases = edge->phase + 1;
    return RUMOR_OK;
}

/* --- endpoint and key syntax ------------------------------------------- */

bool
topo_endpoint_valid(const char *endpoint, const char **why)
{
    size_t len = strlen(endpoint);
    if (len >= RUMOR_TOPOLOGY_ENDPOINT_BYTES) {
        *why = "endpoint is too long";
        return false;
    }
    if (strncmp(endpoint, "ipc://", 6) == 0 && len > 6)
        return true;
    if (strncmp(endpoint, "inproc://", 9) == 0 && len > 9)
        return true;
    if (strncmp(endpoint, "tcp://", 6) == 0) {
        const char *colon = strrchr(endpoint + 6, ':');
        const char *port = colon ? colon + 1 : "";
        char *end = NULL;
        long value = strtol(port, &end, 10);
        if (colon != NULL && colon > endpoint + 6 && *port != '\0' &&
            *end == '\0' && value > 0 && value <= 65535)
            return true;
        *why = "tcp endpoint needs a host and a port 1-65535 "
               "(tcp://host:port)";
        return false;
    }
    *why = "endpoint must be tcp://host:port, ipc://path or inproc://name";
    return false;
}

bool
topo_key_valid(const char *key, const char **why)
{
    static const char z85[] = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJ"
                              "KLMNOPQRSTUVWXYZ.-:+=^!/*?&<>()[]{}@%$#";
    static const char marker[] = "ed25519:";
    const size_t m = sizeof marker - 1, zn = RUMOR_TOPOLOGY_KEY_TEXT_BYTES - m;
    uint8_t raw[32], curve[32];
    size_t len = strlen(key);
    if (len == zn && strspn(key, z85) == zn && zmq_z85_decode(raw, key)) {
        *why = "a CURVE key from before signed membership, which cannot "
               "sign: make the node a signing key with `rumor keygen --out "
               "BASE` (old BASE.key moved aside) and list the ed25519:... "
               "key it prints (docs/protocol.md, \"Keys\")";
        return false;
    }
    if (len != RUMOR_TOPOLOGY_KEY_TEXT_BYTES || strncmp(key, marker, m) != 0 ||
        strspn(key + m, z85) != zn || zmq_z85_decode(raw, key + m) == NULL ||
        sodium_init() < 0 || crypto_sign_ed25519_pk_to_curve25519(curve, raw)) {
        *why = "key must be ed25519: and 40 Z85 characters (a node's public "
               "key, as printed by `rumor keygen`)";
        return false;
    }
    return true;
}

/* --- building ------------------------------------------------------------ */

static int
s_compare_adj(const void *pa, const void *pb)
{
    const struct adj *a = pa, *b = pb;
    if (a->node != b->node)
        return a->node < b->node ? -1 : 1;
    if (a->nbr != b->nbr)
        return a->nbr < b->nbr ? -1 : 1;
    return a->line - b->line;
}

static rumor_err
s_node_count(struct topo_builder *b, size_t *n, struct rumor_diag *diag)
{
    size_t count = b->nodes ? b->nodes : b->decl_count;
    if (count == 0) {
        for (size_t e = 0; e < b->edge_count; e++) {
            size_t top = 1 + (b->edges[e].a > b->edges[e].b ? b->edges[e].a
                                                            : b->edges[e].b);
            if (top > count)
                count = top;
        }
    }
    if (count == 0) {
        rumor_diag_set(diag,
                       b->name,
                       0,
                       0,
                       "no nodes: the file declares "
                       "neither nodes nor edges");
        return RUMOR_EPROTO;
    }
    for (size_t id = 0; id < b->decl_count; id++) {
        if (b->decl[id].line != 0 && id >= count) {
            rumor_diag_set(diag,
                           b->name,
                           b->decl[id].line,
                           0,
                           "node id %zu out of range (%zu nodes)",
                           id,
                           count);
            return RUMOR_EPROTO;
        }
    }
    for (size_t id = 0; b->decl_lines > 0 && id < count; id++) {
        if (id >= b->decl_count || b->decl[id].line == 0) {
            rumor_diag_set(diag,
                           b->name,
                           0,
                           0,
                           "node %zu has no `node` line (once one node has "
                           "an endpoint, every node needs one)",
                           id);
            return RUMOR_EPROTO;
        }
    }
    *n = count;
    return RUMOR_OK;
}

static rumor_err
s_edges_from_matrix(struct topo_builder *b, struct rumor_diag *diag)
{
    size_t n = b->nodes;
    for (size_t i = 0; i < n; i++) {
        double sum = 0;
        for (size_t j = 0; j < n; j++) {
            double wij = b->matrix[i * n + j], wji = b->matrix[j * n + i];
            if (fabs(wij - wji) > 1e-9) {
                rumor_diag_set(diag,
                               b->name,
                               b->row_line[i > j ? i : j],
                               0,
                               "matrix is not symmetric: w[%zu][%zu] = %g but "
                               "w[%zu][%zu] = %g",
                               i,
                               j,
                               wij,
                               j,
                               i,
                               wji);
                return RUMOR_EPROTO;
            }
            sum += wij;
        }
        if (fabs(sum - 1.0) > RUMOR_TOPOLOGY_ROW_TOLERANCE) {
            rumor_diag_set(diag,
                           b->name,
                           b->row_line[i],
                           0,
                           "row %zu sums to %.9g, not 1",
                           i,
                           sum);
            return RUMOR_EPROTO;
        }
    }
    for (size_t i = 0; i < n; i++) {
        for (size_t j = i + 1; j < n; j++) {
            if (b->matrix[i * n + j] == 0)
                continue;
            struct topo_edge e = {.a = (uint32_t)i,
                                  .b = (uint32_t)j,
                                  .weight = b->matrix[i * n + j],
                                  .has_weight = true,
                                  .line = b->row_line[i]};
            rumor_err rc = topo_builder_add_edge(b, &e, diag);
            if (rc != RUMOR_OK)
                return rc;
        }
    }
    return RUMOR_OK;
}

static rumor_err
s_check_ids(const struct topo_builder *b, size_t n, struct rumor_diag *diag)
{
    for (size_t e = 0; e < b->edge_count; e++) {
        const struct topo_edge *edge = &b->edges[e];
        bool a_bad = edge->a >= n;
        if (a_bad || edge->b >= n) {
            rumor_diag_set(diag,
                           b->name,
                           edge->line,
                           a_bad ? edge->col_a : edge->col_b,
                           "node id %u out of range (%zu nodes: 0..%zu)",
                           a_bad ? edge->a : edge->b,
                           n,
                           n - 1);
            return RUMOR_EPROTO;
        }
    }
    return RUMOR_OK;
}

/* Fills one phase's CSR arrays from its edges, with weights. */
static rumor_err
s_build_phase(const struct topo_builder *b,
              uint32_t phase_id,
              size_t n,
              struct topo_phase *ph,
              struct rumor_diag *diag)
{
    rumor_err rc = RUMOR_OK;
    size_t count = 0;
    for (size_t e = 0; e < b->edge_count; e++)
        count += b->edges[e].phase == phase_id;
    struct adj *adj = malloc((2 * count + 1) * sizeof *adj);
    int *last_line = calloc(n, sizeof *last_line);
    ph->offset = calloc(n + 1, sizeof *ph->offset);
    ph->nbr = malloc((2 * count + 1) * sizeof *ph->nbr);
    ph->w = malloc((2 * count + 1) * sizeof *ph->w);
    ph->given = malloc(2 * count + 1);
    ph->self = malloc(n * sizeof *ph->self);
    if (!adj || !last_line || !ph->offset || !ph->nbr || !ph->w || !ph->given ||
        !ph->self) {
        rc = RUMOR_ENOMEM;
        goto done;
    }
    size_t k = 0;
    for (size_t e = 0; e < b->edge_count; e++) {
        const struct topo_edge *edge = &b->edges[e];
        if (edge->phase != phase_id)
            continue;
        adj[k++] = (struct adj){edge->a,
                                edge->b,
                                edge->weight,
                                edge->has_weight,
                                edge->line};
        adj[k++] = (struct adj){edge->b,
                                edge->a,
                                edge->weight,
                                edge->has_weight,
                                edge->line};
    }
    qsort(adj, k, sizeof *adj, s_compare_adj);
    for (size_t i = 0; i < k; i++) {
        if (i > 0 && adj[i].node == adj[i - 1].node &&
            adj[i].nbr == adj[i - 1].nbr) {
            rumor_diag_set(diag,
                           b->name,
                           adj[i].line,
                           0,
                           "duplicate edge %u-%u (first at line %d)",
                           adj[i].node < adj[i].nbr ? adj[i].node : adj[i].nbr,
                           adj[i].node < adj[i].nbr ? adj[i].nbr : adj[i].node,
                           adj[i - 1].line);
            rc = RUMOR_EPROTO;
            goto done;
        }
        ph->offset[adj[i].node + 1]++;
        if (adj[i].line > last_line[adj[i].node])
            last_line[adj[i].node] = adj[i].line;
    }
    for (size_t i = 0; i < n; i++)
        ph->offset[i + 1] += ph->offset[i];
    for (size_t i = 0; i < k; i++) {
        uint32_t di = ph->offset[adj[i].node + 1] - ph->offset[adj[i].node];
        uint32_t dj = ph->offset[adj[i].nbr + 1] - ph->offset[adj[i].nbr];
        ph->nbr[i] = adj[i].nbr;
        ph->given[i] = adj[i].given;
        ph->w[i] = adj[i].given ? adj[i].w : 1.0 / (1.0 + (di > dj ? di : dj));
    }
    ph->edges = k / 2;
    for (size_t i = 0; i < n; i++) {
        double sum = 0;
        for (uint32_t e = ph->offset[i]; e < ph->offset[i + 1]; e++)
            sum += ph->w[e];
        if (sum > 1.0 + RUMOR_TOPOLOGY_ROW_TOLERANCE) {
            rumor_diag_set(diag,
                           b->name,
                           last_line[i],
                           0,
                           "weights of node %zu sum to %.9g > 1",
                           i,
                           sum);
            rc = RUMOR_EPROTO;
            goto done;
        }
        ph->self[i] = sum > 1.0 ? 0.0 : 1.0 - sum;
    }
done:
    free(adj);
    free(last_line);
    return rc;
}

static size_t
s_find(size_t *parent, size_t x)
{
    while (parent[x] != x) {
        parent[x] = parent[parent[x]];
        x = parent[x];
    }
    return x;
}

static rumor_err
s_check_connected(const rumor_topology *t,
                  const char *name,
                  struct rumor_diag *diag)
{
    size_t *parent = calloc(t->n, sizeof *parent);
    if (parent == NULL)
        return RUMOR_ENOMEM;
    for (size_t i = 0; i < t->n; i++)
        parent[i] = i;
    for (size_t p = 0; p < t->phases; p++) {
        const struct topo_phase *ph = &t->phase[p];
        for (size_t i = 0; i < t->n; i++)
            for (uint32_t e = ph->offset[i]; e < ph->offset[i + 1]; e++)
                parent[s_find(parent, i)] = s_find(parent, ph->nbr[e]);
    }
    size_t root = s_find(parent, 0), lost = 0;
    for (size_t i = 1; i < t->n && lost == 0; i++)
        if (s_find(parent, i) != root)
            lost = i;
    free(parent);
    if (lost == 0)
        return RUMOR_OK;
    rumor_diag_set(diag,
                   name,
                   0,
                   0,
                   "graph is not connected: node %zu cannot reach node 0",
                   lost);
    return RUMOR_EPROTO;
}

static rumor_err
s_check_unique_nodes(const struct topo_builder *b, struct rumor_diag *diag)
{
    for (size_t i = 0; i < b->decl_count; i++) {
        const struct topo_decl *d = &b->decl[i];
        for (size_t j = 0; d->line != 0 && j < i; j++) {
            const struct topo_decl *o = &b->decl[j];
            if (o->line == 0)
                continue;
            bool same_endpoint = strcmp(d->endpoint, o->endpoint) == 0;
            bool same_key = d->key[0] && strcmp(d->key, o->key) == 0;
            if (same_endpoint || same_key) {
                rumor_diag_set(diag,
                               b->name,
                               d->line,
                               0,
                               "node %zu has the same %s as node %zu (line %d)",
                               i,
                               same_endpoint ? "endpoint" : "key",
                               j,
                               o->line);
                return RUMOR_EPROTO;
            }
        }
    }
    return RUMOR_OK;
}

static rumor_err
s_copy_nodes(const struct topo_builder *b, rumor_topology *t)
{
    t->endpoint = calloc(t->n, sizeof *t->endpoint);
    t->key = calloc(t->n, sizeof *t->key);
    if (t->endpoint == NULL || t->key == NULL)
        return RUMOR_ENOMEM;
    for (size_t i = 0; i < t->n && i < b->decl_count; i++) {
        if (b->decl[i].endpoint != NULL) {
            t->endpoint[i] = strdup(b->decl[i].endpoint);
            if (t->endpoint[i] == NULL)
                return RUMOR_ENOMEM;
        }
        memcpy(t->key[i], b->decl[i].key, sizeof t->key[i]);
    }
    return RUMOR_OK;
}

rumor_err
topo_build(struct topo_builder *b,
           rumor_topology **out,
           struct rumor_diag *diag)
{
    *out = NULL;
    rumor_topology *t = NULL;
    size_t n = 0;
    rumor_err rc = RUMOR_OK;
    if (b->matrix != NULL) {
        rc = s_edges_from_matrix(b, diag);
        if (rc != RUMOR_OK)
            goto done;
    }
    rc = s_node_count(b, &n, diag);
    if (rc == RUMOR_OK)
        rc = s_check_ids(b, n, diag);
    if (rc == RUMOR_OK)
        rc = s_check_unique_nodes(b, diag);
    if (rc != RUMOR_OK)
        goto done;
    t = calloc(1, sizeof *t);
    if (t == NULL) {
        rc = RUMOR_ENOMEM;
        goto done;
    }
    t->n = n;
    t->phases = b->phases;
    t->phase = calloc(t->phases, sizeof *t->phase);
    if (t->phase == NULL) {
        rc = RUMOR_ENOMEM;
        goto done;
    }
    for (size_t p = 0; p < t->phases && rc == RUMOR_OK; p++)
        rc = s_build_phase(b, (uint32_t)p, n, &t->phase[p], diag);
    if (rc == RUMOR_OK && b->matrix != NULL) {
        for (size_t i = 0; i < n; i++)
            t->phase[0].self[i] = b->matrix[i * n + i];
    }
    if (rc == RUMOR_OK)
        rc = s_check_connected(t, b->name, diag);
    if (rc == RUMOR_OK)
        rc = s_copy_nodes(b, t);
done:
    if (rc != RUMOR_OK) {
        rumor_topology_destroy(&t);
        return rc;
    }
    *out = t;
    return RUMOR_OK;
}

void
rumor_topology_destroy(rumor_topology **self_p)
{
    rumor_topology *t = *self_p;
    if (t == NULL)
        return;
    for (size_t p = 0; t->phase != NULL && p < t->phases; p++) {
        free(t->phase[p].offset);
        free(t->phase[p].nbr);
        free(t->phase[p].w);
        free(t->phase[p].given);
        free(t->phase[p].self);
    }
    for (size_t i = 0; t->endpoint != NULL && i < t->n; i++)
        free(t->endpoint[i]);
    free(t->endpoint);
    free(t->key);
    free(t->phase);
    free(t);
    *self_p = NULL;
}

/* --- queries ------------------------------------------------------------- */

size_t
rumor_topology_nodes(const rumor_topology *t)
{
    return t->n;
}

size_t
rumor_topology_phases(const rumor_topology *t)
{
    return t->phases;
}

size_t
rumor_topology_phase_at(const rumor_topology *t, uint64_t step)
{
    return (size_t)(step % t->phases);
}

size_t
rumor_topology_edges(const rumor_topology *t, size_t phase)
{
    assert(phase < t->phases);
    return t->phase[phase].edges;
}

const uint32_t *
rumor_topology_neighbors(const rumor_topology *t,
                         size_t phase,
                         size_t node,
                         size_t *count,
                         const double **weights)
{
    assert(phase < t->phases && node < t->n);
    const struct topo_phase *ph = &t->phase[phase];
    *count = ph->offset[node + 1] - ph->offset[node];
    if (weights != NULL)
        *weights = ph->w + ph->offset[node];
    return ph->nbr + ph->offset[node];
}

double
rumor_topology_self_weight(const rumor_topology *t, size_t phase, size_t node)
{
    assert(phase < t->phases && node < t->n);
    return t->phase[phase].self[node];
}

double
rumor_topology_weight(const rumor_topology *t, size_t phase, size_t i, size_t j)
{
    if (i == j)
        return rumor_topology_self_weight(t, phase, i);
    size_t count = 0;
    const double *w = NULL;
    const uint32_t *nbr = rumor_topology_neighbors(t, phase, i, &count, &w);
    for (size_t k = 0; k < count; k++)
        if (nbr[k] == j)
            return w[k];
    return 0.0;
}

const char *
rumor_topology_endpoint(const rumor_topology *t, size_t node)
{
    assert(node < t->n);
    return t->endpoint[node];
}

const char *
rumor_topology_key(const rumor_topology *t, size_t node)
{
    assert(node < t->n);
    return t->key[node][0] ? t->key[node] : NULL;
}

rumor_err
rumor_topology_set_node(rumor_topology *t,
                        size_t node,
                        const char *endpoint,
                        const char *key,
                        struct rumor_diag *diag)
{
    const char *why = NULL;
    if (node >= t->n) {
        rumor_diag_set(diag, "", 0, 0, "node %zu out of range", node);
        return RUMOR_EINVAL;
    }
    if (endpoint != NULL && !topo_endpoint_valid(endpoint, &why)) {
        rumor_diag_set(diag, "", 0, 0, "node %zu: %s", node, why);
        return RUMOR_EINVAL;
    }
    if (key != NULL && !topo_key_valid(key, &why)) {
        rumor_diag_set(diag, "", 0, 0, "node %zu: %s", node, why);
        return RUMOR_EINVAL;
    }
    if (endpoint != NULL) {
        char *copy = strdup(endpoint);
        if (copy == NULL)
            return RUMOR_ENOMEM;
        free(t->endpoint[node]);
        t->endpoint[node] = copy;
    }
    if (key != NULL)
        memcpy(t->key[node], key, sizeof t->key[node]);
    return RUMOR_OK;
}

void
rumor_topology_matrix(const rumor_topology *t, size_t phase, double *w)
{
    assert(phase < t->phases);
    const struct topo_phase *ph = &t->phase[phase];
    memset(w, 0, t->n * t->n * sizeof *w);
    for (size_t i = 0; i < t->n; i++) {
        w[i * t->n + i] = ph->self[i];
        for (uint32_t e = ph->offset[i]; e < ph->offset[i + 1]; e++)
            w[i * t->n + ph->nbr[e]] = ph->w[e];
    }
}

bool
rumor_topology_doubly_stochastic(const rumor_topology *t)
{
    for (size_t p = 0; p < t->phases; p++) {
        const struct topo_phase *ph = &t->phase[p];
        for (size_t i = 0; i < t->n; i++) {
            double sum = ph->self[i];
            for (uint32_t e = ph->offset[i]; e < ph->offset[i + 1]; e++) {
                sum += ph->w[e];
                if (ph->w[e] < 0 ||
                    rumor_topology_weight(t, p, ph->nbr[e], i) != ph->w[e])
                    return false;
            }
            if (ph->self[i] < 0 ||
                fabs(sum - 1.0) > RUMOR_TOPOLOGY_ROW_TOLERANCE)
                return false;
        }
    }
    return true;
}

/* --- spectrum ------------------------------------------------------------ */

static rumor_err
s_gap_static(const rumor_topology *t, double *w, double *gap)
{
    size_t n = t->n;
    double *ev = malloc(n * sizeof *ev);
    if (ev == NULL)
        return RUMOR_ENOMEM;
    rumor_topology_matrix(t, 0, w);
    lapack_int info = LAPACKE_dsyev(LAPACK_ROW_MAJOR,
                                    'N',
                                    'U',
                                    (lapack_int)n,
                                    w,
                                    (lapack_int)n,
                                    ev);
    if (info == 0) {
        double second = fabs(ev[n - 2]), last = fabs(ev[0]);
        *gap = 1.0 - (second > last ? second : last);
    }
    free(ev);
    return info == 0 ? RUMOR_OK : RUMOR_EBACKEND;
}

static rumor_err
s_gap_period(const rumor_topology *t, double *w, double *gap)
{
    size_t n = t->n;
    rumor_err rc = RUMOR_OK;
    double *prod = calloc(n * n, sizeof *prod);
    double *next = malloc(n * n * sizeof *next);
    double *sv = malloc(n * sizeof *sv);
    double *superb = malloc(n * sizeof *superb);
    if (!prod || !next || !sv || !superb) {
        rc = RUMOR_ENOMEM;
        goto done;
    }
    for (size_t i = 0; i < n; i++)
        prod[i * n + i] = 1.0;
    for (size_t p = 0; p < t->phases; p++) {
        rumor_topology_matrix(t, p, w);
        cblas_dgemm(CblasRowMajor,
                    CblasNoTrans,
                    CblasNoTrans,
                    (int)n,
                    (int)n,
                    (int)n,
                    1.0,
                    w,
                    (int)n,
                    prod,
                    (int)n,
                    0.0,
                    next,
                    (int)n);
        double *swap = prod;
        prod = next;
        next = swap;
    }
    for (size_t i = 0; i < n * n; i++)
        prod[i] -= 1.0 / (double)n;
    lapack_int info = LAPACKE_dgesvd(LAPACK_ROW_MAJOR,
                                     'N',
                                     'N',
                                     (lapack_int)n,
                                     (lapack_int)n,
                                     prod,
                                     (lapack_int)n,
                                     sv,
                                     NULL,
                                     1,
                                     NULL,
                                     1,
                                     superb);
    if (info != 0)
        rc = RUMOR_EBACKEND;
    else
        *gap = 1.0 - sv[0];
done:
    free(prod);
    free(next);
    free(sv);
    free(superb);
    return rc;
}

rumor_err
rumor_topology_spectral_gap(const rumor_topology *t, double *gap)
{
    if (t->n == 1) {
        *gap = 1.0;
        return RUMOR_OK;
    }
    double *w = malloc(t->n * t->n * sizeof *w);
    if (w == NULL)
        return RUMOR_ENOMEM;
    rumor_err rc =
        t->phases == 1 ? s_gap_static(t, w, gap) : s_gap_period(t, w, gap);
    free(w);
    return rc;
}

rumor_err
rumor_topology_mixing_norm(const rumor_topology *t, double *beta)
{
    size_t n = t->n;
    double *w = malloc(n * n * sizeof *w), *ev = malloc(n * sizeof *ev);
    rumor_err rc = w != NULL && ev != NULL ? RUMOR_OK : RUMOR_ENOMEM;
    *beta = 0;
    for (size_t k = 0; k < t->phases && rc == RUMOR_OK; k++) {
        rumor_topology_matrix(t, k, w);
        lapack_int info = LAPACKE_dsyev(LAPACK_ROW_MAJOR,
                                        'N',
                                        'U',
                                        (lapack_int)n,
                                        w,
                                        (lapack_int)n,
                                        ev);
        if (info != 0)
            rc = RUMOR_EBACKEND;
        else if (1.0 - ev[0] > *beta)
            *beta = 1.0 - ev[0]; /* ascending: ev[0] is lambda_min */
    }
    free(w);
    free(ev);
    return rc;
}

/* --- output -------------------------------------------------------------- */

static rumor_err s_appendf(rumor_buf *out, const char *fmt, ...)
    RUMOR_PRINTF(2, 3);

static rumor_err
s_appendf(rumor_buf *out, const char *fmt, ...)
{
    char line[RUMOR_TOPOLOGY_ENDPOINT_BYTES + 128];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    if (n < 0 || (size_t)n >= sizeof line)
        return RUMOR_ETOOBIG;
    return rumor_buf_append(out, line, (size_t)n);
}

static rumor_err
s_format_edges(const rumor_topology *t, size_t p, rumor_buf *out)
{
    const struct topo_phase *ph = &t->phase[p];
    rumor_err rc = RUMOR_OK;
    for (size_t i = 0; i < t->n && rc == RUMOR_OK; i++) {
        for (uint32_t e = ph->offset[i]; e < ph->offset[i + 1]; e++) {
            if (ph->nbr[e] < i)
                continue;
            rc = ph->given[e] ? s_appendf(out,
                                          "edge %zu %u %.17g\n",
                                          i,
                                          ph->nbr[e],
                                          ph->w[e])
                              : s_appendf(out, "edge %zu %u\n", i, ph->nbr[e]);
            if (rc != RUMOR_OK)
                break;
        }
    }
    return rc;
}

rumor_err
rumor_topology_format(const rumor_topology *t, rumor_buf *out)
{
    rumor_err rc = s_appendf(out, "nodes %zu\n", t->n);
    for (size_t i = 0; i < t->n && rc == RUMOR_OK; i++) {
        if (t->endpoint[i] == NULL)
            continue;
        rc = t->key[i][0] ? s_appendf(out,
                                      "node %zu %s key=%s\n",
                                      i,
                                      t->endpoint[i],
                                      t->key[i])
                          : s_appendf(out, "node %zu %s\n", i, t->endpoint[i]);
    }
    for (size_t p = 0; p < t->phases && rc == RUMOR_OK; p++) {
        if (t->phases > 1)
            rc = s_appendf(out, "phase %zu\n", p);
        if (rc == RUMOR_OK)
            rc = s_format_edges(t, p, out);
    }
    return rc;
}

rumor_err
rumor_topology_format_dot(const rumor_topology *t, rumor_buf *out)
{
    static const char *const colors[] =
        {"black", "red", "blue", "darkgreen", "orange", "purple"};
    rumor_err rc = s_appendf(out, "graph rumor {\n  node [shape=circle];\n");
    for (size_t i = 0; i < t->n && rc == RUMOR_OK; i++)
        rc = s_appendf(out, "  %zu;\n", i);
    for (size_t p = 0; p < t->phases && rc == RUMOR_OK; p++) {
        const struct topo_phase *ph = &t->phase[p];
        for (size_t i = 0; i < t->n && rc == RUMOR_OK; i++) {
            for (uint32_t e = ph->offset[i]; e < ph->offset[i + 1]; e++) {
                if (ph->nbr[e] < i)
                    continue;
                rc = s_appendf(out,
                               "  %zu -- %u [label=\"%.3g\", color=%s];\n",
                               i,
                               ph->nbr[e],
                               ph->w[e],
                               colors[p % (sizeof colors / sizeof colors[0])]);
                if (rc != RUMOR_OK)
                    break;
            }
        }
    }
    if (rc == RUMOR_OK)
        rc = s_appendf(out, "}\n");
    return rc;
}
