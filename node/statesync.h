/*
 * Private to node/: the control messages of fault handling (docs/protocol.md,
 * "Edge acknowledgements, sync and state transfer"): SYNC (the down/up
 * handshake and a restarted node's hello) and STATE (a live neighbour's
 * model for a node that joins). Encoders write into caller buffers;
 * decoders are pure and check every length against what is left and
 * against the caps before anything is used.
 */
#ifndef RUMOR_NODE_STATESYNC_H
#define RUMOR_NODE_STATESYNC_H

#include "rumor/gossip.h"

#define NODE_SYNC_HEADER_BYTES 24
#define NODE_SYNC_BYTES_MAX \
    (NODE_SYNC_HEADER_BYTES + RUMOR_GOSSIP_ACK_BYTES_MAX)
#define NODE_SYNC_JOIN          1u /* a new incarnation: forget the edge */
#define NODE_SYNC_WANT_STATE    2u /* answer with a STATE message too */
#define NODE_SYNC_DONE          4u /* the sender ran the last step: gone */
#define NODE_STATE_HEADER_BYTES 24
#define NODE_STATE_VERSION      1u /* 1: an optimizer part after the model */
#define NODE_STATE_TENSORS_MAX  RUMOR_GOSSIP_MAX_TENSORS

struct node_sync {
    uint32_t flags;              /* NODE_SYNC_* */
    uint64_t step;               /* the sender's next step */
    struct rumor_gossip_ack ack; /* what the sender holds from the receiver */
};

/* Writes s into out (cap bytes); returns the length, 0 when it does not
 * fit. */
size_t node_sync_encode(const struct node_sync *s, uint8_t *out, size_t cap);

/* RUMOR_EPROTO (out zeroed) unless buf is exactly one SYNC message. */
rumor_err
node_sync_decode(const uint8_t *buf, size_t len, struct node_sync *out);

/* The optimizer part of a STATE message: rumor_optim_save's bytes,
 * borrowed from the message (NULL and 0 when it has none). */
struct node_state_optim {
    const uint8_t *data;
    size_t len;
};

/* Bytes of a STATE message for model m and optim_len optimizer bytes. */
size_t node_state_bytes(const struct rumor_model *m, size_t optim_len);

/* Writes the STATE message (version NODE_STATE_VERSION) of model m after
 * `step` steps, with the optimizer state optim[0..optim_len) (from
 * rumor_optim_save; optim_len may be 0), into out (cap >=
 * node_state_bytes); returns the length or 0. */
size_t node_state_encode(const struct rumor_model *m,
                         uint64_t step,
                         const uint8_t *optim,
                         size_t optim_len,
                         uint8_t *out,
                         size_t cap);

/* Checks a STATE message (version 0 or 1) against the shapes of m (tensor
 * count, element counts, finite values) and the optimizer part's length
 * against what is left, and only then copies the model into m; *step
 * receives the sender's step and *optim the optimizer bytes (unchecked
 * inside: rumor_optim_load checks them). RUMOR_EPROTO (wrong magic,
 * version, count or length) or RUMOR_ENUMERIC (NaN or Inf), m unchanged
 * and *optim empty on error. With m's data NULL nothing is copied. */
rumor_err node_state_decode(const uint8_t *buf,
                            size_t len,
                            struct rumor_model *m,
                            uint64_t *step,
                            struct node_state_optim *optim);

#endif
