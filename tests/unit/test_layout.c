/*
 * The HELLO description (node/layout.c): the bytes of a hand-built case,
 * the decoder's refusals (every truncation, trailing bytes, out-of-range
 * fields), and the words that name the first difference: the same on both
 * nodes, whichever of them writes them.
 */
#include "tests/cmocka_compat.h"

#include "node/layout.h"

#include <stdio.h>
#include <string.h>

#define CAP 4096

static const char SETTINGS[] = "algo=dpsgd gamma=1";

/* A model of the given shapes (data unused by the description). */
struct t_model {
    struct rumor_tensor t[4];
    struct rumor_model m;
    rumor_dtype dtypes[4];
};

static void
t_model(struct t_model *tm,
        size_t count,
        const size_t (*shapes)[3],
        const size_t *ndims,
        const rumor_dtype *dtypes)
{
    memset(tm, 0, sizeof *tm);
    for (size_t k = 0; k < count; k++) {
        tm->t[k].ndim = ndims[k];
        for (size_t d = 0; d < ndims[k]; d++)
            tm->t[k].shape[d] = shapes[k][d];
        tm->dtypes[k] = dtypes[k];
    }
    tm->m = (struct rumor_model){tm->t, count};
}

/* [3, 4] float32 and [5] float16, the reference model of these tests */
static size_t
t_reference(uint8_t *out, size_t cap, const char *settings)
{
    static const size_t shapes[2][3] = {{3, 4}, {5}};
    static const size_t ndims[2] = {2, 1};
    static const rumor_dtype dtypes[2] = {RUMOR_DTYPE_F32, RUMOR_DTYPE_F16};
    struct t_model tm;
    t_model(&tm, 2, shapes, ndims, dtypes);
    return node_layout_encode(settings, &tm.m, tm.dtypes, out, cap);
}

static void
test_encode__two_tensors__bytes_as_documented(void **state)
{
    (void)state;
    uint8_t buf[CAP];
    size_t n = t_reference(buf, sizeof buf, SETTINGS);
    size_t slen = strlen(SETTINGS);
    /* version, settings length, settings, count, listed, then per tensor
     * dtype, ndim, dims as u32 little-endian */
    uint8_t want[64] = {1, (uint8_t)slen, 0};
    size_t w = 3;
    memcpy(want + w, SETTINGS, slen);
    w += slen;
    const uint8_t tail[] = {2, 0, 0, 0, 2, 0, 0, 0,       /* count, listed */
                            0, 2, 3, 0, 0, 0, 4, 0, 0, 0, /* f32 [3, 4] */
                            2, 1, 5, 0, 0, 0};            /* f16 [5] */
    memcpy(want + w, tail, sizeof tail);
    w += sizeof tail;
    assert_int_equal(n, w);
    assert_memory_equal(buf, want, w);
    assert_int_equal(node_layout_check(buf, n), RUMOR_OK);
    /* too small for the header and settings: nothing */
    assert_int_equal(t_reference(buf, 3 + slen + 7, SETTINGS), 0);
    /* not printable: nothing */
    assert_int_equal(t_reference(buf, sizeof buf, "algo=\tx"), 0);
}

static void
test_check__truncated_trailing_or_out_of_range__refused(void **state)
{
    (void)state;
    uint8_t buf[CAP];
    size_t n = t_reference(buf, sizeof buf, SETTINGS);
    for (size_t len = 0; len < n; len++)
        assert_int_equal(node_layout_check(buf, len), RUMOR_EPROTO);
    buf[n] = 0;
    assert_int_equal(node_layout_check(buf, n + 1), RUMOR_EPROTO);
    assert_int_equal(node_layout_check(NULL, 0), RUMOR_EPROTO);
    size_t t0 = 3 + strlen(SETTINGS) + 8; /* the first tensor */
    struct {
        size_t off;
        uint8_t value;
    } bad[] = {
        {0, 2},      /* version */
        {t0, 4},     /* dtype past bfloat16 */
        {t0 + 1, 9}, /* ndim past RUMOR_GOSSIP_MAX_DIMS */
        {t0 - 4, 3}, /* listed > count */
        {3, 0x7f},   /* a settings byte that is not printable */
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        uint8_t copy[CAP];
        memcpy(copy, buf, n);
        copy[bad[i].off] = bad[i].value;
        assert_int_equal(node_layout_check(copy, n), RUMOR_EPROTO);
    }
}

/* Explains a (node ida) against b (node idb) and b against a with the
 * ids swapped: both nodes of a link must write the same words. */
static void
t_explain_both(const uint8_t *a,
               size_t alen,
               const uint8_t *b,
               size_t blen,
               const char *want)
{
    char x[256], y[256];
    bool gx = node_layout_explain(a, alen, 0, b, blen, 1, x, sizeof x);
    bool gy = node_layout_explain(b, blen, 1, a, alen, 0, y, sizeof y);
    if (want == NULL) {
        assert_false(gx);
        assert_false(gy);
        assert_string_equal(x, "");
        return;
    }
    assert_true(gx && gy);
    assert_string_equal(x, want);
    assert_string_equal(y, want);
}

static void
test_explain__each_kind_of_difference__named_alike_on_both_nodes(void **state)
{
    (void)state;
    uint8_t a[CAP], b[CAP];
    size_t alen = t_reference(a, sizeof a, SETTINGS);
    /* the same description: nothing to name */
    t_explain_both(a, alen, a, alen, NULL);
    /* one extra tensor on node 1, in another dtype */
    static const size_t shapes[3][3] = {{3, 4}, {5}, {7, 1}};
    static const size_t ndims[3] = {2, 1, 2};
    static const rumor_dtype dt[3] = {RUMOR_DTYPE_F32,
                                      RUMOR_DTYPE_F16,
                                      RUMOR_DTYPE_F64};
    struct t_model tm;
    t_model(&tm, 3, shapes, ndims, dt);
    size_t blen = node_layout_encode(SETTINGS, &tm.m, tm.dtypes, b, CAP);
    t_explain_both(a,
                   alen,
                   b,
                   blen,
                   "models differ at tensor 2: node 0 has none (2 tensors), "
                   "node 1 has float64 [7, 1]");
    /* another shape; dtypes alone do not differ (both travel as float32) */
    static const size_t other[2][3] = {{3, 4}, {6}};
    static const rumor_dtype f32[2] = {RUMOR_DTYPE_F64, RUMOR_DTYPE_F32};
    t_model(&tm, 2, other, ndims, f32);
    blen = node_layout_encode(SETTINGS, &tm.m, tm.dtypes, b, CAP);
    t_explain_both(a,
                   alen,
                   b,
                   blen,
                   "models differ at tensor 1: node 0 has float16 [5], node "
                   "1 has float32 [6]");
    /* a setting */
    blen = t_reference(b, sizeof b, "algo=dpsgd gamma=0.5");
    t_explain_both(a,
                   alen,
                   b,
                   blen,
                   "settings differ: node 0 has gamma=1, node 1 has "
                   "gamma=0.5");
    blen = t_reference(b, sizeof b, "algo=dpsgd");
    t_explain_both(a,
                   alen,
                   b,
                   blen,
                   "settings differ: node 0 has gamma=1, node 1 has "
                   "(nothing)");
    /* a malformed peer description: no explanation */
    t_explain_both(a, alen, b, blen - 1, NULL);
}

static void
test_explain__lists_cut_by_the_cap__says_what_it_cannot_see(void **state)
{
    (void)state;
    static const size_t shapes[3][3] = {{3, 4}, {5}, {7, 1}};
    static const size_t ndims[3] = {2, 1, 2};
    static const rumor_dtype dt[3] = {0, 0, 0};
    struct t_model tm;
    t_model(&tm, 3, shapes, ndims, dt);
    uint8_t a[CAP], b[CAP];
    size_t head = 3 + strlen(SETTINGS) + 8;
    /* room for the first tensor only (10 bytes) */
    size_t alen = node_layout_encode(SETTINGS, &tm.m, NULL, a, head + 12);
    assert_int_equal(alen, head + 10);
    assert_int_equal(node_layout_check(a, alen), RUMOR_OK);
    assert_int_equal(a[head - 4], 1); /* listed */
    assert_int_equal(a[head - 8], 3); /* count */
    /* same count, the difference (if any) past the listed part */
    tm.t[2].shape[0] = 8;
    size_t blen = node_layout_encode(SETTINGS, &tm.m, NULL, b, head + 12);
    t_explain_both(a,
                   alen,
                   b,
                   blen,
                   "models differ at or after tensor 1 (the HELLO lists only "
                   "1 of their 3 tensors)");
    /* other counts, the extra tensor not listed */
    tm.m.count = 2;
    blen = node_layout_encode(SETTINGS, &tm.m, NULL, b, CAP);
    t_explain_both(a,
                   alen,
                   b,
                   blen,
                   "models differ: node 0 has 3 tensors, node 1 has 2");
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_encode__two_tensors__bytes_as_documented),
        cmocka_unit_test(
            test_check__truncated_trailing_or_out_of_range__refused),
        cmocka_unit_test(
            test_explain__each_kind_of_difference__named_alike_on_both_nodes),
        cmocka_unit_test(
            test_explain__lists_cut_by_the_cap__says_what_it_cannot_see),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
