/*
 * Riding over faulty neighbours in the node's step loop (docs/reliability.md
 * has the user view, docs/protocol.md the messages).
 *
 * Deadlines. Every wait has one. The step's span is --deadline-ms, or,
 * with --deadline-factor F > 0 (the default), min(--deadline-ms,
 * max(NODE_FAULTS_FLOOR_MS, F * the longest wait of the last
 * NODE_FAULTS_WINDOW steps)): a high percentile of what the neighbours
 * really take, with head room, so a dead peer costs a fraction of a second
 * rather than the configured cap, while a slow but live link keeps its
 * time. Waits of steps in which someone was missing are not recorded (they
 * measure the deadline, not the network).
 *
 * Skipping. A neighbour whose message misses the deadline is skipped for
 * the step: its weight stays with this node (the difference form leaves
 * x_i where it is for that term). The edge's term is staged, and settled
 * by acknowledgements (gossip/edges.c): after absorbing, every node sends
 * each neighbour an ACK (the steps it holds from it) and waits for theirs
 * until the deadline plus a grace of a quarter span; terms both ends hold
 * are committed. An ACK that comes late is not lost: later ACKs list the
 * same steps.
 *
 * Down and back. A peer that sent nothing (no message, no ACK) for
 * --down-after consecutive steps, or with a term staged for that many
 * steps, is marked down: no more messages or waits for it, only a SYNC
 * probe every backoff (NODE_FAULTS_PROBE_MS doubling to
 * NODE_FAULTS_PROBE_MAX_MS). A node that receives a SYNC answers with its
 * own; both take the other's acknowledgement (every staged term settled
 * the same way at both ends), the one behind jumps to the other's step,
 * and the edge is up again from the next step. A node with every neighbour
 * down waits up to a span for a handshake before each step, so it cannot
 * race ahead of the network it will rejoin; a node that ran the run's
 * last step sends its neighbours a SYNC with DONE, and a neighbour that
 * hears it waits for it no more and, with nobody left to race ahead of,
 * is no longer held back (without it, a node that its neighbours marked
 * down before they finished trained on at one step per span). A SYNC
 * with JOIN comes from
 * a restarted process: the old edge state is dropped first (staged terms,
 * and per-edge algorithm state, which both ends restart from what they
 * derive alone); the restarted process does the same on its side. A node
 * started with --join sends SYNC with WANT_STATE and starts from the model,
 * optimizer state and step of the first neighbour that answers.
 */
#include "node/faults.h"

#include "node/statesync.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define NODE_FAULTS_MS           1000000ull
#define NODE_FAULTS_FLOOR_MS     2000
#define NODE_FAULTS_WINDOW       32
#define NODE_FAULTS_SLICE_MS     50
#define NODE_FAULTS_POLL_MS      5 /* alone: how often to look for a SYNC */
#define NODE_FAULTS_PROBE_MS     100
#define NODE_FAULTS_PROBE_MAX_MS 2000
#define NODE_FAULTS_DOUBT_MS     1000 /* a peer's refused claims: one line */
/* A joiner takes a neighbour's state only when a second neighbour's model
 * is this close (relative L2): gossip neighbours sit near consensus, a
 * forged model (all 3.0, say) does not (docs/reliability.md, "Trust"). */
#define NODE_FAULTS_VOUCH_DISTANCE 0.5

struct s_peer {
    bool neighbour; /* in some phase */
    bool up;
    uint32_t misses;     /* consecutive steps with nothing from it */
    uint64_t probe_ns;   /* next SYNC while down */
    uint32_t backoff_ms; /* current probe interval */
    bool rejoin;         /* the next probe says JOIN (we restarted) */
    bool joined;         /* its JOIN was taken since it was last down */
    bool done;           /* it ran the run's last step (SYNC with DONE) */
    uint64_t claim;      /* the furthest next step it says it is at */
    uint32_t raised;     /* times it said a further one, unbelied */
    bool said_done;      /* a DONE not yet believed: taken once it is down */
    struct rumor_gossip_ack done_ack; /* that DONE's acknowledgement */
    uint64_t doubted_ns; /* when a claim of its was last logged as refused */
};

/* The test hook (RUMOR_FAULTS_POISON, docs/reliability.md): this node
 * corrupts what it sends in some steps, as a faulty or hostile peer. */
#define NODE_POISON_MAX 4
struct s_poison {
    char kind;         /* 'n' NaN, 'i' Inf, 'h' +1e6 everywhere */
    uint64_t from, to; /* steps [from, to) */
};

struct node_faults {
    struct node_faults_opts o;
    struct s_peer *peer;
    uint32_t *expect;   /* --join: the senders asked for the model */
    bool *acked;        /* per node: its ACK came in the last round */
    uint64_t *ack_sent; /* per node: 1 + the step of the last ACK sent */
    uint64_t *votes;    /* scratch: the up neighbours' claims */
    uint64_t wait_ns[NODE_FAULTS_WINDOW];
    size_t waits;
    struct node_state_buf state; /* STATE messages sent to joiners */
    struct node_faults_stats st;
    struct s_poison poison[NODE_POISON_MAX];
    size_t npoison;
    float *bad; /* a corrupted copy of a message */
    size_t bad_cap;
};

/* --- the test hook ----------------------------------------------------------
 */

/* "KIND:FROM:COUNT[,...]" with KIND nan, inf or huge. */
static void
s_poison_parse(node_faults *f, const char *spec)
{
    while (spec != NULL && *spec != '\0' && f->npoison < NODE_POISON_MAX) {
        struct s_poison *p = &f->poison[f->npoison];
        char *end = NULL;
        const char *colon = strchr(spec, ':');
        if (colon == NULL)
            return;
        p->kind = spec[0];
        p->from = strtoull(colon + 1, &end, 10);
        if (end == NULL || *end != ':')
            return;
        p->to = p->from + strtoull(end + 1, &end, 10);
        f->npoison++;
        rumor_log(RUMOR_LOG_WARN,
                  "test hook: sending %c-poisoned messages in steps "
                  "[%llu, %llu)",
                  p->kind,
                  (unsigned long long)p->from,
                  (unsigned long long)p->to);
        spec = *end == ',' ? end + 1 : NULL;
    }
}

struct rumor_gossip_msg
node_faults_outgoing(node_faults *f,
                     const struct rumor_gossip_msg *m,
                     uint64_t step)
{
    const struct s_poison *p = NULL;
    for (size_t k = 0; k < f->npoison; k++)
        if (step >= f->poison[k].from && step < f->poison[k].to)
            p = &f->poison[k];
    size_t n = m->len / sizeof(float);
    if (p == NULL || n == 0)
        return *m;
    if (n > f->bad_cap) {
        float *bad = realloc(f->bad, n * sizeof(float));
        if (bad == NULL)
            return *m;
        f->bad = bad;
        f->bad_cap = n;
    }
    memcpy(f->bad, m->data, n * sizeof(float));
    for (size_t e = 0; e < n; e++)
        f->bad[e] = p->kind == 'h' ? f->bad[e] + 1e6f : f->bad[e];
    f->bad[n / 2] = p->kind == 'n'   ? NAN
                    : p->kind == 'i' ? INFINITY
                                     : f->bad[n / 2];
    return (struct rumor_gossip_msg){m->peer,
                                     (const uint8_t *)f->bad,
                                     n * sizeof(float)};
}

/* --- lifecycle ----------------------------------------------------------- */

rumor_err
node_faults_new(const struct node_faults_opts *o, node_faults **out)
{
    *out = NULL;
    node_faults *f = calloc(1, sizeof *f);
    if (f == NULL)
        return RUMOR_ENOMEM;
    f->o = *o;
    f->peer = calloc(o->n, sizeof *f->peer);
    f->expect = calloc(o->n, sizeof *f->expect);
    f->acked = calloc(o->n, sizeof *f->acked);
    f->ack_sent = calloc(o->n, sizeof *f->ack_sent);
    f->votes = calloc(o->n, sizeof *f->votes);
    if (!f->peer || !f->expect || !f->acked || !f->ack_sent || !f->votes) {
        node_faults_destroy(&f);
        return RUMOR_ENOMEM;
    }
    for (uint32_t i = 0; i < o->n; i++)
        f->peer[i].up = true;
    for (size_t ph = 0; ph < rumor_topology_phases(o->topo); ph++) {
        size_t count = 0;
        const uint32_t *nb =
            rumor_topology_neighbors(o->topo, ph, o->self, &count, NULL);
        for (size_t k = 0; k < count; k++)
            f->peer[nb[k]].neighbour = true;
    }
    s_poison_parse(f, getenv("RUMOR_FAULTS_POISON"));
    *out = f;
    return RUMOR_OK;
}

void
node_faults_destroy(node_faults **self_p)
{
    node_faults *f = *self_p;
    if (f == NULL)
        return;
    free(f->peer);
    free(f->expect);
    free(f->acked);
    free(f->ack_sent);
    free(f->votes);
    node_state_buf_free(&f->state);
    free(f->bad);
    free(f);
    *self_p = NULL;
}

void
node_faults_stats(const node_faults *f, struct node_faults_stats *out)
{
    *out = f->st;
    out->peers_down = 0;
    for (uint32_t i = 0; i < f->o.n; i++)
        out->peers_down += f->peer[i].neighbour && !f->peer[i].up;
}

bool
node_faults_up(const node_faults *f, uint32_t peer)
{
    return peer < f->o.n && f->peer[peer].up;
}

bool
node_faults_finished(const node_faults *f, uint32_t peer)
{
    return peer < f->o.n && (f->peer[peer].done || f->peer[peer].said_done);
}

/* A DONE for the run's last step (any step for a peer, whose run has no
 * set length). */
static bool
s_done_of_run(const node_faults *f, const struct node_sync *s)
{
    return (s->flags & NODE_SYNC_DONE) &&
           (s->step == f->o.steps || f->o.steps == UINT64_MAX);
}

void
node_faults_heard_done(node_faults *f, rumor_net *net)
{
    for (uint32_t j = 0; j < f->o.n; j++) {
        struct s_peer *p = &f->peer[j];
        struct rumor_net_msg msg;
        if (j == f->o.self || !p->neighbour || p->done)
            continue;
        while (rumor_net_recv(net, j, RUMOR_NET_KIND_SYNC, 0, 0, 0, &msg) ==
               RUMOR_OK) {
            struct node_sync s;
            if (node_sync_decode(msg.payload, msg.len, &s) == RUMOR_OK &&
                s_done_of_run(f, &s))
                p->said_done = true;
            rumor_net_msg_free(&msg);
        }
    }
}

uint64_t
node_faults_span_ns(const node_faults *f)
{
    uint64_t cap = (uint64_t)f->o.deadline_ms * NODE_FAULTS_MS;
    if (f->o.deadline_factor <= 0 || f->waits < NODE_FAULTS_WINDOW / 4)
        return cap;
    uint64_t worst = 0;
    size_t n = f->waits < NODE_FAULTS_WINDOW ? f->waits : NODE_FAULTS_WINDOW;
    for (size_t k = 0; k < n; k++)
        if (f->wait_ns[k] > worst)
            worst = f->wait_ns[k];
    uint64_t span = (uint64_t)(f->o.deadline_factor * (double)worst);
    uint64_t floor = NODE_FAULTS_FLOOR_MS * NODE_FAULTS_MS;
    span = span > floor ? span : floor;
    return span < cap ? span : cap;
}

/* --- messages ------------------------------------------------------------ */

rumor_err
node_gossip_codec_check(const rumor_gossip *g,
                        const struct rumor_net_msg *m,
                        uint32_t peer)
{
    uint8_t own = rumor_gossip_codec(g);
    if (m->hdr.codec == own)
        return RUMOR_OK;
    rumor_log(RUMOR_LOG_ERROR,
              "step %llu: node %u sends gossip in codec %s (%u), this node "
              "in %s (%u)",
              (unsigned long long)m->hdr.step + 1,
              peer,
              m->hdr.codec ? rumor_codec_name(m->hdr.codec) : "none",
              m->hdr.codec,
              own ? rumor_codec_name(own) : "none",
              own);
    return RUMOR_EPROTO;
}

/* A control message: ACK (of step) or a handshake kind (step: the
 * sender's next step). */
static rumor_err
s_send(node_faults *f,
       rumor_net *net,
       uint32_t peer,
       uint8_t kind,
       uint64_t step,
       const void *data,
       size_t len,
       uint64_t deadline)
{
    struct rumor_net_header h = {.kind = kind, .step = step};
    rumor_err rc = rumor_net_send(net, peer, &h, data, len, deadline);
    if (rc == RUMOR_OK) {
        uint64_t wire = rumor_gossip_wire_bytes(len);
        f->st.control_bytes_sent += wire;
        f->st.control_frames_sent += (wire - len) / RUMOR_NET_HEADER_BYTES;
    }
    return rc;
}

static void
s_log_missing(uint64_t step, uint32_t peer, const char *why, rumor_net_state st)
{
    rumor_log(RUMOR_LOG_ERROR,
              "step %llu: no message from node %u (%s, link %s); stopping",
              (unsigned long long)step + 1,
              peer,
              why,
              rumor_net_state_name(st));
}

/* --- claims: what a peer says about its own step ---------------------------
 * A peer's step (a GOSSIP of a later step, a SYNC's next step) and its
 * DONE move this node only as far as it can check them (docs/reliability.md,
 * "Claims from peers"): a step at or past the run's --steps is never
 * believed; a jump goes to a step that a majority of the up neighbours
 * say they are at or past, or that one neighbour has said, each time
 * further on, down_after times without a message of an earlier step from
 * it belying it (a neighbour that went on without this node sends ever
 * later frames and probes and nothing else; one forged frame says one
 * step, however often it is looked at, and a liar whose honest node goes
 * on gossiping with this one is caught by its next message). A claim
 * that fails is logged, naming the sender, at most once per
 * NODE_FAULTS_DOUBT_MS per peer. */

static void s_doubt(node_faults *f, uint32_t j, const char *fmt, ...)
    RUMOR_PRINTF(3, 4);

static void
s_doubt(node_faults *f, uint32_t j, const char *fmt, ...)
{
    struct s_peer *p = &f->peer[j];
    uint64_t now = rumor_clock_ns();
    if (p->doubted_ns != 0 &&
        now - p->doubted_ns < NODE_FAULTS_DOUBT_MS * NODE_FAULTS_MS)
        return;
    p->doubted_ns = now;
    char text[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(text, sizeof text, fmt, ap);
    va_end(ap);
    rumor_log(RUMOR_LOG_WARN, "node %u %s: ignored", j, text);
}

/* Peer j says its next step is next, in a message of kind what. */
static void
s_claim(node_faults *f, uint32_t j, uint64_t next, const char *what)
{
    if (next >= f->o.steps) {
        s_doubt(f,
                j,
                "claims step %llu in a %s, past the run's %llu steps",
                (unsigned long long)next + 1,
                what,
                (unsigned long long)f->o.steps);
        return;
    }
    struct s_peer *p = &f->peer[j];
    if (next > p->claim) {
        p->claim = next;
        p->raised++;
    }
}

/* Peer j sent a message of step: it is not past it, whatever it said. */
static void
s_belied(node_faults *f, uint32_t j, uint64_t step)
{
    struct s_peer *p = &f->peer[j];
    if (p->claim <= step)
        return;
    if (p->claim > step + 1)
        s_doubt(f,
                j,
                "said it is at step %llu, then sent a message of step %llu: "
                "its claim is",
                (unsigned long long)p->claim + 1,
                (unsigned long long)step + 1);
    p->claim = 0;
    p->raised = 0;
}

void
node_faults_heard(node_faults *f, uint32_t peer, uint64_t step)
{
    s_belied(f, peer, step);
}

static int
s_descending(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? 1 : x > y ? -1 : 0;
}

/* The furthest step that a majority of the up neighbours say they are
 * at or past (next when none is ahead); *who: one that says it. */
static uint64_t
s_agreed(node_faults *f, uint64_t next, uint32_t *who)
{
    size_t v = 0;
    for (uint32_t j = 0; j < f->o.n; j++) {
        const struct s_peer *p = &f->peer[j];
        if (j != f->o.self && p->neighbour && p->up && !p->done)
            f->votes[v++] = p->claim > next ? p->claim : next;
    }
    uint64_t agreed = next;
    if (v > 0) {
        qsort(f->votes, v, sizeof *f->votes, s_descending);
        agreed = f->votes[v / 2];
    }
    /* the least of the claims that stood, so no one of them goes further
     * than another */
    uint64_t stood = UINT64_MAX;
    for (uint32_t j = 0; j < f->o.n; j++) {
        const struct s_peer *p = &f->peer[j];
        if (j != f->o.self && p->neighbour && !p->done && p->claim > next &&
            p->raised >= f->o.down_after && p->claim < stood)
            stood = p->claim;
    }
    if (stood != UINT64_MAX && stood > agreed)
        agreed = stood;
    for (uint32_t j = 0; j < f->o.n; j++)
        if (j != f->o.self && f->peer[j].claim == agreed)
            *who = j;
    return agreed;
}

/* After a jump (or none) to next: the up neighbours' claims further on
 * had no majority and have not stood yet. One step ahead is no news: a
 * neighbour that skipped this node's message of the last step is
 * there. */
static void
s_doubt_claims(node_faults *f, uint64_t next)
{
    for (uint32_t j = 0; j < f->o.n; j++) {
        struct s_peer *p = &f->peer[j];
        if (p->up && p->claim > next + 1)
            s_doubt(f,
                    j,
                    "claims to be at step %llu while this node is at step "
                    "%llu, and no majority of the neighbours says so "
                    "(yet)",
                    (unsigned long long)p->claim + 1,
                    (unsigned long long)next + 1);
    }
}

/* A SYNC with DONE says its sender ran the run's last step. It is taken
 * when its step is the run's --steps (when known) and the sender is not
 * gossiping with this node far from the end (an up neighbour that ran on
 * without this node misses its deadlines and is marked down: its DONE is
 * then taken, s_done_gone). */
static bool
s_done_believed(node_faults *f, uint32_t j, uint64_t step, uint64_t next)
{
    if (f->o.steps != UINT64_MAX && step != f->o.steps) {
        s_doubt(f,
                j,
                "says it ran the last step of a %llu-step run, this run "
                "has %llu steps",
                (unsigned long long)step,
                (unsigned long long)f->o.steps);
        return false;
    }
    if (f->peer[j].up && next + f->o.down_after + 1 < step) {
        s_doubt(f,
                j,
                "says it ran the last step (%llu) while it gossips with "
                "this node at step %llu",
                (unsigned long long)step,
                (unsigned long long)next + 1);
        return false;
    }
    return true;
}

rumor_err
node_recv(const struct node_wait *w,
          uint32_t peer,
          uint8_t kind,
          uint64_t step,
          uint32_t round,
          uint64_t deadline,
          struct rumor_net_msg *out)
{
    for (;;) {
        uint64_t stop_by = atomic_load(w->stop_by);
        deadline = deadline < stop_by ? deadline : stop_by;
        uint64_t until =
            rumor_clock_ns() + NODE_FAULTS_SLICE_MS * NODE_FAULTS_MS;
        until = until < deadline ? until : deadline;
        rumor_err rc =
            rumor_net_recv(w->net, peer, kind, step, round, until, out);
        if (rc != RUMOR_ETIMEDOUT)
            return rc;
        /* a refused peer sends nothing: it fails or is skipped at once,
         * not at the deadline (in the first step the caller then ends the
         * run with the refusal's text, node_check_refusals) */
        char why[RUMOR_NET_REFUSE_TEXT_MAX + 1];
        if (rumor_net_refused(w->net, peer, why))
            return w->skip != NULL ? RUMOR_ETIMEDOUT : RUMOR_EPROTO;
        if (w->interrupted != NULL && w->interrupted(w->arg))
            return RUMOR_ETIMEDOUT;
        rumor_net_state st = rumor_net_peer_state(w->net, peer);
        if (st != RUMOR_NET_PEER_DOWN)
            w->heard[peer] = true;
        uint64_t later = 0;
        if (w->skip != NULL &&
            rumor_net_peek_later(w->net, peer, kind, step, round, &later)) {
            /* the peer went past this step without us (unless this
             * step's message came in the meantime): catch up */
            rc = rumor_net_recv(w->net, peer, kind, step, round, 0, out);
            if (rc == RUMOR_ETIMEDOUT)
                s_claim(w->skip, peer, later, "gossip message");
            return rc;
        }
        const char *gone = rumor_clock_ns() >= deadline ? "deadline passed"
                           : w->heard[peer] && st == RUMOR_NET_PEER_DOWN
                               ? "peer went silent"
                               : NULL;
        if (gone == NULL)
            continue;
        if (w->skip == NULL && w->interrupted == NULL)
            s_log_missing(step, peer, gone, st);
        return RUMOR_ETIMEDOUT;
    }
}

static void
s_mark_down(node_faults *f, uint32_t peer, uint64_t step, const char *why)
{
    struct s_peer *p = &f->peer[peer];
    if (!p->up)
        return;
    p->up = false;
    p->joined = false;
    p->backoff_ms = NODE_FAULTS_PROBE_MS;
    p->probe_ns = rumor_clock_ns();
    f->st.downs++;
    rumor_log(RUMOR_LOG_WARN,
              "step %llu: node %u is down (%s); skipping it and probing",
              (unsigned long long)step + 1,
              peer,
              why);
}

/* --- settling a round ---------------------------------------------------- */

bool
node_faults_admit(node_faults *f, uint32_t peer)
{
    f->peer[peer].neighbour = true;
    return f->peer[peer].up;
}

/* The ACKs' deadline: the round's plus a quarter of its span. */
static uint64_t
s_ack_deadline(const struct node_faults_round *r)
{
    uint64_t now = rumor_clock_ns();
    uint64_t span = r->deadline > r->started ? r->deadline - r->started : 0;
    return (r->deadline > now ? r->deadline : now) + span / 4;
}

/* This node's ACK of the round's step to peer; one that cannot go out by
 * the deadline is not lost: the next one lists the same steps. */
static rumor_err
s_ack_send(node_faults *f,
           rumor_net *net,
           rumor_gossip *g,
           const struct node_faults_round *r,
           uint32_t peer)
{
    struct rumor_gossip_ack a;
    uint8_t buf[RUMOR_GOSSIP_ACK_BYTES_MAX];
    rumor_err rc = rumor_gossip_ack_make(g, peer, &a);
    size_t len = rumor_gossip_ack_encode(&a, buf, sizeof buf);
    f->ack_sent[peer] = r->step + 1;
    if (rc == RUMOR_OK)
        rc = s_send(f,
                    net,
                    peer,
                    RUMOR_NET_KIND_ACK,
                    r->step,
                    buf,
                    len,
                    s_ack_deadline(r));
    return rc == RUMOR_ETIMEDOUT ? RUMOR_OK : rc;
}

rumor_err
node_faults_ack_early(node_faults *f,
                      rumor_net *net,
                      rumor_gossip *g,
                      const struct node_faults_round *r,
                      uint32_t peer)
{
    return f->peer[peer].up ? s_ack_send(f, net, g, r, peer) : RUMOR_OK;
}

/* Sends every up neighbour this node's ACK (unless it went early), then
 * takes theirs from those whose message of the step came or with which a
 * term waits: one that missed the deadline is likely gone, and waiting the
 * grace for its ACK too would make this node late for its other neighbours,
 * which would then skip it in turn (a dead node's neighbours would fall out of
 * step with the rest of the ring). A skipped ACK is not lost: the next one
 * lists the same steps. The grace is a quarter of the round's span. */
rumor_err
node_faults_acks(node_faults *f,
                 rumor_net *net,
                 rumor_gossip *g,
                 const struct node_faults_round *r)
{
    uint64_t deadline = s_ack_deadline(r);
    struct node_wait w = {.net = net,
                          .heard = f->o.heard,
                          .stop_by = f->o.stop_by,
                          .skip = f};
    rumor_err rc = RUMOR_OK;
    for (size_t k = 0; k < r->expected && rc == RUMOR_OK; k++) {
        uint32_t j = r->expect[k];
        f->acked[j] = false;
        if (f->peer[j].up && f->ack_sent[j] != r->step + 1)
            rc = s_ack_send(f, net, g, r, j);
    }
    for (size_t k = 0; k < r->expected && rc == RUMOR_OK; k++) {
        uint32_t j = r->expect[k];
        struct rumor_net_msg msg;
        uint64_t oldest = 0;
        if (!f->peer[j].up ||
            (!r->have[k] && rumor_gossip_pending(g, j, &oldest) == 0))
            continue;
        rumor_err e =
            node_recv(&w, j, RUMOR_NET_KIND_ACK, r->step, 0, deadline, &msg);
        if (e == RUMOR_ETIMEDOUT) {
            f->st.acks_late++;
            continue;
        }
        if (e != RUMOR_OK)
            return e;
        struct rumor_gossip_ack a;
        if (rumor_gossip_ack_decode(msg.payload, msg.len, &a) == RUMOR_OK) {
            rc = rumor_gossip_ack_take(g, j, &a);
            f->acked[j] = true;
            s_belied(f, j, r->step);
        } else {
            rumor_log(RUMOR_LOG_WARN, "node %u sent a malformed ack", j);
        }
        rumor_net_msg_free(&msg);
    }
    return rc;
}

/* Counts misses and marks down who missed too many steps. */
static void
s_liveness(node_faults *f,
           const rumor_gossip *g,
           const struct node_faults_round *r)
{
    for (size_t k = 0; k < r->expected; k++) {
        uint32_t j = r->expect[k];
        struct s_peer *p = &f->peer[j];
        if (!p->up)
            continue;
        if (!r->have[k])
            f->st.skipped++;
        p->misses = r->have[k] || f->acked[j] ? 0 : p->misses + 1;
        uint64_t oldest = 0;
        (void)rumor_gossip_pending(g, j, &oldest);
        if (p->misses >= f->o.down_after)
            s_mark_down(f, j, r->step, "missed its deadlines");
        else if (oldest != UINT64_MAX && oldest + f->o.down_after <= r->step)
            s_mark_down(f, j, r->step, "no acknowledgement");
    }
}

rumor_err
node_faults_commit(node_faults *f,
                   rumor_gossip *g,
                   const struct node_faults_round *r)
{
    bool all = true;
    for (size_t k = 0; k < r->expected; k++)
        all = all && (r->have[k] || !f->peer[r->expect[k]].up);
    if (all)
        f->wait_ns[f->waits++ % NODE_FAULTS_WINDOW] = r->waited_ns;
    size_t applied = 0;
    rumor_err rc = rumor_gossip_commit(g, &applied);
    if (rc == RUMOR_OK)
        s_liveness(f, g, r);
    return rc;
}

/* --- between steps: the handshake ------------------------------------------
 */

static rumor_err
s_send_sync(node_faults *f,
            rumor_net *net,
            rumor_gossip *g,
            uint32_t peer,
            uint8_t kind,
            uint32_t flags,
            uint64_t next)
{
    struct node_sync s = {.flags = flags, .step = next};
    uint8_t buf[NODE_SYNC_BYTES_MAX];
    rumor_err rc = rumor_gossip_ack_make(g, peer, &s.ack);
    size_t len = node_sync_encode(&s, buf, sizeof buf);
    if (rc == RUMOR_OK && len == 0)
        rc = RUMOR_EINVAL;
    if (rc == RUMOR_OK)
        rc = s_send(f, net, peer, kind, next, buf, len, rumor_clock_ns());
    return rc == RUMOR_ETIMEDOUT ? RUMOR_OK : rc;
}

static rumor_err
s_send_state(node_faults *f,
             rumor_net *net,
             uint32_t peer,
             const struct rumor_model *model,
             uint64_t next)
{
    struct node_state_parts parts = {.step = next};
    size_t len = 0;
    rumor_err rc = f->o.to_host != NULL ? f->o.to_host(f->o.to_host_arg, &model)
                                        : RUMOR_OK;
    if (rc == RUMOR_OK)
        rc = node_state_pack(model, f->o.optim, &parts, &f->state, &len);
    if (rc != RUMOR_OK)
        return rc;
    rc = s_send(f,
                net,
                peer,
                RUMOR_NET_KIND_STATE,
                next,
                f->state.msg,
                len,
                rumor_clock_ns() + 1000 * NODE_FAULTS_MS);
    return rc == RUMOR_ETIMEDOUT ? RUMOR_OK : rc;
}

/* True when this node holds a gossip message of peer j of a step at or
 * after step (so j was gossiping with it then). */
static bool
s_held_since(rumor_gossip *g, uint32_t j, uint64_t step)
{
    struct rumor_gossip_ack a;
    return rumor_gossip_ack_make(g, j, &a) == RUMOR_OK && a.count > 0 &&
           a.held[a.count - 1] >= step;
}

/* Takes one SYNC (request or answer) from peer j. */
/* A neighbour ran the run's last step: what both ends hold is settled,
 * and it is neither waited for nor probed again (it has gone). */
static rumor_err
s_done(node_faults *f,
       rumor_gossip *g,
       uint32_t j,
       uint64_t step,
       const struct rumor_gossip_ack *ack)
{
    struct s_peer *p = &f->peer[j];
    if (!p->done)
        rumor_log(RUMOR_LOG_INFO,
                  "node %u ran the last step (%llu): no longer waited for",
                  j,
                  (unsigned long long)step);
    p->done = true;
    p->up = false;
    p->said_done = false;
    return rumor_gossip_ack_take(g, j, ack);
}

/* A DONE that came while its sender still gossiped with this node far
 * from the end is kept until the sender is marked down: one that really
 * finished goes silent, and is then taken at its word. */
static rumor_err
s_on_done(node_faults *f,
          rumor_gossip *g,
          uint32_t j,
          const struct node_sync *s,
          uint64_t next)
{
    struct s_peer *p = &f->peer[j];
    if (s_done_believed(f, j, s->step, next))
        return s_done(f, g, j, s->step, &s->ack);
    if (s_done_of_run(f, s)) {
        p->said_done = true;
        p->done_ack = s->ack;
    }
    return RUMOR_OK;
}

/* Neighbours that said DONE and have since been marked down. */
static rumor_err
s_done_gone(node_faults *f, rumor_gossip *g)
{
    rumor_err rc = RUMOR_OK;
    for (uint32_t j = 0; j < f->o.n && rc == RUMOR_OK; j++) {
        struct s_peer *p = &f->peer[j];
        if (p->said_done && !p->up && !p->done)
            rc = s_done(f, g, j, f->o.steps, &p->done_ack);
    }
    return rc;
}

static rumor_err
s_on_sync(node_faults *f,
          rumor_net *net,
          rumor_gossip *g,
          const struct rumor_model *model,
          uint32_t j,
          bool request,
          const struct node_sync *s,
          uint64_t *next)
{
    struct s_peer *p = &f->peer[j];
    if (s->flags & NODE_SYNC_DONE)
        return s_on_done(f, g, j, s, *next);
    p->done = false; /* restarted for more steps (--resume) */
    p->said_done = false;
    if (!request && p->up)
        return RUMOR_OK; /* an answer to a probe already settled */
    if (s->flags & NODE_SYNC_JOIN) {
        /* a second probe of a join already taken (sent before our answer
         * came) when the pair has gossiped since: forgetting again would
         * reset per-edge state on this end only */
        if (p->joined && s_held_since(g, j, s->step))
            return RUMOR_OK;
        rumor_gossip_edge_forget(g, j);
        p->joined = true;
    }
    /* we restarted: our per-edge state is from a checkpoint, the peer's
     * edge with us starts over (it forgets on our JOIN) */
    if (p->rejoin)
        rumor_gossip_edge_forget(g, j);
    rumor_err rc = rumor_gossip_ack_take(g, j, &s->ack);
    /* a requester has started its step without us: meet it on the next
     * (a claim: node_faults_between jumps when a majority agrees) */
    if (!(s->flags & NODE_SYNC_JOIN)) {
        s_belied(f, j, s->step);
        s_claim(f, j, request ? s->step + 1 : s->step, "sync");
    }
    /* a restarted node answers with JOIN too: the probe it answers may be
     * for its old incarnation */
    uint32_t flags = p->rejoin ? NODE_SYNC_JOIN : 0;
    if (rc == RUMOR_OK && request)
        rc =
            s_send_sync(f, net, g, j, RUMOR_NET_KIND_SYNC_ANSWER, flags, *next);
    if (rc == RUMOR_OK && request && (s->flags & NODE_SYNC_WANT_STATE))
        rc = s_send_state(f, net, j, model, *next);
    if (!p->up || request) {
        if (!p->up) {
            f->st.readmitted++;
            rumor_log(RUMOR_LOG_WARN,
                      "node %u is back (handshake done); gossiping from "
                      "step %llu",
                      j,
                      (unsigned long long)*next + 1);
        }
        p->up = true;
        p->misses = 0;
        p->rejoin = false;
    }
    return rc;
}

/* Takes every pending handshake message of one kind from peer j; only
 * the newest SYNC counts (older probes queued while this node was stalled
 * say the same with an older step). */
static rumor_err
s_drain(node_faults *f,
        rumor_net *net,
        rumor_gossip *g,
        const struct rumor_model *model,
        uint32_t j,
        uint8_t kind,
        uint64_t *next)
{
    struct rumor_net_msg msg;
    struct node_sync s, newest;
    bool have = false;
    while (rumor_net_recv(net, j, kind, 0, 0, 0, &msg) == RUMOR_OK) {
        /* STATE: a late answer to our join (the model is taken): dropped */
        if (kind != RUMOR_NET_KIND_STATE) {
            if (node_sync_decode(msg.payload, msg.len, &s) == RUMOR_OK) {
                newest = s;
                have = true;
            } else {
                rumor_log(RUMOR_LOG_WARN, "node %u sent a malformed sync", j);
            }
        }
        rumor_net_msg_free(&msg);
    }
    if (!have)
        return RUMOR_OK;
    return s_on_sync(f,
                     net,
                     g,
                     model,
                     j,
                     kind == RUMOR_NET_KIND_SYNC,
                     &newest,
                     next);
}

/* Answers and probes every neighbour once. */
static rumor_err
s_handshakes(node_faults *f,
             rumor_net *net,
             rumor_gossip *g,
             const struct rumor_model *model,
             uint64_t *next)
{
    rumor_err rc = RUMOR_OK;
    uint64_t now = rumor_clock_ns();
    for (uint32_t j = 0; j < f->o.n && rc == RUMOR_OK; j++) {
        if (j == f->o.self || !f->peer[j].neighbour)
            continue;
        rc = s_drain(f, net, g, model, j, RUMOR_NET_KIND_SYNC, next);
        if (rc == RUMOR_OK)
            rc = s_drain(f, net, g, model, j, RUMOR_NET_KIND_SYNC_ANSWER, next);
        if (rc == RUMOR_OK)
            rc = s_drain(f, net, g, model, j, RUMOR_NET_KIND_STATE, next);
        struct s_peer *p = &f->peer[j];
        if (rc == RUMOR_OK && !p->up && !p->done && now >= p->probe_ns) {
            uint32_t flags = p->rejoin ? NODE_SYNC_JOIN : 0;
            rc = s_send_sync(f, net, g, j, RUMOR_NET_KIND_SYNC, flags, *next);
            p->probe_ns = now + p->backoff_ms * NODE_FAULTS_MS;
            p->backoff_ms = p->backoff_ms * 2 < NODE_FAULTS_PROBE_MAX_MS
                                ? p->backoff_ms * 2
                                : NODE_FAULTS_PROBE_MAX_MS;
        }
    }
    return rc;
}

static bool
s_alone(const node_faults *f)
{
    bool any = false;
    for (uint32_t j = 0; j < f->o.n; j++) {
        /* a neighbour that ran the last step ended the run: there is no
         * network left to race ahead of */
        if (f->peer[j].neighbour && (f->peer[j].up || f->peer[j].done))
            return false;
        any = any || f->peer[j].neighbour;
    }
    return any;
}

rumor_err
node_faults_between(node_faults *f,
                    rumor_net *net,
                    rumor_gossip *g,
                    const struct rumor_model *model,
                    uint64_t *next)
{
    rumor_err rc = s_done_gone(f, g);
    if (rc == RUMOR_OK)
        rc = s_handshakes(f, net, g, model, next);
    /* With every neighbour down this node would train alone at full
     * speed and race ahead of the network, which would then jump to its
     * step when they meet again: it waits up to a span for a handshake
     * instead, so it stays at most one step per span away. */
    uint64_t until = rumor_clock_ns() + node_faults_span_ns(f);
    if (f->o.stop_by != NULL) {
        uint64_t stop_by = atomic_load(f->o.stop_by);
        until = until < stop_by ? until : stop_by;
    }
    while (rc == RUMOR_OK && s_alone(f) && rumor_clock_ns() < until) {
        struct timespec ts = {0, NODE_FAULTS_POLL_MS * 1000000L};
        nanosleep(&ts, NULL);
        rc = s_handshakes(f, net, g, model, next);
    }
    uint32_t who = 0;
    uint64_t agreed = s_agreed(f, *next, &who);
    if (agreed > *next) {
        rumor_log(RUMOR_LOG_WARN,
                  "node %u is at step %llu: jumping from step %llu",
                  who,
                  (unsigned long long)agreed + 1,
                  (unsigned long long)*next + 1);
        rumor_gossip_fast_forward(g, agreed);
        *next = agreed;
    }
    s_doubt_claims(f, *next);
    size_t applied = 0;
    if (rc == RUMOR_OK)
        rc = rumor_gossip_commit(g, &applied);
    return rc;
}

rumor_err
node_faults_finish(node_faults *f,
                   rumor_net *net,
                   rumor_gossip *g,
                   uint64_t last)
{
    rumor_err rc = RUMOR_OK;
    for (uint32_t j = 0; j < f->o.n && rc == RUMOR_OK; j++)
        if (j != f->o.self && f->peer[j].neighbour && !f->peer[j].done)
            rc = s_send_sync(f,
                             net,
                             g,
                             j,
                             RUMOR_NET_KIND_SYNC,
                             NODE_SYNC_DONE,
                             last + 1);
    return rc;
}

void
node_faults_restarted(node_faults *f)
{
    for (uint32_t j = 0; j < f->o.n; j++) {
        struct s_peer *p = &f->peer[j];
        p->up = false;
        p->rejoin = true;
        p->backoff_ms = NODE_FAULTS_PROBE_MS;
        p->probe_ns = 0;
    }
}

/* --- joining -----------------------------------------------------------------
 */

/* Takes the optimizer state of a STATE message when it fits this node's
 * optimizer (same kind and size, finite; true), else this node keeps its
 * own fresh state (the model is taken either way). */
static bool
s_take_optim(node_faults *f, uint32_t j, const struct node_state_parts *p)
{
    if (f->o.optim == NULL || p->optim_len == 0)
        return false;
    rumor_err rc = rumor_optim_load(f->o.optim, p->optim, p->optim_len);
    if (rc != RUMOR_OK)
        rumor_log(RUMOR_LOG_WARN,
                  "node %u sent an optimizer state that does not fit (%s): "
                  "starting from a fresh one",
                  j,
                  rumor_strerror(rc));
    return rc == RUMOR_OK;
}

/* The STATE messages a joiner holds until two neighbours agree. */
struct s_offers {
    struct rumor_net_msg *msg; /* per neighbour asked, .payload NULL: none */
    struct node_state_parts *parts;
    bool disputed; /* two offers disagreed: none is taken unvouched */
};

/* Checks a STATE from j: its shapes and values fit the model and its step
 * lies within the run (a STATE for step 2^62 would end the run at once). */
static bool
s_offer_ok(const node_faults *f,
           uint32_t j,
           const struct rumor_model *model,
           const struct rumor_net_msg *msg,
           struct node_state_parts *parts)
{
    rumor_err r = node_state_check(msg->payload, msg->len, model, parts);
    if (r != RUMOR_OK) {
        rumor_log(RUMOR_LOG_WARN,
                  "node %u sent a state that does not fit: %s",
                  j,
                  rumor_strerror(r));
        return false;
    }
    if (parts->step >= f->o.steps) {
        rumor_log(RUMOR_LOG_WARN,
                  "node %u sent a state of step %llu, past the run's %llu "
                  "steps: refused",
                  j,
                  (unsigned long long)parts->step + 1,
                  (unsigned long long)f->o.steps);
        return false;
    }
    return true;
}

/* Whether offers k and i vouch for each other: close models. Not their
 * steps: a joiner's two neighbours need not be each other's, and while it
 * was away the ring may have fallen into parts that step apart (a 6-ring
 * that lost two nodes: 6 steps apart within a second). s_offer takes the
 * earlier of two agreeing states, so a claimed step cannot push the joiner
 * ahead; it catches up with its neighbours as any node behind does. */
static bool
s_agree(const struct s_offers *o,
        const uint32_t *ids,
        size_t k,
        size_t i,
        size_t count)
{
    double d = node_state_distance(o->msg[k].payload, o->msg[i].payload, count);
    bool ok = d <= NODE_FAULTS_VOUCH_DISTANCE;
    if (ok)
        rumor_log(RUMOR_LOG_INFO,
                  "the states of nodes %u and %u agree (relative distance "
                  "%.3g): vouched for",
                  ids[k],
                  ids[i],
                  d);
    else
        rumor_log(RUMOR_LOG_WARN,
                  "the states of nodes %u and %u disagree (relative "
                  "distance %.3g; at most %.3g): neither is vouched for",
                  ids[k < i ? k : i],
                  ids[k < i ? i : k],
                  d,
                  NODE_FAULTS_VOUCH_DISTANCE);
    return ok;
}

/* Takes neighbour k's offer into the model and the optimizer. */
static void
s_take_offer(node_faults *f,
             rumor_gossip *g,
             struct rumor_model *model,
             struct s_offers *o,
             size_t k,
             uint64_t *next)
{
    const struct rumor_net_msg *msg = &o->msg[k];
    struct node_state_parts parts;
    (void)node_state_decode(msg->payload, msg->len, model, &parts);
    uint32_t j = f->expect[k];
    bool took = s_take_optim(f, j, &parts);
    rumor_log(RUMOR_LOG_WARN,
              "joined: model%s of node %u; continuing at step %llu",
              took ? " and optimizer state" : "",
              j,
              (unsigned long long)parts.step + 1);
    rumor_gossip_fast_forward(g, parts.step);
    *next = parts.step;
}

/* A STATE that came from neighbour k: kept when it fits; true when it
 * and another kept one vouch for each other (*pick: the one to take, the
 * earlier of the two).
 * With a single neighbour there is nobody to vouch: its state is taken,
 * and the log says so. */
static bool
s_offer(node_faults *f,
        const struct rumor_model *model,
        struct s_offers *o,
        size_t k,
        size_t count,
        size_t *pick)
{
    uint32_t j = f->expect[k];
    if (!s_offer_ok(f, j, model, &o->msg[k], &o->parts[k])) {
        rumor_net_msg_free(&o->msg[k]);
        o->msg[k].payload = NULL;
        return false;
    }
    *pick = k;
    if (count == 1) {
        rumor_log(RUMOR_LOG_WARN,
                  "node %u is this joiner's only neighbour: its state is "
                  "taken without a second one to vouch for it",
                  j);
        return true;
    }
    for (size_t i = 0; i < count; i++) {
        if (i == k || o->msg[i].payload == NULL)
            continue;
        if (s_agree(o, f->expect, k, i, model->count)) {
            *pick = o->parts[i].step < o->parts[k].step ? i : k;
            return true;
        }
        o->disputed = true;
    }
    return false;
}

/* With one offer, undisputed, after the wait for a second: taken, since a
 * neighbour may be down (restarting itself); the log says it was not
 * vouched for. */
static bool
s_lone_offer(const node_faults *f,
             const struct s_offers *o,
             size_t count,
             size_t *pick)
{
    size_t held = 0;
    for (size_t k = 0; k < count; k++)
        if (o->msg[k].payload != NULL) {
            held++;
            *pick = k;
        }
    if (held != 1 || o->disputed)
        return false;
    rumor_log(RUMOR_LOG_WARN,
              "no second neighbour's state within %u ms: node %u's is taken "
              "without one to vouch for it",
              2 * f->o.deadline_ms,
              f->expect[*pick]);
    return true;
}

rumor_err
node_faults_join(node_faults *f,
                 rumor_net *net,
                 rumor_gossip *g,
                 struct rumor_model *model,
                 uint64_t deadline,
                 uint64_t *next)
{
    size_t count = 0;
    rumor_err rc = rumor_gossip_expected(g, 0, 0, f->expect, f->o.n, &count);
    struct s_offers o = {calloc(f->o.n, sizeof *o.msg),
                         calloc(f->o.n, sizeof *o.parts),
                         false};
    if (rc == RUMOR_OK && (o.msg == NULL || o.parts == NULL))
        rc = RUMOR_ENOMEM;
    for (size_t k = 0; k < count && rc == RUMOR_OK; k++) {
        f->peer[f->expect[k]].neighbour = true;
        rc = s_send_sync(f,
                         net,
                         g,
                         f->expect[k],
                         RUMOR_NET_KIND_SYNC,
                         NODE_SYNC_JOIN | NODE_SYNC_WANT_STATE,
                         0);
    }
    size_t pick = 0;
    bool taken = false;
    uint64_t lone_at =
        rumor_clock_ns() + 2ull * f->o.deadline_ms * NODE_FAULTS_MS;
    while (rc == RUMOR_OK && !taken) {
        for (size_t k = 0; k < count && !taken; k++) {
            struct rumor_net_msg msg;
            if (rumor_net_recv(net,
                               f->expect[k],
                               RUMOR_NET_KIND_STATE,
                               0,
                               0,
                               0,
                               &msg) != RUMOR_OK)
                continue;
            if (o.msg[k].payload != NULL)
                rumor_net_msg_free(&o.msg[k]); /* the newer one counts */
            o.msg[k] = msg;
            taken = s_offer(f, model, &o, k, count, &pick);
        }
        if (taken || (rumor_clock_ns() >= lone_at &&
                      (taken = s_lone_offer(f, &o, count, &pick))))
            break;
        if (rumor_clock_ns() >= deadline) {
            rumor_log(RUMOR_LOG_ERROR,
                      "%s",
                      o.disputed ? "no two neighbours' states agree: none "
                                   "taken"
                                 : "no neighbour's state came");
            rc = RUMOR_ETIMEDOUT;
            break;
        }
        struct rumor_net_msg any;
        /* wait a little on the first neighbour's answer */
        if (count > 0 && rumor_net_recv(net,
                                        f->expect[0],
                                        RUMOR_NET_KIND_SYNC_ANSWER,
                                        0,
                                        0,
                                        rumor_clock_ns() + 10 * NODE_FAULTS_MS,
                                        &any) == RUMOR_OK) {
            struct node_sync s;
            if (node_sync_decode(any.payload, any.len, &s) == RUMOR_OK)
                rc = rumor_gossip_ack_take(g, f->expect[0], &s.ack);
            rumor_net_msg_free(&any);
        }
    }
    if (taken)
        s_take_offer(f, g, model, &o, pick, next);
    for (size_t k = 0; o.msg != NULL && k < count; k++)
        if (o.msg[k].payload != NULL)
            rumor_net_msg_free(&o.msg[k]);
    free(o.msg);
    free(o.parts);
    return rc;
}
