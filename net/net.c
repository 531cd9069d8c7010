/*
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
 * HELLO, and is accepted only from the connection (routing id) that sent
 * the accepted HELLO.
 *
 * Kinds: a frame's kind says what it is (docs/protocol.md "## Frames");
 * the message kinds (GOSSIP .. PING) go to one inbox per peer, from which
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
#include "rumor/net.h"

#include "net/net_impl.h"

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>
#include <zmq.h>

#define NET_ENDPOINT_BYTES 256
#define NET_RID_BYTES      256
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

/* --- types ---------------------------------------------------------------- */

/* One message to send, already cut into frames by the sending thread
 * (one copy of the payload, straight into ZeroMQ messages); the I/O thread
 * only numbers and re-seals each frame (net_frame_seal) and sends it. */
struct s_frame {
    zmq_msg_t msg;        /* header + payload; emptied once sent */
    uint32_t payload_crc; /* crc32c of the payload part */
};

struct s_req {
    struct s_req *next;
    uint64_t not_before_ns; /* enqueue time + delay_ms */
    size_t len;             /* payload bytes, counted in q_bytes */
    uint32_t nframes;
    uint32_t next_frame; /* IO thread: next frame to send */
    bool sealed;         /* IO thread: frames[next_frame] is numbered */
    bool paid;           /* IO thread: its tokens are taken */
    struct s_frame frames[];
};

static void
s_req_free(struct s_req *req)
{
    if (req == NULL)
        return;
    for (uint32_t i = 0; i < req->nframes; i++)
        zmq_msg_close(&req->frames[i].msg);
    free(req);
}

struct s_inmsg {
    struct s_inmsg *next;
    struct rumor_net_msg msg;
};

struct s_peer {
    uint32_t id;
    bool has_key;
    char key[RUMOR_NET_KEY_TEXT_BYTES + 1];
    char endpoint[NET_ENDPOINT_BYTES];
    bool link;

    /* shared with compute threads, under net->mu */
    struct s_req *q_head, *q_tail;
    size_t q_bytes;
    struct s_inmsg *in_head, *in_tail;
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
    uint8_t rid[NET_RID_BYTES];
    size_t rid_len; /* 0: no accepted HELLO */
    bool has_epoch;
    uint64_t epoch;
    struct net_replay replay;
    bool asm_active;
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
    struct s_peer *peers;
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
    uint64_t handshake_failed; /* not tied to a peer: counted here */
    uint64_t rejected_unbound; /* frames with no User-Id of a listed key */
};

/* --- small helpers -------------------------------------------------------- */

static void
s_wake(rumor_net *net)
{
    uint64_t one = 1;
    ssize_t n = write(net->wake_fd, &one, sizeof one);
    (void)n; /* EAGAIN: the counter is already non-zero, so it wakes */
}

static struct s_peer *
s_peer_find(rumor_net *net, uint32_t id)
{
    for (size_t i = 0; i < net->npeers; i++)
        if (net->peers[i].id == id)
            return &net->peers[i];
    return NULL;
}

static struct s_peer *
s_peer_by_key(rumor_net *net, const char *key)
{
    if (key == NULL || strlen(key) != RUMOR_NET_KEY_TEXT_BYTES)
        return NULL;
    for (size_t i = 0; i < net->npeers; i++)
        if (net->peers[i].has_key &&
            sodium_memcmp(net->peers[i].key, key, RUMOR_NET_KEY_TEXT_BYTES) ==
                0)
            return &net->peers[i];
    return NULL;
}

static void
s_abs_deadline(uint64_t deadline_ns, struct timespec *ts)
{
    ts->tv_sec = (time_t)(deadline_ns / 1000000000u);
    ts->tv_nsec = (long)(deadline_ns % 1000000000u);
}

/* Waits on net->cv until deadline_ns; returns false once it has passed.
 * Called with net->mu held. */
static bool
s_wait_until(rumor_net *net, uint64_t deadline_ns)
{
    if (rumor_clock_ns() >= deadline_ns)
        return false;
    struct timespec ts;
    s_abs_deadline(deadline_ns, &ts);
    pthread_cond_timedwait(&net->cv, &net->mu, &ts);
    return true;
}

static void
s_set_int(void *sock, int opt, int value)
{
    /* the options used exist in every libzmq 4.3; failure is a bug */
    int rc = zmq_setsockopt(sock, opt, &value, sizeof value);
    assert(rc == 0);
    (void)rc;
}

/* Options common to the ROUTER and the DEALERs, each set on purpose:
 * the defaults are unsafe for long runs. */
static void
s_common_options(rumor_net *net, void *sock, size_t queue_bytes)
{
    const struct rumor_net_opts *o = &net->o;
    size_t frame = RUMOR_NET_HEADER_BYTES + o->chunk_bytes;
    size_t hwm = queue_bytes / frame;
    if (hwm < 4)
        hwm = 4;
    if (hwm > 1000000)
        hwm = 1000000;
    /* default infinite: a closing socket would block ctx_term forever */
    s_set_int(sock, ZMQ_LINGER, 0);
    /* default unlimited: a peer could make libzmq allocate any size before
     * we see a byte; no valid frame exceeds header + largest chunk. libzmq
     * checks the size on the wire, which under CURVE carries the MESSAGE
     * command's name, nonce, flags and MAC (33 bytes): hence the margin */
    int64_t maxmsg =
        RUMOR_NET_HEADER_BYTES + RUMOR_NET_CHUNK_MAX + NET_CURVE_OVERHEAD;
    zmq_setsockopt(sock, ZMQ_MAXMSGSIZE, &maxmsg, sizeof maxmsg);
    /* HWMs count messages whatever their size: derive them from bytes */
    s_set_int(sock, ZMQ_SNDHWM, (int)hwm);
    s_set_int(sock, ZMQ_RCVHWM, (int)hwm);
    /* ZMTP heartbeats find dead TCP connections that send nothing */
    s_set_int(sock, ZMQ_HEARTBEAT_IVL, (int)o->heartbeat_ms);
    s_set_int(sock, ZMQ_HEARTBEAT_TIMEOUT, (int)o->down_ms);
    s_set_int(sock,
              ZMQ_HEARTBEAT_TTL,
              (int)(o->down_ms < 6553500 ? o->down_ms : 6553500));
    s_set_int(sock, ZMQ_HANDSHAKE_IVL, (int)o->handshake_ms);
    s_set_int(sock, ZMQ_CONNECT_TIMEOUT, (int)o->handshake_ms);
    s_set_int(sock, ZMQ_RECONNECT_IVL, (int)o->reconnect_ms);
    s_set_int(sock, ZMQ_RECONNECT_IVL_MAX, (int)o->reconnect_max_ms);
}

static void
s_stat_add(rumor_net *net, struct s_peer *p, size_t field_off, uint64_t v)
{
    pthread_mutex_lock(&net->mu);
    uint64_t *f = (uint64_t *)((char *)&p->st + field_off);
    *f += v;
    pthread_mutex_unlock(&net->mu);
}

#define STAT(net, p, field, v) \
    s_stat_add((net), (p), offsetof(struct rumor_net_stats, field), (v))

/* Builds one control frame (no chunks) of kind with payload into buf. */
static size_t
s_control_frame(rumor_net *net,
                struct s_peer *p,
                uint8_t kind,
                uint8_t version,
                const void *payload,
                uint32_t len,
                uint8_t *buf,
                size_t cap)
{
    struct rumor_net_header h = {0};
    h.version = version;
    h.kind = kind;
    h.sender = net->o.self;
    h.seq = ++p->seq_out;
    h.chunks = 1;
    h.payload_len = len;
    h.total_len = len;
    size_t n = 0;
    if (rumor_net_frame_encode(&h, payload, buf, cap, &n) != RUMOR_OK)
        return 0;
    return n;
}

static void
s_hello_body(rumor_net *net, uint8_t out[RUMOR_NET_HELLO_BYTES])
{
    struct rumor_net_hello hello = {
        .fingerprint = net->o.fingerprint,
        .epoch = net->epoch,
        .max_message = net->o.max_message_bytes,
        .chunk_bytes = net->o.chunk_bytes,
    };
    rumor_net_hello_encode(&hello, out);
}

/* Counts a control frame handed to ZeroMQ (a heartbeat, or a frame of
 * the handshake). */
static void
s_count_sent(rumor_net *net, struct s_peer *p, size_t n, bool handshake)
{
    pthread_mutex_lock(&net->mu);
    p->st.bytes_sent += n;
    p->st.frames_sent++;
    if (handshake) {
        p->st.handshake_bytes_sent += n;
        p->st.handshake_frames_sent++;
    }
    pthread_mutex_unlock(&net->mu);
}

/* Records the outcome of a HELLO exchange with p (text NULL: accepted). */
static void
s_set_refusal(rumor_net *net, struct s_peer *p, const char *text)
{
    pthread_mutex_lock(&net->mu);
    p->refused = text != NULL;
    snprintf(p->refusal, sizeof p->refusal, "%s", text != NULL ? text : "");
    pthread_cond_broadcast(&net->cv);
    pthread_mutex_unlock(&net->mu);
}

/* --- DEALER lifecycle (the supervisor) ------------------------------------ */

static void
s_link_close(rumor_net *net, struct s_peer *p, uint64_t now, bool backoff)
{
    if (p->mon != NULL) {
        zmq_socket_monitor(p->dealer, NULL, 0);
        zmq_close(p->mon);
        p->mon = NULL;
    }
    if (p->dealer != NULL) {
        zmq_close(p->dealer);
        p->dealer = NULL;
    }
    p->blocked = false;
    p->hello_ns = 0;
    uint32_t wait = backoff ? net_backoff_ms(net->o.reconnect_ms,
                                             net->o.reconnect_max_ms,
                                             p->attempt)
                            : 0;
    if (backoff)
        p->attempt++;
    p->reopen_ns = now + (uint64_t)wait * 1000000u;
    struct s_req *cut = NULL;
    pthread_mutex_lock(&net->mu);
    p->ready = false;
    /* a message cut by the reconnect is lost (its first frames are gone
     * with the old connection): the receiver drops the incomplete message
     * and the caller sees a missed deadline */
    if (p->q_head != NULL && p->q_head->next_frame > 0) {
        cut = p->q_head;
        p->q_head = cut->next;
        if (p->q_head == NULL)
            p->q_tail = NULL;
        p->q_bytes -= cut->len;
        p->st.dropped++;
        pthread_cond_broadcast(&net->cv);
    } else if (p->q_head != NULL) {
        p->q_head->sealed = false; /* renumber on the new connection */
        p->q_head->paid = false;
    }
    pthread_mutex_unlock(&net->mu);
    s_req_free(cut);
}

static rumor_err
s_link_open(rumor_net *net, struct s_peer *p)
{
    void *d = zmq_socket(net->ctx, ZMQ_DEALER);
    if (d == NULL)
        return RUMOR_EBACKEND;
    s_common_options(net, d, net->o.queue_bytes);
    /* queue only on connections that finished their handshake, so nothing
     * is sent before HELLO on a connection we have not seen come up */
    s_set_int(d, ZMQ_IMMEDIATE, 1);
    if (!net->o.insecure) {
        zmq_setsockopt(d,
                       ZMQ_CURVE_SERVERKEY,
                       p->key,
                       RUMOR_NET_KEY_TEXT_BYTES);
        zmq_setsockopt(d,
                       ZMQ_CURVE_PUBLICKEY,
                       net->public_key,
                       RUMOR_NET_KEY_TEXT_BYTES);
        zmq_setsockopt(d,
                       ZMQ_CURVE_SECRETKEY,
                       net->secret,
                       RUMOR_NET_KEY_TEXT_BYTES);
        int mech = 0;
        size_t sz = sizeof mech;
        zmq_getsockopt(d, ZMQ_MECHANISM, &mech, &sz);
        if (mech != ZMQ_CURVE) { /* R9.3: check after applying keys */
            zmq_close(d);
            return RUMOR_ENOTSUP;
        }
    }
    char mon_ep[128];
    p->gen++;
    snprintf(mon_ep,
             sizeof mon_ep,
             "inproc://rumor-mon-%p-%u-%u",
             (void *)net,
             p->id,
             p->gen);
    if (zmq_socket_monitor(d, mon_ep, NET_MON_EVENTS) != 0) {
        zmq_close(d);
        return RUMOR_EBACKEND;
    }
    void *mon = zmq_socket(net->ctx, ZMQ_PAIR);
    if (mon == NULL || zmq_connect(mon, mon_ep) != 0) {
        if (mon != NULL)
            zmq_close(mon);
        zmq_socket_monitor(d, NULL, 0);
        zmq_close(d);
        return RUMOR_EBACKEND;
    }
    s_set_int(mon, ZMQ_LINGER, 0);
    if (zmq_connect(d, p->endpoint) != 0) {
        zmq_socket_monitor(d, NULL, 0);
        zmq_close(mon);
        zmq_close(d);
        return RUMOR_EINVAL;
    }
    p->dealer = d;
    p->mon = mon;
    return RUMOR_OK;
}

/* --- sending -------------------------------------------------------------- */

static void
s_send_hello(rumor_net *net, struct s_peer *p)
{
    /* the fixed part, then the description (a few kB for a large model,
     * so on the heap) */
    size_t blen = RUMOR_NET_HELLO_BYTES + net->o.desc_len;
    uint8_t *body = malloc(blen);
    uint8_t *frame = malloc(RUMOR_NET_HEADER_BYTES + blen);
    size_t n = 0;
    if (body != NULL && frame != NULL) {
        s_hello_body(net, body);
        if (net->o.desc_len > 0)
            memcpy(body + RUMOR_NET_HELLO_BYTES, net->desc, net->o.desc_len);
        n = s_control_frame(net,
                            p,
                            RUMOR_NET_KIND_HELLO,
                            RUMOR_NET_VERSION,
                            body,
                            (uint32_t)blen,
                            frame,
                            RUMOR_NET_HEADER_BYTES + blen);
    }
    /* sent or not, HELLO_OK must come within handshake_ms (the loop
     * rebuilds the link otherwise), so a lost HELLO cannot stall a link */
    p->hello_ns = rumor_clock_ns();
    if (n > 0 && zmq_send(p->dealer, frame, n, ZMQ_DONTWAIT) == (int)n)
        s_count_sent(net, p, n, true);
    free(body);
    free(frame);
}

static void
s_send_heartbeat(rumor_net *net, struct s_peer *p)
{
    uint8_t frame[RUMOR_NET_HEADER_BYTES];
    size_t n = s_control_frame(net,
                               p,
                               RUMOR_NET_KIND_HEARTBEAT,
                               RUMOR_NET_VERSION,
                               NULL,
                               0,
                               frame,
                               sizeof frame);
    /* a full queue already proves the link is busy: skip this beat */
    if (zmq_send(p->dealer, frame, n, ZMQ_DONTWAIT) == (int)n)
        s_count_sent(net, p, n, false);
}

/* Sends what the link may send now; *wake_ns gets the next time shaping
 * allows more. */
static void
s_pump(rumor_net *net, struct s_peer *p, uint64_t now, uint64_t *wake_ns)
{
    p->blocked = false;
    if (p->dealer == NULL)
        return;
    for (;;) {
        pthread_mutex_lock(&net->mu);
        struct s_req *req = p->q_head;
        bool ready = p->ready;
        pthread_mutex_unlock(&net->mu);
        if (req == NULL || !ready)
            return;
        if (now < req->not_before_ns) {
            if (req->not_before_ns < *wake_ns)
                *wake_ns = req->not_before_ns;
            return;
        }
        struct s_frame *f = &req->frames[req->next_frame];
        size_t size = zmq_msg_size(&f->msg);
        if (!req->sealed) {
            net_frame_seal(zmq_msg_data(&f->msg), ++p->seq_out, f->payload_crc);
            req->sealed = true;
        }
        if (!req->paid) {
            uint64_t wait = net_bucket_take(&p->bucket, size, now);
            if (wait > 0) {
                if (now + wait < *wake_ns)
                    *wake_ns = now + wait;
                return;
            }
            req->paid = true;
        }
        if (zmq_msg_send(&f->msg, p->dealer, ZMQ_DONTWAIT) < 0) {
            if (zmq_errno() == EAGAIN)
                p->blocked = true;
            return;
        }
        /* zmq_msg_send took the frame (f->msg is now empty); its bytes
         * were counted when rumor_net_send accepted the message */
        req->sealed = false;
        req->paid = false;
        pthread_mutex_lock(&net->mu);
        req->next_frame++;
        bool done = req->next_frame >= req->nframes;
        if (done) {
            p->q_head = req->next;
            if (p->q_head == NULL)
                p->q_tail = NULL;
            p->q_bytes -= req->len;
            pthread_cond_broadcast(&net->cv);
        }
        pthread_mutex_unlock(&net->mu);
        if (done)
            s_req_free(req);
    }
}

/* --- receiving on the ROUTER ---------------------------------------------- */

static void
s_router_reply(rumor_net *net,
               struct s_peer *p,
               const uint8_t *rid,
               size_t rid_len,
               const uint8_t *frame,
               size_t n)
{
    if (net->router == NULL || n == 0)
        return;
    if (zmq_send(net->router, rid, rid_len, ZMQ_SNDMORE | ZMQ_DONTWAIT) < 0)
        return;
    if (zmq_send(net->router, frame, n, ZMQ_DONTWAIT) == (int)n)
        s_count_sent(net, p, n, true);
}

/* version: the frame's; a node of version 2 reads a REFUSE of its own
 * version (its layout is the same), so it can tell its user why. */
static void
s_refuse(rumor_net *net,
         struct s_peer *p,
         const uint8_t *rid,
         size_t rid_len,
         uint8_t version,
         rumor_err reason,
         const char *text)
{
    uint8_t body[4 + RUMOR_NET_REFUSE_TEXT_MAX];
    uint8_t frame[NET_REFUSE_FRAME];
    size_t blen =
        rumor_net_refuse_encode((uint32_t)reason, text, body, sizeof body);
    size_t n = s_control_frame(net,
                               p,
                               RUMOR_NET_KIND_REFUSE,
                               version,
                               body,
                               (uint32_t)blen,
                               frame,
                               sizeof frame);
    /* kept before the reply goes: once the peer reads why, so can this
     * node's user (rumor_net_refused) */
    s_set_refusal(net, p, text);
    STAT(net, p, refused, 1);
    s_router_reply(net, p, rid, rid_len, frame, n);
}

/* Queues a whole message for the caller. It owns payload (malloc'd) or,
 * when hold is not NULL, payload points into hold (a heap zmq_msg_t). */
static void
s_deliver(rumor_net *net,
          struct s_peer *p,
          const struct rumor_net_header *h,
          uint8_t *payload,
          size_t len,
          zmq_msg_t *hold)
{
    struct s_inmsg *m = calloc(1, sizeof *m);
    if (m == NULL) {
        struct rumor_net_msg lost = {.payload = payload, .hold = hold};
        rumor_net_msg_free(&lost);
        STAT(net, p, dropped, 1);
        return;
    }
    m->msg.payload = payload;
    m->msg.hold = hold;
    m->msg.hdr = *h;
    m->msg.hdr.chunk = 0;
    m->msg.hdr.payload_len = (uint32_t)len;
    m->msg.len = len;
    bool full = false, closed = false;
    pthread_mutex_lock(&net->mu);
    if (net_kind_has_step(h->kind) && h->step < net->closed_before) {
        closed = true;
    } else if (p->in_bytes > 0 && p->in_bytes + len > net->o.inbox_bytes) {
        /* (a message larger than the whole inbox may wait alone) */
        full = true;
    } else {
        if (p->in_tail != NULL)
            p->in_tail->next = m;
        else
            p->in_head = m;
        p->in_tail = m;
        p->in_bytes += len;
        p->st.messages_recv++;
        pthread_cond_broadcast(&net->cv);
    }
    if (full || closed)
        p->st.dropped++;
    pthread_mutex_unlock(&net->mu);
    if (full || closed) {
        if (full)
            rumor_log(RUMOR_LOG_WARN,
                      "net: peer %u: inbox full (%zu bytes), message of step "
                      "%llu dropped",
                      p->id,
                      net->o.inbox_bytes,
                      (unsigned long long)h->step);
        rumor_net_msg_free(&m->msg);
        free(m);
    }
}

static void
s_asm_drop(rumor_net *net, struct s_peer *p)
{
    if (p->asm_active) {
        rumor_buf_free(&p->asm_buf);
        p->asm_active = false;
        STAT(net, p, dropped, 1);
    }
}

static void
s_on_data(rumor_net *net,
          struct s_peer *p,
          const struct rumor_net_header *h,
          const uint8_t *payload,
          zmq_msg_t *frame)
{
    pthread_mutex_lock(&net->mu);
    bool closed = net_kind_has_step(h->kind) && h->step < net->closed_before;
    pthread_mutex_unlock(&net->mu);
    if (closed) {
        STAT(net, p, dropped, 1);
        return;
    }
    if (h->chunk == 0) {
        s_asm_drop(net, p);
        if (h->chunks == 1) {
            /* no copy: the caller gets the payload inside the frame */
            zmq_msg_t *hold = malloc(sizeof *hold);
            if (hold == NULL || h->payload_len != h->total_len) {
                free(hold);
                STAT(net, p, dropped, 1);
                return;
            }
            zmq_msg_init(hold);
            zmq_msg_move(hold, frame); /* small messages move their bytes */
            uint8_t *data =
                (uint8_t *)zmq_msg_data(hold) + RUMOR_NET_HEADER_BYTES;
            s_deliver(net, p, h, data, h->payload_len, hold);
            return;
        }
        /* total_len was checked against max_message by the decoder; the
         * first chunk sets the chunk size, and the count must agree, so a
         * small frame cannot make us reserve much more than it promises */
        uint64_t need = h->payload_len == 0
                            ? 0
                            : ((uint64_t)h->total_len + h->payload_len - 1) /
                                  h->payload_len;
        if (need != h->chunks) {
            STAT(net, p, rejected_proto, 1);
            rumor_log(RUMOR_LOG_WARN,
                      "net: peer %u: %u chunks of %u bytes cannot make %u",
                      p->id,
                      h->chunks,
                      h->payload_len,
                      h->total_len);
            return;
        }
        rumor_buf_init(&p->asm_buf, h->total_len);
        if (rumor_buf_reserve(&p->asm_buf, h->total_len) != RUMOR_OK) {
            rumor_buf_free(&p->asm_buf);
            STAT(net, p, dropped, 1);
            return;
        }
        p->asm_active = true;
        p->asm_h = *h;
        p->asm_next = 0;
    }
    const struct rumor_net_header *a = &p->asm_h;
    if (!p->asm_active || h->chunk != p->asm_next || h->step != a->step ||
        h->round != a->round || h->kind != a->kind || h->stop != a->stop ||
        h->chunks != a->chunks || h->total_len != a->total_len ||
        h->codec != a->codec) {
        /* a chunk lost to a reconnect: the message is lost */
        s_asm_drop(net, p);
        STAT(net, p, dropped, 1);
        return;
    }
    if (rumor_buf_append(&p->asm_buf, payload, h->payload_len) != RUMOR_OK) {
        s_asm_drop(net, p);
        return;
    }
    p->asm_next++;
    if (p->asm_next < a->chunks)
        return;
    if (p->asm_buf.len != a->total_len) {
        s_asm_drop(net, p);
        return;
    }
    struct rumor_net_header first = p->asm_h;
    uint8_t *data = p->asm_buf.data;
    size_t len = p->asm_buf.len;
    p->asm_buf.data = NULL;
    rumor_buf_free(&p->asm_buf);
    p->asm_active = false;
    s_deliver(net, p, &first, data, len, NULL);
}

static void
s_on_router_frame(rumor_net *net,
                  const uint8_t *rid,
                  size_t rid_len,
                  zmq_msg_t *frame)
{
    const uint8_t *buf = zmq_msg_data(frame);
    size_t len = zmq_msg_size(frame);
    struct s_peer *p = NULL;
    if (!net->o.insecure) {
        /* fail closed: no User-Id means no ZAP handler vouched for this
         * connection */
        const char *user = zmq_msg_gets(frame, "User-Id");
        p = s_peer_by_key(net, user);
        if (p == NULL) {
            pthread_mutex_lock(&net->mu);
            net->rejected_unbound++;
            pthread_mutex_unlock(&net->mu);
            rumor_log(RUMOR_LOG_WARN,
                      "net: dropped a frame with %s User-Id",
                      user == NULL ? "no" : "an unlisted");
            return;
        }
    }
    struct rumor_net_header h;
    const uint8_t *payload = NULL;
    rumor_err rc = rumor_net_frame_decode(buf,
                                          len,
                                          net->o.max_message_bytes,
                                          &h,
                                          &payload);
    if (p == NULL) {
        /* insecure mode: the header is all we have */
        uint32_t sender = rc == RUMOR_OK ? h.sender : UINT32_MAX;
        p = s_peer_find(net, sender);
        if (p == NULL) {
            rumor_log(RUMOR_LOG_WARN,
                      "net: dropped a frame from an unknown "
                      "sender (insecure mode)");
            return;
        }
    }
    if (rc != RUMOR_OK) {
        STAT(net, p, rejected_proto, 1);
        bool magic = len >= 5 && buf[0] == 'R' && buf[1] == 'U' &&
                     buf[2] == 'M' && buf[3] == 'R';
        if (magic && buf[4] != RUMOR_NET_VERSION) {
            char text[96];
            snprintf(text,
                     sizeof text,
                     "protocol version %u, this node speaks %u",
                     buf[4],
                     RUMOR_NET_VERSION);
            rumor_log(RUMOR_LOG_WARN, "net: peer %u refused: %s", p->id, text);
            uint8_t theirs =
                buf[4] >= NET_REFUSE_VERSION_MIN && buf[4] < RUMOR_NET_VERSION
                    ? buf[4]
                    : RUMOR_NET_VERSION;
            s_refuse(net, p, rid, rid_len, theirs, RUMOR_EPROTO, text);
            return;
        }
        if (magic && len >= RUMOR_NET_HEADER_BYTES &&
            (buf[5] < RUMOR_NET_KIND_HELLO || buf[5] > RUMOR_NET_KIND_MAX)) {
            rumor_log(RUMOR_LOG_WARN,
                      "net: peer %u: frame of unknown kind %u rejected",
                      p->id,
                      buf[5]);
            return;
        }
        rumor_log(RUMOR_LOG_WARN,
                  "net: peer %u: bad frame (%zu bytes): %s",
                  p->id,
                  len,
                  rumor_strerror(rc));
        return;
    }
    if (h.sender != p->id) {
        STAT(net, p, rejected_auth, 1);
        rumor_log(RUMOR_LOG_WARN,
                  "net: the key of node %u claims to be node %u: dropped",
                  p->id,
                  h.sender);
        return;
    }
    if (h.kind == RUMOR_NET_KIND_HELLO) {
        struct rumor_net_hello hello;
        if (rumor_net_hello_decode(payload, h.payload_len, &hello) !=
            RUMOR_OK) {
            STAT(net, p, rejected_proto, 1);
            rumor_log(RUMOR_LOG_WARN, "net: peer %u: malformed HELLO", p->id);
            s_refuse(net,
                     p,
                     rid,
                     rid_len,
                     RUMOR_NET_VERSION,
                     RUMOR_EPROTO,
                     "malformed HELLO");
            return;
        }
        if (hello.fingerprint != net->o.fingerprint) {
            char text[RUMOR_NET_REFUSE_TEXT_MAX + 1];
            bool told =
                net->o.explain != NULL && net->o.explain(net->o.explain_arg,
                                                         p->id,
                                                         hello.desc,
                                                         hello.desc_len,
                                                         text,
                                                         sizeof text);
            if (!told)
                snprintf(text,
                         sizeof text,
                         "fingerprint %016llx, this node has %016llx",
                         (unsigned long long)hello.fingerprint,
                         (unsigned long long)net->o.fingerprint);
            rumor_log(RUMOR_LOG_WARN, "net: peer %u refused: %s", p->id, text);
            s_refuse(net,
                     p,
                     rid,
                     rid_len,
                     RUMOR_NET_VERSION,
                     RUMOR_EPROTO,
                     text);
            return;
        }
        if (!p->has_epoch || hello.epoch != p->epoch) {
            /* a new incarnation of the peer numbers its frames from 1 */
            net_replay_reset(&p->replay);
            p->epoch = hello.epoch;
            p->has_epoch = true;
            s_asm_drop(net, p);
        }
        if (!net_replay_accept(&p->replay, h.seq)) {
            STAT(net, p, replays, 1);
            return;
        }
        if (rid_len > sizeof p->rid)
            return;
        memcpy(p->rid, rid, rid_len);
        p->rid_len = rid_len;
        uint8_t body[RUMOR_NET_HELLO_BYTES];
        uint8_t reply[NET_HELLO_FRAME];
        s_hello_body(net, body);
        size_t n = s_control_frame(net,
                                   p,
                                   RUMOR_NET_KIND_HELLO_OK,
                                   RUMOR_NET_VERSION,
                                   body,
                                   sizeof body,
                                   reply,
                                   sizeof reply);
        s_router_reply(net, p, rid, rid_len, reply, n);
        s_set_refusal(net, p, NULL);
        rumor_log(RUMOR_LOG_DEBUG, "net: peer %u said HELLO", p->id);
    } else if (!net_replay_accept(&p->replay, h.seq)) {
        STAT(net, p, replays, 1);
        rumor_log(RUMOR_LOG_WARN,
                  "net: peer %u: replayed frame seq %llu",
                  p->id,
                  (unsigned long long)h.seq);
        return;
    } else if (net_kind_is_message(h.kind)) {
        if (p->rid_len != rid_len || memcmp(p->rid, rid, rid_len) != 0) {
            STAT(net, p, dropped, 1);
            rumor_log(RUMOR_LOG_WARN, "net: peer %u: data before HELLO", p->id);
            return;
        }
        s_on_data(net, p, &h, payload, frame);
    } else if (h.kind != RUMOR_NET_KIND_HEARTBEAT) {
        STAT(net, p, rejected_proto, 1);
        rumor_log(RUMOR_LOG_WARN,
                  "net: peer %u: unexpected %s frame",
                  p->id,
                  rumor_net_kind_name(h.kind));
        return;
    }
    pthread_mutex_lock(&net->mu);
    p->st.bytes_recv += len;
    p->st.frames_recv++;
    net_liveness_heard(&p->live, rumor_clock_ns());
    pthread_mutex_unlock(&net->mu);
}

static void
s_drain_router(rumor_net *net)
{
    for (int i = 0; i < NET_DRAIN_BATCH && net->router != NULL; i++) {
        zmq_msg_t rid, frame;
        zmq_msg_init(&rid);
        if (zmq_msg_recv(&rid, net->router, ZMQ_DONTWAIT) < 0) {
            zmq_msg_close(&rid);
            return;
        }
        zmq_msg_init(&frame);
        bool ok = zmq_msg_more(&rid) &&
                  zmq_msg_recv(&frame, net->router, ZMQ_DONTWAIT) >= 0;
        bool extra = ok && zmq_msg_more(&frame);
        /* a message with more parts than [routing id, frame] is not ours:
         * read the rest and drop it */
        while (extra) {
            zmq_msg_t more;
            zmq_msg_init(&more);
            if (zmq_msg_recv(&more, net->router, ZMQ_DONTWAIT) < 0) {
                zmq_msg_close(&more);
                break;
            }
            extra = zmq_msg_more(&more);
            zmq_msg_close(&more);
            ok = false;
        }
        if (ok)
            s_on_router_frame(net,
                              zmq_msg_data(&rid),
                              zmq_msg_size(&rid),
                              &frame);
        else
            rumor_log(RUMOR_LOG_WARN,
                      "net: dropped a malformed multipart "
                      "message");
        zmq_msg_close(&frame);
        zmq_msg_close(&rid);
    }
}

/* --- receiving on a DEALER (replies from the peer's ROUTER) --------------- */

static void
s_refused_by(rumor_net *net, struct s_peer *p, uint64_t now, const char *text)
{
    rumor_log(RUMOR_LOG_WARN,
              "net: node %u refused this node: %s",
              p->id,
              text);
    STAT(net, p, refused, 1);
    s_set_refusal(net, p, text);
    /* retry at the slowest pace: the peer may be restarted with the
     * right settings */
    p->attempt = 31;
    s_link_close(net, p, now, true);
}

static void
s_on_dealer_frame(rumor_net *net,
                  struct s_peer *p,
                  uint64_t now,
                  const uint8_t *buf,
                  size_t len)
{
    struct rumor_net_header h;
    const uint8_t *payload = NULL;
    rumor_err rc =
        rumor_net_frame_decode(buf, len, RUMOR_NET_CHUNK_MAX, &h, &payload);
    if (rc != RUMOR_OK && len >= RUMOR_NET_HEADER_BYTES && buf[0] == 'R' &&
        buf[1] == 'U' && buf[2] == 'M' && buf[3] == 'R' &&
        buf[4] != RUMOR_NET_VERSION) {
        /* a node of another version answers in its own (its REFUSE) */
        char text[RUMOR_NET_REFUSE_TEXT_MAX + 1];
        snprintf(text,
                 sizeof text,
                 "protocol version %u, this node speaks %u",
                 buf[4],
                 RUMOR_NET_VERSION);
        STAT(net, p, rejected_proto, 1);
        s_refused_by(net, p, now, text);
        return;
    }
    if (rc != RUMOR_OK || h.sender != p->id) {
        STAT(net, p, rejected_proto, 1);
        rumor_log(RUMOR_LOG_WARN,
                  "net: link %u: bad reply (%s)",
                  p->id,
                  rc != RUMOR_OK ? rumor_strerror(rc) : "wrong sender");
        return;
    }
    if (h.kind == RUMOR_NET_KIND_HELLO_OK) {
        struct rumor_net_hello hello;
        if (rumor_net_hello_decode(payload, h.payload_len, &hello) !=
                RUMOR_OK ||
            hello.fingerprint != net->o.fingerprint) {
            STAT(net, p, rejected_proto, 1);
            rumor_log(RUMOR_LOG_WARN, "net: link %u: bad HELLO_OK", p->id);
            return;
        }
        p->attempt = 0;
        p->hello_ns = 0;
        pthread_mutex_lock(&net->mu);
        bool was = p->ready;
        p->ready = true;
        p->refused = false;
        pthread_cond_broadcast(&net->cv);
        pthread_mutex_unlock(&net->mu);
        /* the first time is the normal start; again is news */
        if (!was) {
            p->ups++;
            rumor_log(p->ups == 1 ? RUMOR_LOG_DEBUG : RUMOR_LOG_INFO,
                      "net: link to node %u is up%s",
                      p->id,
                      p->ups > 1 ? " again" : "");
        }
    } else if (h.kind == RUMOR_NET_KIND_REFUSE) {
        uint32_t reason = 0;
        char text[RUMOR_NET_REFUSE_TEXT_MAX + 1];
        if (rumor_net_refuse_decode(payload, h.payload_len, &reason, text) !=
            RUMOR_OK)
            snprintf(text, sizeof text, "(unreadable reason)");
        s_refused_by(net, p, now, text);
    }
}

static void
s_drain_dealer(rumor_net *net, struct s_peer *p, uint64_t now)
{
    for (int i = 0; i < NET_DRAIN_BATCH && p->dealer != NULL; i++) {
        zmq_msg_t m;
        zmq_msg_init(&m);
        if (zmq_msg_recv(&m, p->dealer, ZMQ_DONTWAIT) < 0) {
            zmq_msg_close(&m);
            return;
        }
        bool more = zmq_msg_more(&m);
        if (!more)
            s_on_dealer_frame(net, p, now, zmq_msg_data(&m), zmq_msg_size(&m));
        zmq_msg_close(&m);
        while (more && p->dealer != NULL) {
            zmq_msg_init(&m);
            if (zmq_msg_recv(&m, p->dealer, ZMQ_DONTWAIT) < 0) {
                zmq_msg_close(&m);
                break;
            }
            more = zmq_msg_more(&m);
            zmq_msg_close(&m);
        }
    }
}

/* Reads one monitor event: returns the event id, 0 when none. */
static uint16_t
s_monitor_event(void *mon)
{
    zmq_msg_t m;
    zmq_msg_init(&m);
    if (zmq_msg_recv(&m, mon, ZMQ_DONTWAIT) < 0) {
        zmq_msg_close(&m);
        return 0;
    }
    uint16_t ev = 0;
    if (zmq_msg_size(&m) >= 2) {
        /* libzmq writes the event id in host byte order */
        memcpy(&ev, zmq_msg_data(&m), sizeof ev);
    }
    bool more = zmq_msg_more(&m);
    zmq_msg_close(&m);
    while (more) {
        zmq_msg_init(&m);
        if (zmq_msg_recv(&m, mon, ZMQ_DONTWAIT) < 0) {
            zmq_msg_close(&m);
            break;
        }
        more = zmq_msg_more(&m);
        zmq_msg_close(&m);
    }
    return ev;
}

static void
s_drain_link_monitor(rumor_net *net, struct s_peer *p, uint64_t now)
{
    while (p->mon != NULL) {
        uint16_t ev = s_monitor_event(p->mon);
        if (ev == 0)
            return;
        if (ev == ZMQ_EVENT_HANDSHAKE_SUCCEEDED) {
            s_send_hello(net, p);
        } else {
            /* a disconnect is how every neighbour's end of the run looks
             * (it closes its sockets when it is done, often before this
             * node is), so only a debug line: a neighbour lost during the
             * run shows as late, then down (s_update_liveness) */
            bool gone = ev == ZMQ_EVENT_DISCONNECTED;
            rumor_log(gone ? RUMOR_LOG_DEBUG : RUMOR_LOG_INFO,
                      "net: link to node %u %s; rebuilding it",
                      p->id,
                      gone ? "disconnected" : "handshake failed");
            s_link_close(net, p, now, true);
            pthread_mutex_lock(&net->mu);
            p->st.links_recreated++;
            pthread_mutex_unlock(&net->mu);
        }
    }
}

static void
s_drain_router_monitor(rumor_net *net)
{
    for (;;) {
        uint16_t ev = s_monitor_event(net->router_mon);
        if (ev == 0)
            return;
        if (ev & (ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL |
                  ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL |
                  ZMQ_EVENT_HANDSHAKE_FAILED_AUTH)) {
            rumor_log(RUMOR_LOG_WARN,
                      "net: refused a connection (handshake failed: %s)",
                      ev == ZMQ_EVENT_HANDSHAKE_FAILED_AUTH ? "authentication"
                      : ev == ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL
                          ? "protocol"
                          : "no detail");
            pthread_mutex_lock(&net->mu);
            net->handshake_failed++;
            pthread_mutex_unlock(&net->mu);
        } else if (ev == ZMQ_EVENT_DISCONNECTED) {
            /* every neighbour that finishes its run closes one; an
             * oversized frame closes one too (libzmq drops the connection
             * at ZMQ_MAXMSGSIZE without allocating it), and the two look
             * alike here: a debug line, as for the DEALER's side */
            rumor_log(RUMOR_LOG_DEBUG,
                      "net: a connection to the listener closed (the peer "
                      "left, or sent a frame past the size cap)");
        }
    }
}

/* --- the I/O thread ------------------------------------------------------- */

static void
s_fail_closed(rumor_net *net)
{
    if (net->router_mon != NULL) {
        zmq_socket_monitor(net->router, NULL, 0);
        zmq_close(net->router_mon);
        net->router_mon = NULL;
    }
    if (net->router != NULL) {
        zmq_close(net->router);
        net->router = NULL;
    }
    rumor_log(RUMOR_LOG_ERROR,
              "net: the ZAP handler died: listener closed, transport failed "
              "closed");
    pthread_mutex_lock(&net->mu);
    net->status = RUMOR_EAUTH;
    pthread_cond_broadcast(&net->cv);
    pthread_mutex_unlock(&net->mu);
}

static rumor_err
s_open_router(rumor_net *net)
{
    void *r = zmq_socket(net->ctx, ZMQ_ROUTER);
    if (r == NULL)
        return RUMOR_EBACKEND;
    net->router = r;
    s_common_options(net, r, net->o.queue_bytes);
    /* a reply to a vanished peer fails instead of vanishing silently */
    s_set_int(r, ZMQ_ROUTER_MANDATORY, 1);
    if (!net->o.insecure) {
        s_set_int(r, ZMQ_CURVE_SERVER, 1);
        zmq_setsockopt(r,
                       ZMQ_CURVE_SECRETKEY,
                       net->secret,
                       RUMOR_NET_KEY_TEXT_BYTES);
        zmq_setsockopt(r, ZMQ_ZAP_DOMAIN, "rumor", 5);
        int mech = 0;
        size_t sz = sizeof mech;
        zmq_getsockopt(r, ZMQ_MECHANISM, &mech, &sz);
        if (mech != ZMQ_CURVE)
            return RUMOR_ENOTSUP;
    }
    char mon_ep[96];
    snprintf(mon_ep, sizeof mon_ep, "inproc://rumor-rmon-%p", (void *)net);
    if (zmq_socket_monitor(r, mon_ep, NET_MON_EVENTS) != 0)
        return RUMOR_EBACKEND;
    net->router_mon = zmq_socket(net->ctx, ZMQ_PAIR);
    if (net->router_mon == NULL || zmq_connect(net->router_mon, mon_ep) != 0)
        return RUMOR_EBACKEND;
    s_set_int(net->router_mon, ZMQ_LINGER, 0);
    if (zmq_bind(r, net->bind_endpoint) != 0) {
        rumor_log(RUMOR_LOG_ERROR,
                  "net: cannot bind %s: %s",
                  net->bind_endpoint,
                  zmq_strerror(zmq_errno()));
        return RUMOR_EIO;
    }
    size_t n = sizeof net->endpoint;
    zmq_getsockopt(r, ZMQ_LAST_ENDPOINT, net->endpoint, &n);
    return RUMOR_OK;
}

/* The token bucket's size: 10 ms of the rate (so a slow link is not
 * flooded by a large first burst), at least one Ethernet frame, at most
 * one chunk. A larger frame still goes, leaving debt (net_bucket_take). */
static double
s_burst_bytes(const rumor_net *net)
{
    double burst = (double)net->o.rate_bits / 8.0 * 0.010;
    double most = (double)(RUMOR_NET_HEADER_BYTES + net->o.chunk_bytes);
    if (burst < 1500.0)
        burst = 1500.0;
    return burst > most ? most : burst;
}

static rumor_err
s_start(rumor_net *net)
{
    char notify_ep[96];
    snprintf(notify_ep,
             sizeof notify_ep,
             "inproc://rumor-zapdead-%p",
             (void *)net);
    net->zap_notify = zmq_socket(net->ctx, ZMQ_PAIR);
    if (net->zap_notify == NULL)
        return RUMOR_EBACKEND;
    s_set_int(net->zap_notify, ZMQ_LINGER, 0);
    if (zmq_bind(net->zap_notify, notify_ep) != 0)
        return RUMOR_EBACKEND;
    if (!net->o.insecure) {
        /* the handler is bound before any CURVE socket exists */
        const char **keys = calloc(net->npeers + 1, sizeof *keys);
        if (keys == NULL)
            return RUMOR_ENOMEM;
        size_t n = 0;
        for (size_t i = 0; i < net->npeers; i++)
            if (net->peers[i].has_key)
                keys[n++] = net->peers[i].key;
        rumor_err rc = net_zap_start(net->ctx, keys, n, notify_ep, &net->zap);
        free(keys);
        if (rc != RUMOR_OK)
            return rc;
    }
    rumor_err rc = s_open_router(net);
    if (rc != RUMOR_OK)
        return rc;
    uint64_t now = rumor_clock_ns();
    for (size_t i = 0; i < net->npeers; i++) {
        struct s_peer *p = &net->peers[i];
        net_bucket_init(&p->bucket, net->o.rate_bits, s_burst_bytes(net), now);
        if (!p->link)
            continue;
        rc = s_link_open(net, p);
        if (rc != RUMOR_OK)
            return rc;
    }
    return RUMOR_OK;
}

static void
s_close_all(rumor_net *net)
{
    uint64_t now = rumor_clock_ns();
    for (size_t i = 0; i < net->npeers; i++) {
        struct s_peer *p = &net->peers[i];
        s_link_close(net, p, now, false);
        s_asm_drop(net, p);
    }
    if (net->router_mon != NULL) {
        zmq_socket_monitor(net->router, NULL, 0);
        zmq_close(net->router_mon);
        net->router_mon = NULL;
    }
    if (net->router != NULL) {
        zmq_close(net->router);
        net->router = NULL;
    }
    if (net->zap_notify != NULL) {
        zmq_close(net->zap_notify);
        net->zap_notify = NULL;
    }
}

static bool
s_queues_empty(rumor_net *net)
{
    bool empty = true;
    pthread_mutex_lock(&net->mu);
    for (size_t i = 0; i < net->npeers; i++)
        if (net->peers[i].q_head != NULL && net->peers[i].ready)
            empty = false;
    pthread_mutex_unlock(&net->mu);
    return empty;
}

static void
s_update_liveness(rumor_net *net, uint64_t now, uint64_t *wake_ns)
{
    pthread_mutex_lock(&net->mu);
    for (size_t i = 0; i < net->npeers; i++) {
        struct s_peer *p = &net->peers[i];
        rumor_net_state before = p->live.state;
        if (net_liveness_update(&p->live,
                                now,
                                net->o.late_ms,
                                net->o.down_ms)) {
            /* hearing a peer for the first time is the normal start;
             * coming back is news, and so is going quiet */
            bool first = p->live.state == RUMOR_NET_PEER_ALIVE && !p->heard;
            p->heard = true;
            rumor_log(first || net->quiet                     ? RUMOR_LOG_DEBUG
                      : p->live.state == RUMOR_NET_PEER_ALIVE ? RUMOR_LOG_INFO
                                                              : RUMOR_LOG_WARN,
                      "net: node %u is %s (was %s)",
                      p->id,
                      rumor_net_state_name(p->live.state),
                      rumor_net_state_name(before));
            pthread_cond_broadcast(&net->cv);
        }
        uint64_t next =
            net_liveness_next(&p->live, net->o.late_ms, net->o.down_ms);
        if (next < *wake_ns)
            *wake_ns = next;
    }
    pthread_mutex_unlock(&net->mu);
}

static void *
s_io_thread(void *arg)
{
    rumor_net *net = arg;
    rumor_err rc = s_start(net);
    pthread_mutex_lock(&net->mu);
    net->started = true;
    net->start_rc = rc;
    pthread_cond_broadcast(&net->cv);
    pthread_mutex_unlock(&net->mu);
    if (rc != RUMOR_OK) {
        s_close_all(net);
        return NULL;
    }
    size_t cap = 4 + 2 * net->npeers;
    zmq_pollitem_t *items = calloc(cap, sizeof *items);
    struct s_peer **owner = calloc(cap, sizeof *owner);
    uint64_t flush_until = 0;
    while (items != NULL && owner != NULL) {
        uint64_t now = rumor_clock_ns();
        pthread_mutex_lock(&net->mu);
        bool stopping = net->stop;
        pthread_mutex_unlock(&net->mu);
        if (stopping) {
            if (flush_until == 0)
                flush_until = now + (uint64_t)net->o.linger_ms * 1000000u;
            if (now >= flush_until || s_queues_empty(net))
                break;
        }
        uint64_t wake = now + (uint64_t)NET_POLL_MAX_MS * 1000000u;
        for (size_t i = 0; i < net->npeers; i++) {
            struct s_peer *p = &net->peers[i];
            if (!p->link)
                continue;
            if (p->dealer == NULL) {
                if (now >= p->reopen_ns) {
                    if (s_link_open(net, p) != RUMOR_OK)
                        p->reopen_ns =
                            now + (uint64_t)net->o.reconnect_max_ms * 1000000u;
                } else if (p->reopen_ns < wake) {
                    wake = p->reopen_ns;
                }
                continue;
            }
            pthread_mutex_lock(&net->mu);
            bool ready = p->ready;
            pthread_mutex_unlock(&net->mu);
            uint64_t hello_by =
                p->hello_ns + (uint64_t)net->o.handshake_ms * 1000000u;
            if (!ready && p->hello_ns != 0 && now >= hello_by) {
                rumor_log(RUMOR_LOG_INFO,
                          "net: link to node %u: no answer to HELLO in %u ms; "
                          "rebuilding it",
                          p->id,
                          net->o.handshake_ms);
                s_link_close(net, p, now, true);
                pthread_mutex_lock(&net->mu);
                p->st.links_recreated++;
                pthread_mutex_unlock(&net->mu);
                continue;
            }
            if (!ready && p->hello_ns != 0 && hello_by < wake)
                wake = hello_by;
            if (ready && now >= p->next_hb_ns) {
                s_send_heartbeat(net, p);
                p->next_hb_ns = now + (uint64_t)net->o.heartbeat_ms * 1000000u;
            }
            if (ready && p->next_hb_ns < wake)
                wake = p->next_hb_ns;
            s_pump(net, p, now, &wake);
        }
        s_update_liveness(net, now, &wake);

        size_t n = 0;
        items[n++] = (zmq_pollitem_t){NULL, net->wake_fd, ZMQ_POLLIN, 0};
        items[n++] = (zmq_pollitem_t){net->zap_notify, 0, ZMQ_POLLIN, 0};
        if (net->router != NULL) {
            owner[n] = NULL;
            items[n++] = (zmq_pollitem_t){net->router, 0, ZMQ_POLLIN, 0};
            items[n++] = (zmq_pollitem_t){net->router_mon, 0, ZMQ_POLLIN, 0};
        }
        for (size_t i = 0; i < net->npeers; i++) {
            struct s_peer *p = &net->peers[i];
            if (p->dealer == NULL)
                continue;
            short ev = ZMQ_POLLIN | (p->blocked ? ZMQ_POLLOUT : 0);
            owner[n] = p;
            items[n++] = (zmq_pollitem_t){p->dealer, 0, ev, 0};
            owner[n] = p;
            items[n++] = (zmq_pollitem_t){p->mon, 0, ZMQ_POLLIN, 0};
        }
        now = rumor_clock_ns();
        long timeout = wake > now ? (long)((wake - now + 999999) / 1000000) : 0;
        if (timeout > NET_POLL_MAX_MS)
            timeout = NET_POLL_MAX_MS;
        if (zmq_poll(items, (int)n, timeout) < 0 && zmq_errno() == ETERM)
            break;
        now = rumor_clock_ns();
        if (items[0].revents & ZMQ_POLLIN) {
            uint64_t v;
            ssize_t got = read(net->wake_fd, &v, sizeof v);
            (void)got;
        }
        if (items[1].revents & ZMQ_POLLIN) {
            char buf[8];
            zmq_recv(net->zap_notify, buf, sizeof buf, ZMQ_DONTWAIT);
            s_fail_closed(net);
            continue; /* the router item is gone */
        }
        size_t k = 2;
        if (net->router != NULL) {
            if (items[k].revents & ZMQ_POLLIN)
                s_drain_router(net);
            if (items[k + 1].revents & ZMQ_POLLIN)
                s_drain_router_monitor(net);
            k += 2;
        }
        for (; k < n; k += 2) {
            struct s_peer *p = owner[k];
            if (items[k].revents & ZMQ_POLLIN)
                s_drain_dealer(net, p, now);
            if (items[k + 1].revents & ZMQ_POLLIN)
                s_drain_link_monitor(net, p, now);
        }
    }
    free(items);
    free(owner);
    /* give what ZeroMQ still holds linger_ms to leave */
    for (size_t i = 0; i < net->npeers; i++)
        if (net->peers[i].dealer != NULL)
            s_set_int(net->peers[i].dealer, ZMQ_LINGER, (int)net->o.linger_ms);
    s_close_all(net);
    return NULL;
}

/* --- public API ----------------------------------------------------------- */

void
rumor_net_opts_default(struct rumor_net_opts *opts)
{
    assert(opts != NULL);
    memset(opts, 0, sizeof *opts);
    opts->chunk_bytes = RUMOR_NET_CHUNK_MAX;
    opts->max_message_bytes = 64u << 20;
    opts->queue_bytes = 64u << 20;
    opts->inbox_bytes = 64u << 20;
    opts->heartbeat_ms = 250;
    opts->late_ms = 1000;
    opts->down_ms = 3000;
    opts->handshake_ms = 2000;
    opts->reconnect_ms = 100;
    opts->reconnect_max_ms = 5000;
    opts->linger_ms = 1000;
}

rumor_err
rumor_net_peers_from_topology(const rumor_topology *t,
                              size_t self,
                              struct rumor_net_peer *peers,
                              size_t cap,
                              size_t *n)
{
    assert(t != NULL);
    assert(n != NULL);
    *n = 0;
    size_t nodes = rumor_topology_nodes(t);
    if (self >= nodes)
        return RUMOR_EINVAL;
    if (nodes - 1 > cap)
        return RUMOR_ETOOBIG;
    size_t k = 0;
    for (size_t i = 0; i < nodes; i++) {
        if (i == self)
            continue;
        peers[k] = (struct rumor_net_peer){
            .id = (uint32_t)i,
            .endpoint = rumor_topology_endpoint(t, i),
            .key = rumor_topology_key(t, i),
            .link = rumor_topology_weight(t, 0, self, i) > 0.0,
        };
        for (size_t ph = 1; ph < rumor_topology_phases(t); ph++)
            if (rumor_topology_weight(t, ph, self, i) > 0.0)
                peers[k].link = true;
        k++;
    }
    *n = k;
    return RUMOR_OK;
}

static rumor_err
s_check_opts(const struct rumor_net_opts *o)
{
    if (o->endpoint == NULL || strlen(o->endpoint) >= NET_ENDPOINT_BYTES)
        return RUMOR_EINVAL;
    if (!o->insecure && o->keys == NULL)
        return RUMOR_EINVAL;
    if (o->chunk_bytes < RUMOR_NET_CHUNK_MIN ||
        o->chunk_bytes > RUMOR_NET_CHUNK_MAX)
        return RUMOR_EINVAL;
    if (o->max_message_bytes == 0 ||
        o->max_message_bytes > RUMOR_NET_MESSAGE_MAX)
        return RUMOR_EINVAL;
    if (o->heartbeat_ms == 0 || o->late_ms == 0 || o->down_ms < o->late_ms ||
        o->handshake_ms == 0 || o->reconnect_ms == 0 ||
        o->reconnect_max_ms < o->reconnect_ms || o->queue_bytes == 0 ||
        o->inbox_bytes == 0)
        return RUMOR_EINVAL;
    if (o->npeers > RUMOR_TOPOLOGY_MAX_NODES || (o->npeers && !o->peers))
        return RUMOR_EINVAL;
    if (o->desc_len > RUMOR_NET_HELLO_DESC_MAX || (o->desc_len && !o->desc))
        return RUMOR_EINVAL;
    for (size_t i = 0; i < o->npeers; i++) {
        const struct rumor_net_peer *p = &o->peers[i];
        if (p->id == o->self)
            return RUMOR_EINVAL;
        for (size_t j = 0; j < i; j++)
            if (o->peers[j].id == p->id)
                return RUMOR_EINVAL;
        if (p->link &&
            (p->endpoint == NULL || strlen(p->endpoint) >= NET_ENDPOINT_BYTES))
            return RUMOR_EINVAL;
        if (!o->insecure) {
            uint8_t raw[32];
            if (p->key == NULL)
                return RUMOR_EINVAL;
            if (strlen(p->key) != RUMOR_NET_KEY_TEXT_BYTES ||
                zmq_z85_decode(raw, p->key) == NULL)
                return RUMOR_EPROTO;
        }
    }
    return RUMOR_OK;
}

rumor_err
rumor_net_new(const struct rumor_net_opts *opts, rumor_net **out)
{
    assert(opts != NULL);
    assert(out != NULL);
    *out = NULL;
    rumor_err rc = s_check_opts(opts);
    if (rc != RUMOR_OK)
        return rc;
    if (!opts->insecure && !zmq_has("curve"))
        return RUMOR_ENOTSUP;
    if (sodium_init() < 0)
        return RUMOR_EBACKEND;
    rumor_net *net = calloc(1, sizeof *net);
    if (net == NULL)
        return RUMOR_ENOMEM;
    net->wake_fd = -1;
    net->o = *opts;
    net->o.peers = NULL;
    net->o.keys = NULL;
    net->o.endpoint = NULL;
    net->o.desc = NULL;
    snprintf(net->bind_endpoint,
             sizeof net->bind_endpoint,
             "%s",
             opts->endpoint);
    pthread_mutex_init(&net->mu, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&net->cv, &ca);
    pthread_condattr_destroy(&ca);
    randombytes_buf(&net->epoch, sizeof net->epoch);
    net->npeers = opts->npeers;
    net->peers = calloc(opts->npeers ? opts->npeers : 1, sizeof *net->peers);
    if (net->peers == NULL) {
        rc = RUMOR_ENOMEM;
        goto done;
    }
    net->desc = malloc(opts->desc_len + 1);
    if (net->desc == NULL) {
        rc = RUMOR_ENOMEM;
        goto done;
    }
    if (opts->desc_len > 0)
        memcpy(net->desc, opts->desc, opts->desc_len);
    for (size_t i = 0; i < opts->npeers; i++) {
        struct s_peer *p = &net->peers[i];
        const struct rumor_net_peer *src = &opts->peers[i];
        p->id = src->id;
        p->link = src->link;
        if (src->endpoint != NULL)
            snprintf(p->endpoint, sizeof p->endpoint, "%s", src->endpoint);
        if (src->key != NULL) {
            snprintf(p->key, sizeof p->key, "%s", src->key);
            p->has_key = true;
        }
        net_replay_reset(&p->replay);
    }
    if (!opts->insecure) {
        net->secret = sodium_malloc(RUMOR_NET_KEY_TEXT_BYTES + 1);
        if (net->secret == NULL) {
            rc = RUMOR_ENOMEM;
            goto done;
        }
        memcpy(net->secret,
               net_keypair_secret(opts->keys),
               RUMOR_NET_KEY_TEXT_BYTES + 1);
        snprintf(net->public_key,
                 sizeof net->public_key,
                 "%s",
                 rumor_net_keypair_public(opts->keys));
    } else {
        rumor_log(RUMOR_LOG_WARN,
                  "net: INSECURE mode: plain TCP, no encryption, no "
                  "authentication; any host that can reach %s can speak for "
                  "any node",
                  opts->endpoint);
    }
    net->wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    net->ctx = zmq_ctx_new();
    if (net->wake_fd < 0 || net->ctx == NULL) {
        rc = RUMOR_EBACKEND;
        goto done;
    }
    if (pthread_create(&net->thread, NULL, s_io_thread, net) != 0) {
        rc = RUMOR_ENOMEM;
        goto done;
    }
    net->thread_started = true;
    pthread_mutex_lock(&net->mu);
    while (!net->started)
        pthread_cond_wait(&net->cv, &net->mu);
    rc = net->start_rc;
    pthread_mutex_unlock(&net->mu);
done:
    if (rc != RUMOR_OK)
        rumor_net_destroy(&net);
    *out = net;
    return rc;
}

void
rumor_net_destroy(rumor_net **self_p)
{
    if (self_p == NULL || *self_p == NULL)
        return;
    rumor_net *net = *self_p;
    if (net->thread_started) {
        pthread_mutex_lock(&net->mu);
        net->stop = true;
        pthread_mutex_unlock(&net->mu);
        s_wake(net);
        pthread_join(net->thread, NULL);
    }
    net_zap_destroy(&net->zap);
    if (net->ctx != NULL)
        zmq_ctx_term(net->ctx);
    if (net->wake_fd >= 0)
        close(net->wake_fd);
    for (size_t i = 0; net->peers != NULL && i < net->npeers; i++) {
        struct s_peer *p = &net->peers[i];
        while (p->q_head != NULL) {
            struct s_req *r = p->q_head;
            p->q_head = r->next;
            s_req_free(r);
        }
        while (p->in_head != NULL) {
            struct s_inmsg *m = p->in_head;
            p->in_head = m->next;
            rumor_net_msg_free(&m->msg);
            free(m);
        }
        rumor_buf_free(&p->asm_buf);
    }
    free(net->peers);
    free(net->desc);
    if (net->secret != NULL)
        sodium_free(net->secret);
    pthread_mutex_destroy(&net->mu);
    pthread_cond_destroy(&net->cv);
    free(net);
    *self_p = NULL;
}

const char *
rumor_net_endpoint(const rumor_net *net)
{
    assert(net != NULL);
    return net->endpoint;
}

rumor_err
rumor_net_send(rumor_net *net,
               uint32_t peer,
               const struct rumor_net_header *h,
               const void *payload,
               size_t len,
               uint64_t deadline_ns)
{
    assert(net != NULL);
    assert(h != NULL);
    struct s_peer *p = s_peer_find(net, peer);
    if (p == NULL || !p->link || (len > 0 && payload == NULL) ||
        !net_kind_is_message(h->kind) ||
        !net_kind_fields_fit(h->kind, h->round, h->stop, h->codec))
        return RUMOR_EINVAL;
    if (len > net->o.max_message_bytes)
        return RUMOR_ETOOBIG;
    uint32_t chunk = net->o.chunk_bytes;
    uint32_t nframes = len == 0 ? 1 : (uint32_t)((len + chunk - 1) / chunk);
    struct s_req *req =
        calloc(1, sizeof *req + (size_t)nframes * sizeof req->frames[0]);
    if (req == NULL)
        return RUMOR_ENOMEM;
    req->len = len;
    req->not_before_ns =
        rumor_clock_ns() + (uint64_t)net->o.delay_ms * 1000000u;
    /* the one copy of the payload: straight into the frames, with the
     * payload crc computed here, on the caller's thread */
    for (uint32_t i = 0; i < nframes; i++) {
        size_t off = (size_t)i * chunk;
        size_t n = len - off < chunk ? len - off : chunk;
        struct rumor_net_header fh = *h;
        fh.version = RUMOR_NET_VERSION;
        fh.sender = net->o.self;
        fh.seq = 0; /* numbered by the I/O thread */
        fh.chunk = i;
        fh.chunks = nframes;
        fh.payload_len = (uint32_t)n;
        fh.total_len = (uint32_t)len;
        zmq_msg_t *m = &req->frames[i].msg;
        size_t written = 0;
        if (zmq_msg_init_size(m, RUMOR_NET_HEADER_BYTES + n) != 0) {
            req->nframes = i;
            s_req_free(req);
            return RUMOR_ENOMEM;
        }
        req->nframes = i + 1;
        rumor_err brc = net_frame_build(&fh,
                                        (const uint8_t *)payload + off,
                                        zmq_msg_data(m),
                                        zmq_msg_size(m),
                                        &written,
                                        &req->frames[i].payload_crc);
        if (RUMOR_NEVER(brc != RUMOR_OK)) {
            s_req_free(req);
            return brc;
        }
    }
    rumor_err rc = RUMOR_OK;
    pthread_mutex_lock(&net->mu);
    /* a message larger than the whole budget may go alone */
    while (p->q_bytes > 0 && p->q_bytes + len > net->o.queue_bytes &&
           net->status == RUMOR_OK) {
        if (!s_wait_until(net, deadline_ns)) {
            rc = RUMOR_ETIMEDOUT;
            break;
        }
    }
    if (rc == RUMOR_OK && net->status != RUMOR_OK)
        rc = net->status;
    if (rc == RUMOR_OK) {
        if (p->q_tail != NULL)
            p->q_tail->next = req;
        else
            p->q_head = req;
        p->q_tail = req;
        p->q_bytes += len;
        if (p->q_bytes > p->st.queued_bytes_max)
            p->st.queued_bytes_max = p->q_bytes;
        /* counted now, with the message: a caller that counts what it
         * sends never sees the transport behind it (rumor_net_stats) */
        p->st.bytes_sent += len + (size_t)nframes * RUMOR_NET_HEADER_BYTES;
        p->st.frames_sent += nframes;
        req = NULL;
    }
    pthread_mutex_unlock(&net->mu);
    s_req_free(req);
    if (rc == RUMOR_OK)
        s_wake(net);
    return rc;
}

rumor_err
rumor_net_recv(rumor_net *net,
               uint32_t peer,
               uint8_t kind,
               uint64_t step,
               uint32_t round,
               uint64_t deadline_ns,
               struct rumor_net_msg *out)
{
    assert(net != NULL);
    assert(out != NULL);
    memset(out, 0, sizeof *out);
    struct s_peer *p = s_peer_find(net, peer);
    if (p == NULL)
        return RUMOR_EINVAL;
    rumor_err rc = RUMOR_ETIMEDOUT;
    bool any_step = !net_kind_has_step(kind);
    pthread_mutex_lock(&net->mu);
    for (;;) {
        struct s_inmsg *prev = NULL, *m = p->in_head;
        while (m != NULL && (m->msg.hdr.kind != kind ||
                             (!any_step && (m->msg.hdr.step != step ||
                                            m->msg.hdr.round != round)))) {
            prev = m;
            m = m->next;
        }
        if (m != NULL) {
            if (prev != NULL)
                prev->next = m->next;
            else
                p->in_head = m->next;
            if (p->in_tail == m)
                p->in_tail = prev;
            p->in_bytes -= m->msg.len;
            *out = m->msg;
            free(m);
            rc = RUMOR_OK;
            break;
        }
        if (net->status != RUMOR_OK) {
            rc = net->status;
            break;
        }
        if (!s_wait_until(net, deadline_ns))
            break;
    }
    pthread_mutex_unlock(&net->mu);
    return rc;
}

bool
rumor_net_peek_later(rumor_net *net,
                     uint32_t peer,
                     uint8_t kind,
                     uint64_t step,
                     uint32_t round,
                     uint64_t *later)
{
    assert(net != NULL);
    struct s_peer *p = s_peer_find(net, peer);
    bool found = false;
    *later = step;
    if (p == NULL)
        return false;
    pthread_mutex_lock(&net->mu);
    for (const struct s_inmsg *m = p->in_head; m != NULL; m = m->next) {
        uint64_t s = m->msg.hdr.step;
        if (m->msg.hdr.kind == kind && m->msg.hdr.round == round &&
            s > *later) {
            *later = s;
            found = true;
        }
    }
    pthread_mutex_unlock(&net->mu);
    return found;
}

void
rumor_net_msg_free(struct rumor_net_msg *msg)
{
    if (msg == NULL)
        return;
    if (msg->hold != NULL) {
        zmq_msg_close(msg->hold);
        free(msg->hold);
    } else {
        free(msg->payload);
    }
    memset(msg, 0, sizeof *msg);
}

void
rumor_net_close_steps_before(rumor_net *net, uint64_t step)
{
    assert(net != NULL);
    pthread_mutex_lock(&net->mu);
    if (step > net->closed_before)
        net->closed_before = step;
    for (size_t i = 0; i < net->npeers; i++) {
        struct s_peer *p = &net->peers[i];
        struct s_inmsg **link = &p->in_head;
        p->in_tail = NULL;
        while (*link != NULL) {
            struct s_inmsg *m = *link;
            if (net_kind_has_step(m->msg.hdr.kind) && m->msg.hdr.step < step) {
                *link = m->next;
                p->in_bytes -= m->msg.len;
                p->st.dropped++;
                rumor_net_msg_free(&m->msg);
                free(m);
            } else {
                p->in_tail = m;
                link = &m->next;
            }
        }
    }
    pthread_mutex_unlock(&net->mu);
}

rumor_net_state
rumor_net_peer_state(rumor_net *net, uint32_t peer)
{
    assert(net != NULL);
    struct s_peer *p = s_peer_find(net, peer);
    if (p == NULL)
        return RUMOR_NET_PEER_DOWN;
    pthread_mutex_lock(&net->mu);
    rumor_net_state s = net_liveness_state(&p->live,
                                           rumor_clock_ns(),
                                           net->o.late_ms,
                                           net->o.down_ms);
    pthread_mutex_unlock(&net->mu);
    return s;
}

rumor_err
rumor_net_wait_ready(rumor_net *net, uint32_t peer, uint64_t deadline_ns)
{
    assert(net != NULL);
    struct s_peer *p = s_peer_find(net, peer);
    if (p == NULL || !p->link)
        return RUMOR_EINVAL;
    rumor_err rc = RUMOR_OK;
    pthread_mutex_lock(&net->mu);
    while (!p->ready) {
        if (net->status != RUMOR_OK) {
            rc = net->status;
            break;
        }
        if (!s_wait_until(net, deadline_ns)) {
            rc = RUMOR_ETIMEDOUT;
            break;
        }
    }
    pthread_mutex_unlock(&net->mu);
    return rc;
}

void
rumor_net_stats(rumor_net *net, uint32_t peer, struct rumor_net_stats *out)
{
    /* summed as an array of counters */
    _Static_assert(sizeof(struct rumor_net_stats) % sizeof(uint64_t) == 0,
                   "rumor_net_stats holds only uint64_t counters");
    assert(net != NULL);
    assert(out != NULL);
    memset(out, 0, sizeof *out);
    pthread_mutex_lock(&net->mu);
    for (size_t i = 0; i < net->npeers; i++) {
        struct s_peer *p = &net->peers[i];
        if (peer != RUMOR_NET_ALL && p->id != peer)
            continue;
        const uint64_t *src = (const uint64_t *)&p->st;
        uint64_t *dst = (uint64_t *)out;
        for (size_t k = 0; k < sizeof *out / sizeof(uint64_t); k++)
            dst[k] += src[k];
        out->queued_bytes += p->q_bytes;
    }
    if (peer == RUMOR_NET_ALL) {
        out->handshake_failed += net->handshake_failed;
        out->rejected_auth += net->rejected_unbound;
    }
    pthread_mutex_unlock(&net->mu);
}

bool
rumor_net_refused(rumor_net *net,
                  uint32_t peer,
                  char text[RUMOR_NET_REFUSE_TEXT_MAX + 1])
{
    assert(net != NULL);
    assert(text != NULL);
    text[0] = '\0';
    struct s_peer *p = s_peer_find(net, peer);
    if (p == NULL)
        return false;
    pthread_mutex_lock(&net->mu);
    bool refused = p->refused;
    if (refused)
        memcpy(text, p->refusal, sizeof p->refusal);
    pthread_mutex_unlock(&net->mu);
    return refused;
}

void
rumor_net_set_quiet(rumor_net *net, bool quiet)
{
    assert(net != NULL);
    pthread_mutex_lock(&net->mu);
    net->quiet = quiet;
    pthread_mutex_unlock(&net->mu);
}

rumor_err
rumor_net_status(rumor_net *net)
{
    assert(net != NULL);
    pthread_mutex_lock(&net->mu);
    rumor_err rc = net->status;
    pthread_mutex_unlock(&net->mu);
    return rc;
}

rumor_err
rumor_net_fault_inject(rumor_net *net, rumor_net_fault fault)
{
    assert(net != NULL);
    if (net->zap == NULL)
        return RUMOR_ENOTSUP; /* insecure: there is no handler */
    if (fault != RUMOR_NET_FAULT_ZAP_STOP &&
        fault != RUMOR_NET_FAULT_ZAP_SILENT)
        return RUMOR_EINVAL;
    net_zap_stop(net->zap, fault == RUMOR_NET_FAULT_ZAP_SILENT);
    if (fault == RUMOR_NET_FAULT_ZAP_SILENT)
        return RUMOR_OK;
    /* wait for the I/O thread to close the listener */
    uint64_t deadline = rumor_clock_ns() + 5000000000u;
    rumor_err rc = RUMOR_OK;
    pthread_mutex_lock(&net->mu);
    while (net->status == RUMOR_OK) {
        if (!s_wait_until(net, deadline)) {
            rc = RUMOR_ETIMEDOUT;
            break;
        }
    }
    pthread_mutex_unlock(&net->mu);
    return rc;
}
