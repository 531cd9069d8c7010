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
 *     of the participants' inputs, the joiner's input the ring's model.
 */
#include "gossip/backend.h"
#include "tests/cmocka_compat.h"
#include "tests/integration/test_peer_ring.h"

static const struct tpr_mem t_host = TPR_HOST_MEM("host", NULL);
static const struct tpr_mem t_ref = TPR_HOST_MEM("ref", &gossip_backend_ref);

static const char *const t_psgd[] =
    {"algo", "powersgd", "rank", "1", "log-level", "warn", NULL};

static void
t_powersgd(bool buckets)
{
    struct tpr_run *host = malloc(sizeof *host), *ref = malloc(sizeof *ref);
    assert_true(host != NULL && ref != NULL);
    tpr_setup(host, &t_host, t_psgd, false);
    host->buckets = buckets;
    tpr_go(host);
    tpr_setup(ref, &t_ref, t_psgd, false);
    ref->buckets = buckets;
    tpr_go(ref);
    tpr_check_same(host);
    tpr_check_same(ref);
    for (uint32_t i = 0; i < TPR_NODES; i++) {
        for (uint64_t t = 0; t < ref->steps[0]; t++)
            if (memcmp(tpr_at(ref->out[i], t),
                       tpr_at(host->out[i], t),
                       TPR_N * sizeof(float)) != 0)
                fail_msg("node %u, step %llu: the reference device's result "
                         "is not the host's",
                         i,
                         (unsigned long long)t + 1);
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
    tpr_go(run);
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
    tpr_go(run);
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
    tpr_go(run);
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
    tpr_go(run);
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
    tpr_go(host);
    tpr_setup(ref, &t_ref, opts, false);
    tpr_go(ref);
    uint64_t model = TPR_N * sizeof(float);
    for (uint32_t i = 0; i < TPR_NODES; i++) {
        assert_int_equal(ref->steps[i], host->steps[i]);
        for (uint64_t t = 0; t < ref->steps[i]; t++)
            if (memcmp(tpr_at(ref->out[i], t),
                       tpr_at(host->out[i], t),
                       TPR_N * sizeof(float)) != 0)
                fail_msg("stale, node %u, step %llu: the reference "
                         "device's result is not the host's",
                         i,
                         (unsigned long long)t + 1);
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

/* Stale exchanges of a ring algorithm: the exchange thread's elastic
 * ring packs its model on the host at a view change, so the node refuses
 * device tensors, saying why (on CUDA the peer then stages them). */
static void
test_peer_ref__localsgd_ring_stale__refused_with_reason(void **state)
{
    (void)state;
    static const char *const opts[] =
        {"algo", "localsgd", "period", "3", "stale", "1", NULL};
    struct tpc c;
    tpc_setup(&c, "ring:3");
    struct rumor_node_opts o;
    tpc_opts(&c, 0, opts, &o);
    float x[TPR_VEC] = {0};
    struct rumor_peer_tensor t = {x,
                                  RUMOR_DTYPE_F32,
                                  RUMOR_DEVICE_CPU,
                                  1,
                                  {TPR_VEC}};
    struct rumor_diag diag = {0};
    rumor_peer *peer = NULL;
    assert_int_equal(
        node_peer_new_in(&o, &t, 1, &gossip_backend_ref, &peer, &diag),
        RUMOR_ENOTSUP);
    assert_null(peer);
    assert_non_null(strstr(diag.msg, "ring's model on the host"));
    /* on host tensors it runs */
    assert_int_equal(node_peer_new_in(&o, &t, 1, NULL, &peer, &diag), RUMOR_OK);
    rumor_peer_destroy(&peer);
    tpc_free(&c);
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
            test_peer_ref__choco_topk_stale1__bit_equal_to_host_payloads_cross),
        cmocka_unit_test(
            test_peer_ref__powergossip_stale2__bit_equal_to_host_payloads_cross),
        cmocka_unit_test(
            test_peer_ref__localsgd_ring_stale__refused_with_reason),
    };
    if (argc == 2)
        cmocka_set_test_filter(argv[1]);
    return cmocka_run_group_tests_name("peer_ref", tests, NULL, NULL);
}
