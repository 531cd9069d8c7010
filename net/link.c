/*
 * The link supervisor: each neighbour's DEALER (built, closed and
 * rebuilt after a backoff), HELLO and its replies (HELLO_OK, REFUSE),
 * heartbeats, the socket monitors and the liveness of every peer. Runs
 * on the I/O thread (io.c). At the end, the pure helpers of liveness
 * (states after zyre's evasive/expired) and the reconnect backoff, with the
 * time passed in so that unit tests need no clock. net/transport.h has the
 * design.
 */
#include "net/transport.h"

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

/* --- DEALER lifecycle (the supervisor) ----------------------------- */

void
net_link_close(rumor_net *net, struct net_peer *p, uint64_t now, bool backoff)
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
    struct net_req *cut = NULL;
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
    net_req_free(cut);
}

rumor_err
net_link_open(rumor_net *net, struct net_peer *p)
{
    void *d = zmq_socket(net->ctx, ZMQ_DEALER);
    if (d == NULL)
        return RUMOR_EBACKEND;
    net_common_options(net, d, net->o.queue_bytes);
    /* queue only on connections that finished their handshake, so nothing
     * is sent before HELLO on a connection we have not seen come up */
    net_set_int(d, ZMQ_IMMEDIATE, 1);
    /* the connection's name at the peer's ROUTER: random, and seen only
     * inside the CURVE session, so no other connection can take it (the
     * ROUTER's own names count up from a guessable start) */
    uint8_t rid[NET_DEALER_RID];
    randombytes_buf(rid, sizeof rid);
    rid[0] |= 1; /* names starting with a zero byte are libzmq's */
    zmq_setsockopt(d, ZMQ_ROUTING_ID, rid, sizeof rid);
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
    net_set_int(mon, ZMQ_LINGER, 0);
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

/* --- HELLO and heartbeats --------------------------------------------- */

static void
s_send_hello(rumor_net *net, struct net_peer *p)
{
    /* the fixed part, then the description (a few kB for a large model,
     * so on the heap) */
    size_t blen = RUMOR_NET_HELLO_BYTES + net->o.desc_len;
    uint8_t *body = malloc(blen);
    uint8_t *frame = malloc(RUMOR_NET_HEADER_BYTES + blen);
    size_t n = 0;
    if (body != NULL && frame != NULL) {
        net_hello_body(net, body);
        if (net->o.desc_len > 0)
            memcpy(body + RUMOR_NET_HELLO_BYTES, net->desc, net->o.desc_len);
        n = net_control_frame(net,
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
        net_count_sent(net, p, n, true);
    free(body);
    free(frame);
}

void
net_send_heartbeat(rumor_net *net, struct net_peer *p)
{
    uint8_t frame[RUMOR_NET_HEADER_BYTES];
    size_t n = net_control_frame(net,
                                 p,
                                 RUMOR_NET_KIND_HEARTBEAT,
                                 RUMOR_NET_VERSION,
                                 NULL,
                                 0,
                                 frame,
                                 sizeof frame);
    /* a full queue already proves the link is busy: skip this beat */
    if (zmq_send(p->dealer, frame, n, ZMQ_DONTWAIT) == (int)n)
        net_count_sent(net, p, n, false);
}

/* --- receiving on a DEALER (replies from the peer's ROUTER) -------- */

static void
s_refused_by(rumor_net *net, struct net_peer *p, uint64_t now, const char *text)
{
    rumor_log(RUMOR_LOG_WARN,
              "net: node %u refused this node: %s",
              p->id,
              text);
    STAT(net, p, refused, 1);
    net_set_refusal(net, p, text);
    /* retry at the slowest pace: the peer may be restarted with the
     * right settings */
    p->attempt = 31;
    net_link_close(net, p, now, true);
}

static void
s_on_dealer_frame(rumor_net *net,
                  struct net_peer *p,
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

void
net_drain_dealer(rumor_net *net, struct net_peer *p, uint64_t now)
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

void
net_drain_link_monitor(rumor_net *net, struct net_peer *p, uint64_t now)
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
             * run shows as late, then down (net_update_liveness) */
            bool gone = ev == ZMQ_EVENT_DISCONNECTED;
            rumor_log(gone ? RUMOR_LOG_DEBUG : RUMOR_LOG_INFO,
                      "net: link to node %u %s; rebuilding it",
                      p->id,
                      gone ? "disconnected" : "handshake failed");
            net_link_close(net, p, now, true);
            pthread_mutex_lock(&net->mu);
            p->st.links_recreated++;
            pthread_mutex_unlock(&net->mu);
        }
    }
}

void
net_drain_router_monitor(rumor_net *net)
{
    for (;;) {
        uint16_t ev = s_monitor_event(net->router_mon);
        if (ev == 0)
            return;
        if (ev & (ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL |
                  ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL |
                  ZMQ_EVENT_HANDSHAKE_FAILED_AUTH)) {
            const char *why =
                ev == ZMQ_EVENT_HANDSHAKE_FAILED_AUTH       ? "authentication"
                : ev == ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL ? "protocol"
                                                            : "no detail";
            char key[48];
            snprintf(key, sizeof key, "net:handshake:%s", why);
            /* no detail: the connection ended inside its handshake (its
             * peer closed it, as a restart or a link rebuilt at start-up
             * can), which refuses nothing; authentication and protocol
             * failures are what a stranger or a wrong peer causes */
            bool refused = ev != ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL;
            rumor_log_limited(refused ? RUMOR_LOG_WARN : RUMOR_LOG_INFO,
                              key,
                              NET_REFUSAL_LOG_MS,
                              "net: %s a connection (handshake failed: %s)",
                              refused ? "refused" : "lost",
                              why);
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

/* --- liveness --------------------------------------------------------- */

void
net_update_liveness(rumor_net *net, uint64_t now, uint64_t *wake_ns)
{
    rumor_log_limited_flush(); /* refusal counts (insecure: no ZAP thread) */
    pthread_mutex_lock(&net->mu);
    for (size_t i = 0; i < net->npeers; i++) {
        struct net_peer *p = &net->peers[i];
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

/* --- liveness ------------------------------------------------------------- */

rumor_net_state
net_liveness_state(const struct net_liveness *l,
                   uint64_t now_ns,
                   uint32_t late_ms,
                   uint32_t down_ms)
{
    assert(l != NULL);
    if (l->last_ns == 0)
        return RUMOR_NET_PEER_DOWN;
    uint64_t quiet = now_ns > l->last_ns ? now_ns - l->last_ns : 0;
    if (quiet >= (uint64_t)down_ms * 1000000u)
        return RUMOR_NET_PEER_DOWN;
    if (quiet >= (uint64_t)late_ms * 1000000u)
        return RUMOR_NET_PEER_LATE;
    return RUMOR_NET_PEER_ALIVE;
}

void
net_liveness_heard(struct net_liveness *l, uint64_t now_ns)
{
    assert(l != NULL);
    /* 0 means "never"; a clock reading of exactly 0 is nudged to 1 ns */
    l->last_ns = now_ns == 0 ? 1 : now_ns;
}

bool
net_liveness_update(struct net_liveness *l,
                    uint64_t now_ns,
                    uint32_t late_ms,
                    uint32_t down_ms)
{
    assert(l != NULL);
    rumor_net_state s = net_liveness_state(l, now_ns, late_ms, down_ms);
    bool changed = s != l->state;
    l->state = s;
    return changed;
}

uint64_t
net_liveness_next(const struct net_liveness *l,
                  uint32_t late_ms,
                  uint32_t down_ms)
{
    assert(l != NULL);
    if (l->last_ns == 0 || l->state == RUMOR_NET_PEER_DOWN)
        return UINT64_MAX;
    if (l->state == RUMOR_NET_PEER_ALIVE)
        return l->last_ns + (uint64_t)late_ms * 1000000u;
    return l->last_ns + (uint64_t)down_ms * 1000000u;
}

uint32_t
net_backoff_ms(uint32_t base_ms, uint32_t max_ms, uint32_t attempt)
{
    uint64_t v = base_ms;
    for (uint32_t i = 0; i < attempt && v < max_ms; i++)
        v *= 2;
    return v > max_ms ? max_ms : (uint32_t)v;
}

const char *
rumor_net_state_name(rumor_net_state state)
{
    switch (state) {
    case RUMOR_NET_PEER_ALIVE:
        return "alive";
    case RUMOR_NET_PEER_LATE:
        return "late";
    default:
        return "down";
    }
}
