/*
 * The peer's direct path for ring algorithms without a GPU
 * (tests/integration/test_peer_ring.h): the tensors on the reference
 * device of gossip/backend.h (host memory that the peer and its
 * algorithms reach only through the backend table, copies counted as
 * PCIe bytes), against the same runs on plain host tensors.
 *   - PowerSGD: every step's result bit-equal to the host run's on every
 *     node, and the peer stages nothing: what crosses is the payload's part
 *     that lives in model memory, the uncompressed vector each way per step
 *     (the compressor's factors are the CPU lowrank backend's on this
 *     device; on CUDA its own counters add them);
 *   - an elastic view change on device tensors: node 2 removed and taken
 *     back with a member's held model, which crosses to the host for the
 *     STATE and back onto the joiner's device; the results are the means
 *     of the participants' inputs, the joiner's input the ring's model;
 *   - a D-PSGD peer on device tensors killed (its peer destroyed) and
 *     restarted with join (its tensors set to 1e6) or resume (its own
 *     model): back on the ring's model from its first step, the same bits
 *     as on host tensors; the join's model went up onto the device.
 */
#include "gossip/backend.h"
#include "tests/cmocka_compat.h"
#include "tests/integration/test_peer_ring.h"

#include <stdio.h>
#include <string.h>
#include <unistd.h>

static const struct tpr_mem t_host = TPR_HOST_MEM("host", NULL);
static const struct tpr_mem t_ref = TPR_HOST_MEM("ref", &gossip_backend_ref);

static const char *const t_psgd[] =
    {"algo", "powersgd", "rank", "1", "log-level", "warn", NULL};

/* A run whose peers did every access of their device with Rumor's own
 * CUDA stream on (core/cuda_stream.h), the stale exchanges' thread and
 * the elastic ring's copies included: on a GPU, none of it on the legacy
 * stream, unordered against the rest. */
static void
t_go(struct tpr_run *run)
{
    uint64_t unordered = gossip_ref_unordered();
    tpr_go(run);
    assert_int_equal(gossip_ref_unordered() - unordered, 0);
}

/* Node i ran the same steps on the reference device as on host tensors,
 * each one's result bit for bit. */
static void
t_same_steps(const struct tpr_run *ref, const struct tpr_run *host, uint32_t i)
{
    assert_int_equal(ref->steps[i], host->steps[i]);
    for (uint64_t t = 0; t < ref->steps[i]; t++)
        if (memcmp(tpr_at(ref->out[i], t),
                   tpr_at(host->out[i], t),
                   TPR_N * sizeof(float)) != 0)
            fail_msg("node %u, step %llu: the reference device's result is "
                     "not the host's",
                     i,
                     (unsigned long long)t + 1);
}

static void
t_powersgd(bool buckets)
{
    struct tpr_run *host = malloc(sizeof *host), *ref = malloc(sizeof *ref);
    assert_true(host != NULL && ref != NULL);
    tpr_setup(host, &t_host, t_psgd, false);
    host->buckets = buckets;
    t_go(host);
    tpr_setup(ref, &t_ref, t_psgd, false);
    ref->buckets = buckets;
    t_go(ref);
    tpr_check_same(host);
    tpr_check_same(ref);
    for (uint32_t i = 0; i < TPR_NODES; i++) {
        t_same_steps(ref, host, i);
        /* host tensors: nothing crosses */
        assert_int_equal(host->h2d[i] + host->d2h[i], 0);
        uint64_t model = TPR_N * sizeof(float), steps = ref->steps[i];
        print_message("node %u: %llu bytes up, %llu down in %llu steps "
                      "(model %llu bytes)\n",
                      i,
                      (unsigned long long)ref->h2d[i],
                      (unsigned long long)ref->d2h[i],
                      (unsigned long long)steps,
                      (unsigned long long)model);
        assert_int_equal(ref->h2d[i], steps * TPR_VEC * sizeof(float));
        assert_int_equal(ref->d2h[i], steps * TPR_VEC * sizeof(float));
    }
    tpr_free(host);
    tpr_free(ref);
    free(host);
    free(ref);
}

static void
test_peer_ref__powersgd__bit_equal_to_host_payloads_up(void **state)
{
    (void)state;
    t_powersgd(false);
}

static void
test_peer_ref__powersgd_buckets__bit_equal_to_host_payloads_up(void **state)
{
    (void)state;
    t_powersgd(true);
}

static const char *const t_model[] = {"algo",
                                      "allreduce",
                                      "exchange",
                                      "model",
                                      "deadline-ms",
                                      "1000",
                                      "log-level",
                                      "error",
                                      NULL};

static void
t_rejoin(const struct tpr_mem *m, bool buckets)
{
    struct tpr_run *run = malloc(sizeof *run);
    assert_non_null(run);
    tpr_setup(run, m, t_model, true);
    run->buckets = buckets;
    t_go(run);
    tpr_check_same(run);
    tpr_check_rejoin(run);
    print_message("%s: node 2 back at step %lld of %llu; node 2: %llu bytes "
                  "up, %llu down\n",
                  m->name,
                  (long long)atomic_load(&run->back_at) + 1,
                  (unsigned long long)run->steps[0],
                  (unsigned long long)run->h2d[2],
                  (unsigned long long)run->d2h[2]);
    tpr_free(run);
    free(run);
}

static void
test_peer_ref__view_change__joiner_takes_held_model_host(void **state)
{
    (void)state;
    t_rejoin(&t_host, false);
}

static void
test_peer_ref__view_change__joiner_takes_held_model_ref(void **state)
{
    (void)state;
    t_rejoin(&t_ref, false);
}

static void
test_peer_ref__view_change_buckets__joiner_takes_held_model_ref(void **state)
{
    (void)state;
    t_rejoin(&t_ref, true);
}

/* Payload bytes of one node's step with codec over the run's tensors. */
static uint64_t
t_payload(const char *spec)
{
    rumor_codec *codec = NULL;
    assert_int_equal(rumor_codec_new(spec, &codec, NULL), RUMOR_OK);
    static const size_t sizes[2] = {TPR_ROWS * TPR_COLS, TPR_VEC};
    uint64_t total = 0;
    for (size_t t = 0; t < 2; t++) {
        size_t bytes = 0;
        bool exact = false;
        assert_int_equal(
            rumor_codec_encoded_size(codec, sizes[t], &bytes, &exact),
            RUMOR_OK);
        assert_true(exact);
        total += bytes;
    }
    rumor_codec_destroy(&codec);
    return total;
}

/* The compressed all-reduce with error feedback under the elastic ring,
 * on the reference device: the ring's snapshot of the residuals stays in
 * device memory, so each step moves its payloads only (its own down once;
 * every node's up, its own twice: C(p) is decoded from the bytes sent),
 * not the model-sized residuals. */
static void
test_peer_ref__codec_allreduce__elastic_pcie_is_the_payloads(void **state)
{
    (void)state;
    static const char *const opts[] = {"algo",
                                       "allreduce",
                                       "codec",
                                       "qsgd:bits=4",
                                       "ef",
                                       "ef",
                                       "log-level",
                                       "warn",
                                       NULL};
    struct tpr_run *run = malloc(sizeof *run);
    assert_non_null(run);
    tpr_setup(run, &t_ref, opts, false);
    t_go(run);
    tpr_check_same(run);
    uint64_t p = t_payload("qsgd:bits=4");
    for (uint32_t i = 0; i < TPR_NODES; i++) {
        uint64_t steps = run->steps[i];
        print_message("node %u: %llu bytes up, %llu down in %llu steps "
                      "(payload %llu bytes)\n",
                      i,
                      (unsigned long long)run->h2d[i],
                      (unsigned long long)run->d2h[i],
                      (unsigned long long)steps,
                      (unsigned long long)p);
        assert_int_equal(run->d2h[i], steps * p);
        assert_int_equal(run->h2d[i], steps * (TPR_NODES + 1) * p);
    }
    tpr_free(run);
    free(run);
}

/* Local SGD with exact averaging under the elastic ring, on the reference
 * device: the snapshot of its anchor, outer velocity and look-ahead stays
 * in device memory, so what crosses is each sync's model fragment, once
 * each way (the all-reduce's payload), not three model-sized vectors
 * down per step. */
static void
test_peer_ref__localsgd__elastic_pcie_is_the_payloads(void **state)
{
    (void)state;
    static const char *const opts[] = {"algo",
                                       "localsgd",
                                       "period",
                                       "3",
                                       "outer-lr",
                                       "0.7",
                                       "outer-momentum",
                                       "0.9",
                                       "log-level",
                                       "warn",
                                       NULL};
    struct tpr_run *run = malloc(sizeof *run);
    assert_non_null(run);
    tpr_setup(run, &t_ref, opts, false);
    t_go(run);
    for (uint32_t i = 0; i < TPR_NODES; i++) {
        uint64_t syncs = (run->steps[i] + 2) / 3;
        print_message("node %u: %llu bytes up, %llu down in %llu steps "
                      "(%llu syncs, model %zu bytes)\n",
                      i,
                      (unsigned long long)run->h2d[i],
                      (unsigned long long)run->d2h[i],
                      (unsigned long long)run->steps[i],
                      (unsigned long long)syncs,
                      TPR_N * sizeof(float));
        assert_int_equal(run->h2d[i], syncs * TPR_N * sizeof(float));
        assert_int_equal(run->d2h[i], syncs * TPR_N * sizeof(float));
    }
    tpr_free(run);
    free(run);
}

/* A view change under the compressed all-reduce with error feedback (fp16
 * payloads) on the reference device: the dropped step goes back to the
 * snapshot kept in device memory, the holder's STATE carries the
 * snapshot's bytes, and every step's result is the mean of its
 * participants' inputs within fp16's rounding, the joiner's input the
 * ring's model. */
static void
test_peer_ref__codec_view_change__rollback_from_device_snapshot(void **state)
{
    (void)state;
    static const char *const opts[] = {"algo",
                                       "allreduce",
                                       "codec",
                                       "fp16",
                                       "ef",
                                       "ef",
                                       "exchange",
                                       "model",
                                       "deadline-ms",
                                       "1000",
                                       "log-level",
                                       "error",
                                       NULL};
    struct tpr_run *run = malloc(sizeof *run);
    assert_non_null(run);
    tpr_setup(run, &t_ref, opts, true);
    t_go(run);
    tpr_check_same(run);
    /* fp16 rounds each payload to 2^-11 relative; the memory carries
     * what a step left out into the next */
    tpr_check_rejoin_within(run, 2e-3);
    print_message("ref, fp16 + ef: node 2 back at step %lld of %llu\n",
                  (long long)atomic_load(&run->back_at) + 1,
                  (unsigned long long)run->steps[0]);
    tpr_free(run);
    free(run);
}

/* --- a restarted peer on the device: join and resume ------------------ */

#define TJ_DEAD  3 /* node 2's steps before it dies */
#define TJ_AFTER 3 /* its steps after the restart */

struct tj_run {
    struct tpc c;
    const struct tpr_mem *mem;
    const char *restart; /* "join" or "resume": node 2's second life */
    struct rumor_node_opts o[TPR_NODES], again;
    _Atomic uint64_t done[TPR_NODES];
    atomic_bool back_done; /* node 2's second life over */
    uint64_t past[2];      /* nodes 0 and 1's steps since */
    float out[TPR_NODES][TPR_N];
    float first[TPR_N]; /* node 2's result of its first step back */
    uint64_t h2d, d2h;  /* node 2's second life's copies */
    rumor_err rc[TPR_NODES];
    char msg[TPR_NODES][RUMOR_DIAG_TEXT_BYTES];
};

struct tj_arg {
    struct tj_run *run;
    uint32_t id;
};

/* A peer on dev; its steps until more() says no; the last result in out
 * (and the first in first, when not NULL). */
static rumor_err
tj_life(struct tj_run *run,
        const struct rumor_node_opts *o,
        void *dev,
        uint32_t i,
        bool (*more)(struct tj_run *, uint32_t, uint64_t),
        float *first,
        struct rumor_diag *diag)
{
    const struct tpr_mem *m = run->mem;
    struct rumor_peer_tensor ts[2] = {
        {dev, RUMOR_DTYPE_F32, m->device, 2, {TPR_ROWS, TPR_COLS}},
        {(float *)dev + TPR_ROWS * TPR_COLS,
         RUMOR_DTYPE_F32,
         m->device,
         1,
         {TPR_VEC}},
    };
    rumor_peer *peer = NULL;
    rumor_err rc = node_peer_new_in(o, ts, 2, m->be, &peer, diag);
    uint64_t s = 0;
    while (rc == RUMOR_OK && more(run, i, s)) {
        rc = rumor_peer_gossip(peer, diag);
        s++;
        atomic_fetch_add(&run->done[i], 1);
        if (rc == RUMOR_OK && first != NULL && s == 1 &&
            m->get(m, first, dev, TPR_N) != 0)
            rc = RUMOR_EBACKEND;
    }
    if (rc == RUMOR_OK && m->get(m, run->out[i], dev, TPR_N) != 0)
        rc = RUMOR_EBACKEND;
    struct rumor_peer_stats st = {0};
    if (peer != NULL)
        rumor_peer_stats(peer, &st);
    run->h2d = i == 2 ? st.pcie_h2d_bytes : run->h2d;
    run->d2h = i == 2 ? st.pcie_d2h_bytes : run->d2h;
    rumor_peer_destroy(&peer);
    return rc;
}

/* Nodes 0 and 1 go on until node 2's second life is over, and two steps
 * past it (it may be waiting on their step). */
static bool
tj_more_member(struct tj_run *run, uint32_t i, uint64_t s)
{
    if (atomic_load(&run->back_done))
        run->past[i]++;
    return s < TPR_STEPS_MAX && run->past[i] <= 2;
}

static bool
tj_more_first(struct tj_run *run, uint32_t i, uint64_t s)
{
    (void)run;
    (void)i;
    return s < TJ_DEAD;
}

static bool
tj_more_again(struct tj_run *run, uint32_t i, uint64_t s)
{
    (void)run;
    (void)i;
    return s < TJ_AFTER;
}

/* Node 2 dies after TJ_DEAD steps (its peer destroyed: its links close),
 * waits until the others made 4 steps without it, and comes back with
 * tensors that are not the ring's (join: all 1e6) or its own restored
 * ones (resume: what it had when it died). */
static void *
tj_node(void *p)
{
    struct tj_arg *a = p;
    struct tj_run *run = a->run;
    const struct tpr_mem *m = run->mem;
    uint32_t i = a->id;
    struct rumor_diag diag = {0};
    float *x = calloc(TPR_N, sizeof *x);
    void *dev = m->alloc(m, TPR_N * sizeof(float));
    rumor_err rc = x != NULL && dev != NULL ? RUMOR_OK : RUMOR_ENOMEM;
    for (size_t k = 0; x != NULL && k < TPR_N; k++)
        x[k] = (float)(1000 * i + k);
    if (rc == RUMOR_OK && m->put(m, dev, x, TPR_N) != 0)
        rc = RUMOR_EBACKEND;
    if (rc == RUMOR_OK && i < 2)
        rc = tj_life(run, &run->o[i], dev, i, tj_more_member, NULL, &diag);
    if (rc == RUMOR_OK && i == 2)
        rc = tj_life(run, &run->o[i], dev, i, tj_more_first, NULL, &diag);
    if (rc == RUMOR_OK && i == 2) {
        uint64_t at = atomic_load(&run->done[0]) + 4;
        rc = tpr_until(&run->done[0], at) && tpr_until(&run->done[1], at)
                 ? RUMOR_OK
                 : RUMOR_ETIMEDOUT;
    }
    for (size_t k = 0; x != NULL && k < TPR_N; k++)
        x[k] = strcmp(run->restart, "join") == 0 ? 1e6f : run->out[2][k];
    if (rc == RUMOR_OK && i == 2 && m->put(m, dev, x, TPR_N) != 0)
        rc = RUMOR_EBACKEND;
    if (rc == RUMOR_OK && i == 2)
        rc =
            tj_life(run, &run->again, dev, i, tj_more_again, run->first, &diag);
    if (i == 2)
        atomic_store(&run->back_done, true);
    run->rc[i] = rc;
    snprintf(run->msg[i], sizeof run->msg[i], "%s", diag.msg);
    if (dev != NULL)
        m->release(m, dev);
    free(x);
    return NULL;
}

/* D-PSGD on a ring of 3 mixes all three: after the first step every node
 * holds the same mean, which node 2 must hold again after its restart
 * (join: the neighbour's model, not its 1e6; resume: its own). */
static void
tj_go(struct tj_run *run, const struct tpr_mem *m, const char *restart)
{
    memset(run, 0, sizeof *run);
    tpc_setup(&run->c, "ring:3");
    run->mem = m;
    run->restart = restart;
    const char *extra[] = {"algo",
                           "dpsgd",
                           "deadline-ms",
                           "300",
                           "down-after",
                           "2",
                           "log-level",
                           "warn",
                           NULL};
    for (uint32_t i = 0; i < TPR_NODES; i++)
        tpc_opts(&run->c, i, extra, &run->o[i]);
    run->again = run->o[2];
    if (strcmp(restart, "join") == 0)
        run->again.join = true;
    else
        run->again.resume = true;
    pthread_t th[TPR_NODES];
    struct tj_arg a[TPR_NODES];
    for (uint32_t i = 0; i < TPR_NODES; i++) {
        a[i] = (struct tj_arg){run, i};
        assert_int_equal(pthread_create(&th[i], NULL, tj_node, &a[i]), 0);
    }
    for (uint32_t i = 0; i < TPR_NODES; i++)
        pthread_join(th[i], NULL);
    for (uint32_t i = 0; i < TPR_NODES; i++)
        if (run->rc[i] != RUMOR_OK)
            fail_msg("%s %s: node %u: %s: %s",
                     m->name,
                     restart,
                     i,
                     rumor_strerror(run->rc[i]),
                     run->msg[i]);
    for (size_t k = 0; k < TPR_N; k++) {
        double want = run->out[0][k];
        if (fabs(run->first[k] - want) > 1e-5 * (1 + fabs(want)) ||
            fabs(run->out[2][k] - want) > 1e-5 * (1 + fabs(want)))
            fail_msg("%s %s: element %zu: node 2 has %.9g after its first "
                     "step back and %.9g at its end, the ring %.9g",
                     m->name,
                     restart,
                     k,
                     run->first[k],
                     run->out[2][k],
                     want);
    }
    print_message("%s %s: node 2 back on the ring's model; its second life: "
                  "%llu bytes up, %llu down\n",
                  m->name,
                  restart,
                  (unsigned long long)run->h2d,
                  (unsigned long long)run->d2h);
    tpc_free(&run->c);
}

/* The same restart on host tensors and on the reference device: node 2
 * ends with the same bits; on the device the join's model went up. */
static void
t_restart(const char *restart)
{
    struct tj_run *host = malloc(sizeof *host), *ref = malloc(sizeof *ref);
    assert_true(host != NULL && ref != NULL);
    tj_go(host, &t_host, restart);
    tj_go(ref, &t_ref, restart);
    assert_int_equal(host->h2d + host->d2h, 0);
    if (memcmp(host->out[2], ref->out[2], sizeof host->out[2]) != 0)
        fail_msg("%s: node 2's model on the reference device is not the "
                 "host's",
                 restart);
    if (strcmp(restart, "join") == 0) /* the neighbour's model, up */
        assert_true(ref->h2d >= TPR_N * sizeof(float));
    free(host);
    free(ref);
}

/* stderr into a temporary file while a run logs. */
static FILE *
t_capture_start(int *saved)
{
    fflush(stderr);
    FILE *f = tmpfile();
    assert_non_null(f);
    *saved = dup(2);
    assert_true(*saved >= 0 && dup2(fileno(f), 2) == 2);
    return f;
}

/* stderr back; whether what was logged holds what. */
static bool
t_capture_holds(FILE *f, int saved, const char *what)
{
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    rewind(f);
    bool found = false;
    char line[4096];
    while (!found && fgets(line, sizeof line, f) != NULL)
        found = strstr(line, what) != NULL;
    fclose(f);
    return found;
}

/* An option the reference device refuses (RUMOR_ENOTSUP from the
 * instance, decided in host code as on CUDA): the peer logs the reason
 * and stages, so every step's result is the host run's bit for bit and
 * nothing crosses the table (the staging of host tensors is the host's
 * path; on CUDA it is the model each way per step). */
static void
t_staged(const char *const *opts, const char *reason)
{
    struct tpr_run *host = malloc(sizeof *host), *ref = malloc(sizeof *ref);
    assert_true(host != NULL && ref != NULL);
    tpr_setup(host, &t_host, opts, false);
    t_go(host);
    rumor_log_set_level(RUMOR_LOG_INFO); /* the fallback logs before the
                                          * node sets its level */
    int saved = -1;
    FILE *log = t_capture_start(&saved);
    tpr_setup(ref, &t_ref, opts, false);
    t_go(ref);
    bool logged = t_capture_holds(log, saved, reason);
    rumor_log_set_level(RUMOR_LOG_WARN);
    assert_true(logged);
    tpr_check_same(host);
    tpr_check_same(ref);
    for (uint32_t i = 0; i < TPR_NODES; i++) {
        t_same_steps(ref, host, i);
        assert_int_equal(ref->h2d[i] + ref->d2h[i], 0);
    }
    print_message("staged on the reference device (%s): %llu steps, bit-equal "
                  "to the host run\n",
                  reason,
                  (unsigned long long)ref->steps[0]);
    tpr_free(host);
    tpr_free(ref);
    free(host);
    free(ref);
}

static void
test_peer_ref__join_after_kill__neighbours_model_into_device(void **state)
{
    (void)state;
    t_restart("join");
}

static void
test_peer_ref__resume_after_kill__same_bits_as_host(void **state)
{
    (void)state;
    t_restart("resume");
}

/* A codec without device code (the lossless huffman, which codes the
 * floats' own bytes on the host). */
static void
test_peer_ref__codec_without_kernels__staged_bit_equal_to_host(void **state)
{
    (void)state;
    static const char *const opts[] = {"algo",
                                       "allreduce",
                                       "codec",
                                       "topk:ratio=0.25|huffman",
                                       "log-level",
                                       "info",
                                       NULL};
    t_staged(opts, "has no device path");
}

/* Stale exchanges (node/stale.c) on the reference device: the queue's
 * snapshots and exchanged copies stay in device memory and land there,
 * so every step's result is the host tensors' run's, bit for bit, and
 * what crosses is the codec's payloads, under one model's bytes a step
 * in all (a snapshot taken or landed through the host would move a
 * model each way every step). */
static void
t_stale(const char *const *opts)
{
    struct tpr_run *host = malloc(sizeof *host), *ref = malloc(sizeof *ref);
    assert_true(host != NULL && ref != NULL);
    tpr_setup(host, &t_host, opts, false);
    t_go(host);
    tpr_setup(ref, &t_ref, opts, false);
    t_go(ref);
    uint64_t model = TPR_N * sizeof(float);
    for (uint32_t i = 0; i < TPR_NODES; i++) {
        t_same_steps(ref, host, i);
        assert_int_equal(host->h2d[i] + host->d2h[i], 0);
        print_message("stale %s, node %u: %llu bytes up, %llu down in %llu "
                      "steps (model %llu bytes)\n",
                      opts[1],
                      i,
                      (unsigned long long)ref->h2d[i],
                      (unsigned long long)ref->d2h[i],
                      (unsigned long long)ref->steps[i],
                      (unsigned long long)model);
        assert_true(ref->h2d[i] + ref->d2h[i] > 0);
        assert_true(ref->h2d[i] + ref->d2h[i] < ref->steps[i] * model);
    }
    tpr_free(host);
    tpr_free(ref);
    free(host);
    free(ref);
}

static void
test_peer_ref__choco_topk_stale1__bit_equal_to_host_payloads_cross(void **state)
{
    (void)state;
    static const char *const opts[] = {"algo",
                                       "choco",
                                       "codec",
                                       "topk:ratio=0.1",
                                       "stale",
                                       "1",
                                       "log-level",
                                       "warn",
                                       NULL};
    t_stale(opts);
}

static void
test_peer_ref__powergossip_stale2__bit_equal_to_host_payloads_cross(
    void **state)
{
    (void)state;
    static const char *const opts[] =
        {"algo", "powergossip", "stale", "2", "log-level", "warn", NULL};
    t_stale(opts);
}

/* DGC's memory where the model is (the compressed all-reduce's --ef dgc,
 * clipped, with a warm-up): the direct path with t_stale's checks,
 * without a stale
 * exchange: every step the host run's, and only the payloads and the
 * sent indices cross, under the model's bytes a step. */
static void
test_peer_ref__allreduce_dgc__bit_equal_to_host_payloads_cross(void **state)
{
    (void)state;
    static const char *const opts[] = {"algo",
                                       "allreduce",
                                       "codec",
                                       "dgc:ratio=0.05",
                                       "ef",
                                       "dgc:momentum=0.9,clip=1,warmup=2",
                                       "log-level",
                                       "warn",
                                       NULL};
    t_stale(opts);
}

/* Stale exchanges of a ring algorithm (local SGD's exact average): the
 * exchange thread's copy stays on the device, its ring's STATE through a
 * host copy of its own. */
static void
test_peer_ref__localsgd_ring_stale1__bit_equal_to_host_payloads_cross(
    void **state)
{
    (void)state;
    static const char *const opts[] =
        {"algo", "localsgd", "period", "3", "stale", "1", NULL};
    t_stale(opts);
}

int
main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(
            test_peer_ref__powersgd__bit_equal_to_host_payloads_up),
        cmocka_unit_test(
            test_peer_ref__view_change__joiner_takes_held_model_host),
        cmocka_unit_test(
            test_peer_ref__view_change__joiner_takes_held_model_ref),
        cmocka_unit_test(
            test_peer_ref__powersgd_buckets__bit_equal_to_host_payloads_up),
        cmocka_unit_test(
            test_peer_ref__view_change_buckets__joiner_takes_held_model_ref),
        cmocka_unit_test(
            test_peer_ref__codec_allreduce__elastic_pcie_is_the_payloads),
        cmocka_unit_test(test_peer_ref__localsgd__elastic_pcie_is_the_payloads),
        cmocka_unit_test(
            test_peer_ref__codec_view_change__rollback_from_device_snapshot),
        cmocka_unit_test(
            test_peer_ref__join_after_kill__neighbours_model_into_device),
        cmocka_unit_test(test_peer_ref__resume_after_kill__same_bits_as_host),
        cmocka_unit_test(
            test_peer_ref__codec_without_kernels__staged_bit_equal_to_host),
        cmocka_unit_test(
            test_peer_ref__allreduce_dgc__bit_equal_to_host_payloads_cross),
        cmocka_unit_test(
            test_peer_ref__choco_topk_stale1__bit_equal_to_host_payloads_cross),
        cmocka_unit_test(
            test_peer_ref__powergossip_stale2__bit_equal_to_host_payloads_cross),
        cmocka_unit_test(
            test_peer_ref__localsgd_ring_stale1__bit_equal_to_host_payloads_cross),
    };
    if (argc == 2)
        cmocka_set_test_filter(argv[1]);
    return cmocka_run_group_tests_name("peer_ref", tests, NULL, NULL);
}
