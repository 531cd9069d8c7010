/*
 * The view change of elastic rings (node/membership.c) on a simulated
 * network inside the test: every node's node_member, a queue of messages
 * with seeded delays, loss, duplication and reordering, links that can be
 * cut, and a clock in milliseconds. Directed cases: a death mid-step
 * (complete or drop), two deaths, the proposer's death with a value
 * accepted by a majority, majority/minority and even partitions, a lost
 * COMMIT, JOIN. Then many seeded runs of a ring model (a step completes
 * when every member is ready; a missed deadline suspects the missing) with
 * losses, duplicates, crashes and restarts of a minority, false
 * suspicions and partitions: at most one value per epoch across all nodes,
 * the same applied step results on every member at every step, and, after
 * the network heals with a live majority, every live node back in one
 * ring. Also the codec: round trips and a table of rejections. Every
 * simulated node signs with an Ed25519 key of its own (issue 33), and the
 * signature checks have cases of their own: a tampered byte, a wrong
 * signer, votes of an old epoch replayed, a quorum one vote short, a JOIN
 * in another node's name.
 */
#include "tests/cmocka_compat.h"

#include "rumor/core.h"

#include "node/membership.h"

#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SIM_MAX   12
#define EPOCH_MAX 64
#define PERIOD    5 /* ring model: a step every PERIOD ms at best */
#define RUNS      400

struct pkt {
    uint32_t from, to;
    uint64_t at, seq;
    size_t len;
    uint8_t *bytes;
};

struct sim;
typedef bool (*sim_drop_fn)(struct sim *s,
                            uint32_t from,
                            uint32_t to,
                            const struct node_member_msg *msg);

struct sim {
    uint32_t n;
    node_member *m[SIM_MAX];
    bool alive[SIM_MAX];
    uint64_t inc[SIM_MAX];
    bool cut[SIM_MAX][SIM_MAX];
    double loss, dup, commit_loss; /* commit_loss: more, for COMMIT */
    uint32_t delay_max;
    struct rumor_rng rng;
    struct pkt *q;
    size_t nq, capq;
    uint64_t seq, now, seed;
    struct node_member_opts opts;
    sim_drop_fn drop;
    uint32_t drop_count;
    struct node_member_view seen; /* the filter's copy of a value */
    /* agreement: the COMMIT bytes of the value first seen per epoch */
    uint8_t *decided[EPOCH_MAX];
    size_t decided_len[EPOCH_MAX];
    uint32_t installs, removals;
    uint32_t installed_at[SIM_MAX][EPOCH_MAX]; /* INSTALLED events */
    /* ring model */
    bool ring, auto_rejoin;
    uint64_t hash[SIM_MAX], tag[SIM_MAX];
    uint64_t stuck_since[SIM_MAX], rejoin_at[SIM_MAX], stepped_at[SIM_MAX];
    uint64_t steps, deadline;
    struct node_member_msg scratch;
    /* identities: node i signs with sk[i]; everyone checks with pk */
    uint8_t pk[SIM_MAX][crypto_sign_PUBLICKEYBYTES];
    uint8_t sk[SIM_MAX][crypto_sign_SECRETKEYBYTES];
    struct sim_key {
        struct sim *s;
        uint32_t id;
    } key[SIM_MAX];
    struct node_member_signer signer[SIM_MAX];
    struct node_member_opts node_opts[SIM_MAX];
};

static void
s_sim_sign(void *arg,
           const uint8_t *msg,
           size_t len,
           uint8_t sig[NODE_MEMBER_SIG_BYTES])
{
    const struct sim_key *k = arg;
    crypto_sign_detached(sig, NULL, msg, len, k->s->sk[k->id]);
}

static bool
s_sim_verify(void *arg,
             uint32_t id,
             const uint8_t *msg,
             size_t len,
             const uint8_t sig[NODE_MEMBER_SIG_BYTES])
{
    const struct sim_key *k = arg;
    return id < k->s->n &&
           crypto_sign_verify_detached(sig, msg, len, k->s->pk[id]) == 0;
}

/* Node i's keys (from the seed, so a run is a function of it) and its
 * options, with its signer. */
static void
s_sim_identity(struct sim *s, uint32_t i)
{
    uint8_t seed[crypto_sign_SEEDBYTES] = {0};
    memcpy(seed, &s->seed, sizeof s->seed);
    seed[31] = (uint8_t)i;
    assert_int_equal(crypto_sign_seed_keypair(s->pk[i], s->sk[i], seed), 0);
    s->key[i] = (struct sim_key){s, i};
    s->signer[i] =
        (struct node_member_signer){&s->key[i], s_sim_sign, s_sim_verify};
    s->node_opts[i] = s->opts;
    s->node_opts[i].signer = &s->signer[i];
}

static uint64_t
s_mix(uint64_t h, uint64_t a, uint64_t b)
{
    h ^= a + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
    h ^= b + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
    return h * 0xff51afd7ed558ccdull;
}

static struct node_member_opts
s_opts(void)
{
    struct node_member_opts o = {.timeout = 40,
                                 .timeout_max = 640,
                                 .resend = 10,
                                 .grace = 8};
    return o;
}

static struct sim *
s_sim_new(uint32_t n, uint64_t seed, const struct node_member_opts *opts)
{
    struct sim *s = calloc(1, sizeof *s);
    assert_non_null(s);
    s->n = n;
    s->seed = seed;
    s->delay_max = 3;
    s->deadline = 30;
    s->opts = opts != NULL ? *opts : s_opts();
    rumor_rng_init(&s->rng, seed, 1);
    assert_true(sodium_init() >= 0);
    for (uint32_t i = 0; i < n; i++) {
        s_sim_identity(s, i);
        assert_int_equal(node_member_new(&s->m[i], i, n, &s->node_opts[i]),
                         RUMOR_OK);
        s->alive[i] = true;
    }
    return s;
}

static void
s_sim_free(struct sim *s)
{
    for (uint32_t i = 0; i < s->n; i++)
        node_member_destroy(&s->m[i]);
    for (size_t k = 0; k < s->nq; k++)
        free(s->q[k].bytes);
    for (int e = 0; e < EPOCH_MAX; e++)
        free(s->decided[e]);
    free(s->q);
    free(s);
}

/* Starts epoch 0 with members ids (all nodes when ids is NULL) at step. */
static void
s_start(struct sim *s, const uint32_t *ids, uint32_t count, uint64_t step)
{
    uint32_t all[SIM_MAX];
    for (uint32_t i = 0; i < s->n; i++)
        all[i] = i;
    if (ids == NULL) {
        ids = all;
        count = s->n;
    }
    for (uint32_t k = 0; k < count; k++)
        assert_int_equal(node_member_start(s->m[ids[k]], ids, count, step),
                         RUMOR_OK);
}

static bool
s_chance(struct sim *s, double p)
{
    return p > 0 && rumor_rng_uniform_double(&s->rng) < p;
}

static void
s_enqueue(struct sim *s,
          uint32_t from,
          uint32_t to,
          const uint8_t *b,
          size_t len)
{
    if (s->nq == s->capq) {
        s->capq = s->capq ? 2 * s->capq : 256;
        s->q = realloc(s->q, s->capq * sizeof *s->q);
        assert_non_null(s->q);
    }
    struct pkt *p = &s->q[s->nq++];
    p->from = from;
    p->to = to;
    p->at = s->now + 1 + rumor_rng_below(&s->rng, s->delay_max);
    p->seq = s->seq++;
    p->len = len;
    p->bytes = malloc(len);
    assert_non_null(p->bytes);
    memcpy(p->bytes, b, len);
}

/* What node i sends goes on the network: lost, cut, dropped by the case's
 * filter, duplicated, delayed. */
static void
s_flush(struct sim *s, uint32_t i)
{
    uint32_t to;
    const uint8_t *b;
    size_t len;
    while (node_member_pop(s->m[i], &to, &b, &len)) {
        assert_true(to < s->n);
        assert_int_equal(node_member_decode(b, len, s->n, &s->scratch),
                         RUMOR_OK);
        if (!s->alive[i] || s->cut[i][to] || s_chance(s, s->loss) ||
            (s->scratch.type == NODE_MEMBER_COMMIT &&
             s_chance(s, s->commit_loss)))
            continue;
        if (s->drop != NULL && s->drop(s, i, to, &s->scratch)) {
            s->drop_count++;
            continue;
        }
        s_enqueue(s, i, to, b, len);
        if (s_chance(s, s->dup))
            s_enqueue(s, i, to, b, len);
    }
}

/* Agreement: every node that learns a value of an epoch learns the same
 * bytes. */
static void
s_record(struct sim *s, const struct node_member_view *v)
{
    if (v->epoch >= EPOCH_MAX)
        fail_msg("seed %llu: epoch %llu past the test's table",
                 (unsigned long long)s->seed,
                 (unsigned long long)v->epoch);
    struct node_member_msg msg;
    memset(&msg, 0, sizeof msg);
    msg.type = NODE_MEMBER_COMMIT;
    msg.epoch = v->epoch;
    msg.value = *v;
    uint8_t buf[NODE_MEMBER_MSG_MAX];
    size_t len = node_member_encode(&msg, buf, sizeof buf);
    assert_true(len > 0);
    if (s->decided[v->epoch] == NULL) {
        s->decided[v->epoch] = malloc(len);
        assert_non_null(s->decided[v->epoch]);
        memcpy(s->decided[v->epoch], buf, len);
        s->decided_len[v->epoch] = len;
    } else if (s->decided_len[v->epoch] != len ||
               memcmp(s->decided[v->epoch], buf, len) != 0) {
        fail_msg("seed %llu: two values for epoch %llu",
                 (unsigned long long)s->seed,
                 (unsigned long long)v->epoch);
    }
}

static const struct node_member_entry *
s_entry(const struct node_member_view *v, uint32_t id)
{
    for (uint32_t k = 0; k < v->count; k++)
        if (v->members[k].id == id)
            return &v->members[k];
    return NULL;
}

/* A member behind the new epoch's first step (or joining) takes what it
 * lacks from the holder, when the holder is up and there. */
static void
s_fetch(struct sim *s, uint32_t i)
{
    node_member *m = s->m[i];
    const struct node_member_view *v = node_member_view_of(m);
    if (node_member_state_of(m) != NODE_MEMBER_ACTIVE)
        return;
    uint64_t first = node_member_first_step(v);
    const struct node_member_entry *e = s_entry(v, i);
    bool joining = e != NULL && e->joining && node_member_done(m) < first;
    if (!joining && node_member_done(m) >= first)
        return;
    uint32_t h = v->holder;
    if (!s->alive[h] || node_member_done(s->m[h]) != first || s->cut[h][i] ||
        s->cut[i][h])
        return;
    if (joining || node_member_done(m) + 1 < first)
        s->hash[i] = s->hash[h]; /* the whole state, as a joiner's */
    else
        s->hash[i] = s_mix(s->hash[i], first - 1, s->tag[h]);
    s->tag[i] = s->tag[h];
    assert_int_equal(node_member_step_done(m, first, s->now), RUMOR_OK);
    s_flush(s, i);
}

static void
s_after(struct sim *s, uint32_t i)
{
    struct node_member_event ev;
    while (node_member_event(s->m[i], &ev)) {
        const struct node_member_view *v = node_member_view_of(s->m[i]);
        assert_int_equal(v->epoch, ev.epoch);
        s_record(s, v);
        if (ev.kind == NODE_MEMBER_INSTALLED) {
            s->installs++;
            s->installed_at[i][ev.epoch]++;
            s->stuck_since[i] = 0; /* a new epoch's step, a new deadline */
            s_fetch(s, i);
        } else {
            assert_int_equal(ev.kind, NODE_MEMBER_REMOVED);
            s->removals++;
            if (s->auto_rejoin)
                s->rejoin_at[i] = s->now + 20;
        }
    }
    s_flush(s, i);
}

static void
s_suspect(struct sim *s, uint32_t i, const uint32_t *peers, size_t count)
{
    assert_int_equal(node_member_suspect(s->m[i], peers, count, s->now),
                     RUMOR_OK);
    s_after(s, i);
}

static void
s_step_done(struct sim *s, uint32_t i, uint64_t done)
{
    assert_int_equal(node_member_step_done(s->m[i], done, s->now), RUMOR_OK);
    s_after(s, i);
}

static void
s_rejoin(struct sim *s, uint32_t i)
{
    uint32_t contacts[SIM_MAX], k = 0;
    for (uint32_t j = 1; j < s->n; j++)
        contacts[k++] = (i + j) % s->n; /* from the next id on */
    s->inc[i]++;
    s->hash[i] = 0;
    assert_int_equal(
        node_member_join_request(s->m[i], contacts, k, s->inc[i], s->now),
        RUMOR_OK);
    s_after(s, i);
}

/* A crash and a restart: a new process with nothing remembered. */
static void
s_restart(struct sim *s, uint32_t i)
{
    node_member_destroy(&s->m[i]);
    assert_int_equal(node_member_new(&s->m[i], i, s->n, &s->node_opts[i]),
                     RUMOR_OK);
    s->alive[i] = true;
    s->stuck_since[i] = 0;
    s_rejoin(s, i);
}

/* Whether member j (entry e of i's view) is ready for i's next step. */
static bool
s_ready(struct sim *s,
        uint32_t i,
        const struct node_member_view *v,
        const struct node_member_entry *e)
{
    uint32_t j = e->id;
    node_member *mj = s->m[j];
    return s->alive[j] && s->inc[j] == e->inc && !s->cut[i][j] &&
           !s->cut[j][i] && node_member_state_of(mj) == NODE_MEMBER_ACTIVE &&
           node_member_view_of(mj)->epoch == v->epoch &&
           node_member_done(mj) == node_member_done(s->m[i]);
}

/* One step of the ring of node i's epoch: every member applies the same
 * result, and their models must be equal before. */
static void
s_ring_step(struct sim *s, uint32_t i, const struct node_member_view *v)
{
    uint64_t d = node_member_done(s->m[i]);
    for (uint32_t k = 0; k < v->count; k++)
        if (s->hash[v->members[k].id] != s->hash[i])
            fail_msg("seed %llu: members %u and %u differ before step %llu",
                     (unsigned long long)s->seed,
                     i,
                     v->members[k].id,
                     (unsigned long long)d);
    struct node_member_view copy = *v;
    for (uint32_t k = 0; k < copy.count; k++) {
        uint32_t j = copy.members[k].id;
        s->hash[j] = s_mix(s->hash[j], d, copy.epoch);
        s->tag[j] = copy.epoch;
        s->stuck_since[j] = 0;
        s->stepped_at[j] = s->now;
        s_step_done(s, j, d + 1);
    }
    s->steps++;
}

/* Node i waits for missing[0..k) and suspects them past the deadline. */
static void
s_wait(struct sim *s, uint32_t i, const uint32_t *missing, uint32_t k)
{
    if (s->stuck_since[i] == 0) {
        s->stuck_since[i] = s->now;
    } else if (s->now - s->stuck_since[i] >= s->deadline) {
        s->stuck_since[i] = s->now;
        s_suspect(s, i, missing, k);
    }
}

/* The ring model, every PERIOD ms: complete the steps whose members are
 * all ready; past the deadline, suspect those that are not (or the holder
 * that did not send the result or state a member lacks); ask a member of
 * a later epoch (seen in its frames) for the decision. */
static void
s_ring(struct sim *s)
{
    for (uint32_t i = 0; i < s->n; i++) {
        if (!s->alive[i])
            continue;
        node_member *m = s->m[i];
        node_member_state st = node_member_state_of(m);
        if (st == NODE_MEMBER_ACTIVE)
            s_fetch(s, i);
        if (st != NODE_MEMBER_ACTIVE && st != NODE_MEMBER_CHANGING)
            continue;
        const struct node_member_view *v = node_member_view_of(m);
        for (uint32_t j = 0; j < s->n; j++) {
            if (!s->alive[j] || s->cut[i][j] || s->cut[j][i])
                continue;
            const struct node_member_view *vj = node_member_view_of(s->m[j]);
            node_member_state sj = node_member_state_of(s->m[j]);
            if ((sj == NODE_MEMBER_ACTIVE || sj == NODE_MEMBER_CHANGING) &&
                vj->epoch > v->epoch && s_entry(vj, i) != NULL) {
                assert_int_equal(node_member_ask(m, j, vj->epoch, s->now),
                                 RUMOR_OK);
                s_after(s, i);
            }
        }
        if (node_member_state_of(m) != NODE_MEMBER_ACTIVE ||
            s->stepped_at[i] == s->now)
            continue;
        uint32_t missing[SIM_MAX], k = 0;
        if (node_member_done(m) < node_member_first_step(v)) {
            missing[k++] = v->holder; /* it did not send what we lack */
        } else {
            for (uint32_t e = 0; e < v->count; e++)
                if (!s_ready(s, i, v, &v->members[e]))
                    missing[k++] = v->members[e].id;
        }
        if (k == 0)
            s_ring_step(s, i, v);
        else
            s_wait(s, i, missing, k);
    }
}

static void
s_deliver_due(struct sim *s)
{
    for (;;) {
        size_t best = s->nq;
        for (size_t k = 0; k < s->nq; k++)
            if (s->q[k].at <= s->now &&
                (best == s->nq || s->q[k].at < s->q[best].at ||
                 (s->q[k].at == s->q[best].at && s->q[k].seq < s->q[best].seq)))
                best = k;
        if (best == s->nq)
            return;
        struct pkt p = s->q[best];
        s->q[best] = s->q[--s->nq];
        if (s->alive[p.to] && !s->cut[p.from][p.to]) {
            rumor_err rc =
                node_member_on_msg(s->m[p.to], p.from, p.bytes, p.len, s->now);
            if (rc != RUMOR_OK)
                fail_msg("seed %llu: node %u refused a message of node %u: %s",
                         (unsigned long long)s->seed,
                         p.to,
                         p.from,
                         node_member_why(s->m[p.to]));
            s_after(s, p.to);
        }
        free(p.bytes);
    }
}

/* Runs ms milliseconds: deliveries, ticks, the ring model, rejoins. */
static void
s_run(struct sim *s, uint64_t ms)
{
    for (uint64_t end = s->now + ms; s->now < end;) {
        s->now++;
        s_deliver_due(s);
        for (uint32_t i = 0; i < s->n; i++) {
            if (!s->alive[i])
                continue;
            node_member_tick(s->m[i], s->now);
            s_after(s, i);
            if (s->rejoin_at[i] != 0 && s->now >= s->rejoin_at[i]) {
                s->rejoin_at[i] = 0;
                if (node_member_state_of(s->m[i]) == NODE_MEMBER_OUT)
                    s_rejoin(s, i);
            }
        }
        if (s->ring && s->now % PERIOD == 0)
            s_ring(s);
    }
}

static void
s_cut(struct sim *s, const uint32_t *side, uint32_t count, bool down)
{
    bool in[SIM_MAX] = {false};
    for (uint32_t k = 0; k < count; k++)
        in[side[k]] = true;
    for (uint32_t i = 0; i < s->n; i++)
        for (uint32_t j = 0; j < s->n; j++)
            if (in[i] != in[j])
                s->cut[i][j] = down;
}

static const struct node_member_view *
s_view(struct sim *s, uint32_t i)
{
    return node_member_view_of(s->m[i]);
}

static void
s_expect_members(const struct node_member_view *v,
                 const uint32_t *ids,
                 uint32_t count)
{
    assert_int_equal(v->count, count);
    for (uint32_t k = 0; k < count; k++)
        assert_int_equal(v->members[k].id, ids[k]);
}

/* --- directed cases ------------------------------------------------------- */

/* (1) A member dies mid-step: the survivors install epoch 1 without it,
 * with one value; "complete" from the survivor that holds step 10 when
 * one does (the holder is the lowest such), "drop" when none does. */
static void
test_death__one_member__survivors_complete_or_drop(void **state)
{
    (void)state;
    for (int holds = 0; holds < 3; holds++) {
        struct sim *s = s_sim_new(5, 11 + (uint64_t)holds, NULL);
        s_start(s, NULL, 0, 10);
        if (holds > 0)
            s_step_done(s, 4, 11);
        if (holds > 1)
            s_step_done(s, 2, 11);
        s->alive[3] = false;
        uint32_t dead = 3, survivors[4] = {0, 1, 2, 4};
        for (uint32_t k = 0; k < 4; k++) {
            s_run(s, 3 * k + 1); /* each survivor's deadline a bit apart */
            s_suspect(s, survivors[k], &dead, 1);
        }
        s_run(s, 500);
        for (uint32_t k = 0; k < 4; k++) {
            const struct node_member_view *v = s_view(s, survivors[k]);
            assert_int_equal(node_member_state_of(s->m[survivors[k]]),
                             NODE_MEMBER_ACTIVE);
            assert_int_equal(v->epoch, 1);
            s_expect_members(v, survivors, 4);
            assert_int_equal(v->step, 10);
            assert_int_equal(v->fate,
                             holds ? NODE_MEMBER_COMPLETE : NODE_MEMBER_DROP);
            assert_int_equal(v->holder, holds == 0 ? 0 : holds == 1 ? 4 : 2);
            assert_int_equal(node_member_done(s->m[survivors[k]]),
                             holds ? 11 : 10);
        }
        assert_int_equal(s->installs, 4);
        s_sim_free(s);
    }
}

/* (2) Two non-adjacent members die; each survivor suspects only its ring
 * predecessor, or nothing: one view change removes both. */
static void
test_death__two_non_adjacent__one_view_change(void **state)
{
    (void)state;
    struct sim *s = s_sim_new(7, 21, NULL);
    s_start(s, NULL, 0, 3);
    s->alive[2] = s->alive[5] = false;
    uint32_t two = 2, five = 5;
    s_suspect(s, 3, &two, 1);
    s_run(s, 5);
    s_suspect(s, 6, &five, 1);
    s_run(s, 600);
    uint32_t survivors[5] = {0, 1, 3, 4, 6};
    for (uint32_t k = 0; k < 5; k++) {
        const struct node_member_view *v = s_view(s, survivors[k]);
        assert_int_equal(v->epoch, 1);
        s_expect_members(v, survivors, 5);
        assert_int_equal(v->fate, NODE_MEMBER_DROP);
    }
    assert_int_equal(s->installs, 5);
    assert_null(s->decided[2]);
    s_sim_free(s);
}

/* (3): node 0 proposes, its ACCEPT reaches 1 and 2 (a majority with
 * itself), never 3; every ACCEPTED to it and every COMMIT is lost, and it
 * dies. The next proposer's higher ballot must find the accepted value
 * and install exactly it, dead node 0 included; the next view change
 * removes node 0. */
static bool
s_drop_proposer_answers(struct sim *s,
                        uint32_t from,
                        uint32_t to,
                        const struct node_member_msg *msg)
{
    if (msg->type == NODE_MEMBER_ACCEPT && from == 0) {
        s->seen = msg->value;
        return to == 3;
    }
    return (msg->type == NODE_MEMBER_ACCEPTED && to == 0) ||
           (msg->type == NODE_MEMBER_COMMIT && from == 0);
}

static void
test_proposer_death__accepted_by_majority__value_kept(void **state)
{
    (void)state;
    struct sim *s = s_sim_new(5, 31, NULL);
    s_start(s, NULL, 0, 7);
    s_step_done(s, 2, 8); /* node 2 holds step 7 */
    s->alive[4] = false;
    s->drop = s_drop_proposer_answers;
    uint32_t four = 4;
    for (uint32_t i = 0; i < 4; i++)
        s_suspect(s, i, &four, 1);
    s_run(s, 20);
    assert_int_equal(s->seen.epoch, 1); /* node 0 sent its ACCEPT */
    struct node_member_view v0 = s->seen;
    s->alive[0] = false;
    s->drop = NULL;
    s_run(s, 2000);
    uint32_t v0_members[4] = {0, 1, 2, 3};
    s_expect_members(&v0, v0_members, 4);
    for (uint32_t i = 1; i < 4; i++) {
        const struct node_member_view *v = s_view(s, i);
        assert_int_equal(s->installed_at[i][1], 1);
        assert_true(s->decided_len[1] > 0);
        assert_int_equal(v->epoch, 1);
        s_expect_members(v, v0_members, 4);
        assert_int_equal(v->fate, v0.fate);
        assert_int_equal(v->holder, v0.holder);
        assert_int_equal(v->holder, 2);
    }
    /* epoch 1 holds a dead member: the survivors' next deadline removes it */
    uint32_t zero = 0, rest[3] = {1, 2, 3};
    for (uint32_t i = 1; i < 4; i++) {
        s_step_done(s, i, 8);
        s_suspect(s, i, &zero, 1);
    }
    s_run(s, 500);
    for (uint32_t i = 1; i < 4; i++) {
        assert_int_equal(s_view(s, i)->epoch, 2);
        s_expect_members(s_view(s, i), rest, 3);
    }
    s_sim_free(s);
}

/* (4) A partition {0,1,2} | {3,4}: only the majority installs epoch 1;
 * the minority tries all along and installs nothing. Healed, the minority
 * learns the decision that removed it, rejoins, and the lowest member
 * admits both at its next step boundary (epoch 2). */
static void
test_partition__majority_goes_on__minority_learns_and_rejoins(void **state)
{
    (void)state;
    struct sim *s = s_sim_new(5, 41, NULL);
    s_start(s, NULL, 0, 20);
    uint32_t major[3] = {0, 1, 2}, minor[2] = {3, 4};
    s_cut(s, major, 3, true);
    for (uint32_t i = 0; i < 3; i++)
        s_suspect(s, i, minor, 2);
    for (uint32_t i = 3; i < 5; i++)
        s_suspect(s, i, major, 3);
    s_run(s, 3000);
    for (uint32_t i = 0; i < 3; i++) {
        assert_int_equal(s_view(s, i)->epoch, 1);
        s_expect_members(s_view(s, i), major, 3);
    }
    for (uint32_t i = 3; i < 5; i++) {
        assert_int_equal(s_view(s, i)->epoch, 0);
        assert_int_equal(node_member_state_of(s->m[i]), NODE_MEMBER_CHANGING);
        assert_int_equal(s->installed_at[i][1], 0);
    }
    assert_int_equal(s->removals, 0);
    s->auto_rejoin = true;
    s_cut(s, major, 3, false);
    s_run(s, 2000);
    assert_int_equal(s->removals, 2);
    for (uint32_t i = 3; i < 5; i++) {
        assert_int_equal(s->installed_at[i][1], 0);
        assert_int_equal(node_member_state_of(s->m[i]), NODE_MEMBER_JOINING);
    }
    s_step_done(s, 0, 20);
    s_run(s, 500);
    uint32_t all[5] = {0, 1, 2, 3, 4};
    for (uint32_t i = 0; i < 5; i++) {
        const struct node_member_view *v = s_view(s, i);
        assert_int_equal(node_member_state_of(s->m[i]), NODE_MEMBER_ACTIVE);
        assert_int_equal(v->epoch, 2);
        s_expect_members(v, all, 5);
        assert_int_equal(v->members[3].joining, true);
        assert_int_equal(v->members[4].joining, true);
        assert_int_equal(v->members[4].inc, 1);
        assert_int_equal(v->members[0].joining, false);
    }
    s_sim_free(s);
}

/* (5) An even split {0,1} | {2,3}: no side has a majority, nobody
 * installs, however long; healed, the four agree on epoch 1. */
static void
test_partition__even_split__nobody_installs(void **state)
{
    (void)state;
    struct sim *s = s_sim_new(4, 51, NULL);
    s_start(s, NULL, 0, 5);
    uint32_t left[2] = {0, 1}, right[2] = {2, 3};
    s_cut(s, left, 2, true);
    for (uint32_t i = 0; i < 2; i++)
        s_suspect(s, i, right, 2);
    for (uint32_t i = 2; i < 4; i++)
        s_suspect(s, i, left, 2);
    s_run(s, 5000);
    assert_int_equal(s->installs, 0);
    for (uint32_t i = 0; i < 4; i++)
        assert_int_equal(node_member_state_of(s->m[i]), NODE_MEMBER_CHANGING);
    s_cut(s, left, 2, false);
    s_run(s, 3000);
    assert_non_null(s->decided[1]);
    uint32_t in = 0;
    for (uint32_t i = 0; i < 4; i++)
        in += node_member_state_of(s->m[i]) == NODE_MEMBER_ACTIVE &&
              s_view(s, i)->epoch == 1;
    assert_true(in >= 3);
    s_sim_free(s);
}

/* (6) Node 1's COMMIT is lost; a frame of epoch 1 from node 0 makes it
 * ask, and it installs at once. Without the frame, its own timeout gets
 * it the decision too (its PREPARE is answered with the COMMIT). */
static bool
s_drop_commit_to_1(struct sim *s,
                   uint32_t from,
                   uint32_t to,
                   const struct node_member_msg *msg)
{
    (void)from;
    return msg->type == NODE_MEMBER_COMMIT && to == 1 && s->drop_count == 0;
}

static void
test_commit_lost__asked_or_timed_out__installed(void **state)
{
    (void)state;
    for (int ask = 1; ask >= 0; ask--) {
        struct sim *s = s_sim_new(3, 61, NULL);
        s_start(s, NULL, 0, 0);
        s->drop = s_drop_commit_to_1;
        s->alive[2] = false;
        uint32_t two = 2;
        s_suspect(s, 0, &two, 1);
        s_suspect(s, 1, &two, 1);
        s_run(s, 15);
        assert_int_equal(s_view(s, 0)->epoch, 1);
        assert_int_equal(s->drop_count, 1);
        assert_int_equal(s_view(s, 1)->epoch, 0);
        if (ask) {
            assert_int_equal(node_member_ask(s->m[1], 0, 1, s->now), RUMOR_OK);
            s_after(s, 1);
            s_run(s, 10); /* far less than its timeout */
        } else {
            s_run(s, 300);
        }
        assert_int_equal(s_view(s, 1)->epoch, 1);
        assert_int_equal(node_member_state_of(s->m[1]), NODE_MEMBER_ACTIVE);
        assert_int_equal(s->installed_at[1][1], 1);
        s_sim_free(s);
    }
}

/* (7) Node 3, outside the ring {0,1,2}, asks node 2, which forwards to
 * node 0; node 0 admits it at its next step boundary: epoch 1 = {0,1,2,3}
 * with 3 joining. A late copy of the same JOIN changes nothing; a restart
 * of node 3 (a higher incarnation) is admitted again. */
static void
test_join__forwarded_to_lowest__enters_next_epoch(void **state)
{
    (void)state;
    struct sim *s = s_sim_new(4, 71, NULL);
    uint32_t ring[3] = {0, 1, 2}, all[4] = {0, 1, 2, 3}, two = 2;
    s_start(s, ring, 3, 30);
    assert_int_equal(node_member_join_request(s->m[3], &two, 1, 1, s->now),
                     RUMOR_OK);
    uint32_t to;
    const uint8_t *b;
    size_t len;
    assert_true(node_member_pop(s->m[3], &to, &b, &len));
    uint8_t join[128];
    assert_true(len <= sizeof join);
    memcpy(join, b, len);
    size_t join_len = len;
    s_enqueue(s, 3, to, join, len);
    s->inc[3] = 1;
    s_run(s, 20);
    assert_int_equal(s->installs, 0); /* no boundary yet */
    s_step_done(s, 0, 31);
    s_run(s, 200);
    for (uint32_t i = 0; i < 4; i++) {
        const struct node_member_view *v = s_view(s, i);
        assert_int_equal(node_member_state_of(s->m[i]), NODE_MEMBER_ACTIVE);
        assert_int_equal(v->epoch, 1);
        s_expect_members(v, all, 4);
        assert_int_equal(v->members[3].joining, true);
        assert_int_equal(v->members[3].inc, 1);
        assert_int_equal(v->holder, 0);
        assert_int_equal(node_member_first_step(v), 31);
    }
    assert_int_equal(node_member_done(s->m[3]), 31); /* fetched */
    s_enqueue(s, 3, 0, join, join_len);
    s_enqueue(s, 3, 1, join, join_len);
    s_run(s, 20);
    for (uint32_t i = 0; i < 3; i++)
        s_step_done(s, i, 32);
    s_step_done(s, 3, 32);
    s_run(s, 200);
    for (uint32_t i = 0; i < 4; i++)
        assert_int_equal(s_view(s, i)->epoch, 1);
    s_restart(s, 3);
    s_run(s, 300);
    /* the old incarnation is still a member when the new one asks: it is
     * replaced, not added twice, and at once, without waiting for a step
     * boundary (the ring may be stuck in a step that waits for the dead
     * incarnation, whose restart keeps the link up) */
    for (uint32_t i = 0; i < 4; i++) {
        const struct node_member_view *v = s_view(s, i);
        assert_int_equal(v->epoch, 2);
        s_expect_members(v, all, 4);
        assert_int_equal(v->members[3].inc, 2);
        assert_int_equal(v->members[3].joining, true);
    }
    s_sim_free(s);
}

/* --- (8) the randomized property test ------------------------------------- */

struct tally {
    uint32_t runs, live_checked, installs, removals, restarts, partitions;
    uint64_t steps, epochs, dropped;
};

static void
s_random_run(uint64_t seed, struct tally *t)
{
    struct rumor_rng plan;
    rumor_rng_init(&plan, seed, 2);
    uint32_t n = 3 + rumor_rng_below(&plan, 7);
    uint32_t delay_max = 1 + rumor_rng_below(&plan, 15);
    /* waits in proportion to the network's delays, as a deployment sets
     * them from its round trip and step times */
    struct node_member_opts opts = {.timeout = 20 + 6 * delay_max,
                                    .timeout_max = 16 * (20 + 6 * delay_max),
                                    .resend = 2 * delay_max + 2,
                                    .grace = 2 * delay_max + 2};
    struct sim *s = s_sim_new(n, seed, &opts);
    s->ring = true;
    s->auto_rejoin = true;
    s->loss = rumor_rng_below(&plan, 31) / 100.0;
    s->dup = rumor_rng_below(&plan, 11) / 100.0;
    s->commit_loss = rumor_rng_below(&plan, 91) / 100.0;
    s->delay_max = delay_max;
    s->deadline = 30 + 4 * delay_max;
    s_start(s, NULL, 0, 0);
    /* crashes of a minority, some restarted; a partition of another
     * minority; a false suspicion */
    uint32_t f = rumor_rng_below(&plan, (n - 1) / 2 + 1);
    uint32_t order[SIM_MAX];
    for (uint32_t i = 0; i < n; i++)
        order[i] = i;
    for (uint32_t i = n - 1; i > 0; i--) {
        uint32_t j = rumor_rng_below(&plan, i + 1), x = order[i];
        order[i] = order[j];
        order[j] = x;
    }
    uint64_t crash_at[SIM_MAX] = {0}, restart_at[SIM_MAX] = {0};
    for (uint32_t k = 0; k < f; k++) {
        crash_at[order[k]] = 50 + rumor_rng_below(&plan, 400);
        if (rumor_rng_below(&plan, 2))
            restart_at[order[k]] =
                crash_at[order[k]] + 200 + rumor_rng_below(&plan, 1500);
    }
    uint32_t p = 0;
    uint64_t part_at = 0, part_end = 0;
    if (rumor_rng_below(&plan, 4) == 0 && (n - 1) / 2 > f) {
        p = 1 + rumor_rng_below(&plan, (n - 1) / 2 - f);
        part_at = 20 + rumor_rng_below(&plan, 600);
        part_end = part_at + 300 + rumor_rng_below(&plan, 1200);
        t->partitions++;
    }
    uint64_t false_at =
        rumor_rng_below(&plan, 2) ? 1 + rumor_rng_below(&plan, 800) : 0;
    uint32_t false_by = rumor_rng_below(&plan, n),
             false_of = rumor_rng_below(&plan, n);
    const uint64_t heal = 2500;
    while (s->now < heal + 12000) {
        s_run(s, 1);
        for (uint32_t i = 0; i < n; i++) {
            if (crash_at[i] == s->now) {
                s->alive[i] = false;
                /* the step it was in may have finished at some survivors */
                node_member *mi = s->m[i];
                const struct node_member_view *v = node_member_view_of(mi);
                bool full = node_member_state_of(mi) == NODE_MEMBER_ACTIVE;
                for (uint32_t e = 0; e < v->count && full; e++)
                    full = v->members[e].id == i ||
                           s_ready(s, i, v, &v->members[e]);
                uint64_t d = node_member_done(mi);
                for (uint32_t e = 0; e < v->count && full; e++) {
                    uint32_t j = v->members[e].id;
                    if (j != i && rumor_rng_below(&plan, 2)) {
                        s->hash[j] = s_mix(s->hash[j], d, v->epoch);
                        s->tag[j] = v->epoch;
                        s_step_done(s, j, d + 1);
                    }
                }
            }
            if (restart_at[i] == s->now) {
                s_restart(s, i);
                t->restarts++;
            }
        }
        if (p > 0 && s->now == part_at)
            s_cut(s, order + f, p, true);
        if (p > 0 && s->now == part_end)
            s_cut(s, order + f, p, false);
        if (s->now == false_at && s->alive[false_by])
            s_suspect(s, false_by, &false_of, 1);
        if (s->now == heal) {
            s->loss = s->dup = s->commit_loss = 0;
            s_cut(s, order + f, p, false);
        }
    }
    /* termination, where the newest epoch has a live majority */
    uint32_t top = 0;
    while (!s->alive[top])
        top++;
    for (uint32_t i = 0; i < n; i++)
        if (s->alive[i] && s_view(s, i)->epoch > s_view(s, top)->epoch)
            top = i;
    const struct node_member_view *v = s_view(s, top);
    uint32_t live = 0;
    for (uint32_t e = 0; e < v->count; e++)
        live += s->alive[v->members[e].id] &&
                s->inc[v->members[e].id] == v->members[e].inc;
    if (live >= v->count / 2 + 1) {
        t->live_checked++;
        uint64_t before = s->steps;
        s_run(s, 100);
        for (uint32_t i = 0; i < n; i++)
            if (s->alive[i] &&
                (node_member_state_of(s->m[i]) != NODE_MEMBER_ACTIVE ||
                 s_view(s, i)->epoch != v->epoch))
                fail_msg("seed %llu: node %u is %d at epoch %llu, the ring "
                         "at %llu",
                         (unsigned long long)seed,
                         i,
                         (int)node_member_state_of(s->m[i]),
                         (unsigned long long)s_view(s, i)->epoch,
                         (unsigned long long)v->epoch);
        if (s->steps == before)
            fail_msg("seed %llu: the ring makes no step",
                     (unsigned long long)seed);
    }
    t->runs++;
    t->installs += s->installs;
    t->removals += s->removals;
    t->steps += s->steps;
    t->epochs += v->epoch;
    s_sim_free(s);
}

static void
test_random__loss_dup_crashes__one_value_per_epoch_and_termination(void **state)
{
    (void)state;
    struct tally t = {0};
    for (uint64_t seed = 1; seed <= RUNS; seed++)
        s_random_run(seed, &t);
    printf("membership: %u seeded runs (%u with a partition, %u restarts): "
           "%llu epochs decided, %u installs, %u removals, %llu ring steps; "
           "termination checked in %u runs\n",
           t.runs,
           t.partitions,
           t.restarts,
           (unsigned long long)t.epochs,
           t.installs,
           t.removals,
           (unsigned long long)t.steps,
           t.live_checked);
    assert_int_equal(t.runs, RUNS);
    assert_true(t.live_checked > RUNS / 2);
}

/* --- API and codec -------------------------------------------------------- */

static void
test_api__misuse__einval(void **state)
{
    (void)state;
    struct node_member_opts o = s_opts();
    node_member *m = NULL;
    assert_int_equal(node_member_new(&m, 3, 3, &o), RUMOR_EINVAL);
    assert_int_equal(node_member_new(&m, 0, NODE_MEMBER_MAX + 1, &o),
                     RUMOR_ETOOBIG);
    assert_null(m);
    assert_int_equal(node_member_new(&m, 1, 3, &o), RUMOR_OK);
    uint32_t bad[2] = {0, 2}, dup[3] = {1, 1, 2}, ok[3] = {2, 0, 1};
    assert_int_equal(node_member_start(m, bad, 2, 0), RUMOR_EINVAL);
    assert_int_equal(node_member_start(m, dup, 3, 0), RUMOR_EINVAL);
    assert_int_equal(node_member_start(m, ok, 3, 5), RUMOR_OK);
    assert_int_equal(node_member_start(m, ok, 3, 5), RUMOR_EINVAL);
    assert_int_equal(node_member_step_done(m, 4, 0), RUMOR_EINVAL);
    uint32_t far = 3;
    assert_int_equal(node_member_suspect(m, &far, 1, 0), RUMOR_EINVAL);
    assert_int_equal(node_member_join_request(m, ok, 3, 1, 0), RUMOR_EINVAL);
    uint32_t zero = 0;
    assert_int_equal(node_member_suspect(m, &zero, 1, 0), RUMOR_OK);
    assert_int_equal(node_member_state_of(m), NODE_MEMBER_CHANGING);
    /* frozen: no result of the epoch may be applied now */
    assert_int_equal(node_member_step_done(m, 6, 1), RUMOR_EINVAL);
    assert_int_equal(node_member_done(m), 5);
    uint8_t junk[3] = {1, 2, 3};
    assert_int_equal(node_member_on_msg(m, 0, junk, 3, 1), RUMOR_EPROTO);
    assert_int_equal(node_member_on_msg(m, 9, junk, 3, 1), RUMOR_EINVAL);
    node_member_destroy(&m);
    node_member_destroy(&m);
    assert_null(m);
}

static struct node_member_view
s_value(void)
{
    struct node_member_view v;
    memset(&v, 0, sizeof v);
    v.epoch = 9;
    v.step = 0x0102030405060708ull;
    v.fate = NODE_MEMBER_COMPLETE;
    v.holder = 4;
    v.count = 3;
    const uint32_t ids[3] = {1, 4, 6};
    const uint64_t incs[3] = {0, 7, 0x1122334455667788ull};
    for (int k = 0; k < 3; k++) { /* fields, so padding stays zero */
        v.members[k].id = ids[k];
        v.members[k].joining = k == 2;
        v.members[k].inc = incs[k];
    }
    return v;
}

static size_t
s_encode(const struct node_member_msg *msg, uint8_t *buf)
{
    size_t len = node_member_encode(msg, buf, NODE_MEMBER_MSG_MAX);
    assert_true(len > 0);
    return len;
}

static void
test_codec__every_type__round_trip(void **state)
{
    (void)state;
    static struct node_member_msg in, out;
    static uint8_t buf[NODE_MEMBER_MSG_MAX];
    for (uint32_t type = NODE_MEMBER_PREPARE; type <= NODE_MEMBER_JOIN_FWD;
         type++) {
        for (int with_value = 0; with_value < 2; with_value++) {
            memset(&in, 0, sizeof in);
            in.type = type;
            in.epoch = type >= NODE_MEMBER_JOIN ? 0 : 9;
            if (type <= NODE_MEMBER_ACCEPTED)
                in.ballot = (struct node_member_ballot){3, 5};
            if (type == NODE_MEMBER_PROMISE) {
                in.done = 77;
                if (with_value)
                    in.accepted = (struct node_member_ballot){2, 6};
            }
            if (type == NODE_MEMBER_ACCEPT || type == NODE_MEMBER_COMMIT ||
                in.accepted.round != 0)
                in.value = s_value();
            if (type >= NODE_MEMBER_JOIN) {
                in.joiner = 6;
                in.inc = 42;
            }
            if (type == NODE_MEMBER_ACCEPTED || type >= NODE_MEMBER_JOIN)
                for (int k = 0; k < NODE_MEMBER_SIG_BYTES; k++)
                    in.sig[k] = (uint8_t)(k * 7 + type);
            if (type == NODE_MEMBER_COMMIT && with_value) {
                in.cert.ballot = (struct node_member_ballot){3, 5};
                in.cert.count = 2;
                in.cert.votes[0].id = 1;
                in.cert.votes[1].id = 6;
                memset(in.cert.votes[0].sig, 0xa5, NODE_MEMBER_SIG_BYTES);
                memset(in.cert.votes[1].sig, 0x5a, NODE_MEMBER_SIG_BYTES);
            }
            size_t len = s_encode(&in, buf);
            assert_int_equal(node_member_decode(buf, len, 7, &out), RUMOR_OK);
            assert_memory_equal(&in, &out, sizeof in);
            /* every shorter and one longer input is refused */
            for (size_t cut = 0; cut < len; cut++)
                assert_int_equal(node_member_decode(buf, cut, 7, &out),
                                 RUMOR_EPROTO);
            buf[len] = 0;
            assert_int_equal(node_member_decode(buf, len + 1, 7, &out),
                             RUMOR_EPROTO);
        }
    }
    /* a PREPARE's bytes, as docs/protocol.md lays them out */
    memset(&in, 0, sizeof in);
    in.type = NODE_MEMBER_PREPARE;
    in.epoch = 0x0807060504030201ull;
    in.ballot = (struct node_member_ballot){0x0d0c0b0a, 2};
    static const uint8_t want[24] = {'R', 'M', 'E', 'M', 2, 1, 0, 0,
                                     1,   2,   3,   4,   5, 6, 7, 8,
                                     0xa, 0xb, 0xc, 0xd, 2, 0, 0, 0};
    assert_int_equal(s_encode(&in, buf), 24);
    assert_memory_equal(buf, want, 24);
}

/* Each row breaks one rule of an otherwise valid COMMIT (or JOIN). */
static void
test_codec__rejections_table__eproto(void **state)
{
    (void)state;
    static struct node_member_msg in, out;
    static uint8_t buf[NODE_MEMBER_MSG_MAX];
    memset(&in, 0, sizeof in);
    in.type = NODE_MEMBER_COMMIT;
    in.epoch = 9;
    in.value = s_value();
    in.cert.ballot = (struct node_member_ballot){2, 4};
    in.cert.count = 2;
    in.cert.votes[0].id = 1;
    in.cert.votes[1].id = 4;
    size_t len = s_encode(&in, buf);
    /* header, ballot + vote count + zero, value, votes */
    const size_t V = 32, W = V + 20 + 3 * 16;
    assert_int_equal(len, W + 2 * NODE_MEMBER_VOTE_BYTES);
    assert_int_equal(node_member_decode(buf, len, 7, &out), RUMOR_OK);
    struct {
        const char *what;
        size_t at;
        uint8_t value;
        uint32_t n;
    } rows[] = {
        {"magic", 0, 'X', 7},
        {"version 1 (before signatures)", 4, 1, 7},
        {"unknown type 0", 5, 0, 7},
        {"unknown type 9", 5, 9, 7},
        {"reserved", 6, 1, 7},
        {"fate 2", V + 12, 2, 7},
        {"fate high bytes", V + 13, 1, 7},
        {"count 0", V + 16, 0, 7},
        {"count 4: length", V + 16, 4, 7},
        {"count huge", V + 19, 1, 7},
        {"unsorted", V + 20, 5, 7},
        {"duplicate", V + 20, 4, 7},
        {"flags", V + 20 + 4, 2, 7},
        {"holder joining", V + 8, 6, 7},
        {"holder absent", V + 8, 2, 7},
        {"joiner inc 0", V + 20 + 32 + 8, 0, 7},
        {"id out of range", 0, 0, 6},
        {"votes: count 3", 24, 3, 7},
        {"votes: count 1", 24, 1, 7},
        {"votes: the zero after the count", 28, 1, 7},
        {"votes: ballot round 0", 16, 0, 7},
        {"votes: ballot id out of range", 20, 7, 7},
        {"votes: unsorted", W, 5, 7},
        {"votes: duplicate", W, 4, 7},
        {"votes: id out of range", W + NODE_MEMBER_VOTE_BYTES, 9, 7},
        {"votes: the zero after an id", W + 4, 1, 7},
        {"epoch 0", 8, 0, 7},
    };
    for (size_t r = 0; r < sizeof rows / sizeof rows[0]; r++) {
        uint8_t copy[NODE_MEMBER_MSG_MAX];
        memcpy(copy, buf, len);
        if (rows[r].n == 7) {
            copy[rows[r].at] = rows[r].value;
            if (strcmp(rows[r].what, "joiner inc 0") == 0)
                memset(copy + rows[r].at, 0, 8);
        }
        if (node_member_decode(copy, len, rows[r].n, &out) != RUMOR_EPROTO)
            fail_msg("accepted: %s", rows[r].what);
        assert_int_equal(out.type, 0); /* zeroed on error */
    }
    /* a JOIN with an epoch, an incarnation 0, a joiner out of range */
    memset(&in, 0, sizeof in);
    in.type = NODE_MEMBER_JOIN;
    in.joiner = 6;
    in.inc = 1;
    len = s_encode(&in, buf);
    assert_int_equal(len, 32 + NODE_MEMBER_SIG_BYTES);
    buf[8] = 1;
    assert_int_equal(node_member_decode(buf, len, 7, &out), RUMOR_EPROTO);
    buf[8] = 0;
    assert_int_equal(node_member_decode(buf, len, 6, &out), RUMOR_EPROTO);
    buf[20] = 1; /* the zero after the joiner */
    assert_int_equal(node_member_decode(buf, len, 7, &out), RUMOR_EPROTO);
    buf[20] = 0;
    buf[24] = 0;
    assert_int_equal(node_member_decode(buf, len, 7, &out), RUMOR_EPROTO);
    /* a PROMISE without an accepted value but with its proposer set */
    memset(&in, 0, sizeof in);
    in.type = NODE_MEMBER_PROMISE;
    in.epoch = 2;
    in.ballot = (struct node_member_ballot){1, 0};
    len = s_encode(&in, buf);
    assert_int_equal(len, 40);
    buf[36] = 1;
    assert_int_equal(node_member_decode(buf, len, 7, &out), RUMOR_EPROTO);
    /* the encoder refuses what the decoder would */
    in.ballot.round = 0;
    assert_int_equal(node_member_encode(&in, buf, sizeof buf), 0);
}

/* --- signatures (issue 33) ------------------------------------------------ */

/* A COMMIT of epoch `epoch` keeping ids[0..count) (no joiner, step 0
 * dropped), with votes at ballot (1, 3) by voters[0..nv) (ascending), each
 * signed with signer[k]'s key over the statement of `signed_epoch` and the
 * value as it was before `tamper` changed it. */
struct forged {
    uint64_t epoch, signed_epoch;
    const uint32_t *ids, *voters, *signer;
    uint32_t count, nv;
    bool tamper;
};

static size_t
s_forge_commit(struct sim *s, const struct forged *f, uint8_t *buf)
{
    static struct node_member_msg msg;
    memset(&msg, 0, sizeof msg);
    msg.type = NODE_MEMBER_COMMIT;
    msg.epoch = f->epoch;
    struct node_member_view *v = &msg.value;
    v->epoch = f->signed_epoch;
    v->step = 5;
    v->fate = NODE_MEMBER_DROP;
    v->holder = f->ids[0];
    v->count = f->count;
    for (uint32_t k = 0; k < f->count; k++)
        v->members[k] = (struct node_member_entry){f->ids[k], false, 0};
    msg.cert.ballot = (struct node_member_ballot){1, 3};
    msg.cert.count = f->nv;
    uint8_t stmt[NODE_MEMBER_STATEMENT_MAX];
    size_t len =
        node_member_vote_statement(f->signed_epoch, msg.cert.ballot, v, stmt);
    for (uint32_t k = 0; k < f->nv; k++) {
        msg.cert.votes[k].id = f->voters[k];
        crypto_sign_detached(msg.cert.votes[k].sig,
                             NULL,
                             stmt,
                             len,
                             s->sk[f->signer[k]]);
    }
    v->epoch = f->epoch;
    if (f->tamper)
        v->step = 6; /* one byte of the value, after the votes */
    return s_encode(&msg, buf);
}

/* Node 0 of a ring {0,1,2,3} at epoch 0 (a majority is 3) takes a COMMIT
 * that drops nodes 1 and 2 only with three valid votes for that epoch and
 * value: one vote (the attack of issue 33: node 3's key alone), a quorum
 * of one short, a vote signed with another member's key, a value changed
 * after the votes and, once epoch 1 is in, epoch 1's votes replayed for
 * epoch 2 are refused, each RUMOR_EAUTH with nothing installed. */
static void
test_signed_commit__short_forged_tampered_replayed__refused(void **state)
{
    (void)state;
    struct sim *s = s_sim_new(4, 91, NULL);
    s_start(s, NULL, 0, 0);
    static uint8_t buf[NODE_MEMBER_MSG_MAX];
    const uint32_t keep[2] = {0, 3};
    const uint32_t one[1] = {3}, two[2] = {2, 3}, three[3] = {1, 2, 3};
    const uint32_t wrong[3] = {3, 2, 3}; /* node 1's vote by node 3's key */
    const struct forged bad[] = {
        {1, 1, keep, one, one, 2, 1, false},
        {1, 1, keep, two, two, 2, 2, false},
        {1, 1, keep, three, wrong, 2, 3, false},
        {1, 1, keep, three, three, 2, 3, true},
    };
    for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
        size_t len = s_forge_commit(s, &bad[k], buf);
        assert_int_equal(node_member_on_msg(s->m[0], 3, buf, len, 1),
                         RUMOR_EAUTH);
        assert_string_equal(node_member_why(s->m[0]),
                            "a COMMIT without a majority's votes");
        assert_int_equal(s_view(s, 0)->epoch, 0);
        assert_int_equal(s_view(s, 0)->count, 4);
    }
    /* the same COMMIT with the votes it needs is installed */
    const struct forged good = {1, 1, keep, three, three, 2, 3, false};
    size_t len = s_forge_commit(s, &good, buf);
    assert_int_equal(node_member_on_msg(s->m[0], 3, buf, len, 2), RUMOR_OK);
    assert_int_equal(s_view(s, 0)->epoch, 1);
    s_expect_members(s_view(s, 0), keep, 2);
    /* epoch 1's votes do not make an epoch 2 */
    const struct forged replay = {2, 1, keep, three, three, 2, 3, false};
    len = s_forge_commit(s, &replay, buf);
    assert_int_equal(node_member_on_msg(s->m[0], 3, buf, len, 3), RUMOR_EAUTH);
    assert_int_equal(s_view(s, 0)->epoch, 1);
    s_sim_free(s);
}

/* A JOIN carries its joiner's signature of (joiner, incarnation): member 3
 * cannot forward a JOIN in live node 1's name (the restart that would
 * drop node 1 from the ring), nor ask for it directly; node 1's own JOIN
 * of a new incarnation, forwarded by 3, starts the view change at once. */
static void
test_signed_join__in_another_node_s_name__refused(void **state)
{
    (void)state;
    struct sim *s = s_sim_new(4, 92, NULL);
    s_start(s, NULL, 0, 0);
    static struct node_member_msg msg;
    uint8_t buf[256], stmt[NODE_MEMBER_STATEMENT_MAX];
    memset(&msg, 0, sizeof msg);
    msg.type = NODE_MEMBER_JOIN_FWD;
    msg.joiner = 1;
    msg.inc = 99;
    size_t slen = node_member_join_statement(1, 99, stmt);
    crypto_sign_detached(msg.sig, NULL, stmt, slen, s->sk[3]);
    size_t len = s_encode(&msg, buf);
    assert_int_equal(node_member_on_msg(s->m[0], 3, buf, len, 1), RUMOR_EAUTH);
    msg.type = NODE_MEMBER_JOIN;
    len = s_encode(&msg, buf);
    assert_int_equal(node_member_on_msg(s->m[0], 3, buf, len, 1), RUMOR_EPROTO);
    s_run(s, 100);
    assert_int_equal(node_member_state_of(s->m[0]), NODE_MEMBER_ACTIVE);
    assert_int_equal(s_view(s, 0)->epoch, 0);
    /* signed by node 1 itself: a restart, taken */
    msg.type = NODE_MEMBER_JOIN_FWD;
    crypto_sign_detached(msg.sig, NULL, stmt, slen, s->sk[1]);
    len = s_encode(&msg, buf);
    assert_int_equal(node_member_on_msg(s->m[0], 3, buf, len, 2), RUMOR_OK);
    assert_int_equal(node_member_state_of(s->m[0]), NODE_MEMBER_CHANGING);
    s_sim_free(s);
}

int
main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_codec__every_type__round_trip),
        cmocka_unit_test(test_codec__rejections_table__eproto),
        cmocka_unit_test(
            test_signed_commit__short_forged_tampered_replayed__refused),
        cmocka_unit_test(test_signed_join__in_another_node_s_name__refused),
        cmocka_unit_test(test_api__misuse__einval),
        cmocka_unit_test(test_death__one_member__survivors_complete_or_drop),
        cmocka_unit_test(test_death__two_non_adjacent__one_view_change),
        cmocka_unit_test(test_proposer_death__accepted_by_majority__value_kept),
        cmocka_unit_test(
            test_partition__majority_goes_on__minority_learns_and_rejoins),
        cmocka_unit_test(test_partition__even_split__nobody_installs),
        cmocka_unit_test(test_commit_lost__asked_or_timed_out__installed),
        cmocka_unit_test(test_join__forwarded_to_lowest__enters_next_epoch),
        cmocka_unit_test(
            test_random__loss_dup_crashes__one_value_per_epoch_and_termination),
    };
    if (argc == 2)
        cmocka_set_test_filter(argv[1]);
    return cmocka_run_group_tests_name("membership", tests, NULL, NULL);
}
