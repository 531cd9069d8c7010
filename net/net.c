/*
 * The transport's API: creating and destroying a net, the per-peer send
 * queues and inboxes the compute threads use (under net->mu), and the
 * helpers the I/O thread shares. How the parts fit: net/transport.h.
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

/* --- send requests ---------------------------------------------------- */

void
net_req_free(struct net_req *req)
{
    if (req == NULL)
        return;
    for (uint32_t i = 0; i < req->nframes; i++)
        zmq_msg_close(&req->frames[i].msg);
    free(req);
}

/* --- small helpers ------------------------------------------------- */

static void
s_wake(rumor_net *net)
{
    uint64_t one = 1;
    ssize_t n = write(net->wake_fd, &one, sizeof one);
    (void)n; /* EAGAIN: the counter is already non-zero, so it wakes */
}

struct net_peer *
net_peer_find(rumor_net *net, uint32_t id)
{
    for (size_t i = 0; i < net->npeers; i++)
        if (net->peers[i].id == id)
            return &net->peers[i];
    return NULL;
}

struct net_peer *
net_peer_by_key(rumor_net *net, const char *key)
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

void
net_set_int(void *sock, int opt, int value)
{
    /* the options used exist in every libzmq 4.3; failure is a bug */
    int rc = zmq_setsockopt(sock, opt, &value, sizeof value);
    assert(rc == 0);
    (void)rc;
}

/* Options common to the ROUTER and the DEALERs, each set on purpose:
 * the defaults are unsafe for long runs. */
void
net_common_options(rumor_net *net, void *sock, size_t queue_bytes)
{
    const struct rumor_net_opts *o = &net->o;
    size_t frame = RUMOR_NET_HEADER_BYTES + o->chunk_bytes;
    size_t hwm = queue_bytes / frame;
    if (hwm < 4)
        hwm = 4;
    if (hwm > 1000000)
        hwm = 1000000;
    /* default infinite: a closing socket would block ctx_term forever */
    net_set_int(sock, ZMQ_LINGER, 0);
    /* default unlimited: a peer could make libzmq allocate any size before
     * we see a byte; no valid frame exceeds header + largest chunk. libzmq
     * checks the size on the wire, which under CURVE carries the MESSAGE
     * command's name, nonce, flags and MAC (33 bytes): hence the margin */
    int64_t maxmsg =
        RUMOR_NET_HEADER_BYTES + RUMOR_NET_CHUNK_MAX + NET_CURVE_OVERHEAD;
    zmq_setsockopt(sock, ZMQ_MAXMSGSIZE, &maxmsg, sizeof maxmsg);
    /* HWMs count messages whatever their size: derive them from bytes */
    net_set_int(sock, ZMQ_SNDHWM, (int)hwm);
    net_set_int(sock, ZMQ_RCVHWM, (int)hwm);
    /* ZMTP heartbeats find dead TCP connections that send nothing */
    net_set_int(sock, ZMQ_HEARTBEAT_IVL, (int)o->heartbeat_ms);
    net_set_int(sock, ZMQ_HEARTBEAT_TIMEOUT, (int)o->down_ms);
    net_set_int(sock,
                ZMQ_HEARTBEAT_TTL,
                (int)(o->down_ms < 6553500 ? o->down_ms : 6553500));
    net_set_int(sock, ZMQ_HANDSHAKE_IVL, (int)o->handshake_ms);
    net_set_int(sock, ZMQ_CONNECT_TIMEOUT, (int)o->handshake_ms);
    net_set_int(sock, ZMQ_RECONNECT_IVL, (int)o->reconnect_ms);
    net_set_int(sock, ZMQ_RECONNECT_IVL_MAX, (int)o->reconnect_max_ms);
}

void
net_stat_add(rumor_net *net, struct net_peer *p, size_t field_off, uint64_t v)
{
    pthread_mutex_lock(&net->mu);
    uint64_t *f = (uint64_t *)((char *)&p->st + field_off);
    *f += v;
    pthread_mutex_unlock(&net->mu);
}

/* Builds one control frame (no chunks) of kind with payload into buf. */
size_t
net_control_frame(rumor_net *net,
                  struct net_peer *p,
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

void
net_hello_body(rumor_net *net, uint8_t out[RUMOR_NET_HELLO_BYTES])
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
void
net_count_sent(rumor_net *net, struct net_peer *p, size_t n, bool handshake)
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
void
net_set_refusal(rumor_net *net, struct net_peer *p, const char *text)
{
    pthread_mutex_lock(&net->mu);
    p->refused = text != NULL;
    snprintf(p->refusal, sizeof p->refusal, "%s", text != NULL ? text : "");
    pthread_cond_broadcast(&net->cv);
    pthread_mutex_unlock(&net->mu);
}

/* --- public API ---------------------------------------------------- */

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
            if (p->key == NULL)
                return RUMOR_EINVAL;
            if (rumor_net_key_check(p->key, NULL) != RUMOR_OK)
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
        struct net_peer *p = &net->peers[i];
        const struct rumor_net_peer *src = &opts->peers[i];
        p->id = src->id;
        p->link = src->link;
        if (src->endpoint != NULL)
            snprintf(p->endpoint, sizeof p->endpoint, "%s", src->endpoint);
        /* checked by s_check_opts: CURVE and ZAP use the derived key */
        if (src->key != NULL)
            p->has_key = rumor_net_key_check(src->key, p->key) == RUMOR_OK;
        net_replay_reset(&p->conn.replay);
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
                 net_keypair_curve_public(opts->keys));
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
    if (pthread_create(&net->thread, NULL, net_io_thread, net) != 0) {
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
        struct net_peer *p = &net->peers[i];
        while (p->q_head != NULL) {
            struct net_req *r = p->q_head;
            p->q_head = r->next;
            net_req_free(r);
        }
        while (p->in_head != NULL) {
            struct net_inmsg *m = p->in_head;
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
    struct net_peer *p = net_peer_find(net, peer);
    if (p == NULL || !p->link || (len > 0 && payload == NULL) ||
        !net_kind_is_message(h->kind) ||
        !net_kind_fields_fit(h->kind, h->round, h->stop, h->codec))
        return RUMOR_EINVAL;
    if (len > net->o.max_message_bytes)
        return RUMOR_ETOOBIG;
    uint32_t chunk = net->o.chunk_bytes;
    uint32_t nframes = len == 0 ? 1 : (uint32_t)((len + chunk - 1) / chunk);
    struct net_req *req =
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
            net_req_free(req);
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
            net_req_free(req);
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
    net_req_free(req);
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
    struct net_peer *p = net_peer_find(net, peer);
    if (p == NULL)
        return RUMOR_EINVAL;
    rumor_err rc = RUMOR_ETIMEDOUT;
    bool any_step = !net_kind_has_step(kind);
    pthread_mutex_lock(&net->mu);
    for (;;) {
        struct net_inmsg *prev = NULL, *m = p->in_head;
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
    struct net_peer *p = net_peer_find(net, peer);
    bool found = false;
    *later = step;
    if (p == NULL)
        return false;
    pthread_mutex_lock(&net->mu);
    for (const struct net_inmsg *m = p->in_head; m != NULL; m = m->next) {
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
        struct net_peer *p = &net->peers[i];
        struct net_inmsg **link = &p->in_head;
        p->in_tail = NULL;
        while (*link != NULL) {
            struct net_inmsg *m = *link;
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
    struct net_peer *p = net_peer_find(net, peer);
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
    struct net_peer *p = net_peer_find(net, peer);
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
        struct net_peer *p = &net->peers[i];
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
    struct net_peer *p = net_peer_find(net, peer);
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
net_status(rumor_net *net)
{
    assert(net != NULL);
    pthread_mutex_lock(&net->mu);
    rumor_err rc = net->status;
    pthread_mutex_unlock(&net->mu);
    return rc;
}

rumor_err
net_fault_inject(rumor_net *net, net_fault fault)
{
    assert(net != NULL);
    if (net->zap == NULL)
        return RUMOR_ENOTSUP; /* insecure: there is no handler */
    if (fault != NET_FAULT_ZAP_STOP && fault != NET_FAULT_ZAP_SILENT)
        return RUMOR_EINVAL;
    net_zap_stop(net->zap, fault == NET_FAULT_ZAP_SILENT);
    if (fault == NET_FAULT_ZAP_SILENT)
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
