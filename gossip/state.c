/*
 * The state an algorithm carries between steps, as bytes: for checkpoints
 * (node/checkpoint.c) and for a peer that hands its state to a restarted
 * neighbour. Format (docs/protocol.md, "Gossip state"), little-endian:
 *   u32 magic "RGST", u32 version, 32 bytes algorithm name (NUL padded),
 *   u32 self, u32 nodes, u64 numel, [version 2: u64 robust steps, f64
 *   robust EMA: robust mixing's radius history], u64 body length, body.
 * The header pins what the body's meaning depends on, so a state is
 * refused by an instance it does not fit (another algorithm, node or model
 * size) instead of being misread. The body is the algorithm's (its
 * state_save / state_load in the vtable).
 *
 * Loading may see bytes from the network, so it is a pure decoder first:
 * the algorithm's state_load runs once with GOSSIP_STATE_CHECK, which
 * walks the bytes through a bounds-checked cursor (struct gossip_reader)
 * checking every length against what is left and against the instance,
 * and every number for finiteness, without touching the instance; only
 * when that pass succeeds does a second pass write the state: all of it
 * (load), or what the ring's members share (adopt: another member's
 * state, whose header names that member; the instance keeps its own
 * memories). Before writing, the step in flight is abandoned, so a load
 * of the state saved before a step undoes the step wholly. The
 * cursor records the first failure and makes later reads fail, so the
 * decoders need no check after every field (the pattern of a sticky error
 * flag, as in Go's bufio or curl's dynbuf).
 */
#include "rumor/gossip.h"

#include "gossip/gossip_impl.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#define STATE_MAGIC   0x54534752u /* "RGST" as little-endian bytes */
#define STATE_VERSION 2u /* 1: without the robust history (still read) */
#define STATE_HEADER  (4 + 4 + RUMOR_GOSSIP_ALGO_BYTES + 4 + 4 + 8 + 8)

/* --- reader ------------------------------------------------------------- */

void
gossip_reader_init(struct gossip_reader *r, const uint8_t *p, size_t len)
{
    r->p = p;
    r->left = len;
    r->err = RUMOR_OK;
    r->why = "";
    r->peer = false;
}

void
gossip_reader_fail(struct gossip_reader *r, rumor_err err, const char *why)
{
    if (r->err != RUMOR_OK)
        return;
    r->err = err;
    r->why = why;
    r->left = 0;
}

/* The next n bytes, or NULL (and the reader failed) when fewer are left. */
static const uint8_t *
s_take(struct gossip_reader *r, size_t n)
{
    if (r->err != RUMOR_OK)
        return NULL;
    if (n > r->left) {
        gossip_reader_fail(r, RUMOR_EPROTO, "truncated");
        return NULL;
    }
    const uint8_t *p = r->p;
    r->p += n;
    r->left -= n;
    return p;
}

uint32_t
gossip_read_u32(struct gossip_reader *r)
{
    const uint8_t *p = s_take(r, 4);
    uint32_t v = 0;
    if (p != NULL)
        memcpy(&v, p, 4);
    return v;
}

uint64_t
gossip_read_u64(struct gossip_reader *r)
{
    const uint8_t *p = s_take(r, 8);
    uint64_t v = 0;
    if (p != NULL)
        memcpy(&v, p, 8);
    return v;
}

void
gossip_read_len(struct gossip_reader *r, uint64_t want, const char *why)
{
    uint64_t got = gossip_read_u64(r);
    if (r->err == RUMOR_OK && got != want)
        gossip_reader_fail(r, RUMOR_EPROTO, why);
}

void
gossip_read_f32(struct gossip_reader *r, float *dst, size_t n)
{
    if (r->err != RUMOR_OK || n > r->left / sizeof(float)) {
        gossip_reader_fail(r, RUMOR_EPROTO, "truncated");
        return;
    }
    const uint8_t *p = s_take(r, n * sizeof(float));
    for (size_t i = 0; i < n; i++) {
        float v;
        memcpy(&v, p + i * sizeof v, sizeof v);
        if (!isfinite(v)) {
            gossip_reader_fail(r, RUMOR_ENUMERIC, "a non-finite number");
            return;
        }
        if (dst != NULL)
            dst[i] = v;
    }
}

void
gossip_read_f64(struct gossip_reader *r, double *dst, size_t n)
{
    if (r->err != RUMOR_OK || n > r->left / sizeof(double)) {
        gossip_reader_fail(r, RUMOR_EPROTO, "truncated");
        return;
    }
    const uint8_t *p = s_take(r, n * sizeof(double));
    for (size_t i = 0; i < n; i++) {
        double v;
        memcpy(&v, p + i * sizeof v, sizeof v);
        if (!isfinite(v)) {
            gossip_reader_fail(r, RUMOR_ENUMERIC, "a non-finite number");
            return;
        }
        if (dst != NULL)
            dst[i] = v;
    }
}

const uint8_t *
gossip_read_blob(struct gossip_reader *r, size_t *len)
{
    uint64_t n = gossip_read_u64(r);
    *len = 0;
    if (r->err != RUMOR_OK)
        return NULL;
    if (n > r->left || n > RUMOR_GOSSIP_STATE_MAX) {
        gossip_reader_fail(r, RUMOR_EPROTO, "a length past the end");
        return NULL;
    }
    *len = (size_t)n;
    return s_take(r, (size_t)n);
}

/* --- writer ------------------------------------------------------------- */

rumor_err
gossip_write_u32(struct rumor_buf *b, uint32_t v)
{
    return rumor_buf_append(b, &v, sizeof v);
}

rumor_err
gossip_write_u64(struct rumor_buf *b, uint64_t v)
{
    return rumor_buf_append(b, &v, sizeof v);
}

rumor_err
gossip_write_f32(struct rumor_buf *b, const float *v, size_t n)
{
    return rumor_buf_append(b, v, n * sizeof *v);
}

rumor_err
gossip_write_f64(struct rumor_buf *b, const double *v, size_t n)
{
    return rumor_buf_append(b, v, n * sizeof *v);
}

/* --- public API --------------------------------------------------------- */

/* The header with the given robust history, then the body by body(). */
static rumor_err
s_save(const rumor_gossip *g,
       uint64_t robust_steps,
       double robust_ema,
       rumor_err (*body_fn)(const rumor_gossip *, struct rumor_buf *),
       struct rumor_buf *out)
{
    char name[RUMOR_GOSSIP_ALGO_BYTES] = {0};
    snprintf(name, sizeof name, "%s", g->algo->name);
    size_t at = out->len;
    rumor_err rc = gossip_write_u32(out, STATE_MAGIC);
    if (rc == RUMOR_OK)
        rc = gossip_write_u32(out, STATE_VERSION);
    if (rc == RUMOR_OK)
        rc = rumor_buf_append(out, name, sizeof name);
    if (rc == RUMOR_OK)
        rc = gossip_write_u32(out, g->self);
    if (rc == RUMOR_OK)
        rc = gossip_write_u32(out, (uint32_t)g->nodes);
    if (rc == RUMOR_OK)
        rc = gossip_write_u64(out, g->numel);
    if (rc == RUMOR_OK)
        rc = gossip_write_u64(out, robust_steps);
    if (rc == RUMOR_OK)
        rc = gossip_write_f64(out, &robust_ema, 1);
    if (rc == RUMOR_OK)
        rc = gossip_write_u64(out, 0); /* body length, patched below */
    size_t body = out->len;
    if (rc == RUMOR_OK && body_fn != NULL)
        rc = body_fn(g, out);
    if (rc != RUMOR_OK) {
        out->len = at;
        return rc;
    }
    uint64_t body_len = out->len - body;
    memcpy(out->data + body - 8, &body_len, 8);
    return RUMOR_OK;
}

rumor_err
rumor_gossip_state_save(const rumor_gossip *g, struct rumor_buf *out)
{
    uint64_t robust_steps = 0;
    double robust_ema = 0;
    gossip_robust_history(g, &robust_steps, &robust_ema);
    return s_save(g, robust_steps, robust_ema, g->algo->state_save, out);
}

rumor_err
rumor_gossip_snapshot(rumor_gossip *g)
{
    /* without a state between steps (the exact all-reduce) there is
     * nothing to copy */
    bool stateless = g->algo->state_save == NULL;
    if (g->algo->snap_take == NULL && !stateless)
        return RUMOR_ENOTSUP;
    if (g->in_step)
        return RUMOR_EINVAL;
    g->snap_has = false;
    rumor_err rc = stateless ? RUMOR_OK : g->algo->snap_take(g);
    if (rc != RUMOR_OK)
        return rc;
    gossip_robust_history(g, &g->snap_robust_steps, &g->snap_robust_ema);
    g->snap_has = true;
    return RUMOR_OK;
}

rumor_err
rumor_gossip_snapshot_restore(rumor_gossip *g)
{
    if (!g->snap_has)
        return RUMOR_EINVAL;
    /* as a state_load: a step in flight keeps nothing of its exchange */
    rumor_gossip_step_abandon(g);
    rumor_err rc =
        g->algo->snap_restore != NULL ? g->algo->snap_restore(g) : RUMOR_OK;
    if (rc == RUMOR_OK)
        rc = gossip_robust_restore(g, g->snap_robust_steps, g->snap_robust_ema);
    return rc;
}

rumor_err
rumor_gossip_snapshot_save(const rumor_gossip *g, struct rumor_buf *out)
{
    if (!g->snap_has)
        return RUMOR_EINVAL;
    return s_save(g,
                  g->snap_robust_steps,
                  g->snap_robust_ema,
                  g->algo->snap_save,
                  out);
}

/* The robust history a state carries (version 2; none in version 1). */
struct s_history {
    bool has;
    uint64_t steps;
    double ema;
};

/* Checks the header against g (with r->peer, it may name another node);
 * leaves r at the body, the robust history in *h. */
static void
s_check_header(const rumor_gossip *g,
               struct gossip_reader *r,
               struct s_history *h)
{
    if (gossip_read_u32(r) != STATE_MAGIC && r->err == RUMOR_OK)
        gossip_reader_fail(r, RUMOR_EPROTO, "not a gossip state (magic)");
    uint32_t version = gossip_read_u32(r);
    if (version != 1 && version != STATE_VERSION && r->err == RUMOR_OK)
        gossip_reader_fail(r, RUMOR_EPROTO, "an unknown version");
    const uint8_t *name = s_take(r, RUMOR_GOSSIP_ALGO_BYTES);
    char want[RUMOR_GOSSIP_ALGO_BYTES] = {0};
    snprintf(want, sizeof want, "%s", g->algo->name);
    if (name != NULL && memcmp(name, want, sizeof want) != 0)
        gossip_reader_fail(r, RUMOR_EPROTO, "another algorithm's state");
    uint32_t self = gossip_read_u32(r);
    uint32_t nodes = gossip_read_u32(r);
    uint64_t numel = gossip_read_u64(r);
    if (r->err == RUMOR_OK && nodes != g->nodes)
        gossip_reader_fail(r, RUMOR_EPROTO, "another topology's state");
    if (r->err == RUMOR_OK && self != g->self && !r->peer)
        gossip_reader_fail(r, RUMOR_EPROTO, "another node's state");
    if (r->err == RUMOR_OK && numel != g->numel)
        gossip_reader_fail(r, RUMOR_EPROTO, "a model of another size");
    h->has = version == STATE_VERSION;
    if (h->has) {
        h->steps = gossip_read_u64(r);
        gossip_read_f64(r, &h->ema, 1);
        if (r->err == RUMOR_OK && !(h->ema >= 0))
            gossip_reader_fail(r, RUMOR_EPROTO, "a negative robust radius");
    }
    gossip_read_len(r, r->left >= 8 ? r->left - 8 : 0, "a wrong body length");
}

rumor_err
gossip_state_read(rumor_gossip *g,
                  const uint8_t *data,
                  size_t len,
                  enum gossip_state_mode mode,
                  bool peer,
                  const char **why)
{
    struct gossip_reader r;
    gossip_reader_init(&r, data, len);
    r.peer = peer;
    if (len < STATE_HEADER)
        gossip_reader_fail(&r, RUMOR_EPROTO, "truncated header");
    struct s_history h = {0};
    s_check_header(g, &r, &h);
    struct gossip_reader body = r;
    if (r.err == RUMOR_OK && g->algo->state_load != NULL)
        r.err = g->algo->state_load(g, &r, GOSSIP_STATE_CHECK);
    else if (r.err == RUMOR_OK && r.left != 0)
        gossip_reader_fail(&r, RUMOR_EPROTO, "state for a stateless one");
    if (r.err == RUMOR_OK && r.left != 0)
        gossip_reader_fail(&r, RUMOR_EPROTO, "bytes after the state");
    /* a step in flight would otherwise keep its half-made exchange */
    if (r.err == RUMOR_OK && mode != GOSSIP_STATE_CHECK)
        rumor_gossip_step_abandon(g);
    if (r.err == RUMOR_OK && mode != GOSSIP_STATE_CHECK &&
        g->algo->state_load != NULL)
        r.err = g->algo->state_load(g, &body, mode);
    /* the radius is this node's own: a member's state leaves it */
    if (r.err == RUMOR_OK && mode == GOSSIP_STATE_LOAD)
        r.err = gossip_robust_restore(g, h.steps, h.ema);
    *why = r.why[0] != '\0' ? r.why : rumor_strerror(r.err);
    return r.err;
}

static rumor_err
s_read(rumor_gossip *g,
       const uint8_t *data,
       size_t len,
       enum gossip_state_mode mode,
       struct rumor_diag *diag)
{
    const char *why = "";
    rumor_err rc =
        gossip_state_read(g, data, len, mode, mode == GOSSIP_STATE_ADOPT, &why);
    if (rc != RUMOR_OK)
        rumor_diag_set(diag,
                       "",
                       0,
                       0,
                       "gossip %s state (%zu bytes): %s",
                       g->algo->name,
                       len,
                       why);
    return rc;
}

rumor_err
rumor_gossip_state_load(rumor_gossip *g,
                        const uint8_t *data,
                        size_t len,
                        struct rumor_diag *diag)
{
    return s_read(g, data, len, GOSSIP_STATE_LOAD, diag);
}

rumor_err
rumor_gossip_state_adopt(rumor_gossip *g,
                         const uint8_t *data,
                         size_t len,
                         struct rumor_diag *diag)
{
    /* without a ring, a state is the node's own (its edges, its copies) */
    if (!rumor_gossip_uses_ring(g)) {
        rumor_diag_set(diag,
                       "",
                       0,
                       0,
                       "gossip %s: no ring, so no state to adopt from "
                       "another node",
                       g->algo->name);
        return RUMOR_EINVAL;
    }
    return s_read(g, data, len, GOSSIP_STATE_ADOPT, diag);
}
