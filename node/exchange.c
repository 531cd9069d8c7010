/*
 * The exchange of a node's steps with its neighbours: the one driver
 * that `rumor node` (node/runtime.c, rumor_node_run) and the peer API
 * (node/peer.c, under the Python Peer) both run, so the two cannot drift
 * apart. For each step: the fault path's handshakes and the stop plan
 * before it (node_step_begin), then the algorithm's rounds over the
 * transport with the step's deadline (node_gossip_step); around the run,
 * the links (node_wait_links), --join (node_join) and the final flush.
 *
 * One round serves every algorithm (s_round): emit, sending each message
 * as the instance makes it (rumor_gossip_emit_each), receive every
 * expected sender before the deadline (node_recv), check the codec, take
 * the stop plan, absorb. It runs in one of two modes. Strict, for
 * algorithms that cannot skip a neighbour: a neighbour that misses the
 * deadline, was heard from and then goes silent for the transport's down
 * time, or is refused ends the step early, logged with the peer's
 * liveness, and the run returns an error in bounded time. Skipping, for
 * those that can (rumor_gossip_can_skip), with the fault path of
 * node/faults.c: such a neighbour is left out of the round, what came is
 * staged (rumor_gossip_absorb_partial; in a stale exchange each message
 * as it comes, rumor_gossip_absorb_one, its sender ACKed at once), and
 * the fault path's ACKs, commit and liveness settle the edges; its handshakes
 * run between steps (deadlines, skipping, down and back, state transfer;
 * docs/reliability.md).
 *
 * This is the only code that turns an algorithm's rounds into messages
 * and back: `rumor node`, the peer API (Python) and the simulator-vs-
 * network tests (tests/integration/test_gossip_net.c, test_saef_net.c)
 * all run it, and gossip/ knows nothing of the network. It also keeps
 * what the metrics need: the time spent encoding and decoding (emit,
 * absorb) apart from the time spent waiting for neighbours, and the exact
 * wire bytes of the gossip messages this node sent and received
 * (rumor_gossip_wire_bytes), which the tests compare with the simulator's
 * count and with the transport's own counters.
 */
#include "node/runtime_node.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* --- stopping together -------------------------------------------------
 * A stop request (SIGTERM, Ctrl-C) must end every node after the same
 * step, so that their final checkpoints match and `--resume` continues
 * one consistent run. The request travels with the gossip: a node asked to
 * stop before step t plans to run no step from stop_at = t + margin on,
 * and every gossip message of step s carries stop_at - s in the header's
 * `stop` field (0: no stop planned); a node that hears a plan adopts the
 * earliest it can believe (s_stop_check: a neighbour's word alone cannot
 * end the run sooner than its own messages and the other neighbours'
 * allow). Messages of step s carry
 * what the sender learned by the end of step s - 1, so a plan reaches a
 * node k hops away within k steps of gossip; margin is the number of
 * steps that bounds this for the topology and algorithm (s_stop_margin),
 * so every node hears the plan before it reaches stop_at, and all stop
 * there (docs/node.md, "Stopping and resuming"). */

static uint32_t
s_stop_field(const rumor_node *node, uint64_t step)
{
    if (node->stop_at == UINT64_MAX || node->stop_at <= step)
        return 0;
    uint64_t ahead = node->stop_at - step;
    return ahead > UINT32_MAX ? UINT32_MAX : (uint32_t)ahead;
}

/* Hops a stop plan travels from node o to node k, hops[k * n + o]: the
 * directed ring for ring algorithms, else the shortest paths over all
 * phases' edges together (UINT32_MAX / 2: unreachable). NULL when n * n
 * does not fit in memory. */
static uint32_t *
s_stop_hops(const rumor_node *node)
{
    size_t n = node->n, phases = rumor_topology_phases(node->topo);
    uint32_t *dist = malloc(n * n * sizeof *dist + 1);
    if (dist == NULL)
        return NULL;
    if (rumor_gossip_uses_ring(node->g)) {
        for (size_t k = 0; k < n; k++)
            for (size_t o = 0; o < n; o++)
                dist[k * n + o] = (uint32_t)((k + n - o) % n);
        return dist;
    }
    for (size_t i = 0; i < n * n; i++)
        dist[i] = i % (n + 1) == 0 ? 0 : UINT32_MAX / 2;
    for (size_t ph = 0; ph < phases; ph++)
        for (uint32_t i = 0; i < n; i++) {
            size_t count = 0;
            const uint32_t *nb =
                rumor_topology_neighbors(node->topo, ph, i, &count, NULL);
            for (size_t k = 0; k < count; k++)
                dist[i * n + nb[k]] = dist[nb[k] * n + i] = 1;
        }
    for (size_t k = 0; k < n; k++) /* Floyd-Warshall: n is small */
        for (size_t i = 0; i < n; i++)
            for (size_t j = 0; j < n; j++)
                if (dist[i * n + k] + dist[k * n + j] < dist[i * n + j])
                    dist[i * n + j] = dist[i * n + k] + dist[k * n + j];
    return dist;
}

/* Steps that bound how long a plan takes to reach every node: the hops
 * it must travel (the directed ring for ring algorithms, else the
 * diameter of all phases' edges together) times the phases (an edge may
 * be used once per cycle) times local SGD's period (only its sync steps
 * send anything). */
static uint64_t
s_stop_margin(const rumor_node *node)
{
    size_t n = node->n;
    uint64_t hops = n > 1 ? n - 1 : 0;
    uint64_t per_hop =
        rumor_topology_phases(node->topo) * node->opts.gossip.period;
    if (node->stop_hops == NULL || rumor_gossip_uses_ring(node->g))
        return hops * per_hop;
    hops = 0;
    for (size_t i = 0; i < n * n; i++) /* unreachable pairs: never */
        if (node->stop_hops[i] > hops && node->stop_hops[i] < n)
            hops = node->stop_hops[i];
    return hops * per_hop;
}

/* Neighbour k's gossip message of step carries the plan field. */
static void
s_stop_seen(rumor_node *node, uint32_t k, uint64_t step, uint32_t field)
{
    struct node_stop_seen *s = &node->stop_seen[k];
    uint64_t plan = field != 0 ? step + field : UINT64_MAX;
    if (s->last == UINT64_MAX || plan != s->plan) {
        s->before = s->last;
        s->since = step;
        s->plan = plan;
    }
    s->last = step;
}

/* Whether plan could have come from node o: a plan made at t0 (stop_at
 * minus the margin) reaches a node h hops away, when nothing was skipped,
 * by t0 + h * per_hop, so every neighbour seen after that carries it (or
 * an earlier one). */
static bool
s_stop_from(const rumor_node *node, uint64_t plan, uint64_t t0, uint32_t o)
{
    uint64_t per_hop =
        rumor_topology_phases(node->topo) * node->opts.gossip.period;
    for (uint32_t k = 0; k < node->n; k++) {
        const struct node_stop_seen *s = &node->stop_seen[k];
        uint64_t hops = node->stop_hops[k * node->n + o];
        if (s->last == UINT64_MAX)
            continue;
        uint64_t without = s->plan <= plan ? s->before : s->last;
        if (without != UINT64_MAX && without >= t0 &&
            hops * per_hop <= without - t0)
            return false; /* it should have had the plan then */
    }
    return true;
}

/* Whether plan is to be believed (docs/reliability.md, "Claims from
 * peers"): a majority of the neighbours heard from carry it, or some
 * other node could have made it given what every neighbour's messages
 * carried. So a neighbour cannot end the run sooner by claiming to relay
 * a plan that its own earlier messages, or the other neighbours', belie;
 * the majority keeps a plan whose relay a skipped message delayed. */
static bool
s_stop_plausible(const rumor_node *node, uint64_t plan)
{
    size_t seen = 0, carry = 0;
    for (uint32_t k = 0; k < node->n; k++) {
        seen += node->stop_seen[k].last != UINT64_MAX;
        carry += node->stop_seen[k].last != UINT64_MAX &&
                 node->stop_seen[k].plan <= plan;
    }
    if (node->stop_hops == NULL || 2 * carry > seen)
        return true;
    if (plan < node->stop_margin)
        return false;
    uint64_t t0 = plan - node->stop_margin;
    for (uint32_t o = 0; o < node->n; o++)
        if (o != node->opts.id && s_stop_from(node, plan, t0, o))
            return true;
    return false;
}

/* After a round's messages: the earliest plan a neighbour carries that is
 * plausible becomes this node's; one that is not is logged (once a
 * second, naming a neighbour that carries it) and ignored. */
static void
s_stop_check(rumor_node *node)
{
    for (uint32_t k = 0; k < node->n; k++) {
        uint64_t plan = node->stop_seen[k].plan;
        if (node->stop_seen[k].last == UINT64_MAX || plan >= node->stop_at)
            continue;
        if (s_stop_plausible(node, plan)) {
            node->stop_at = plan;
            rumor_log(RUMOR_LOG_INFO,
                      "node %u stops the run: last step %llu",
                      k,
                      (unsigned long long)plan);
            continue;
        }
        uint64_t now = rumor_clock_ns();
        if (node->stop_doubted_ns != 0 &&
            now - node->stop_doubted_ns < 1000 * NODE_MS)
            continue;
        node->stop_doubted_ns = now;
        rumor_log(RUMOR_LOG_WARN,
                  "node %u says the run stops after step %llu, which no "
                  "node could have planned given the neighbours' "
                  "messages: ignored",
                  k,
                  (unsigned long long)plan);
    }
}

/* Before step t: a stop request of this process becomes a plan. */
static void
s_stop_plan(rumor_node *node, uint64_t t)
{
    if (!atomic_load(&node->stop) || node->stop_at != UINT64_MAX)
        return;
    node->stop_at = t + node->stop_margin;
    rumor_log(RUMOR_LOG_INFO,
              "stop requested before step %llu: stopping after step %llu "
              "with the neighbours",
              (unsigned long long)t + 1,
              (unsigned long long)node->stop_at);
}

/* The round number on the wire: an elastic ring's carries its epoch. */
static uint32_t
s_wire_round(const rumor_node *node, uint32_t round)
{
    uint32_t r = node->round_base + round;
    return node->elastic != NULL ? node_elastic_wire_round(node->elastic, r)
                                 : r;
}

static bool
s_view_changing(void *arg)
{
    return node_elastic_pump(arg);
}

/* Sends one of the round's messages. Skipping, a peer that is down gets
 * nothing and one whose queue is full (it does not read) is skipped. */
static rumor_err
s_send(rumor_node *node,
       const struct rumor_gossip_msg *m,
       uint64_t step,
       uint32_t round,
       uint64_t deadline)
{
    node_faults *f = node->faults;
    if (f != NULL && !node_faults_admit(f, m->peer))
        return RUMOR_OK;
    struct rumor_gossip_msg sent =
        f != NULL ? node_faults_outgoing(f, m, step) : *m;
    struct rumor_net_header h = {.kind = RUMOR_NET_KIND_GOSSIP,
                                 .codec = rumor_gossip_codec(node->g),
                                 .step = step,
                                 .round = s_wire_round(node, round),
                                 .stop = s_stop_field(node, step)};
    rumor_err rc =
        rumor_net_send(node->net, m->peer, &h, sent.data, sent.len, deadline);
    if (rc == RUMOR_ETIMEDOUT && f != NULL)
        return RUMOR_OK;
    if (rc == RUMOR_ETIMEDOUT && node->elastic != NULL) {
        node_elastic_suspect(node->elastic, m->peer);
        return rc;
    }
    if (rc != RUMOR_OK) {
        rumor_log(RUMOR_LOG_ERROR,
                  "step %llu: sending to node %u: %s",
                  (unsigned long long)step + 1,
                  m->peer,
                  rumor_strerror(rc));
        return rc;
    }
    uint64_t wire = rumor_gossip_wire_bytes(m->len);
    node->sum.gossip_bytes_sent += wire;
    node->gossip_frames_sent += (wire - m->len) / RUMOR_NET_HEADER_BYTES;
    return RUMOR_OK;
}

/* A round's sends, made as the instance hands over each message
 * (rumor_gossip_emit_each), so that the transport's I/O thread sends
 * message k while the instance makes k + 1 (on a device: its encode and
 * its copy to the host). The first error stops them. */
struct s_sender {
    rumor_node *node;
    uint64_t step, deadline;
    uint32_t round;
    uint64_t ns; /* spent in s_send: waiting, not encoding */
    rumor_err rc;
};

static void
s_ready(void *arg, const struct rumor_gossip_msg *m)
{
    struct s_sender *s = arg;
    if (s->rc != RUMOR_OK)
        return;
    uint64_t t0 = rumor_clock_ns();
    s->rc = s_send(s->node, m, s->step, s->round, s->deadline);
    s->ns += rumor_clock_ns() - t0;
}

/* Skipping in a stale exchange, a message is staged as it comes and its
 * sender gets this node's ACK at once: the sender's wait for that ACK then
 * holds neither this node's wait for its other neighbours nor their terms'
 * work. *ns: the time spent here, work and not waiting. */
static rumor_err
s_absorb_early(rumor_node *node,
               const struct node_faults_round *r,
               struct rumor_net_msg *m,
               uint32_t j,
               uint64_t *ns)
{
    uint64_t t0 = rumor_clock_ns();
    struct rumor_gossip_msg one = {j, m->payload, m->len};
    rumor_err rc = rumor_gossip_absorb_one(node->g, r->step, &one);
    rumor_net_msg_free(m);
    if (rc == RUMOR_OK)
        rc = node_faults_ack_early(node->faults, node->net, node->g, r, j);
    *ns += rumor_clock_ns() - t0;
    return rc;
}

/* Receives the message of the round's expected sender k into the inbox
 * (*got messages so far), or stages it at once (s_absorb_early, adding
 * to *absorb_ns). Skipping, a sender that is down, misses the deadline or
 * sends another codec is left out (r->have[k] false). sent: when this
 * node's messages had been emitted. */
static rumor_err
s_recv(rumor_node *node,
       uint32_t round,
       size_t k,
       uint64_t sent,
       struct node_faults_round *r,
       size_t *got,
       uint64_t *absorb_ns)
{
    node_faults *f = node->faults;
    uint32_t j = r->expect[k];
    struct rumor_net_msg *m = &node->got[*got];
    struct node_wait w = {.net = node->net,
                          .heard = node->heard,
                          .stop_by = &node->stop_by,
                          .skip = f};
    if (node->elastic != NULL) {
        w.interrupted = s_view_changing;
        w.arg = node->elastic;
    }
    node->have[k] = false;
    if (f != NULL && !node_faults_admit(f, j))
        return RUMOR_OK;
    rumor_err rc = node_recv(&w,
                             j,
                             RUMOR_NET_KIND_GOSSIP,
                             r->step,
                             s_wire_round(node, round),
                             r->deadline,
                             m);
    if (rc == RUMOR_ETIMEDOUT && node->elastic != NULL)
        node_elastic_suspect(node->elastic, j);
    if (rc == RUMOR_OK) {
        rc = node_gossip_codec_check(node->g, m, j);
        if (rc != RUMOR_OK)
            rumor_net_msg_free(m);
    }
    /* skipping, a sender that sends nothing in time, or in another codec
     * (refused like any malformed message), is left out */
    if (rc != RUMOR_OK)
        return f != NULL && (rc == RUMOR_ETIMEDOUT || rc == RUMOR_EPROTO)
                   ? RUMOR_OK
                   : rc;
    uint64_t now = rumor_clock_ns();
    node->have[k] = true;
    if (f != NULL)
        node_faults_heard(f, j, r->step);
    r->waited_ns = now - r->started;
    s_stop_seen(node, j, r->step, m->hdr.stop);
    /* adaptive compression measures the links on this traffic (an
     * adaptive instance never skips: rumor_gossip_can_skip) */
    rumor_gossip_link_observe(node->g, j, m->len, now - sent);
    node->sum.gossip_bytes_recv += rumor_gossip_wire_bytes(m->len);
    if (f != NULL && node_stale_mode(node) && rumor_gossip_can_skip(node->g))
        return s_absorb_early(node, r, m, j, absorb_ns);
    node->inbox[*got] = (struct rumor_gossip_msg){j, m->payload, m->len};
    (*got)++;
    return RUMOR_OK;
}

/* The fault path's end of a round: ACKs (waiting), then commit and
 * liveness. */
static rumor_err
s_settle(rumor_node *node, const struct node_faults_round *r)
{
    uint64_t t0 = rumor_clock_ns();
    rumor_err rc = node_faults_acks(node->faults, node->net, node->g, r);
    uint64_t t1 = rumor_clock_ns();
    node->t_wait += (double)(t1 - t0) * 1e-9;
    if (rc == RUMOR_OK)
        rc = node_faults_commit(node->faults, node->g, r);
    node->t_gossip += (double)(rumor_clock_ns() - t1) * 1e-9;
    return rc;
}

/* One round: emit, each message sent as soon as it is made, receive from
 * every expected sender (a stale exchange that skips: staging each as it
 * comes), absorb.
 * Strict (no fault path: the algorithm cannot skip), a sender that fails
 * to come fails the round; skipping, the round goes on without it, its
 * term is staged (rumor_gossip_absorb_partial) and the fault path settles
 * the edges (node/faults.c). */
static rumor_err
s_round(rumor_node *node, uint64_t step, uint32_t round, uint64_t deadline)
{
    uint64_t t0 = rumor_clock_ns();
    const struct rumor_gossip_msg *msgs = NULL;
    size_t count = 0, got = 0;
    uint64_t early_ns = 0;
    struct node_faults_round r = {.step = step,
                                  .expect = node->expect,
                                  .have = node->have,
                                  .started = t0,
                                  .deadline = deadline};
    struct s_sender snd = {node, step, deadline, round, 0, RUMOR_OK};
    rumor_err rc = rumor_gossip_emit_each(node->g,
                                          step,
                                          round,
                                          s_ready,
                                          &snd,
                                          &msgs,
                                          &count);
    uint64_t t1 = rumor_clock_ns();
    node->t_gossip += (double)(t1 - t0 - snd.ns) * 1e-9;
    node->t_wait += (double)snd.ns * 1e-9;
    if (rc == RUMOR_OK)
        rc = snd.rc;
    if (rc == RUMOR_OK)
        rc = rumor_gossip_expected(node->g,
                                   step,
                                   round,
                                   node->expect,
                                   node->n,
                                   &r.expected);
    bool heard = false;
    for (size_t k = 0; k < r.expected && rc == RUMOR_OK; k++) {
        rc = s_recv(node, round, k, t1, &r, &got, &early_ns);
        heard = heard || node->have[k];
    }
    if (heard)
        s_stop_check(node);
    uint64_t t2 = rumor_clock_ns();
    node->t_wait += (double)(t2 - t1 - early_ns) * 1e-9;
    node->t_gossip += (double)early_ns * 1e-9;
    if (rc == RUMOR_OK) {
        rc = node->faults != NULL
                 ? rumor_gossip_absorb_partial(node->g,
                                               step,
                                               round,
                                               node->inbox,
                                               got)
                 : rumor_gossip_absorb(node->g, step, round, node->inbox, got);
        if (rc != RUMOR_OK)
            rumor_log(RUMOR_LOG_ERROR,
                      "step %llu round %u: absorb: %s",
                      (unsigned long long)step + 1,
                      round,
                      rumor_strerror(rc));
    }
    for (size_t k = 0; k < got; k++)
        rumor_net_msg_free(&node->got[k]);
    node->t_gossip += (double)(rumor_clock_ns() - t2) * 1e-9;
    if (rc == RUMOR_OK && node->faults != NULL)
        rc = s_settle(node, &r);
    return rc;
}

static rumor_err
s_faults_new(rumor_node *node)
{
    const struct rumor_node_opts *o = &node->opts;
    struct node_faults_opts fo = {
        .topo = node->topo,
        .self = o->id,
        .n = node->n,
        .down_after = o->down_after,
        .deadline_ms = o->deadline_ms,
        .deadline_factor = o->deadline_factor,
        .join = o->join,
        .steps = node->external ? UINT64_MAX : o->steps,
        /* a stale exchange's thread must not
           touch the caller's optimizer */
        .optim = node_stale_mode(node) ? NULL : node->optim,
        .stop_by = &node->stop_by,
        .heard = node->heard,
        .to_host = node->src.to_host,
        .to_host_arg = node->src.arg};
    rumor_err rc = node_faults_new(&fo, &node->faults);
    /* a lone restart re-synchronises with its neighbours; after a stop
     * agreed by all, every node resumes the same step together */
    if (rc == RUMOR_OK && o->resume && !node->resumed_together)
        node_faults_restarted(node->faults);
    return rc;
}

/* Before step *t: handshakes with returning neighbours; *t moves forward
 * when they are ahead (after a stall), and steps in between are skipped
 * (they will not be gossiped by anyone). */
static rumor_err
s_faults_between(rumor_node *node, uint64_t *t)
{
    uint64_t next = *t;
    /* with overlap the gossip works on node->mix: terms settled between
     * steps must land in the model, not in a copy the next step drops.
     * Stale exchanges settle them in the exchanged copy, whose change
     * lands in the model with the step's (node/stale.h). */
    bool copy = node->mix != NULL && !node_stale_mode(node);
    if (copy)
        node_copy_mix(node, node->mix, node->model);
    rumor_err rc = node_faults_between(node->faults,
                                       node->net,
                                       node->g,
                                       node_exchanged(node),
                                       &next);
    if (copy)
        node_copy_mix(node, node->model, node->mix);
    if (rc == RUMOR_OK && next > *t) {
        *t = next;
        rumor_net_close_steps_before(node->net, next);
    }
    return rc;
}

/* --join: the model and step of a live neighbour, before any step. */
static rumor_err
s_faults_join(rumor_node *node, uint64_t *t, struct rumor_diag *diag)
{
    uint64_t next = *t;
    uint64_t deadline = rumor_clock_ns() + node->opts.connect_ms * NODE_MS;
    /* a model in device memory: the neighbour's arrives in a host copy */
    struct rumor_model *into = node->model, *host = NULL;
    const struct rumor_model *now = NULL;
    rumor_err rc = RUMOR_OK;
    if (node->src.to_host != NULL)
        rc = node->src.to_host(node->src.arg, &now);
    if (rc == RUMOR_OK && now != NULL)
        rc = rumor_model_clone(now, &host);
    into = host != NULL ? host : into;
    if (rc == RUMOR_OK)
        rc = node_faults_join(node->faults,
                              node->net,
                              node->g,
                              into,
                              deadline,
                              &next);
    if (rc == RUMOR_OK && host != NULL)
        rc = node->src.to_device(node->src.arg, host);
    rumor_model_free(&host);
    if (rc == RUMOR_OK && next > *t) {
        *t = next;
        node->first_step = next;
        rumor_net_close_steps_before(node->net, next);
    }
    if (rc != RUMOR_OK) {
        rumor_log(RUMOR_LOG_ERROR,
                  "--join: no neighbour sent its model within %u ms",
                  node->opts.connect_ms);
        rumor_diag_set(diag,
                       "",
                       0,
                       0,
                       "join: no neighbour sent its model within %u ms (%s)",
                       node->opts.connect_ms,
                       rumor_strerror(rc));
    }
    return rc;
}

/* The deadline span of step t: the connect time for the first step. */
uint64_t
node_step_span(const rumor_node *node, uint64_t t)
{
    if (t == node->first_step && !node->opts.join)
        return node->opts.connect_ms * NODE_MS;
    if (node->faults != NULL)
        return node_faults_span_ns(node->faults);
    return node->opts.deadline_ms * NODE_MS;
}

static rumor_err
s_gossip_step(rumor_node *node, uint64_t step, uint64_t deadline)
{
    uint32_t rounds = rumor_gossip_rounds(node->g, step);
    rumor_err rc = RUMOR_OK;
    for (uint32_t r = 0; r < rounds && rc == RUMOR_OK; r++)
        rc = s_round(node, step, r, deadline);
    rumor_net_close_steps_before(node->net, step);
    return rc;
}

/* A refusal before the end of the first step is a misconfiguration
 * (another model, algorithm or protocol version), which waiting cannot
 * cure: it ends the run at once, on both nodes of the link, with the
 * refusal's text. Later refusals (a wrong node joining) only keep that
 * node out. */
rumor_err
node_check_refusals(rumor_node *node, struct rumor_diag *diag)
{
    char why[RUMOR_NET_REFUSE_TEXT_MAX + 1];
    for (uint32_t peer = 0; peer < node->n; peer++) {
        if (peer == node->opts.id || !rumor_net_refused(node->net, peer, why))
            continue;
        rumor_log(RUMOR_LOG_ERROR, "cannot gossip with node %u: %s", peer, why);
        node->sum.refused = true;
        rumor_diag_set(diag,
                       "",
                       0,
                       0,
                       "cannot gossip with node %u: %s",
                       peer,
                       why);
        return RUMOR_EPROTO;
    }
    return RUMOR_OK;
}

rumor_err
node_wait_links(rumor_node *node, uint64_t deadline, struct rumor_diag *diag)
{
    rumor_err rc = node_check_refusals(node, diag);
    /* an elastic joiner talks to whoever of the ring is up */
    size_t wait = node->elastic != NULL && node_elastic_joining(node->elastic)
                      ? 0
                      : node->nlinked;
    for (size_t k = 0; k < wait && rc == RUMOR_OK; k++) {
        uint32_t peer = node->linked[k];
        rc = RUMOR_ETIMEDOUT;
        /* in slices, so a stop request (Ctrl-C) or a refusal is seen
         * while waiting */
        while (rc == RUMOR_ETIMEDOUT && !atomic_load(&node->stop)) {
            uint64_t until = rumor_clock_ns() + NODE_RECV_SLICE_MS * NODE_MS;
            rc = rumor_net_wait_ready(node->net,
                                      peer,
                                      until < deadline ? until : deadline);
            rumor_err refused = node_check_refusals(node, diag);
            if (refused != RUMOR_OK)
                return refused;
            if (rc == RUMOR_ETIMEDOUT && rumor_clock_ns() >= deadline)
                break;
        }
        if (atomic_load(&node->stop))
            return RUMOR_OK; /* the run loop stops before step 1 */
        if (rc != RUMOR_OK) {
            rumor_log(RUMOR_LOG_ERROR,
                      "link to node %u (%s) not up within %u ms: %s",
                      peer,
                      rumor_topology_endpoint(node->topo, peer),
                      node->opts.connect_ms,
                      rumor_strerror(rc));
            return rc;
        }
    }
    return RUMOR_OK;
}

/* After the run's last step t: the neighbours hear that this node is
 * done (an elastic ring's members, who may still need its state, or the
 * fault path's neighbours: node_faults_finish, best effort, a failure is
 * only logged), then the queued sends go out. */
void
node_finish(rumor_node *node, uint64_t t)
{
    if (node->elastic != NULL)
        node_elastic_finish(node->elastic, t + 1);
    if (node->faults != NULL) {
        rumor_err rc = node_faults_finish(node->faults, node->net, node->g, t);
        if (rc != RUMOR_OK)
            rumor_log(RUMOR_LOG_WARN,
                      "telling down neighbours the run ended: %s",
                      rumor_strerror(rc));
    }
    node_flush(node);
}

/* Whether sends queued for a neighbour may still reach it. One that ran
 * the last step (its DONE may come during the flush: a neighbour that
 * finished first exits at once, and what is queued for it then, this
 * node's DONE, would otherwise hold this node until the transport marks
 * it down, 3 s), or that the transport has not heard for its down time
 * (it exited or was killed a while ago), takes nothing more; one lost
 * more lately may be restarting and is given the flush's time. */
static bool
s_sends_draining(rumor_node *node)
{
    if (node->faults != NULL)
        node_faults_heard_done(node->faults, node->net);
    for (uint32_t j = 0; j < node->n; j++) {
        struct rumor_net_stats st;
        rumor_net_stats(node->net, j, &st);
        bool gone =
            (node->faults != NULL && node_faults_finished(node->faults, j)) ||
            rumor_net_peer_state(node->net, j) == RUMOR_NET_PEER_DOWN;
        if (st.queued_bytes > 0 && !gone)
            return true;
    }
    return false;
}

/* Sends queued for neighbours go out before the run reports its bytes
 * and closes the transport. This is the end of the run (its last step, or
 * a peer closing): from now on, neighbours that finish and go quiet are
 * no news. */
void
node_flush(rumor_node *node)
{
    rumor_net_set_quiet(node->net, true);
    uint64_t deadline = rumor_clock_ns() + NODE_FLUSH_MS * NODE_MS;
    uint64_t stop_by = atomic_load(&node->stop_by);
    deadline = deadline < stop_by ? deadline : stop_by;
    for (;;) {
        if (!s_sends_draining(node) || rumor_clock_ns() >= deadline)
            return;
        struct timespec ts = {0, 1000000};
        nanosleep(&ts, NULL);
    }
}

void
rumor_node_stop(rumor_node *node)
{
    /* async-signal-safe: lock-free atomics and clock_gettime only */
    uint64_t none = UINT64_MAX;
    uint64_t by = rumor_clock_ns() + node->opts.deadline_ms * NODE_MS;
    atomic_compare_exchange_strong(&node->stop_by, &none, by);
    atomic_store(&node->stop, true);
}

/* An elastic ring's joiner: taken in by the ring, with its state. */
static rumor_err
s_elastic_join(rumor_node *node, uint64_t *t, struct rumor_diag *diag)
{
    rumor_err rc = node_elastic_join(node->elastic, t);
    if (rc == RUMOR_OK) {
        node->first_step = *t;
        rumor_net_close_steps_before(node->net, *t);
    } else {
        rumor_diag_set(diag,
                       "",
                       0,
                       0,
                       "join: the ring did not take this node in (%s)",
                       rumor_strerror(rc));
    }
    return rc;
}

rumor_err
node_join(rumor_node *node, uint64_t *t, struct rumor_diag *diag)
{
    if (node->elastic != NULL && node_elastic_joining(node->elastic))
        return s_elastic_join(node, t, diag);
    if (node->faults == NULL || !node->opts.join || node->rejoining)
        return RUMOR_OK;
    return s_faults_join(node, t, diag);
}

/* The view change seen through; *t: the step the new ring runs. */
static rumor_err
s_elastic_recover(rumor_node *node, uint64_t *t)
{
    rumor_err rc = node_elastic_recover(node->elastic, t);
    if (rc == RUMOR_OK)
        rumor_net_close_steps_before(node->net, *t);
    return rc;
}

bool
node_step_retry(rumor_node *node, rumor_err *rc, uint64_t *t)
{
    if (node->elastic == NULL || *rc != RUMOR_ETIMEDOUT ||
        rumor_clock_ns() >= atomic_load(&node->stop_by))
        return false;
    *rc = s_elastic_recover(node, t);
    return true;
}

/* An elastic ring's step boundary; a view change under way is seen
 * through before the step (which may then be another one). */
static rumor_err
s_elastic_begin(rumor_node *node, uint64_t *t)
{
    bool change = true;
    rumor_err rc = RUMOR_OK;
    while (rc == RUMOR_OK && change) {
        rc = node_elastic_begin(node->elastic, *t, &change);
        if (rc == RUMOR_OK && change)
            rc = s_elastic_recover(node, t);
    }
    return rc;
}

rumor_err
node_step_begin(rumor_node *node, uint64_t *t, bool *stop)
{
    *stop = false;
    rumor_err rc = node->elastic != NULL ? s_elastic_begin(node, t) : RUMOR_OK;
    if (rc != RUMOR_OK)
        return rc;
    if (node->faults != NULL) {
        rc = s_faults_between(node, t);
        if (rc != RUMOR_OK || (!node->external && *t >= node->opts.steps))
            return rc;
    }
    s_stop_plan(node, *t);
    if (*t < node->stop_at)
        return RUMOR_OK;
    *stop = true;
    node->sum.stopped = true;
    if (node->external)
        rumor_log(RUMOR_LOG_WARN,
                  "stopped after step %llu",
                  (unsigned long long)*t);
    else
        rumor_log(RUMOR_LOG_WARN,
                  "stopped after step %llu of %llu",
                  (unsigned long long)*t,
                  (unsigned long long)node->opts.steps);
    return RUMOR_OK;
}

void
node_restarted(rumor_node *node, uint64_t t)
{
    node->first_step = t;
    if (node->faults == NULL || !node->opts.join)
        return;
    node_faults_restarted(node->faults);
    node->rejoining = true;
}

rumor_err
node_gossip_step(rumor_node *node,
                 rumor_gossip *g,
                 uint64_t step,
                 uint64_t deadline)
{
    /* the round code works on node->g: lend it the other instance, whose
     * round is strict (the fault path's acknowledgements and handshakes
     * settle the node's own algorithm's edges) */
    rumor_gossip *own = node->g;
    node_faults *faults = node->faults;
    if (g == NULL || g == own) /* no store: the metrics line reads them */
        return s_gossip_step(node, step, deadline);
    node->g = g;
    node->faults = NULL;
    rumor_err rc = s_gossip_step(node, step, deadline);
    node->g = own;
    node->faults = faults;
    return rc;
}

rumor_err
node_gossip_bucket(rumor_node *node,
                   rumor_gossip *g,
                   uint64_t step,
                   uint32_t round_base,
                   uint64_t deadline)
{
    node->round_base = round_base;
    rumor_err rc = node_gossip_step(node, g, step, deadline);
    node->round_base = 0;
    return rc;
}

bool
node_elastic_wanted(const rumor_node *node)
{
    return rumor_gossip_uses_ring(node->g) && node->n > 1;
}

/* A ring algorithm re-forms its ring around a dead node (node/elastic.c).
 * A node restarted alone (--join, or --resume from its own checkpoint) is
 * not a member until the ring takes it in. */
static rumor_err
s_elastic_new(rumor_node *node,
              struct rumor_model *model,
              const struct node_elastic_algo *algo)
{
    const struct rumor_node_opts *o = &node->opts;
    bool alone = o->join || (o->resume && !node->resumed_together);
    /* the node's own ring on a model in device memory: its STATE goes
     * through a host copy */
    const struct node_model_src *src = NULL;
    if (algo == NULL && node->src.be != NULL) {
        rumor_err rc = node_ring_host(node, &model, &src);
        if (rc != RUMOR_OK)
            return rc;
    }
    struct node_elastic_opts eo = {.self = o->id,
                                   .n = node->n,
                                   .deadline_ms = o->deadline_ms,
                                   .net = node->net,
                                   .model = model,
                                   .src = src,
                                   .algo = algo,
                                   .g = node->g,
                                   /* a stale exchange's thread must not
                                     touch the caller's optimizer */
                                   .optim = node_stale_mode(node) ? NULL
                                                                  : node->optim,
                                   .stop_by = &node->stop_by,
                                   .first_step = node->first_step,
                                   .steps = node->external ? 0 : o->steps,
                                   .keys = node->keys,
                                   .topo = node->topo,
                                   .join = alone,
                                   .wait_ms = o->connect_ms};
    return node_elastic_new(&eo, &node->elastic);
}

rumor_err
node_exchange_init(rumor_node *node)
{
    node->stop_seen = malloc(node->n * sizeof *node->stop_seen);
    if (node->stop_seen == NULL)
        return RUMOR_ENOMEM;
    for (uint32_t k = 0; k < node->n; k++)
        node->stop_seen[k] = (struct node_stop_seen){UINT64_MAX,
                                                     UINT64_MAX,
                                                     UINT64_MAX,
                                                     UINT64_MAX};
    node->stop_hops = s_stop_hops(node);
    node->stop_margin = s_stop_margin(node);
    /* a peer's ring waits for the peer's algorithms (node_elastic_attach),
     * unless its exchanges run stale: then the ring is the exchange
     * thread's alone, as rumor node's */
    if (node_elastic_wanted(node))
        return node->external && !node_stale_mode(node)
                   ? RUMOR_OK
                   : s_elastic_new(node, node_exchanged(node), NULL);
    if (!rumor_gossip_can_skip(node->g))
        return RUMOR_OK;
    return s_faults_new(node);
}

rumor_err
node_elastic_attach(rumor_node *node,
                    struct rumor_model *model,
                    const struct node_elastic_algo *algo)
{
    return s_elastic_new(node, model, algo);
}

node_elastic *
node_elastic_of(rumor_node *node)
{
    return node->elastic;
}
