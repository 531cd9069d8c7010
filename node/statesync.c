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
 * element count and its float32 values, then (version 1) the neighbour's
 * optimizer state as rumor_optim_save writes it. The joiner checks every
 * count against its own model (which it built from the same options, so
 * shapes agree unless the peer is misconfigured or hostile) and every
 * value for finiteness before it copies anything; the optimizer bytes are
 * only bounded here (exactly the rest of the message) and handed back
 * borrowed, for rumor_optim_load, which checks kind, size and values. The
 * momentum buffer is worth taking although it comes from another data
 * shard: the models are close to consensus, so the smoothed gradients are
 * too, while a buffer restarted from zero makes the joiner's steps up to
 * 1 / (1 - beta) times (10x for beta 0.9) shorter than its neighbours'
 * until it rebuilds, about 1 / (1 - beta) steps, so it trails the network
 * it just joined. Version 0 (no optimizer part) is still accepted.
 *
 * Everything is little-endian; decoders are pure (fuzzed by
 * tests/fuzz/fuzz_statesync.c) and never trust a length.
 */
#include "node/statesync.h"

#include <math.h>
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
node_state_bytes(const struct rumor_model *m, size_t optim_len)
{
    size_t n = NODE_STATE_HEADER_BYTES + 8 + optim_len;
    for (size_t t = 0; t < m->count; t++)
        n += 8 + rumor_tensor_numel(&m->tensors[t]) * sizeof(float);
    return n;
}

size_t
node_state_encode(const struct rumor_model *m,
                  uint64_t step,
                  const uint8_t *optim,
                  size_t optim_len,
                  uint8_t *out,
                  size_t cap)
{
    size_t need = node_state_bytes(m, optim_len), at = NODE_STATE_HEADER_BYTES;
    if (cap < need)
        return 0;
    s_put(out, STATE_MAGIC, 4);
    s_put(out + 4, NODE_STATE_VERSION, 4);
    s_put(out + 8, step, 8);
    s_put(out + 16, m->count, 8);
    for (size_t t = 0; t < m->count; t++) {
        size_t n = rumor_tensor_numel(&m->tensors[t]);
        s_put(out + at, n, 8);
        memcpy(out + at + 8, m->tensors[t].data, n * sizeof(float));
        at += 8 + n * sizeof(float);
    }
    s_put(out + at, optim_len, 8);
    if (optim_len > 0)
        memcpy(out + at + 8, optim, optim_len);
    return need;
}

/* Walks the tensors: checks (copy false) or copies (copy true); *end
 * receives the offset after the last one. */
static rumor_err
s_state_walk(const uint8_t *buf,
             size_t len,
             struct rumor_model *m,
             bool copy,
             size_t *end)
{
    size_t at = NODE_STATE_HEADER_BYTES;
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

/* Version 1's tail after the tensors at `at`: u64 length, then exactly
 * that many optimizer bytes to the end. */
static rumor_err
s_state_optim(const uint8_t *buf,
              size_t len,
              size_t at,
              uint64_t version,
              struct node_state_optim *optim)
{
    if (version == 0)
        return at == len ? RUMOR_OK : RUMOR_EPROTO;
    if (len - at < 8)
        return RUMOR_EPROTO;
    uint64_t n = s_get(buf + at, 8);
    if (n != len - at - 8)
        return RUMOR_EPROTO;
    optim->data = n > 0 ? buf + at + 8 : NULL;
    optim->len = (size_t)n;
    return RUMOR_OK;
}

rumor_err
node_state_decode(const uint8_t *buf,
                  size_t len,
                  struct rumor_model *m,
                  uint64_t *step,
                  struct node_state_optim *optim)
{
    *step = 0;
    *optim = (struct node_state_optim){NULL, 0};
    uint64_t version = len >= 8 ? s_get(buf + 4, 4) : 0;
    if (len < NODE_STATE_HEADER_BYTES || s_get(buf, 4) != STATE_MAGIC ||
        version > NODE_STATE_VERSION || s_get(buf + 16, 8) != m->count ||
        m->count > NODE_STATE_TENSORS_MAX)
        return RUMOR_EPROTO;
    size_t end = 0;
    rumor_err rc = s_state_walk(buf, len, m, false, &end);
    if (rc == RUMOR_OK)
        rc = s_state_optim(buf, len, end, version, optim);
    if (rc != RUMOR_OK) {
        *optim = (struct node_state_optim){NULL, 0};
        return rc;
    }
    (void)s_state_walk(buf, len, m, true, &end);
    *step = s_get(buf + 8, 8);
    return RUMOR_OK;
}
