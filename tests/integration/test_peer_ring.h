/*
 * Ring algorithms under the peer API, wherever the tensors live: three
 * rumor_peer nodes in three threads on loopback with CURVE, their float32
 * tensors in the memory a struct tpr_mem gives (host memory; the
 * reference device of gossip/backend.h, host memory the peer reaches only
 * through the backend table, as it does CUDA memory; CUDA memory). The
 * caller's values go in and come out through the mem's copies each step,
 * as a training loop's would, and every step's inputs and outputs are
 * recorded for the checks:
 *   - tpr_gradients: PowerSGD (rank 1, a 24 x 16 matrix it compresses and
 *     a vector it all-reduces) on fresh values each step;
 *   - tpr_rejoin: an exact all-reduce of the model (exchange=model) with
 *     an elastic view change: node 2 stalls before step TPR_STALL_AT until
 *     the other two made two steps without it (the ring removed it), then
 *     calls again: it is taken back in with a member's held model (the
 *     STATE a view change carries) and runs the step it enters from it.
 * Either with each tensor a bucket of its own (buckets = true), as
 * rumor.torch's overlap cuts a gradient exchange.
 * Every wait has a deadline; the threads are joined and the topology
 * directory removed by the caller (tpc_free).
 */
#ifndef RUMOR_TESTS_PEER_RING_H
#define RUMOR_TESTS_PEER_RING_H

#include "node/runtime_impl.h"
#include "tests/integration/test_peer_cluster.h"

#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TPR_NODES    3
#define TPR_ROWS     24
#define TPR_COLS     16
#define TPR_VEC      10
#define TPR_N        (TPR_ROWS * TPR_COLS + TPR_VEC)
#define TPR_STALL_AT 2
#define TPR_TAIL     3 /* steps of all three after the rejoin */
/* The others' steps while node 2 waits to be taken back: paced by their
 * "training" (TPR_PACE_MS each), so a rejoin that takes a few deadlines
 * fits; only a broken build reaches the end. */
#define TPR_STEPS_MAX 1500
#define TPR_PACE_MS   10
#define TPR_WAIT_MS   60000

/* Where the tensors live and how the caller copies its values in and out
 * (0 on success). */
struct tpr_mem {
    const char *name;
    rumor_device device;               /* what the peer is told */
    const struct gossip_backend_i *be; /* node_peer_new_in's */
    void *(*alloc)(const struct tpr_mem *m, size_t bytes);
    void (*release)(const struct tpr_mem *m, void *p);
    int (*put)(const struct tpr_mem *m, void *dev, const float *x, size_t n);
    int (*get)(const struct tpr_mem *m, float *x, const void *dev, size_t n);
    void *ctx;
};

struct tpr_run {
    struct tpc c;
    const struct tpr_mem *mem;
    struct rumor_node_opts o[TPR_NODES];
    bool rejoin;
    bool buckets; /* each tensor an exchange of its own (rumor.torch's) */
    /* per node and step (the step the result is of): what went in, what
     * came out, and whether the node took part */
    float *in[TPR_NODES], *out[TPR_NODES];
    bool *has[TPR_NODES];
    _Atomic uint64_t done[TPR_NODES]; /* steps made */
    atomic_bool calling;              /* node 2 calls again */
    _Atomic int64_t back_at;          /* the step node 2 rejoined at; -1 */
    int64_t joined_at;                /* rumor_peer_joined said so there */
    uint64_t steps[TPR_NODES];
    uint64_t h2d[TPR_NODES], d2h[TPR_NODES];
    rumor_err rc[TPR_NODES];
    char msg[TPR_NODES][RUMOR_DIAG_TEXT_BYTES];
};

struct tpr_arg {
    struct tpr_run *run;
    uint32_t id;
};

/* Host memory as a tpr_mem's: plain host tensors, and the reference
 * device's (host memory the peer reaches through its backend table). */
static inline void *
tpr_host_alloc(const struct tpr_mem *m, size_t bytes)
{
    (void)m;
    return calloc(1, bytes);
}

static inline void
tpr_host_release(const struct tpr_mem *m, void *p)
{
    (void)m;
    free(p);
}

static inline int
tpr_host_put(const struct tpr_mem *m, void *dev, const float *x, size_t n)
{
    (void)m;
    memcpy(dev, x, n * sizeof *x);
    return 0;
}

static inline int
tpr_host_get(const struct tpr_mem *m, float *x, const void *dev, size_t n)
{
    (void)m;
    memcpy(x, dev, n * sizeof *x);
    return 0;
}

#define TPR_HOST_MEM(name, be)                                        \
    {                                                                 \
        name, RUMOR_DEVICE_CPU, be, tpr_host_alloc, tpr_host_release, \
            tpr_host_put, tpr_host_get, NULL                          \
    }

static inline float *
tpr_at(float *rows, uint64_t step)
{
    return rows + step * TPR_N;
}

/* A value in [-1, 1) of node i, step s, element k (a hash: the nodes'
 * gradients differ and are not low-rank). */
static inline float
tpr_noise(uint32_t i, uint64_t s, size_t k)
{
    uint64_t z = (uint64_t)i * 0x9e3779b97f4a7c15ull ^
                 s * 0xbf58476d1ce4e5b9ull ^
                 (uint64_t)k * 0x94d049bb133111ebull;
    z ^= z >> 31;
    z *= 0xd6e9e3e8f2b7c4a5ull;
    z ^= z >> 29;
    return (float)(z >> 40) * 0x1p-23f - 1.0f;
}

/* The caller's values before step s: fresh gradients, or (rejoin) its
 * model after the last step plus a step of its own training (a node's
 * own amount, so the nodes' models differ before every exchange). */
static inline void
tpr_input(const struct tpr_run *run,
          uint32_t i,
          uint64_t s,
          const float *last,
          float *x)
{
    for (size_t k = 0; k < TPR_N; k++)
        x[k] = run->rejoin ? last[k] + 16.0f * (float)(i + 1) + (float)(k % 3)
                           : tpr_noise(i, s, k);
}

/* Polls until *v >= want or the deadline passes; false then. */
static inline bool
tpr_until(const _Atomic uint64_t *v, uint64_t want)
{
    uint64_t end = t_deadline(TPR_WAIT_MS);
    while (atomic_load(v) < want && rumor_clock_ns() < end)
        t_pause_1ms();
    return atomic_load(v) >= want;
}

/* Node 2 stalls at TPR_STALL_AT until the others made two steps without
 * it; they wait there for its call, then pace their steps until it is
 * back. False when a wait ran out. */
static inline bool
tpr_stall(struct tpr_run *run, uint32_t i, uint64_t s)
{
    bool ok = true;
    if (!run->rejoin)
        return true;
    if (i == 2 && s == TPR_STALL_AT) {
        ok = tpr_until(&run->done[0], TPR_STALL_AT + 2) &&
             tpr_until(&run->done[1], TPR_STALL_AT + 2);
        atomic_store(&run->calling, true);
    } else if (i < 2 && s == TPR_STALL_AT + 2) {
        uint64_t end = t_deadline(TPR_WAIT_MS);
        while (!atomic_load(&run->calling) && rumor_clock_ns() < end)
            t_pause_1ms();
        ok = atomic_load(&run->calling);
    } else if (i < 2 && s > TPR_STALL_AT + 2 &&
               atomic_load(&run->back_at) < 0) {
        struct timespec ts = {0, TPR_PACE_MS * 1000000l};
        nanosleep(&ts, NULL);
    }
    return ok;
}

/* Whether node i goes on after s steps. */
static inline bool
tpr_more(const struct tpr_run *run, uint32_t i, uint64_t s)
{
    if (s >= TPR_STEPS_MAX)
        return false;
    if (!run->rejoin)
        return s < 6;
    int64_t back = atomic_load(&run->back_at);
    if (i == 2 || back >= 0)
        return back < 0 || s < (uint64_t)back + 1 + TPR_TAIL;
    return true;
}

/* One step of node i: its values in, the exchange, the result out. */
static inline rumor_err
tpr_step(struct tpr_run *run,
         rumor_peer *peer,
         uint32_t i,
         void *dev,
         float *x,
         uint64_t *s,
         struct rumor_diag *diag)
{
    const struct tpr_mem *m = run->mem;
    float *last = *s > 0 ? tpr_at(run->out[i], *s - 1) : NULL;
    float *start = x + TPR_N; /* the node's own model before step 0 */
    tpr_input(run, i, *s, last != NULL ? last : start, x);
    if (m->put(m, dev, x, TPR_N) != 0)
        return RUMOR_EBACKEND;
    rumor_err rc = rumor_peer_gossip(peer, diag);
    struct rumor_peer_stats st;
    rumor_peer_stats(peer, &st);
    uint64_t t = st.steps - 1; /* the step whose result came */
    if (rc == RUMOR_OK && (st.steps <= *s || t >= TPR_STEPS_MAX))
        rc = RUMOR_EPROTO;
    if (rc != RUMOR_OK)
        return rc;
    memcpy(tpr_at(run->in[i], t), x, TPR_N * sizeof *x);
    if (m->get(m, tpr_at(run->out[i], t), dev, TPR_N) != 0)
        return RUMOR_EBACKEND;
    run->has[i][t] = true;
    const uint8_t *state = NULL;
    size_t len = 0;
    if (rumor_peer_joined(peer, &state, &len))
        run->joined_at = (int64_t)t;
    if (i == 2 && t > *s)
        atomic_store(&run->back_at, (int64_t)t);
    *s = st.steps;
    atomic_store(&run->done[i], *s);
    return RUMOR_OK;
}

static inline void *
tpr_node(void *p)
{
    struct tpr_arg *a = p;
    struct tpr_run *run = a->run;
    const struct tpr_mem *m = run->mem;
    uint32_t i = a->id;
    struct rumor_diag diag = {0};
    float *x = calloc(2 * TPR_N, sizeof *x);
    void *dev = m->alloc(m, TPR_N * sizeof(float));
    rumor_peer *peer = NULL;
    rumor_err rc = x != NULL && dev != NULL ? RUMOR_OK : RUMOR_ENOMEM;
    for (size_t k = 0; x != NULL && k < TPR_N; k++)
        x[TPR_N + k] = (float)(1000 * i + k);
    if (rc == RUMOR_OK && m->put(m, dev, x + TPR_N, TPR_N) != 0)
        rc = RUMOR_EBACKEND;
    struct rumor_peer_tensor ts[2] = {
        {dev, RUMOR_DTYPE_F32, m->device, 2, {TPR_ROWS, TPR_COLS}},
        {(float *)dev + TPR_ROWS * TPR_COLS,
         RUMOR_DTYPE_F32,
         m->device,
         1,
         {TPR_VEC}},
    };
    if (rc == RUMOR_OK)
        rc = node_peer_new_in(&run->o[i], ts, 2, m->be, &peer, &diag);
    const struct rumor_peer_bucket each[2] = {{0, 1}, {1, 1}};
    if (rc == RUMOR_OK && run->buckets)
        rc = rumor_peer_buckets_set(peer, each, 2, &diag);
    uint64_t s = 0;
    while (rc == RUMOR_OK && tpr_more(run, i, s)) {
        rc = tpr_stall(run, i, s) ? RUMOR_OK : RUMOR_ETIMEDOUT;
        if (rc == RUMOR_OK)
            rc = tpr_step(run, peer, i, dev, x, &s, &diag);
    }
    struct rumor_peer_stats st = {0};
    if (peer != NULL)
        rumor_peer_stats(peer, &st);
    run->steps[i] = st.steps;
    run->h2d[i] = st.pcie_h2d_bytes;
    run->d2h[i] = st.pcie_d2h_bytes;
    run->rc[i] = rc;
    snprintf(run->msg[i], sizeof run->msg[i], "%s", diag.msg);
    rumor_peer_destroy(&peer);
    if (dev != NULL)
        m->release(m, dev);
    free(x);
    return NULL;
}

/* The run's options (extra: NAME, VALUE pairs, NULL-terminated) and
 * records. */
static inline void
tpr_setup(struct tpr_run *run,
          const struct tpr_mem *m,
          const char *const *extra,
          bool rejoin)
{
    memset(run, 0, sizeof *run);
    tpc_setup(&run->c, "ring:3");
    run->mem = m;
    run->rejoin = rejoin;
    atomic_init(&run->back_at, -1);
    run->joined_at = -1;
    for (uint32_t i = 0; i < TPR_NODES; i++) {
        tpc_opts(&run->c, i, extra, &run->o[i]);
        run->in[i] = calloc((size_t)TPR_STEPS_MAX * TPR_N, sizeof(float));
        run->out[i] = calloc((size_t)TPR_STEPS_MAX * TPR_N, sizeof(float));
        run->has[i] = calloc(TPR_STEPS_MAX, sizeof(bool));
        assert_true(run->in[i] && run->out[i] && run->has[i]);
    }
}

static inline void
tpr_free(struct tpr_run *run)
{
    for (uint32_t i = 0; i < TPR_NODES; i++) {
        free(run->in[i]);
        free(run->out[i]);
        free(run->has[i]);
    }
    tpc_free(&run->c);
}

/* Runs the three nodes; every one must end well, at the same step. */
static inline void
tpr_go(struct tpr_run *run)
{
    pthread_t th[TPR_NODES];
    struct tpr_arg a[TPR_NODES];
    for (uint32_t i = 0; i < TPR_NODES; i++) {
        a[i] = (struct tpr_arg){run, i};
        assert_int_equal(pthread_create(&th[i], NULL, tpr_node, &a[i]), 0);
    }
    for (uint32_t i = 0; i < TPR_NODES; i++)
        pthread_join(th[i], NULL);
    for (uint32_t i = 0; i < TPR_NODES; i++)
        if (run->rc[i] != RUMOR_OK)
            fail_msg("%s: node %u: %s: %s",
                     run->mem->name,
                     i,
                     rumor_strerror(run->rc[i]),
                     run->msg[i]);
    assert_int_equal(run->steps[1], run->steps[0]);
    assert_int_equal(run->steps[2], run->steps[0]);
}

/* Every participant of every step holds the same bits, the result of
 * step t on node 0. */
static inline void
tpr_check_same(const struct tpr_run *run)
{
    for (uint64_t t = 0; t < run->steps[0]; t++)
        for (uint32_t i = 0; i < TPR_NODES; i++) {
            if (!run->has[i][t])
                continue;
            if (memcmp(tpr_at(run->out[i], t),
                       tpr_at(run->out[0], t),
                       TPR_N * sizeof(float)) != 0)
                fail_msg("%s: step %llu: node %u's result is not node 0's",
                         run->mem->name,
                         (unsigned long long)t + 1,
                         i);
        }
}

/* The rejoin run: nodes 0 and 1 made every step, node 2 the ones before
 * its stall and from its return on; each result is the mean of the
 * participants' inputs, where node 2's at its return is the ring's
 * result of the step before (the member's held model it took), not its
 * own stale model. Within tol (relative) of the exact mean: float
 * rounding of the ring's sums for an exact algorithm. */
static inline void
tpr_check_rejoin_within(const struct tpr_run *run, double tol)
{
    int64_t back = atomic_load(&run->back_at);
    assert_true(back >= TPR_STALL_AT + 2);
    assert_int_equal(run->joined_at, back);
    for (uint64_t t = 0; t < run->steps[0]; t++) {
        assert_true(run->has[0][t] && run->has[1][t]);
        bool two = t >= TPR_STALL_AT && t < (uint64_t)back;
        assert_int_equal(run->has[2][t], !two);
        const float *x2 = (int64_t)t == back ? tpr_at(run->out[0], t - 1)
                                             : tpr_at(run->in[2], t);
        for (size_t k = 0; k < TPR_N; k++) {
            double want = (double)tpr_at(run->in[0], t)[k] +
                          (double)tpr_at(run->in[1], t)[k];
            want = two ? want / 2 : (want + (double)x2[k]) / 3;
            double got = tpr_at(run->out[0], t)[k];
            if (fabs(got - want) > tol * (1 + fabs(want)))
                fail_msg("%s: step %llu, element %zu: %.9g, not the mean "
                         "%.9g of the %s",
                         run->mem->name,
                         (unsigned long long)t + 1,
                         k,
                         got,
                         want,
                         two ? "two" : "three");
        }
    }
}

static inline void
tpr_check_rejoin(const struct tpr_run *run)
{
    tpr_check_rejoin_within(run, 1e-5);
}

#endif
