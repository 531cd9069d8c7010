/*
 * Stale exchanges under the peer API (rumor_peer with opts.gossip.stale,
 * node/peer.c over node/stale.c): four peers, one thread each, over
 * loopback CURVE links, run DiLoCo (localsgd, period 4, outer_lr 0.7,
 * outer_momentum 0.9) with stale 2, the caller's "inner steps" a fixed
 * function of node and step.
 *   - The tensors end bit for bit where a plain recurrence of docs/
 *     gossip.md's definition puts them: the synchronization of step t
 *     runs on a snapshot s_t and lands at the gossip() of step t + 2 as
 *     x += G_t - s_t (the last one at rumor_peer_flush); G_t is the ring
 *     all-reduce's mean (gossip/ring.c's summation order) and the outer
 *     Nesterov step (gossip/localsgd.c).
 *   - 40 ms of link delay changes no bit, and gossip() returns with the
 *     synchronization still in flight (it does not wait for the network);
 *     a state save is refused while one is in flight and works once it
 *     landed.
 *   - Streaming DiLoCo with fp4 deltas from the nodes' different starts:
 *     each fragment's first sync is discarded, the nodes still agree.
 *   - What cannot run stale under the peer API is refused with the
 *     reason.
 */
#include "rumor/node.h"

#include "tests/cmocka_compat.h"
#include "tests/integration/test_peer_cluster.h"

#include <math.h>
#include <pthread.h>

#define NODES  4
#define ROWS   3
#define COLS   4
#define BIAS   3
#define NUMEL  (ROWS * COLS + BIAS)
#define STEPS  14 /* syncs at 0, 4, 8, 12: the last lands at the flush */
#define PERIOD 4
#define STALE  2

struct run {
    struct tpc c;
    const char *delay_ms;
    /* streaming with fp4 deltas (2 fragments) and no inner steps: the
     * nodes' different starts alone */
    bool apart;
    float after5[NUMEL]; /* node 0's tensors after the gossip() of step 5 */
    float x[NODES][NUMEL];
    rumor_err rc[NODES];
    char msg[NODES][RUMOR_DIAG_TEXT_BYTES];
    bool in_flight_after_sync; /* node 0, right after gossip() of step 0 */
    rumor_err save_in_flight, save_landed; /* node 0's state saves */
    pthread_barrier_t done;
};

struct node_arg {
    struct run *run;
    uint32_t id;
};

static void
s_initial_model(float *x, size_t node)
{
    for (size_t e = 0; e < NUMEL; e++)
        x[e] = (float)sin(0.7 * (double)e + 1.3 * (double)node);
}

/* The caller's inner step t of node `node`: the same in the peers'
 * threads and in the reference. */
static void
s_inner(float *x, size_t node, uint64_t t)
{
    for (size_t e = 0; e < NUMEL; e++)
        x[e] += 0.05f * (float)cos(0.3 * (double)(t + e) + (double)node);
}

static void
s_opts(const struct run *run,
       uint32_t id,
       const char *stale,
       struct rumor_node_opts *o)
{
    const char *extra[] = {"algo",
                           "localsgd",
                           "period",
                           "4",
                           "outer-lr",
                           "0.7",
                           "outer-momentum",
                           "0.9",
                           "stale",
                           stale,
                           "log-level",
                           "warn",
                           "delay-ms",
                           run->delay_ms,
                           run->apart ? "fragments" : NULL,
                           "2",
                           "delta-codec",
                           "fp4",
                           NULL};
    tpc_opts(&run->c, id, extra, o);
}

static rumor_err
s_peer_new(struct run *run, uint32_t id, rumor_peer **out, struct rumor_diag *d)
{
    struct rumor_node_opts o;
    s_opts(run, id, "2", &o);
    float *x = run->x[id];
    struct rumor_peer_tensor t[2] = {
        tpc_tensor(x, 2, (const size_t[]){ROWS, COLS}),
        tpc_tensor(x + ROWS * COLS, 1, (const size_t[]){BIAS})};
    return rumor_peer_new(&o, t, 2, out, d);
}

/* Node 0 also looks at the peer between steps: in flight after the
 * sync's gossip(), its state refused then and saved once it landed. */
static void
s_observe(struct run *run, uint32_t id, const rumor_peer *peer, uint64_t t)
{
    if (id != 0)
        return;
    rumor_buf buf;
    rumor_buf_init(&buf, 1u << 20);
    if (t == 0) {
        run->in_flight_after_sync = rumor_peer_in_flight(peer);
        run->save_in_flight = rumor_peer_state_save(peer, &buf);
    } else if (t == STALE) {
        run->save_landed = rumor_peer_state_save(peer, &buf);
    }
    rumor_buf_free(&buf);
}

static void *
s_node(void *p)
{
    struct node_arg *a = p;
    struct run *run = a->run;
    struct rumor_diag diag = {0};
    rumor_peer *peer = NULL;
    rumor_err rc = s_peer_new(run, a->id, &peer, &diag);
    for (uint64_t t = 0; t < STEPS && rc == RUMOR_OK; t++) {
        if (!run->apart)
            s_inner(run->x[a->id], a->id, t);
        rc = rumor_peer_gossip(peer, &diag);
        if (rc == RUMOR_OK && !run->apart)
            s_observe(run, a->id, peer, t);
        if (rc == RUMOR_OK && run->apart && a->id == 0 && t == 5)
            memcpy(run->after5, run->x[0], sizeof run->after5);
    }
    if (rc == RUMOR_OK)
        rc = rumor_peer_flush(peer, &diag);
    if (rc == RUMOR_OK && rumor_peer_in_flight(peer))
        rc = RUMOR_EPROTO;
    run->rc[a->id] = rc;
    snprintf(run->msg[a->id], sizeof run->msg[a->id], "%s", diag.msg);
    /* the links stay up until every node has its last messages */
    pthread_barrier_wait(&run->done);
    rumor_peer_destroy(&peer);
    return NULL;
}

static void
s_run(struct run *run, const char *delay_ms, bool apart)
{
    memset(run, 0, sizeof *run);
    tpc_setup(&run->c, "ring:4");
    run->delay_ms = delay_ms;
    run->apart = apart;
    for (size_t i = 0; i < NODES; i++)
        s_initial_model(run->x[i], i);
    pthread_barrier_init(&run->done, NULL, NODES);
    pthread_t th[NODES];
    struct node_arg args[NODES];
    for (uint32_t i = 0; i < NODES; i++) {
        args[i] = (struct node_arg){run, i};
        assert_int_equal(pthread_create(&th[i], NULL, s_node, &args[i]), 0);
    }
    for (size_t i = 0; i < NODES; i++)
        pthread_join(th[i], NULL);
    pthread_barrier_destroy(&run->done);
    tpc_free(&run->c);
    for (size_t i = 0; i < NODES; i++)
        if (run->rc[i] != RUMOR_OK)
            fail_msg("node %zu: %s: %s",
                     i,
                     rumor_strerror(run->rc[i]),
                     run->msg[i]);
}

/* --- the reference --------------------------------------------------- */

struct ref {
    float x[NODES][NUMEL];
    float anchor[NUMEL], velocity[NUMEL];
    bool have_anchor;
    float snap[NODES][NUMEL], result[NODES][NUMEL];
    bool pending;
    uint64_t pending_t;
};

/* The ring all-reduce's mean: chunk c is summed from node c on, each node
 * adding its own to what it received, then divided by n. */
static void
s_ring_mean(float s[NODES][NUMEL], float *mean)
{
    for (size_t c = 0; c < NODES; c++)
        for (size_t e = c * NUMEL / NODES; e < (c + 1) * NUMEL / NODES; e++) {
            float sum = s[c][e];
            for (size_t k = 1; k < NODES; k++)
                sum = s[(c + k) % NODES][e] + sum;
            mean[e] = sum / (float)NODES;
        }
}

/* G of the snapshots: the mean, and from the second sync on DiLoCo's
 * outer step from the anchor; every node gets the same. */
static void
s_ref_sync(struct ref *r)
{
    float mean[NUMEL], g[NUMEL];
    float lr = (float)0.7, mu = (float)0.9;
    s_ring_mean(r->snap, mean);
    for (size_t e = 0; e < NUMEL; e++) {
        if (!r->have_anchor) {
            g[e] = mean[e];
        } else {
            float d = r->anchor[e] - mean[e];
            r->velocity[e] = mu * r->velocity[e] + d;
            g[e] = r->anchor[e] - lr * (d + mu * r->velocity[e]);
        }
        r->anchor[e] = g[e];
    }
    r->have_anchor = true;
    for (size_t i = 0; i < NODES; i++)
        memcpy(r->result[i], g, sizeof g);
}

static void
s_ref_land(struct ref *r)
{
    for (size_t i = 0; i < NODES; i++)
        for (size_t e = 0; e < NUMEL; e++) {
            float d = r->result[i][e] - r->snap[i][e];
            r->x[i][e] += d;
        }
    r->pending = false;
}

/* The run with the synchronization of step t landing at t + stale
 * (stale <= PERIOD: at most one in flight). */
static void
s_reference(float out[NODES][NUMEL], uint64_t stale)
{
    struct ref r;
    memset(&r, 0, sizeof r);
    for (size_t i = 0; i < NODES; i++)
        s_initial_model(r.x[i], i);
    for (uint64_t t = 0; t < STEPS; t++) {
        for (size_t i = 0; i < NODES; i++)
            s_inner(r.x[i], i, t);
        if (r.pending && r.pending_t + stale <= t)
            s_ref_land(&r);
        if (t % PERIOD == 0) {
            memcpy(r.snap, r.x, sizeof r.x);
            s_ref_sync(&r);
            r.pending = true;
            r.pending_t = t;
        }
    }
    if (r.pending)
        s_ref_land(&r);
    memcpy(out, r.x, sizeof r.x);
}

static void
s_check_reference(const struct run *run)
{
    static float want[NODES][NUMEL], other[NODES][NUMEL];
    s_reference(want, STALE);
    s_reference(other, 1);
    /* the landing step shows in the numbers: the test can fail */
    assert_true(memcmp(want, other, sizeof want) != 0);
    for (size_t i = 0; i < NODES; i++)
        for (size_t e = 0; e < NUMEL; e++)
            if (memcmp(&run->x[i][e], &want[i][e], sizeof(float)) != 0)
                fail_msg("node %zu element %zu: %.9g, the reference %.9g",
                         i,
                         e,
                         (double)run->x[i][e],
                         (double)want[i][e]);
}

static void
test_peer_ring4_diloco_stale2__equals_reference_recurrence(void **state)
{
    (void)state;
    static struct run run;
    s_run(&run, "0", false);
    s_check_reference(&run);
}

static void
test_peer_ring4_diloco_stale2__delay_40ms__same_bits_and_no_wait(void **state)
{
    (void)state;
    static struct run fast, slow;
    s_run(&fast, "0", false);
    s_run(&slow, "40", false);
    assert_memory_equal(fast.x, slow.x, sizeof fast.x);
    s_check_reference(&slow);
    /* 40 ms per message: gossip() returned before the all-reduce could */
    assert_true(slow.in_flight_after_sync);
    assert_int_equal(slow.save_in_flight, RUMOR_EINVAL);
    assert_int_equal(slow.save_landed, RUMOR_OK);
}

/* Streaming DiLoCo with fp4 deltas (2 fragments, stale 2) from the
 * nodes' different starts, without inner steps: the first sync of each
 * fragment (steps 0 and 2, landing at 2 and 4) is discarded on every
 * node (the tensors after step 5 are the start's bits), the next ones
 * are exact, and the nodes end with the same bits, at the mean of their
 * starts. */
static void
test_peer_ring4_streaming_fp4_apart__first_syncs_discarded_then_agree(
    void **state)
{
    (void)state;
    static struct run run;
    s_run(&run, "0", true);
    float start[NUMEL];
    s_initial_model(start, 0);
    assert_memory_equal(run.after5, start, sizeof start);
    for (size_t e = 0; e < NUMEL; e++) {
        double mean = 0;
        for (size_t i = 0; i < NODES; i++) {
            float x[NUMEL];
            s_initial_model(x, i);
            mean += x[e] / (double)NODES;
            assert_memory_equal(&run.x[i][e], &run.x[0][e], sizeof(float));
        }
        assert_float_equal(run.x[0][e], mean, 1e-6);
    }
}

/* rumor_peer_new refuses opts (NAME, VALUE pairs after localsgd's) with
 * a message holding `want`. */
static void
s_check_new_refused(const char *const *extra, const char *want)
{
    struct tpc c;
    tpc_setup(&c, "ring:4");
    const char *args[16] = {"algo", "localsgd", "log-level", "error"};
    size_t n = 4;
    for (size_t k = 0; extra[k] != NULL && n < 15; k++)
        args[n++] = extra[k];
    args[n] = NULL;
    struct rumor_node_opts o;
    tpc_opts(&c, 0, args, &o);
    float x[NUMEL] = {0};
    struct rumor_peer_tensor t = tpc_tensor(x, 1, (const size_t[]){NUMEL});
    struct rumor_diag diag = {0};
    rumor_peer *peer = NULL;
    assert_int_equal(rumor_peer_new(&o, &t, 1, &peer, &diag), RUMOR_EINVAL);
    assert_null(peer);
    if (strstr(diag.msg, want) == NULL)
        fail_msg("refusal without \"%s\": %s", want, diag.msg);
    tpc_free(&c);
}

static void
test_peer_stale__unsupported__refused_with_reason(void **state)
{
    (void)state;
    s_check_new_refused((const char *[]){"stale", "5", "period", "4", NULL},
                        "stale (5) must be at most period (4)");
    s_check_new_refused((const char *[]){"stale", "1", "join", "true", NULL},
                        "join: a joiner takes a neighbour's model");
    s_check_new_refused((const char *[]){"stale",
                                         "1",
                                         "delta-codec",
                                         "qsgd:bits=4",
                                         "ef-alpha",
                                         "0.5",
                                         NULL},
                        "stale needs ef_alpha 0");
    s_check_new_refused(
        (const char *[]){"algo", "powersgd", "stale", "1", NULL},
        "--stale needs the model exchange");
}

/* A built peer (no step run) refuses buckets and average(). */
static void
test_peer_stale__buckets_and_average__refused_with_reason(void **state)
{
    (void)state;
    struct tpc c;
    tpc_setup(&c, "ring:4");
    struct rumor_node_opts o;
    tpc_opts(&c,
             0,
             (const char *[]){"algo", "localsgd", "stale", "1", NULL},
             &o);
    float x[NUMEL] = {0};
    struct rumor_peer_tensor t = tpc_tensor(x, 1, (const size_t[]){NUMEL});
    struct rumor_diag diag = {0};
    rumor_peer *peer = NULL;
    assert_int_equal(rumor_peer_new(&o, &t, 1, &peer, &diag), RUMOR_OK);
    assert_int_equal(rumor_peer_stale(peer), 1);
    struct rumor_peer_bucket b = {0, 1};
    assert_int_equal(rumor_peer_buckets_set(peer, &b, 1, &diag), RUMOR_EINVAL);
    assert_non_null(strstr(diag.msg, "stale exchanges run whole"));
    memset(&diag, 0, sizeof diag);
    assert_int_equal(rumor_peer_average(peer, &diag), RUMOR_EINVAL);
    assert_non_null(strstr(diag.msg, "average() with stale 1"));
    /* nothing in flight: flush does nothing */
    assert_false(rumor_peer_in_flight(peer));
    assert_int_equal(rumor_peer_flush(peer, &diag), RUMOR_OK);
    rumor_peer_destroy(&peer);
    tpc_free(&c);
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(
            test_peer_ring4_diloco_stale2__equals_reference_recurrence),
        cmocka_unit_test(
            test_peer_ring4_diloco_stale2__delay_40ms__same_bits_and_no_wait),
        cmocka_unit_test(
            test_peer_ring4_streaming_fp4_apart__first_syncs_discarded_then_agree),
        cmocka_unit_test(test_peer_stale__unsupported__refused_with_reason),
        cmocka_unit_test(
            test_peer_stale__buckets_and_average__refused_with_reason),
    };
    return cmocka_run_group_tests_name("peer_stale", tests, NULL, NULL);
}
