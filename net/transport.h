/*
 * Private to net/: the transport's state and the functions its three parts
 * share: net.c (the API and the queues), io.c (the I/O thread: sending,
 * the ROUTER side, shaping) and link.c (the link supervisor: DEALER
 * lifecycle, HELLO, replies, liveness). The design, for all three:
 *
 * The transport: one ROUTER bound at the node's endpoint, one DEALER per
 * neighbour, all owned by one I/O thread (R9.1, zyre's node actor). The
 * compute side talks to it through per-peer queues under one mutex and an
 * eventfd that wakes the thread; no ZeroMQ socket is touched by two
 * threads.
 *
 * Direction: a node sends only on its DEALERs and receives data only on
 * its ROUTER, so every received data frame carries the User-Id that the
 * ZAP handler (zap.c) set from the key that authenticated the connection;
 * the header's sender id must be that key's node (sender binding).
 * Replies on the ROUTER (HELLO_OK, REFUSE) go back to the DEALER, whose
 * server key is pinned, so they need no User-Id.
 *
 * Copies: rumor_net_send copies the payload once, straight into ZeroMQ
 * messages (one per chunk, crc of the payload computed there); the I/O
 * thread numbers each frame and re-seals its crc over 60 header bytes. A
 * single-chunk message reaches the caller inside the received ZeroMQ
 * message, without a copy; chunked ones are reassembled into one buffer.
 *
 * HELLO: on every HANDSHAKE_SUCCEEDED of a DEALER (socket monitor) the
 * node sends HELLO (version in the header, fingerprint, epoch, then the
 * caller's opaque description); the ROUTER answers HELLO_OK or REFUSE with
 * a reason (for another fingerprint, the caller's explain function words
 * it from the two descriptions), and both sides log a refusal and keep its
 * text for rumor_net_refused. Data goes out only on links that passed
 * HELLO.
 *
 * Connections: each DEALER names its connection with 16 random bytes
 * (ZMQ_ROUTING_ID, inside the CURVE session, so no other party learns
 * or reuses it). The ROUTER binds a peer to one connection, its current
 * one, at the HELLO it accepts; every frame of any kind (HEARTBEAT
 * included) from any other connection of the same key is dropped and
 * counted (foreign), and the replay window belongs to the connection. A
 * HELLO on another connection takes over only when the current one is
 * gone: the ROUTER has no such connection any more (a HEARTBEAT sent to
 * it with ZMQ_ROUTER_MANDATORY fails), or it has been silent for
 * down_ms. Otherwise it is ignored, and an honest restarted node retries
 * at its handshake timeout (docs/protocol.md "Connections").
 *
 * Kinds: a frame's kind says what it is (docs/protocol.md "## Frames");
 * the message kinds (GOSSIP .. MEMBER) go to one inbox per peer, from which
 * rumor_net_recv takes them by kind, so a control message never answers
 * a wait for gossip. Closing a step drops the kinds that have one; the
 * handshake kinds (SYNC, SYNC_ANSWER, STATE) outlive it.
 *
 * Counting: a message is counted in bytes_sent when rumor_net_send
 * takes it, so the caller's own count of what it sent never runs ahead of
 * the transport's; control frames are counted when handed to ZeroMQ.
 *
 * Supervisor: libzmq never reconnects a connecting socket after a
 * protocol error (failed MAC, authentication denied), so on DISCONNECTED
 * or a failed handshake the DEALER is closed and rebuilt after a backoff
 * (reconnect_ms doubling to reconnect_max_ms, reset by HELLO_OK). A
 * message cut by a reconnect, and messages lost in libzmq's queues, are
 * lost: the algorithms treat that as a missed deadline (sequence numbers
 * and steps in every header).
 *
 * Memory: send queues and inboxes are bounded in bytes (queue_bytes,
 * inbox_bytes); ZMQ high-water marks are set from the same budgets in
 * frames; ZMQ_MAXMSGSIZE stops an oversized frame before libzmq allocates
 * it. Shaping (token bucket, fixed delay) is applied per link before a
 * frame is handed to ZeroMQ.
 */
#ifndef RUMOR_NET_TRANSPORT_H
#define RUMOR_NET_TRANSPORT_H

#include "rumor/net.h"

#include "net/net_impl.h"

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <zmq.h>

#define NET_ENDPOINT_BYTES 256
#define NET_RID_BYTES      256
#define NET_ADDR_BYTES     64
#define NET_DEALER_RID     16    /* random bytes naming a DEALER's connection */
#define NET_LOG_EVERY_MS   10000 /* one drop line per (reason, who) per this */
#define NET_POLL_MAX_MS    100 /* upper bound on one poll, for stop requests */
#define NET_CURVE_OVERHEAD 256 /* >= CURVE MESSAGE overhead (33 bytes) */
#define NET_DRAIN_BATCH    256 /* frames read from one socket per loop */
#define NET_HELLO_FRAME    (RUMOR_NET_HEADER_BYTES + RUMOR_NET_HELLO_BYTES)
/* the oldest version whose REFUSE frame has this version's layout */
#define NET_REFUSE_VERSION_MIN 2
#define NET_REFUSE_FRAME \
    (RUMOR_NET_HEADER_BYTES + 4 + RUMOR_NET_REFUSE_TEXT_MAX)
#define NET_MON_EVENTS                                        \
    (ZMQ_EVENT_DISCONNECTED | ZMQ_EVENT_HANDSHAKE_SUCCEEDED | \
     ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL |                   \
     ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL | ZMQ_EVENT_HANDSHAKE_FAILED_AUTH)

/* --- types --------------------------------------------------------- */

/* One message to send, already cut into frames by the sending thread
 * (one copy of the payload, straight into ZeroMQ messages); the I/O thread
 * only numbers and re-seals each frame (net_frame_seal) and sends it. */
struct net_out_frame {
    zmq_msg_t msg;        /* header + payload; emptied once sent */
    uint32_t payload_crc; /* crc32c of the payload part */
};

struct net_req {
    struct net_req *next;
    uint64_t not_before_ns; /* enqueue time + delay_ms */
    size_t len;             /* payload bytes, counted in q_bytes */
    uint32_t nframes;
    uint32_t next_frame; /* IO thread: next frame to send */
    bool sealed;         /* IO thread: frames[next_frame] is numbered */
    bool paid;           /* IO thread: its tokens are taken */
    struct net_out_frame frames[];
};

struct net_inmsg {
    struct net_inmsg *next;
    struct rumor_net_msg msg;
};

/* A peer's connection to our ROUTER, bound at its accepted HELLO. */
struct net_conn {
    uint8_t rid[NET_RID_BYTES];
    size_t rid_len;            /* 0: none yet */
    char addr[NET_ADDR_BYTES]; /* the peer's IP (Peer-Address), for logs */
    uint64_t epoch;            /* of its HELLO */
    struct net_replay replay;
    uint64_t heard_ns; /* last frame accepted on it */
};

struct net_peer {
    uint32_t id;
    bool has_key;
    char key[RUMOR_NET_KEY_TEXT_BYTES + 1];
    char endpoint[NET_ENDPOINT_BYTES];
    bool link;

    /* shared with compute threads, under net->mu */
    struct net_req *q_head, *q_tail;
    size_t q_bytes;
    struct net_inmsg *in_head, *in_tail;
    size_t in_bytes;
    struct net_liveness live;
    bool heard;   /* live was ALIVE once */
    bool ready;   /* our DEALER passed HELLO */
    bool refused; /* the last HELLO exchange ended in a REFUSE */
    char refusal[RUMOR_NET_REFUSE_TEXT_MAX + 1]; /* its text */
    struct rumor_net_stats st;

    /* I/O thread only: sending side */
    void *dealer;
    void *mon;
    uint32_t gen;        /* DEALER generation, names its monitor */
    uint32_t attempt;    /* recreations since the last HELLO_OK */
    uint32_t ups;        /* times the link passed HELLO */
    uint64_t reopen_ns;  /* when to rebuild a closed DEALER, 0: now */
    uint64_t seq_out;    /* last seq sent to this peer */
    uint64_t next_hb_ns; /* next heartbeat */
    uint64_t hello_ns;   /* when HELLO went out unanswered, 0: none */
    bool blocked;        /* the DEALER said EAGAIN: poll for POLLOUT */
    struct net_bucket bucket;

    /* I/O thread only: receiving side */
    struct net_conn conn; /* the current connection */
    bool asm_active;      /* reassembly, on the current connection */
    struct rumor_net_header asm_h;
    uint32_t asm_next;
    rumor_buf asm_buf;
};

struct rumor_net {
    struct rumor_net_opts o; /* peers/keys pointers cleared after copy */
    char *secret;            /* sodium_malloc'd copy of our secret key */
    char public_key[RUMOR_NET_KEY_TEXT_BYTES + 1];
    char bind_endpoint[NET_ENDPOINT_BYTES];
    char endpoint[NET_ENDPOINT_BYTES]; /* the bound one */
    struct net_peer *peers;
    size_t npeers;
    uint64_t epoch;
    uint8_t *desc; /* sent after HELLO's fixed part (o.desc copied) */

    void *ctx;
    void *router; /* I/O thread */
    void *router_mon;
    void *zap_notify;
    struct net_zap *zap;
    int wake_fd;
    pthread_t thread;
    bool thread_started;

    pthread_mutex_t mu;
    pthread_cond_t cv; /* any change: inbox, ready, state, space, status */
    bool started;      /* the I/O thread finished starting */
    rumor_err start_rc;
    bool stop;
    bool quiet; /* rumor_net_set_quiet */
    rumor_err status;
    uint64_t closed_before;
    uint64_t handshake_failed;    /* not tied to a peer: counted here */
    uint64_t rejected_unbound;    /* frames with no User-Id of a listed key */
    struct net_loglimit drop_log; /* I/O thread only */
};

/* --- net.c --------------------------------------------------------- */

void net_req_free(struct net_req *req);

struct net_peer *net_peer_find(rumor_net *net, uint32_t id);

struct net_peer *net_peer_by_key(rumor_net *net, const char *key);

void net_set_int(void *sock, int opt, int value);

/* Options common to the ROUTER and the DEALERs, each set on purpose:
 * the defaults are unsafe for long runs. */
void net_common_options(rumor_net *net, void *sock, size_t queue_bytes);

void
net_stat_add(rumor_net *net, struct net_peer *p, size_t field_off, uint64_t v);

#define STAT(net, p, field, v) \
    net_stat_add((net), (p), offsetof(struct rumor_net_stats, field), (v))

/* Builds one control frame (no chunks) of kind with payload into buf. */
size_t net_control_frame(rumor_net *net,
                         struct net_peer *p,
                         uint8_t kind,
                         uint8_t version,
                         const void *payload,
                         uint32_t len,
                         uint8_t *buf,
                         size_t cap);

void net_hello_body(rumor_net *net, uint8_t out[RUMOR_NET_HELLO_BYTES]);

/* Counts a control frame handed to ZeroMQ (a heartbeat, or a frame of
 * the handshake). */
void
net_count_sent(rumor_net *net, struct net_peer *p, size_t n, bool handshake);

/* Records the outcome of a HELLO exchange with p (text NULL: accepted). */
void net_set_refusal(rumor_net *net, struct net_peer *p, const char *text);

/* --- io.c ---------------------------------------------------------- */

void *net_io_thread(void *arg);

/* --- link.c -------------------------------------------------------- */

void
net_link_close(rumor_net *net, struct net_peer *p, uint64_t now, bool backoff);

rumor_err net_link_open(rumor_net *net, struct net_peer *p);

void net_send_heartbeat(rumor_net *net, struct net_peer *p);

void net_drain_dealer(rumor_net *net, struct net_peer *p, uint64_t now);

void net_drain_link_monitor(rumor_net *net, struct net_peer *p, uint64_t now);

void net_drain_router_monitor(rumor_net *net);

void net_update_liveness(rumor_net *net, uint64_t now, uint64_t *wake_ns);

#endif
