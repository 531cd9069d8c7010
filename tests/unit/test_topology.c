/*
 * topology: parser diagnostics (a table of broken files, each with its exact
 * "file:line:col: message"), Metropolis-Hastings weights, generators,
 * spectral gaps against closed forms and against an independent power
 * iteration, and format/parse round trips.
 */
#include "tests/cmocka_compat.h"

#include "rumor/topology.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A CURVE public key in Z85 (from the ZeroMQ RFC 32 test vector). */
#define KEY_A "ed25519:gJMF8<fjCV9ph-%5llCp1CglsZnTDx*6EaZqUk(Y"
#define KEY_B "ed25519:a$3@.M-VKT0@*DVPU$7qJV)REo<n]ITBNx87&Q4q"
/* a CURVE public key from before signing (zmq_curve_keypair) */
#define KEY_OLD "rq:rM>}U?@Lns47E1%kR.o@n%FcmmsL/@{H8]yf7"

static rumor_topology *
s_parse_ok(const char *text)
{
    rumor_topology *t = NULL;
    struct rumor_diag diag = {0};
    rumor_err rc =
        rumor_topology_parse(text, strlen(text), "t.topo", &t, &diag);
    if (rc != RUMOR_OK) {
        char msg[600];
        rumor_diag_format(&diag, msg, sizeof msg);
        fail_msg("unexpected error %s: %s", rumor_errname(rc), msg);
    }
    return t;
}

static rumor_topology *
s_generate(const char *spec, uint64_t seed)
{
    rumor_topology *t = NULL;
    struct rumor_diag diag = {0};
    rumor_err rc = rumor_topology_from_spec(spec, seed, &t, &diag);
    if (rc != RUMOR_OK)
        fail_msg("%s: %s (%s)", spec, diag.msg, rumor_errname(rc));
    return t;
}

static double
s_gap(const rumor_topology *t)
{
    double gap = -1;
    assert_int_equal(rumor_topology_spectral_gap(t, &gap), RUMOR_OK);
    return gap;
}

/* --- broken inputs ---------------------------------------------------- */

static const struct {
    const char *text;
    size_t len; /* 0: strlen(text) */
    rumor_err rc;
    const char *diag;
} s_broken[] = {
    {"nodes 4\nedge 0 1\nedge 1 2\nedge 2 3\nedge 3 0\nfoo 1\n",
     0,
     RUMOR_EPROTO,
     "t.topo:6:1: unknown directive 'foo' (expected node, nodes, edge, phase "
     "or matrix)"},
    {"edge 0 1\nedge 1 1\n",
     0,
     RUMOR_EPROTO,
     "t.topo:2:8: self edge 1-1 (a node's own weight is implied)"},
    {"nodes 3\nedge 0 1\nedge 1 5\n",
     0,
     RUMOR_EPROTO,
     "t.topo:3:8: node id 5 out of range (3 nodes: 0..2)"},
    {"edge 0 1\nedge 1 2\nedge 1 0\n",
     0,
     RUMOR_EPROTO,
     "t.topo:3: duplicate edge 0-1 (first at line 1)"},
    {"nodes 4\nedge 0 1\nedge 2 3\n",
     0,
     RUMOR_EPROTO,
     "t.topo: graph is not connected: node 2 cannot reach node 0"},
    {"edge 0 1 0.7\nedge 1 2 0.6\n",
     0,
     RUMOR_EPROTO,
     "t.topo:2: weights of node 1 sum to 1.3 > 1"},
    {"edge 0 1 -0.5\n",
     0,
     RUMOR_EPROTO,
     "t.topo:1:10: weight must be in (0, 1], got -0.5"},
    {"edge 0 1 0\n",
     0,
     RUMOR_EPROTO,
     "t.topo:1:10: weight must be in (0, 1], got 0"},
    {"edge 0 1 abc\n", 0, RUMOR_EPROTO, "t.topo:1:10: invalid weight 'abc'"},
    {"edge 0 1 nan\n", 0, RUMOR_EPROTO, "t.topo:1:10: invalid weight 'nan'"},
    {"edge 0 x\n", 0, RUMOR_EPROTO, "t.topo:1:8: expected node id, got 'x'"},
    {"edge 0 -1\n", 0, RUMOR_EPROTO, "t.topo:1:8: expected node id, got '-1'"},
    {"edge 0\n", 0, RUMOR_EPROTO, "t.topo:1:7: `edge` needs two node ids"},
    {"edge 0 1 0.5 extra\n",
     0,
     RUMOR_EPROTO,
     "t.topo:1:14: unexpected 'extra' at end of line"},
    {"node 0 tcp://a:1\nnode 0 tcp://b:2\n",
     0,
     RUMOR_EPROTO,
     "t.topo:2:6: duplicate node 0 (first at line 1)"},
    {"node 0 http://x\n",
     0,
     RUMOR_EPROTO,
     "t.topo:1:8: endpoint must be tcp://host:port, ipc://path or "
     "inproc://name"},
    {"node 0 tcp://host\n",
     0,
     RUMOR_EPROTO,
     "t.topo:1:8: tcp endpoint needs a host and a port 1-65535 "
     "(tcp://host:port)"},
    {"node 0 tcp://a:1 key=short\n",
     0,
     RUMOR_EPROTO,
     "t.topo:1:22: key must be ed25519: and 40 Z85 characters (a node's "
     "public key, as printed by `rumor keygen`)"},
    {"node 0 tcp://a:1 key=" KEY_OLD "\n",
     0,
     RUMOR_EPROTO,
     "t.topo:1:22: a CURVE key from before signed membership, which cannot "
     "sign: make the node a signing key with `rumor keygen --out BASE` (old "
     "BASE.key moved aside) and list the ed25519:... key it prints "
     "(docs/protocol.md, \"Keys\")"},
    {"node 0 tcp://a:1 owner=me\n",
     0,
     RUMOR_EPROTO,
     "t.topo:1:18: unknown attribute 'owner=me' (expected key=ed25519:Z85)"},
    {"node 0 tcp://a:1\nnode 1 tcp://a:1\nedge 0 1\n",
     0,
     RUMOR_EPROTO,
     "t.topo:2: node 1 has the same endpoint as node 0 (line 1)"},
    {"node 0 tcp://a:1 key=" KEY_A "\nnode 1 tcp://a:2 key=" KEY_A
     "\nedge 0 1\n",
     0,
     RUMOR_EPROTO,
     "t.topo:2: node 1 has the same key as node 0 (line 1)"},
    {"node 0 tcp://a:1\nnode 2 tcp://a:3\nedge 0 2\n",
     0,
     RUMOR_EPROTO,
     "t.topo: node 1 has no `node` line (once one node has an endpoint, "
     "every node needs one)"},
    {"node 0 tcp://a:1\nnode 1 tcp://a:2\nedge 0 2\n",
     0,
     RUMOR_EPROTO,
     "t.topo:3:8: node id 2 out of range (2 nodes: 0..1)"},
    {"nodes 2\nnodes 2\n",
     0,
     RUMOR_EPROTO,
     "t.topo:2:1: duplicate `nodes` line (first at line 1)"},
    {"nodes 0\n", 0, RUMOR_EPROTO, "t.topo:1:7: node count is 0"},
    {"nodes 5000\n",
     0,
     RUMOR_ETOOBIG,
     "t.topo:1:7: node count 5000 is too large (at most 4096)"},
    {"matrix 2\n0.5 0.5\n0.4 0.6\n",
     0,
     RUMOR_EPROTO,
     "t.topo:3: matrix is not symmetric: w[0][1] = 0.5 but w[1][0] = 0.4"},
    {"matrix 2\n0.5 0.4\n0.4 0.6\n",
     0,
     RUMOR_EPROTO,
     "t.topo:2: row 0 sums to 0.9, not 1"},
    {"matrix 3\n1 0 0\n0 1\n",
     0,
     RUMOR_EPROTO,
     "t.topo:3:4: matrix row has 2 values, expected 3"},
    {"matrix 2\n0.5 0.5 0\n",
     0,
     RUMOR_EPROTO,
     "t.topo:2:9: matrix row has more than 2 values"},
    {"matrix 2\n0.5 0.5\n",
     0,
     RUMOR_EPROTO,
     "t.topo:3:1: matrix ends after 1 of 2 rows"},
    {"matrix 2\n1 0\n0 1\n",
     0,
     RUMOR_EPROTO,
     "t.topo: graph is not connected: node 1 cannot reach node 0"},
    {"matrix 1\n1\nnodes 509\n",
     0,
     RUMOR_EPROTO,
     "t.topo:3:7: node count 509 differs from `matrix 1`"},
    {"nodes 2\nedge 0 1\nmatrix 2\n",
     0,
     RUMOR_EPROTO,
     "t.topo:3:1: `matrix` cannot be combined with `edge`, `phase` or "
     "another `matrix`"},
    {"matrix 2\n0.5 0.5\n0.5 0.5\nedge 0 1\n",
     0,
     RUMOR_EPROTO,
     "t.topo:4:1: only `node` lines may follow a complete `matrix`"},
    {"edge 0 1\nphase 0\n",
     0,
     RUMOR_EPROTO,
     "t.topo:2:1: edges before the first `phase` line belong to no phase: "
     "start with `phase 0`"},
    {"phase 0\nedge 0 1\nphase 2\n",
     0,
     RUMOR_EPROTO,
     "t.topo:3:7: phases must be numbered in order: expected 1, got 2"},
    {"",
     0,
     RUMOR_EPROTO,
     "t.topo: no nodes: the file declares neither nodes nor edges"},
    {"# only a comment\n\n   \n",
     0,
     RUMOR_EPROTO,
     "t.topo: no nodes: the file declares neither nodes nor edges"},
    {"edge 0 1\0\n", 10, RUMOR_EPROTO, "t.topo:1:1: NUL byte in a text file"},
};

static void
test_parse__broken_files__exact_line_and_column(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof s_broken / sizeof s_broken[0]; i++) {
        const char *text = s_broken[i].text;
        size_t len = s_broken[i].len ? s_broken[i].len : strlen(text);
        rumor_topology *t = (rumor_topology *)0x1;
        struct rumor_diag diag = {0};
        rumor_err rc = rumor_topology_parse(text, len, "t.topo", &t, &diag);
        char got[600];
        rumor_diag_format(&diag, got, sizeof got);
        if (rc != s_broken[i].rc || strcmp(got, s_broken[i].diag) != 0)
            fail_msg("row %zu: got %s \"%s\", want %s \"%s\"",
                     i,
                     rumor_errname(rc),
                     got,
                     rumor_errname(s_broken[i].rc),
                     s_broken[i].diag);
        assert_null(t);
    }
}

/* --- valid files -------------------------------------------------------- */

static void
test_parse__no_weights__metropolis_hastings(void **state)
{
    (void)state;
    /* A path 0-1-2 plus 1-3: degrees 1, 3, 1, 1. */
    rumor_topology *t = s_parse_ok("# star-ish\nedge 0 1\nedge 1 2 # mid\n"
                                   "edge 1 3\n");
    assert_int_equal(rumor_topology_nodes(t), 4);
    assert_int_equal(rumor_topology_edges(t, 0), 3);
    assert_float_equal(rumor_topology_weight(t, 0, 0, 1), 0.25, 1e-15);
    assert_float_equal(rumor_topology_weight(t, 0, 1, 0), 0.25, 1e-15);
    assert_float_equal(rumor_topology_self_weight(t, 0, 0), 0.75, 1e-15);
    assert_float_equal(rumor_topology_self_weight(t, 0, 1), 0.25, 1e-15);
    assert_float_equal(rumor_topology_weight(t, 0, 0, 2), 0.0, 0);
    size_t count = 0;
    const double *w = NULL;
    const uint32_t *nbr = rumor_topology_neighbors(t, 0, 1, &count, &w);
    assert_int_equal(count, 3);
    assert_int_equal(nbr[0], 0);
    assert_int_equal(nbr[1], 2);
    assert_int_equal(nbr[2], 3);
    assert_float_equal(w[2], 0.25, 1e-15);
    assert_true(rumor_topology_doubly_stochastic(t));
    rumor_topology_destroy(&t);
    assert_null(t);
    rumor_topology_destroy(&t);
}

/* Z85 keys contain '#': it starts a comment only after white space. */
static void
test_parse__hash_inside_a_key__not_a_comment(void **state)
{
    (void)state;
    /* A real public key (`rumor keygen`) with a '#' in it. */
    const char *key = "ed25519:d$f5XqpOZZ!oqk(TtE^Nt!f7NY(.#W5#n[y/=mK[";
    char text[256];
    snprintf(text,
             sizeof text,
             "node 0 tcp://a:1 key=%s # a comment\nnode 1 tcp://a:2#x\n"
             "edge 0 1#not a comment start either\n",
             key);
    rumor_topology *t = NULL;
    struct rumor_diag diag = {0};
    rumor_err rc = rumor_topology_parse(text, strlen(text), "t", &t, &diag);
    /* "tcp://a:2#x" is one token (a bad port) and "1#not" a bad id. */
    assert_int_equal(rc, RUMOR_EPROTO);
    assert_int_equal(diag.line, 2);
    snprintf(text,
             sizeof text,
             "node 0 tcp://a:1 key=%s # a comment\nnode 1 tcp://a:2 #x\n"
             "edge 0 1\t# tab then comment\n",
             key);
    t = s_parse_ok(text);
    assert_string_equal(rumor_topology_key(t, 0), key);
    rumor_topology_destroy(&t);
}

static void
test_parse__given_and_derived_weights__mix(void **state)
{
    (void)state;
    rumor_topology *t = s_parse_ok("edge 0 1 0.5\nedge 1 2\n");
    assert_float_equal(rumor_topology_weight(t, 0, 0, 1), 0.5, 1e-15);
    /* 1-2 derived: degrees 2 and 1 -> 1/3. */
    assert_float_equal(rumor_topology_weight(t, 0, 1, 2), 1.0 / 3, 1e-15);
    assert_float_equal(rumor_topology_self_weight(t, 0, 1), 1.0 / 6, 1e-15);
    assert_true(rumor_topology_doubly_stochastic(t));
    rumor_topology_destroy(&t);
}

static void
test_parse__nodes_with_endpoints_and_keys__kept(void **state)
{
    (void)state;
    rumor_topology *t =
        s_parse_ok("nodes 2\nnode 0 tcp://127.0.0.1:7000 key=" KEY_A
                   "\nnode 1 ipc:///tmp/rumor-1\tkey=" KEY_B "\nedge 0 1\n");
    assert_string_equal(rumor_topology_endpoint(t, 0), "tcp://127.0.0.1:7000");
    assert_string_equal(rumor_topology_key(t, 0), KEY_A);
    assert_string_equal(rumor_topology_endpoint(t, 1), "ipc:///tmp/rumor-1");
    assert_string_equal(rumor_topology_key(t, 1), KEY_B);
    struct rumor_diag diag = {0};
    assert_int_equal(
        rumor_topology_set_node(t, 1, "tcp://[::1]:9", NULL, &diag),
        RUMOR_OK);
    assert_string_equal(rumor_topology_endpoint(t, 1), "tcp://[::1]:9");
    assert_int_equal(rumor_topology_set_node(t, 1, NULL, "bad", &diag),
                     RUMOR_EINVAL);
    assert_int_equal(rumor_topology_set_node(t, 2, NULL, NULL, &diag),
                     RUMOR_EINVAL);
    rumor_topology_destroy(&t);
}

static void
test_parse__dense_matrix__edges_and_gap(void **state)
{
    (void)state;
    rumor_topology *t = s_parse_ok("matrix 3 # a path\n"
                                   "0.5 0.5 0\n"
                                   "0.5 0.25 0.25\n"
                                   "0 0.25 0.75\n");
    assert_int_equal(rumor_topology_edges(t, 0), 2);
    assert_float_equal(rumor_topology_self_weight(t, 0, 1), 0.25, 1e-15);
    assert_float_equal(rumor_topology_weight(t, 0, 2, 1), 0.25, 1e-15);
    /* By hand: lambda_1 = 1, so l2 + l3 = trace - 1 = 0.5 and
     * l2 * l3 = det(W) = -0.125: roots of x^2 - 0.5x - 0.125, that is
     * (0.5 +- sqrt(0.75)) / 2 = 0.6830, -0.1830. */
    assert_float_equal(s_gap(t), 1 - (0.5 + sqrt(0.75)) / 2, 1e-12);
    rumor_topology_destroy(&t);
}

static void
test_parse__phases__time_varying(void **state)
{
    (void)state;
    rumor_topology *t = s_parse_ok("nodes 4\nphase 0\nedge 0 1\nedge 2 3\n"
                                   "phase 1\nedge 0 2\nedge 1 3\n");
    assert_int_equal(rumor_topology_phases(t), 2);
    assert_int_equal(rumor_topology_phase_at(t, 5), 1);
    assert_float_equal(rumor_topology_weight(t, 1, 0, 2), 0.5, 1e-15);
    assert_float_equal(rumor_topology_weight(t, 0, 0, 2), 0.0, 0);
    /* Two matchings of a 2-cube: one period is the exact average. */
    assert_float_equal(s_gap(t), 1.0, 1e-12);
    rumor_topology_destroy(&t);
}

/* --- generators and spectra ------------------------------------------ */

static void
test_gap__ring__closed_form(void **state)
{
    (void)state;
    for (int n = 3; n <= 12; n++) {
        char spec[32];
        snprintf(spec, sizeof spec, "ring:%d", n);
        rumor_topology *t = s_generate(spec, 1);
        /* MH weights 1/3: eigenvalues 1/3 + 2/3 cos(2 pi k / n). */
        double l2 = 1.0 / 3 + 2.0 / 3 * cos(2 * M_PI / n);
        double ln = fabs(1.0 / 3 + 2.0 / 3 * cos(2 * M_PI * (n / 2) / n));
        assert_float_equal(s_gap(t), 1 - (l2 > ln ? l2 : ln), 1e-9);
        rumor_topology_destroy(&t);
    }
}

static void
test_gap__torus_hypercube_complete_star__closed_forms(void **state)
{
    (void)state;
    rumor_topology *t = s_generate("torus:4x4", 1);
    /* w = 1/5: 1/5 + 2/5 (cos a + cos b); second 3/5, smallest -3/5. */
    assert_float_equal(s_gap(t), 0.4, 1e-9);
    assert_int_equal(rumor_topology_edges(t, 0), 32);
    rumor_topology_destroy(&t);
    for (int d = 1; d <= 5; d++) {
        char spec[32];
        snprintf(spec, sizeof spec, "hypercube:%d", 1 << d);
        t = s_generate(spec, 1);
        /* w = 1/(d+1): eigenvalues (1 + d - 2k)/(d + 1). */
        double want = d == 1 ? 1.0 : 2.0 / (d + 1);
        assert_float_equal(s_gap(t), want, 1e-9);
        rumor_topology_destroy(&t);
    }
    t = s_generate("complete:7", 1);
    assert_float_equal(s_gap(t), 1.0, 1e-9);
    rumor_topology_destroy(&t);
    t = s_generate("star:9", 1);
    /* W = I - L/n for the star Laplacian (eigenvalues 0, 1, n): 1/n. */
    assert_float_equal(s_gap(t), 1.0 / 9, 1e-9);
    rumor_topology_destroy(&t);
}

/* Independent check: largest eigenvalue of (W - J)^2 by power iteration
 * equals max(|lambda_2|, |lambda_n|)^2. */
static double
s_gap_by_power_iteration(const rumor_topology *t)
{
    size_t n = rumor_topology_nodes(t);
    double *w = malloc(n * n * sizeof *w);
    double *x = malloc(n * sizeof *x), *y = malloc(n * sizeof *y);
    assert_non_null(w);
    assert_non_null(x);
    assert_non_null(y);
    rumor_topology_matrix(t, 0, w);
    for (size_t i = 0; i < n * n; i++)
        w[i] -= 1.0 / (double)n;
    struct rumor_rng rng;
    rumor_rng_init(&rng, 77, 0);
    for (size_t i = 0; i < n; i++)
        x[i] = rumor_rng_normal(&rng);
    double lambda = 0;
    for (int it = 0; it < 20000; it++) {
        for (int half = 0; half < 2; half++) {
            for (size_t i = 0; i < n; i++) {
                double s = 0;
                for (size_t j = 0; j < n; j++)
                    s += w[i * n + j] * (half ? y[j] : x[j]);
                (half ? x : y)[i] = s;
            }
        }
        double norm = 0;
        for (size_t i = 0; i < n; i++)
            norm += x[i] * x[i];
        norm = sqrt(norm);
        lambda = norm; /* |(W-J)^2 x| for the unit x of the last round */
        for (size_t i = 0; i < n; i++)
            x[i] /= norm;
    }
    free(w);
    free(x);
    free(y);
    return 1.0 - sqrt(lambda);
}

static void
test_gap__random_graphs__agree_with_power_iteration(void **state)
{
    (void)state;
    const char *specs[] = {"random-regular:16,3",
                           "random-regular:20,4",
                           "watts-strogatz:16,4,0.2",
                           "exponential:10",
                           "exponential:16"};
    for (size_t i = 0; i < sizeof specs / sizeof specs[0]; i++) {
        rumor_topology *t = s_generate(specs[i], 3);
        double lapack = s_gap(t), power = s_gap_by_power_iteration(t);
        if (fabs(lapack - power) > 1e-6)
            fail_msg("%s: LAPACK %.9f, power iteration %.9f",
                     specs[i],
                     lapack,
                     power);
        rumor_topology_destroy(&t);
    }
}

static void
test_generate__random_regular__regular_seeded_connected(void **state)
{
    (void)state;
    rumor_topology *a = s_generate("random-regular:30,5", 11);
    rumor_topology *b = s_generate("random-regular:30,5", 11);
    rumor_topology *c = s_generate("random-regular:30,5", 12);
    bool differs = false;
    for (size_t i = 0; i < 30; i++) {
        size_t da = 0, db = 0, dc = 0;
        const uint32_t *na = rumor_topology_neighbors(a, 0, i, &da, NULL);
        const uint32_t *nb = rumor_topology_neighbors(b, 0, i, &db, NULL);
        const uint32_t *nc = rumor_topology_neighbors(c, 0, i, &dc, NULL);
        assert_int_equal(da, 5);
        assert_int_equal(db, 5);
        assert_int_equal(dc, 5);
        assert_memory_equal(na, nb, 5 * sizeof *na);
        differs |= memcmp(na, nc, 5 * sizeof *na) != 0;
    }
    assert_true(differs);
    rumor_topology_destroy(&a);
    rumor_topology_destroy(&b);
    rumor_topology_destroy(&c);
}

static void
test_generate__exponential__hops_are_powers_of_two(void **state)
{
    (void)state;
    rumor_topology *t = s_generate("exponential:12", 1);
    for (size_t i = 0; i < 12; i++) {
        size_t count = 0;
        const uint32_t *nbr = rumor_topology_neighbors(t, 0, i, &count, NULL);
        /* hops +-1, +-2, +-4, +-8, but +8 = -4 and -8 = +4 (mod 12) */
        assert_int_equal(count, 6);
        for (size_t k = 0; k < count; k++) {
            size_t hop = (nbr[k] + 12 - i) % 12;
            size_t back = 12 - hop;
            bool pow2 = (hop & (hop - 1)) == 0 || (back & (back - 1)) == 0;
            assert_true(pow2);
        }
    }
    rumor_topology_destroy(&t);
}

static void
test_generate__one_peer_exp__matchings_average_exactly(void **state)
{
    (void)state;
    rumor_topology *t = s_generate("one-peer-exp:16", 1);
    assert_int_equal(rumor_topology_phases(t), 4);
    for (size_t p = 0; p < 4; p++) {
        assert_int_equal(rumor_topology_edges(t, p), 8);
        for (size_t i = 0; i < 16; i++) {
            size_t count = 0;
            const uint32_t *nbr =
                rumor_topology_neighbors(t, p, i, &count, NULL);
            assert_int_equal(count, 1);
            assert_int_equal(nbr[0], i ^ (1u << p));
        }
    }
    assert_float_equal(s_gap(t), 1.0, 1e-9);
    rumor_topology_destroy(&t);
}

static void
test_generate__bad_arguments__refused_with_usage(void **state)
{
    (void)state;
    static const struct {
        const char *spec, *msg;
    } cases[] = {
        {"ring:1", "ring N: needs between 2 and 4096 nodes"},
        {"ring:8,3", "usage: ring N"},
        {"ring:eight", "ring N: 'eight' is not a whole number up to 4096"},
        {"hypercube:6", "hypercube N (N a power of 2): N must be a power of 2"},
        {"random-regular:5,3",
         "random-regular N D: needs 1 <= D < N and N * "
         "D even"},
        {"watts-strogatz:10,3,0.1",
         "watts-strogatz N K P: K must be even, at "
         "least 2 and below N"},
        {"watts-strogatz:10,4,1.5",
         "watts-strogatz N K P: P must be a "
         "probability in [0, 1], got '1.5'"},
        {"moebius:8",
         "unknown topology kind 'moebius' (ring, torus, complete, "
         "star, hypercube, random-regular, watts-strogatz, "
         "exponential, one-peer-exp)"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        rumor_topology *t = NULL;
        struct rumor_diag diag = {0};
        rumor_err rc = rumor_topology_from_spec(cases[i].spec, 1, &t, &diag);
        assert_int_equal(rc, RUMOR_EINVAL);
        assert_string_equal(diag.msg, cases[i].msg);
        assert_null(t);
    }
}

static void
test_format__generated_graphs__parse_back_identical(void **state)
{
    (void)state;
    const char *specs[] = {"ring:2",
                           "torus:3x5",
                           "watts-strogatz:20,4,0.3",
                           "one-peer-exp:8"};
    for (size_t s = 0; s < sizeof specs / sizeof specs[0]; s++) {
        rumor_topology *t = s_generate(specs[s], 5);
        rumor_buf buf;
        rumor_buf_init(&buf, 1u << 20);
        assert_int_equal(rumor_topology_format(t, &buf), RUMOR_OK);
        rumor_topology *back = NULL;
        struct rumor_diag diag = {0};
        assert_int_equal(rumor_topology_parse((const char *)buf.data,
                                              buf.len,
                                              "round-trip",
                                              &back,
                                              &diag),
                         RUMOR_OK);
        size_t n = rumor_topology_nodes(t);
        assert_int_equal(rumor_topology_nodes(back), n);
        assert_int_equal(rumor_topology_phases(back), rumor_topology_phases(t));
        double *w1 = malloc(n * n * sizeof *w1),
               *w2 = malloc(n * n * sizeof *w2);
        for (size_t p = 0; p < rumor_topology_phases(t); p++) {
            rumor_topology_matrix(t, p, w1);
            rumor_topology_matrix(back, p, w2);
            assert_memory_equal(w1, w2, n * n * sizeof *w1);
        }
        free(w1);
        free(w2);
        rumor_buf_free(&buf);
        rumor_topology_destroy(&back);
        rumor_topology_destroy(&t);
    }
}

static void
test_format_dot__ring__one_line_per_edge(void **state)
{
    (void)state;
    rumor_topology *t = s_generate("ring:5", 1);
    rumor_buf buf;
    rumor_buf_init(&buf, 1u << 16);
    assert_int_equal(rumor_topology_format_dot(t, &buf), RUMOR_OK);
    assert_int_equal(rumor_buf_append(&buf, "", 1), RUMOR_OK);
    const char *text = (const char *)buf.data;
    assert_non_null(strstr(text, "graph rumor {"));
    assert_non_null(strstr(text, "0 -- 1 [label=\"0.333\""));
    assert_non_null(strstr(text, "0 -- 4 "));
    size_t edges = 0;
    for (const char *p = strstr(text, " -- "); p; p = strstr(p + 1, " -- "))
        edges++;
    assert_int_equal(edges, 5);
    rumor_buf_free(&buf);
    rumor_topology_destroy(&t);
}

static void
test_load_file__missing__enotfound_with_path(void **state)
{
    (void)state;
    rumor_topology *t = NULL;
    struct rumor_diag diag = {0};
    assert_int_equal(rumor_topology_load_file("/nonexistent.topo", &t, &diag),
                     RUMOR_ENOTFOUND);
    assert_string_equal(diag.file, "/nonexistent.topo");
    assert_null(t);
}

/* ||I - W||_2 = 1 - lambda_min(W), by hand: an even ring with weights
 * 1/3 has lambda_min = 1/3 + 2/3 cos(pi) = -1/3 (4/3); a 4x4 torus with
 * weights 1/5, 1/5 + 2/5 (cos pi + cos pi) = -3/5 (1.6); a complete graph
 * W = J / n, 0 (1); an odd ring, 1/3 + 2/3 cos(4 pi / 5) for 5 nodes. */
static void
test_mixing_norm__ring_torus_complete__hand_computed(void **state)
{
    (void)state;
    const struct {
        const char *spec;
        double beta;
    } cases[] = {
        {"ring:6", 4.0 / 3},
        {"ring:32", 4.0 / 3},
        {"torus:4x4", 1.6},
        {"complete:8", 1.0},
        {"ring:5", 2.0 / 3 - 2.0 / 3 * cos(4 * M_PI / 5)},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        rumor_topology *t = s_generate(cases[i].spec, 1);
        double beta = -1;
        assert_int_equal(rumor_topology_mixing_norm(t, &beta), RUMOR_OK);
        if (fabs(beta - cases[i].beta) > 1e-9)
            fail_msg("%s: %.12f, want %.12f",
                     cases[i].spec,
                     beta,
                     cases[i].beta);
        rumor_topology_destroy(&t);
    }
}

int
main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_mixing_norm__ring_torus_complete__hand_computed),
        cmocka_unit_test(test_parse__broken_files__exact_line_and_column),
        cmocka_unit_test(test_parse__no_weights__metropolis_hastings),
        cmocka_unit_test(test_parse__given_and_derived_weights__mix),
        cmocka_unit_test(test_parse__hash_inside_a_key__not_a_comment),
        cmocka_unit_test(test_parse__nodes_with_endpoints_and_keys__kept),
        cmocka_unit_test(test_parse__dense_matrix__edges_and_gap),
        cmocka_unit_test(test_parse__phases__time_varying),
        cmocka_unit_test(test_gap__ring__closed_form),
        cmocka_unit_test(test_gap__torus_hypercube_complete_star__closed_forms),
        cmocka_unit_test(test_gap__random_graphs__agree_with_power_iteration),
        cmocka_unit_test(
            test_generate__random_regular__regular_seeded_connected),
        cmocka_unit_test(test_generate__exponential__hops_are_powers_of_two),
        cmocka_unit_test(
            test_generate__one_peer_exp__matchings_average_exactly),
        cmocka_unit_test(test_generate__bad_arguments__refused_with_usage),
        cmocka_unit_test(test_format__generated_graphs__parse_back_identical),
        cmocka_unit_test(test_format_dot__ring__one_line_per_edge),
        cmocka_unit_test(test_load_file__missing__enotfound_with_path),
    };
    if (argc == 2)
        cmocka_set_test_filter(argv[1]);
    return cmocka_run_group_tests_name("topology", tests, NULL, NULL);
}
