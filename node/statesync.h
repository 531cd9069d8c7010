/*
 * Private to node/: the control messages of fault handling (docs/protocol.md,
 * "Edge acknowledgements, sync and state transfer"): SYNC (the down/up
 * handshake and a restarted node's hello) and STATE (a live neighbour's
 * model, optimizer state and gossip state for a node that joins). Encoders
 * write into caller buffers; decoders are pure and check every length against
 * what is left and against the caps before anything is used.
 */
#ifndef RUMOR_NODE_STATESYNC_H
#define RUMOR_NODE_STATESYNC_H

#include "rumor/gossip.h"
#include "rumor/train.h"

#define NODE_SYNC_HEADER_BYTES 24
#define NODE_SYNC_BYTES_MAX \
    (NODE_SYNC_HEADER_BYTES + RUMOR_GOSSIP_ACK_BYTES_MAX)
#define NODE_SYNC_JOIN       1u /* a new incarnation: forget the edge */
#define NODE_SYNC_WANT_STATE 2u /* answer with a STATE message too */
#define NODE_SYNC_DONE       4u /* the sender ran the last step: gone */
/* The header of versions 0 and 1; version 2 adds the epoch after it. */
#define NODE_STATE_HEADER_V1_BYTES 24
#define NODE_STATE_HEADER_BYTES    32
/* 1: an optimizer part after the model; 2: its length no longer runs to
 * the end but is followed by a gossip-state part, and the epoch */
#define NODE_STATE_VERSION     2u
#define NODE_STATE_TENSORS_MAX RUMOR_GOSSIP_MAX_TENSORS

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

/* What a STATE message carries besides the model. On decode the two
 * parts are borrowed from the message (NULL and 0 when absent). */
struct node_state_parts {
    uint64_t step;  /* the sender's next step */
    uint64_t epoch; /* the sender's membership epoch; 0 when not elastic */
    const uint8_t *optim; /* rumor_optim_save's bytes */
    size_t optim_len;
    const uint8_t *gossip; /* rumor_gossip_state_save's bytes */
    size_t gossip_len;
};

/* Bytes of the STATE message of model m with p's two parts (only their
 * lengths are read). */
size_t node_state_bytes(const struct rumor_model *m,
                        const struct node_state_parts *p);

/* Writes the STATE message (version NODE_STATE_VERSION) of model m with
 * p's step, epoch and parts (either may be empty) into out (cap >=
 * node_state_bytes); returns the length or 0. A receiver refuses a gossip
 * part over RUMOR_GOSSIP_STATE_MAX: save it into a buffer of that cap. */
size_t node_state_encode(const struct rumor_model *m,
                         const struct node_state_parts *p,
                         uint8_t *out,
                         size_t cap);

/* Checks a STATE message (version 0, 1 or 2) against the shapes of m
 * (tensor count, element counts, finite values) and the lengths of its
 * parts against what is left (the gossip part also against
 * RUMOR_GOSSIP_STATE_MAX), and only then copies the model into m; *out
 * receives step, epoch (0 before version 2) and the two parts, unchecked
 * inside (rumor_optim_load and rumor_gossip_state_load check them; empty
 * when the version has none). RUMOR_EPROTO (wrong magic, version, count or
 * length) or RUMOR_ENUMERIC (NaN or Inf), m unchanged and *out zeroed on
 * error. With m's data NULL nothing is copied. */
rumor_err node_state_decode(const uint8_t *buf,
                            size_t len,
                            struct rumor_model *m,
                            struct node_state_parts *out);

/* node_state_decode's checks, without copying anything into m. */
rumor_err node_state_check(const uint8_t *buf,
                           size_t len,
                           const struct rumor_model *m,
                           struct node_state_parts *out);

/* The relative distance ||a - b|| / max(||a||, ||b||) of the models of two
 * STATE messages that node_state_check passed for the same model of count
 * tensors (the plain ||a - b|| when both are zero). A joiner takes a
 * neighbour's state only when a second neighbour's is this close
 * (node/faults.c). */
double node_state_distance(const uint8_t *a, const uint8_t *b, size_t count);

/* The buffers node_state_pack grows and reuses. */
struct node_state_buf {
    uint8_t *optim, *msg;
    size_t optim_cap, msg_cap;
};

/* The STATE message of model m with the state of optimizer o (NULL: p's
 * optimizer part, which may be empty) and p's step, epoch and gossip part
 * into b->msg; *len receives its length. RUMOR_ENOMEM, or what
 * rumor_optim_save returns. */
rumor_err node_state_pack(const struct rumor_model *m,
                          const rumor_optim *o,
                          const struct node_state_parts *p,
                          struct node_state_buf *b,
                          size_t *len);

void node_state_buf_free(struct node_state_buf *b);

#endif
