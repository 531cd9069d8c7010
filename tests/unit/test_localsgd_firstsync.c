/*
 * localsgd's first synchronization with a delta codec (docs/gossip.md,
 * "The first synchronization"): the model an instance is made with is
 * each fragment's tentative anchor, the first sync is already the
 * compressed one, and every payload ends with the crc32c of its sender's
 * anchor. Checked on 4 nodes (ring:4, the simulator) against the plain
 * recurrences written out here, the fp4 codec as a black box (encode,
 * decode_add), for whole-model and fragmented syncs:
 *   - nodes that start equal: every sync, the first included, is the
 *     compressed one (the outer Nesterov step from the initial model), bit
 *     for bit, and node 0's payload bytes at the first sync are its
 *     all-gather's (n - 1 codec payloads, 4 bytes of checksum each), well
 *     below an exact sync's; no warning;
 *   - nodes that start apart: the first sync of each fragment is
 *     discarded on every node (the models keep their bits, the error
 *     memory stays as before it), one WARN line per node says the nodes
 *     started from different models, the fragment's next sync is the
 *     exact all-reduce (its bytes), the syncs after it compressed again,
 *     and without inner steps the nodes end at the mean of their starts;
 *   - a state saved while anchors are tentative, confirmed or dropped
 *     resumes bit for bit; a tentative flag without an anchor is refused.
 */
#include "tests/cmocka_compat.h"

#include "rumor/compress.h"
#include "rumor/gossip.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define NODES 4
#define NUMEL 2003 /* cut unevenly by 2 and 3 fragments */
#define CODEC "fp4"
#define CRC   4 /* the anchor's checksum after each payload */

struct cluster {
    rumor_topology *topo;
    float x[NODES][NUMEL];
    rumor_gossip *g[NODES];
    rumor_sim *sim;
};

static float
s_start(size_t e, size_t node)
{
    return (float)sin(0.37 * (double)e + 1.1 * (double)node);
}

static void
s_opts(struct rumor_gossip_opts *o, unsigned period, unsigned frags)
{
    rumor_gossip_opts_default(o);
    snprintf(o->algo, sizeof o->algo, "localsgd");
    snprintf(o->delta_codec, sizeof o->delta_codec, CODEC);
    o->period = period;
    o->fragments = frags;
    o->outer_lr = 0.7;
    o->outer_momentum = 0.9;
}

/* Every node starts from node 0's model (same) or its own, plus shift. */
static void
s_new_at(struct cluster *c,
         const struct rumor_gossip_opts *o,
         bool same,
         float shift)
{
    memset(c, 0, sizeof *c);
    assert_int_equal(rumor_topology_from_spec("ring:4", 1, &c->topo, NULL),
                     RUMOR_OK);
    for (size_t i = 0; i < NODES; i++) {
        for (size_t e = 0; e < NUMEL; e++)
            c->x[i][e] = s_start(e, same ? 0 : i) + shift;
        struct rumor_tensor t = {c->x[i], 1, {NUMEL}};
        struct rumor_model m = {&t, 1};
        struct rumor_diag diag = {0};
        if (rumor_gossip_new(o, c->topo, (uint32_t)i, &m, &c->g[i], &diag) !=
            RUMOR_OK)
            fail_msg("gossip_new: %s", diag.msg);
    }
    assert_int_equal(rumor_sim_new(c->g, NODES, &c->sim), RUMOR_OK);
}

static void
s_new(struct cluster *c, const struct rumor_gossip_opts *o, bool same)
{
    s_new_at(c, o, same, 0.0f);
}

static void
s_free(struct cluster *c)
{
    rumor_sim_destroy(&c->sim);
    for (size_t i = 0; i < NODES; i++)
        rumor_gossip_destroy(&c->g[i]);
    rumor_topology_destroy(&c->topo);
}

/* The inner step of node i: a pull towards its own target, in float. */
static void
s_local(float *x, size_t i, uint64_t step)
{
    for (size_t e = 0; e < NUMEL; e++) {
        float target = (float)((e * 5 + i * 3 + step) % 9) - 4.0f;
        x[e] -= 0.1f * (x[e] - target);
    }
}

/* Payload bytes node 0 sent since the counters (headers taken off). */
static uint64_t
s_payload(const struct cluster *c, uint64_t *bytes, uint64_t *msgs)
{
    uint64_t b = rumor_sim_bytes_sent(c->sim, 0), m = 0;
    for (size_t j = 0; j < NODES; j++)
        m += rumor_sim_messages_edge(c->sim, 0, j);
    uint64_t payload = (b - *bytes) - (m - *msgs) * RUMOR_FRAME_HEADER_BYTES;
    *bytes = b;
    *msgs = m;
    return payload;
}

/* The fragment syncing at step (SPEC), or -1. */
static int
s_frag_at(uint64_t step, unsigned period, unsigned frags)
{
    for (unsigned f = 0; f < frags; f++)
        if (step % period == f * period / frags)
            return (int)f;
    return -1;
}

/* --- the reference -------------------------------------------------------- */

enum { NONE, TENTATIVE, CONFIRMED };

struct ref {
    float x[NODES][NUMEL];
    float anchor[NODES][NUMEL]; /* each node's: equal once confirmed */
    float v[NUMEL], e[NODES][NUMEL];
    int state[8];
    rumor_codec *codec;
};

static void
s_ref_init(struct ref *r, const struct cluster *c, unsigned frags)
{
    memset(r, 0, sizeof *r);
    memcpy(r->x, c->x, sizeof r->x);
    memcpy(r->anchor, c->x, sizeof r->anchor);
    for (unsigned f = 0; f < frags; f++)
        r->state[f] = TENTATIVE;
    assert_int_equal(rumor_codec_new(CODEC, &r->codec, NULL), RUMOR_OK);
}

/* The compressed sync of [lo, hi): each node sends C(anchor - x + e) and
 * keeps e = that - C(that); all apply x = anchor - lr (d + mu v), v = mu v
 * + d, d the payloads' mean in node order, when every anchor has the
 * same bits, else nothing changes. Returns node 0's payload bytes (the
 * all-gather: in round r it forwards node -r's payload). */
static uint64_t
s_ref_compressed(struct ref *r, int f, size_t lo, size_t hi, bool *applied)
{
    size_t n = hi - lo;
    static uint8_t out[NODES][8192];
    size_t len[NODES];
    float *d = malloc(n * sizeof *d), *approx = malloc(n * sizeof *approx);
    float *e_new[NODES];
    bool equal = true;
    for (size_t i = 0; i < NODES; i++) {
        e_new[i] = malloc(n * sizeof(float));
        for (size_t k = 0; k < n; k++)
            d[k] = (r->anchor[i][lo + k] - r->x[i][lo + k]) + r->e[i][lo + k];
        assert_int_equal(rumor_codec_encode(r->codec,
                                            d,
                                            n,
                                            0,
                                            0,
                                            out[i],
                                            sizeof out[i],
                                            &len[i],
                                            approx),
                         RUMOR_OK);
        for (size_t k = 0; k < n; k++)
            e_new[i][k] = d[k] - approx[k];
        equal = equal && memcmp(r->anchor[i] + lo,
                                r->anchor[0] + lo,
                                n * sizeof(float)) == 0;
    }
    *applied = equal;
    if (equal) {
        memset(d, 0, n * sizeof *d);
        for (size_t j = 0; j < NODES; j++)
            assert_int_equal(rumor_codec_decode_add(r->codec,
                                                    out[j],
                                                    len[j],
                                                    1.0f / NODES,
                                                    d,
                                                    n),
                             RUMOR_OK);
        float lr = 0.7f, mu = 0.9f;
        for (size_t k = 0; k < n; k++) {
            size_t el = lo + k;
            r->v[el] = mu * r->v[el] + d[k];
            float x = r->anchor[0][el] - lr * (d[k] + mu * r->v[el]);
            for (size_t i = 0; i < NODES; i++) {
                r->x[i][el] = r->anchor[i][el] = x;
                r->e[i][el] = e_new[i][k];
            }
        }
    }
    r->state[f] = equal ? CONFIRMED : NONE;
    uint64_t sent = 0;
    for (size_t round = 0; round + 1 < NODES; round++)
        sent += len[(NODES - round) % NODES] + CRC;
    for (size_t i = 0; i < NODES; i++)
        free(e_new[i]);
    free(d);
    free(approx);
    return sent;
}

/* Node 0's payload bytes in an exact sync of n floats: the all-reduce's
 * 2 (n - 1) chunks (chunk c = [c n / N, (c + 1) n / N)); it sends chunks
 * 1 and 2 once, 0 and 3 twice (gossip/ring.c). */
static uint64_t
s_exact_bytes(size_t n)
{
    size_t c0 = n / NODES, c3 = n - 3 * n / NODES;
    return (n + c0 + c3) * sizeof(float);
}

/* The exact sync of [lo, hi): every node the same bits, within 1e-5 of the
 * mean (the ring sums in float in its own order); the reference takes
 * those bits as the anchor. Returns node 0's payload bytes. */
static uint64_t
s_ref_exact(struct ref *r, const struct cluster *c, size_t lo, size_t hi)
{
    size_t n = hi - lo;
    for (size_t k = lo; k < hi; k++) {
        double mean = 0;
        for (size_t i = 0; i < NODES; i++)
            mean += r->x[i][k];
        mean /= NODES;
        for (size_t i = 0; i < NODES; i++) {
            assert_memory_equal(&c->x[i][k], &c->x[0][k], sizeof(float));
            if (fabs(c->x[i][k] - mean) > 1e-5 * (1 + fabs(mean)))
                fail_msg("exact sync, element %zu: %.9g, mean %.9g",
                         k,
                         c->x[i][k],
                         mean);
            r->x[i][k] = r->anchor[i][k] = c->x[0][k];
        }
    }
    return s_exact_bytes(n);
}

/* --- the runs --------------------------------------------------------------
 */

/* stderr into a file while a run logs (the WARN lines are counted). */
struct capture {
    int saved;
    FILE *f;
    char text[1 << 16];
};

static struct capture *s_capturing; /* for the teardown of a failed test */

static void
s_capture_start(struct capture *cap)
{
    fflush(stderr);
    cap->f = tmpfile();
    assert_non_null(cap->f);
    cap->saved = dup(2);
    assert_true(cap->saved >= 0 && dup2(fileno(cap->f), 2) == 2);
    s_capturing = cap;
}

static void
s_capture_end(struct capture *cap)
{
    fflush(stderr);
    dup2(cap->saved, 2);
    close(cap->saved);
    rewind(cap->f);
    size_t n = fread(cap->text, 1, sizeof cap->text - 1, cap->f);
    cap->text[n] = '\0';
    fclose(cap->f);
    s_capturing = NULL;
}

/* A test that failed while capturing gets its stderr back, and what it
 * logged. */
static int
s_teardown(void **state)
{
    (void)state;
    struct capture *cap = s_capturing;
    if (cap != NULL) {
        s_capture_end(cap);
        fputs(cap->text, stderr);
    }
    return 0;
}

/* Lines of the capture holding `what` at `level` ("WARN", "INFO"). */
static int
s_count(const struct capture *cap, const char *level, const char *what)
{
    int n = 0;
    for (const char *line = cap->text; *line != '\0';) {
        const char *end = strchr(line, '\n');
        size_t len = end != NULL ? (size_t)(end - line) : strlen(line);
        char buf[1024];
        snprintf(buf, sizeof buf, "%.*s", (int)len, line);
        n += strstr(buf, level) != NULL && strstr(buf, what) != NULL;
        line += len + (end != NULL);
    }
    return n;
}

struct outcome {
    uint64_t first_bytes[8], exact_bytes[8];
    int discarded, exact, compressed;
    int warn, info;
};

/* steps 0 .. 3 periods - 1 with inner steps; the models are checked
 * against the reference after every step. */
static void
s_run(unsigned period, unsigned frags, bool same, struct outcome *out)
{
    struct rumor_gossip_opts o;
    s_opts(&o, period, frags);
    static struct cluster c;
    static struct ref r;
    memset(out, 0, sizeof *out);
    static struct capture cap;
    s_capture_start(&cap);
    s_new(&c, &o, same);
    s_ref_init(&r, &c, frags);
    uint64_t bytes = 0, msgs = 0;
    for (uint64_t step = 0; step < 3 * period; step++) {
        for (size_t i = 0; i < NODES; i++) {
            assert_int_equal(rumor_gossip_step_ahead(c.g[i]), RUMOR_OK);
            s_local(c.x[i], i, step);
            s_local(r.x[i], i, step);
        }
        assert_int_equal(rumor_sim_step(c.sim, step), RUMOR_OK);
        uint64_t sent = s_payload(&c, &bytes, &msgs), want = 0;
        int f = s_frag_at(step, period, frags);
        if (f >= 0) {
            size_t lo = (size_t)f * NUMEL / frags;
            size_t hi = ((size_t)f + 1) * NUMEL / frags;
            bool first = r.state[f] == TENTATIVE, applied = false;
            if (r.state[f] == NONE) {
                want = s_ref_exact(&r, &c, lo, hi);
                r.state[f] = CONFIRMED;
                out->exact_bytes[f] = want;
                out->exact++;
            } else {
                want = s_ref_compressed(&r, f, lo, hi, &applied);
                out->discarded += !applied;
                out->compressed += applied;
            }
            if (first)
                out->first_bytes[f] = sent;
        }
        assert_int_equal(sent, want);
        for (size_t i = 0; i < NODES; i++)
            if (memcmp(c.x[i], r.x[i], sizeof r.x[i]) != 0)
                fail_msg("period %u F %u %s: step %llu node %zu: not the "
                         "reference's bits",
                         period,
                         frags,
                         same ? "same starts" : "apart",
                         (unsigned long long)step,
                         i);
    }
    s_capture_end(&cap);
    out->warn = s_count(&cap, "WARN", "started from different models");
    out->info = s_count(&cap, "INFO", "started from different models");
    rumor_codec_destroy(&r.codec);
    s_free(&c);
}

static const unsigned s_cases[][2] = {{6, 1}, {6, 3}, {5, 2}};

static void
test_firstsync__same_starts__compressed_from_the_first(void **state)
{
    (void)state;
    for (size_t k = 0; k < sizeof s_cases / sizeof s_cases[0]; k++) {
        unsigned period = s_cases[k][0], frags = s_cases[k][1];
        struct outcome out;
        s_run(period, frags, true, &out);
        assert_int_equal(out.discarded, 0);
        assert_int_equal(out.exact, 0);
        assert_int_equal(out.compressed, 3 * (int)frags);
        assert_int_equal(out.warn, 0);
        /* far below what an exact sync of the fragment sends */
        for (unsigned f = 0; f < frags; f++) {
            size_t n = (f + 1) * NUMEL / frags - f * NUMEL / frags;
            assert_true(out.first_bytes[f] * 3 < s_exact_bytes(n));
        }
    }
}

static void
test_firstsync__apart__discarded_warned_then_exact(void **state)
{
    (void)state;
    for (size_t k = 0; k < sizeof s_cases / sizeof s_cases[0]; k++) {
        unsigned period = s_cases[k][0], frags = s_cases[k][1];
        struct outcome out;
        s_run(period, frags, false, &out);
        /* per fragment: discarded, exact, compressed */
        assert_int_equal(out.discarded, (int)frags);
        assert_int_equal(out.exact, (int)frags);
        assert_int_equal(out.compressed, (int)frags);
        /* one WARN line per node, the later fragments' at INFO */
        assert_int_equal(out.warn, NODES);
        assert_int_equal(out.info, NODES * ((int)frags - 1));
        for (unsigned f = 0; f < frags; f++)
            assert_true(out.first_bytes[f] * 3 < out.exact_bytes[f]);
    }
}

/* Without inner steps, nodes that start apart end with the same bits,
 * at the mean of their starts. */
static void
test_firstsync__apart_no_inner_steps__consensus(void **state)
{
    (void)state;
    for (size_t k = 0; k < sizeof s_cases / sizeof s_cases[0]; k++) {
        struct rumor_gossip_opts o;
        s_opts(&o, s_cases[k][0], s_cases[k][1]);
        static struct cluster c;
        static struct capture cap;
        s_capture_start(&cap);
        s_new(&c, &o, false);
        for (uint64_t step = 0; step < 3 * o.period; step++)
            assert_int_equal(rumor_sim_step(c.sim, step), RUMOR_OK);
        s_capture_end(&cap);
        assert_int_equal(s_count(&cap, "WARN", "different models"), NODES);
        for (size_t e = 0; e < NUMEL; e++) {
            double mean = 0;
            for (size_t i = 0; i < NODES; i++)
                mean += s_start(e, i);
            mean /= NODES;
            for (size_t i = 0; i < NODES; i++)
                assert_memory_equal(&c.x[i][e], &c.x[0][e], sizeof(float));
            assert_float_equal(c.x[0][e], mean, 1e-6);
        }
        s_free(&c);
    }
}

/* A run stopped after step 2 (F = 3, period 6: fragment 0 and 1 synced,
 * confirmed or dropped, fragment 2 tentative) and resumed in instances
 * made from other models (their own tentative anchors) from the saved
 * states and models ends with the uninterrupted run's bits. */
static void
test_firstsync__state_mid_run__resumes_bit_identically(void **state)
{
    (void)state;
    for (int same = 0; same < 2; same++) {
        struct rumor_gossip_opts o;
        s_opts(&o, 6, 3);
        static struct cluster a, b;
        static struct capture cap;
        s_capture_start(&cap); /* the apart run's warnings */
        s_new(&a, &o, same);
        s_new_at(&b, &o, same, 0.25f);
        for (uint64_t step = 0; step <= 2; step++) {
            for (size_t i = 0; i < NODES; i++)
                s_local(a.x[i], i, step);
            assert_int_equal(rumor_sim_step(a.sim, step), RUMOR_OK);
        }
        for (size_t i = 0; i < NODES; i++) {
            rumor_buf st;
            rumor_buf_init(&st, 1u << 20);
            assert_int_equal(rumor_gossip_state_save(a.g[i], &st), RUMOR_OK);
            assert_int_equal(
                rumor_gossip_state_load(b.g[i], st.data, st.len, NULL),
                RUMOR_OK);
            memcpy(b.x[i], a.x[i], sizeof a.x[i]);
            rumor_buf_free(&st);
        }
        for (uint64_t step = 3; step < 18; step++)
            for (struct cluster *c = &a; c != NULL; c = c == &a ? &b : NULL) {
                for (size_t i = 0; i < NODES; i++)
                    s_local(c->x[i], i, step);
                assert_int_equal(rumor_sim_step(c->sim, step), RUMOR_OK);
            }
        s_capture_end(&cap);
        assert_memory_equal(a.x, b.x, sizeof a.x);
        s_free(&a);
        s_free(&b);
    }
}

/* A fresh instance's state says its anchor is tentative (flags 1 | 16 in
 * the one-fragment layout, docs/protocol.md); a tentative flag without an
 * anchor, or an unknown bit, is refused. */
static void
test_firstsync__state_flags__tentative_saved_bad_refused(void **state)
{
    (void)state;
    struct rumor_gossip_opts o;
    s_opts(&o, 4, 1);
    static struct cluster c;
    s_new(&c, &o, true);
    rumor_buf st;
    rumor_buf_init(&st, 1u << 20);
    assert_int_equal(rumor_gossip_state_save(c.g[1], &st), RUMOR_OK);
    /* the body's first word, after the state's header (docs/protocol.md:
     * magic, version, algo[32], self, nodes, numel, robust's steps and
     * ema, body-len: 80 bytes) */
    const size_t at = 80;
    uint32_t flags = 0, bad[] = {16, 32, 8 | 16};
    assert_true(st.len > at + 4);
    memcpy(&flags, st.data + at, 4);
    assert_int_equal(flags, 1 | 16);
    assert_int_equal(rumor_gossip_state_load(c.g[1], st.data, st.len, NULL),
                     RUMOR_OK);
    for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
        memcpy(st.data + at, &bad[k], 4);
        assert_int_equal(rumor_gossip_state_load(c.g[1], st.data, st.len, NULL),
                         RUMOR_EPROTO);
    }
    rumor_buf_free(&st);
    s_free(&c);
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(
            test_firstsync__same_starts__compressed_from_the_first,
            s_teardown),
        cmocka_unit_test_teardown(
            test_firstsync__apart__discarded_warned_then_exact,
            s_teardown),
        cmocka_unit_test_teardown(
            test_firstsync__apart_no_inner_steps__consensus,
            s_teardown),
        cmocka_unit_test_teardown(
            test_firstsync__state_mid_run__resumes_bit_identically,
            s_teardown),
        cmocka_unit_test(
            test_firstsync__state_flags__tentative_saved_bad_refused),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
