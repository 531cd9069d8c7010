/*
 * `rumor sim train --stale S` ($RUMOR_BIN) against the definitions of
 * docs/gossip.md ("Stale exchanges"), written out plainly here on the
 * same least-squares workload (the library's, for its gradients):
 *   - D-PSGD (robust mixing off) with S = 0, 1, 2 gives the bits of the
 *     recurrence x_u += G_{u-S} - s_{u-S} at the start of step u, then
 *     x -= lr g(x) (S = 0: today's x = G(x) - lr g, in place), and S = 1
 *     differs from S = 0 by rounding only;
 *   - overlapped DiLoCo (exact average, outer Nesterov, H = 4) with
 *     S = 1..H matches its recurrence to float rounding (the ring
 *     all-reduce sums in another order than the reference);
 *   - the refusals (rumor_gossip_stale_check) exit 2 with their reason;
 *   - with the auto gamma, consensus under S = 1, 2, 3 keeps shrinking on
 *     rings and tori (D-PSGD, CHOCO, PowerGossip), where D-PSGD's gamma 1
 *     with S = 2 makes it grow;
 *   - streaming DiLoCo with fp4 deltas and S = 2 from starts that differ
 *     by node: each fragment's first sync is discarded with a warning,
 *     the nodes still agree;
 *   - modelled links: a step costs max(compute, exchange) with S = 1.
 */
#include "tests/cmocka_compat.h"

#include "rumor/gossip.h"
#include "rumor/topology.h"
#include "rumor/train.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define NODES    4
#define FEATURES 6
#define OUTPUTS  2
#define NUMEL    (FEATURES * OUTPUTS)
#define STEPS    22 /* not a multiple of H: exchanges still in flight */
#define SEED     7
#define LR       0.05
#define PERIOD   4
#define OUTER_LR 0.7
#define OUTER_MU 0.9
#define GAMMA    0.8

/* The workload both sides train (lsq, generated, batch 8). */
#define WORK_ARGS                                                       \
    "--workload lsq --lsq-features 6 --lsq-outputs 2 --lsq-samples 64 " \
    "--batch 8 --optim sgd --lr 0.05 --seed 7"

static const char *
s_bin(void)
{
    const char *bin = getenv("RUMOR_BIN");
    if (bin == NULL) {
        printf("skipped: RUMOR_BIN is not set to the rumor binary\n");
        skip();
    }
    return bin;
}

/* Runs cmd (stdout and stderr) and keeps its output in out; returns the
 * exit status. */
static int
s_run(const char *cmd, char *out, size_t cap)
{
    char full[1024];
    snprintf(full, sizeof full, "%s 2>&1", cmd);
    FILE *p = popen(full, "r");
    assert_non_null(p);
    size_t len = 0;
    out[0] = '\0';
    char line[512];
    while (fgets(line, sizeof line, p) != NULL) {
        size_t n = strlen(line);
        if (len + n < cap) {
            memcpy(out + len, line, n + 1);
            len += n;
        }
    }
    int status = pclose(p);
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

/* `rumor sim train` on ring:4 with extra options; the nodes' final
 * models into x[NODES][NUMEL]. */
static void
s_sim_models(const char *extra, float x[NODES][NUMEL])
{
    char path[] = "/tmp/rumor-sim-stale-XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    char cmd[1024], out[8192];
    snprintf(cmd,
             sizeof cmd,
             "%s sim train --topology ring:%d " WORK_ARGS
             " --steps %d --every %d %s --save-models %s",
             s_bin(),
             NODES,
             STEPS,
             STEPS,
             extra,
             path);
    int status = s_run(cmd, out, sizeof out);
    if (status != 0)
        fail_msg("'%s' exited %d: %s", cmd, status, out);
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    assert_int_equal(fread(x, sizeof(float), NODES * NUMEL, f), NODES * NUMEL);
    assert_int_equal(fgetc(f), EOF);
    fclose(f);
    remove(path);
    close(fd);
}

/* --- the reference ------------------------------------------------------ */

struct ref {
    rumor_workload *w[NODES];
    struct rumor_model *grad[NODES];
    float *x[NODES];              /* the workloads' models (one tensor) */
    float d[STEPS][NODES][NUMEL]; /* G_t - s_t */
    bool exchanged[STEPS];
};

static void
s_ref_new(struct ref *r)
{
    memset(r, 0, sizeof *r);
    for (uint32_t i = 0; i < NODES; i++) {
        struct rumor_workload_opts o;
        rumor_workload_opts_default(&o);
        o.kind = RUMOR_WORKLOAD_LSQ;
        o.lsq_features = FEATURES;
        o.lsq_outputs = OUTPUTS;
        o.lsq_samples = 64;
        o.batch = 8;
        o.seed = SEED;
        o.node = i;
        o.nodes = NODES;
        struct rumor_diag diag = {0};
        assert_int_equal(rumor_workload_new(&o, &r->w[i], &diag), RUMOR_OK);
        struct rumor_model *m = rumor_workload_model(r->w[i]);
        assert_int_equal(m->count, 1);
        assert_int_equal(rumor_tensor_numel(&m->tensors[0]), NUMEL);
        r->x[i] = m->tensors[0].data;
        assert_int_equal(rumor_model_clone(m, &r->grad[i]), RUMOR_OK);
    }
}

static void
s_ref_free(struct ref *r)
{
    for (size_t i = 0; i < NODES; i++) {
        rumor_model_free(&r->grad[i]);
        rumor_workload_destroy(&r->w[i]);
    }
}

/* x += G_t - s_t, in float. */
static void
s_ref_land(struct ref *r, uint64_t t)
{
    for (size_t i = 0; i < NODES; i++)
        for (size_t e = 0; e < NUMEL; e++)
            r->x[i][e] = r->x[i][e] + r->d[t][i][e];
    r->exchanged[t] = false;
}

/* Every node's gradient at its x_t. */
static void
s_ref_grad(struct ref *r, uint64_t t)
{
    for (size_t i = 0; i < NODES; i++)
        assert_int_equal(rumor_workload_grad(r->w[i], t, r->grad[i], NULL),
                         RUMOR_OK);
}

/* x -= lr g (plain SGD). */
static void
s_ref_sgd(struct ref *r)
{
    float lr = (float)LR;
    for (size_t i = 0; i < NODES; i++)
        for (size_t e = 0; e < NUMEL; e++)
            r->x[i][e] -= lr * r->grad[i]->tensors[0].data[e];
}

/* The exchange of one step: G from the snapshots s (in place). */
typedef void (*exchange_fn)(void *ctx, uint64_t t, float s[NODES][NUMEL]);

/* Steps 0 .. STEPS - 1 with stale S: the landing of t - S, the gradient
 * at x_t, the exchange of step t on a snapshot, the SGD step with that
 * gradient; after the last step what is still pending. S = 0: the
 * exchange's G replaces x before the SGD step (x_{t+1} = G(x_t) - lr
 * g(x_t), the simulator's loop before stale exchanges). */
static void
s_ref_run(struct ref *r,
          unsigned s,
          bool (*due)(uint64_t t),
          exchange_fn fn,
          void *ctx)
{
    float snap[NODES][NUMEL], g[NODES][NUMEL];
    for (uint64_t t = 0; t < STEPS; t++) {
        if (s > 0 && t >= s && r->exchanged[t - s])
            s_ref_land(r, t - s);
        s_ref_grad(r, t);
        if (due(t)) {
            for (size_t i = 0; i < NODES; i++)
                memcpy(snap[i], r->x[i], sizeof snap[i]);
            memcpy(g, snap, sizeof g);
            fn(ctx, t, g);
            for (size_t i = 0; i < NODES; i++)
                for (size_t e = 0; e < NUMEL; e++)
                    r->d[t][i][e] = g[i][e] - snap[i][e];
            r->exchanged[t] = true;
            if (s == 0) /* today: the gossip in place */
                for (size_t i = 0; i < NODES; i++)
                    memcpy(r->x[i], g[i], sizeof g[i]);
        }
        s_ref_sgd(r);
    }
    for (uint64_t t = 0; s > 0 && t < STEPS; t++)
        if (r->exchanged[t])
            s_ref_land(r, t);
}

static void
s_ref_models(const struct ref *r, float x[NODES][NUMEL])
{
    for (size_t i = 0; i < NODES; i++)
        memcpy(x[i], r->x[i], sizeof x[i]);
}

/* --- D-PSGD: x_i += gamma sum_j w_ij (x_j - x_i) in double, rounded once,
 * neighbours in ascending id order (gossip/dpsgd.c) ---------------------- */

static bool
s_every_step(uint64_t t)
{
    (void)t;
    return true;
}

static void
s_dpsgd(void *ctx, uint64_t t, float s[NODES][NUMEL])
{
    const rumor_topology *topo = ctx;
    float out[NODES][NUMEL];
    size_t phase = rumor_topology_phase_at(topo, t);
    for (uint32_t i = 0; i < NODES; i++) {
        size_t peers = 0;
        const double *w = NULL;
        const uint32_t *nbr =
            rumor_topology_neighbors(topo, phase, i, &peers, &w);
        for (size_t e = 0; e < NUMEL; e++) {
            double acc = 0;
            for (size_t k = 0; k < peers; k++)
                acc += ((double)s[nbr[k]][e] - s[i][e]) * w[k];
            out[i][e] = (float)(s[i][e] + GAMMA * acc);
        }
    }
    memcpy(s, out, sizeof out);
}

static void
s_dpsgd_ref(unsigned stale, float x[NODES][NUMEL])
{
    rumor_topology *topo = NULL;
    struct rumor_diag diag = {0};
    assert_int_equal(rumor_topology_from_spec("ring:4", SEED, &topo, &diag),
                     RUMOR_OK);
    static struct ref r;
    s_ref_new(&r);
    s_ref_run(&r, stale, s_every_step, s_dpsgd, topo);
    s_ref_models(&r, x);
    s_ref_free(&r);
    rumor_topology_destroy(&topo);
}

static void
s_assert_bits(float a[NODES][NUMEL], float b[NODES][NUMEL], const char *what)
{
    for (size_t i = 0; i < NODES; i++)
        for (size_t e = 0; e < NUMEL; e++)
            if (memcmp(&a[i][e], &b[i][e], sizeof(float)) != 0)
                fail_msg("%s: node %zu element %zu: %.9g, reference %.9g",
                         what,
                         i,
                         e,
                         a[i][e],
                         b[i][e]);
}

/* max |a - b| over max |b|. */
static double
s_rel_diff(float a[NODES][NUMEL], float b[NODES][NUMEL])
{
    double diff = 0, norm = 0;
    for (size_t i = 0; i < NODES; i++)
        for (size_t e = 0; e < NUMEL; e++) {
            diff = fmax(diff, fabs((double)a[i][e] - b[i][e]));
            norm = fmax(norm, fabs((double)b[i][e]));
        }
    return diff / norm;
}

static void
test_dpsgd_stale__bits_of_the_recurrence(void **state)
{
    (void)state;
    float sim[3][NODES][NUMEL], ref[NODES][NUMEL];
    for (unsigned s = 0; s <= 2; s++) {
        char extra[128], what[64];
        snprintf(extra,
                 sizeof extra,
                 "--algo dpsgd --robust off --gamma %g --stale %u",
                 GAMMA,
                 s);
        s_sim_models(extra, sim[s]);
        s_dpsgd_ref(s, ref);
        snprintf(what, sizeof what, "dpsgd stale %u", s);
        s_assert_bits(sim[s], ref, what);
    }
    /* S = 1 is today's x = G(x) - lr g, rounded in another order */
    double r01 = s_rel_diff(sim[1], sim[0]), r02 = s_rel_diff(sim[2], sim[0]);
    printf("dpsgd: |S1 - S0| %.3g, |S2 - S0| %.3g (relative)\n", r01, r02);
    assert_true(r01 < 1e-6);
    assert_true(r02 > 1e-3);
}

/* --- overlapped DiLoCo: localsgd, exact average, outer Nesterov --------- */

struct diloco {
    float anchor[NUMEL], v[NUMEL];
    bool have_anchor;
};

static bool
s_sync(uint64_t t)
{
    return t % PERIOD == 0;
}

/* G = anchor - lr (d + mu v) on every node, v = mu v + d, d = anchor -
 * mean_i s_i; the first sync: G = mean_i s_i. */
static void
s_diloco(void *ctx, uint64_t t, float s[NODES][NUMEL])
{
    (void)t;
    struct diloco *o = ctx;
    float lr = (float)OUTER_LR, mu = (float)OUTER_MU;
    for (size_t e = 0; e < NUMEL; e++) {
        double sum = 0;
        for (size_t i = 0; i < NODES; i++)
            sum += s[i][e];
        float mean = (float)(sum / NODES), g = mean;
        if (o->have_anchor) {
            float d = o->anchor[e] - mean;
            o->v[e] = mu * o->v[e] + d;
            g = o->anchor[e] - lr * (d + mu * o->v[e]);
        }
        o->anchor[e] = g;
        for (size_t i = 0; i < NODES; i++)
            s[i][e] = g;
    }
    o->have_anchor = true;
}

static void
s_diloco_ref(unsigned stale, float x[NODES][NUMEL])
{
    static struct ref r;
    struct diloco o = {{0}, {0}, false};
    s_ref_new(&r);
    s_ref_run(&r, stale, s_sync, s_diloco, &o);
    s_ref_models(&r, x);
    s_ref_free(&r);
}

static void
test_diloco_stale__matches_the_recurrence(void **state)
{
    (void)state;
    /* the ring all-reduce averages in float in its own order: a few ulps
     * per sync, over 6 syncs with the outer momentum's gain */
    const double tol = 1e-6;
    float sim[NODES][NUMEL], ref[PERIOD + 1][NODES][NUMEL];
    for (unsigned s = 1; s <= PERIOD; s++)
        s_diloco_ref(s, ref[s]);
    for (unsigned s = 1; s <= PERIOD; s++) {
        char extra[160];
        snprintf(extra,
                 sizeof extra,
                 "--algo localsgd --period %d --outer-lr %g "
                 "--outer-momentum %g --stale %u",
                 PERIOD,
                 OUTER_LR,
                 OUTER_MU,
                 s);
        s_sim_models(extra, sim);
        double own = s_rel_diff(sim, ref[s]);
        /* S = 1 is S = 0 but for rounding: the neighbour is S + 1 */
        double other = s_rel_diff(ref[s < PERIOD ? s + 1 : s - 1], ref[s]);
        printf("diloco stale %u: |sim - ref| %.3g, |ref(S +- 1) - ref(S)| "
               "%.3g (relative)\n",
               s,
               own,
               other);
        if (!(own < tol))
            fail_msg("diloco stale %u: %.3g from the reference", s, own);
        assert_true(other > 100 * tol); /* the landing step shows */
    }
}

/* --- refusals ----------------------------------------------------------- */

static void
test_stale__refused_with_reason(void **state)
{
    (void)state;
    const struct {
        const char *args, *why;
    } bad[] = {
        {"--algo powersgd --stale 1", "--stale needs the model exchange"},
        {"--algo allreduce --stale 2", "allreduce averages gradients"},
        {"--algo localsgd --period 4 --stale 5",
         "localsgd: stale (5) must be at most period (4): a synchronization "
         "lands before the next one of the same fragment starts"},
        {"--algo localsgd --period 4 --delta-codec topk:ratio=0.5 "
         "--ef-alpha 1 --stale 1",
         "stale needs ef_alpha 0"},
    };
    for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
        char cmd[512], out[4096];
        snprintf(cmd,
                 sizeof cmd,
                 "%s sim train --topology ring:4 --steps 2 %s",
                 s_bin(),
                 bad[k].args);
        int status = s_run(cmd, out, sizeof out);
        if (status != 2 || strstr(out, bad[k].why) == NULL)
            fail_msg("'%s': exit %d, '%s'", bad[k].args, status, out);
    }
    /* the check the runtime shares, as the C API */
    struct rumor_gossip_opts o;
    rumor_gossip_opts_default(&o);
    struct rumor_diag diag = {0};
    o.stale = 3;
    assert_int_equal(rumor_gossip_stale_check(&o, false, &diag), RUMOR_OK);
    assert_int_equal(rumor_gossip_stale_check(&o, true, &diag), RUMOR_EINVAL);
    snprintf(o.algo, sizeof o.algo, "localsgd");
    o.period = 3;
    assert_int_equal(rumor_gossip_stale_check(&o, false, &diag), RUMOR_OK);
    o.stale = 0;
    o.ef_alpha = 1;
    assert_int_equal(rumor_gossip_stale_check(&o, false, &diag), RUMOR_OK);
}

/* --- consensus under stale corrections ---------------------------------- */

/* rel_error_current_mean at steps 50, 100 and 200 of `sim consensus`;
 * its output (stderr too) into out when not NULL. */
static void
s_consensus_out(const char *args, double err[3], char *out, size_t cap)
{
    char cmd[512];
    snprintf(cmd,
             sizeof cmd,
             "%s sim consensus --size 10x10 --steps 200 --every 50 %s",
             s_bin(),
             args);
    int status = s_run(cmd, out, cap);
    if (status != 0)
        fail_msg("'%s' exited %d: %s", args, status, out);
    const unsigned long long at[3] = {50, 100, 200};
    for (size_t k = 0; k < 3; k++) {
        char key[16];
        snprintf(key, sizeof key, "\n%llu,", at[k]);
        const char *line = strstr(out, key), *end = NULL;
        assert_non_null(line);
        end = strchr(line + 1, '\n');
        assert_non_null(end);
        while (end[-1] != ',')
            end--;
        err[k] = strtod(end, NULL);
    }
}

static void
s_consensus(const char *args, double err[3])
{
    static char out[8192];
    s_consensus_out(args, err, out, sizeof out);
}

/* Lines of out holding both a and b. */
static int
s_lines_with(const char *out, const char *a, const char *b)
{
    int n = 0;
    for (const char *line = out; line != NULL && *line != '\0';) {
        const char *end = strchr(line, '\n');
        size_t len = end != NULL ? (size_t)(end - line) : strlen(line);
        char buf[1024];
        snprintf(buf, sizeof buf, "%.*s", (int)len, line);
        n += strstr(buf, a) != NULL && strstr(buf, b) != NULL;
        line = end != NULL ? end + 1 : NULL;
    }
    return n;
}

/* Smaller, or at the float floor (relative 1e-12: float32 rounding of
 * models of norm 1 keeps ~1e-15). */
static bool
s_shrinks(double before, double after)
{
    return after < before || after < 1e-12;
}

static void
test_stale_consensus__auto_gamma_keeps_shrinking(void **state)
{
    (void)state;
    const char *topos[] = {"ring:8", "torus:4x4"};
    const char *algos[] = {"dpsgd", "choco", "powergossip"};
    for (size_t t = 0; t < 2; t++)
        for (size_t a = 0; a < 3; a++)
            for (unsigned s = 1; s <= 3; s++) {
                char args[128];
                double err[3];
                snprintf(args,
                         sizeof args,
                         "--topology %s --algo %s --stale %u",
                         topos[t],
                         algos[a],
                         s);
                s_consensus(args, err);
                printf("%s: %.3g %.3g %.3g\n", args, err[0], err[1], err[2]);
                if (!(err[0] < 1 && s_shrinks(err[0], err[1]) &&
                      s_shrinks(err[1], err[2])))
                    fail_msg("%s: consensus error %.3g, %.3g, %.3g at steps "
                             "50, 100, 200",
                             args,
                             err[0],
                             err[1],
                             err[2]);
            }
    /* gamma 1 with S = 2: |1 - lambda| > 1 on the ring's W, it grows */
    double err[3];
    s_consensus("--topology ring:8 --algo dpsgd --gamma 1 --stale 2", err);
    assert_true(err[2] > err[1] && err[1] > 1);
}

/* Streaming DiLoCo with fp4 deltas and stale syncs from the consensus
 * run's starts, which differ by node: each fragment's first sync is
 * discarded (one WARN line per node, the other fragment's at INFO), its
 * next one exact, and the nodes reach consensus. */
static void
test_stale_consensus__localsgd_fragments_apart__warned_then_agree(void **state)
{
    (void)state;
    static char out[8192];
    double err[3];
    s_consensus_out("--topology ring:4 --algo localsgd --period 4 "
                    "--fragments 2 --delta-codec fp4 --stale 2",
                    err,
                    out,
                    sizeof out);
    const char *what = "started from different models";
    assert_int_equal(s_lines_with(out, "WARN", what), NODES);
    assert_int_equal(s_lines_with(out, "INFO", what), NODES);
    printf("localsgd fragments apart, stale 2: %.3g %.3g %.3g\n",
           err[0],
           err[1],
           err[2]);
    assert_true(err[0] < 1e-12 && err[2] < 1e-12);
}

/* --- modelled links ----------------------------------------------------- */

/* The last 'seconds' field of `sim train --link-rate`. */
static double
s_seconds(const char *extra)
{
    char cmd[512], out[8192];
    snprintf(cmd,
             sizeof cmd,
             "%s sim train --topology ring:4 --algo dpsgd --steps 20 "
             "--every 20 --link-rate 10M --compute-ms %s",
             s_bin(),
             extra);
    int status = s_run(cmd, out, sizeof out);
    if (status != 0)
        fail_msg("'%s' exited %d: %s", cmd, status, out);
    const char *comma = strrchr(out, ',');
    assert_non_null(comma);
    return strtod(comma + 1, NULL);
}

static void
test_stale_links__a_step_costs_max_of_compute_and_exchange(void **state)
{
    (void)state;
    /* S = 0: every step compute + exchange (the same bytes every step) */
    const char *compute[] = {"1", "5"};
    const double c[] = {0.001, 0.005};
    for (size_t k = 0; k < 2; k++) {
        char extra[64];
        snprintf(extra, sizeof extra, "%s --stale 0", compute[k]);
        double t0 = s_seconds(extra);
        double tau = t0 / 20 - c[k];
        snprintf(extra, sizeof extra, "%s --stale 1", compute[k]);
        double t1 = s_seconds(extra);
        printf("compute %s ms: exchange %.4g s; S = 0: %.6g s, S = 1: "
               "%.6g s\n",
               compute[k],
               tau,
               t0,
               t1);
        assert_true(tau > c[0] && tau < c[1]); /* one case each way */
        assert_float_equal(t1, 20 * fmax(c[k], tau), 1e-9 * t0);
    }
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_dpsgd_stale__bits_of_the_recurrence),
        cmocka_unit_test(test_diloco_stale__matches_the_recurrence),
        cmocka_unit_test(test_stale__refused_with_reason),
        cmocka_unit_test(test_stale_consensus__auto_gamma_keeps_shrinking),
        cmocka_unit_test(
            test_stale_consensus__localsgd_fragments_apart__warned_then_agree),
        cmocka_unit_test(
            test_stale_links__a_step_costs_max_of_compute_and_exchange),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
