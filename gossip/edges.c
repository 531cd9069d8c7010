/*
 * Skipping a neighbour without breaking the network average: the per-edge
 * ledger of staged gossip terms and the acknowledgements that settle them
 * (docs/protocol.md, "Edge acknowledgements"; docs/reliability.md).
 *
 * Mixing in difference form changes node i by gamma w_ij (x_j - x_i) and
 * node j by gamma w_ji (x_i - x_j): the two terms cancel in the network
 * sum only when both ends apply them. When a message can be lost, no
 * finite exchange lets both ends know at once that both hold both
 * messages (the two generals), so a term is not applied when it is
 * computed: it is *staged* on the edge, and the step's held bits travel
 * in acknowledgements. An ack from j says: "every step below upto is
 * decided; of those, I hold your message of exactly these steps". Node i
 * commits its staged term of step t when an ack from j has upto > t and
 * lists t, and discards it when upto > t and t is not listed. A decided
 * held bit never changes (the transport drops messages of closed steps),
 * so both ends reach the same verdict for every (edge, step): apply on
 * both or on neither, whatever order and whichever acks arrive. A term
 * whose ack has not come yet stays staged; acks are cumulative (each lists
 * the last GOSSIP_HELD_KEEP held steps), so any later ack settles it, and
 * the down/up handshake carries one too. Discard is safe only while the
 * step is still in the peer's list window: the driver marks a peer down
 * once a staged term is older than its down-after count (at most
 * RUMOR_GOSSIP_DOWN_AFTER_MAX), and stops sending to it, which keeps the
 * peer's list long enough (see the argument in docs/reliability.md).
 *
 * Terms are kept in double, computed from the two float snapshots of the
 * step, so i's term is exactly minus j's; commit adds gamma times their
 * sum (step, then peer order) to the model, rounded once, which is the
 * bits of the loss-free absorb when every term of a step commits at once.
 */
#include "core/le.h"
#include "gossip/gossip_impl.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define GOSSIP_ACK_MAGIC 0x4b434152u /* "RACK" as little-endian bytes */

struct gossip_term {
    uint64_t step;
    double *delta; /* x_j - x_i, numel doubles, kept for reuse; NULL
                      where the algorithm keeps its terms (own_terms) */
    double weight; /* w_ij, clipped: commit adds weight * delta */
    bool staged;   /* waiting for the peer's held bit */
    bool ready;    /* the peer holds ours too: apply at the next commit */
};

struct gossip_edge {
    uint64_t held[RUMOR_GOSSIP_ACK_MAX_STEPS]; /* ring of held steps */
    size_t held_count, held_next;
    uint64_t decided; /* every step below is decided on this edge */
    struct gossip_term term[RUMOR_GOSSIP_PENDING_MAX];
};

struct gossip_ledger {
    struct gossip_edge *edge; /* by node id */
    uint64_t decided;         /* every step below is decided */
    double *acc;              /* commit: gossip_apply_terms's scratch */
    /* the round of round_step (absorb_one, then absorb_partial): its
     * round_count staged terms (nodes slots), their neighbours' weights
     * and norms, clipped once all are known */
    uint64_t round_step;
    size_t round_count;
    struct gossip_term **round;
    uint32_t *round_peer;
    double *round_w, *round_norm;
    /* commit: the ready terms, their peers and weights, in order */
    double **commit_d;
    uint32_t *commit_peer;
    double *commit_w;
};

/* --- wire format (pure) ------------------------------------------------- */

size_t
rumor_gossip_ack_encode(const struct rumor_gossip_ack *a,
                        uint8_t *out,
                        size_t cap)
{
    size_t need = RUMOR_GOSSIP_ACK_HEADER_BYTES + 8 * (size_t)a->count;
    if (a->count > RUMOR_GOSSIP_ACK_MAX_STEPS || cap < need)
        return 0;
    core_put_u32(out, GOSSIP_ACK_MAGIC);
    core_put_u32(out + 4, a->count);
    core_put_u64(out + 8, a->upto);
    for (uint32_t k = 0; k < a->count; k++)
        core_put_u64(out + RUMOR_GOSSIP_ACK_HEADER_BYTES + 8 * k, a->held[k]);
    return need;
}

rumor_err
rumor_gossip_ack_decode(const uint8_t *buf,
                        size_t len,
                        struct rumor_gossip_ack *out)
{
    memset(out, 0, sizeof *out);
    if (len < RUMOR_GOSSIP_ACK_HEADER_BYTES ||
        core_get_u32(buf) != GOSSIP_ACK_MAGIC)
        return RUMOR_EPROTO;
    uint32_t count = core_get_u32(buf + 4);
    if (count > RUMOR_GOSSIP_ACK_MAX_STEPS ||
        len != RUMOR_GOSSIP_ACK_HEADER_BYTES + 8 * (size_t)count)
        return RUMOR_EPROTO;
    uint64_t upto = core_get_u64(buf + 8);
    for (uint32_t k = 0; k < count; k++) {
        uint64_t s = core_get_u64(buf + RUMOR_GOSSIP_ACK_HEADER_BYTES + 8 * k);
        /* strictly ascending and decided: anything else is not an ack */
        bool ordered = k == 0 || s > out->held[k - 1];
        if (!ordered || s >= upto) {
            memset(out, 0, sizeof *out);
            return RUMOR_EPROTO;
        }
        out->held[k] = s;
    }
    out->upto = upto;
    out->count = count;
    return RUMOR_OK;
}

/* --- the ledger --------------------------------------------------------- */

static rumor_err
s_ledger(rumor_gossip *g, struct gossip_ledger **out)
{
    if (g->ledger == NULL) {
        struct gossip_ledger *l = calloc(1, sizeof *l);
        if (l == NULL)
            return RUMOR_ENOMEM;
        l->edge = calloc(g->nodes, sizeof *l->edge);
        rumor_err rc = g->be->alloc(gossip_apply_bytes(g), (void **)&l->acc);
        l->round = malloc(g->nodes * sizeof *l->round);
        l->round_peer = malloc(g->nodes * sizeof *l->round_peer);
        l->round_w = malloc(g->nodes * sizeof *l->round_w);
        l->round_norm = malloc(g->nodes * sizeof *l->round_norm);
        size_t terms = g->nodes * RUMOR_GOSSIP_PENDING_MAX;
        l->commit_d = malloc(terms * sizeof *l->commit_d);
        l->commit_peer = malloc(terms * sizeof *l->commit_peer);
        l->commit_w = malloc(terms * sizeof *l->commit_w);
        g->ledger = l;
        if (rc != RUMOR_OK)
            return rc;
        if (!l->edge || !l->round || !l->round_peer || !l->round_w ||
            !l->round_norm || !l->commit_d || !l->commit_peer || !l->commit_w)
            return RUMOR_ENOMEM;
    }
    *out = g->ledger;
    return RUMOR_OK;
}

void
gossip_ledger_free(rumor_gossip *g)
{
    struct gossip_ledger *l = g->ledger;
    if (l == NULL)
        return;
    for (size_t i = 0; l->edge != NULL && i < g->nodes; i++)
        for (size_t k = 0; k < RUMOR_GOSSIP_PENDING_MAX; k++)
            g->be->release(l->edge[i].term[k].delta);
    free(l->edge);
    g->be->release(l->acc);
    free(l->round);
    free(l->round_peer);
    free(l->round_w);
    free(l->round_norm);
    free(l->commit_d);
    free(l->commit_peer);
    free(l->commit_w);
    free(l);
    g->ledger = NULL;
}

static void
s_held_add(struct gossip_edge *e, uint64_t step)
{
    e->held[e->held_next] = step;
    e->held_next = (e->held_next + 1) % RUMOR_GOSSIP_ACK_MAX_STEPS;
    if (e->held_count < RUMOR_GOSSIP_ACK_MAX_STEPS)
        e->held_count++;
}

/* A free term slot (its delta buffer allocated), or NULL when full. */
static struct gossip_term *
s_slot(const rumor_gossip *g, struct gossip_edge *e)
{
    for (size_t k = 0; k < RUMOR_GOSSIP_PENDING_MAX; k++) {
        struct gossip_term *t = &e->term[k];
        if (t->staged || t->ready)
            continue;
        if (t->delta == NULL && !g->own_terms &&
            g->be->alloc(g->numel * sizeof(double), (void **)&t->delta) !=
                RUMOR_OK)
            return NULL;
        return t;
    }
    return NULL;
}

/* Counts and logs (rate-limited) a message refused for NaN or Inf. */
static void
s_refuse_nonfinite(rumor_gossip *g, uint32_t peer)
{
    g->screen.nonfinite++;
    gossip_robust_note(g, peer, NAN, 0);
}

/* Clips the round's staged terms to the step's radius and weights them
 * (ClippedGossip: He, Karimireddy and Jaggi 2022; gossip/robust.c). With a
 * fixed radius (clip_norm) clip(x_j - x_i) = -clip(x_i - x_j), so the
 * average is kept; an adaptive radius differs between the two ends, so a
 * clipped pair moves it (docs/gossip.md, "Robust mixing"). The weight is
 * kept, not multiplied in: commit's acc += delta * weight rounds as the
 * loss-free absorb does, and saves a pass over the model-sized term. */
static void
s_screen_round(rumor_gossip *g, size_t count)
{
    struct gossip_ledger *l = g->ledger;
    double tau = gossip_robust_radius(g, l->round_norm, count);
    for (size_t k = 0; k < count; k++)
        l->round[k]->weight =
            l->round_w[k] *
            gossip_robust_scale(g, l->round_peer[k], l->round_norm[k], tau);
}

/* Stages peer k's term of step, or records that it is not held. */
static rumor_err
s_stage_one(rumor_gossip *g,
            uint64_t step,
            uint32_t peer,
            double weight,
            const struct rumor_gossip_msg *m,
            size_t *staged)
{
    struct gossip_ledger *l = g->ledger;
    struct gossip_edge *e = &l->edge[peer];
    if (m == NULL)
        return RUMOR_OK; /* not held: the peer missed the deadline */
    if (g->algo->edge_commit != NULL && gossip_edge_busy(g, peer))
        return RUMOR_OK; /* not held: the edge waits for a verdict */
    struct gossip_term *t = s_slot(g, e);
    if (t == NULL) {
        rumor_log(RUMOR_LOG_WARN,
                  "gossip %s: node %u: %d terms with %u wait for acks; "
                  "step %llu not taken",
                  g->algo->name,
                  g->self,
                  RUMOR_GOSSIP_PENDING_MAX,
                  peer,
                  (unsigned long long)step + 1);
        return RUMOR_OK;
    }
    double norm = NAN;
    rumor_err rc = g->algo->edge_diff(g, step, m, t->delta, &norm);
    if (rc == RUMOR_EPROTO) {
        g->screen.malformed++;
        rumor_log(RUMOR_LOG_WARN,
                  "gossip %s: node %u rejected the message of %u: %zu "
                  "bytes do not fit the model",
                  g->algo->name,
                  g->self,
                  peer,
                  m->len);
        return RUMOR_OK;
    }
    if (rc == RUMOR_ENUMERIC) {
        s_refuse_nonfinite(g, peer);
        return RUMOR_OK;
    }
    if (rc != RUMOR_OK)
        return rc;
    if (!isfinite(norm)) {
        s_refuse_nonfinite(g, peer);
        return RUMOR_OK;
    }
    l->round[*staged] = t;
    l->round_peer[*staged] = peer;
    l->round_w[*staged] = weight;
    l->round_norm[(*staged)++] = norm;
    t->step = step;
    t->staged = true;
    s_held_add(e, step);
    return RUMOR_OK;
}

bool
rumor_gossip_can_skip(const rumor_gossip *g)
{
    /* The ledger settles whole steps, so one round per step; the
     * adaptive controller's accounting assumes every link is sent. */
    if (g->algo->edge_commit != NULL && g->adapt != NULL)
        return false;
    return g->algo->edge_diff != NULL && g->algo->rounds(g, 0) == 1;
}

bool
gossip_edge_busy(const rumor_gossip *g, uint32_t peer)
{
    const struct gossip_ledger *l = g->ledger;
    for (size_t k = 0;
         l != NULL && peer < g->nodes && k < RUMOR_GOSSIP_PENDING_MAX;
         k++)
        if (l->edge[peer].term[k].staged || l->edge[peer].term[k].ready)
            return true;
    return false;
}

/* The round of step: a new one starts with no staged term. */
static void
s_round_open(struct gossip_ledger *l, uint64_t step)
{
    if (l->round_step != step) {
        l->round_step = step;
        l->round_count = 0;
    }
}

rumor_err
rumor_gossip_absorb_one(rumor_gossip *g,
                        uint64_t step,
                        const struct rumor_gossip_msg *m)
{
    struct gossip_ledger *l = NULL;
    if (!rumor_gossip_can_skip(g) || m->peer >= g->nodes)
        return RUMOR_EINVAL;
    rumor_err rc = s_ledger(g, &l);
    if (rc != RUMOR_OK)
        return rc;
    size_t phase = rumor_topology_phase_at(g->topo, step), peers = 0, k = 0;
    const double *w = NULL;
    const uint32_t *nbr =
        rumor_topology_neighbors(g->topo, phase, g->self, &peers, &w);
    while (k < peers && nbr[k] != m->peer)
        k++;
    struct gossip_edge *e = &l->edge[m->peer];
    if (k == peers || e->decided > step)
        return RUMOR_EINVAL; /* not a neighbour, or its step is decided */
    s_round_open(l, step);
    rc = s_stage_one(g, step, m->peer, w[k], m, &l->round_count);
    if (rc == RUMOR_OK)
        e->decided = step + 1;
    return rc;
}

rumor_err
rumor_gossip_absorb_partial(rumor_gossip *g,
                            uint64_t step,
                            uint32_t round,
                            const struct rumor_gossip_msg *msgs,
                            size_t count)
{
    if (!rumor_gossip_can_skip(g))
        return rumor_gossip_absorb(g, step, round, msgs, count);
    struct gossip_ledger *l = NULL;
    rumor_err rc = s_ledger(g, &l);
    if (rc != RUMOR_OK)
        return rc;
    size_t phase = rumor_topology_phase_at(g->topo, step), peers = 0;
    const double *w = NULL;
    const uint32_t *nbr =
        rumor_topology_neighbors(g->topo, phase, g->self, &peers, &w);
    s_round_open(l, step);
    for (size_t k = 0; k < peers && rc == RUMOR_OK; k++) {
        const struct rumor_gossip_msg *m = NULL;
        if (l->edge[nbr[k]].decided > step)
            continue; /* staged by absorb_one */
        for (size_t i = 0; i < count; i++)
            if (msgs[i].peer == nbr[k] && m == NULL)
                m = &msgs[i];
        rc = s_stage_one(g, step, nbr[k], w[k], m, &l->round_count);
    }
    s_screen_round(g, l->round_count);
    l->round_count = 0;
    if (rc == RUMOR_OK && step + 1 > l->decided)
        l->decided = step + 1;
    return rc;
}

rumor_err
rumor_gossip_ack_make(rumor_gossip *g,
                      uint32_t peer,
                      struct rumor_gossip_ack *out)
{
    memset(out, 0, sizeof *out);
    struct gossip_ledger *l = NULL;
    if (peer >= g->nodes)
        return RUMOR_EINVAL;
    rumor_err rc = s_ledger(g, &l);
    if (rc != RUMOR_OK)
        return rc;
    const struct gossip_edge *e = &l->edge[peer];
    size_t first = (e->held_next + RUMOR_GOSSIP_ACK_MAX_STEPS - e->held_count) %
                   RUMOR_GOSSIP_ACK_MAX_STEPS;
    for (size_t k = 0; k < e->held_count; k++)
        out->held[k] = e->held[(first + k) % RUMOR_GOSSIP_ACK_MAX_STEPS];
    out->count = (uint32_t)e->held_count;
    out->upto = e->decided > l->decided ? e->decided : l->decided;
    return RUMOR_OK;
}

static bool
s_listed(const struct rumor_gossip_ack *a, uint64_t step)
{
    for (uint32_t k = 0; k < a->count; k++)
        if (a->held[k] == step)
            return true;
    return false;
}

rumor_err
rumor_gossip_ack_take(rumor_gossip *g,
                      uint32_t peer,
                      const struct rumor_gossip_ack *a)
{
    struct gossip_ledger *l = NULL;
    if (peer >= g->nodes)
        return RUMOR_EINVAL;
    rumor_err rc = s_ledger(g, &l);
    if (rc != RUMOR_OK)
        return rc;
    for (size_t k = 0; k < RUMOR_GOSSIP_PENDING_MAX; k++) {
        struct gossip_term *t = &l->edge[peer].term[k];
        if (!t->staged || t->step >= a->upto)
            continue;
        t->staged = false;
        t->ready = s_listed(a, t->step);
    }
    return RUMOR_OK;
}

size_t
rumor_gossip_pending(const rumor_gossip *g, uint32_t peer, uint64_t *oldest)
{
    const struct gossip_ledger *l = g->ledger;
    size_t n = 0;
    *oldest = UINT64_MAX;
    for (size_t k = 0;
         l != NULL && peer < g->nodes && k < RUMOR_GOSSIP_PENDING_MAX;
         k++) {
        const struct gossip_term *t = &l->edge[peer].term[k];
        if (t->staged) {
            n++;
            if (t->step < *oldest)
                *oldest = t->step;
        }
    }
    return n;
}

void
rumor_gossip_edge_forget(rumor_gossip *g, uint32_t peer)
{
    struct gossip_ledger *l = g->ledger;
    if (peer >= g->nodes)
        return;
    if (g->algo->edge_reset != NULL)
        g->algo->edge_reset(g, peer);
    if (l == NULL)
        return;
    struct gossip_edge *e = &l->edge[peer];
    for (size_t k = 0; k < RUMOR_GOSSIP_PENDING_MAX; k++) {
        e->term[k].staged = false;
        e->term[k].ready = false;
    }
    e->held_count = 0;
    e->held_next = 0;
    e->decided = 0;
}

void
rumor_gossip_fast_forward(rumor_gossip *g, uint64_t step)
{
    struct gossip_ledger *l = NULL;
    if (s_ledger(g, &l) == RUMOR_OK && step > l->decided)
        l->decided = step; /* skipped steps: nothing held */
}

/* The next ready term in (step, peer) order after (*step, *peer). */
static struct gossip_term *
s_next_ready(rumor_gossip *g, uint64_t min_step)
{
    struct gossip_ledger *l = g->ledger;
    struct gossip_term *best = NULL;
    for (size_t i = 0; i < g->nodes; i++)
        for (size_t k = 0; k < RUMOR_GOSSIP_PENDING_MAX; k++) {
            struct gossip_term *t = &l->edge[i].term[k];
            if (t->ready && t->step >= min_step &&
                (best == NULL || t->step < best->step))
                best = t;
        }
    return best;
}

rumor_err
rumor_gossip_commit(rumor_gossip *g, size_t *applied)
{
    struct gossip_ledger *l = g->ledger;
    *applied = 0;
    if (l == NULL)
        return RUMOR_OK;
    /* steps ascending; inside a step, peers ascending (node order) */
    size_t n = 0;
    for (struct gossip_term *t = s_next_ready(g, 0); t != NULL;
         t = s_next_ready(g, t->step)) {
        uint64_t step = t->step;
        for (size_t i = 0; i < g->nodes; i++)
            for (size_t k = 0; k < RUMOR_GOSSIP_PENDING_MAX; k++) {
                struct gossip_term *u = &l->edge[i].term[k];
                if (!u->ready || u->step != step)
                    continue;
                l->commit_d[n] = u->delta;
                l->commit_peer[n] = (uint32_t)i;
                l->commit_w[n++] = u->weight;
                u->ready = false;
                if (g->algo->edge_commit != NULL)
                    g->algo->edge_commit(g, (uint32_t)i, step);
            }
    }
    *applied = n;
    if (n == 0)
        return RUMOR_OK;
    struct gossip_terms terms = {(const double *const *)l->commit_d,
                                 l->commit_w,
                                 n,
                                 g->own_terms ? l->commit_peer : NULL};
    return gossip_apply_terms(g, l->acc, NULL, &terms);
}

void
rumor_gossip_screen_stats(const rumor_gossip *g,
                          struct rumor_gossip_screen_stats *out)
{
    *out = g->screen;
    if (g->algo == &gossip_localsgd)
        gossip_localsgd_screen(g, out);
}
