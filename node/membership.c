/*
 * The view change of elastic rings (issue 23): single-decree Paxos per
 * epoch among the members of the installed epoch e, on the value of epoch
 * e + 1 (its members, the fate of the step that failed, the member that
 * holds its result), as docs/reliability.md ("Elastic rings: the design")
 * sets out; the codec is node/membership_wire.c.
 *
 * Why these choices:
 * - A member freezes its progress (`done`, the steps whose results it
 *   holds) when it enters a view change, and reports that frozen value in
 *   every PROMISE for e + 1: a "drop" decided from its "not held" must not
 *   meet a result it applied meanwhile. The caller applies no result of
 *   epoch e while the state is CHANGING (node_member_step_done refuses).
 * - The proposer of attempt k is the k-th (mod) member this node does not
 *   suspect, in id order, so attempt 0 is the lowest live id. A node that
 *   waited a whole attempt without a PREPARE or ACCEPT from that attempt's
 *   proposer suspects it, so dead proposers are skipped once each. Waits
 *   double (opts.timeout .. timeout_max) and reset on every PREPARE or
 *   ACCEPT taken, so a live proposer is not preempted; a proposer that
 *   sees a higher ballot gives up its own. Ballots are (e + 1, round, id)
 *   with round = the highest round seen + 1.
 * - The value from a majority of promises with no accepted value: every
 *   promiser, plus pending joiners; with hi the highest done, step hi - 1
 *   completes when some promiser is behind hi (a member behind takes the
 *   holder's whole state at hi, however far behind it is: local SGD's
 *   members run several steps without a collective, so one that missed
 *   a collective can be many steps behind the others), else step hi is
 *   dropped.
 *   With a majority the proposer still waits opts.grace for members it
 *   does not suspect, so a slower live member is not removed.
 * - Incarnations: a JOIN names one (>= 1, growing per node id), each
 *   member entry keeps it, so a late copy of an old JOIN is told from a
 *   restart, and a restarted node (whose acceptor memory is gone) never
 *   answers as the old member: it is a joiner until a COMMIT admits it.
 *   A JOIN that names a member with a newer incarnation starts the view
 *   change at once: the old process is dead, and the ring may be waiting
 *   for it in a step that its restart's live link hides from every
 *   deadline and down-detection.
 * - Decided views are kept (NODE_MEMBER_HISTORY) to answer a member that
 *   lost its COMMIT; one asking for an epoch older than that gets the
 *   newest, which tells it that it was removed.
 * - Signatures (issue 33; opts.signer, none in an insecure ring): an
 *   acceptor signs its vote, ACCEPTED, over (epoch, ballot, the value's
 *   hash); the proposer checks each and a COMMIT carries a majority's
 *   votes, so that one listed key alone cannot decide a view: a member
 *   installs epoch e + 1 only with votes from a majority of M_e. A node
 *   that does not hold M_e (a joiner, or a member more than one epoch
 *   behind) checks them against the value's continuing members instead,
 *   the ones that voted in every round this file runs. A JOIN carries its
 *   joiner's signature of (joiner, inc), forwarded as is, so no member can
 *   ask in another node's name. Votes are per acceptor and ballot, never
 *   per proposer: that is what Paxos's "a majority accepted" means.
 * Messages to self go through an internal queue processed after each
 * call, so no handler runs inside another.
 */
#include "node/membership.h"

#include <assert.h>
#include <stdlib.h>
#include <string.h>

/* cap on output the caller has not taken */
#define QUEUE_BYTES_MAX (64u << 20)
#define EVENTS_MAX      8

enum { PHASE_NONE, PHASE_PREPARE, PHASE_ACCEPT };

struct s_item {
    uint32_t to;
    size_t off, len;
};

struct s_queue {
    struct s_item *items;
    size_t head, count, cap;
    uint8_t *bytes;
    size_t used, bytes_cap;
};

struct node_member {
    uint32_t self, n;
    struct node_member_opts opts;
    node_member_state state;
    uint64_t inc;  /* this node's incarnation */
    uint64_t done; /* steps whose results it holds */
    struct node_member_view view;
    /* the acceptor of epoch view.epoch + 1 */
    struct node_member_ballot promised, acc_ballot;
    struct node_member_view acc_value;
    /* the view change */
    uint8_t suspected[NODE_MEMBER_MAX];
    uint32_t attempt;
    uint64_t deadline;
    uint32_t leader; /* sender of the last PREPARE or ACCEPT taken */
    uint32_t max_round;
    /* the proposer */
    int phase;
    struct node_member_ballot ballot;
    uint8_t answered[NODE_MEMBER_MAX];
    uint64_t done_of[NODE_MEMBER_MAX];
    uint32_t answers;
    uint64_t majority_at; /* UINT64_MAX: no majority yet */
    uint64_t resend_at;
    struct node_member_ballot best;   /* highest accepted among promises */
    struct node_member_view proposal; /* its value, then what ACCEPT says */
    struct node_member_cert votes;    /* the ACCEPTED taken, checked */
    /* joins */
    struct node_member_entry pending[NODE_MEMBER_MAX]; /* sorted by id */
    uint32_t npending;
    uint64_t inc_seen[NODE_MEMBER_MAX];
    uint32_t contacts[NODE_MEMBER_MAX];
    uint32_t ncontacts, join_tries;
    uint64_t join_at;
    struct node_member_view history[NODE_MEMBER_HISTORY];
    struct node_member_cert cert; /* the installed view's votes */
    struct node_member_cert history_cert[NODE_MEMBER_HISTORY];
    const char *why; /* the reason of the last refusal */
    /* outputs */
    struct s_queue out, loop;
    struct node_member_event events[EVENTS_MAX];
    uint32_t ev_head, ev_count;
    /* scratch */
    struct node_member_msg rx, tx;
    uint32_t to[2 * NODE_MEMBER_MAX];
    uint8_t buf[NODE_MEMBER_MSG_MAX];
    uint8_t stmt[NODE_MEMBER_STATEMENT_MAX];
};

/* --- small helpers -------------------------------------------------------- */

static int
s_cmp(struct node_member_ballot a, struct node_member_ballot b)
{
    if (a.round != b.round)
        return a.round < b.round ? -1 : 1;
    if (a.id != b.id)
        return a.id < b.id ? -1 : 1;
    return 0;
}

/* Index of id in v, -1 when absent. */
static int
s_find(const struct node_member_view *v, uint32_t id)
{
    uint32_t lo = 0, hi = v->count;
    while (lo < hi) {
        uint32_t mid = lo + (hi - lo) / 2;
        if (v->members[mid].id == id)
            return (int)mid;
        if (v->members[mid].id < id)
            lo = mid + 1;
        else
            hi = mid;
    }
    return -1;
}

static bool
s_in_ring(const node_member *m)
{
    return m->state == NODE_MEMBER_ACTIVE || m->state == NODE_MEMBER_CHANGING;
}

static bool
s_is_member(const node_member *m, uint32_t id)
{
    return s_find(&m->view, id) >= 0;
}

static uint32_t
s_majority(const node_member *m)
{
    return m->view.count / 2 + 1;
}

/* Refuses a message: RUMOR_EAUTH or RUMOR_EPROTO, the reason kept for
 * node_member_why. */
static rumor_err
s_refuse(node_member *m, rumor_err rc, const char *why)
{
    m->why = why;
    return rc;
}

static void
s_sign(node_member *m, size_t len, uint8_t sig[NODE_MEMBER_SIG_BYTES])
{
    const struct node_member_signer *sg = m->opts.signer;
    if (sg != NULL)
        sg->sign(sg->arg, m->stmt, len, sig);
}

static bool
s_verify(node_member *m,
         uint32_t id,
         size_t len,
         const uint8_t sig[NODE_MEMBER_SIG_BYTES])
{
    const struct node_member_signer *sg = m->opts.signer;
    return sg == NULL || sg->verify(sg->arg, id, m->stmt, len, sig);
}

static uint64_t
s_timeout(const node_member *m, uint32_t attempt)
{
    uint64_t t = m->opts.timeout;
    for (uint32_t k = 0; k < attempt && t < m->opts.timeout_max; k++)
        t = t > UINT64_MAX / 2 ? UINT64_MAX : t * 2;
    return t < m->opts.timeout_max ? t : m->opts.timeout_max;
}

/* The proposer of attempt k: the (k mod c)-th of the c members this node
 * does not suspect, in id order (itself is never suspected). */
static uint32_t
s_candidate(const node_member *m, uint32_t k)
{
    uint32_t c = 0;
    for (uint32_t i = 0; i < m->view.count; i++)
        c += !m->suspected[m->view.members[i].id];
    if (RUMOR_NEVER(c == 0))
        return NODE_MEMBER_NONE;
    uint32_t want = k % c;
    for (uint32_t i = 0; i < m->view.count; i++) {
        uint32_t id = m->view.members[i].id;
        if (!m->suspected[id] && want-- == 0)
            return id;
    }
    return NODE_MEMBER_NONE;
}

static void
s_event(node_member *m, uint32_t kind, uint64_t epoch)
{
    if (m->ev_count == EVENTS_MAX) { /* not taken: the oldest goes */
        m->ev_head = (m->ev_head + 1) % EVENTS_MAX;
        m->ev_count--;
    }
    uint32_t at = (m->ev_head + m->ev_count) % EVENTS_MAX;
    m->events[at] = (struct node_member_event){kind, epoch};
    m->ev_count++;
}

/* --- queues --------------------------------------------------------------- */

/* Copies len bytes into q; *off receives where. The bytes of a drained
 * queue are reused, which is why a popped message lives only until the
 * next call that can send. */
static bool
s_queue_bytes(struct s_queue *q, const uint8_t *b, size_t len, size_t *off)
{
    if (q->count == 0) {
        q->head = 0;
        q->used = 0;
    }
    if (len > QUEUE_BYTES_MAX - q->used)
        return false;
    if (q->used + len > q->bytes_cap) {
        size_t cap = q->bytes_cap ? q->bytes_cap : 4096;
        while (cap < q->used + len)
            cap *= 2;
        uint8_t *grown = realloc(q->bytes, cap);
        if (grown == NULL)
            return false;
        q->bytes = grown;
        q->bytes_cap = cap;
    }
    memcpy(q->bytes + q->used, b, len);
    *off = q->used;
    q->used += len;
    return true;
}

static bool
s_queue_item(struct s_queue *q, uint32_t to, size_t off, size_t len)
{
    if (q->head + q->count == q->cap && q->head > 0) {
        memmove(q->items, q->items + q->head, q->count * sizeof *q->items);
        q->head = 0;
    }
    if (q->count == q->cap) {
        size_t cap = q->cap ? q->cap * 2 : 64;
        struct s_item *grown = realloc(q->items, cap * sizeof *grown);
        if (grown == NULL)
            return false;
        q->items = grown;
        q->cap = cap;
    }
    q->items[q->head + q->count++] = (struct s_item){to, off, len};
    return true;
}

static bool
s_queue_pop(struct s_queue *q, struct s_item *out)
{
    if (q->count == 0)
        return false;
    *out = q->items[q->head++];
    q->count--;
    return true;
}

/* Encodes m->tx once and queues it for to[0..count): itself through the
 * loop, the others for the caller. A message that cannot be queued is
 * dropped, as the network may drop it. */
static void
s_emit(node_member *m, const uint32_t *to, size_t count)
{
    size_t len = node_member_encode(&m->tx, m->buf, sizeof m->buf);
    if (RUMOR_NEVER(len == 0))
        return;
    bool others = false, me = false;
    for (size_t i = 0; i < count; i++) {
        me |= to[i] == m->self;
        others |= to[i] != m->self;
    }
    size_t off = 0;
    bool ok = true;
    if (others && (ok = s_queue_bytes(&m->out, m->buf, len, &off)))
        for (size_t i = 0; i < count && ok; i++)
            if (to[i] != m->self)
                ok = s_queue_item(&m->out, to[i], off, len);
    if (ok && me && (ok = s_queue_bytes(&m->loop, m->buf, len, &off)))
        ok = s_queue_item(&m->loop, m->self, off, len);
    if (!ok)
        rumor_log(RUMOR_LOG_WARN,
                  "membership: a %u message could not be queued (memory)",
                  (unsigned)m->tx.type);
}

static void
s_emit1(node_member *m, uint32_t to)
{
    s_emit(m, &to, 1);
}

/* m->tx to every member of the view; silent_only: to those that have not
 * answered the proposer's current phase. */
static void
s_emit_members(node_member *m, bool silent_only)
{
    size_t k = 0;
    for (uint32_t i = 0; i < m->view.count; i++) {
        uint32_t id = m->view.members[i].id;
        if (!silent_only || !m->answered[id])
            m->to[k++] = id;
    }
    s_emit(m, m->to, k);
}

static void
s_tx(node_member *m, uint32_t type, uint64_t epoch)
{
    memset(&m->tx, 0, sizeof m->tx);
    m->tx.type = type;
    m->tx.epoch = epoch;
}

/* --- installing ----------------------------------------------------------- */

/* Pending joins live at the lowest member only, and leave once admitted
 * (or overtaken by a later incarnation). */
static void
s_prune_pending(node_member *m)
{
    if (m->view.members[0].id != m->self) {
        m->npending = 0;
        return;
    }
    uint32_t k = 0;
    for (uint32_t i = 0; i < m->npending; i++)
        if (m->inc_seen[m->pending[i].id] < m->pending[i].inc)
            m->pending[k++] = m->pending[i];
    m->npending = k;
}

static void
s_install(node_member *m,
          const struct node_member_view *v,
          const struct node_member_cert *cert)
{
    if (v != &m->view)
        m->view = *v;
    m->cert = *cert;
    m->history[m->view.epoch % NODE_MEMBER_HISTORY] = m->view;
    m->history_cert[m->view.epoch % NODE_MEMBER_HISTORY] = m->cert;
    m->promised = m->acc_ballot = (struct node_member_ballot){0, 0};
    m->phase = PHASE_NONE;
    m->attempt = 0;
    m->leader = NODE_MEMBER_NONE;
    m->max_round = 0;
    memset(m->suspected, 0, sizeof m->suspected);
    for (uint32_t i = 0; i < m->view.count; i++) {
        const struct node_member_entry *e = &m->view.members[i];
        if (m->inc_seen[e->id] < e->inc)
            m->inc_seen[e->id] = e->inc;
    }
    s_prune_pending(m);
    int me = s_find(&m->view, m->self);
    bool in = me >= 0 && m->view.members[me].inc == m->inc;
    m->state = in ? NODE_MEMBER_ACTIVE : NODE_MEMBER_OUT;
    s_event(m, in ? NODE_MEMBER_INSTALLED : NODE_MEMBER_REMOVED, m->view.epoch);
}

/* Whether v can be the value of epoch e + 1: its continuing members are
 * members of e, with the same incarnation. */
static bool
s_value_fits(const node_member *m, const struct node_member_view *v)
{
    if (v->epoch != m->view.epoch + 1)
        return false;
    for (uint32_t i = 0; i < v->count; i++) {
        const struct node_member_entry *e = &v->members[i];
        int at = s_find(&m->view, e->id);
        if (!e->joining && (at < 0 || m->view.members[at].inc != e->inc))
            return false;
    }
    return true;
}

/* COMMIT of `epoch` (or of the newest, when that one is no longer kept)
 * to a node that is behind. */
static void
s_send_commit(node_member *m, uint32_t to, uint64_t epoch)
{
    if (to == m->self || m->view.count == 0 || epoch == 0 ||
        epoch > m->view.epoch)
        return;
    const struct node_member_view *v = &m->view;
    const struct node_member_cert *c = &m->cert;
    size_t at = epoch % NODE_MEMBER_HISTORY;
    if (m->history[at].count > 0 && m->history[at].epoch == epoch) {
        v = &m->history[at];
        c = &m->history_cert[at];
    }
    if (v->epoch == 0) /* the start is no decision */
        return;
    s_tx(m, NODE_MEMBER_COMMIT, v->epoch);
    m->tx.value = *v;
    m->tx.cert = *c;
    s_emit1(m, to);
}

static void
s_ask(node_member *m, uint32_t to)
{
    s_tx(m, NODE_MEMBER_ASK, m->view.epoch + 1);
    s_emit1(m, to);
}

/* --- the proposer --------------------------------------------------------- */

static void
s_enter_changing(node_member *m, uint64_t now)
{
    if (m->state != NODE_MEMBER_ACTIVE)
        return;
    m->state = NODE_MEMBER_CHANGING;
    m->attempt = 0;
    m->leader = NODE_MEMBER_NONE;
    m->deadline = now + s_timeout(m, 0);
}

static void
s_propose(node_member *m, uint64_t now)
{
    if (m->max_round == UINT32_MAX) /* only reachable by forged rounds */
        return;
    m->phase = PHASE_PREPARE;
    m->ballot = (struct node_member_ballot){++m->max_round, m->self};
    memset(m->answered, 0, sizeof m->answered);
    m->answers = 0;
    m->majority_at = UINT64_MAX;
    m->best = (struct node_member_ballot){0, 0};
    m->resend_at = now + m->opts.resend;
    m->deadline = now + s_timeout(m, m->attempt);
    s_tx(m, NODE_MEMBER_PREPARE, m->view.epoch + 1);
    m->tx.ballot = m->ballot;
    s_emit_members(m, false);
}

static void
s_add_pending(node_member *m, uint32_t id, uint64_t inc)
{
    uint32_t at = 0;
    while (at < m->npending && m->pending[at].id < id)
        at++;
    if (at < m->npending && m->pending[at].id == id) {
        if (m->pending[at].inc < inc)
            m->pending[at].inc = inc;
        return;
    }
    memmove(m->pending + at + 1,
            m->pending + at,
            (m->npending - at) * sizeof m->pending[0]);
    m->pending[at] = (struct node_member_entry){id, true, inc};
    m->npending++;
}

/* The value from the promises: see the top of the file. A pending joiner
 * whose old incarnation promised is left for a later round (its JOIN is
 * stale or early). */
static void
s_build(node_member *m)
{
    struct node_member_view *p = &m->proposal;
    uint64_t hi = 0;
    for (uint32_t i = 0; i < m->view.count; i++) {
        uint32_t id = m->view.members[i].id;
        if (m->answered[id] && m->done_of[id] > hi)
            hi = m->done_of[id];
    }
    uint64_t lo = hi;
    p->epoch = m->view.epoch + 1;
    p->holder = NODE_MEMBER_NONE;
    p->count = 0;
    uint32_t i = 0, j = 0;
    while (i < m->view.count || j < m->npending) {
        uint32_t a = i < m->view.count ? m->view.members[i].id : UINT32_MAX;
        uint32_t b = j < m->npending ? m->pending[j].id : UINT32_MAX;
        if (b < a || (b == a && !m->answered[a])) {
            p->members[p->count++] = m->pending[j++];
            i += b == a;
            continue;
        }
        j += b == a;
        const struct node_member_entry *e = &m->view.members[i++];
        uint64_t d = m->done_of[a];
        if (!m->answered[a])
            continue;
        p->members[p->count++] = (struct node_member_entry){a, false, e->inc};
        if (d < lo)
            lo = d;
        if (d == hi && p->holder == NODE_MEMBER_NONE)
            p->holder = a;
    }
    p->fate = lo < hi ? NODE_MEMBER_COMPLETE : NODE_MEMBER_DROP;
    p->step = hi - p->fate;
}

static bool
s_all_answered(const node_member *m)
{
    for (uint32_t i = 0; i < m->view.count; i++) {
        uint32_t id = m->view.members[i].id;
        if (!m->suspected[id] && !m->answered[id])
            return false;
    }
    return true;
}

/* Phase 2 once a majority promised and the others answered or the grace
 * ran out. */
static void
s_maybe_accept(node_member *m, uint64_t now)
{
    if (m->phase != PHASE_PREPARE || m->majority_at == UINT64_MAX)
        return;
    if (!s_all_answered(m) &&
        (now < m->majority_at || now - m->majority_at < m->opts.grace))
        return;
    if (m->best.round == 0)
        s_build(m);
    m->phase = PHASE_ACCEPT;
    memset(m->answered, 0, sizeof m->answered);
    m->answers = 0;
    m->votes.ballot = m->ballot;
    m->votes.count = 0;
    m->resend_at = now + m->opts.resend;
    s_tx(m, NODE_MEMBER_ACCEPT, m->view.epoch + 1);
    m->tx.ballot = m->ballot;
    m->tx.value = m->proposal;
    s_emit_members(m, false);
}

/* Decided: COMMIT to the members of both epochs, then install. */
static void
s_decide(node_member *m)
{
    const struct node_member_view *v = &m->proposal;
    size_t k = 0;
    uint32_t i = 0, j = 0;
    while (i < m->view.count || j < v->count) {
        uint32_t a = i < m->view.count ? m->view.members[i].id : UINT32_MAX;
        uint32_t b = j < v->count ? v->members[j].id : UINT32_MAX;
        if ((a < b ? a : b) != m->self)
            m->to[k++] = a < b ? a : b;
        i += a <= b;
        j += b <= a;
    }
    s_tx(m, NODE_MEMBER_COMMIT, v->epoch);
    m->tx.value = *v;
    m->tx.cert = m->votes;
    s_emit(m, m->to, k);
    s_install(m, v, &m->votes);
}

static void
s_next_attempt(node_member *m, uint64_t now)
{
    uint32_t expected = s_candidate(m, m->attempt);
    if (expected != m->self && expected != NODE_MEMBER_NONE &&
        m->leader != expected)
        m->suspected[expected] = 1;
    m->attempt++;
    m->phase = PHASE_NONE;
    m->leader = NODE_MEMBER_NONE;
    m->deadline = now + s_timeout(m, m->attempt);
    if (s_candidate(m, m->attempt) == m->self)
        s_propose(m, now);
}

/* --- messages ------------------------------------------------------------- */

/* A PREPARE or ACCEPT with a ballot this node takes: it is in the view
 * change, waits afresh for this proposer, and drops its own lower one. */
static void
s_follow(node_member *m,
         uint32_t from,
         struct node_member_ballot b,
         uint64_t now)
{
    s_enter_changing(m, now);
    if (from == m->self)
        return;
    m->deadline = now + s_timeout(m, m->attempt);
    m->leader = from;
    if (m->phase != PHASE_NONE && s_cmp(b, m->ballot) > 0)
        m->phase = PHASE_NONE;
}

static void
s_see_round(node_member *m, uint32_t round)
{
    if (round > m->max_round)
        m->max_round = round;
}

/* Common to PREPARE and ACCEPT: false when the message is not for this
 * node's acceptor (answering what it can). */
static bool
s_acceptor_takes(node_member *m,
                 uint32_t from,
                 const struct node_member_msg *msg)
{
    if (msg->epoch <= m->view.epoch) {
        s_send_commit(m, from, msg->epoch);
        return false;
    }
    if (!s_in_ring(m) || !s_is_member(m, from))
        return false;
    if (msg->epoch > m->view.epoch + 1) {
        s_ask(m, from);
        return false;
    }
    s_see_round(m, msg->ballot.round);
    return s_cmp(msg->ballot, m->promised) >= 0;
}

static rumor_err
s_on_prepare(node_member *m,
             uint32_t from,
             const struct node_member_msg *msg,
             uint64_t now)
{
    if (msg->ballot.id != from) /* a ballot names its proposer */
        return s_refuse(m, RUMOR_EPROTO, "a ballot not its sender's");
    if (!s_acceptor_takes(m, from, msg))
        return RUMOR_OK;
    m->promised = msg->ballot;
    s_follow(m, from, msg->ballot, now);
    s_tx(m, NODE_MEMBER_PROMISE, msg->epoch);
    m->tx.ballot = msg->ballot;
    m->tx.done = m->done;
    m->tx.accepted = m->acc_ballot;
    if (m->acc_ballot.round != 0)
        m->tx.value = m->acc_value;
    s_emit1(m, from);
    return RUMOR_OK;
}

static rumor_err
s_on_accept(node_member *m,
            uint32_t from,
            const struct node_member_msg *msg,
            uint64_t now)
{
    if (msg->ballot.id != from ||
        (msg->epoch == m->view.epoch + 1 && s_in_ring(m) &&
         !s_value_fits(m, &msg->value)))
        return s_refuse(m,
                        RUMOR_EPROTO,
                        "an ACCEPT not its sender's or not following the "
                        "view");
    if (!s_acceptor_takes(m, from, msg))
        return RUMOR_OK;
    m->promised = m->acc_ballot = msg->ballot;
    m->acc_value = msg->value;
    s_follow(m, from, msg->ballot, now);
    s_tx(m, NODE_MEMBER_ACCEPTED, msg->epoch);
    m->tx.ballot = msg->ballot;
    s_sign(m,
           node_member_vote_statement(msg->epoch,
                                      msg->ballot,
                                      &msg->value,
                                      m->stmt),
           m->tx.sig);
    s_emit1(m, from);
    return RUMOR_OK;
}

/* Whether a PROMISE or ACCEPTED answers the proposer's current phase. */
static bool
s_proposer_takes(node_member *m,
                 uint32_t from,
                 const struct node_member_msg *msg,
                 int phase)
{
    if (msg->epoch <= m->view.epoch) {
        s_send_commit(m, from, msg->epoch);
        return false;
    }
    return m->phase == phase && msg->epoch == m->view.epoch + 1 &&
           s_cmp(msg->ballot, m->ballot) == 0 && s_is_member(m, from) &&
           !m->answered[from];
}

static rumor_err
s_on_promise(node_member *m,
             uint32_t from,
             const struct node_member_msg *msg,
             uint64_t now)
{
    if (!s_proposer_takes(m, from, msg, PHASE_PREPARE))
        return RUMOR_OK;
    if (m->opts.done_max != 0 && msg->done > m->opts.done_max)
        return s_refuse(m, RUMOR_EPROTO, "a PROMISE with steps past the run");
    if (msg->accepted.round != 0 && !s_value_fits(m, &msg->value))
        return s_refuse(m,
                        RUMOR_EPROTO,
                        "a PROMISE whose value does not "
                        "follow the view");
    m->answered[from] = 1;
    m->answers++;
    m->done_of[from] = msg->done;
    if (msg->accepted.round != 0 && s_cmp(msg->accepted, m->best) > 0) {
        m->best = msg->accepted;
        m->proposal = msg->value;
    }
    if (m->answers >= s_majority(m) && m->majority_at == UINT64_MAX)
        m->majority_at = now;
    s_maybe_accept(m, now);
    return RUMOR_OK;
}

static rumor_err
s_on_accepted(node_member *m, uint32_t from, const struct node_member_msg *msg)
{
    if (!s_proposer_takes(m, from, msg, PHASE_ACCEPT))
        return RUMOR_OK;
    size_t len = node_member_vote_statement(msg->epoch,
                                            m->ballot,
                                            &m->proposal,
                                            m->stmt);
    if (!s_verify(m, from, len, msg->sig))
        return s_refuse(m, RUMOR_EAUTH, "a vote not signed by its sender");
    struct node_member_cert *c = &m->votes;
    uint32_t at = c->count;
    while (at > 0 && c->votes[at - 1].id > from)
        at--;
    memmove(c->votes + at + 1,
            c->votes + at,
            (c->count - at) * sizeof *c->votes);
    c->votes[at].id = from;
    memcpy(c->votes[at].sig, msg->sig, NODE_MEMBER_SIG_BYTES);
    c->count++;
    m->answered[from] = 1;
    if (++m->answers >= s_majority(m))
        s_decide(m);
    return RUMOR_OK;
}

/* Whether a COMMIT's votes prove its value: valid votes from a majority
 * of M_e when this node holds M_e (e + 1 is the value's epoch). A node
 * without M_e (a joiner, one more than an epoch behind) counts every
 * valid vote, since only a member of M_e votes for a value of e + 1, and
 * wants at least a majority of the value's continuing members (a legal
 * decision has that: they are part of M_e) and never fewer than two: no
 * single key decides for a ring of two or more. */
static bool
s_cert_proves(node_member *m,
              const struct node_member_view *v,
              const struct node_member_cert *c)
{
    if (m->opts.signer == NULL)
        return true;
    bool prior = s_in_ring(m) && v->epoch == m->view.epoch + 1;
    uint32_t need = 0;
    if (prior) {
        need = s_majority(m);
    } else {
        for (uint32_t i = 0; i < v->count; i++)
            need += !v->members[i].joining;
        need = need / 2 + 1 > 2 ? need / 2 + 1 : 2;
    }
    size_t len = node_member_vote_statement(v->epoch, c->ballot, v, m->stmt);
    uint32_t good = 0;
    for (uint32_t i = 0; i < c->count && good < need; i++) {
        if (prior && !s_is_member(m, c->votes[i].id))
            continue;
        good += s_verify(m, c->votes[i].id, len, c->votes[i].sig);
    }
    return good >= need;
}

static rumor_err
s_on_commit(node_member *m, uint32_t from, const struct node_member_msg *msg)
{
    const struct node_member_view *v = &msg->value;
    int me = s_find(v, m->self);
    bool in = me >= 0 && v->members[me].inc == m->inc;
    bool joining = in && v->members[me].joining;
    if (m->state == NODE_MEMBER_JOINING) {
        if (!joining)
            return RUMOR_OK;
        if (!s_cert_proves(m, v, &msg->cert))
            return s_refuse(m,
                            RUMOR_EAUTH,
                            "a COMMIT without a majority's "
                            "votes");
        s_install(m, v, &msg->cert);
        return RUMOR_OK;
    }
    if (!s_in_ring(m) || v->epoch <= m->view.epoch)
        return RUMOR_OK;
    if (v->epoch == m->view.epoch + 1 && !s_value_fits(m, v))
        return s_refuse(m,
                        RUMOR_EPROTO,
                        "a COMMIT that does not follow "
                        "the installed view");
    bool next = v->epoch == m->view.epoch + 1;
    if ((next || joining || !in) && !s_cert_proves(m, v, &msg->cert))
        return s_refuse(m, RUMOR_EAUTH, "a COMMIT without a majority's votes");
    if (next) {
        s_install(m, v, &msg->cert);
    } else if (joining || !in) {
        /* admitted afresh, or removed: no chain needed */
        s_install(m, v, &msg->cert);
    } else {
        s_ask(m, from);
    }
    return RUMOR_OK;
}

/* A JOIN (forwarded or not) at a member: see the top of the file. */
/* A suspicion starts (or feeds) the view change for e + 1. */
static void
s_start_change(node_member *m, uint64_t now)
{
    bool was_active = m->state == NODE_MEMBER_ACTIVE;
    s_enter_changing(m, now);
    if (was_active && s_candidate(m, 0) == m->self)
        s_propose(m, now);
    else
        s_maybe_accept(m, now); /* fewer members to wait for */
}

static void
s_on_join(node_member *m,
          const struct node_member_msg *msg,
          bool forwarded,
          uint64_t now)
{
    uint32_t joiner = msg->joiner;
    uint64_t inc = msg->inc;
    if (!s_in_ring(m) || inc < m->inc_seen[joiner])
        return;
    int at = s_find(&m->view, joiner);
    if (at >= 0 && m->view.members[at].inc >= inc) {
        /* admitted already: its COMMIT was lost */
        if (m->view.members[at].inc == inc && m->view.members[at].joining)
            s_send_commit(m, joiner, m->view.epoch);
        return;
    }
    uint32_t lowest = m->view.members[0].id;
    if (lowest == m->self) {
        s_add_pending(m, joiner, inc);
        /* a restart: the member's old incarnation is dead, and the ring
         * may be waiting for it (its restart keeps the transport's link
         * alive, so nothing else says so): replace it now */
        if (at >= 0 && m->state == NODE_MEMBER_ACTIVE) {
            m->suspected[joiner] = 1;
            s_start_change(m, now);
        }
    } else if (!forwarded) {
        s_tx(m, NODE_MEMBER_JOIN_FWD, 0);
        m->tx.joiner = joiner;
        m->tx.inc = inc;
        memcpy(m->tx.sig, msg->sig, NODE_MEMBER_SIG_BYTES);
        s_emit1(m, lowest);
    }
}

static bool
s_join_signed(node_member *m, const struct node_member_msg *msg)
{
    size_t len = node_member_join_statement(msg->joiner, msg->inc, m->stmt);
    return s_verify(m, msg->joiner, len, msg->sig);
}

static rumor_err
s_dispatch(node_member *m,
           uint32_t from,
           const struct node_member_msg *msg,
           uint64_t now)
{
    bool valued = msg->type == NODE_MEMBER_ACCEPT ||
                  msg->type == NODE_MEMBER_COMMIT ||
                  (msg->type == NODE_MEMBER_PROMISE && msg->accepted.round);
    if (valued && m->opts.done_max != 0 &&
        node_member_first_step(&msg->value) > m->opts.done_max)
        return s_refuse(m, RUMOR_EPROTO, "a value with steps past the run");
    switch (msg->type) {
    case NODE_MEMBER_PREPARE:
        return s_on_prepare(m, from, msg, now);
    case NODE_MEMBER_PROMISE:
        return s_on_promise(m, from, msg, now);
    case NODE_MEMBER_ACCEPT:
        return s_on_accept(m, from, msg, now);
    case NODE_MEMBER_ACCEPTED:
        return s_on_accepted(m, from, msg);
    case NODE_MEMBER_COMMIT:
        return s_on_commit(m, from, msg);
    case NODE_MEMBER_ASK:
        s_send_commit(m, from, msg->epoch);
        return RUMOR_OK;
    case NODE_MEMBER_JOIN:
        if (msg->joiner != from)
            return s_refuse(m, RUMOR_EPROTO, "a JOIN for another node");
        if (!s_join_signed(m, msg))
            return s_refuse(m, RUMOR_EAUTH, "a JOIN not signed by its joiner");
        s_on_join(m, msg, false, now);
        return RUMOR_OK;
    case NODE_MEMBER_JOIN_FWD:
        if (!s_join_signed(m, msg))
            return s_refuse(m,
                            RUMOR_EAUTH,
                            "a forwarded JOIN not signed by its joiner");
        if (s_is_member(m, from))
            s_on_join(m, msg, true, now);
        return RUMOR_OK;
    default:
        return s_refuse(m, RUMOR_EPROTO, "unknown type");
    }
}

/* Handles the messages this node sent itself, in order. */
static void
s_loop(node_member *m, uint64_t now)
{
    struct s_item it;
    while (s_queue_pop(&m->loop, &it)) {
        rumor_err rc =
            node_member_decode(m->loop.bytes + it.off, it.len, m->n, &m->rx);
        if (RUMOR_NEVER(rc != RUMOR_OK))
            continue;
        (void)s_dispatch(m, m->self, &m->rx, now);
    }
}

static void
s_send_join(node_member *m)
{
    s_tx(m, NODE_MEMBER_JOIN, 0);
    m->tx.joiner = m->self;
    m->tx.inc = m->inc;
    s_sign(m, node_member_join_statement(m->self, m->inc, m->stmt), m->tx.sig);
    s_emit1(m, m->contacts[m->join_tries % m->ncontacts]);
}

/* --- the API -------------------------------------------------------------- */

void
node_member_opts_default(struct node_member_opts *opts)
{
    assert(opts != NULL);
    opts->timeout = 1000;
    opts->timeout_max = 16000;
    opts->resend = 200;
    opts->grace = 100;
}

rumor_err
node_member_new(node_member **out,
                uint32_t self,
                uint32_t n,
                const struct node_member_opts *opts)
{
    assert(out != NULL);
    assert(opts != NULL);
    *out = NULL;
    if (n > NODE_MEMBER_MAX)
        return RUMOR_ETOOBIG;
    if (self >= n || opts->timeout == 0 || opts->resend == 0 ||
        opts->timeout_max < opts->timeout)
        return RUMOR_EINVAL;
    node_member *m = calloc(1, sizeof *m);
    if (m == NULL)
        return RUMOR_ENOMEM;
    m->self = self;
    m->n = n;
    m->opts = *opts;
    m->state = NODE_MEMBER_OUT;
    m->leader = NODE_MEMBER_NONE;
    *out = m;
    return RUMOR_OK;
}

void
node_member_destroy(node_member **self_p)
{
    if (self_p == NULL || *self_p == NULL)
        return;
    node_member *m = *self_p;
    free(m->out.items);
    free(m->out.bytes);
    free(m->loop.items);
    free(m->loop.bytes);
    free(m);
    *self_p = NULL;
}

static int
s_cmp_u32(const void *a, const void *b)
{
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return (x > y) - (x < y);
}

rumor_err
node_member_start(node_member *m,
                  const uint32_t *ids,
                  size_t count,
                  uint64_t step)
{
    assert(m != NULL);
    assert(ids != NULL || count == 0);
    if (m->state != NODE_MEMBER_OUT || m->view.count != 0 || count == 0 ||
        count > m->n)
        return RUMOR_EINVAL;
    uint32_t sorted[NODE_MEMBER_MAX];
    memcpy(sorted, ids, count * sizeof *ids);
    qsort(sorted, count, sizeof *sorted, s_cmp_u32);
    bool self = false;
    for (size_t i = 0; i < count; i++) {
        if (sorted[i] >= m->n || (i > 0 && sorted[i] == sorted[i - 1]))
            return RUMOR_EINVAL;
        self |= sorted[i] == m->self;
    }
    if (!self)
        return RUMOR_EINVAL;
    struct node_member_view *v = &m->view;
    v->epoch = 0;
    v->step = step;
    v->fate = NODE_MEMBER_DROP;
    v->holder = sorted[0];
    v->count = (uint32_t)count;
    for (size_t i = 0; i < count; i++)
        v->members[i] = (struct node_member_entry){sorted[i], false, 0};
    m->history[0] = *v;
    m->done = step;
    m->state = NODE_MEMBER_ACTIVE;
    return RUMOR_OK;
}

rumor_err
node_member_step_done(node_member *m, uint64_t done, uint64_t now)
{
    assert(m != NULL);
    if (m->state != NODE_MEMBER_ACTIVE || done < m->done)
        return RUMOR_EINVAL;
    m->done = done;
    if (m->npending > 0 && m->view.members[0].id == m->self) {
        s_enter_changing(m, now);
        s_propose(m, now);
    }
    s_loop(m, now);
    return RUMOR_OK;
}

rumor_err
node_member_suspect(node_member *m,
                    const uint32_t *peers,
                    size_t count,
                    uint64_t now)
{
    assert(m != NULL);
    assert(peers != NULL || count == 0);
    for (size_t i = 0; i < count; i++)
        if (peers[i] >= m->n)
            return RUMOR_EINVAL;
    if (!s_in_ring(m))
        return RUMOR_OK;
    bool any = false;
    for (size_t i = 0; i < count; i++) {
        if (peers[i] != m->self && s_is_member(m, peers[i])) {
            m->suspected[peers[i]] = 1;
            any = true;
        }
    }
    if (!any)
        return RUMOR_OK;
    s_start_change(m, now);
    s_loop(m, now);
    return RUMOR_OK;
}

rumor_err
node_member_on_msg(node_member *m,
                   uint32_t from,
                   const uint8_t *buf,
                   size_t len,
                   uint64_t now)
{
    assert(m != NULL);
    assert(buf != NULL || len == 0);
    if (from >= m->n)
        return RUMOR_EINVAL;
    if (node_member_decode(buf, len, m->n, &m->rx) != RUMOR_OK)
        return s_refuse(m, RUMOR_EPROTO, "malformed");
    rumor_err rc = s_dispatch(m, from, &m->rx, now);
    s_loop(m, now);
    return rc;
}

rumor_err
node_member_ask(node_member *m, uint32_t from, uint64_t epoch, uint64_t now)
{
    assert(m != NULL);
    if (from >= m->n)
        return RUMOR_EINVAL;
    if (s_in_ring(m) && epoch > m->view.epoch && from != m->self)
        s_ask(m, from);
    s_loop(m, now);
    return RUMOR_OK;
}

void
node_member_tick(node_member *m, uint64_t now)
{
    assert(m != NULL);
    if (m->state == NODE_MEMBER_JOINING && now >= m->join_at) {
        m->join_tries++;
        s_send_join(m);
        m->join_at = now + s_timeout(m, m->join_tries);
    }
    if (m->state == NODE_MEMBER_CHANGING) {
        s_maybe_accept(m, now);
        if (m->phase != PHASE_NONE && now >= m->resend_at) {
            s_tx(m,
                 m->phase == PHASE_PREPARE ? NODE_MEMBER_PREPARE
                                           : NODE_MEMBER_ACCEPT,
                 m->view.epoch + 1);
            m->tx.ballot = m->ballot;
            if (m->phase == PHASE_ACCEPT)
                m->tx.value = m->proposal;
            s_emit_members(m, true);
            m->resend_at = now + m->opts.resend;
        }
        if (now >= m->deadline)
            s_next_attempt(m, now);
    }
    s_loop(m, now);
}

rumor_err
node_member_join_request(node_member *m,
                         const uint32_t *contacts,
                         size_t count,
                         uint64_t inc,
                         uint64_t now)
{
    assert(m != NULL);
    assert(contacts != NULL || count == 0);
    if (s_in_ring(m) || inc == 0 || inc <= m->inc || count > NODE_MEMBER_MAX)
        return RUMOR_EINVAL;
    uint32_t k = 0;
    for (size_t i = 0; i < count; i++) {
        if (contacts[i] >= m->n)
            return RUMOR_EINVAL;
        if (contacts[i] != m->self)
            m->contacts[k++] = contacts[i];
    }
    if (k == 0)
        return RUMOR_EINVAL;
    m->ncontacts = k;
    m->inc = inc;
    m->done = 0;
    m->state = NODE_MEMBER_JOINING;
    m->join_tries = 0;
    m->join_at = now + s_timeout(m, 0);
    s_send_join(m);
    return RUMOR_OK;
}

bool
node_member_pop(node_member *m,
                uint32_t *to,
                const uint8_t **bytes,
                size_t *len)
{
    assert(m != NULL);
    assert(to != NULL);
    assert(bytes != NULL);
    assert(len != NULL);
    struct s_item it;
    if (!s_queue_pop(&m->out, &it))
        return false;
    *to = it.to;
    *bytes = m->out.bytes + it.off;
    *len = it.len;
    return true;
}

bool
node_member_event(node_member *m, struct node_member_event *ev)
{
    assert(m != NULL);
    assert(ev != NULL);
    if (m->ev_count == 0)
        return false;
    *ev = m->events[m->ev_head];
    m->ev_head = (m->ev_head + 1) % EVENTS_MAX;
    m->ev_count--;
    return true;
}

node_member_state
node_member_state_of(const node_member *m)
{
    assert(m != NULL);
    return m->state;
}

const struct node_member_view *
node_member_view_of(const node_member *m)
{
    assert(m != NULL);
    return &m->view;
}

uint64_t
node_member_done(const node_member *m)
{
    assert(m != NULL);
    return m->done;
}

const char *
node_member_why(const node_member *m)
{
    assert(m != NULL);
    return m->why != NULL ? m->why : "no reason kept";
}
