/*
 * The HELLO description (node/layout.h; docs/protocol.md, "HELLO
 * description"): why two nodes that may not gossip differ, in words.
 *
 * Why send the whole tensor list and not only on a mismatch: a mismatch
 * would need a second exchange, after the REFUSE, in both directions, and
 * a refused link is closed at once; the list costs 2 + 4 ndim bytes per
 * tensor (about 2 kB for a ResNet-50) once per connection. Lists longer
 * than the HELLO's cap are cut, and the description says so: the first
 * difference is named whenever it lies in the listed part.
 *
 * Shapes are compared, dtypes only shown: every tensor travels as float32
 * (node/peer.c converts), so a float16 model may gossip with a float32
 * one, and the fingerprint (node/runtime.c) covers shapes only.
 */
#include "node/layout.h"
#include "core/le.h"

#include <stdio.h>
#include <string.h>

#define LAYOUT_HEAD  3 /* version, settings length (u16) */
#define LAYOUT_COUNT 8 /* count, listed (u32 each) */

/* A checked description: pointers into the bytes it was parsed from. */
struct s_view {
    const char *settings;
    size_t settings_len;
    uint32_t count;  /* tensors in the model */
    uint32_t listed; /* tensors described */
    const uint8_t *tensors;
    size_t tensors_len;
};

struct s_tensor {
    uint8_t dtype;
    uint8_t ndim;
    uint32_t dims[RUMOR_GOSSIP_MAX_DIMS];
};

static bool
s_printable(const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (s[i] < 0x20 || s[i] >= 0x7f)
            return false;
    return true;
}

/* Reads the tensor at *off of a checked view and moves *off past it. */
static void
s_tensor_next(const struct s_view *v, size_t *off, struct s_tensor *t)
{
    const uint8_t *p = v->tensors + *off;
    t->dtype = p[0];
    t->ndim = p[1];
    for (uint8_t d = 0; d < t->ndim; d++)
        t->dims[d] = core_get_u32(p + 2 + 4 * (size_t)d);
    *off += 2 + 4 * (size_t)t->ndim;
}

static rumor_err
s_parse(const uint8_t *buf, size_t len, struct s_view *v)
{
    memset(v, 0, sizeof *v);
    if (buf == NULL || len < LAYOUT_HEAD || buf[0] != NODE_LAYOUT_VERSION)
        return RUMOR_EPROTO;
    size_t slen = (size_t)buf[1] | (size_t)buf[2] << 8;
    size_t left = len - LAYOUT_HEAD;
    if (slen > NODE_LAYOUT_SETTINGS_MAX || slen > left ||
        left - slen < LAYOUT_COUNT)
        return RUMOR_EPROTO;
    v->settings = (const char *)buf + LAYOUT_HEAD;
    v->settings_len = slen;
    if (!s_printable(v->settings, slen))
        return RUMOR_EPROTO;
    const uint8_t *p = buf + LAYOUT_HEAD + slen;
    v->count = core_get_u32(p);
    v->listed = core_get_u32(p + 4);
    if (v->count > RUMOR_GOSSIP_MAX_TENSORS || v->listed > v->count)
        return RUMOR_EPROTO;
    v->tensors = p + LAYOUT_COUNT;
    v->tensors_len = left - slen - LAYOUT_COUNT;
    /* every listed tensor must lie inside, and nothing may follow them */
    size_t off = 0;
    for (uint32_t k = 0; k < v->listed; k++) {
        if (v->tensors_len - off < 2)
            return RUMOR_EPROTO;
        uint8_t dtype = v->tensors[off], ndim = v->tensors[off + 1];
        if (dtype > RUMOR_DTYPE_BF16 || ndim > RUMOR_GOSSIP_MAX_DIMS ||
            v->tensors_len - off - 2 < 4 * (size_t)ndim)
            return RUMOR_EPROTO;
        off += 2 + 4 * (size_t)ndim;
    }
    return off == v->tensors_len ? RUMOR_OK : RUMOR_EPROTO;
}

size_t
node_layout_encode(const char *settings,
                   const struct rumor_model *m,
                   const rumor_dtype *dtypes,
                   uint8_t *out,
                   size_t cap)
{
    assert(settings != NULL);
    assert(m != NULL);
    assert(out != NULL);
    size_t slen = strlen(settings);
    if (slen > NODE_LAYOUT_SETTINGS_MAX || !s_printable(settings, slen) ||
        m->count > RUMOR_GOSSIP_MAX_TENSORS ||
        cap < LAYOUT_HEAD + slen + LAYOUT_COUNT)
        return 0;
    out[0] = NODE_LAYOUT_VERSION;
    out[1] = (uint8_t)slen;
    out[2] = (uint8_t)(slen >> 8);
    memcpy(out + LAYOUT_HEAD, settings, slen);
    size_t counts = LAYOUT_HEAD + slen, off = counts + LAYOUT_COUNT;
    uint32_t listed = 0;
    for (size_t k = 0; k < m->count; k++) {
        const struct rumor_tensor *t = &m->tensors[k];
        size_t ndim = t->ndim, need = 2 + 4 * ndim;
        if (ndim > RUMOR_GOSSIP_MAX_DIMS || cap - off < need)
            break; /* the rest is not listed */
        out[off] = (uint8_t)(dtypes != NULL ? dtypes[k] : RUMOR_DTYPE_F32);
        out[off + 1] = (uint8_t)ndim;
        for (size_t d = 0; d < ndim; d++)
            core_put_u32(out + off + 2 + 4 * d,
                         t->shape[d] > UINT32_MAX ? UINT32_MAX
                                                  : (uint32_t)t->shape[d]);
        off += need;
        listed++;
    }
    core_put_u32(out + counts, (uint32_t)m->count);
    core_put_u32(out + counts + 4, listed);
    return off;
}

rumor_err
node_layout_check(const uint8_t *buf, size_t len)
{
    struct s_view v;
    return s_parse(buf, len, &v);
}

/* --- explaining a difference ------------------------------------------- */

static const char *
s_dtype_name(uint8_t dtype)
{
    static const char *names[] = {"float32", "float64", "float16", "bfloat16"};
    return dtype <= RUMOR_DTYPE_BF16 ? names[dtype] : "?";
}

/* "float32 [64, 3, 7, 7]" */
static void
s_tensor_text(const struct s_tensor *t, char *out, size_t cap)
{
    int n = snprintf(out, cap, "%s [", s_dtype_name(t->dtype));
    for (uint8_t d = 0; d < t->ndim && n >= 0 && (size_t)n < cap; d++)
        n += snprintf(out + n,
                      cap - (size_t)n,
                      "%s%u",
                      d > 0 ? ", " : "",
                      t->dims[d]);
    if (n >= 0 && (size_t)n < cap)
        snprintf(out + n, cap - (size_t)n, "]");
}

static bool
s_same_shape(const struct s_tensor *a, const struct s_tensor *b)
{
    if (a->ndim != b->ndim)
        return false;
    for (uint8_t d = 0; d < a->ndim; d++)
        if (a->dims[d] != b->dims[d])
            return false;
    return true;
}

/* The k-th space-separated word of a settings text ("" past the end). */
static void
s_word(const struct s_view *v, size_t k, char *out, size_t cap)
{
    size_t i = 0, n = v->settings_len;
    const char *s = v->settings;
    for (size_t w = 0; w < k && i < n; i++)
        if (s[i] == ' ')
            w++;
    size_t j = i;
    while (j < n && s[j] != ' ')
        j++;
    snprintf(out, cap, "%.*s", (int)(j - i), s + i);
}

/* The first word in which the settings differ, or false. */
static bool
s_explain_settings(const struct s_view *lo,
                   uint32_t idlo,
                   const struct s_view *hi,
                   uint32_t idhi,
                   char *text,
                   size_t cap)
{
    if (lo->settings_len == hi->settings_len &&
        memcmp(lo->settings, hi->settings, lo->settings_len) == 0)
        return false;
    char a[NODE_LAYOUT_SETTINGS_MAX + 1], b[NODE_LAYOUT_SETTINGS_MAX + 1];
    size_t words = 1;
    for (size_t i = 0; i < lo->settings_len; i++)
        words += lo->settings[i] == ' ';
    for (size_t i = 0; i < hi->settings_len; i++)
        words += hi->settings[i] == ' ';
    for (size_t k = 0; k < words; k++) {
        s_word(lo, k, a, sizeof a);
        s_word(hi, k, b, sizeof b);
        if (strcmp(a, b) == 0)
            continue;
        snprintf(text,
                 cap,
                 "settings differ: node %u has %s, node %u has %s",
                 idlo,
                 a[0] != '\0' ? a : "(nothing)",
                 idhi,
                 b[0] != '\0' ? b : "(nothing)");
        return true;
    }
    return false;
}

/* The first tensor that differs in shape or exists on one side only. */
static bool
s_explain_tensors(const struct s_view *lo,
                  uint32_t idlo,
                  const struct s_view *hi,
                  uint32_t idhi,
                  char *text,
                  size_t cap)
{
    size_t olo = 0, ohi = 0;
    uint32_t both = lo->listed < hi->listed ? lo->listed : hi->listed;
    struct s_tensor a, b;
    char sa[128], sb[128];
    uint32_t k = 0;
    for (; k < both; k++) {
        s_tensor_next(lo, &olo, &a);
        s_tensor_next(hi, &ohi, &b);
        if (s_same_shape(&a, &b))
            continue;
        s_tensor_text(&a, sa, sizeof sa);
        s_tensor_text(&b, sb, sizeof sb);
        snprintf(text,
                 cap,
                 "models differ at tensor %u: node %u has %s, node %u has %s",
                 k,
                 idlo,
                 sa,
                 idhi,
                 sb);
        return true;
    }
    if (lo->count == hi->count) {
        if (k == lo->count)
            return false;
        snprintf(text,
                 cap,
                 "models differ at or after tensor %u (the HELLO lists "
                 "only %u of their %u tensors)",
                 k,
                 k,
                 lo->count);
        return true;
    }
    /* one model is a prefix of the other: name the first extra tensor */
    bool lo_longer = lo->count > hi->count;
    const struct s_view *longer = lo_longer ? lo : hi;
    uint32_t shorter_count = lo_longer ? hi->count : lo->count;
    if (k < shorter_count || k >= longer->listed) {
        snprintf(text,
                 cap,
                 "models differ: node %u has %u tensors, node %u has %u",
                 idlo,
                 lo->count,
                 idhi,
                 hi->count);
        return true;
    }
    s_tensor_next(longer, lo_longer ? &olo : &ohi, &a);
    s_tensor_text(&a, sa, sizeof sa);
    snprintf(sb, sizeof sb, "none (%u tensors)", shorter_count);
    snprintf(text,
             cap,
             "models differ at tensor %u: node %u has %s, node %u has %s",
             k,
             idlo,
             lo_longer ? sa : sb,
             idhi,
             lo_longer ? sb : sa);
    return true;
}

bool
node_layout_explain(const uint8_t *a,
                    size_t alen,
                    uint32_t ida,
                    const uint8_t *b,
                    size_t blen,
                    uint32_t idb,
                    char *text,
                    size_t cap)
{
    assert(text != NULL);
    assert(cap > 0);
    text[0] = '\0';
    struct s_view va, vb;
    if (s_parse(a, alen, &va) != RUMOR_OK || s_parse(b, blen, &vb) != RUMOR_OK)
        return false;
    /* the lower id first: both ends of a link write the same words */
    bool a_first = ida <= idb;
    const struct s_view *lo = a_first ? &va : &vb, *hi = a_first ? &vb : &va;
    uint32_t idlo = a_first ? ida : idb, idhi = a_first ? idb : ida;
    return s_explain_settings(lo, idlo, hi, idhi, text, cap) ||
           s_explain_tensors(lo, idlo, hi, idhi, text, cap);
}
