/*
 * net: the transport between nodes (docs/protocol.md). ZeroMQ sockets with
 * CURVE on every link, a ZAP allow-list of the topology's public keys,
 * sender binding (the id in a header must belong to the key that
 * authenticated the connection), a fixed little-endian frame header with
 * crc32c, chunking, HELLO (version + fingerprint), per-peer liveness,
 * a replay window per connection, one connection per peer (a second one
 * of the same key never displaces a live one), and optional link shaping
 * (rate, delay) for experiments.
 *
 * Thread safety: the frame codec and the key functions are pure or work on
 * distinct objects. A rumor_net owns one I/O thread that alone touches its
 * ZeroMQ sockets; rumor_net_send / _recv / _peer_state / _stats may be
 * called from any thread (they only take the transport's mutex).
 * Ownership: rumor_net copies everything it is given (payloads, keys,
 * endpoints); messages returned by rumor_net_recv are owned by the caller
 * and freed with rumor_net_msg_free.
 */
#ifndef RUMOR_NET_H
#define RUMOR_NET_H

#include "rumor/core.h"
#include "rumor/topology.h"

/* --- frame codec (pure; docs/protocol.md "## Frames") ------------------ */

#define RUMOR_NET_MAGIC           0x524d5552u /* "RUMR" as little-endian bytes */
#define RUMOR_NET_VERSION         4
#define RUMOR_NET_HEADER_BYTES    RUMOR_FRAME_HEADER_BYTES
#define RUMOR_NET_HELLO_BYTES     24    /* the fixed part of a HELLO payload */
#define RUMOR_NET_HELLO_DESC_MAX  65536 /* cap on the description after it */
#define RUMOR_NET_REFUSE_TEXT_MAX 200
#define RUMOR_NET_CHUNK_MIN       (64u << 10) /* smallest chunk option */
#define RUMOR_NET_CHUNK_MAX       RUMOR_FRAME_CHUNK_MAX /* and frame payload */
#define RUMOR_NET_MESSAGE_MAX     (1u << 30) /* hard cap on a whole message */
#define RUMOR_NET_KEY_TEXT_BYTES  40         /* Z85 of a 32-byte CURVE key */
#define RUMOR_NET_ID_TEXT_BYTES   48 /* "ed25519:" + Z85 of a 32-byte key */
#define RUMOR_NET_SIG_BYTES       64 /* an Ed25519 signature */

/* What a frame is. The transport's own kinds (HELLO .. HEARTBEAT) never
 * reach the caller; the others are messages: chunked, reassembled and
 * handed to rumor_net_recv, which takes them by kind. */
typedef enum rumor_net_kind {
    RUMOR_NET_KIND_HELLO = 1,     /* DEALER -> ROUTER: version, fingerprint */
    RUMOR_NET_KIND_HELLO_OK = 2,  /* ROUTER -> DEALER: accepted */
    RUMOR_NET_KIND_REFUSE = 3,    /* ROUTER -> DEALER: refused, with reason */
    RUMOR_NET_KIND_HEARTBEAT = 4, /* DEALER -> ROUTER: liveness */
    RUMOR_NET_KIND_GOSSIP = 5,    /* an algorithm's message of (step, round) */
    RUMOR_NET_KIND_PROBE = 6,     /* the consensus probe of a step */
    RUMOR_NET_KIND_ACK = 7,       /* edge acknowledgement after a step */
    RUMOR_NET_KIND_SYNC = 8,      /* handshake request (probe of a peer) */
    RUMOR_NET_KIND_SYNC_ANSWER = 9, /* handshake answer */
    RUMOR_NET_KIND_STATE = 10,      /* model and optimizer for a joiner */
    RUMOR_NET_KIND_PING = 11,       /* `rumor ping` test traffic */
    RUMOR_NET_KIND_MEMBER = 12      /* the view change of elastic rings */
} rumor_net_kind;

#define RUMOR_NET_KIND_MAX RUMOR_NET_KIND_MEMBER

/* Static lower-case name of a kind ("gossip"), "unknown" for others. */
RUMOR_API const char *rumor_net_kind_name(uint8_t kind);

/* A decoded frame header. Encoded as 64 little-endian bytes, see
 * docs/protocol.md; crc is crc32c of the payload continued over header
 * bytes 0..59. Each field means one thing in every kind; a field a kind
 * does not use is zero (checked by decode). */
struct rumor_net_header {
    uint8_t version;      /* RUMOR_NET_VERSION */
    uint8_t kind;         /* rumor_net_kind */
    uint8_t codec;        /* GOSSIP: id of the codec the sender's algorithm
                             compresses with (rumor_codec_id), 0: none;
                             other kinds: 0 (the kind fixes the payload) */
    uint32_t sender;      /* node id of the sender */
    uint32_t round;       /* GOSSIP: exchange round inside the step */
    uint64_t step;        /* training step (handshake kinds: the sender's
                             next step) */
    uint64_t seq;         /* per (sender, receiver) frame number, from 1 */
    uint32_t stop;        /* GOSSIP: the sender's stop plan, 0: none, k:
                             it runs no step from step + k on */
    uint32_t chunk;       /* index of this chunk, < chunks */
    uint32_t chunks;      /* chunks in the whole message, >= 1 */
    uint32_t payload_len; /* bytes of payload in this frame */
    uint32_t total_len;   /* bytes of the whole message (all chunks) */
    uint32_t crc;         /* crc32c, filled by encode, checked by decode */
};

/* Writes the header and payload (h->payload_len bytes) into out, computing
 * the crc; the magic is RUMOR_NET_MAGIC and the version h->version (so
 * tests can forge another).
 * Errors: RUMOR_ETOOBIG when out_cap < 64 + payload_len, RUMOR_EINVAL when
 * the header is inconsistent (chunk >= chunks, payload_len > total_len). */
RUMOR_API rumor_err rumor_net_frame_encode(const struct rumor_net_header *h,
                                           const void *payload,
                                           uint8_t *out,
                                           size_t out_cap,
                                           size_t *written);

/* Decodes one frame of len bytes. Pure: no allocation, no assert on input.
 * On success fills *out and sets *payload to the payload inside buf
 * (borrowed). On error *out is zeroed and *payload NULL. Errors:
 * RUMOR_EPROTO (short, bad magic, unknown version or kind, nonzero flags
 * or reserved bytes, a round, stop or codec in a kind that has none,
 * chunk >= chunks, lengths that disagree with len, bad crc),
 * RUMOR_ETOOBIG (payload_len > RUMOR_NET_CHUNK_MAX or total_len >
 * max_message). */
RUMOR_API rumor_err rumor_net_frame_decode(const uint8_t *buf,
                                           size_t len,
                                           size_t max_message,
                                           struct rumor_net_header *out,
                                           const uint8_t **payload);

/* The HELLO / HELLO_OK payload: 24 fixed bytes, then (HELLO only) the
 * sender's description, opaque to net, which explains a fingerprint
 * mismatch in words (rumor_net_opts.explain). */
struct rumor_net_hello {
    uint64_t fingerprint; /* hash of model layout and algorithm settings */
    uint64_t epoch;       /* random per transport (logs tell a restart from
                             a reconnect by it; it proves nothing) */
    uint32_t max_message; /* the sender's max message bytes */
    uint32_t chunk_bytes; /* the sender's chunk size */
    const uint8_t *desc;  /* decode: the description, borrowed from buf */
    size_t desc_len;      /* decode: its bytes, <= RUMOR_NET_HELLO_DESC_MAX */
};

/* Writes the 24 fixed bytes (desc is not written: a sender appends it). */
RUMOR_API void rumor_net_hello_encode(const struct rumor_net_hello *h,
                                      uint8_t out[RUMOR_NET_HELLO_BYTES]);

/* RUMOR_EPROTO unless RUMOR_NET_HELLO_BYTES <= len <= RUMOR_NET_HELLO_BYTES
 * + RUMOR_NET_HELLO_DESC_MAX and the chunk size is in [RUMOR_NET_CHUNK_MIN,
 * RUMOR_NET_CHUNK_MAX]; the bytes past the fixed part are the description
 * (desc points into buf). *out zeroed on error. */
RUMOR_API rumor_err rumor_net_hello_decode(const uint8_t *buf,
                                           size_t len,
                                           struct rumor_net_hello *out);

/* The REFUSE payload: a reason code (rumor_err) and printable ASCII text.
 * decode copies at most RUMOR_NET_REFUSE_TEXT_MAX bytes into text (NUL
 * terminated); RUMOR_EPROTO when short, too long or not printable. */
RUMOR_API size_t rumor_net_refuse_encode(uint32_t reason,
                                         const char *text,
                                         uint8_t *out,
                                         size_t out_cap);
RUMOR_API rumor_err
rumor_net_refuse_decode(const uint8_t *buf,
                        size_t len,
                        uint32_t *reason,
                        char text[RUMOR_NET_REFUSE_TEXT_MAX + 1]);

/* --- node identities ---------------------------------------------------- */

/* A node's identity is an Ed25519 signing key; its CURVE keypair is derived
 * from it (net/keys.c; docs/protocol.md, "Keys"). The listed key, as the
 * topology and BASE.pub hold it, is "ed25519:" + the Z85 public key. */
typedef struct rumor_net_keypair rumor_net_keypair;

/* A fresh keypair; the secrets live in sodium_malloc'd memory. Errors:
 * RUMOR_ENOTSUP (libzmq without CURVE), RUMOR_ENOMEM. */
RUMOR_API rumor_err rumor_net_keypair_generate(rumor_net_keypair **out);

/* Loads BASE.key ("ed25519:" + the Z85 seed, one line; refused unless the
 * file mode gives no access to group or others) and derives the rest.
 * Errors: RUMOR_ENOTFOUND, RUMOR_EIO, RUMOR_EAUTH (file mode too open),
 * RUMOR_EPROTO (not a key, or a CURVE key from before signing: logged with
 * the command that replaces it). */
RUMOR_API rumor_err rumor_net_keypair_load(const char *base,
                                           rumor_net_keypair **out);

/* Writes BASE.key (mode 0600, created exclusively: an existing file is
 * RUMOR_EIO) and BASE.pub (the listed key, one line). On RUMOR_EIO errno
 * says why (EEXIST, ENOSPC, ...). */
RUMOR_API rumor_err rumor_net_keypair_save(const rumor_net_keypair *kp,
                                           const char *base);

/* The listed key (RUMOR_NET_ID_TEXT_BYTES characters), borrowed for the
 * keypair's life. */
RUMOR_API const char *rumor_net_keypair_public(const rumor_net_keypair *kp);

/* The Ed25519 signature of msg[0..len) by kp. */
RUMOR_API void rumor_net_keypair_sign(const rumor_net_keypair *kp,
                                      const uint8_t *msg,
                                      size_t len,
                                      uint8_t sig[RUMOR_NET_SIG_BYTES]);

/* Whether sig is listed's signature of msg[0..len); false for a NULL or
 * malformed listed key. */
RUMOR_API bool rumor_net_key_verify(const char *listed,
                                    const uint8_t *msg,
                                    size_t len,
                                    const uint8_t sig[RUMOR_NET_SIG_BYTES]);

/* Checks a listed key and writes its CURVE public key (Z85) into curve_z85
 * unless NULL. RUMOR_EAUTH for a CURVE key from before signing (40 Z85
 * characters, no marker), RUMOR_EPROTO for anything else not a key. */
RUMOR_API rumor_err
rumor_net_key_check(const char *listed,
                    char curve_z85[RUMOR_NET_KEY_TEXT_BYTES + 1]);

/* Wipes the secret (sodium_free) and sets *self_p to NULL; safe twice. */
RUMOR_API void rumor_net_keypair_destroy(rumor_net_keypair **self_p);

/* --- transport --------------------------------------------------------- */

typedef struct rumor_net rumor_net;

#define RUMOR_NET_ALL UINT32_MAX /* "every peer" in rumor_net_stats */

typedef enum rumor_net_state {
    RUMOR_NET_PEER_DOWN = 0, /* nothing heard for down_ms (or ever) */
    RUMOR_NET_PEER_LATE = 1, /* nothing heard for late_ms */
    RUMOR_NET_PEER_ALIVE = 2 /* heard within late_ms */
} rumor_net_state;

/* A node the transport knows: its key is admitted by ZAP; when link is
 * true a DEALER connects to endpoint (a neighbour). */
struct rumor_net_peer {
    uint32_t id;          /* node id */
    const char *endpoint; /* tcp://host:port; needed when link is true */
    const char *key;      /* listed key; NULL only when insecure */
    bool link;            /* open a DEALER to it */
};

/* Explains why a peer's HELLO has another fingerprint: called on the I/O
 * thread with the peer's description (bytes from the network: check
 * everything); writes printable text of at most RUMOR_NET_REFUSE_TEXT_MAX
 * characters into text (cap bytes) and returns true, or returns false
 * when it cannot tell (the REFUSE then names the two fingerprints). */
typedef bool (*rumor_net_explain_fn)(void *arg,
                                     uint32_t peer,
                                     const uint8_t *desc,
                                     size_t desc_len,
                                     char *text,
                                     size_t cap);

struct rumor_net_opts {
    uint32_t self;                 /* this node's id */
    const char *endpoint;          /* where the ROUTER binds ("tcp://h:*") */
    const rumor_net_keypair *keys; /* this node's keypair (borrowed) */
    const struct rumor_net_peer *peers; /* copied */
    size_t npeers;
    bool insecure;              /* plain TCP, no CURVE: logged as a warning */
    uint64_t fingerprint;       /* must match the peers' */
    uint32_t chunk_bytes;       /* in [CHUNK_MIN, CHUNK_MAX] */
    uint32_t max_message_bytes; /* cap on a received message */
    size_t queue_bytes;         /* per link: bytes waiting to be sent */
    size_t inbox_bytes;         /* per peer: received bytes not yet taken */
    uint32_t heartbeat_ms;      /* heartbeat period */
    uint32_t late_ms;           /* silence before a peer is late */
    uint32_t down_ms;           /* silence before a peer is down */
    uint32_t handshake_ms;      /* ZMQ handshake and connect timeout */
    uint32_t reconnect_ms;      /* first backoff when a link is recreated */
    uint32_t reconnect_max_ms;  /* backoff ceiling */
    uint32_t linger_ms;         /* how long destroy tries to flush */
    uint64_t rate_bits;         /* per-link rate limit in bit/s; 0: none */
    uint32_t delay_ms;          /* per-link added one-way delay; 0: none */

    /* what HELLO says of this node beyond the fingerprint (copied; NULL:
     * nothing), at most RUMOR_NET_HELLO_DESC_MAX bytes */
    const uint8_t *desc;
    size_t desc_len;
    /* NULL: a refusal names the two fingerprints */
    rumor_net_explain_fn explain;
    void *explain_arg; /* borrowed for the net's life */
};

/* Fills opts with defaults (1 MiB chunks, 64 MiB messages, 64 MiB
 * queues and inboxes, heartbeat 250 ms, late 1 s, down 3 s, handshake
 * 2 s, reconnect 100 ms .. 5 s, linger 1 s, no shaping). */
RUMOR_API void rumor_net_opts_default(struct rumor_net_opts *opts);

/* Fills peers[0..*n) from a topology: every other node (admitted by its
 * key), link = true for neighbours in any phase. Strings are borrowed from
 * t. RUMOR_ETOOBIG when cap is too small. */
RUMOR_API rumor_err rumor_net_peers_from_topology(const rumor_topology *t,
                                                  size_t self,
                                                  struct rumor_net_peer *peers,
                                                  size_t cap,
                                                  size_t *n);

/* Starts a transport: the ZAP handler first, then the ROUTER (bound),
 * then one DEALER per linked peer, all on one new I/O thread. *out is
 * set only on success. Errors: RUMOR_EINVAL (bad options, a key missing
 * when secure), RUMOR_EPROTO (a key that is not Z85), RUMOR_EIO (bind
 * failed), RUMOR_ENOTSUP (no CURVE in libzmq), RUMOR_ENOMEM. */
RUMOR_API rumor_err rumor_net_new(const struct rumor_net_opts *opts,
                                  rumor_net **out);

/* Stops the I/O thread (flushing for up to linger_ms), closes every
 * socket, frees everything and sets *self_p to NULL; safe twice. */
RUMOR_API void rumor_net_destroy(rumor_net **self_p);

/* The bound endpoint with the real port, borrowed for the net's life. */
RUMOR_API const char *rumor_net_endpoint(const rumor_net *net);

/* Queues a message for peer (a linked peer). h gives kind (a message
 * kind), codec, step, round and stop; the rest is filled in. payload is
 * copied. Waits while the link's queue is full, until deadline_ns
 * (rumor_clock_ns time). Errors: RUMOR_EINVAL (unknown or unlinked peer,
 * not a message kind, a field the kind does not use), RUMOR_ETOOBIG
 * (len > max_message_bytes), RUMOR_ETIMEDOUT, RUMOR_EAUTH (transport
 * failed closed), RUMOR_ENOMEM. */
RUMOR_API rumor_err rumor_net_send(rumor_net *net,
                                   uint32_t peer,
                                   const struct rumor_net_header *h,
                                   const void *payload,
                                   size_t len,
                                   uint64_t deadline_ns);

/* A received message: the header of its first chunk with payload_len set
 * to the whole length, and the reassembled payload (owned). The payload
 * has no alignment guarantee (a single-chunk message is handed over inside
 * the ZeroMQ message it arrived in, at any address): read it with memcpy
 * or byte loads, never through a cast to float * or uint32_t *. */
struct rumor_net_msg {
    struct rumor_net_header hdr;
    uint8_t *payload; /* owned; free with rumor_net_msg_free */
    size_t len;
    void *hold; /* opaque: the buffer payload lives in (NULL: its own
                   allocation), released by rumor_net_msg_free */
};

/* Takes the oldest message of kind (GOSSIP .. MEMBER) from peer for (step,
 * round), waiting until deadline_ns. The handshake kinds (SYNC,
 * SYNC_ANSWER, STATE) belong to no step: step and round are ignored and
 * the oldest of the kind comes; they are never closed
 * (rumor_net_close_steps_before). Errors: RUMOR_ETIMEDOUT (nothing arrived in
 * time: never hangs), RUMOR_EINVAL (unknown peer), RUMOR_EAUTH (failed closed).
 */
RUMOR_API rumor_err rumor_net_recv(rumor_net *net,
                                   uint32_t peer,
                                   uint8_t kind,
                                   uint64_t step,
                                   uint32_t round,
                                   uint64_t deadline_ns,
                                   struct rumor_net_msg *out);

RUMOR_API void rumor_net_msg_free(struct rumor_net_msg *msg);

/* True when a message of kind (one with a step) from peer for round and a
 * step after step is waiting (the peer is ahead: it has gone past step
 * without sending for it); *later receives the highest such step. Does
 * not take it. */
RUMOR_API bool rumor_net_peek_later(rumor_net *net,
                                    uint32_t peer,
                                    uint8_t kind,
                                    uint64_t step,
                                    uint32_t round,
                                    uint64_t *later);

/* Closes every step below step: received messages of the kinds with a
 * step for them are freed and later arrivals for them are dropped. Unsent
 * messages stay queued (a neighbour may still be waiting for them); a send to a
 * neighbour that is down waits for queue room until its deadline, so callers
 * skip neighbours that rumor_net_peer_state reports down. */
RUMOR_API void rumor_net_close_steps_before(rumor_net *net, uint64_t step);

/* Liveness of peer from what this node received (unknown peer: DOWN). */
RUMOR_API rumor_net_state rumor_net_peer_state(rumor_net *net, uint32_t peer);

/* Static text "alive", "late" or "down". */
RUMOR_API const char *rumor_net_state_name(rumor_net_state state);

/* Waits until the link to peer has passed HELLO (so a send goes out at
 * once). RUMOR_ETIMEDOUT at the deadline, RUMOR_EINVAL unknown peer. */
RUMOR_API rumor_err rumor_net_wait_ready(rumor_net *net,
                                         uint32_t peer,
                                         uint64_t deadline_ns);

/* True while the last HELLO exchange with peer, in either direction,
 * ended in a refusal (another protocol version or fingerprint, a
 * malformed HELLO): from the REFUSE this node sent or received until a
 * HELLO of peer is accepted or peer accepts ours. text gets the REFUSE's
 * text, which is the same on both nodes when both explain it alike. */
RUMOR_API bool rumor_net_refused(rumor_net *net,
                                 uint32_t peer,
                                 char text[RUMOR_NET_REFUSE_TEXT_MAX + 1]);

struct rumor_net_stats {
    /* frame bytes, 64-byte headers in: messages when rumor_net_send
     * accepts the message (so a message and its bytes are counted
     * together, whatever is still queued), control frames (HELLO,
     * heartbeats, HELLO_OK and REFUSE replies) when handed to ZeroMQ */
    uint64_t bytes_sent;
    uint64_t bytes_recv;  /* frame bytes received and accepted */
    uint64_t frames_sent; /* the frames of bytes_sent */
    /* the part of bytes_sent and frames_sent that is HELLO (88 bytes and
     * the description), HELLO_OK (88) and REFUSE frames; the rest of the
     * control traffic is heartbeats of 64 bytes */
    uint64_t handshake_bytes_sent;
    uint64_t handshake_frames_sent;
    uint64_t frames_recv;
    uint64_t messages_recv;    /* whole messages delivered to the inbox */
    uint64_t rejected_auth;    /* wrong sender id; with RUMOR_NET_ALL also
                                  frames with no User-Id of a listed key */
    uint64_t rejected_proto;   /* frames that failed to decode */
    uint64_t refused;          /* HELLOs refused (version, fingerprint) */
    uint64_t handshake_failed; /* ROUTER handshakes that failed (unlisted
                                  key, no CURVE); RUMOR_NET_ALL only */
    uint64_t replays;          /* frames rejected by the replay window */
    uint64_t dropped;          /* closed step, full inbox, broken reassembly */
    uint64_t foreign; /* frames (HELLO included) from a connection of the
                         peer's key that is not its current one: before
                         that connection's HELLO, or a second connection
                         while the current one is live; dropped */
    uint64_t links_recreated;  /* DEALERs rebuilt by the supervisor */
    uint64_t queued_bytes;     /* bytes waiting in send queues now */
    uint64_t queued_bytes_max; /* the most ever waiting */
};

/* Counters for one peer, or summed over all with RUMOR_NET_ALL. */
RUMOR_API void
rumor_net_stats(rumor_net *net, uint32_t peer, struct rumor_net_stats *out);

/* With quiet true, a peer's liveness changes (late, down, back) are
 * logged at DEBUG instead of WARN / INFO: for the end of a run, when this
 * node needs nothing more from its neighbours and they finish and close
 * their connections at their own pace. */
RUMOR_API void rumor_net_set_quiet(rumor_net *net, bool quiet);

#endif /* RUMOR_NET_H */
