/*
 * The gossip instance: algorithm dispatch, the flat view of a model, and
 * inbox checks shared by the algorithms.
 *
 * Payloads of raw float32 are little-endian on the wire; every supported
 * host is little-endian (checked at compile time below), so a memcpy is
 * the encoding. Received messages are checked (sender expected, no
 * duplicate, exact length, finite values) before any of them touches the
 * model: a rejected round leaves the model as it was (R8.4).
 */
#include "rumor/gossip.h"

#include "gossip/adapt.h"
#include "gossip/gossip_impl.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

_Static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
               "float32 payloads are little-endian memcpy");

static const struct gossip_algo_i *const s_algos[] = {
    &gossip_allreduce,
    &gossip_allreduce_f64,
    &gossip_dpsgd,
    &gossip_choco,
    &gossip_powergossip,
    &gossip_powersgd,
    &gossip_localsgd,
    &gossip_deepsqueeze,
    &gossip_moniqua,
};

#define ALGO_COUNT (sizeof s_algos / sizeof s_algos[0])

size_t
rumor_tensor_numel(const struct rumor_tensor *t)
{
    size_t n = 1;
    for (size_t d = 0; d < t->ndim; d++)
        n *= t->shape[d];
    return n;
}

void
rumor_gossip_opts_default(struct rumor_gossip_opts *opts)
{
    memset(opts, 0, sizeof *opts);
    snprintf(opts->algo, sizeof opts->algo, "dpsgd");
    snprintf(opts->codec, sizeof opts->codec, "qsgd:bits=4");
    opts->gamma = RUMOR_GOSSIP_GAMMA_AUTO;
    opts->iterations = 1;
    opts->period = 1;
    opts->fragments = 1;
    opts->outer_lr = 1.0;
    opts->theta = 0.1;
    opts->seed = 1;
    snprintf(opts->saef_scope, sizeof opts->saef_scope, "neighbourhood");
    opts->adapt_density = 0.02;
    opts->adapt_error = 0.25;
    opts->adapt_lambda = 4.0;
    opts->min_compression_rate = 2.0;
    opts->use_error_feedback = true;
    opts->warm_start = true;
    opts->batch_same_shape = true;
}

size_t
rumor_gossip_rank(const struct rumor_gossip_opts *opts)
{
    if (opts->rank > 0)
        return opts->rank;
    return strcmp(opts->algo, "powersgd") == 0 ? RUMOR_GOSSIP_PSGD_RANK : 1;
}

static bool
s_is_saef(const char *ef)
{
    return strncmp(ef, "saef", 4) == 0 && (ef[4] == '\0' || ef[4] == ':');
}

rumor_err
rumor_gossip_ef_check(const struct rumor_gossip_opts *opts,
                      struct rumor_diag *diag)
{
    static const struct {
        const char *algo, *why;
    } refuse[] = {
        {"allreduce-f64", "it averages exactly (nothing is dropped)"},
        {"dpsgd", "it sends models uncompressed"},
        {"choco",
         "its public copies x_hat are its error compensation (the "
         "difference x - x_hat carries what was not sent)"},
        {"deepsqueeze", "it keeps its own error compensation"},
        {"powergossip",
         "its power iteration carries the rest of the difference (no "
         "error feedback in the reference)"},
        {"powersgd", "it keeps its own memory (use_error_feedback)"},
        {"moniqua", "it quantizes x modulo theta, bounded without memory"},
    };
    const char *why = NULL;
    if (opts->ef[0] == '\0')
        return RUMOR_OK;
    for (size_t i = 0; i < sizeof refuse / sizeof refuse[0]; i++)
        if (strcmp(opts->algo, refuse[i].algo) == 0)
            why = refuse[i].why;
    if (strcmp(opts->algo, "allreduce") == 0 && !opts->compressed)
        why = "it needs a codec (--codec) to compress with";
    else if (strcmp(opts->algo, "allreduce") == 0 && s_is_saef(opts->ef))
        why = "saef's error comes back only through local SGD's "
              "look-ahead and e_bar, which the all-reduce has not (its "
              "error would be kept and never sent): use ef or ef-decay";
    if (strcmp(opts->algo, "localsgd") == 0 && opts->delta_codec[0] == '\0')
        why = "it needs a delta codec (--delta-codec) to compress with";
    if (why == NULL)
        return RUMOR_OK;
    rumor_diag_set(diag,
                   "",
                   0,
                   0,
                   "--ef %s does not apply to --algo %s: %s",
                   opts->ef,
                   opts->algo,
                   why);
    return RUMOR_EINVAL;
}

rumor_err
rumor_gossip_stale_check(const struct rumor_gossip_opts *opts,
                         bool gradients,
                         struct rumor_diag *diag)
{
    bool localsgd = strcmp(opts->algo, "localsgd") == 0;
    if (opts->stale == 0)
        return RUMOR_OK;
    if (gradients || strcmp(opts->algo, "powersgd") == 0)
        rumor_diag_set(diag,
                       "",
                       0,
                       0,
                       "--stale needs the model exchange: %s averages "
                       "gradients, which must land before the optimizer "
                       "step that uses them (use --stale 0)",
                       opts->algo);
    else if (localsgd && opts->stale > opts->period)
        rumor_diag_set(diag,
                       "",
                       0,
                       0,
                       "localsgd: stale (%u) must be at most period (%u): a "
                       "synchronization lands before the next one of the "
                       "same fragment starts",
                       opts->stale,
                       opts->period);
    else if (localsgd && opts->ef_alpha > 0)
        rumor_diag_set(diag,
                       "",
                       0,
                       0,
                       "localsgd: stale needs ef_alpha 0 (the step-ahead "
                       "look-ahead moves the live model, not the "
                       "exchange's snapshot)");
    else
        return RUMOR_OK;
    return RUMOR_EINVAL;
}

static rumor_err
s_copy_model(rumor_gossip *g,
             const struct rumor_model *model,
             struct rumor_diag *diag)
{
    if (model->count == 0 || model->count > RUMOR_GOSSIP_MAX_TENSORS) {
        rumor_diag_set(diag,
                       "",
                       0,
                       0,
                       "a model needs 1 to %d tensors, got %zu",
                       RUMOR_GOSSIP_MAX_TENSORS,
                       model->count);
        return RUMOR_EINVAL;
    }
    g->tensors = malloc(model->count * sizeof *g->tensors);
    if (g->tensors == NULL)
        return RUMOR_ENOMEM;
    memcpy(g->tensors, model->tensors, model->count * sizeof *g->tensors);
    g->tensor_count = model->count;
    for (size_t i = 0; i < model->count; i++) {
        if (model->tensors[i].ndim > RUMOR_GOSSIP_MAX_DIMS ||
            model->tensors[i].data == NULL) {
            rumor_diag_set(diag, "", 0, 0, "tensor %zu is invalid", i);
            return RUMOR_EINVAL;
        }
        g->numel += rumor_tensor_numel(&model->tensors[i]);
    }
    return RUMOR_OK;
}

/* The codec the algorithm compresses its messages with: opts.codec for
 * the algorithms that send codec payloads, localsgd's delta codec. */
static rumor_err
s_codec_id(rumor_gossip *g, struct rumor_diag *diag)
{
    const char *spec = "";
    if (g->algo == &gossip_choco || g->algo == &gossip_choco_edge ||
        g->algo == &gossip_deepsqueeze || g->algo == &gossip_allreduce_codec)
        spec = g->opts.codec;
    else if (g->algo == &gossip_localsgd)
        spec = g->opts.delta_codec;
    if (spec[0] == '\0')
        return RUMOR_OK;
    rumor_codec *c = NULL;
    rumor_err rc = rumor_codec_new(spec, &c, diag);
    if (rc == RUMOR_OK)
        g->codec = (uint8_t)rumor_codec_id_of(c);
    rumor_codec_destroy(&c);
    return rc;
}

/* The default ring: every node of the topology. */
static rumor_err
s_ring_all(rumor_gossip *g)
{
    g->ring = malloc(g->nodes * sizeof *g->ring);
    if (g->ring == NULL)
        return RUMOR_ENOMEM;
    for (size_t i = 0; i < g->nodes; i++)
        g->ring[i] = (uint32_t)i;
    g->ring_n = g->nodes;
    g->ring_pos = g->self;
    return RUMOR_OK;
}

/* The model memory of a device; RUMOR_ENOTSUP (diag) for CUDA memory
 * without a usable GPU. */
static rumor_err
s_backend_of(rumor_device device,
             const struct gossip_backend_i **be,
             struct rumor_diag *diag)
{
    *be = &gossip_backend_host;
    if (device == RUMOR_DEVICE_CPU)
        return RUMOR_OK;
    const char *why = "unknown device";
    rumor_err rc = RUMOR_EINVAL;
    if (device == RUMOR_DEVICE_CUDA)
        rc = gossip_backend_cuda(be, &why);
    if (rc != RUMOR_OK)
        rumor_diag_set(diag, "", 0, 0, "a model on the GPU: %s", why);
    return rc;
}

rumor_err
rumor_gossip_new_on(const struct rumor_gossip_opts *opts,
                    const rumor_topology *t,
                    uint32_t self,
                    const struct rumor_model *model,
                    rumor_device device,
                    rumor_gossip **out,
                    struct rumor_diag *diag)
{
    *out = NULL;
    const struct gossip_backend_i *be = NULL;
    rumor_err rc = s_backend_of(device, &be, diag);
    return rc == RUMOR_OK ? gossip_new_in(opts, t, self, model, be, out, diag)
                          : rc;
}

rumor_err
rumor_gossip_new(const struct rumor_gossip_opts *opts,
                 const rumor_topology *t,
                 uint32_t self,
                 const struct rumor_model *model,
                 rumor_gossip **out,
                 struct rumor_diag *diag)
{
    return rumor_gossip_new_on(opts,
                               t,
                               self,
                               model,
                               RUMOR_DEVICE_CPU,
                               out,
                               diag);
}

static const struct gossip_algo_i *
s_algo_named(const char *name)
{
    for (size_t i = 0; i < ALGO_COUNT; i++)
        if (strcmp(s_algos[i]->name, name) == 0)
            return s_algos[i];
    return NULL;
}

bool
rumor_gossip_algo_rings(const char *algo)
{
    const struct gossip_algo_i *a = algo != NULL ? s_algo_named(algo) : NULL;
    return a != NULL && a->uses_ring != NULL;
}

void
rumor_gossip_pcie_bytes(const rumor_gossip *g,
                        uint64_t *to_device,
                        uint64_t *to_host)
{
    *to_device = 0;
    *to_host = 0;
    if (g->be->host_memory)
        return; /* the host's own table copies nothing across */
    *to_device = g->pcie_h2d;
    *to_host = g->pcie_d2h;
    if (g->algo->pcie != NULL)
        g->algo->pcie(g, to_device, to_host);
}

rumor_err
gossip_new_in(const struct rumor_gossip_opts *opts,
              const rumor_topology *t,
              uint32_t self,
              const struct rumor_model *model,
              const struct gossip_backend_i *be,
              rumor_gossip **out,
              struct rumor_diag *diag)
{
    *out = NULL;
    const struct gossip_algo_i *algo = s_algo_named(opts->algo);
    if (algo == NULL) {
        rumor_diag_set(
            diag,
            "",
            0,
            0,
            "unknown gossip algorithm '%s' (allreduce, allreduce-f64, "
            "dpsgd, choco, "
            "powergossip, powersgd, localsgd, deepsqueeze, moniqua)",
            opts->algo);
        return RUMOR_EINVAL;
    }
    if (algo == &gossip_allreduce && opts->compressed)
        algo = &gossip_allreduce_codec;
    if (rumor_gossip_ef_check(opts, diag) != RUMOR_OK ||
        gossip_robust_check(opts, diag) != RUMOR_OK)
        return RUMOR_EINVAL;
    if (self >= rumor_topology_nodes(t)) {
        rumor_diag_set(diag, "", 0, 0, "node %u is not in the topology", self);
        return RUMOR_EINVAL;
    }
    rumor_gossip *g = calloc(1, sizeof *g);
    if (g == NULL)
        return RUMOR_ENOMEM;
    g->algo = algo;
    g->be = be;
    g->opts = *opts;
    g->opts.rank = rumor_gossip_rank(opts);
    g->topo = t;
    g->self = self;
    g->nodes = rumor_topology_nodes(t);
    rumor_err rc = s_ring_all(g);
    if (rc == RUMOR_OK)
        rc = s_copy_model(g, model, diag);
    if (rc == RUMOR_OK)
        rc = gossip_gamma_resolve(g, diag);
    if (rc == RUMOR_OK && opts->adapt[0] != '\0')
        rc = gossip_adapt_attach(g, diag);
    if (rc == RUMOR_OK)
        rc = g->algo->init(g, diag);
    if (rc == RUMOR_OK)
        rc = s_codec_id(g, diag);
    if (rc != RUMOR_OK) {
        rumor_gossip_destroy(&g);
        return rc;
    }
    *out = g;
    return RUMOR_OK;
}

uint8_t
rumor_gossip_codec(const rumor_gossip *g)
{
    return g->codec;
}

void
rumor_gossip_destroy(rumor_gossip **self_p)
{
    rumor_gossip *g = *self_p;
    if (g == NULL)
        return;
    g->algo->free(g);
    gossip_ledger_free(g);
    gossip_robust_free(g);
    gossip_adapt_destroy(&g->adapt);
    free(g->tensors);
    free(g->out);
    free(g->ring);
    free(g);
    *self_p = NULL;
}

uint32_t
rumor_gossip_rounds(const rumor_gossip *g, uint64_t step)
{
    return g->algo->rounds(g, step);
}

bool
rumor_gossip_exchanges(const rumor_gossip *g, uint64_t step)
{
    return g->algo->exchanges == NULL || g->algo->exchanges(g, step);
}

/* Hands the driver out[out_handed..out_count). */
static void
s_out_hand(rumor_gossip *g)
{
    for (; g->out_handed < g->out_count; g->out_handed++)
        if (g->ready != NULL)
            g->ready(g->ready_arg, &g->out[g->out_handed]);
}

rumor_err
rumor_gossip_emit(rumor_gossip *g,
                  uint64_t step,
                  uint32_t round,
                  const struct rumor_gossip_msg **msgs,
                  size_t *count)
{
    return rumor_gossip_emit_each(g, step, round, NULL, NULL, msgs, count);
}

rumor_err
rumor_gossip_emit_each(rumor_gossip *g,
                       uint64_t step,
                       uint32_t round,
                       rumor_gossip_ready_fn ready,
                       void *arg,
                       const struct rumor_gossip_msg **msgs,
                       size_t *count)
{
    g->out_count = 0;
    g->out_handed = 0;
    g->ready = ready;
    g->ready_arg = arg;
    rumor_err rc = g->algo->emit(g, step, round);
    if (rc == RUMOR_OK) /* those the algorithm did not push */
        s_out_hand(g);
    g->ready = NULL;
    *msgs = g->out;
    *count = rc == RUMOR_OK ? g->out_count : 0;
    g->in_step = rc == RUMOR_OK && (round == 0 || g->in_step);
    return rc;
}

rumor_err
rumor_gossip_absorb(rumor_gossip *g,
                    uint64_t step,
                    uint32_t round,
                    const struct rumor_gossip_msg *msgs,
                    size_t count)
{
    /* before absorb, which may move the algorithm to another schedule */
    uint32_t rounds = g->algo->rounds(g, step);
    rumor_err rc = g->algo->absorb(g, step, round, msgs, count);
    g->in_step = rc == RUMOR_OK && round + 1 < rounds && g->in_step;
    return rc;
}

rumor_err
rumor_gossip_expected(const rumor_gossip *g,
                      uint64_t step,
                      uint32_t round,
                      uint32_t *peers,
                      size_t cap,
                      size_t *count)
{
    *count = g->algo->expected(g, step, round, peers, cap);
    return *count <= cap ? RUMOR_OK : RUMOR_ETOOBIG;
}

rumor_err
rumor_gossip_step_ahead(rumor_gossip *g)
{
    return g->algo->step_ahead != NULL ? g->algo->step_ahead(g) : RUMOR_OK;
}

void
rumor_gossip_step_abandon(rumor_gossip *g)
{
    if (g->algo->abandon != NULL)
        g->algo->abandon(g);
    g->in_step = false;
}

bool
rumor_gossip_uses_ring(const rumor_gossip *g)
{
    return g->algo->uses_ring != NULL && g->algo->uses_ring(g);
}

bool
gossip_always_ring(const rumor_gossip *g)
{
    (void)g;
    return true;
}

/* --- shared helpers ------------------------------------------------------ */

size_t
gossip_expected_neighbors(const rumor_gossip *g,
                          uint64_t step,
                          uint32_t round,
                          uint32_t *peers,
                          size_t cap)
{
    (void)round;
    size_t phase = rumor_topology_phase_at(g->topo, step), count = 0;
    const uint32_t *nbr =
        rumor_topology_neighbors(g->topo, phase, g->self, &count, NULL);
    if (count <= cap)
        memcpy(peers, nbr, count * sizeof *peers);
    return count;
}

size_t
gossip_expected_prev(const rumor_gossip *g,
                     uint64_t step,
                     uint32_t round,
                     uint32_t *peers,
                     size_t cap)
{
    (void)step;
    (void)round;
    if (cap >= 1)
        peers[0] = gossip_ring_prev(g);
    return 1;
}

/* Walks the tensors covering [offset, offset + len) of the flat model,
 * copying through the model memory's table (kind as gossip_model_read /
 * _write say; host memory cannot fail). */
static rumor_err
s_flat_walk(const rumor_gossip *g,
            size_t offset,
            size_t len,
            float *buf,
            bool to_model,
            enum gossip_copy kind)
{
    size_t base = 0;
    rumor_err rc = RUMOR_OK;
    for (size_t i = 0; i < g->tensor_count && len > 0 && rc == RUMOR_OK; i++) {
        size_t numel = rumor_tensor_numel(&g->tensors[i]);
        if (offset < base + numel) {
            size_t at = offset - base;
            size_t take = numel - at < len ? numel - at : len;
            float *model = g->tensors[i].data + at;
            rc = to_model ? g->be->copy(model, buf, take * sizeof *buf, kind)
                          : g->be->copy(buf, model, take * sizeof *buf, kind);
            buf += take;
            offset += take;
            len -= take;
        }
        base += numel;
    }
    return rc;
}

void
gossip_flat_get(const rumor_gossip *g, size_t offset, size_t len, float *dst)
{
    (void)s_flat_walk(g, offset, len, dst, false, GOSSIP_TO_HOST);
}

void
gossip_flat_put(rumor_gossip *g, size_t offset, size_t len, const float *src)
{
    (void)s_flat_walk(g, offset, len, (float *)src, true, GOSSIP_TO_DEVICE);
}

static void
s_count(rumor_gossip *g, size_t bytes, enum gossip_copy kind)
{
    if (g->be->host_memory)
        return;
    if (kind == GOSSIP_TO_DEVICE)
        g->pcie_h2d += bytes;
    else if (kind == GOSSIP_TO_HOST)
        g->pcie_d2h += bytes;
}

rumor_err
gossip_mem_copy(rumor_gossip *g,
                void *dst,
                const void *src,
                size_t bytes,
                enum gossip_copy kind)
{
    s_count(g, bytes, kind);
    return g->be->copy(dst, src, bytes, kind);
}

rumor_err
gossip_term_diff(rumor_gossip *g,
                 double *d,
                 const float *a,
                 const float *b,
                 size_t n,
                 double *sq)
{
    if (g->be->diff_sq != NULL)
        return g->be->diff_sq(d, a, b, n, sq);
    return g->be->diff(d, a, b, n);
}

rumor_err
gossip_term_norm(rumor_gossip *g, const double *d, double sq, double *norm)
{
    if (g->be->diff_sq == NULL)
        return g->be->norm(d, g->numel, norm);
    *norm = sqrt(sq);
    return RUMOR_OK;
}

/* One chunk of gossip_apply_terms: n elements from element at of tensor
 * t (model element e) on, x (and from, where not NULL) pointing at the
 * first. */
static rumor_err
s_apply_chunk(rumor_gossip *g,
              float *x,
              const float *from,
              size_t t,
              size_t at,
              size_t e,
              size_t n,
              double *acc,
              const struct gossip_terms *terms)
{
    rumor_err rc = g->be->zero(acc, n * sizeof(double));
    for (size_t k = 0; k < terms->count && rc == RUMOR_OK; k++)
        rc = terms->peer != NULL
                 ? g->algo
                       ->term_add(g, terms->peer[k], t, at, n, terms->c[k], acc)
                 : g->be->axpy(acc, terms->c[k], terms->d[k] + e, n);
    if (rc != RUMOR_OK)
        return rc;
    return g->be->apply(x, from != NULL ? from : x, g->opts.gamma, acc, n);
}

/* Elements in a row of tensor t's matrix (0: a 1-D tensor). */
static size_t
s_row_of(const rumor_gossip *g, size_t t)
{
    const struct rumor_tensor *x = &g->tensors[t];
    size_t n = rumor_tensor_numel(x);
    return x->ndim >= 2 && x->shape[0] > 0 ? n / x->shape[0] : 0;
}

/* Elements of tensor t per chunk: an even number of whole rows of its
 * matrix (gossip_apply_bytes fits two of the widest), so a factored term
 * (term_add) rebuilds no row twice and its pairs of rows are those of a
 * whole rebuild. */
static size_t
s_chunk_of(const rumor_gossip *g, size_t t, size_t chunk)
{
    size_t row = s_row_of(g, t);
    if (row == 0 || 2 * row > chunk)
        return chunk;
    size_t rows = chunk / row;
    return (rows - rows % 2) * row;
}

rumor_err
gossip_apply_terms(rumor_gossip *g,
                   double *acc,
                   const float *from,
                   const struct gossip_terms *terms)
{
    size_t most = gossip_apply_bytes(g) / sizeof(double), e = 0;
    rumor_err rc = RUMOR_OK;
    if (terms->peer != NULL && g->algo->term_add == NULL)
        return RUMOR_EINVAL;
    for (size_t t = 0; t < g->tensor_count && rc == RUMOR_OK; t++) {
        float *x = g->tensors[t].data;
        size_t n = rumor_tensor_numel(&g->tensors[t]);
        size_t chunk = s_chunk_of(g, t, most);
        for (size_t at = 0; at < n && rc == RUMOR_OK; at += chunk) {
            size_t len = n - at < chunk ? n - at : chunk;
            const float *f = from != NULL ? from + e + at : NULL;
            rc = s_apply_chunk(g, x + at, f, t, at, e + at, len, acc, terms);
        }
        e += n;
    }
    return rc;
}

size_t
gossip_apply_bytes(const rumor_gossip *g)
{
    /* host memory: a chunk's sum stays in cache between its passes */
    size_t chunk = GOSSIP_APPLY_CHUNK;
    for (size_t t = 0; t < g->tensor_count; t++)
        if (2 * s_row_of(g, t) > chunk)
            chunk = 2 * s_row_of(g, t);
    bool chunked = g->be->host_memory && g->numel > chunk;
    return (chunked ? chunk : g->numel) * sizeof(double);
}

rumor_err
gossip_model_read(rumor_gossip *g,
                  size_t offset,
                  size_t len,
                  float *buf,
                  enum gossip_copy kind)
{
    s_count(g, len * sizeof *buf, kind);
    return s_flat_walk(g, offset, len, buf, false, kind);
}

rumor_err
gossip_model_write(rumor_gossip *g,
                   size_t offset,
                   size_t len,
                   const float *buf,
                   enum gossip_copy kind)
{
    s_count(g, len * sizeof *buf, kind);
    return s_flat_walk(g, offset, len, (float *)buf, true, kind);
}

uint32_t
gossip_one_round(const rumor_gossip *g, uint64_t step)
{
    (void)g;
    (void)step;
    return 1;
}

rumor_err
gossip_out_to_neighbors(rumor_gossip *g,
                        uint64_t step,
                        const uint8_t *data,
                        size_t len)
{
    size_t phase = rumor_topology_phase_at(g->topo, step), count = 0;
    const uint32_t *nbr =
        rumor_topology_neighbors(g->topo, phase, g->self, &count, NULL);
    rumor_err rc = gossip_out_reserve(g, count);
    for (size_t k = 0; k < count && rc == RUMOR_OK; k++)
        g->out[k] = (struct rumor_gossip_msg){nbr[k], data, len};
    return rc;
}

rumor_err
gossip_out_reserve(rumor_gossip *g, size_t count)
{
    if (count > g->out_alloc) {
        struct rumor_gossip_msg *out = realloc(g->out, count * sizeof *out);
        if (out == NULL)
            return RUMOR_ENOMEM;
        g->out = out;
        g->out_alloc = count;
    }
    g->out_count = count;
    return RUMOR_OK;
}

rumor_err
gossip_out_start(rumor_gossip *g, size_t count)
{
    rumor_err rc = gossip_out_reserve(g, count);
    g->out_count = 0;
    return rc;
}

void
gossip_out_push(rumor_gossip *g, struct rumor_gossip_msg m)
{
    g->out[g->out_count++] = m;
    s_out_hand(g);
}

rumor_err
gossip_match_inbox(const rumor_gossip *g,
                   const uint32_t *peers,
                   size_t peer_count,
                   const struct rumor_gossip_msg *msgs,
                   size_t count,
                   size_t want_len,
                   const struct rumor_gossip_msg **slot)
{
    for (size_t k = 0; k < peer_count; k++)
        slot[k] = NULL;
    for (size_t m = 0; m < count; m++) {
        size_t k = 0;
        while (k < peer_count && peers[k] != msgs[m].peer)
            k++;
        const char *why = NULL;
        if (k == peer_count)
            why = "not a peer in this round";
        else if (slot[k] != NULL)
            why = "duplicate message";
        else if (msgs[m].len != want_len)
            why = "wrong payload size";
        if (why != NULL) {
            rumor_log(RUMOR_LOG_WARN,
                      "gossip %s: node %u rejected a message from %u: %s "
                      "(%zu bytes, expected %zu)",
                      g->algo->name,
                      g->self,
                      msgs[m].peer,
                      why,
                      msgs[m].len,
                      want_len);
            return RUMOR_EPROTO;
        }
        slot[k] = &msgs[m];
    }
    for (size_t k = 0; k < peer_count; k++) {
        if (slot[k] == NULL) {
            rumor_log(RUMOR_LOG_WARN,
                      "gossip %s: node %u has no message from %u",
                      g->algo->name,
                      g->self,
                      peers[k]);
            return RUMOR_ETIMEDOUT;
        }
    }
    return RUMOR_OK;
}

rumor_err
gossip_check_finite(const rumor_gossip *g, const struct rumor_gossip_msg *msg)
{
    size_t n = msg->len / sizeof(float);
    for (size_t i = 0; i < n; i++) {
        float v;
        memcpy(&v, msg->data + i * sizeof v, sizeof v);
        if (!isfinite(v)) {
            rumor_log(RUMOR_LOG_WARN,
                      "gossip %s: node %u rejected a message from %u: "
                      "non-finite value at %zu",
                      g->algo->name,
                      g->self,
                      msg->peer,
                      i);
            return RUMOR_ENUMERIC;
        }
    }
    return RUMOR_OK;
}
