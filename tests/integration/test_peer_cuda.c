/*
 * The peer API on CUDA tensors (node/peer_cuda.cu): two nodes in two
 * threads over loopback, each with float32 and float16 tensors in device
 * memory, averaged exactly as the host tensors of test_peer.c are; the
 * PCIe counters (every step downloads and uploads the model once, the
 * peer's creation downloads it once more); and the caller's stream: the
 * caller writes its tensors with copies queued on its stream right
 * before each step and reads them back the same way after it, never
 * synchronising a stream, so only the peer's events order them. And an
 * algorithm that runs on the GPU (D-PSGD, gamma 1: the mean of two nodes
 * exactly) on float32 tensors, which the peer leaves where they are: it
 * copies only the payloads, the snapshot down and the neighbour's up.
 * And the ring algorithms there (tests/integration/test_peer_ring.h,
 * three nodes): PowerSGD against the host's numbers with payloads only
 * crossing, and an all-reduce's elastic view change whose joiner takes a
 * member's held model from device memory to device memory.
 *
 * Skipped in a CPU-only build and where no GPU is visible (R7.3). The
 * test calls the CUDA runtime that a CUDA build links into the process
 * through dlsym, so that it needs no CUDA header and builds everywhere.
 */
#include "rumor/node.h"

#include "tests/cmocka_compat.h"
#include "tests/integration/test_net_common.h"
#include "tests/integration/test_peer_ring.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdlib.h>

#define N     1000 /* elements per tensor */
#define STEPS 3

enum { T_H2D = 1, T_D2H = 2 }; /* cudaMemcpyKind */

struct t_cuda {
    int (*malloc_)(void **p, size_t bytes);
    int (*free_)(void *p);
    int (*memcpy_)(void *dst, const void *src, size_t bytes, int kind);
    int (*memcpy_async)(void *dst,
                        const void *src,
                        size_t bytes,
                        int kind,
                        void *stream);
    int (*stream_create)(void **stream);
    int (*stream_destroy)(void *stream);
};

struct t_run {
    char dir[64];
    char topo[128];
    struct t_cuda cu;
    bool stream;     /* each node hands the peer a stream of its own */
    bool direct;     /* dpsgd on the float32 tensor alone, on the GPU */
    rumor_err rc[2]; /* node i's first failure */
    char msg[2][RUMOR_DIAG_TEXT_BYTES];
    uint32_t wrong[2]; /* elements that missed the average */
    uint64_t h2d[2], d2h[2];
};

struct t_arg {
    struct t_run *run;
    uint32_t id;
};

static void *
t_sym(const char *name)
{
    return dlsym(RTLD_DEFAULT, name);
}

/* The CUDA runtime of the process; false when it is not loaded. */
static bool
t_cuda_load(struct t_cuda *cu)
{
    *(void **)&cu->malloc_ = t_sym("cudaMalloc");
    *(void **)&cu->free_ = t_sym("cudaFree");
    *(void **)&cu->memcpy_ = t_sym("cudaMemcpy");
    *(void **)&cu->memcpy_async = t_sym("cudaMemcpyAsync");
    *(void **)&cu->stream_create = t_sym("cudaStreamCreate");
    *(void **)&cu->stream_destroy = t_sym("cudaStreamDestroy");
    return cu->malloc_ && cu->free_ && cu->memcpy_ && cu->memcpy_async &&
           cu->stream_create && cu->stream_destroy;
}

/* Small integers are exact in float16: v in [0, 2048]. */
static uint16_t
t_half(int v)
{
    if (v == 0)
        return 0;
    int e = 0;
    while ((v >> (e + 1)) != 0)
        e++;
    uint32_t man = (uint32_t)(e <= 10 ? v << (10 - e) : v >> (e - 10));
    return (uint16_t)((uint32_t)(15 + e) << 10 | (man & 0x3ffu));
}

/* Node i's values before step s: k + 2 i + 8 s (their mean: k + 1 + 8 s,
 * exact in both dtypes for k + 2 + 8 s <= 2048). */
static int
t_value(uint32_t i, int k, int s)
{
    return k % 1000 + 2 * (int)i + 8 * s;
}

static rumor_err
t_opts(struct rumor_node_opts *o, const struct t_run *run, uint32_t id)
{
    static const char *const names[] = {"topology",
                                        "id",
                                        "insecure",
                                        "algo",
                                        "log-level"};
    char idtext[16];
    snprintf(idtext, sizeof idtext, "%u", id);
    const char *values[] = {run->topo,
                            idtext,
                            "",
                            run->direct ? "dpsgd" : "allreduce",
                            "warn"};
    rumor_node_config *cfg = NULL;
    rumor_err rc = rumor_node_config_new(&cfg);
    for (size_t k = 0; k < 5 && rc == RUMOR_OK; k++)
        rc = rumor_node_config_set(cfg, names[k], values[k], NULL);
    if (rc == RUMOR_OK && run->direct)
        rc = rumor_node_config_set(cfg, "gamma", "1", NULL);
    if (rc == RUMOR_OK)
        rc = rumor_node_config_check(cfg, NULL);
    if (rc == RUMOR_OK)
        *o = *rumor_node_config_opts(cfg);
    rumor_node_config_destroy(&cfg);
    return rc;
}

/* The caller's side of a step: its values of step s written, on its
 * stream (or synchronously), into the device tensors. */
static int
t_write(const struct t_cuda *cu,
        void *stream,
        void *const dev[2],
        float *f32,
        uint16_t *f16,
        uint32_t i,
        int s)
{
    for (int k = 0; k < N; k++) {
        f32[k] = (float)t_value(i, k, s);
        f16[k] = t_half(t_value(i, k, s));
    }
    /* from pageable memory the call returns once the bytes are staged,
     * before they reach the device: the host arrays are free again, the
     * device tensors written only when the stream gets there */
    int err = cu->memcpy_async(dev[0], f32, N * sizeof *f32, T_H2D, stream);
    return err == 0
               ? cu->memcpy_async(dev[1], f16, N * sizeof *f16, T_H2D, stream)
               : err;
}

/* Reads the averages back on the caller's stream and counts the
 * elements that are not the mean of step s. */
static uint32_t
t_check(const struct t_cuda *cu,
        void *stream,
        void *const dev[2],
        float *f32,
        uint16_t *f16,
        int s,
        bool with_f16)
{
    memset(f32, 0xff, N * sizeof *f32);
    memset(f16, 0xff, N * sizeof *f16);
    /* into pageable memory the call returns when the copy is done */
    int err = cu->memcpy_async(f32, dev[0], N * sizeof *f32, T_D2H, stream);
    if (err == 0)
        err = cu->memcpy_async(f16, dev[1], N * sizeof *f16, T_D2H, stream);
    uint32_t wrong = err != 0 ? 2 * N : 0;
    for (int k = 0; k < N && err == 0; k++) {
        int mean = t_value(0, k, s) + 1;
        wrong += f32[k] != (float)mean;
        wrong += with_f16 && f16[k] != t_half(mean);
    }
    return wrong;
}

static void *
t_node(void *p)
{
    struct t_arg *a = p;
    struct t_run *run = a->run;
    const struct t_cuda *cu = &run->cu;
    uint32_t i = a->id;
    float *f32 = calloc(N, sizeof *f32);
    uint16_t *f16 = calloc(N, sizeof *f16);
    void *dev[2] = {NULL, NULL}, *stream = NULL;
    rumor_peer *peer = NULL;
    struct rumor_diag diag = {0};
    struct rumor_node_opts o;
    int err = f32 && f16 ? cu->malloc_(&dev[0], N * sizeof *f32) : 1;
    if (err == 0)
        err = cu->malloc_(&dev[1], N * sizeof *f16);
    if (err == 0 && run->stream)
        err = cu->stream_create(&stream);
    if (err == 0)
        err = t_write(cu, stream, dev, f32, f16, i, 0);
    rumor_err rc = err == 0 ? t_opts(&o, run, i) : RUMOR_EBACKEND;
    struct rumor_peer_tensor ts[2] = {
        {dev[0], RUMOR_DTYPE_F32, RUMOR_DEVICE_CUDA, 1, {N}},
        {dev[1], RUMOR_DTYPE_F16, RUMOR_DEVICE_CUDA, 1, {N}},
    };
    if (rc == RUMOR_OK)
        rc = rumor_peer_new(&o, ts, run->direct ? 1 : 2, &peer, &diag);
    if (rc == RUMOR_OK && run->stream)
        rc = rumor_peer_set_stream(peer, stream, &diag);
    for (int s = 0; s < STEPS && rc == RUMOR_OK; s++) {
        if (s > 0 && t_write(cu, stream, dev, f32, f16, i, s) != 0)
            rc = RUMOR_EBACKEND;
        if (rc == RUMOR_OK)
            rc = rumor_peer_gossip(peer, &diag);
        if (rc == RUMOR_OK)
            run->wrong[i] +=
                t_check(cu, stream, dev, f32, f16, s, !run->direct);
    }
    struct rumor_peer_stats st = {0};
    if (peer != NULL)
        rumor_peer_stats(peer, &st);
    run->h2d[i] = st.pcie_h2d_bytes;
    run->d2h[i] = st.pcie_d2h_bytes;
    run->rc[i] = rc;
    snprintf(run->msg[i], sizeof run->msg[i], "%s", diag.msg);
    rumor_peer_destroy(&peer);
    if (stream != NULL)
        cu->stream_destroy(stream);
    cu->free_(dev[0]);
    cu->free_(dev[1]);
    free(f32);
    free(f16);
    return NULL;
}

static int
t_setup(void **state)
{
    struct t_run *run = calloc(1, sizeof *run);
    if (run == NULL)
        return -1;
    *state = run;
    snprintf(run->dir, sizeof run->dir, "/tmp/rp-pcuda-%d-XXXXXX", getpid());
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
    return 0;
}

static int
t_teardown(void **state)
{
    struct t_run *run = *state;
    unlink(run->topo);
    rmdir(run->dir);
    free(run);
    return 0;
}

/* Skips (R7.3) without a CUDA build or a visible GPU. */
static void
t_need_gpu(struct t_run *run)
{
    const char *why = NULL;
    if (!rumor_cuda_built()) {
        print_message("skip: librumor built without CUDA\n");
        skip();
    }
    if (rumor_cuda_device_count(&why) <= 0) {
        print_message("skip: no CUDA device: %s\n", why ? why : "?");
        skip();
    }
    assert_true(t_cuda_load(&run->cu));
}

static void
t_run_pair(struct t_run *run)
{
    t_need_gpu(run);
    pthread_t th;
    struct t_arg a0 = {run, 0}, a1 = {run, 1};
    assert_int_equal(pthread_create(&th, NULL, t_node, &a1), 0);
    t_node(&a0);
    pthread_join(th, NULL);
    const uint64_t model =
        N * (sizeof(float) + (run->direct ? 0 : sizeof(uint16_t)));
    for (int i = 0; i < 2; i++) {
        if (run->rc[i] != RUMOR_OK)
            fail_msg("node %d: %s: %s",
                     i,
                     rumor_strerror(run->rc[i]),
                     run->msg[i]);
        assert_int_equal(run->wrong[i], 0);
        /* staged: the model each way per step, and once down at
         * rumor_peer_new; on the GPU: the snapshot down and the
         * neighbour's message up, per step */
        assert_int_equal(run->h2d[i], STEPS * model);
        assert_int_equal(run->d2h[i], (STEPS + !run->direct) * model);
    }
}

static void
test_peer_cuda__default_stream__averaged_and_counted(void **state)
{
    struct t_run *run = *state;
    t_run_pair(run);
}

static void
test_peer_cuda__callers_stream__ordered_by_events(void **state)
{
    struct t_run *run = *state;
    run->stream = true;
    t_run_pair(run);
}

static void
test_peer_cuda__dpsgd_on_the_gpu__payloads_only(void **state)
{
    struct t_run *run = *state;
    run->direct = true;
    t_run_pair(run);
}

static void
test_peer_cuda__dpsgd_on_the_gpu__callers_stream(void **state)
{
    struct t_run *run = *state;
    run->direct = true;
    run->stream = true;
    t_run_pair(run);
}

/* --- ring algorithms on the GPU (tests/integration/test_peer_ring.h) --- */

static void *
t_ring_alloc(const struct tpr_mem *m, size_t bytes)
{
    const struct t_cuda *cu = m->ctx;
    void *p = NULL;
    return cu->malloc_(&p, bytes) == 0 ? p : NULL;
}

static void
t_ring_release(const struct tpr_mem *m, void *p)
{
    const struct t_cuda *cu = m->ctx;
    cu->free_(p);
}

static int
t_ring_put(const struct tpr_mem *m, void *dev, const float *x, size_t n)
{
    const struct t_cuda *cu = m->ctx;
    return cu->memcpy_(dev, x, n * sizeof *x, T_H2D);
}

static int
t_ring_get(const struct tpr_mem *m, float *x, const void *dev, size_t n)
{
    const struct t_cuda *cu = m->ctx;
    return cu->memcpy_(x, dev, n * sizeof *x, T_D2H);
}

/* The CUDA tensors' mem, its runtime loaded (skips without a GPU). */
static struct tpr_mem
t_ring_mem(struct t_run *run)
{
    t_need_gpu(run);
    return (struct tpr_mem){"cuda",
                            RUMOR_DEVICE_CUDA,
                            NULL,
                            t_ring_alloc,
                            t_ring_release,
                            t_ring_put,
                            t_ring_get,
                            &run->cu};
}

static const char *const t_psgd[] =
    {"algo", "powersgd", "rank", "1", "log-level", "warn", NULL};

/* PowerSGD on CUDA float32 tensors runs where they are (no staging: what
 * crosses per step is far below the model each way) and gives the host
 * run's numbers within the GPU's rounding (its products sum in another
 * order). */
static void
test_peer_cuda__powersgd_on_the_gpu__host_numbers_payloads_only(void **state)
{
    struct tpr_mem cuda = t_ring_mem(*state);
    const struct tpr_mem host = TPR_HOST_MEM("host", NULL);
    struct tpr_run *h = malloc(sizeof *h), *g = malloc(sizeof *g);
    assert_true(h != NULL && g != NULL);
    tpr_setup(h, &host, t_psgd, false);
    tpr_go(h);
    tpr_setup(g, &cuda, t_psgd, false);
    tpr_go(g);
    tpr_check_same(g);
    for (uint32_t i = 0; i < TPR_NODES; i++) {
        for (uint64_t t = 0; t < g->steps[0]; t++)
            for (size_t k = 0; k < TPR_N; k++) {
                double a = tpr_at(g->out[i], t)[k];
                double b = tpr_at(h->out[i], t)[k];
                if (fabs(a - b) > 1e-4 * (1 + fabs(b)))
                    fail_msg("node %u, step %llu, element %zu: GPU %.9g, "
                             "host %.9g",
                             i,
                             (unsigned long long)t + 1,
                             k,
                             a,
                             b);
            }
        uint64_t model = TPR_N * sizeof(float), steps = g->steps[i];
        print_message("node %u: %llu bytes up, %llu down in %llu steps\n",
                      i,
                      (unsigned long long)g->h2d[i],
                      (unsigned long long)g->d2h[i],
                      (unsigned long long)steps);
        assert_true(g->h2d[i] < steps * model / 2);
        assert_true(g->d2h[i] < steps * model / 2);
    }
    tpr_free(h);
    tpr_free(g);
    free(h);
    free(g);
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

/* An elastic view change with CUDA tensors: node 2 removed, then taken
 * back with a member's held model (device -> host for the STATE, host ->
 * the joiner's device); the results are the participants' means. */
static void
test_peer_cuda__allreduce_view_change__joiner_takes_held_model(void **state)
{
    struct tpr_mem cuda = t_ring_mem(*state);
    struct tpr_run *r = malloc(sizeof *r);
    assert_non_null(r);
    tpr_setup(r, &cuda, t_model, true);
    tpr_go(r);
    tpr_check_same(r);
    tpr_check_rejoin(r);
    tpr_free(r);
    free(r);
}

int
main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(
            test_peer_cuda__default_stream__averaged_and_counted,
            t_setup,
            t_teardown),
        cmocka_unit_test_setup_teardown(
            test_peer_cuda__callers_stream__ordered_by_events,
            t_setup,
            t_teardown),
        cmocka_unit_test_setup_teardown(
            test_peer_cuda__dpsgd_on_the_gpu__payloads_only,
            t_setup,
            t_teardown),
        cmocka_unit_test_setup_teardown(
            test_peer_cuda__dpsgd_on_the_gpu__callers_stream,
            t_setup,
            t_teardown),
        cmocka_unit_test_setup_teardown(
            test_peer_cuda__powersgd_on_the_gpu__host_numbers_payloads_only,
            t_setup,
            t_teardown),
        cmocka_unit_test_setup_teardown(
            test_peer_cuda__allreduce_view_change__joiner_takes_held_model,
            t_setup,
            t_teardown),
    };
    if (argc == 2)
        cmocka_set_test_filter(argv[1]);
    return cmocka_run_group_tests_name("peer_cuda", tests, NULL, NULL);
}
