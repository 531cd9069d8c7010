/*
 * The transport's I/O thread: it owns every ZeroMQ socket, pumps the send
 * queues onto the DEALERs (shaped per link), takes the frames of the
 * ROUTER (HELLO, data, sender binding, reassembly into the inboxes) and
 * runs the link supervisor (link.c) between polls. At the end, the pure
 * helpers of shaping and replay protection (token bucket, replay window
 * after OpenVPN's packet_id), with the time passed in so that unit tests
 * need no clock. net/transport.h has the design.
 */
#include "net/transport.h"

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <sodium.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>
#include <zmq.h>

/* --- sending ------------------------------------------------------- */

/* Sends what the link may send now; *wake_ns gets the next time shaping
 * allows more. */
static void
s_pump(rumor_net *net, struct net_peer *p, uint64_t now, uint64_t *wake_ns)
{
    p->blocked = false;
    if (p->dealer == NULL)
        return;
    for (;;) {
        pthread_mutex_lock(&net->mu);
        struct net_req *req = p->q_head;
        bool ready = p->ready;
        pthread_mutex_unlock(&net->mu);
        if (req == NULL || !ready)
            return;
        if (now < req->not_before_ns) {
            if (req->not_before_ns < *wake_ns)
                *wake_ns = req->not_before_ns;
            return;
        }
        struct net_out_frame *f = &req->frames[req->next_frame];
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
            net_req_free(req);
    }
}

/* --- drop logs ------------------------------------------------------ */

/* What a dropped frame is logged as: one line per (reason, who) per
 * NET_REFUSAL_LOG_MS (rumor_log_limited). */
enum s_drop {
    S_DROP_UNBOUND = 1, /* no User-Id of a listed key */
    S_DROP_BAD,         /* does not decode */
    S_DROP_SENDER,      /* a key speaking for another node */
    S_DROP_REPLAY,      /* seq seen before on its connection */
    S_DROP_FOREIGN,     /* from a connection that is not the current one */
    S_DROP_HELLO,       /* a second connection's HELLO, ignored */
    S_DROP_REFUSED,     /* a HELLO refused (version, fingerprint) */
    S_DROP_UNEXPECTED   /* a kind that never goes DEALER -> ROUTER */
};

static void
s_drop_log(enum s_drop reason, const char *who, const char *fmt, ...)
    RUMOR_PRINTF(3, 4);

static void
s_drop_log(enum s_drop reason, const char *who, const char *fmt, ...)
{
    char key[128];
    snprintf(key, sizeof key, "net:drop:%d:%s", (int)reason, who);
    char line[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    rumor_log_limited(RUMOR_LOG_WARN, key, NET_REFUSAL_LOG_MS, "%s", line);
}

/* --- receiving on the ROUTER --------------------------------------- */

/* Where a frame came from: the peer its key (or, insecure, its header)
 * names, and the connection it came on. */
struct s_from {
    struct net_peer *p;
    const uint8_t *rid;
    size_t rid_len;
    const char *addr; /* Peer-Address: the IP, "?" when unknown */
    char name[20];    /* the connection, for logs: its id's first bytes */
    char who[96];     /* rate-limit key: "node N at ADDR" */
    bool current;     /* it is p's current connection */
};

static void
s_rid_text(const uint8_t *rid, size_t len, char out[20])
{
    size_t n = len < 8 ? len : 8;
    for (size_t i = 0; i < n; i++)
        snprintf(out + 2 * i, 3, "%02x", rid[i]);
    out[2 * n] = '\0';
    if (n == 0)
        snprintf(out, 20, "none");
}

static void
s_router_reply(rumor_net *net,
               struct net_peer *p,
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
        net_count_sent(net, p, n, true);
}

/* True while the ROUTER still has p's current connection: a HEARTBEAT
 * sent to it with ZMQ_ROUTER_MANDATORY goes (or finds it full), and fails
 * with EHOSTUNREACH once the connection closed. The peer's DEALER takes
 * no notice of it. */
static bool
s_conn_present(rumor_net *net, struct net_peer *p)
{
    if (net->router == NULL)
        return false;
    uint8_t frame[RUMOR_NET_HEADER_BYTES];
    size_t n = net_control_frame(net,
                                 p,
                                 RUMOR_NET_KIND_HEARTBEAT,
                                 RUMOR_NET_VERSION,
                                 NULL,
                                 0,
                                 frame,
                                 sizeof frame);
    if (zmq_send(net->router,
                 p->conn.rid,
                 p->conn.rid_len,
                 ZMQ_SNDMORE | ZMQ_DONTWAIT) < 0)
        return zmq_errno() != EHOSTUNREACH;
    if (zmq_send(net->router, frame, n, ZMQ_DONTWAIT) == (int)n)
        net_count_sent(net, p, n, false);
    return true;
}

/* Whether a HELLO on another connection may replace p's current one:
 * there is none, it closed, or it has been silent for down_ms. A live one
 * is kept: a second holder of the key cannot make it silent or close it. */
enum s_takeover {
    S_KEEP,   /* the current connection is live */
    S_FIRST,  /* there is none yet */
    S_CLOSED, /* the ROUTER no longer has it */
    S_SILENT  /* nothing accepted on it for down_ms */
};

/* *quiet_ms: how long the current connection has been silent. */
static enum s_takeover
s_takeover(rumor_net *net, struct net_peer *p, uint64_t now, uint64_t *quiet_ms)
{
    *quiet_ms = (now - p->conn.heard_ns) / 1000000u;
    if (p->conn.rid_len == 0)
        return S_FIRST;
    if (*quiet_ms >= net->o.down_ms)
        return S_SILENT;
    return s_conn_present(net, p) ? S_KEEP : S_CLOSED;
}

/* A peer that says HELLO is up: a link of ours to it that is closed for
 * its reconnect backoff, or still connecting (libzmq retries a refused
 * connect at its own, growing interval), opens again now, so that what
 * waits in its queue (an elastic ring's answer to a joiner) goes out
 * without waiting out seconds of backoff built while the peer was dead. */
static void
s_link_hurry(rumor_net *net, struct net_peer *p)
{
    pthread_mutex_lock(&net->mu);
    bool ready = p->ready;
    pthread_mutex_unlock(&net->mu);
    if (!p->link || ready)
        return;
    uint64_t now = rumor_clock_ns();
    if (p->dealer != NULL && p->hello_ns == 0)
        net_link_close(net, p, now, false);
    else if (p->dealer == NULL)
        p->reopen_ns = now;
    p->attempt = 0;
}

/* version: the frame's; a node of version 2 reads a REFUSE of its own
 * version (its layout is the same), so it can tell its user why. record:
 * the refusal is the peer's news (rumor_net_refused); a refusal sent to a
 * second connection while the current one is live is not. */
static void
s_refuse(rumor_net *net,
         const struct s_from *f,
         bool record,
         uint8_t version,
         rumor_err reason,
         const char *text)
{
    uint8_t body[4 + RUMOR_NET_REFUSE_TEXT_MAX];
    uint8_t frame[NET_REFUSE_FRAME];
    size_t blen =
        rumor_net_refuse_encode((uint32_t)reason, text, body, sizeof body);
    size_t n = net_control_frame(net,
                                 f->p,
                                 RUMOR_NET_KIND_REFUSE,
                                 version,
                                 body,
                                 (uint32_t)blen,
                                 frame,
                                 sizeof frame);
    s_drop_log(S_DROP_REFUSED,
               f->who,
               "net: peer %u refused (connection %s from %s): %s",
               f->p->id,
               f->name,
               f->addr,
               text);
    /* kept before the reply goes: once the peer reads why, so can this
     * node's user (rumor_net_refused) */
    if (record)
        net_set_refusal(net, f->p, text);
    STAT(net, f->p, refused, 1);
    s_router_reply(net, f->p, f->rid, f->rid_len, frame, n);
}

/* Queues a whole message for the caller. It owns payload (malloc'd) or,
 * when hold is not NULL, payload points into hold (a heap zmq_msg_t). */
static void
s_deliver(rumor_net *net,
          struct net_peer *p,
          const struct rumor_net_header *h,
          uint8_t *payload,
          size_t len,
          zmq_msg_t *hold)
{
    struct net_inmsg *m = calloc(1, sizeof *m);
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
s_asm_drop(rumor_net *net, struct net_peer *p)
{
    if (p->asm_active) {
        rumor_buf_free(&p->asm_buf);
        p->asm_active = false;
        STAT(net, p, dropped, 1);
    }
}

static void
s_on_data(rumor_net *net,
          struct net_peer *p,
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
s_heard(rumor_net *net, struct net_peer *p, size_t len, uint64_t now)
{
    p->conn.heard_ns = now;
    pthread_mutex_lock(&net->mu);
    p->st.bytes_recv += len;
    p->st.frames_recv++;
    net_liveness_heard(&p->live, now);
    pthread_mutex_unlock(&net->mu);
}
/* A frame that did not decode: a HELLO of another version is answered
 * with a REFUSE the old node can read. */
static void
s_on_bad_frame(rumor_net *net,
               const struct s_from *f,
               const uint8_t *buf,
               size_t len,
               rumor_err rc)
{
    struct net_peer *p = f->p;
    STAT(net, p, rejected_proto, 1);
    bool magic = len >= 5 && buf[0] == 'R' && buf[1] == 'U' && buf[2] == 'M' &&
                 buf[3] == 'R';
    if (magic && buf[4] != RUMOR_NET_VERSION) {
        char text[96];
        snprintf(text,
                 sizeof text,
                 "protocol version %u, this node speaks %u",
                 buf[4],
                 RUMOR_NET_VERSION);
        uint8_t theirs =
            buf[4] >= NET_REFUSE_VERSION_MIN && buf[4] < RUMOR_NET_VERSION
                ? buf[4]
                : RUMOR_NET_VERSION;
        uint64_t quiet_ms = 0;
        bool record = f->current ||
                      s_takeover(net, p, rumor_clock_ns(), &quiet_ms) != S_KEEP;
        s_refuse(net, f, record, theirs, RUMOR_EPROTO, text);
        return;
    }
    if (magic && len >= RUMOR_NET_HEADER_BYTES &&
        (buf[5] < RUMOR_NET_KIND_HELLO || buf[5] > RUMOR_NET_KIND_MAX)) {
        s_drop_log(S_DROP_BAD,
                   f->who,
                   "net: peer %u: frame of unknown kind %u rejected",
                   p->id,
                   buf[5]);
        return;
    }
    s_drop_log(S_DROP_BAD,
               f->who,
               "net: peer %u: bad frame (%zu bytes) from %s: %s",
               p->id,
               len,
               f->addr,
               rumor_strerror(rc));
}

/* Decodes a HELLO and checks its fingerprint; false after a REFUSE
 * (recorded as the peer's news when record is true). */
static bool
s_hello_fits(rumor_net *net,
             const struct s_from *f,
             bool record,
             const struct rumor_net_header *h,
             const uint8_t *payload,
             struct rumor_net_hello *hello)
{
    struct net_peer *p = f->p;
    if (rumor_net_hello_decode(payload, h->payload_len, hello) != RUMOR_OK) {
        STAT(net, p, rejected_proto, 1);
        s_refuse(net,
                 f,
                 record,
                 RUMOR_NET_VERSION,
                 RUMOR_EPROTO,
                 "malformed HELLO");
        return false;
    }
    if (hello->fingerprint == net->o.fingerprint)
        return true;
    char text[RUMOR_NET_REFUSE_TEXT_MAX + 1];
    bool told = net->o.explain != NULL && net->o.explain(net->o.explain_arg,
                                                         p->id,
                                                         hello->desc,
                                                         hello->desc_len,
                                                         text,
                                                         sizeof text);
    if (!told)
        snprintf(text,
                 sizeof text,
                 "fingerprint %016llx, this node has %016llx",
                 (unsigned long long)hello->fingerprint,
                 (unsigned long long)net->o.fingerprint);
    s_refuse(net, f, record, RUMOR_NET_VERSION, RUMOR_EPROTO, text);
    return false;
}

static void
s_hello_ok(rumor_net *net, const struct s_from *f)
{
    uint8_t body[RUMOR_NET_HELLO_BYTES];
    uint8_t reply[NET_HELLO_FRAME];
    net_hello_body(net, body);
    size_t n = net_control_frame(net,
                                 f->p,
                                 RUMOR_NET_KIND_HELLO_OK,
                                 RUMOR_NET_VERSION,
                                 body,
                                 sizeof body,
                                 reply,
                                 sizeof reply);
    s_router_reply(net, f->p, f->rid, f->rid_len, reply, n);
    net_set_refusal(net, f->p, NULL);
    s_link_hurry(net, f->p);
}

/* A HELLO on a connection that is not p's current one: it becomes the
 * current one when the old one is gone (s_takeover), with a fresh
 * replay window; otherwise it is ignored (an honest node whose old
 * connection is still closing retries at its handshake timeout).
 * Returns true when it was accepted. */
static bool
s_on_new_hello(rumor_net *net,
               const struct s_from *f,
               const struct rumor_net_header *h,
               const uint8_t *payload,
               uint64_t now)
{
    struct net_peer *p = f->p;
    uint64_t quiet_ms = 0;
    enum s_takeover how = s_takeover(net, p, now, &quiet_ms);
    bool take = how != S_KEEP;
    struct rumor_net_hello hello;
    if (!s_hello_fits(net, f, take, h, payload, &hello))
        return false;
    char old[20];
    s_rid_text(p->conn.rid, p->conn.rid_len, old);
    if (!take) {
        STAT(net, p, foreign, 1);
        s_drop_log(S_DROP_HELLO,
                   f->who,
                   "net: node %u: HELLO on a second connection %s from %s "
                   "ignored: its connection %s from %s is live (heard %llu "
                   "ms ago)",
                   p->id,
                   f->name,
                   f->addr,
                   old,
                   p->conn.addr,
                   (unsigned long long)quiet_ms);
        return false;
    }
    /* a connection that was only silent may be a live node's, stalled:
     * worth a warning; a closed one is an ordinary reconnect */
    if (how == S_FIRST)
        rumor_log(RUMOR_LOG_DEBUG, "net: peer %u said HELLO", p->id);
    else
        rumor_log(how == S_SILENT ? RUMOR_LOG_WARN : RUMOR_LOG_INFO,
                  "net: node %u: connection %s from %s takes over from "
                  "connection %s from %s (%s %llu ms ago; %s)",
                  p->id,
                  f->name,
                  f->addr,
                  old,
                  p->conn.addr,
                  how == S_SILENT ? "silent, last heard" : "closed, last heard",
                  (unsigned long long)quiet_ms,
                  hello.epoch != p->conn.epoch ? "a new epoch: a restart"
                                               : "the same epoch");
    memcpy(p->conn.rid, f->rid, f->rid_len);
    p->conn.rid_len = f->rid_len;
    snprintf(p->conn.addr, sizeof p->conn.addr, "%s", f->addr);
    p->conn.epoch = hello.epoch;
    net_replay_reset(&p->conn.replay);
    s_asm_drop(net, p);
    if (!net_replay_accept(&p->conn.replay, h->seq)) {
        STAT(net, p, replays, 1); /* seq 0 */
        return false;
    }
    s_hello_ok(net, f);
    return true;
}

static void
s_on_router_frame(rumor_net *net,
                  const uint8_t *rid,
                  size_t rid_len,
                  zmq_msg_t *frame)
{
    const uint8_t *buf = zmq_msg_data(frame);
    size_t len = zmq_msg_size(frame);
    const char *addr = zmq_msg_gets(frame, "Peer-Address");
    struct s_from f = {.rid = rid,
                       .rid_len = rid_len,
                       .addr = addr != NULL ? addr : "?"};
    if (!net->o.insecure) {
        /* fail closed: no User-Id means no ZAP handler vouched for this
         * connection */
        const char *user = zmq_msg_gets(frame, "User-Id");
        f.p = net_peer_by_key(net, user);
        if (f.p == NULL) {
            pthread_mutex_lock(&net->mu);
            net->rejected_unbound++;
            pthread_mutex_unlock(&net->mu);
            s_drop_log(S_DROP_UNBOUND,
                       f.addr,
                       "net: dropped a frame from %s with %s User-Id",
                       f.addr,
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
    if (f.p == NULL) {
        /* insecure mode: the header is all we have */
        f.p = net_peer_find(net, rc == RUMOR_OK ? h.sender : UINT32_MAX);
        if (f.p == NULL) {
            s_drop_log(S_DROP_UNBOUND,
                       f.addr,
                       "net: dropped a frame from an unknown sender at %s "
                       "(insecure mode)",
                       f.addr);
            return;
        }
    }
    struct net_peer *p = f.p;
    s_rid_text(rid, rid_len, f.name);
    snprintf(f.who, sizeof f.who, "node %u at %s", p->id, f.addr);
    f.current = p->conn.rid_len == rid_len && rid_len > 0 &&
                memcmp(p->conn.rid, rid, rid_len) == 0;
    if (rc != RUMOR_OK) {
        s_on_bad_frame(net, &f, buf, len, rc);
        return;
    }
    if (h.sender != p->id) {
        STAT(net, p, rejected_auth, 1);
        s_drop_log(S_DROP_SENDER,
                   f.who,
                   "net: the key of node %u claims to be node %u "
                   "(connection %s from %s): dropped",
                   p->id,
                   h.sender,
                   f.name,
                   f.addr);
        return;
    }
    uint64_t now = rumor_clock_ns();
    if (!f.current) {
        if (h.kind == RUMOR_NET_KIND_HELLO) {
            if (s_on_new_hello(net, &f, &h, payload, now))
                s_heard(net, p, len, now);
            return;
        }
        STAT(net, p, foreign, 1);
        char cur[20];
        s_rid_text(p->conn.rid, p->conn.rid_len, cur);
        s_drop_log(S_DROP_FOREIGN,
                   f.who,
                   "net: node %u: %s frame (seq %llu) from connection %s "
                   "from %s, which is not its current one (%s): dropped",
                   p->id,
                   rumor_net_kind_name(h.kind),
                   (unsigned long long)h.seq,
                   f.name,
                   f.addr,
                   cur);
        return;
    }
    if (!net_replay_accept(&p->conn.replay, h.seq)) {
        STAT(net, p, replays, 1);
        s_drop_log(S_DROP_REPLAY,
                   f.who,
                   "net: peer %u: replayed frame seq %llu on connection %s",
                   p->id,
                   (unsigned long long)h.seq,
                   f.name);
        return;
    }
    if (h.kind == RUMOR_NET_KIND_HELLO) {
        /* again on its own connection (libzmq reconnected the same
         * DEALER): its numbering goes on */
        struct rumor_net_hello hello;
        if (!s_hello_fits(net, &f, true, &h, payload, &hello))
            return;
        p->conn.epoch = hello.epoch;
        s_hello_ok(net, &f);
    } else if (net_kind_is_message(h.kind)) {
        s_on_data(net, p, &h, payload, frame);
    } else if (h.kind != RUMOR_NET_KIND_HEARTBEAT) {
        STAT(net, p, rejected_proto, 1);
        s_drop_log(S_DROP_UNEXPECTED,
                   f.who,
                   "net: peer %u: unexpected %s frame",
                   p->id,
                   rumor_net_kind_name(h.kind));
        return;
    }
    s_heard(net, p, len, now);
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

/* --- the I/O thread ------------------------------------------------ */

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
    net_common_options(net, r, net->o.queue_bytes);
    /* a reply to a vanished peer fails instead of vanishing silently */
    net_set_int(r, ZMQ_ROUTER_MANDATORY, 1);
    if (!net->o.insecure) {
        net_set_int(r, ZMQ_CURVE_SERVER, 1);
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
    net_set_int(net->router_mon, ZMQ_LINGER, 0);
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
    net_set_int(net->zap_notify, ZMQ_LINGER, 0);
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
        struct net_peer *p = &net->peers[i];
        net_bucket_init(&p->bucket, net->o.rate_bits, s_burst_bytes(net), now);
        if (!p->link)
            continue;
        rc = net_link_open(net, p);
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
        struct net_peer *p = &net->peers[i];
        net_link_close(net, p, now, false);
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

void *
net_io_thread(void *arg)
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
    struct net_peer **owner = calloc(cap, sizeof *owner);
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
            struct net_peer *p = &net->peers[i];
            if (!p->link)
                continue;
            if (p->dealer == NULL) {
                if (now >= p->reopen_ns) {
                    if (net_link_open(net, p) != RUMOR_OK)
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
                net_link_close(net, p, now, true);
                pthread_mutex_lock(&net->mu);
                p->st.links_recreated++;
                pthread_mutex_unlock(&net->mu);
                continue;
            }
            if (!ready && p->hello_ns != 0 && hello_by < wake)
                wake = hello_by;
            if (ready && now >= p->next_hb_ns) {
                net_send_heartbeat(net, p);
                p->next_hb_ns = now + (uint64_t)net->o.heartbeat_ms * 1000000u;
            }
            if (ready && p->next_hb_ns < wake)
                wake = p->next_hb_ns;
            s_pump(net, p, now, &wake);
        }
        net_update_liveness(net, now, &wake);

        size_t n = 0;
        items[n++] = (zmq_pollitem_t){NULL, net->wake_fd, ZMQ_POLLIN, 0};
        items[n++] = (zmq_pollitem_t){net->zap_notify, 0, ZMQ_POLLIN, 0};
        if (net->router != NULL) {
            owner[n] = NULL;
            items[n++] = (zmq_pollitem_t){net->router, 0, ZMQ_POLLIN, 0};
            items[n++] = (zmq_pollitem_t){net->router_mon, 0, ZMQ_POLLIN, 0};
        }
        for (size_t i = 0; i < net->npeers; i++) {
            struct net_peer *p = &net->peers[i];
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
                net_drain_router_monitor(net);
            k += 2;
        }
        for (; k < n; k += 2) {
            struct net_peer *p = owner[k];
            if (items[k].revents & ZMQ_POLLIN)
                net_drain_dealer(net, p, now);
            if (items[k + 1].revents & ZMQ_POLLIN)
                net_drain_link_monitor(net, p, now);
        }
    }
    free(items);
    free(owner);
    /* give what ZeroMQ still holds linger_ms to leave */
    for (size_t i = 0; i < net->npeers; i++)
        if (net->peers[i].dealer != NULL)
            net_set_int(net->peers[i].dealer,
                        ZMQ_LINGER,
                        (int)net->o.linger_ms);
    s_close_all(net);
    return NULL;
}

/* --- token bucket --------------------------------------------------------- */

void
net_bucket_init(struct net_bucket *b,
                uint64_t rate_bits,
                double burst_bytes,
                uint64_t now_ns)
{
    assert(b != NULL);
    b->rate = (double)rate_bits / 8.0;
    b->burst = burst_bytes;
    b->tokens = burst_bytes;
    b->last_ns = now_ns;
}

uint64_t
net_bucket_take(struct net_bucket *b, size_t bytes, uint64_t now_ns)
{
    assert(b != NULL);
    if (b->rate <= 0.0)
        return 0;
    if (now_ns > b->last_ns) {
        b->tokens += b->rate * (double)(now_ns - b->last_ns) * 1e-9;
        if (b->tokens > b->burst)
            b->tokens = b->burst;
        b->last_ns = now_ns;
    }
    if (b->tokens < 0.0) {
        double wait = -b->tokens / b->rate * 1e9;
        return wait < 1.0 ? 1 : (uint64_t)wait;
    }
    /* Debt instead of refusal: a frame larger than the burst still goes,
     * and the next one waits until the debt is paid, so the long-run rate
     * is exact whatever the frame size. */
    b->tokens -= (double)bytes;
    return 0;
}

/* --- replay window -------------------------------------------------------- */

void
net_replay_reset(struct net_replay *r)
{
    assert(r != NULL);
    r->top = 0;
    r->mask = 0;
}

bool
net_replay_accept(struct net_replay *r, uint64_t seq)
{
    assert(r != NULL);
    if (seq == 0)
        return false;
    if (seq > r->top) {
        uint64_t shift = seq - r->top;
        r->mask = shift >= NET_REPLAY_WINDOW ? 0 : r->mask << shift;
        r->mask |= 1;
        r->top = seq;
        return true;
    }
    uint64_t back = r->top - seq;
    if (back >= NET_REPLAY_WINDOW)
        return false;
    uint64_t bit = (uint64_t)1 << back;
    if (r->mask & bit)
        return false;
    r->mask |= bit;
    return true;
}
