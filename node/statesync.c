/*
 * Codecs of the fault-handling control messages (docs/protocol.md, "Edge
 * acknowledgements, sync and state transfer").
 *
 * SYNC is what two nodes exchange when one of them comes back after being
 * marked down (or restarts): the sender's next step (the receiver jumps to
 * it when it is behind, so the pair gossips on the same step again), flags
 * (JOIN: a new incarnation, whose old edge state is void; WANT_STATE: send
 * me your model), and the sender's edge acknowledgement, which settles
 * every term the two still have staged (gossip/edges.c), so the handshake
 * leaves the edge with nothing pending and the same verdict on both ends.
 *
 * STATE carries a live neighbour's model to a node that joins late or
 * restarts without a checkpoint: the step, the tensor count, each tensor's
 * element count and its float32 values, then (since version 1) the
 * neighbour's optimizer state as rumor_optim_save writes it. The joiner
 * checks every count against its own model (which it built from the same
 * options, so shapes agree unless the peer is misconfigured or hostile) and
 * every value for finiteness before it copies anything; the optimizer bytes are
 * only bounded here (by the rest of the message) and handed back
 * borrowed, for rumor_optim_load, which checks kind, size and values. The
 * momentum buffer is worth taking although it comes from another data
 * shard: the models are close to consensus, so the smoothed gradients are
 * too, while a buffer restarted from zero makes the joiner's steps up to
 * 1 / (1 - beta) times (10x for beta 0.9) shorter than its neighbours'
 * until it rebuilds, about 1 / (1 - beta) steps, so it trails the network
 * it just joined. Version 2 adds what an elastic ring's joiner needs
 * besides (docs/reliability.md, "Elastic rings: the design"): the
 * sender's membership epoch in the header, and after the optimizer part,
 * which now has a length of its own, the algorithm's state as
 * rumor_gossip_state_save writes it (PowerSGD's warm-start Q, local SGD's
 * anchor), bounded here and checked by rumor_gossip_state_load. Versions 0
 * (no optimizer part) and 1 are still accepted, with epoch 0 and no gossip
 * part.
 *
 * Everything is little-endian; decoders are pure (fuzzed by
 * tests/fuzz/fuzz_statesync.c) and never trust a length.
 */
#include "node/statesync.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define SYNC_MAGIC  0x4e595352u /* "RSYN" */
#define STATE_MAGIC 0x54535352u /* "RSST" */

static void
s_put(uint8_t *p, uint64_t v, int bytes)
{
    for (int b = 0; b < bytes; b++)
        p[b] = (uint8_t)(v >> (8 * b));
}

static uint64_t
s_get(const uint8_t *p, int bytes)
{
    uint64_t v = 0;
    for (int b = bytes - 1; b >= 0; b--)
        v = v << 8 | p[b];
    return v;
}

size_t
node_sync_encode(const struct node_sync *s, uint8_t *out, size_t cap)
{
    if (cap < NODE_SYNC_HEADER_BYTES)
        return 0;
    size_t ack = rumor_gossip_ack_encode(&s->ack,
                                         out + NODE_SYNC_HEADER_BYTES,
                                         cap - NODE_SYNC_HEADER_BYTES);
    if (ack == 0)
        return 0;
    s_put(out, SYNC_MAGIC, 4);
    s_put(out + 4, s->flags, 4);
    s_put(out + 8, s->step, 8);
    s_put(out + 16, ack, 8);
    return NODE_SYNC_HEADER_BYTES + ack;
}

rumor_err
node_sync_decode(const uint8_t *buf, size_t len, struct node_sync *out)
{
    memset(out, 0, sizeof *out);
    if (len < NODE_SYNC_HEADER_BYTES || s_get(buf, 4) != SYNC_MAGIC)
        return RUMOR_EPROTO;
    uint64_t flags = s_get(buf + 4, 4);
    uint64_t ack = s_get(buf + 16, 8);
    if ((flags & ~(uint64_t)(NODE_SYNC_JOIN | NODE_SYNC_WANT_STATE |
                             NODE_SYNC_DONE)) != 0 ||
        ack != len - NODE_SYNC_HEADER_BYTES)
        return RUMOR_EPROTO;
    rumor_err rc = rumor_gossip_ack_decode(buf + NODE_SYNC_HEADER_BYTES,
                                           (size_t)ack,
                                           &out->ack);
    if (rc != RUMOR_OK) {
        memset(out, 0, sizeof *out);
        return rc;
    }
    out->flags = (uint32_t)flags;
    out->step = s_get(buf + 8, 8);
    return RUMOR_OK;
}

size_t
node_state_bytes(const struct rumor_model *m, const struct node_state_parts *p)
{
    size_t n = NODE_STATE_HEADER_BYTES + 8 + p->optim_len + 8 + p->gossip_len;
    for (size_t t = 0; t < m->count; t++)
        n += 8 + rumor_tensor_numel(&m->tensors[t]) * sizeof(float);
    return n;
}

/* Writes a u64 length and its bytes at out; returns the offset after. */
static size_t
s_put_part(uint8_t *out, const uint8_t *data, size_t len)
{
    s_put(out, len, 8);
    if (len > 0)
        memcpy(out + 8, data, len);
    return 8 + len;
}

size_t
node_state_encode(const struct rumor_model *m,
                  const struct node_state_parts *p,
                  uint8_t *out,
                  size_t cap)
{
    size_t need = node_state_bytes(m, p), at = NODE_STATE_HEADER_BYTES;
    if (cap < need)
        return 0;
    s_put(out, STATE_MAGIC, 4);
    s_put(out + 4, NODE_STATE_VERSION, 4);
    s_put(out + 8, p->step, 8);
    s_put(out + 16, m->count, 8);
    s_put(out + 24, p->epoch, 8);
    for (size_t t = 0; t < m->count; t++) {
        size_t n = rumor_tensor_numel(&m->tensors[t]);
        s_put(out + at, n, 8);
        memcpy(out + at + 8, m->tensors[t].data, n * sizeof(float));
        at += 8 + n * sizeof(float);
    }
    at += s_put_part(out + at, p->optim, p->optim_len);
    s_put_part(out + at, p->gossip, p->gossip_len);
    return need;
}

/* Walks the tensors from offset `at`: checks (copy false) or copies (copy
 * true); *end receives the offset after the last one. */
static rumor_err
s_state_walk(const uint8_t *buf,
             size_t len,
             size_t at,
             const struct rumor_model *m,
             bool copy,
             size_t *end)
{
    for (size_t t = 0; t < m->count; t++) {
        if (len - at < 8)
            return RUMOR_EPROTO;
        uint64_t n = s_get(buf + at, 8);
        at += 8;
        if (n != rumor_tensor_numel(&m->tensors[t]) ||
            n > (len - at) / sizeof(float))
            return RUMOR_EPROTO;
        for (uint64_t e = 0; e < n && !copy; e++) {
            float v;
            memcpy(&v, buf + at + e * sizeof v, sizeof v);
            if (!isfinite(v))
                return RUMOR_ENUMERIC;
        }
        if (copy && m->tensors[t].data != NULL)
            memcpy(m->tensors[t].data, buf + at, n * sizeof(float));
        at += n * sizeof(float);
    }
    *end = at;
    return RUMOR_OK;
}

/* Reads a u64 length at `at` and borrows that many bytes after it, which
 * must lie in the message; returns the offset after the part, 0 when it
 * does not fit. */
static size_t
s_get_part(const uint8_t *buf,
           size_t len,
           size_t at,
           const uint8_t **data,
           size_t *n)
{
    if (len - at < 8)
        return 0;
    uint64_t k = s_get(buf + at, 8);
    if (k > len - at - 8)
        return 0;
    *data = k > 0 ? buf + at + 8 : NULL;
    *n = (size_t)k;
    return at + 8 + (size_t)k;
}

/* The parts after the tensors, from `at`: none in version 0; the
 * optimizer part in version 1, then in version 2 the gossip part, which
 * must stay within its cap; the last part ends the message exactly. */
static rumor_err
s_state_parts(const uint8_t *buf,
              size_t len,
              size_t at,
              uint64_t version,
              struct node_state_parts *p)
{
    if (version >= 1)
        at = s_get_part(buf, len, at, &p->optim, &p->optim_len);
    if (version >= 2 && at != 0)
        at = s_get_part(buf, len, at, &p->gossip, &p->gossip_len);
    return at == len && p->gossip_len <= RUMOR_GOSSIP_STATE_MAX ? RUMOR_OK
                                                                : RUMOR_EPROTO;
}

static size_t
s_header(const uint8_t *buf)
{
    return s_get(buf + 4, 4) >= 2 ? NODE_STATE_HEADER_BYTES
                                  : NODE_STATE_HEADER_V1_BYTES;
}

rumor_err
node_state_decode(const uint8_t *buf,
                  size_t len,
                  struct rumor_model *m,
                  struct node_state_parts *out)
{
    rumor_err rc = node_state_check(buf, len, m, out);
    size_t end = 0;
    if (rc == RUMOR_OK)
        (void)s_state_walk(buf, len, s_header(buf), m, true, &end);
    return rc;
}

rumor_err
node_state_check(const uint8_t *buf,
                 size_t len,
                 const struct rumor_model *m,
                 struct node_state_parts *out)
{
    *out = (struct node_state_parts){0};
    uint64_t version = len >= 8 ? s_get(buf + 4, 4) : 0;
    size_t header =
        version >= 2 ? NODE_STATE_HEADER_BYTES : NODE_STATE_HEADER_V1_BYTES;
    if (len < header || s_get(buf, 4) != STATE_MAGIC ||
        version > NODE_STATE_VERSION || s_get(buf + 16, 8) != m->count ||
        m->count > NODE_STATE_TENSORS_MAX)
        return RUMOR_EPROTO;
    size_t end = 0;
    rumor_err rc = s_state_walk(buf, len, header, m, false, &end);
    if (rc == RUMOR_OK)
        rc = s_state_parts(buf, len, end, version, out);
    if (rc != RUMOR_OK) {
        *out = (struct node_state_parts){0};
        return rc;
    }
    out->step = s_get(buf + 8, 8);
    out->epoch = version >= 2 ? s_get(buf + 24, 8) : 0;
    return RUMOR_OK;
}

double
node_state_distance(const uint8_t *a, const uint8_t *b, size_t count)
{
    size_t at = s_header(a), bt = s_header(b);
    double diff = 0, na = 0, nb = 0;
    for (size_t t = 0; t < count; t++) {
        uint64_t n = s_get(a + at, 8);
        at += 8;
        bt += 8;
        for (uint64_t e = 0; e < n; e++) {
            float x, y;
            memcpy(&x, a + at + e * sizeof x, sizeof x);
            memcpy(&y, b + bt + e * sizeof y, sizeof y);
            diff += ((double)x - y) * ((double)x - y);
            na += (double)x * x;
            nb += (double)y * y;
        }
        at += n * sizeof(float);
        bt += n * sizeof(float);
    }
    double scale = sqrt(na > nb ? na : nb);
    return scale > 0 ? sqrt(diff) / scale : sqrt(diff);
}

/* A buffer of at least need bytes in *buf (capacity *cap). */
static rumor_err
s_reserve(uint8_t **buf, size_t *cap, size_t need)
{
    if (need <= *cap)
        return RUMOR_OK;
    uint8_t *b = realloc(*buf, need);
    if (b == NULL)
        return RUMOR_ENOMEM;
    *buf = b;
    *cap = need;
    return RUMOR_OK;
}

rumor_err
node_state_pack(const struct rumor_model *m,
                const rumor_optim *o,
                const struct node_state_parts *p,
                struct node_state_buf *b,
                size_t *len)
{
    struct node_state_parts parts = *p;
    rumor_err rc = RUMOR_OK;
    if (o != NULL) {
        size_t n = rumor_optim_state_bytes(o);
        parts.optim_len = 0;
        rc = s_reserve(&b->optim, &b->optim_cap, n + 1);
        if (rc == RUMOR_OK)
            rc = rumor_optim_save(o, b->optim, n, &parts.optim_len);
        parts.optim = b->optim;
    }
    size_t need = node_state_bytes(m, &parts);
    if (rc == RUMOR_OK)
        rc = s_reserve(&b->msg, &b->msg_cap, need);
    *len =
        rc == RUMOR_OK ? node_state_encode(m, &parts, b->msg, b->msg_cap) : 0;
    return rc;
}

void
node_state_buf_free(struct node_state_buf *b)
{
    free(b->optim);
    free(b->msg);
    *b = (struct node_state_buf){0};
}
