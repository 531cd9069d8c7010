/*
 * The node runtime: one process of a decentralized training run. Each step
 * follows the reference implementations (Koloskova et al. 2020, CHOCO-SGD
 * code; Vogels et al. 2020, PowerGossip code):
 *   1. g_t = grad f_i(x_t) on step t's minibatch;
 *   2. gossip: the algorithm's rounds over the network, each with the
 *      step's deadline;
 *   3. x_{t+1} = optimizer step of the (gossiped) x_t with g_t.
 * For PowerSGD (Vogels et al. 2019), which is data-parallel gradient
 * compression in its paper, and for all-reduce as its uncompressed
 * baseline, step 2 averages g_t instead of x_t (exchange "gradient": every
 * node then holds the same model, as in data-parallel training); every
 * other algorithm gossips the model. The choice is an option (--exchange).
 * With model exchange, 1 and 2 both read x_t, so by default they overlap
 * (as the reference's "overlapping" DPSGD): a worker thread computes the
 * gradient on the model while the main thread gossips a copy, which then
 * becomes the model; the numbers are those of the sequential loop.
 *
 * The exchange with the neighbours (rounds, deadlines, the fault path,
 * the stop plan, the links) is node/exchange.c, which the peer API
 * (node/peer.c, under python/rumor) runs too, step for step as
 * rumor_node_run does; this file is the training around it.
 */
#include "rumor/node.h"

#include "gossip/backend.h"
#include "gossip/gossip_impl.h"
#include "node/checkpoint_impl.h"
#include "node/layout.h"
#include "node/runtime_node.h"
#include "train/train_impl.h"

#include <fcntl.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define NODE_PROGRESS_EVERY_NS 100000000ull /* terminal refresh: 10 Hz */

/* --- static helpers --------------------------------------------------- */

static double
s_since(uint64_t t0)
{
    return (double)(rumor_clock_ns() - t0) * 1e-9;
}

/* The algorithm settings that must match on every node, as the
 * "key=value" words of the HELLO description (node/layout.h). */
static size_t
s_settings(const struct rumor_node_opts *o, char *text, size_t cap)
{
    const struct rumor_gossip_opts *g = &o->gossip;
    int len =
        snprintf(text,
                 cap,
                 "algo=%s codec=%s compressed=%d ef=%s gamma=%g "
                 "rank=%zu iterations=%u "
                 "period=%u gossip-rounds=%u delta-codec=%s "
                 "outer-lr=%g outer-momentum=%g fragments=%u stale=%u "
                 "theta=%g exchange=%s",
                 g->algo,
                 g->codec,
                 g->compressed,
                 g->ef[0] != '\0' ? g->ef : "none",
                 g->gamma,
                 rumor_gossip_rank(g),
                 g->iterations,
                 g->period,
                 g->gossip_rounds,
                 g->delta_codec,
                 g->outer_lr,
                 g->outer_momentum,
                 g->fragments,
                 g->stale,
                 g->theta,
                 rumor_node_opts_gradient_exchange(o) ? "gradient" : "model");
    /* PowerSGD: the schedule (start, sides), which tensors travel as
     * factors, and what makes every node's Q and orthogonal P the same
     * (batching changes no number and may differ) */
    if (len >= 0 && (size_t)len < cap && strcmp(g->algo, "powersgd") == 0)
        len += snprintf(text + len,
                        cap - (size_t)len,
                        " start-powersgd-iter=%llu min-compression-rate=%g "
                        "use-error-feedback=%d warm-start=%d "
                        "orthogonalization-epsilon=%g one-sided=%d",
                        (unsigned long long)g->start_iter,
                        g->min_compression_rate,
                        g->use_error_feedback,
                        g->warm_start,
                        g->orth_eps,
                        g->one_sided);
    /* PowerGossip: an edge's two ends must start each iteration from the
     * same factor (both the last one, or both a fresh draw) */
    if (len >= 0 && (size_t)len < cap && strcmp(g->algo, "powergossip") == 0)
        len += snprintf(text + len,
                        cap - (size_t)len,
                        " warm-start=%d",
                        g->warm_start);
    /* local SGD's compressed payloads end with the crc32c of the anchor
     * (its first sync is compressed when the starts are equal): a node
     * from before that is refused at HELLO, not on a payload's length */
    if (len >= 0 && (size_t)len < cap && strcmp(g->algo, "localsgd") == 0 &&
        g->delta_codec[0] != '\0')
        len += snprintf(text + len, cap - (size_t)len, " anchor-check=crc32c");
    return len < 0 ? 0 : (size_t)len < cap ? (size_t)len : cap - 1;
}

/* Hash of what must match on every node (the settings, the model's
 * shapes), sent in HELLO so a misconfigured node is refused at once; the
 * description beside it says where two nodes differ. */
static uint64_t
s_fingerprint(const struct rumor_node_opts *o, const struct rumor_model *m)
{
    char text[NODE_LAYOUT_SETTINGS_MAX + 1];
    size_t len = s_settings(o, text, sizeof text);
    uint32_t lo = rumor_crc32c(0, text, len);
    uint64_t count = m->count;
    lo = rumor_crc32c(lo, &count, sizeof count);
    uint32_t hi = lo;
    for (size_t t = 0; t < m->count; t++)
        hi = rumor_crc32c(hi,
                          m->tensors[t].shape,
                          m->tensors[t].ndim * sizeof(size_t));
    return (uint64_t)hi << 32 | lo;
}

/* rumor_net_explain_fn: the first difference between a peer's HELLO
 * description and this node's. */
static bool
s_explain(void *arg,
          uint32_t peer,
          const uint8_t *desc,
          size_t desc_len,
          char *text,
          size_t cap)
{
    const rumor_node *node = arg;
    return node_layout_explain(node->desc,
                               node->desc_len,
                               node->opts.id,
                               desc,
                               desc_len,
                               peer,
                               text,
                               cap);
}

/* This node's HELLO description: its settings and tensor list. */
static rumor_err
s_describe(rumor_node *node)
{
    char settings[NODE_LAYOUT_SETTINGS_MAX + 1];
    s_settings(&node->opts, settings, sizeof settings);
    node->desc = malloc(RUMOR_NET_HELLO_DESC_MAX);
    if (node->desc == NULL)
        return RUMOR_ENOMEM;
    node->desc_len = node_layout_encode(settings,
                                        node->model,
                                        node->dtypes,
                                        node->desc,
                                        RUMOR_NET_HELLO_DESC_MAX);
    return RUMOR_OK;
}

static rumor_err
s_load_topology(rumor_node *node, struct rumor_diag *diag)
{
    const struct rumor_node_opts *o = &node->opts;
    rumor_err rc = rumor_topology_load_file(o->topology, &node->topo, diag);
    if (rc != RUMOR_OK)
        return rc;
    node->n = (uint32_t)rumor_topology_nodes(node->topo);
    if (o->id >= node->n) {
        rumor_diag_set(diag,
                       "",
                       0,
                       0,
                       "--id %u: the topology has %u nodes",
                       o->id,
                       node->n);
        return RUMOR_EINVAL;
    }
    if (rumor_topology_endpoint(node->topo, o->id) == NULL) {
        rumor_diag_set(diag,
                       o->topology,
                       0,
                       0,
                       "node %u has no endpoint",
                       o->id);
        return RUMOR_EPROTO; /* the file's fault, as its parse errors */
    }
    if (o->insecure)
        return RUMOR_OK;
    rc = rumor_net_keypair_load(o->key, &node->keys);
    if (rc != RUMOR_OK) {
        rumor_diag_set(diag,
                       o->key,
                       0,
                       0,
                       "cannot load %s.key: %s",
                       o->key,
                       rumor_strerror(rc));
        return rc;
    }
    const char *listed = rumor_topology_key(node->topo, o->id);
    const char *mine = rumor_net_keypair_public(node->keys);
    if (listed == NULL || strcmp(listed, mine) != 0) {
        rumor_diag_set(diag,
                       o->topology,
                       0,
                       0,
                       "node %u: the public key in the topology is not the "
                       "one of %s.key",
                       o->id,
                       o->key);
        return RUMOR_EAUTH;
    }
    return RUMOR_OK;
}

/* The algorithm on the model it mixes (the run seed is the workload's). */
static rumor_err
s_gossip_new(rumor_node *node,
             const struct rumor_model *mixed,
             struct rumor_diag *diag)
{
    struct rumor_gossip_opts go = node->opts.gossip;
    go.seed = node->opts.workload.seed;
    return gossip_new_in(&go,
                         node->topo,
                         node->opts.id,
                         mixed,
                         node->src.be != NULL ? node->src.be
                                              : &gossip_backend_host,
                         &node->g,
                         diag);
}

/* RUMOR_EINVAL with diag when opts ask for stale exchanges that cannot
 * run stale (docs/gossip.md, "Stale exchanges"). */
static rumor_err
s_stale_check(const struct rumor_node_opts *o, struct rumor_diag *diag)
{
    rumor_err rc =
        rumor_gossip_stale_check(&o->gossip,
                                 rumor_node_opts_gradient_exchange(o),
                                 diag);
    if (rc != RUMOR_OK || o->gossip.stale == 0 || o->consensus_every == 0)
        return rc;
    rumor_diag_set(diag,
                   "",
                   0,
                   0,
                   "--consensus-every talks to the neighbours between steps, "
                   "where --stale exchanges are under way: use one or the "
                   "other");
    return RUMOR_EINVAL;
}

/* The device memory `rumor node`'s model moves to (issue #31), or NULL:
 * the GPU's when the workload computes on CUDA; RUMOR_NODE_DEVICE (the
 * tests' hook) =ref the reference device's, with the CPU pass, =host
 * none (a --cuda node staged through the host, to compare with). */
static const struct gossip_backend_i *
s_model_device(const rumor_node *node)
{
    const struct gossip_backend_i *be = NULL;
    const char *hook = getenv("RUMOR_NODE_DEVICE"), *why = NULL;
    bool cuda = train_workload_device(node->w) == RUMOR_DEVICE_CUDA;
    if (hook != NULL && strcmp(hook, "host") == 0)
        return NULL;
    if (!cuda && hook != NULL && strcmp(hook, "ref") == 0)
        be = &gossip_backend_ref;
    else if (!cuda || gossip_backend_cuda(&be, &why) != RUMOR_OK)
        return NULL;
    return be;
}

/* What the algorithm mixes: the gradient (a gradient exchange), the
 * overlap's or stale exchanges' copy, or the model. */
static const struct rumor_model *
s_mixed(const rumor_node *node)
{
    if (rumor_node_opts_gradient_exchange(&node->opts))
        return node->grad;
    return node->mix != NULL ? node->mix : node->model;
}

/* Whether the algorithm takes a model in device memory with these
 * options (a codec without a device path, or a memory that steps on the
 * host, does not): the reference device refuses what CUDA does, decided
 * in host code, so an instance on it over the host model answers. When
 * not, one INFO line says why the model stays in host memory. */
static bool
s_device_takes(const rumor_node *node)
{
    struct rumor_gossip_opts go = node->opts.gossip;
    go.seed = node->opts.workload.seed;
    rumor_gossip *probe = NULL;
    struct rumor_diag why = {0};
    rumor_err rc = gossip_new_in(&go,
                                 node->topo,
                                 node->opts.id,
                                 s_mixed(node),
                                 &gossip_backend_ref,
                                 &probe,
                                 &why);
    rumor_gossip_destroy(&probe);
    if (rc == RUMOR_ENOTSUP)
        rumor_log(RUMOR_LOG_INFO,
                  "the model stays in host memory: %s",
                  why.msg);
    return rc != RUMOR_ENOTSUP;
}

/* node_model_src.to_host of a model in device memory: node->host. */
static rumor_err
s_to_host(void *arg, const struct rumor_model **host)
{
    rumor_node *node = arg;
    *host = node->host;
    return node_model_copy(node->src.be,
                           node->host,
                           node->model,
                           GOSSIP_TO_HOST);
}

/* node_model_src.to_device of a model in device memory: host (node->host,
 * or a join's model) into it. */
static rumor_err
s_from_host(void *arg, const struct rumor_model *host)
{
    rumor_node *node = arg;
    return node_model_copy(node->src.be, node->model, host, GOSSIP_TO_DEVICE);
}

/* Moves the model, the gradient, the optimizer and then the algorithm
 * (s_gossip_new) into be's memory: only batches and payloads cross from
 * then on. The optimizer is fresh (no state yet), so it is made anew. */
static rumor_err
s_to_device(rumor_node *node, const struct gossip_backend_i *be)
{
    rumor_err rc = rumor_model_clone(node->model, &node->host);
    if (rc == RUMOR_OK)
        rc = train_workload_place(node->w, be);
    size_t floats = 0;
    for (size_t k = 0; k < node->model->count; k++)
        floats += rumor_tensor_numel(&node->model->tensors[k]);
    if (rc == RUMOR_OK)
        rc = be->alloc(floats * sizeof(float), (void **)&node->device_grad);
    if (rc == RUMOR_OK && node->mix != NULL)
        rc = be->alloc(floats * sizeof(float), (void **)&node->device_mix);
    if (rc != RUMOR_OK)
        return rc;
    node->src = (struct node_model_src){.be = be,
                                        .to_host = s_to_host,
                                        .to_device = s_from_host,
                                        .arg = node};
    node->model = rumor_workload_model(node->w);
    float *g = node->device_grad, *x = node->device_mix;
    for (size_t k = 0; k < node->grad->count; k++) {
        size_t n = rumor_tensor_numel(&node->grad->tensors[k]);
        node->grad->tensors[k].data = g;
        g += n;
        if (x != NULL) {
            node->mix->tensors[k].data = x;
            x += n;
        }
    }
    rumor_optim_destroy(&node->optim);
    rc = train_optim_new_in(&node->opts.optim, node->model, be, &node->optim);
    rumor_log(RUMOR_LOG_INFO,
              "the model, its gradient and the optimizer are in %s memory",
              be->name);
    return rc;
}

/* The stale peer's node->mix: a copy of the caller's tensors, in their
 * memory (src.be's when the algorithm runs on them there). */
static rumor_err
s_peer_mix_new(rumor_node *node)
{
    const struct gossip_backend_i *be = node->src.be;
    if (be == NULL)
        return rumor_model_clone(node->model, &node->mix);
    size_t floats = 0;
    for (size_t k = 0; k < node->model->count; k++)
        floats += rumor_tensor_numel(&node->model->tensors[k]);
    rumor_err rc =
        be->alloc((floats + 1) * sizeof(float), (void **)&node->device_mix);
    if (rc == RUMOR_OK)
        rc = node_model_view(node->model, node->device_mix, &node->mix);
    return rc == RUMOR_OK
               ? node_model_copy(be, node->mix, node->model, GOSSIP_ON_DEVICE)
               : rc;
}

static rumor_err
s_build_training(rumor_node *node, struct rumor_diag *diag)
{
    const struct rumor_node_opts *o = &node->opts;
    rumor_err rc = s_stale_check(o, diag);
    if (rc != RUMOR_OK)
        return rc;
    /* the peer API: the caller's tensors, or with stale exchanges a copy
     * that only the exchange's thread touches */
    if (node->external && o->gossip.stale > 0)
        rc = s_peer_mix_new(node);
    if (node->external)
        return rc == RUMOR_OK
                   ? s_gossip_new(node,
                                  node->mix != NULL ? node->mix : node->model,
                                  diag)
                   : rc;
    struct rumor_workload_opts wo = o->workload;
    if (o->dataset[0] != '\0') {
        rc = rumor_dataset_open(o->dataset, wo.seed, &node->data, diag);
        if (rc != RUMOR_OK)
            return rc;
    }
    wo.dataset = node->data;
    wo.node = o->id;
    wo.nodes = node->n;
    rc = rumor_workload_new(&wo, &node->w, diag);
    /* The workload keeps copies of its shard and held-out set: the whole
     * dataset (220 MB of floats for Fashion-MNIST) need not stay. */
    rumor_dataset_destroy(&node->data);
    if (rc != RUMOR_OK)
        return rc;
    node->model = rumor_workload_model(node->w);
    if (o->workload.kind == RUMOR_WORKLOAD_LSQ)
        (void)rumor_workload_optimum(node->w, &node->optimum);
    rc = rumor_model_clone(node->model, &node->grad);
    /* The divergence reference: the initial model's loss on step 0's
     * batch, what a fresh run's first step sees. A resumed or joined node
     * starts near the optimum, where its own first loss can be 10^4 times
     * below the noise of the steps that follow. */
    if (rc == RUMOR_OK)
        rc = rumor_workload_grad(node->w, 0, node->grad, &node->first_loss);
    if (rc != RUMOR_OK)
        return rc;
    rc = rumor_optim_new(&o->optim, node->model, &node->optim);
    if (rc != RUMOR_OK) {
        rumor_diag_set(diag, "", 0, 0, "optimizer: %s", rumor_strerror(rc));
        return rc;
    }
    if (!rumor_node_opts_gradient_exchange(o) &&
        (o->overlap || o->gossip.stale > 0)) {
        rc = rumor_model_clone(node->model, &node->mix);
        if (rc != RUMOR_OK)
            return rc;
    }
    rc = s_gossip_new(node, s_mixed(node), diag);
    const struct gossip_backend_i *be =
        rc == RUMOR_OK ? s_model_device(node) : NULL;
    if (be == NULL || !s_device_takes(node))
        return rc;
    rumor_gossip_destroy(&node->g);
    rc = s_to_device(node, be);
    return rc == RUMOR_OK ? s_gossip_new(node, s_mixed(node), diag) : rc;
}

/* ZeroMQ binds to an address or an interface, never to a DNS name, while
 * peers connect to the endpoint the topology lists. A node whose endpoint
 * names a host (tcp://node-3:7000, as `rumor compose` and
 * scripts/rumor-slurm.sh write them) listens on every interface at that
 * port instead; tcp://localhost:P listens on 127.0.0.1. */
static const char *
s_bind_endpoint(const char *endpoint, char *buf, size_t cap)
{
    const char *host = endpoint + 6;
    const char *colon = strrchr(endpoint, ':');
    if (strncmp(endpoint, "tcp://", 6) != 0 || colon < host || host[0] == '[' ||
        host[0] == '*' || strspn(host, "0123456789.") >= (size_t)(colon - host))
        return endpoint;
    bool loopback = colon - host == 9 && strncmp(host, "localhost", 9) == 0;
    snprintf(buf, cap, "tcp://%s%s", loopback ? "127.0.0.1" : "*", colon);
    return buf;
}

static rumor_err
s_start_net(rumor_node *node, struct rumor_diag *diag)
{
    const struct rumor_node_opts *o = &node->opts;
    struct rumor_net_peer *peers = calloc(node->n, sizeof *peers);
    size_t count = 0;
    if (peers == NULL)
        return RUMOR_ENOMEM;
    rumor_err rc = rumor_net_peers_from_topology(node->topo,
                                                 o->id,
                                                 peers,
                                                 node->n,
                                                 &count);
    uint32_t next = (o->id + 1) % node->n;
    for (size_t k = 0; k < count && rc == RUMOR_OK; k++) {
        /* the peer API links it too, for its exact average() */
        if ((rumor_gossip_uses_ring(node->g) || node->external) &&
            peers[k].id == next)
            peers[k].link = true;
        /* an elastic ring's view change talks to every member */
        if (node_elastic_wanted(node))
            peers[k].link = true;
        if (peers[k].link && peers[k].endpoint == NULL) {
            rumor_diag_set(diag,
                           o->topology,
                           0,
                           0,
                           "node %u (a peer of node %u) has no endpoint",
                           peers[k].id,
                           o->id);
            rc = RUMOR_EPROTO;
        }
        if (peers[k].link)
            node->linked[node->nlinked++] = peers[k].id;
    }
    struct rumor_net_opts no;
    rumor_net_opts_default(&no);
    no.self = o->id;
    char bind_ep[RUMOR_TOPOLOGY_ENDPOINT_BYTES + 16];
    no.endpoint = s_bind_endpoint(rumor_topology_endpoint(node->topo, o->id),
                                  bind_ep,
                                  sizeof bind_ep);
    no.keys = node->keys;
    no.peers = peers;
    no.npeers = count;
    no.insecure = o->insecure;
    no.fingerprint = s_fingerprint(o, node->model);
    if (rc == RUMOR_OK)
        rc = s_describe(node);
    no.desc = node->desc;
    no.desc_len = node->desc_len;
    no.explain = s_explain;
    no.explain_arg = node;
    no.rate_bits = o->rate_bits;
    no.delay_ms = o->delay_ms;
    if (rc == RUMOR_OK)
        rc = rumor_net_new(&no, &node->net);
    if (rc == RUMOR_OK && o->metrics_listen[0] != '\0')
        rc = node_prom_start(o->metrics_listen, o->id, &node->prom, diag);
    if (rc == RUMOR_OK && node->prom != NULL) {
        node->prom_peers = calloc(node->nlinked + 1, sizeof *node->prom_peers);
        rc = node->prom_peers != NULL ? RUMOR_OK : RUMOR_ENOMEM;
    }
    if (rc != RUMOR_OK && diag->msg[0] == '\0')
        rumor_diag_set(diag,
                       "",
                       0,
                       0,
                       "transport on %s: %s",
                       no.endpoint,
                       rumor_strerror(rc));
    free(peers);
    return rc;
}

/* The exchange's counters: with stale exchanges, as their thread last
 * published them, and the training's waits are those of landing. */
static void
s_exchange_counters(const rumor_node *node, struct node_stale_counters *c)
{
    if (node->stale != NULL) {
        node_stale_counters(node->stale, c);
        c->t_wait = node->t_land_wait;
        return;
    }
    *c = (struct node_stale_counters){
        .t_gossip = node->t_gossip,
        .t_wait = node->t_wait,
        .gossip_bytes_sent = node->sum.gossip_bytes_sent,
        .gossip_bytes_recv = node->sum.gossip_bytes_recv,
        .gossip_frames_sent = node->gossip_frames_sent,
    };
    rumor_gossip_screen_stats(node->g, &c->screen);
    if (node->faults != NULL)
        node_faults_stats(node->faults, &c->faults);
    if (node->elastic != NULL)
        node_elastic_view(node->elastic, &c->epoch, &c->members);
}

/* The runtime's parts a checkpoint holds (node/checkpoint_state.c). */
static void
s_ckpt_parts(rumor_node *node,
             struct node_ckpt_parts *p,
             struct node_ckpt_counters *k)
{
    struct node_stale_counters c;
    s_exchange_counters(node, &c);
    *k = (struct node_ckpt_counters){
        .step = node->sum.steps,
        .loss = node->sum.loss,
        .gossip_bytes_sent = c.gossip_bytes_sent,
        .gossip_bytes_recv = c.gossip_bytes_recv,
        .gossip_frames_sent = c.gossip_frames_sent,
        .consensus_bytes_sent = node->consensus_bytes_sent,
        .consensus_frames_sent = node->consensus_frames_sent,
        .seconds_compute = node->t_compute,
        .seconds_gossip = c.t_gossip,
        .seconds_wait = c.t_wait,
        /* every node ends at the same step: an agreed stop, or --steps */
        .stopped = node->sum.stopped || node->sum.steps == node->opts.steps,
    };
    *p = (struct node_ckpt_parts){.node = node->opts.id,
                                  .nodes = node->n,
                                  .seed = node->opts.workload.seed,
                                  .algo = node->opts.gossip.algo,
                                  /* in device memory: the host copy */
                                  .model = node->host != NULL ? node->host
                                                              : node->model,
                                  .optim = node->optim,
                                  .gossip = node->g,
                                  .counters = k,
                                  .stale = node->opts.gossip.stale,
                                  .stale_in = &node->stale_resume};
}

/* DIR/.node-N.model.tmp and DIR/node-N.model of --metrics-dir. */
static void
s_model_paths(const rumor_node *node,
              char *tmp,
              size_t tmp_cap,
              char *path,
              size_t path_cap)
{
    const struct rumor_node_opts *o = &node->opts;
    snprintf(tmp, tmp_cap, "%s/.node-%u.model.tmp", o->metrics_dir, o->id);
    snprintf(path, path_cap, "%s/node-%u.model", o->metrics_dir, o->id);
}

static rumor_err
s_model_reserve(rumor_node *node, struct rumor_diag *diag)
{
    char tmp[RUMOR_NODE_PATH_MAX + 40], path[RUMOR_NODE_PATH_MAX + 32];
    s_model_paths(node, tmp, sizeof tmp, path, sizeof path);
    node->model_fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (node->model_fd < 0)
        return rumor_diag_errno(diag, tmp, "cannot open for writing");
    return RUMOR_OK;
}

static rumor_err
s_checkpoint(rumor_node *node, struct rumor_diag *diag)
{
    if (node->opts.checkpoint_dir[0] == '\0' ||
        node->saved_step == node->sum.steps)
        return RUMOR_OK;
    struct node_ckpt_parts p;
    struct node_ckpt_counters k;
    rumor_buf flight;
    rumor_buf_init(&flight, RUMOR_CHECKPOINT_FILE_MAX);
    /* first: it waits for the exchanges queued to run */
    rumor_err rc =
        node->stale != NULL ? node_stale_save(node->stale, &flight) : RUMOR_OK;
    /* in device memory: the save reads node->host, fresh from it */
    const struct rumor_model *host = NULL;
    if (rc == RUMOR_OK && node->host != NULL)
        rc = s_to_host(node, &host);
    s_ckpt_parts(node, &p, &k);
    p.stale_out = &flight;
    if (rc == RUMOR_OK)
        rc = node_ckpt_save(node->opts.checkpoint_dir,
                            node->opts.checkpoint_keep,
                            &p,
                            diag);
    else
        rumor_diag_set(diag, "", 0, 0, "checkpoint: %s", rumor_strerror(rc));
    rumor_buf_free(&flight);
    if (rc == RUMOR_OK)
        node->saved_step = node->sum.steps;
    return rc;
}

/* The final checkpoint (of a stop, or of the end, to train on later with
 * --resume and more --steps) and, at the end of the training, the model
 * for the average of a local run (rumor launch), written even when the
 * checkpoint fails: the training is done, and the model needs no new
 * descriptor. The first error is returned. */
static rumor_err
s_final_files(rumor_node *node, struct rumor_diag *diag)
{
    rumor_err rc = RUMOR_OK;
    if (node->sum.stopped || node->sum.steps == node->opts.steps)
        rc = s_checkpoint(node, diag);
    if (node->sum.stopped || node->model_fd < 0)
        return rc;
    char tmp[RUMOR_NODE_PATH_MAX + 40], path[RUMOR_NODE_PATH_MAX + 32];
    s_model_paths(node, tmp, sizeof tmp, path, sizeof path);
    struct rumor_diag why = {0};
    const struct rumor_model *m = node->model;
    rumor_err saved = node->host != NULL ? s_to_host(node, &m) : RUMOR_OK;
    if (saved == RUMOR_OK) {
        saved = node_model_save(node->model_fd, tmp, path, m, &why);
    } else { /* the device's copy failed: no model file */
        close(node->model_fd);
        unlink(tmp);
        rumor_diag_set(&why, "", 0, 0, "model: %s", rumor_strerror(saved));
    }
    node->model_fd = -1;
    if (rc == RUMOR_OK && saved != RUMOR_OK && diag != NULL)
        *diag = why;
    return rc != RUMOR_OK ? rc : saved;
}

static rumor_err
s_resume(rumor_node *node, struct rumor_diag *diag)
{
    struct node_ckpt_parts p;
    struct node_ckpt_counters k;
    s_ckpt_parts(node, &p, &k);
    struct rumor_diag why = {0};
    rumor_err rc = node_ckpt_resume(node->opts.checkpoint_dir, &p, &why);
    if (rc != RUMOR_OK)
        rumor_diag_set(diag, why.file, why.line, 0, "--resume: %s", why.msg);
    /* the model was read into the host copy */
    if (rc == RUMOR_OK && node->host != NULL) {
        rc = s_from_host(node, node->host);
        if (rc != RUMOR_OK)
            rumor_diag_set(diag, "", 0, 0, "--resume: %s", rumor_strerror(rc));
    }
    if (rc == RUMOR_OK && node->opts.metrics_dir[0] != '\0') {
        rc = node_ckpt_trim_metrics(node->opts.metrics_dir,
                                    node->opts.id,
                                    k.step,
                                    &why);
        if (rc != RUMOR_OK)
            rumor_diag_set(diag, why.file, 0, 0, "--resume: %s", why.msg);
    }
    if (rc != RUMOR_OK)
        return rc;
    node->saved_step = k.step;
    /* the exchanges still in flight run first, from their own step */
    node->first_step = node_stale_first(node->stale_resume.data,
                                        node->stale_resume.len,
                                        k.step);
    node->resumed_together = k.stopped;
    node->sum.steps = k.step;
    node->sum.loss = k.loss;
    node->sum.gossip_bytes_sent = k.gossip_bytes_sent;
    node->sum.gossip_bytes_recv = k.gossip_bytes_recv;
    node->gossip_frames_sent = k.gossip_frames_sent;
    node->consensus_bytes_sent = k.consensus_bytes_sent;
    node->consensus_frames_sent = k.consensus_frames_sent;
    node->t_compute = k.seconds_compute;
    node->t_gossip = k.seconds_gossip;
    node->t_wait = k.seconds_wait;
    node->t_land_wait = k.seconds_wait;
    return RUMOR_OK;
}

/* Whether the probe goes to neighbour j: not to one the fault path marked
 * down, nor to one outside an elastic ring's current members. */
static bool
s_probe_peer(const rumor_node *node, uint32_t j)
{
    if (node->faults != NULL)
        return node_faults_up(node->faults, j);
    return node->elastic == NULL || node_elastic_member(node->elastic, j);
}

/* The consensus probe after step t: the whole model to every neighbour of
 * t's phase and back; sum.consensus = mean_j ||x_i - x_j||^2. Its bytes
 * are counted apart from the algorithm's. */
static rumor_err
s_probe(rumor_node *node, uint64_t t, uint64_t deadline)
{
    size_t off = 0;
    rumor_err rc = RUMOR_OK;
    /* in device memory: straight into the probe's host buffer */
    const struct gossip_backend_i *be =
        node->host != NULL ? node->src.be : &gossip_backend_host;
    for (size_t k = 0; k < node->model->count && rc == RUMOR_OK; k++) {
        size_t n = rumor_tensor_numel(&node->model->tensors[k]);
        rc = be->copy(node->probe + off,
                      node->model->tensors[k].data,
                      n * sizeof(float),
                      GOSSIP_TO_HOST);
        off += n;
    }
    size_t len = node->probe_floats * sizeof(float), count = 0;
    size_t phase = rumor_topology_phase_at(node->topo, t);
    const uint32_t *nbrs = rumor_topology_neighbors(node->topo,
                                                    phase,
                                                    node->opts.id,
                                                    &count,
                                                    NULL);
    size_t heard = 0;
    for (size_t k = 0; k < count && rc == RUMOR_OK; k++) {
        struct rumor_net_header h = {.kind = RUMOR_NET_KIND_PROBE, .step = t};
        if (!s_probe_peer(node, nbrs[k]))
            continue; /* down: the probe skips it as the gossip does */
        rc = rumor_net_send(node->net, nbrs[k], &h, node->probe, len, deadline);
        uint64_t wire = rumor_gossip_wire_bytes(len);
        node->consensus_bytes_sent += wire;
        node->consensus_frames_sent += (wire - len) / RUMOR_NET_HEADER_BYTES;
    }
    double sum = 0;
    for (size_t k = 0; k < count && rc == RUMOR_OK; k++) {
        struct rumor_net_msg msg;
        if (node->faults != NULL || node->elastic != NULL) {
            if (!s_probe_peer(node, nbrs[k]))
                continue;
            rc = rumor_net_recv(node->net,
                                nbrs[k],
                                RUMOR_NET_KIND_PROBE,
                                t,
                                0,
                                deadline,
                                &msg);
            if (rc == RUMOR_ETIMEDOUT) {
                rc = RUMOR_OK; /* missed the deadline: not counted */
                continue;
            }
        } else {
            struct node_wait w = {.net = node->net,
                                  .heard = node->heard,
                                  .stop_by = &node->stop_by,
                                  .skip = NULL};
            rc = node_recv(&w,
                           nbrs[k],
                           RUMOR_NET_KIND_PROBE,
                           t,
                           0,
                           deadline,
                           &msg);
        }
        if (rc != RUMOR_OK)
            break;
        heard++;
        if (msg.len != len) {
            rumor_log(RUMOR_LOG_ERROR,
                      "step %llu: consensus probe of node %u has %zu bytes, "
                      "not %zu",
                      (unsigned long long)t + 1,
                      nbrs[k],
                      msg.len,
                      len);
            rc = RUMOR_EPROTO;
        }
        for (size_t e = 0; e < node->probe_floats && rc == RUMOR_OK; e++) {
            float v = 0;
            memcpy(&v, msg.payload + e * sizeof v, sizeof v);
            double d = (double)node->probe[e] - (double)v;
            sum += d * d;
        }
        rumor_net_msg_free(&msg);
    }
    node->sum.consensus = heard > 0 ? sum / (double)heard : 0;
    return rc;
}

static void
s_evaluate(rumor_node *node)
{
    struct rumor_eval ev;
    if (rumor_workload_eval(node->w, NULL, RUMOR_EVAL_TEST, &ev) != RUMOR_OK)
        return;
    node->sum.test_loss = ev.loss;
    node->sum.accuracy = ev.accuracy;
    const struct rumor_model *m = node->model;
    if (node->optimum == NULL ||
        (node->host != NULL && s_to_host(node, &m) != RUMOR_OK))
        return;
    const struct rumor_tensor *a = &m->tensors[0];
    const struct rumor_tensor *b = &node->optimum->tensors[0];
    double worst = 0;
    for (size_t e = 0; e < rumor_tensor_numel(a); e++)
        worst = fmax(worst, fabs((double)a->data[e] - (double)b->data[e]));
    node->sum.optimum_error = worst;
}

/* Robust mixing's and the fault path's counters of the metrics line
 * (gossip/robust.c; node/faults.c, screening). */
static void
s_faults_row(const rumor_node *node,
             const struct node_stale_counters *c,
             struct node_metrics_row *row)
{
    const struct rumor_gossip_screen_stats *ss = &c->screen;
    const struct node_faults_stats *fs = &c->faults;
    row->clipped = ss->clipped;
    row->screened = ss->screened;
    row->clip_radius = ss->clip_radius;
    row->rejected_outsized = ss->outsized;
    if (node->faults == NULL)
        return;
    row->faults = true;
    row->rejected_nonfinite = ss->nonfinite;
    row->rejected_malformed = ss->malformed;
    row->skipped = fs->skipped;
    row->peers_down = fs->peers_down;
    row->readmitted = fs->readmitted;
    row->control_bytes_sent = fs->control_bytes_sent;
    row->control_frames_sent = fs->control_frames_sent;
}

/* The step's numbers for --metrics-listen, with every linked neighbour's
 * bytes and state. */
static void
s_publish(rumor_node *node, const struct node_metrics_row *row)
{
    if (node->prom == NULL)
        return;
    struct node_prom_peer *peers = node->prom_peers;
    size_t n = 0;
    for (size_t k = 0; k < node->nlinked; k++, n++) {
        struct rumor_net_stats st;
        rumor_net_stats(node->net, node->linked[k], &st);
        peers[n] = (struct node_prom_peer){
            node->linked[k],
            st.bytes_sent,
            st.bytes_recv,
            rumor_net_state_name(
                rumor_net_peer_state(node->net, node->linked[k]))};
    }
    node_prom_publish(node->prom, row, peers, n);
}

/* The metrics line of a step (and the summary's byte counts). */
static void
s_row(rumor_node *node,
      uint64_t step,
      double lr,
      bool evaluated,
      bool probed,
      struct node_metrics_row *out)
{
    struct rumor_net_stats st;
    rumor_net_stats(node->net, RUMOR_NET_ALL, &st);
    struct node_stale_counters c;
    s_exchange_counters(node, &c);
    node->sum.bytes_sent = st.bytes_sent;
    node->sum.bytes_recv = st.bytes_recv;
    *out = (struct node_metrics_row){
        .step = step,
        .loss = node->sum.loss,
        .lr = lr,
        .test_loss = evaluated ? node->sum.test_loss : NAN,
        .accuracy = evaluated ? node->sum.accuracy : NAN,
        .optimum_error = evaluated ? node->sum.optimum_error : NAN,
        .bytes_sent = st.bytes_sent,
        .bytes_recv = st.bytes_recv,
        .frames_sent = st.frames_sent,
        .handshake_bytes_sent = st.handshake_bytes_sent,
        .handshake_frames_sent = st.handshake_frames_sent,
        .gossip_bytes_sent = c.gossip_bytes_sent,
        .gossip_bytes_recv = c.gossip_bytes_recv,
        .gossip_frames_sent = c.gossip_frames_sent,
        .consensus = probed ? node->sum.consensus : NAN,
        .consensus_bytes_sent = node->consensus_bytes_sent,
        .consensus_frames_sent = node->consensus_frames_sent,
        .seconds = s_since(node->start_ns),
        .seconds_compute = node->t_compute,
        .seconds_eval = node->t_eval,
        .seconds_gossip = c.t_gossip,
        .seconds_wait = c.t_wait,
        .gossip = node->stale != NULL ? NULL : node->g,
    };
    s_faults_row(node, &c, out);
    out->pcie = node->external;
    out->pcie_h2d_bytes = node->pcie_h2d;
    out->pcie_d2h_bytes = node->pcie_d2h;
    out->elastic = node->elastic != NULL;
    out->epoch = c.epoch;
    out->members = c.members;
}

static rumor_err
s_report(rumor_node *node,
         uint64_t step,
         double lr,
         bool evaluated,
         bool probed)
{
    struct node_metrics_row row;
    s_row(node, step, lr, evaluated, probed, &row);
    uint64_t now = rumor_clock_ns();
    bool last = step == node->opts.steps;
    if (node->progress &&
        (last || now - node->progress_ns >= NODE_PROGRESS_EVERY_NS)) {
        node->progress_ns = now;
        printf("\rnode %u  step %llu/%llu  loss %.4f  acc %5.1f%%  sent %.2f "
               "MB  %.1f s%s",
               node->opts.id,
               (unsigned long long)step,
               (unsigned long long)node->opts.steps,
               node->sum.loss,
               100 * node->sum.accuracy,
               (double)row.bytes_sent / 1e6,
               row.seconds,
               last ? "\n" : "");
        fflush(stdout);
    } else if (!node->progress && evaluated && !node->external) {
        /* not a terminal (a log, or rumor launch): one line per evaluation
         * on stdout, whatever the log level */
        printf("step %llu/%llu  loss %.4f  test loss %.4f  accuracy %.2f%%  "
               "sent %.1f kB  %.1f s\n",
               (unsigned long long)step,
               (unsigned long long)node->opts.steps,
               node->sum.loss,
               node->sum.test_loss,
               100 * node->sum.accuracy,
               (double)row.bytes_sent / 1e3,
               row.seconds);
        fflush(stdout);
    }
    s_publish(node, &row);
    if (node->metrics == NULL)
        return RUMOR_OK;
    return node_metrics_write(node->metrics, &row, &node->io_why);
}

/* --- overlap: the gradient in a worker thread --- */

static void *
s_worker_main(void *arg)
{
    rumor_node *node = arg;
    struct node_worker *wk = &node->worker;
    pthread_mutex_lock(&wk->mu);
    for (;;) {
        while (!wk->job && !wk->quit)
            pthread_cond_wait(&wk->cv, &wk->mu);
        if (wk->quit)
            break;
        wk->job = false;
        uint64_t t = wk->t;
        pthread_mutex_unlock(&wk->mu);
        uint64_t c0 = rumor_clock_ns();
        double loss = NAN;
        rumor_err rc = rumor_workload_grad(node->w, t, node->grad, &loss);
        double seconds = s_since(c0);
        pthread_mutex_lock(&wk->mu);
        wk->rc = rc;
        wk->loss = loss;
        wk->seconds = seconds;
        wk->done = true;
        pthread_cond_broadcast(&wk->cv);
    }
    pthread_mutex_unlock(&wk->mu);
    return NULL;
}

static rumor_err
s_worker_start(rumor_node *node)
{
    struct node_worker *wk = &node->worker;
    if (pthread_mutex_init(&wk->mu, NULL) != 0)
        return RUMOR_ENOMEM;
    if (pthread_cond_init(&wk->cv, NULL) != 0) {
        pthread_mutex_destroy(&wk->mu);
        return RUMOR_ENOMEM;
    }
    if (pthread_create(&wk->thread, NULL, s_worker_main, node) != 0) {
        pthread_cond_destroy(&wk->cv);
        pthread_mutex_destroy(&wk->mu);
        return RUMOR_ENOMEM;
    }
    wk->started = true;
    return RUMOR_OK;
}

static void
s_worker_stop(rumor_node *node)
{
    struct node_worker *wk = &node->worker;
    if (!wk->started)
        return;
    pthread_mutex_lock(&wk->mu);
    wk->quit = true;
    pthread_cond_broadcast(&wk->cv);
    pthread_mutex_unlock(&wk->mu);
    pthread_join(wk->thread, NULL);
    pthread_cond_destroy(&wk->cv);
    pthread_mutex_destroy(&wk->mu);
    wk->started = false;
}

void
node_copy_model(struct rumor_model *dst, const struct rumor_model *src)
{
    for (size_t k = 0; k < src->count; k++)
        memcpy(dst->tensors[k].data,
               src->tensors[k].data,
               rumor_tensor_numel(&src->tensors[k]) * sizeof(float));
}

void
node_copy_mix(const rumor_node *node,
              struct rumor_model *dst,
              const struct rumor_model *src)
{
    if (node->src.be == NULL) {
        node_copy_model(dst, src);
        return;
    }
    (void)node_model_copy(node->src.be,
                          dst,
                          src,
                          GOSSIP_ON_DEVICE); /* cannot fail */
}

rumor_err
node_model_copy(const struct gossip_backend_i *be,
                struct rumor_model *dst,
                const struct rumor_model *src,
                enum gossip_copy kind)
{
    rumor_err rc = RUMOR_OK;
    for (size_t k = 0; k < src->count && rc == RUMOR_OK; k++)
        rc = be->copy(dst->tensors[k].data,
                      src->tensors[k].data,
                      rumor_tensor_numel(&src->tensors[k]) * sizeof(float),
                      kind);
    return rc;
}

/* node_model_src.to_host of the stale thread's node->mix: mix_host. */
static rumor_err
s_mix_to_host(void *arg, const struct rumor_model **host)
{
    rumor_node *node = arg;
    *host = node->mix_host;
    return node_model_copy(node->src.be,
                           node->mix_host,
                           node->mix,
                           GOSSIP_TO_HOST);
}

/* node_model_src.to_device of the stale thread's node->mix. */
static rumor_err
s_mix_from_host(void *arg, const struct rumor_model *host)
{
    rumor_node *node = arg;
    return node_model_copy(node->src.be, node->mix, host, GOSSIP_TO_DEVICE);
}

rumor_err
node_ring_host(rumor_node *node,
               struct rumor_model **host,
               const struct node_model_src **src)
{
    if (!node_stale_mode(node)) {
        *host = node->host;
        *src = &node->src;
        return RUMOR_OK;
    }
    size_t floats = 0;
    for (size_t k = 0; k < node->mix->count; k++)
        floats += rumor_tensor_numel(&node->mix->tensors[k]);
    node->mix_host_data = malloc((floats + 1) * sizeof(float));
    if (node->mix_host_data == NULL)
        return RUMOR_ENOMEM;
    node->mix_src = (struct node_model_src){.be = node->src.be,
                                            .to_host = s_mix_to_host,
                                            .to_device = s_mix_from_host,
                                            .arg = node};
    *host = NULL;
    *src = &node->mix_src;
    rumor_err rc =
        node_model_view(node->mix, node->mix_host_data, &node->mix_host);
    *host = node->mix_host;
    return rc;
}

rumor_err
node_model_view(const struct rumor_model *shape,
                float *data,
                struct rumor_model **out)
{
    size_t head = sizeof **out + shape->count * sizeof *shape->tensors;
    struct rumor_model *m = malloc(head);
    *out = m;
    if (m == NULL)
        return RUMOR_ENOMEM;
    m->tensors = (struct rumor_tensor *)(m + 1);
    m->count = shape->count;
    for (size_t k = 0; k < shape->count; k++) {
        m->tensors[k] = shape->tensors[k];
        m->tensors[k].data = data;
        data += rumor_tensor_numel(&shape->tensors[k]);
    }
    return RUMOR_OK;
}

/* Gradient at x_t and gossip of x_t at the same time: the worker reads
 * the model while the gossip works on node->mix, a copy of it; then the
 * gossiped copy becomes the model. The same numbers as one after the
 * other (the gradient is taken at x_t either way), only sooner. */
static rumor_err
s_grad_and_gossip_overlapped(rumor_node *node, uint64_t t, double *loss)
{
    struct node_worker *wk = &node->worker;
    uint64_t c0 = rumor_clock_ns();
    node_copy_mix(node, node->mix, node->model);
    /* SAEF look-ahead moves the gossiped copy: the gradient is taken there */
    rumor_err rc = rumor_gossip_step_ahead(node->g);
    if (rc != RUMOR_OK)
        return rc;
    if (node->opts.gossip.ef_alpha > 0)
        node_copy_mix(node, node->model, node->mix);
    node->t_compute += s_since(c0);
    pthread_mutex_lock(&wk->mu);
    wk->t = t;
    wk->job = true;
    wk->done = false;
    pthread_cond_broadcast(&wk->cv);
    pthread_mutex_unlock(&wk->mu);
    uint64_t span = node_step_span(node, t);
    rumor_err grc = node_gossip_step(node, NULL, t, rumor_clock_ns() + span);
    pthread_mutex_lock(&wk->mu);
    while (!wk->done)
        pthread_cond_wait(&wk->cv, &wk->mu);
    rc = wk->rc;
    *loss = wk->loss;
    node->t_compute += wk->seconds;
    pthread_mutex_unlock(&wk->mu);
    if (rc == RUMOR_OK)
        rc = grc;
    if (rc == RUMOR_OK)
        node_copy_mix(node, node->model, node->mix);
    return rc;
}

/* Gradient at x_t; the exchange of step t runs stale (node_stale_step). */
static rumor_err
s_grad_only(rumor_node *node, uint64_t t, double *loss)
{
    uint64_t c0 = rumor_clock_ns();
    rumor_err rc = rumor_workload_grad(node->w, t, node->grad, loss);
    node->t_compute += s_since(c0);
    return rc;
}

/* The waits of landing count as waiting for the network. */
static rumor_err
s_stale_land(rumor_node *node,
             struct rumor_model *model,
             uint64_t t,
             bool *stop)
{
    uint64_t w0 = rumor_clock_ns();
    rumor_err rc = node_stale_land(node->stale, model, t, stop);
    node->t_land_wait += s_since(w0);
    return rc;
}

rumor_err
node_stale_step(rumor_node *node,
                struct rumor_model *model,
                uint64_t t,
                bool *stop)
{
    *stop = false;
    rumor_err rc = RUMOR_OK;
    if (node->stale == NULL)
        rc = node_stale_start(node, node->opts.gossip.stale, &node->stale);
    if (rc == RUMOR_OK)
        rc = s_stale_land(node, model, t, stop);
    if (rc != RUMOR_OK || *stop || !rumor_gossip_exchanges(node->g, t))
        return rc;
    return node_stale_push(node->stale, model, t);
}

rumor_err
node_stale_land_all(rumor_node *node, struct rumor_model *model, bool *stop)
{
    *stop = false;
    return node->stale == NULL ? RUMOR_OK
                               : s_stale_land(node, model, UINT64_MAX, stop);
}

bool
node_stale_busy(const rumor_node *node)
{
    return node->stale != NULL && !node_stale_idle(node->stale);
}

void
node_stale_end(rumor_node *node)
{
    node_stale_stop(&node->stale);
}

/* Gradient at x_t, then the gossip step (of the model or the gradient). */
static rumor_err
s_grad_then_gossip(rumor_node *node, uint64_t t, double *loss)
{
    uint64_t c0 = rumor_clock_ns();
    /* SAEF look-ahead (localsgd with a delta codec); a no-op otherwise */
    rumor_err rc = rumor_gossip_step_ahead(node->g);
    if (rc == RUMOR_OK)
        rc = rumor_workload_grad(node->w, t, node->grad, loss);
    node->t_compute += s_since(c0);
    if (rc != RUMOR_OK || !isfinite(*loss))
        return rc;
    uint64_t span = node_step_span(node, t);
    return node_gossip_step(node, NULL, t, rumor_clock_ns() + span);
}

/* Whether step t's gradient overlaps its gossip. A step without rounds
 * (local SGD between its syncs) has nothing to overlap: the copies into
 * and out of node->mix would be all it did. The look-ahead moves the
 * gossiped copy at every step, so it always overlaps. */
static bool
s_overlaps(rumor_node *node, uint64_t t)
{
    return node->mix != NULL && (node->opts.gossip.ef_alpha > 0 ||
                                 rumor_gossip_rounds(node->g, t) > 0);
}

static rumor_err
s_step(rumor_node *node, uint64_t t)
{
    const struct rumor_node_opts *o = &node->opts;
    double loss = NAN, compute0 = node->t_compute;
    rumor_err rc = node->stale != NULL ? s_grad_only(node, t, &loss)
                   : s_overlaps(node, t)
                       ? s_grad_and_gossip_overlapped(node, t, &loss)
                       : s_grad_then_gossip(node, t, &loss);
    /* a non-finite model fails the gossip's encode (RUMOR_ENUMERIC)
     * before its loss is seen */
    if ((rc == RUMOR_OK && node_diverged(loss, node->first_loss)) ||
        rc == RUMOR_ENUMERIC) {
        char text[512];
        node_diverge_message(&o->gossip,
                             rumor_gossip_gamma(node->g),
                             rumor_optim_lr(node->optim, t),
                             t + 1,
                             loss,
                             text,
                             sizeof text);
        rumor_log(RUMOR_LOG_ERROR, "%s", text);
        node->sum.diverged = true;
        rc = RUMOR_ENUMERIC;
    }
    if (rc != RUMOR_OK)
        return rc;
    node->sum.loss = loss;
    uint64_t c1 = rumor_clock_ns();
    rc = rumor_optim_step(node->optim, t, node->model, node->grad);
    bool last = t + 1 == o->steps;
    /* the exchanges of the last S steps land after the last step (their
     * wait is the landing's, not compute) */
    bool stopped = false;
    node->t_compute += s_since(c1);
    if (rc == RUMOR_OK && last)
        rc = node_stale_land_all(node, node->model, &stopped);
    bool evaluate = last || (o->eval_every > 0 && (t + 1) % o->eval_every == 0);
    bool probe = o->consensus_every > 0 && (t + 1) % o->consensus_every == 0;
    if (rc == RUMOR_OK && evaluate) {
        uint64_t c2 = rumor_clock_ns();
        s_evaluate(node);
        double spent = s_since(c2);
        node->t_compute += spent;
        node->t_eval += spent;
    }
    /* the adaptive budgets are the exchange thread's to read */
    if (node->stale == NULL)
        rumor_gossip_compute_observe(
            node->g,
            (uint64_t)((node->t_compute - compute0) * 1e9));
    if (rc == RUMOR_OK && probe) {
        uint64_t p0 = rumor_clock_ns();
        rc = s_probe(node, t, p0 + node_step_span(node, t + 1));
        node->t_wait += s_since(p0);
    }
    if (rc != RUMOR_OK)
        return rc;
    node->sum.steps = t + 1;
    if (last)
        node_finish(node, t);
    return s_report(node,
                    t + 1,
                    rumor_optim_lr(node->optim, t),
                    evaluate,
                    probe);
}

/* --- public API ------------------------------------------------------- */

/* rumor_node_new, or with external != NULL the peer API's node on the
 * caller's tensors (runtime_impl.h). */
rumor_err
node_new_model(const struct rumor_node_opts *opts,
               struct rumor_model *external,
               const rumor_dtype *dtypes,
               const struct node_model_src *src,
               rumor_node **out,
               struct rumor_diag *diag)
{
    *out = NULL;
    rumor_err rc = rumor_node_opts_check(opts, diag);
    if (rc != RUMOR_OK)
        return rc;
    rumor_node *node = calloc(1, sizeof *node);
    if (node == NULL)
        return RUMOR_ENOMEM;
    node->opts = *opts;
    rumor_buf_init(&node->stale_resume, RUMOR_CHECKPOINT_FILE_MAX);
    node->model_fd = -1;
    node->external = external != NULL;
    if (src != NULL)
        node->src = *src;
    node->model = external;
    node->dtypes = dtypes;
    atomic_init(&node->stop, false);
    atomic_init(&node->stop_by, UINT64_MAX);
    node->sum.test_loss = NAN;
    node->sum.accuracy = NAN;
    node->sum.optimum_error = NAN;
    node->sum.consensus = NAN;
    node->sum.loss = NAN;
    rumor_log_set_level(opts->log_level);
    char prefix[32];
    snprintf(prefix, sizeof prefix, "node %u", opts->id);
    rumor_log_set_prefix(prefix);
    rc = s_load_topology(node, diag);
    if (rc == RUMOR_OK) {
        node->linked = calloc(node->n, sizeof *node->linked);
        node->heard = calloc(node->n, sizeof *node->heard);
        node->expect = calloc(node->n, sizeof *node->expect);
        node->have = calloc(node->n, sizeof *node->have);
        node->got = calloc(node->n, sizeof *node->got);
        node->inbox = calloc(node->n, sizeof *node->inbox);
        if (node->linked == NULL || node->heard == NULL ||
            node->expect == NULL || node->have == NULL || node->got == NULL ||
            node->inbox == NULL)
            rc = RUMOR_ENOMEM;
    }
    if (rc == RUMOR_OK)
        rc = s_build_training(node, diag);
    for (size_t k = 0; rc == RUMOR_OK && k < node->model->count; k++)
        node->probe_floats += rumor_tensor_numel(&node->model->tensors[k]);
    if (rc == RUMOR_OK && opts->consensus_every > 0) {
        node->probe = malloc(node->probe_floats * sizeof(float) + 1);
        rc = node->probe == NULL ? RUMOR_ENOMEM : RUMOR_OK;
    }
    if (rc == RUMOR_OK && node->mix != NULL && !node_stale_mode(node))
        rc = s_worker_start(node);
    node->stop_at = UINT64_MAX;
    node->saved_step = UINT64_MAX;
    if (rc == RUMOR_OK && opts->resume && !node->external)
        rc = s_resume(node, diag);
    if (rc == RUMOR_OK)
        rc = s_start_net(node, diag);
    node->dtypes = NULL; /* borrowed during _new only */
    if (rc == RUMOR_OK)
        rc = node_exchange_init(node);
    if (rc == RUMOR_OK && opts->metrics_dir[0] != '\0')
        rc = node_metrics_open_mode(opts->metrics_dir,
                                    opts->id,
                                    opts->resume,
                                    &node->metrics,
                                    diag);
    if (rc == RUMOR_OK && opts->metrics_dir[0] != '\0' && !node->external)
        rc = s_model_reserve(node, diag);
    if (rc != RUMOR_OK) {
        rumor_node_destroy(&node);
        return rc;
    }
    node->progress =
        opts->progress < 0 ? isatty(STDOUT_FILENO) != 0 : opts->progress > 0;
    node->progress = node->progress && !node->external;
    *out = node;
    return RUMOR_OK;
}

rumor_err
rumor_node_new(const struct rumor_node_opts *opts,
               rumor_node **out,
               struct rumor_diag *diag)
{
    return node_new_model(opts, NULL, NULL, NULL, out, diag);
}

void
rumor_node_destroy(rumor_node **self_p)
{
    rumor_node *node = *self_p;
    if (node == NULL)
        return;
    s_worker_stop(node);
    node_stale_stop(&node->stale);
    rumor_buf_free(&node->stale_resume);
    node_prom_stop(&node->prom);
    free(node->prom_peers);
    rumor_net_destroy(&node->net);
    node_faults_destroy(&node->faults);
    node_elastic_destroy(&node->elastic);
    rumor_gossip_destroy(&node->g);
    rumor_model_free(&node->mix);
    rumor_optim_destroy(&node->optim);
    if (node->src.be != NULL) { /* the tensors' data is the device's */
        node->src.be->release(node->device_grad);
        node->src.be->release(node->device_mix);
    }
    rumor_model_free(&node->grad);
    rumor_model_free(&node->host);
    rumor_model_free(&node->mix_host);
    free(node->mix_host_data);
    rumor_workload_destroy(&node->w);
    rumor_dataset_destroy(&node->data);
    rumor_net_keypair_destroy(&node->keys);
    rumor_topology_destroy(&node->topo);
    node_metrics_close(&node->metrics);
    if (node->model_fd >= 0) { /* not written: stopped, or failed before */
        char tmp[RUMOR_NODE_PATH_MAX + 40], path[RUMOR_NODE_PATH_MAX + 32];
        s_model_paths(node, tmp, sizeof tmp, path, sizeof path);
        close(node->model_fd);
        (void)unlink(tmp);
    }
    free(node->linked);
    free(node->heard);
    free(node->expect);
    free(node->have);
    free(node->got);
    free(node->inbox);
    free(node->stop_hops);
    free(node->stop_seen);
    free(node->probe);
    free(node->desc);
    free(node);
    *self_p = NULL;
}

rumor_err
rumor_node_run(rumor_node *node, struct rumor_diag *diag)
{
    const struct rumor_node_opts *o = &node->opts;
    rumor_log(RUMOR_LOG_INFO,
              "%s on %s, %u nodes, %s (%s exchange), %llu steps, %s",
              rumor_workload_kind_name(o->workload.kind),
              rumor_topology_endpoint(node->topo, o->id),
              node->n,
              o->gossip.algo,
              rumor_node_opts_gradient_exchange(o) ? "gradient" : "model",
              (unsigned long long)o->steps,
              o->insecure ? "INSECURE (no CURVE)" : "CURVE");
    node->start_ns = rumor_clock_ns();
    rumor_err rc =
        node_wait_links(node, node->start_ns + o->connect_ms * NODE_MS, diag);
    if (atomic_load(&node->stop)) /* before any step: nothing to agree on */
        node->stop_at = node->first_step;
    uint64_t t0 = node->first_step;
    /* with stale exchanges a join writes the state it takes into the
     * exchanged copy (node_exchanged): it becomes the model */
    if (node_stale_mode(node))
        node_copy_mix(node, node->mix, node->model);
    if (rc == RUMOR_OK)
        rc = node_join(node, &t0, diag);
    if (rc == RUMOR_OK && node_stale_mode(node))
        node_copy_mix(node, node->model, node->mix);
    if (t0 < node->sum.steps) /* resumed with exchanges in flight */
        t0 = node->sum.steps;
    if (rc == RUMOR_OK && node_stale_mode(node))
        rc = node_stale_start(node, o->gossip.stale, &node->stale);
    if (rc == RUMOR_OK && node->stale_resume.len > 0) /* --resume */
        rc = node_stale_restore(node->stale,
                                node->stale_resume.data,
                                node->stale_resume.len,
                                node->sum.steps);
    bool first = true;
    uint64_t t = t0;
    while (t < o->steps && rc == RUMOR_OK) {
        bool stop = false;
        rc = node->stale != NULL ? node_stale_step(node, node->model, t, &stop)
                                 : node_step_begin(node, &t, &stop);
        if (rc != RUMOR_OK || stop || t >= o->steps)
            break;
        rc = s_step(node, t);
        if (first && (rc == RUMOR_OK || rc == RUMOR_EPROTO) &&
            node_check_refusals(node, diag) != RUMOR_OK)
            rc = RUMOR_EPROTO;
        first = false;
        if (rc != RUMOR_OK && node->stale == NULL &&
            node_step_retry(node, &rc, &t))
            continue;
        t++;
        bool due = o->checkpoint_every > 0 &&
                   node->sum.steps % o->checkpoint_every == 0;
        struct rumor_diag why = {0};
        if (rc == RUMOR_OK && due && s_checkpoint(node, &why) != RUMOR_OK)
            rumor_log(RUMOR_LOG_ERROR, /* training goes on; retried next */
                      "checkpoint of step %llu not written: %s: %s",
                      (unsigned long long)node->sum.steps,
                      why.file,
                      why.msg);
    }
    /* an elastic ring completed the last step for this node */
    if (rc == RUMOR_OK && t >= o->steps && node->sum.steps < o->steps &&
        node->elastic != NULL) {
        node->sum.steps = o->steps;
        node_finish(node, o->steps - 1);
    }
    if (rc == RUMOR_OK)
        rc = s_final_files(node, diag);
    /* the exchange thread is done with the algorithm and the links */
    node_stale_stop(&node->stale);
    /* a metrics line that failed says which file and why */
    bool io = rc == RUMOR_EIO && node->io_why.msg[0] != '\0';
    if (rc != RUMOR_OK && diag != NULL && diag->msg[0] == '\0')
        rumor_diag_set(diag,
                       io ? node->io_why.file : "",
                       0,
                       0,
                       "node %u: step %llu: %s",
                       o->id,
                       (unsigned long long)node->sum.steps + 1,
                       io ? node->io_why.msg : rumor_strerror(rc));
    return rc;
}

void
rumor_node_summary(const rumor_node *node, struct rumor_node_summary *out)
{
    *out = node->sum;
}

/* --- for the peer API (node/peer.c; contracts in runtime_impl.h) ------ */

rumor_err
node_report_step(rumor_node *node, uint64_t steps, const struct node_report *r)
{
    node->sum.steps = steps;
    if (r != NULL) {
        node->sum.loss = r->loss;
        node->sum.test_loss = r->test_loss;
        node->sum.accuracy = r->accuracy;
        bool evaluated = !isnan(r->test_loss) || !isnan(r->accuracy);
        return s_report(node, steps, NAN, evaluated, false);
    }
    struct node_metrics_row row;
    s_row(node, steps, NAN, false, false, &row);
    s_publish(node, &row);
    return RUMOR_OK;
}

void
node_pcie_set(rumor_node *node, uint64_t h2d, uint64_t d2h)
{
    node->pcie_h2d = h2d;
    node->pcie_d2h = d2h;
}

void
node_counters(const rumor_node *node, struct node_counters *out)
{
    struct node_stale_counters c;
    s_exchange_counters(node, &c);
    *out = (struct node_counters){
        .gossip_frames_sent = c.gossip_frames_sent,
        .gossip_bytes_sent = c.gossip_bytes_sent,
        .gossip_bytes_recv = c.gossip_bytes_recv,
        .seconds = node->start_ns != 0 ? s_since(node->start_ns) : 0,
        .seconds_gossip = c.t_gossip,
        .seconds_wait = c.t_wait,
    };
}

rumor_gossip *
node_gossip(rumor_node *node)
{
    return node->g;
}

const rumor_topology *
node_topology(const rumor_node *node)
{
    return node->topo;
}

void
node_start_clock(rumor_node *node)
{
    node->start_ns = rumor_clock_ns();
}
