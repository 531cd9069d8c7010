/*
 * Elastic rings over the transport (node/elastic.h; docs/reliability.md,
 * "Elastic rings"). node/membership.c decides; this file carries its
 * messages, feeds it the deadlines, and makes its decisions true of the
 * node: the ring of the new epoch, the failed step dropped (everyone
 * goes back to the snapshot taken before it) or completed (a member
 * without the result takes the holder's state), a joiner's state.
 *
 * Why a snapshot of the algorithm's state at every boundary: PowerSGD's
 * compressor and the codecs update their memories while a step runs, so
 * a step dropped half-way must go back to the state before it, and a
 * member that serves its state to a joiner mid-step must serve the state
 * of the step boundary, not one half-way through the step.
 */
#include "node/elastic.h"

#include "node/membership.h"
#include "node/runtime_impl.h"
#include "node/statesync.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define ELASTIC_MS          1000000ull
#define ELASTIC_SEND_MS     100 /* a control frame waits for queue room */
#define ELASTIC_POLL_MS     5   /* the pace of a wait outside a round */
#define ELASTIC_STALL_LOG_S 5   /* "waiting for a majority" that often */
#define ELASTIC_ASK_MS      500 /* a state request is repeated */
#define ELASTIC_WANT_NONE   UINT64_MAX
/* A joiner takes the holder's state only when a second member's is this
 * close (relative L2, node_state_distance; as node/faults.c's joiner) */
#define ELASTIC_VOUCH_DISTANCE 0.5

struct node_elastic {
    struct node_elastic_opts o;
    struct node_elastic_algo own;      /* o.g and o.optim's, by default */
    const struct node_elastic_algo *a; /* o.algo or &own */
    unsigned took;          /* NODE_ELASTIC_TOOK_* since node_elastic_taken */
    struct rumor_buf extra; /* the STATE's optimizer part, sent */
    node_member *m;
    uint64_t epoch;        /* the epoch the ring runs in */
    uint32_t members;      /* its member count */
    struct rumor_buf snap; /* the algorithm's state before snap_step */
    bool snap_kept;        /* held by the algorithm (a->snapshot), not snap */
    uint64_t snap_step;    /* ELASTIC_WANT_NONE: no snapshot yet */
    uint64_t inc;          /* this node's incarnation, for JOIN */
    uint64_t *want;        /* per node: the step whose state it asked for */
    bool *finished;        /* per node: it ran the run's last step */
    uint32_t *contacts;    /* every other node, for JOIN */
    struct node_state_buf state; /* STATE messages sent */
    struct node_member_signer signer;
};

static void
s_sign(void *arg,
       const uint8_t *msg,
       size_t len,
       uint8_t sig[NODE_MEMBER_SIG_BYTES])
{
    const node_elastic *e = arg;
    rumor_net_keypair_sign(e->o.keys, msg, len, sig);
}

static bool
s_verify(void *arg,
         uint32_t id,
         const uint8_t *msg,
         size_t len,
         const uint8_t sig[NODE_MEMBER_SIG_BYTES])
{
    const node_elastic *e = arg;
    return id < rumor_topology_nodes(e->o.topo) &&
           rumor_net_key_verify(rumor_topology_key(e->o.topo, id),
                                msg,
                                len,
                                sig);
}

static uint64_t
s_now_ms(void)
{
    return rumor_clock_ns() / ELASTIC_MS;
}

static bool
s_stopped(const node_elastic *e)
{
    return rumor_clock_ns() >= atomic_load(e->o.stop_by);
}

static rumor_err
s_send(node_elastic *e,
       uint32_t to,
       uint8_t kind,
       uint64_t step,
       const void *data,
       size_t len)
{
    struct rumor_net_header h = {.kind = kind, .step = step};
    uint64_t deadline = rumor_clock_ns() + ELASTIC_SEND_MS * ELASTIC_MS;
    rumor_err rc = rumor_net_send(e->o.net, to, &h, data, len, deadline);
    if (rc != RUMOR_OK)
        rumor_log(RUMOR_LOG_DEBUG,
                  "elastic: %s to node %u not sent: %s",
                  rumor_net_kind_name(kind),
                  to,
                  rumor_strerror(rc));
    return rc;
}

/* The view change's messages out: a lost one is the protocol's business
 * (resends, timeouts), so a failure is only logged. */
static void
s_flush(node_elastic *e)
{
    uint32_t to = 0;
    const uint8_t *bytes = NULL;
    size_t len = 0;
    while (node_member_pop(e->m, &to, &bytes, &len))
        (void)s_send(e, to, RUMOR_NET_KIND_MEMBER, 0, bytes, len);
}

static void
s_take_member(node_elastic *e, uint32_t from)
{
    struct rumor_net_msg msg;
    while (
        rumor_net_recv(e->o.net, from, RUMOR_NET_KIND_MEMBER, 0, 0, 0, &msg) ==
        RUMOR_OK) {
        rumor_err rc =
            node_member_on_msg(e->m, from, msg.payload, msg.len, s_now_ms());
        if (rc != RUMOR_OK)
            rumor_log(RUMOR_LOG_WARN,
                      "elastic: a membership message from node %u "
                      "refused: %s (%s)",
                      from,
                      node_member_why(e->m),
                      rumor_strerror(rc));
        rumor_net_msg_free(&msg);
    }
}

static void
s_take_requests(node_elastic *e, uint32_t from)
{
    struct rumor_net_msg msg;
    while (rumor_net_recv(e->o.net, from, RUMOR_NET_KIND_SYNC, 0, 0, 0, &msg) ==
           RUMOR_OK) {
        struct node_sync s;
        bool ok = node_sync_decode(msg.payload, msg.len, &s) == RUMOR_OK &&
                  (s.flags & (NODE_SYNC_WANT_STATE | NODE_SYNC_DONE)) != 0;
        if (ok && (s.flags & NODE_SYNC_WANT_STATE) != 0)
            e->want[from] = s.step;
        if (ok && (s.flags & NODE_SYNC_DONE) != 0)
            e->finished[from] = true;
        if (!ok)
            rumor_log(RUMOR_LOG_WARN,
                      "elastic: a malformed SYNC from node %u",
                      from);
        rumor_net_msg_free(&msg);
    }
}

static const struct node_member_entry *
s_entry(const struct node_member_view *v, uint32_t id)
{
    for (uint32_t i = 0; i < v->count; i++)
        if (v->members[i].id == id)
            return &v->members[i];
    return NULL;
}

/* STATE to node j: the model and the extra part (rumor node's
 * optimizer) as they are at the boundary of snap_step (a round does not
 * touch them before its step ends, and the step cannot end while j, a
 * member of its ring, waits for this), and the algorithm's state of that
 * boundary (the snapshot). */
static rumor_err
s_send_state(node_elastic *e, uint32_t j, bool joiner)
{
    rumor_buf_reset(&e->extra);
    rumor_err rc = e->a->extra_save(e->a->arg, joiner, &e->extra);
    /* the snapshot is serialized for a STATE only, not at every boundary */
    if (rc == RUMOR_OK && e->snap_kept) {
        rumor_buf_reset(&e->snap);
        rc = e->a->snapshot_save(e->a->arg, &e->snap);
    }
    struct node_state_parts parts = {.step = e->snap_step,
                                     .epoch = e->epoch,
                                     .optim = e->extra.data,
                                     .optim_len = e->extra.len,
                                     .gossip = e->snap.data,
                                     .gossip_len = e->snap.len};
    size_t len = 0;
    if (rc == RUMOR_OK && e->a->model_out != NULL)
        rc = e->a->model_out(e->a->arg);
    if (rc == RUMOR_OK)
        rc = node_state_pack(e->o.model, NULL, &parts, &e->state, &len);
    if (rc == RUMOR_OK)
        rc =
            s_send(e, j, RUMOR_NET_KIND_STATE, e->snap_step, e->state.msg, len);
    if (rc == RUMOR_OK)
        rumor_log(RUMOR_LOG_INFO,
                  "elastic: sent node %u the state of step %llu",
                  j,
                  (unsigned long long)e->snap_step + 1);
    return rc;
}

/* Answers the state requests of members of the installed view for the
 * boundary this node is at. */
static void
s_serve(node_elastic *e)
{
    if (node_member_state_of(e->m) != NODE_MEMBER_ACTIVE ||
        node_member_done(e->m) != e->snap_step)
        return;
    const struct node_member_view *v = node_member_view_of(e->m);
    for (uint32_t j = 0; j < e->o.n; j++) {
        const struct node_member_entry *entry = s_entry(v, j);
        if (e->want[j] != e->snap_step || entry == NULL)
            continue;
        if (s_send_state(e, j, entry->joining) == RUMOR_OK)
            e->want[j] = ELASTIC_WANT_NONE;
    }
}

static bool
s_moved(const node_elastic *e)
{
    return node_member_state_of(e->m) != NODE_MEMBER_ACTIVE ||
           node_member_view_of(e->m)->epoch != e->epoch;
}

bool
node_elastic_pump(node_elastic *e)
{
    for (uint32_t j = 0; j < e->o.n; j++) {
        if (j == e->o.self)
            continue;
        s_take_member(e, j);
        s_take_requests(e, j);
    }
    node_member_tick(e->m, s_now_ms());
    s_flush(e);
    s_serve(e);
    return s_moved(e);
}

uint32_t
node_elastic_wire_round(const node_elastic *e, uint32_t round)
{
    return (uint32_t)(e->epoch & 0xff) << 24 | (round & 0xffffff);
}

/* The boundary's snapshot: kept by the algorithm where its state is when
 * it can (no host copy of a model-sized state at every step), else saved
 * here. */
static rumor_err
s_snapshot(node_elastic *e)
{
    rumor_err rc = RUMOR_ENOTSUP;
    if (e->a->snapshot != NULL)
        rc = e->a->snapshot(e->a->arg);
    e->snap_kept = rc == RUMOR_OK;
    if (rc == RUMOR_ENOTSUP)
        rc = e->a->save(e->a->arg, &e->snap);
    return rc;
}

rumor_err
node_elastic_begin(node_elastic *e, uint64_t t, bool *change)
{
    /* the report comes before any message is read: a PREPARE that waits
     * in the inbox is then promised with this step's result counted */
    rumor_err rc = RUMOR_OK;
    if (!s_moved(e))
        rc = node_member_step_done(e->m, t, s_now_ms());
    rumor_buf_reset(&e->snap);
    if (rc == RUMOR_OK)
        rc = s_snapshot(e);
    e->snap_step = rc == RUMOR_OK ? t : ELASTIC_WANT_NONE;
    *change = node_elastic_pump(e);
    return rc;
}

void
node_elastic_suspect(node_elastic *e, uint32_t peer)
{
    if (s_moved(e))
        return; /* the wait was cut by the view change, not missed */
    rumor_log(RUMOR_LOG_WARN,
              "elastic: step %llu: node %u missed the deadline: asking the "
              "ring to go on without it",
              (unsigned long long)e->snap_step + 1,
              peer);
    (void)node_member_suspect(e->m, &peer, 1, s_now_ms());
    s_flush(e);
}

static void
s_sleep_poll(void)
{
    struct timespec ts = {0, ELASTIC_POLL_MS * ELASTIC_MS};
    nanosleep(&ts, NULL);
}

/* The view, its joiners marked "+". */
static void
s_log_view(const struct node_member_view *v)
{
    char ids[256];
    size_t at = 0;
    ids[0] = '\0';
    for (uint32_t i = 0; i < v->count && at + 16 < sizeof ids; i++)
        at += (size_t)snprintf(ids + at,
                               sizeof ids - at,
                               "%s%u%s",
                               i > 0 ? " " : "",
                               v->members[i].id,
                               v->members[i].joining ? "+" : "");
    if (at + 16 >= sizeof ids)
        snprintf(ids + at, sizeof ids - at, " ...");
    rumor_log(RUMOR_LOG_WARN,
              "elastic: epoch %llu: %u members (%s); step %llu %s, the ring "
              "runs from step %llu",
              (unsigned long long)v->epoch,
              v->count,
              ids,
              (unsigned long long)v->step + 1,
              v->fate == NODE_MEMBER_COMPLETE ? "completed" : "dropped",
              (unsigned long long)node_member_first_step(v) + 1);
}

static rumor_err
s_ask_to_join(node_elastic *e)
{
    e->inc++;
    return node_member_join_request(e->m,
                                    e->contacts,
                                    e->o.n - 1,
                                    e->inc,
                                    s_now_ms());
}

/* Pumps until this node is a member of an epoch after the one its ring
 * runs in; a node the ring removed asks to join again. A node that no
 * majority takes in within the wait gives up (RUMOR_ETIMEDOUT): the run
 * may have ended, or a partition outlasted it; it never hangs. */
static rumor_err
s_await_view(node_elastic *e)
{
    uint64_t logged = rumor_clock_ns();
    uint64_t give_up = logged + (uint64_t)e->o.wait_ms * ELASTIC_MS;
    for (;;) {
        struct node_member_event ev;
        while (node_member_event(e->m, &ev)) {
            if (ev.kind != NODE_MEMBER_REMOVED)
                continue;
            rumor_log(RUMOR_LOG_WARN,
                      "elastic: removed from the ring at epoch %llu: asking "
                      "to join again",
                      (unsigned long long)ev.epoch);
            rumor_err rc = s_ask_to_join(e);
            if (rc != RUMOR_OK)
                return rc;
        }
        bool active = node_member_state_of(e->m) == NODE_MEMBER_ACTIVE;
        if (active && node_member_view_of(e->m)->epoch != e->epoch)
            return RUMOR_OK;
        if (s_stopped(e))
            return RUMOR_ETIMEDOUT;
        if (rumor_clock_ns() >= give_up) {
            rumor_log(RUMOR_LOG_ERROR,
                      "elastic: no majority of the ring took this node in "
                      "within %u ms (the run may have ended, or a "
                      "partition lasts): giving up",
                      e->o.wait_ms);
            return RUMOR_ETIMEDOUT;
        }
        if (rumor_clock_ns() - logged >
            ELASTIC_STALL_LOG_S * 1000 * ELASTIC_MS) {
            logged = rumor_clock_ns();
            rumor_log(RUMOR_LOG_WARN,
                      "elastic: no new epoch yet (the ring of epoch %llu has "
                      "%u members; a majority of them must answer): waiting",
                      (unsigned long long)e->epoch,
                      e->members);
        }
        (void)node_elastic_pump(e);
        s_sleep_poll();
    }
}

/* A STATE from `from` for step s: shapes and values fit the model, and
 * its own step is s, where the joiner goes on (a STATE for step 2^62
 * would end its run); nothing taken. */
static rumor_err
s_check_state(node_elastic *e,
              uint32_t from,
              uint64_t s,
              const struct rumor_net_msg *msg)
{
    struct node_state_parts parts;
    rumor_err rc = node_state_check(msg->payload, msg->len, e->o.model, &parts);
    if (rc == RUMOR_OK && parts.step != s) {
        rumor_log(RUMOR_LOG_WARN,
                  "elastic: node %u sent a state of step %llu for step "
                  "%llu: refused",
                  from,
                  (unsigned long long)parts.step + 1,
                  (unsigned long long)s + 1);
        return RUMOR_EPROTO;
    }
    if (rc != RUMOR_OK)
        rumor_log(RUMOR_LOG_WARN,
                  "elastic: node %u sent a state that does not fit: %s",
                  from,
                  rumor_strerror(rc));
    return rc;
}

static rumor_err
s_take_state(node_elastic *e, uint32_t holder, const struct rumor_net_msg *msg)
{
    struct node_state_parts parts;
    rumor_err rc =
        node_state_decode(msg->payload, msg->len, e->o.model, &parts);
    if (rc == RUMOR_OK && e->a->model_in != NULL)
        rc = e->a->model_in(e->a->arg);
    if (rc == RUMOR_OK)
        rc = e->a->extra_load(e->a->arg, parts.optim, parts.optim_len);
    struct rumor_diag diag = {0};
    if (rc == RUMOR_OK)
        rc = e->a->adopt(e->a->arg, parts.gossip, parts.gossip_len, &diag);
    if (rc != RUMOR_OK)
        rumor_log(RUMOR_LOG_WARN,
                  "elastic: node %u sent a state that does not fit: %s%s%s",
                  holder,
                  rumor_strerror(rc),
                  diag.msg[0] != '\0' ? ": " : "",
                  diag.msg);
    return rc;
}

/* The STATE of the boundary before step s from member `from`, checked
 * (shapes, values, its step s) but not taken: into *out. It answers once
 * it is at that boundary; one that does not answer within the deadlines
 * is suspected (RUMOR_ETIMEDOUT: another view change), and so is one
 * whose state does not fit. */
static rumor_err
s_fetch_from(node_elastic *e,
             uint32_t from,
             uint64_t s,
             struct rumor_net_msg *out)
{
    struct node_sync ask = {.flags = NODE_SYNC_WANT_STATE, .step = s};
    uint8_t buf[NODE_SYNC_BYTES_MAX];
    size_t len = node_sync_encode(&ask, buf, sizeof buf);
    uint64_t give_up = rumor_clock_ns() + 4ull * e->o.deadline_ms * ELASTIC_MS;
    uint64_t asked = 0;
    while (rumor_clock_ns() < give_up && !s_stopped(e)) {
        if (rumor_clock_ns() - asked > ELASTIC_ASK_MS * ELASTIC_MS) {
            asked = rumor_clock_ns();
            (void)s_send(e, from, RUMOR_NET_KIND_SYNC, s, buf, len);
        }
        uint64_t until = rumor_clock_ns() + ELASTIC_POLL_MS * ELASTIC_MS;
        rumor_err rc = rumor_net_recv(e->o.net,
                                      from,
                                      RUMOR_NET_KIND_STATE,
                                      0,
                                      0,
                                      until,
                                      out);
        if (rc == RUMOR_OK) {
            bool ours = out->hdr.step == s;
            rc = ours ? s_check_state(e, from, s, out) : RUMOR_OK;
            if (ours && rc == RUMOR_OK)
                return RUMOR_OK;
            rumor_net_msg_free(out);
            if (ours)
                break;
        }
        if (node_elastic_pump(e))
            return RUMOR_ETIMEDOUT; /* yet another view change */
    }
    if (s_stopped(e))
        return RUMOR_ETIMEDOUT;
    node_elastic_suspect(e, from);
    return RUMOR_ETIMEDOUT;
}

/* Who vouches for the holder's state to a joiner: the lowest member that
 * is neither joining, nor the holder, nor this node; NODE_MEMBER_NONE
 * when there is none. */
static uint32_t
s_voucher(const node_elastic *e, const struct node_member_view *v)
{
    for (uint32_t i = 0; i < v->count; i++) {
        const struct node_member_entry *m = &v->members[i];
        if (!m->joining && m->id != v->holder && m->id != e->o.self)
            return m->id;
    }
    return NODE_MEMBER_NONE;
}

/* The holder's state of the boundary before step s, taken. A joiner
 * takes it only when a second member's own state of that boundary is
 * close to it (issue 33): the members of all-reduce and PowerSGD hold one
 * model there, local SGD's differ by their local steps, a forged one
 * (all 3.0) by far more. A disagreement is RUMOR_EAUTH: the joiner gives
 * up, and the ring removes it at its next deadline. */
static rumor_err
s_fetch(node_elastic *e,
        uint32_t holder,
        uint32_t voucher,
        uint64_t s,
        bool joining)
{
    struct rumor_net_msg got = {0}, vouch = {0};
    rumor_err rc = s_fetch_from(e, holder, s, &got);
    if (rc == RUMOR_OK && voucher != NODE_MEMBER_NONE)
        rc = s_fetch_from(e, voucher, s, &vouch);
    if (rc == RUMOR_OK && voucher != NODE_MEMBER_NONE) {
        double d =
            node_state_distance(got.payload, vouch.payload, e->o.model->count);
        bool ok = d <= ELASTIC_VOUCH_DISTANCE;
        rumor_log(ok ? RUMOR_LOG_INFO : RUMOR_LOG_ERROR,
                  "elastic: node %u's state of step %llu %s by node %u "
                  "(relative distance %.3g, at most %.3g)",
                  holder,
                  (unsigned long long)s + 1,
                  ok ? "vouched for" : "refused: not vouched for",
                  voucher,
                  d,
                  ELASTIC_VOUCH_DISTANCE);
        rc = ok ? RUMOR_OK : RUMOR_EAUTH;
    } else if (rc == RUMOR_OK && joining) {
        rumor_log(RUMOR_LOG_WARN,
                  "elastic: node %u's state taken with no other member to "
                  "vouch for it",
                  holder);
    }
    if (rc == RUMOR_OK)
        rc = s_take_state(e, holder, &got);
    if (rc != RUMOR_OK && rc != RUMOR_ETIMEDOUT && rc != RUMOR_EAUTH)
        node_elastic_suspect(e, holder); /* a state that does not fit */
    if (got.payload != NULL)
        rumor_net_msg_free(&got);
    if (vouch.payload != NULL)
        rumor_net_msg_free(&vouch);
    return rc == RUMOR_OK || rc == RUMOR_EAUTH ? rc : RUMOR_ETIMEDOUT;
}

/* The decided view made true here: the state of its first step s (kept,
 * gone back to, or fetched) and its ring. */
static rumor_err
s_enter(node_elastic *e, uint64_t *t)
{
    const struct node_member_view *v = node_member_view_of(e->m);
    uint64_t s = node_member_first_step(v);
    const struct node_member_entry *me = s_entry(v, e->o.self);
    bool fetch = me->joining || e->snap_step != s;
    rumor_err rc = RUMOR_OK;
    /* dropped or not, a step under way goes back to its boundary; a
     * member behind by the completed step keeps its own memories of the
     * boundary before it and takes the rest from the holder */
    if (e->snap_step != ELASTIC_WANT_NONE && e->snap_kept)
        rc = e->a->snapshot_restore(e->a->arg);
    else if (e->snap_step != ELASTIC_WANT_NONE)
        rc = e->a->load(e->a->arg, e->snap.data, e->snap.len);
    uint32_t ids[NODE_MEMBER_MAX];
    for (uint32_t i = 0; i < v->count; i++)
        ids[i] = v->members[i].id;
    /* v may change while the state is fetched (another view change) */
    uint32_t holder = v->holder;
    uint32_t voucher = me->joining ? s_voucher(e, v) : NODE_MEMBER_NONE;
    /* the epoch is this ring's from here on: the holder answers requests
     * of this epoch's members only */
    e->epoch = v->epoch;
    e->members = v->count;
    bool joining = me->joining;
    if (rc == RUMOR_OK)
        rc = e->a->members_set(e->a->arg, ids, v->count);
    /* a fetched state replaces what the snapshot was taken from (PowerSGD
     * rebuilds its compressor): a later view change at this boundary goes
     * back to the snapshot's bytes */
    if (rc == RUMOR_OK && fetch && e->snap_kept) {
        rumor_buf_reset(&e->snap);
        rc = e->a->snapshot_save(e->a->arg, &e->snap);
        e->snap_kept = rc != RUMOR_OK;
    }
    if (rc == RUMOR_OK && fetch)
        rc = s_fetch(e, holder, voucher, s, joining);
    if (rc == RUMOR_OK && joining)
        e->a->fast_forward(e->a->arg, s);
    if (rc == RUMOR_OK) {
        *t = s;
        e->took |= joining ? NODE_ELASTIC_TOOK_JOINED
                   : fetch ? NODE_ELASTIC_TOOK_RESULT
                           : 0u;
    }
    return rc;
}

/* Members that finished the run answer no view change: without a
 * majority of others, one cannot succeed. */
static bool
s_majority_running(const node_elastic *e)
{
    const struct node_member_view *v = node_member_view_of(e->m);
    uint32_t running = 0;
    for (uint32_t i = 0; i < v->count; i++)
        running += !e->finished[v->members[i].id];
    if (running > v->count / 2)
        return true;
    rumor_log(RUMOR_LOG_ERROR,
              "elastic: %u of the ring's %u members finished the run: too "
              "few are left to re-form it",
              v->count - running,
              v->count);
    return false;
}

rumor_err
node_elastic_recover(node_elastic *e, uint64_t *t)
{
    e->a->abandon(e->a->arg);
    if (!s_majority_running(e))
        return RUMOR_ETIMEDOUT;
    if (!s_moved(e)) {
        /* the step failed without a missed message (a send that found
         * no room): the predecessor it waited on is the one to doubt */
        const struct node_member_view *v = node_member_view_of(e->m);
        uint32_t pos = 0;
        while (pos < v->count && v->members[pos].id != e->o.self)
            pos++;
        uint32_t prev = v->members[(pos + v->count - 1) % v->count].id;
        node_elastic_suspect(e, prev);
    }
    for (;;) {
        rumor_err rc = s_await_view(e);
        if (rc != RUMOR_OK)
            return rc;
        s_log_view(node_member_view_of(e->m));
        rc = s_enter(e, t);
        if (rc != RUMOR_ETIMEDOUT || s_stopped(e))
            return rc;
    }
}

rumor_err
node_elastic_join(node_elastic *e, uint64_t *t)
{
    rumor_log(RUMOR_LOG_WARN, "elastic: asking the ring to take this node in");
    rumor_err rc = s_ask_to_join(e);
    while (rc == RUMOR_OK) {
        rc = s_await_view(e);
        if (rc != RUMOR_OK)
            break;
        s_log_view(node_member_view_of(e->m));
        rc = s_enter(e, t);
        if (rc != RUMOR_ETIMEDOUT || s_stopped(e))
            break;
        rc = RUMOR_OK;
    }
    return rc;
}

/* Every other member of the epoch said it ran the last step. */
static bool
s_all_finished(const node_elastic *e)
{
    const struct node_member_view *v = node_member_view_of(e->m);
    for (uint32_t i = 0; i < v->count; i++)
        if (v->members[i].id != e->o.self && !e->finished[v->members[i].id])
            return false;
    return true;
}

void
node_elastic_finish(node_elastic *e, uint64_t steps)
{
    bool change = false;
    if (node_elastic_begin(e, steps, &change) != RUMOR_OK)
        return;
    struct node_sync done = {.flags = NODE_SYNC_DONE, .step = steps};
    uint8_t buf[NODE_SYNC_BYTES_MAX];
    size_t len = node_sync_encode(&done, buf, sizeof buf);
    const struct node_member_view *v = node_member_view_of(e->m);
    for (uint32_t i = 0; i < v->count; i++)
        if (v->members[i].id != e->o.self)
            (void)s_send(e,
                         v->members[i].id,
                         RUMOR_NET_KIND_SYNC,
                         steps,
                         buf,
                         len);
    uint64_t now = rumor_clock_ns();
    uint64_t quiet = now + 2ull * e->o.deadline_ms * ELASTIC_MS;
    uint64_t limit = now + (uint64_t)e->o.wait_ms * ELASTIC_MS;
    /* while a view change is under way, it may need this node's promise
     * and its state (the holder of the last step) */
    /* a node the ring removed has nothing more to give it */
    while (!s_all_finished(e) && !s_stopped(e) &&
           node_member_state_of(e->m) != NODE_MEMBER_OUT &&
           (rumor_clock_ns() < quiet || s_moved(e)) &&
           rumor_clock_ns() < limit) {
        if (node_elastic_pump(e) &&
            node_member_state_of(e->m) == NODE_MEMBER_ACTIVE)
            e->epoch = node_member_view_of(e->m)->epoch;
        s_sleep_poll();
    }
}

unsigned
node_elastic_taken(node_elastic *e)
{
    unsigned took = e->took;
    e->took = 0;
    return took;
}

bool
node_elastic_member(const node_elastic *e, uint32_t id)
{
    return s_entry(node_member_view_of(e->m), id) != NULL;
}

bool
node_elastic_joining(const node_elastic *e)
{
    return node_member_state_of(e->m) == NODE_MEMBER_OUT;
}

void
node_elastic_view(const node_elastic *e, uint64_t *epoch, uint32_t *members)
{
    *epoch = e->epoch;
    *members = e->members;
}

/* --- rumor node's algorithm: one instance and its optimizer --- */

static rumor_err
s_gossip_save(void *arg, rumor_buf *out)
{
    const node_elastic *e = arg;
    return rumor_gossip_state_save(e->o.g, out);
}

static rumor_err
s_gossip_load(void *arg, const uint8_t *p, size_t len)
{
    node_elastic *e = arg;
    return rumor_gossip_state_load(e->o.g, p, len, NULL);
}

static rumor_err
s_gossip_snapshot(void *arg)
{
    node_elastic *e = arg;
    return rumor_gossip_snapshot(e->o.g);
}

static rumor_err
s_gossip_snapshot_restore(void *arg)
{
    node_elastic *e = arg;
    return rumor_gossip_snapshot_restore(e->o.g);
}

static rumor_err
s_gossip_snapshot_save(void *arg, rumor_buf *out)
{
    const node_elastic *e = arg;
    return rumor_gossip_snapshot_save(e->o.g, out);
}

static rumor_err
s_gossip_adopt(void *arg, const uint8_t *p, size_t len, struct rumor_diag *diag)
{
    node_elastic *e = arg;
    return rumor_gossip_state_adopt(e->o.g, p, len, diag);
}

static rumor_err
s_gossip_members_set(void *arg, const uint32_t *ids, size_t count)
{
    node_elastic *e = arg;
    return rumor_gossip_members_set(e->o.g, ids, count);
}

static void
s_gossip_abandon(void *arg)
{
    node_elastic *e = arg;
    rumor_gossip_step_abandon(e->o.g);
}

static void
s_gossip_fast_forward(void *arg, uint64_t step)
{
    node_elastic *e = arg;
    rumor_gossip_fast_forward(e->o.g, step);
}

/* A model in device memory crosses to the host copy (o.model) for a
 * STATE sent, and back from one taken, never at a step boundary. */
static rumor_err
s_gossip_model_out(void *arg)
{
    const node_elastic *e = arg;
    const struct rumor_model *host = NULL;
    return e->o.src != NULL ? e->o.src->to_host(e->o.src->arg, &host)
                            : RUMOR_OK;
}

static rumor_err
s_gossip_model_in(void *arg)
{
    const node_elastic *e = arg;
    return e->o.src != NULL ? e->o.src->to_device(e->o.src->arg, e->o.model)
                            : RUMOR_OK;
}

/* The model alone does not make a member that missed a step whole: its
 * optimizer state moved with the step too. */
static rumor_err
s_optim_save(void *arg, bool joiner, rumor_buf *out)
{
    (void)joiner;
    const node_elastic *e = arg;
    if (e->o.optim == NULL)
        return RUMOR_OK;
    size_t n = rumor_optim_state_bytes(e->o.optim), len = 0;
    rumor_err rc = rumor_buf_reserve(out, n);
    if (rc == RUMOR_OK)
        rc = rumor_optim_save(e->o.optim, out->data, n, &len);
    out->len = rc == RUMOR_OK ? len : 0;
    return rc;
}

static rumor_err
s_optim_load(void *arg, const uint8_t *p, size_t len)
{
    node_elastic *e = arg;
    if (e->o.optim == NULL || len == 0)
        return RUMOR_OK;
    return rumor_optim_load(e->o.optim, p, len);
}

static const struct node_elastic_algo s_gossip_algo = {
    .save = s_gossip_save,
    .load = s_gossip_load,
    .adopt = s_gossip_adopt,
    .members_set = s_gossip_members_set,
    .abandon = s_gossip_abandon,
    .fast_forward = s_gossip_fast_forward,
    .extra_save = s_optim_save,
    .extra_load = s_optim_load,
    .model_out = s_gossip_model_out,
    .model_in = s_gossip_model_in,
    .snapshot = s_gossip_snapshot,
    .snapshot_restore = s_gossip_snapshot_restore,
    .snapshot_save = s_gossip_snapshot_save,
};

static rumor_err
s_start(node_elastic *e)
{
    uint32_t *all = malloc(e->o.n * sizeof *all);
    if (all == NULL)
        return RUMOR_ENOMEM;
    for (uint32_t i = 0; i < e->o.n; i++)
        all[i] = i;
    rumor_err rc = node_member_start(e->m, all, e->o.n, e->o.first_step);
    free(all);
    e->members = e->o.n;
    return rc;
}

rumor_err
node_elastic_new(const struct node_elastic_opts *o, node_elastic **out)
{
    *out = NULL;
    node_elastic *e = calloc(1, sizeof *e);
    if (e == NULL)
        return RUMOR_ENOMEM;
    e->o = *o;
    e->own = s_gossip_algo;
    e->own.arg = e;
    e->a = o->algo != NULL ? o->algo : &e->own;
    e->snap_step = ELASTIC_WANT_NONE;
    /* later than any incarnation an earlier process of this node had */
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    e->inc = (uint64_t)now.tv_sec * 1000000u + (uint64_t)now.tv_nsec / 1000u;
    rumor_buf_init(&e->snap, RUMOR_GOSSIP_STATE_MAX);
    rumor_buf_init(&e->extra, RUMOR_GOSSIP_STATE_MAX);
    e->want = malloc(o->n * sizeof *e->want);
    e->finished = calloc(o->n, sizeof *e->finished);
    e->contacts = malloc(o->n * sizeof *e->contacts);
    e->signer = (struct node_member_signer){e, s_sign, s_verify};
    struct node_member_opts mo = {
        .signer = o->keys != NULL && o->topo != NULL ? &e->signer : NULL,
        .done_max = o->steps,
        .timeout = o->deadline_ms,
        .timeout_max = 16ull * o->deadline_ms,
        .resend = o->deadline_ms / 5 + 1,
        .grace = o->deadline_ms / 10 + 1};
    rumor_err rc = e->want != NULL && e->finished != NULL && e->contacts != NULL
                       ? node_member_new(&e->m, o->self, o->n, &mo)
                       : RUMOR_ENOMEM;
    for (uint32_t i = 0; e->want != NULL && i < o->n; i++)
        e->want[i] = ELASTIC_WANT_NONE;
    /* contacts from the successor on, so that joiners spread out */
    for (uint32_t i = 1; e->contacts != NULL && i < o->n; i++)
        e->contacts[i - 1] = (o->self + i) % o->n;
    if (rc == RUMOR_OK && !o->join)
        rc = s_start(e);
    if (rc != RUMOR_OK) {
        node_elastic_destroy(&e);
        return rc;
    }
    *out = e;
    return RUMOR_OK;
}

void
node_elastic_destroy(node_elastic **self_p)
{
    node_elastic *e = *self_p;
    if (e == NULL)
        return;
    node_member_destroy(&e->m);
    rumor_buf_free(&e->snap);
    rumor_buf_free(&e->extra);
    free(e->want);
    free(e->finished);
    free(e->contacts);
    node_state_buf_free(&e->state);
    free(e);
    *self_p = NULL;
}
