/*
 * Private to net/: the pure pieces of the transport with an injected
 * clock, so that unit tests drive them without sockets or sleeps (message
 * kinds and prepared frames: wire.c; token bucket and replay window: io.c;
 * liveness and backoff: link.c; the rate limit of drop logs: io.c), and
 * the ZAP handler thread (zap.c). The transport's own state and its parts:
 * transport.h.
 */
#ifndef RUMOR_NET_IMPL_H
#define RUMOR_NET_IMPL_H

#include "rumor/net.h"

/* A refusal is logged once per peer address (or peer) and reason in this
 * many ms, with the count of the others (rumor_log_limited): a stranger
 * can make one per connect, and a flood of them must not flood the log. */
#define NET_REFUSAL_LOG_MS 10000

/* --- message kinds (wire.c) ------------------------------------------------
 */

/* True for the kinds a caller sends and receives (GOSSIP .. MEMBER). */
bool net_kind_is_message(uint8_t kind);

/* True for the message kinds that belong to a step (GOSSIP, PROBE, ACK,
 * PING): taken by (step, round), dropped once their step is closed. */
bool net_kind_has_step(uint8_t kind);

/* True when kind is known and round, stop and codec are zero unless it is
 * GOSSIP: those fields belong to GOSSIP alone, so that none can carry a
 * second meaning in another kind. */
bool
net_kind_fields_fit(uint8_t kind, uint32_t round, uint32_t stop, uint8_t codec);

/* --- frames built ahead of time ------------------------------------------- */

/* rumor_net_frame_encode that also returns the payload's crc32c. */
rumor_err net_frame_build(const struct rumor_net_header *h,
                          const void *payload,
                          uint8_t *out,
                          size_t out_cap,
                          size_t *written,
                          uint32_t *payload_crc);

/* Writes seq into an encoded frame and its crc from the payload's crc:
 * crc32c(payload) continued over header bytes 0..59. */
void net_frame_seal(uint8_t *frame, uint64_t seq, uint32_t payload_crc);

/* --- token bucket (link shaping) ------------------------------------------ */

struct net_bucket {
    double rate;      /* bytes per second; 0: unlimited */
    double burst;     /* bucket size in bytes */
    double tokens;    /* bytes that may go now (may be negative: debt) */
    uint64_t last_ns; /* time of the last refill */
};

/* Starts full at now_ns. rate_bits 0 means no limit. */
void net_bucket_init(struct net_bucket *b,
                     uint64_t rate_bits,
                     double burst_bytes,
                     uint64_t now_ns);

/* Returns 0 and takes bytes when the bucket is not in debt at now_ns (a
 * frame larger than the burst may go and leave debt); otherwise returns
 * how many ns to wait before asking again. */
uint64_t net_bucket_take(struct net_bucket *b, size_t bytes, uint64_t now_ns);

/* --- replay window (OpenVPN packet_id style, R8.5) ------------------------ */

#define NET_REPLAY_WINDOW 64

struct net_replay {
    uint64_t top;  /* highest seq accepted, 0 when none */
    uint64_t mask; /* bit i set: seq (top - i) was seen */
};

void net_replay_reset(struct net_replay *r);

/* True (and records seq) when seq is new and not older than the window;
 * false for 0, duplicates, and seq <= top - NET_REPLAY_WINDOW. */
bool net_replay_accept(struct net_replay *r, uint64_t seq);

/* --- liveness ------------------------------------------------------------- */

struct net_liveness {
    uint64_t last_ns;      /* last time anything was heard, 0: never */
    rumor_net_state state; /* as of the last update */
};

/* State at now_ns from the last time heard. */
rumor_net_state net_liveness_state(const struct net_liveness *l,
                                   uint64_t now_ns,
                                   uint32_t late_ms,
                                   uint32_t down_ms);

/* Records traffic at now_ns. */
void net_liveness_heard(struct net_liveness *l, uint64_t now_ns);

/* Moves l->state to the state at now_ns; returns true when it changed. */
bool net_liveness_update(struct net_liveness *l,
                         uint64_t now_ns,
                         uint32_t late_ms,
                         uint32_t down_ms);

/* Next time (ns) at which the state would change, UINT64_MAX if never. */
uint64_t net_liveness_next(const struct net_liveness *l,
                           uint32_t late_ms,
                           uint32_t down_ms);

/* --- reconnect backoff ---------------------------------------------------- */

/* base * 2^attempt, capped at max (all in ms). */
uint32_t net_backoff_ms(uint32_t base_ms, uint32_t max_ms, uint32_t attempt);

/* --- keys ----------------------------------------------------------------- */

/* The 40-character Z85 CURVE secret key, borrowed (sodium_malloc'd
 * memory), and the CURVE public key, both derived from the identity. */
const char *net_keypair_secret(const rumor_net_keypair *kp);
const char *net_keypair_curve_public(const rumor_net_keypair *kp);

/* --- ZAP handler (zap.c) -------------------------------------------------- */

struct net_zap;

/* Binds the ZAP REP socket in ctx and starts the handler thread; returns
 * once it is bound (so no CURVE socket can exist before it). keys: n Z85
 * public keys (copied). notify_endpoint: an inproc PAIR endpoint the
 * handler connects to, to say "dead" when it stops on its own. */
rumor_err net_zap_start(void *ctx,
                        const char *const *keys,
                        size_t n,
                        const char *notify_endpoint,
                        struct net_zap **out);

/* Asks the handler to stop; silent: without the "dead" notice. */
void net_zap_stop(struct net_zap *zap, bool silent);

/* Joins the thread and frees; safe on NULL and twice. */
void net_zap_destroy(struct net_zap **self_p);

/* --- fault injection (net.c), for the tests of the fail-closed ZAP path -- */

typedef enum net_fault {
    /* The ZAP handler stops as if it died: the node must close its
     * listener and report RUMOR_EAUTH. */
    NET_FAULT_ZAP_STOP = 1,
    /* The ZAP handler closes its socket without telling anyone: only the
     * User-Id check stands between a client and the node. */
    NET_FAULT_ZAP_SILENT = 2
} net_fault;

/* RUMOR_OK while the transport works; RUMOR_EAUTH after it failed closed
 * (the ZAP handler died and the listener was closed): what _recv, _send
 * and _wait_ready then return. */
rumor_err net_status(rumor_net *net);

/* Injects a fault; returns once the fault has taken effect. */
rumor_err net_fault_inject(rumor_net *net, net_fault fault);

#endif /* RUMOR_NET_IMPL_H */
