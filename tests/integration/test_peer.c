/*
 * The peer API (node/peer.c) from C, two nodes in two threads over
 * loopback: caller tensors averaged in place (float32 zero-copy, float64,
 * float16 and bfloat16 through staging), the exact average of a
 * PowerGossip peer, state save and load, and the refusals. The Python
 * binding's tests (tests/python) cover the same API through ctypes; these
 * run under `make asan` too, where python cannot load the library.
 */
#include "rumor/node.h"

#include "tests/cmocka_compat.h"
#include "tests/integration/test_net_common.h"

#include <math.h>
#include <pthread.h>
#include <stdlib.h>

#define N 6 /* elements per tensor */

struct t_peer_run {
    char dir[64];
    char topo[128];
    const char *algo;
    bool average;            /* average() instead of gossip() */
    const char *deadline_ms; /* NULL: the default */
    uint32_t steps[2];       /* gossip()s of node i (0: one) */
    uint64_t done[2];        /* steps the peer counted */
    uint64_t pcie[2];        /* its PCIe bytes, both ways */
    float f32[2][N];         /* node i starts at k + 2 i */
    double f64[2][N];
    uint16_t f16[2][N];  /* IEEE halves */
    uint16_t bf16[2][N]; /* bfloat16 */
    rumor_err rc[2];
    char msg[2][RUMOR_DIAG_TEXT_BYTES];
};

struct t_node_arg {
    struct t_peer_run *run;
    uint32_t id;
};

/* Small integers and their halves: 1 + k is 0x3c00 + ..., exact. */
static uint16_t
t_half_of_int(int v)
{
    /* v in [0, 15]: exponent 15 + floor(log2 v), 10 mantissa bits */
    if (v == 0)
        return 0;
    int e = 0;
    while ((v >> (e + 1)) != 0)
        e++;
    uint32_t man = ((uint32_t)v << (10 - e)) & 0x3ffu;
    return (uint16_t)((uint32_t)(15 + e) << 10 | man);
}

static uint16_t
t_bf16_of_int(int v)
{
    float f = (float)v;
    uint32_t bits = 0;
    memcpy(&bits, &f, sizeof bits);
    return (uint16_t)(bits >> 16);
}

/* Options of node id (no cmocka assertion: node 1 runs in a thread). */
static rumor_err
t_opts(struct rumor_node_opts *o, const struct t_peer_run *run, uint32_t id)
{
    static const char *const names[] = {"topology",
                                        "id",
                                        "insecure",
                                        "algo",
                                        "log-level"};
    char idtext[16];
    snprintf(idtext, sizeof idtext, "%u", id);
    const char *values[] = {run->topo, idtext, "", run->algo, "warn"};
    rumor_node_config *cfg = NULL;
    rumor_err rc = rumor_node_config_new(&cfg);
    for (size_t k = 0; k < 5 && rc == RUMOR_OK; k++)
        rc = rumor_node_config_set(cfg, names[k], values[k], NULL);
    if (rc == RUMOR_OK && run->deadline_ms != NULL)
        rc = rumor_node_config_set(cfg, "deadline-ms", run->deadline_ms, NULL);
    if (rc == RUMOR_OK)
        rc = rumor_node_config_check(cfg, NULL);
    if (rc == RUMOR_OK)
        *o = *rumor_node_config_opts(cfg);
    rumor_node_config_destroy(&cfg);
    return rc;
}

static void
t_tensor(struct rumor_peer_tensor *t, void *data, rumor_dtype dtype)
{
    memset(t, 0, sizeof *t);
    t->data = data;
    t->dtype = dtype;
    t->device = RUMOR_DEVICE_CPU;
    t->ndim = 2;
    t->shape[0] = 2;
    t->shape[1] = N / 2;
}

static void *
t_node(void *p)
{
    struct t_node_arg *a = p;
    struct t_peer_run *run = a->run;
    uint32_t i = a->id;
    struct rumor_node_opts o;
    struct rumor_diag diag = {0};
    struct rumor_peer_tensor ts[4];
    rumor_peer *peer = NULL;
    rumor_err rc = t_opts(&o, run, i);
    t_tensor(&ts[0], run->f32[i], RUMOR_DTYPE_F32);
    t_tensor(&ts[1], run->f64[i], RUMOR_DTYPE_F64);
    t_tensor(&ts[2], run->f16[i], RUMOR_DTYPE_F16);
    t_tensor(&ts[3], run->bf16[i], RUMOR_DTYPE_BF16);
    if (rc == RUMOR_OK)
        rc = rumor_peer_new(&o, ts, 4, &peer, &diag);
    uint32_t steps = run->steps[i] > 0 ? run->steps[i] : 1;
    for (uint32_t s = 0; s < steps && rc == RUMOR_OK; s++)
        rc = run->average ? rumor_peer_average(peer, &diag)
                          : rumor_peer_gossip(peer, &diag);
    struct rumor_peer_stats st = {0};
    if (peer != NULL)
        rumor_peer_stats(peer, &st);
    run->done[i] = st.steps;
    run->pcie[i] = st.pcie_h2d_bytes + st.pcie_d2h_bytes;
    run->rc[i] = rc;
    snprintf(run->msg[i], sizeof run->msg[i], "%s", diag.msg);
    rumor_peer_destroy(&peer);
    rumor_peer_destroy(&peer); /* safe twice */
    return NULL;
}

/* cmocka setup: a topology file of two nodes on free loopback ports in a
 * fresh directory (removed by t_teardown, also when a test fails) and the
 * tensors' starting values. */
static int
t_setup(void **state)
{
    struct t_peer_run *run = calloc(1, sizeof *run);
    if (run == NULL)
        return -1;
    *state = run;
    run->algo = "dpsgd";
    snprintf(run->dir, sizeof run->dir, "/tmp/rp-peer-%d-XXXXXX", getpid());
    if (mkdtemp(run->dir) == NULL)
        return -1;
    snprintf(run->topo, sizeof run->topo, "%s/ring.topo", run->dir);
    FILE *f = fopen(run->topo, "w");
    if (f == NULL)
        return -1;
    fprintf(f,
            "node 0 tcp://127.0.0.1:%d\nnode 1 tcp://127.0.0.1:%d\n"
            "edge 0 1\n",
            t_free_port(),
            t_free_port());
    fclose(f);
    for (int i = 0; i < 2; i++)
        for (int k = 0; k < N; k++) {
            run->f32[i][k] = (float)(k + 2 * i);
            run->f64[i][k] = k + 2 * i;
            run->f16[i][k] = t_half_of_int(k + 2 * i);
            run->bf16[i][k] = t_bf16_of_int(k + 2 * i);
        }
    return 0;
}

static int
t_teardown(void **state)
{
    struct t_peer_run *run = *state;
    unlink(run->topo);
    rmdir(run->dir);
    free(run);
    return 0;
}

static void
t_run_pair(struct t_peer_run *run)
{
    pthread_t th;
    struct t_node_arg a0 = {run, 0}, a1 = {run, 1};
    assert_int_equal(pthread_create(&th, NULL, t_node, &a1), 0);
    t_node(&a0);
    pthread_join(th, NULL);
    for (int i = 0; i < 2; i++)
        if (run->rc[i] != RUMOR_OK)
            fail_msg("node %d: %s: %s",
                     i,
                     rumor_strerror(run->rc[i]),
                     run->msg[i]);
}

static void
t_check_means(const struct t_peer_run *run)
{
    for (int i = 0; i < 2; i++)
        for (int k = 0; k < N; k++) {
            assert_true(run->f32[i][k] == (float)(k + 1));
            assert_true(run->f64[i][k] == k + 1);
            assert_int_equal(run->f16[i][k], t_half_of_int(k + 1));
            assert_int_equal(run->bf16[i][k], t_bf16_of_int(k + 1));
        }
}

static void
test_peer__allreduce_every_dtype__averaged_in_place(void **state)
{
    struct t_peer_run *run = *state;
    run->algo = "allreduce";
    t_run_pair(run);
    t_check_means(run);
    /* host tensors are staged by the CPU alone: nothing crosses PCIe */
    assert_int_equal(run->pcie[0], 0);
    assert_int_equal(run->pcie[1], 0);
}

static void
test_peer__average_of_powergossip_peer__exact(void **state)
{
    struct t_peer_run *run = *state;
    run->algo = "powergossip";
    run->average = true;
    t_run_pair(run);
    t_check_means(run);
}

/* The runtime's fault path under the peer API: a D-PSGD neighbour that
 * leaves after step 1 is skipped, not an error (the old peer failed its
 * step 2 with RUMOR_ETIMEDOUT), and node 0's later steps keep the step-1
 * average, since a skipped term leaves x_i where it is. */
static void
test_peer__dpsgd_neighbour_leaves__skipped_not_an_error(void **state)
{
    struct t_peer_run *run = *state;
    run->algo = "dpsgd";
    run->deadline_ms = "300";
    run->steps[0] = 5;
    t_run_pair(run);
    t_check_means(run);
    assert_int_equal(run->done[0], 5);
    assert_int_equal(run->done[1], 1);
}

static void
test_peer__bad_tensors__refused_before_anything_starts(void **state)
{
    struct t_peer_run *run = *state;
    struct rumor_node_opts o;
    struct rumor_diag diag = {0};
    struct rumor_peer_tensor t;
    rumor_peer *peer = NULL;
    assert_int_equal(t_opts(&o, run, 0), RUMOR_OK);
    t_tensor(&t, NULL, RUMOR_DTYPE_F32);
    assert_int_equal(rumor_peer_new(&o, &t, 1, &peer, &diag), RUMOR_EINVAL);
    assert_null(peer);
    assert_non_null(strstr(diag.msg, "tensor 0"));
    t_tensor(&t, run->f32[0], (rumor_dtype)9);
    assert_int_equal(rumor_peer_new(&o, &t, 1, &peer, &diag), RUMOR_EINVAL);
    t_tensor(&t, run->f32[0], RUMOR_DTYPE_F32);
    t.ndim = RUMOR_GOSSIP_MAX_DIMS + 1;
    assert_int_equal(rumor_peer_new(&o, &t, 1, &peer, &diag), RUMOR_EINVAL);
    assert_int_equal(rumor_peer_new(&o, &t, 0, &peer, &diag), RUMOR_EINVAL);
    if (!rumor_cuda_built()) {
        t_tensor(&t, run->f32[0], RUMOR_DTYPE_F32);
        t.device = RUMOR_DEVICE_CUDA;
        memset(&diag, 0, sizeof diag);
        assert_int_equal(rumor_peer_new(&o, &t, 1, &peer, &diag),
                         RUMOR_ENOTSUP);
        assert_non_null(strstr(diag.msg, "without CUDA"));
    }
}

/* A caller's CUDA stream orders copies of CUDA tensors: without CUDA (or
 * without such tensors) there is nothing to order, and a stream handed
 * in anyway is a mistake said at once; NULL, the default, always goes. */
static void
test_peer__set_stream_without_cuda_tensors__refused_but_null(void **state)
{
    struct t_peer_run *run = *state;
    struct rumor_node_opts o;
    struct rumor_diag diag = {0};
    struct rumor_peer_tensor t;
    rumor_peer *peer = NULL;
    int not_a_stream = 0; /* never dereferenced: refused before CUDA */
    assert_int_equal(t_opts(&o, run, 0), RUMOR_OK);
    t_tensor(&t, run->f16[0], RUMOR_DTYPE_F16);
    assert_int_equal(rumor_peer_new(&o, &t, 1, &peer, &diag), RUMOR_OK);
    assert_int_equal(rumor_peer_set_stream(peer, NULL, &diag), RUMOR_OK);
    rumor_err rc = rumor_peer_set_stream(peer, &not_a_stream, &diag);
    if (rumor_cuda_built()) {
        assert_int_equal(rc, RUMOR_EINVAL);
        assert_non_null(strstr(diag.msg, "in CUDA memory"));
    } else {
        assert_int_equal(rc, RUMOR_ENOTSUP);
        assert_non_null(strstr(diag.msg, "built without CUDA"));
    }
    assert_int_equal(rumor_peer_set_stream(peer, NULL, &diag), RUMOR_OK);
    rumor_peer_destroy(&peer);
}

/* The metrics line of a peer carries its PCIe counters (0 for host
 * tensors), beside the bytes it sent. */
static void
test_peer__metrics_line__has_pcie_counters(void **state)
{
    struct t_peer_run *run = *state;
    struct rumor_node_opts o;
    struct rumor_diag diag = {0};
    struct rumor_peer_tensor t;
    rumor_peer *peer = NULL;
    assert_int_equal(t_opts(&o, run, 0), RUMOR_OK);
    snprintf(o.metrics_dir, sizeof o.metrics_dir, "%s", run->dir);
    t_tensor(&t, run->f64[0], RUMOR_DTYPE_F64);
    assert_int_equal(rumor_peer_new(&o, &t, 1, &peer, &diag), RUMOR_OK);
    assert_int_equal(rumor_peer_report(peer, 0.5, NAN, NAN), RUMOR_OK);
    rumor_peer_destroy(&peer);
    char path[96], line[4096] = {0};
    snprintf(path, sizeof path, "%s/node-0.jsonl", run->dir);
    FILE *f = fopen(path, "r");
    assert_non_null(f);
    assert_non_null(fgets(line, sizeof line, f));
    fclose(f);
    unlink(path);
    assert_non_null(strstr(line, "\"bytes_sent\":"));
    assert_non_null(strstr(line, "\"pcie_h2d_bytes\":0,"));
    assert_non_null(strstr(line, "\"pcie_d2h_bytes\":0,"));
}

static void
test_peer__state_round_trip__and_garbage_refused(void **state)
{
    struct t_peer_run *run = *state;
    run->algo = "choco";
    struct rumor_node_opts o;
    struct rumor_diag diag = {0};
    struct rumor_peer_tensor t;
    rumor_peer *peer = NULL;
    rumor_buf buf;
    assert_int_equal(t_opts(&o, run, 0), RUMOR_OK);
    t_tensor(&t, run->f32[0], RUMOR_DTYPE_F32);
    assert_int_equal(rumor_peer_new(&o, &t, 1, &peer, &diag), RUMOR_OK);
    rumor_buf_init(&buf, 1 << 20);
    assert_int_equal(rumor_peer_state_save(peer, &buf), RUMOR_OK);
    assert_true(buf.len > 16);
    assert_int_equal(rumor_peer_state_load(peer, buf.data, buf.len, &diag),
                     RUMOR_OK);
    assert_int_equal(rumor_peer_state_load(peer, buf.data, 10, &diag),
                     RUMOR_EPROTO);
    buf.data[0] ^= 1;
    assert_int_equal(rumor_peer_state_load(peer, buf.data, buf.len, &diag),
                     RUMOR_EPROTO);
    buf.data[0] ^= 1;
    assert_int_not_equal(
        rumor_peer_state_load(peer, buf.data, buf.len - 1, &diag),
        RUMOR_OK);
    struct rumor_peer_stats st;
    rumor_peer_stats(peer, &st);
    assert_int_equal(st.steps, 0);
    assert_int_equal(rumor_peer_nodes(peer), 2);
    rumor_buf_free(&buf);
    rumor_peer_destroy(&peer);
}

int
main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(
            test_peer__allreduce_every_dtype__averaged_in_place,
            t_setup,
            t_teardown),
        cmocka_unit_test_setup_teardown(
            test_peer__average_of_powergossip_peer__exact,
            t_setup,
            t_teardown),
        cmocka_unit_test_setup_teardown(
            test_peer__dpsgd_neighbour_leaves__skipped_not_an_error,
            t_setup,
            t_teardown),
        cmocka_unit_test_setup_teardown(
            test_peer__bad_tensors__refused_before_anything_starts,
            t_setup,
            t_teardown),
        cmocka_unit_test_setup_teardown(
            test_peer__set_stream_without_cuda_tensors__refused_but_null,
            t_setup,
            t_teardown),
        cmocka_unit_test_setup_teardown(
            test_peer__metrics_line__has_pcie_counters,
            t_setup,
            t_teardown),
        cmocka_unit_test_setup_teardown(
            test_peer__state_round_trip__and_garbage_refused,
            t_setup,
            t_teardown),
    };
    if (argc == 2)
        cmocka_set_test_filter(argv[1]);
    return cmocka_run_group_tests_name("peer", tests, NULL, NULL);
}
