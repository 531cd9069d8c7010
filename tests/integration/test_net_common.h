/*
 * Helpers shared by the net integration tests: free loopback ports, nodes
 * with fresh keys, a raw ZeroMQ client that plays a misbehaving peer, and
 * waiting for a condition with a deadline (never sleeping to synchronise:
 * the loop re-checks the condition every millisecond until it holds or
 * the deadline passes, and the test fails with a message at the deadline).
 */
#ifndef RUMOR_TESTS_NET_COMMON_H
#define RUMOR_TESTS_NET_COMMON_H

#include "rumor/net.h"

#include "net/net_impl.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>
#include <zmq.h>

#define T_MS 1000000ull
#define T_DEADLINE_MS                                      \
    10000 /* generous: only a broken build waits this long \
           */

static inline uint64_t
t_deadline(uint64_t ms)
{
    return rumor_clock_ns() + ms * T_MS;
}

static inline void
t_pause_1ms(void)
{
    struct timespec ts = {0, 1000000};
    nanosleep(&ts, NULL);
}

/* True when port binds on 127.0.0.1 now (let go before returning). */
static inline bool
t_port_binds(int port)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a;
    memset(&a, 0, sizeof a);
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = htons((uint16_t)port);
    bool ok = fd >= 0 && bind(fd, (struct sockaddr *)&a, sizeof a) == 0;
    if (fd >= 0)
        close(fd);
    return ok;
}

/* A port free on 127.0.0.1 now, below the kernel's ephemeral range
 * (32768 and up by default): a port from that range can be taken, before
 * our listener binds it, as the source port of one of our own DEALERs
 * reconnecting to it, which then connects to itself (TCP self-connect)
 * and holds it ("Address already in use", seen in a loaded run).
 * Successive calls walk upward from a start drawn from the pid and the
 * clock, so the ports of one test differ and parallel tests rarely meet. */
static inline int
t_free_port(void)
{
    enum { LOW = 10000, HIGH = 32000 };
    static int next = 0;
    if (next == 0)
        next = LOW + (int)(((uint64_t)getpid() * 7919u + rumor_clock_ns()) %
                           (HIGH - LOW));
    for (int tries = 0; tries < HIGH - LOW; tries++) {
        int port = next;
        next = next + 1 < HIGH ? next + 1 : LOW;
        if (t_port_binds(port))
            return port;
    }
    return -1;
}

static inline void
t_test_opts(struct rumor_net_opts *o)
{
    rumor_net_opts_default(o);
    o->chunk_bytes = 256u << 10; /* small, so modest sizes span chunks */
    o->heartbeat_ms = 100;
    o->late_ms = 400;
    o->down_ms = 1200;
    o->handshake_ms = 1000;
    o->reconnect_ms = 50;
    o->reconnect_max_ms = 400;
    o->linger_ms = 200;
}

/* --- a raw client: a peer that does not follow the rules ------------------ */

struct t_raw {
    void *ctx;
    void *sock;
    void *mon;
};

/* Connects a DEALER to endpoint; with CURVE when server_key is not NULL
 * (using pub/sec as its own keys), plain otherwise. */
static inline int
t_raw_open(struct t_raw *r,
           const char *endpoint,
           const char *server_key,
           const char *pub,
           const char *sec)
{
    memset(r, 0, sizeof *r);
    r->ctx = zmq_ctx_new();
    r->sock = zmq_socket(r->ctx, ZMQ_DEALER);
    int zero = 0;
    zmq_setsockopt(r->sock, ZMQ_LINGER, &zero, sizeof zero);
    if (server_key != NULL) {
        zmq_setsockopt(r->sock, ZMQ_CURVE_SERVERKEY, server_key, 40);
        zmq_setsockopt(r->sock, ZMQ_CURVE_PUBLICKEY, pub, 40);
        zmq_setsockopt(r->sock, ZMQ_CURVE_SECRETKEY, sec, 40);
    }
    char ep[64];
    snprintf(ep, sizeof ep, "inproc://t-raw-mon-%p", (void *)r);
    zmq_socket_monitor(r->sock, ep, ZMQ_EVENT_ALL);
    r->mon = zmq_socket(r->ctx, ZMQ_PAIR);
    zmq_setsockopt(r->mon, ZMQ_LINGER, &zero, sizeof zero);
    zmq_connect(r->mon, ep);
    return zmq_connect(r->sock, endpoint);
}

static inline void
t_raw_close(struct t_raw *r)
{
    if (r->sock != NULL) {
        zmq_socket_monitor(r->sock, NULL, 0);
        zmq_close(r->sock);
    }
    if (r->mon != NULL)
        zmq_close(r->mon);
    if (r->ctx != NULL)
        zmq_ctx_term(r->ctx);
    memset(r, 0, sizeof *r);
}

/* Waits for a monitor event in mask; returns it, 0 at the deadline. */
static inline int
t_raw_wait_event(struct t_raw *r, int mask, uint64_t deadline)
{
    while (rumor_clock_ns() < deadline) {
        zmq_pollitem_t it = {r->mon, 0, ZMQ_POLLIN, 0};
        if (zmq_poll(&it, 1, 10) <= 0)
            continue;
        zmq_msg_t m;
        zmq_msg_init(&m);
        zmq_msg_recv(&m, r->mon, 0);
        uint16_t ev = 0;
        memcpy(&ev, zmq_msg_data(&m), sizeof ev);
        zmq_msg_close(&m);
        zmq_msg_init(&m);
        zmq_msg_recv(&m, r->mon, 0);
        zmq_msg_close(&m);
        if (ev & mask)
            return ev;
    }
    return 0;
}

static inline size_t
t_frame(uint8_t *buf,
        size_t cap,
        uint8_t version,
        uint8_t kind,
        uint32_t sender,
        uint64_t seq,
        uint64_t step,
        const void *payload,
        uint32_t len)
{
    struct rumor_net_header h = {.version = version,
                                 .kind = kind,
                                 .sender = sender,
                                 .seq = seq,
                                 .step = step,
                                 .chunks = 1,
                                 .payload_len = len,
                                 .total_len = len};
    size_t w = 0;
    rumor_net_frame_encode(&h, payload, buf, cap, &w);
    return w;
}

static inline void
t_raw_send(struct t_raw *r, const void *buf, size_t n)
{
    zmq_send(r->sock, buf, n, 0);
}

static inline void
t_raw_hello(struct t_raw *r, uint8_t version, uint32_t sender, uint64_t fp)
{
    struct rumor_net_hello h = {.fingerprint = fp,
                                .epoch = 12345,
                                .max_message = 1 << 20,
                                .chunk_bytes = 256 << 10};
    uint8_t body[RUMOR_NET_HELLO_BYTES], frame[128];
    rumor_net_hello_encode(&h, body);
    size_t n = t_frame(frame,
                       sizeof frame,
                       version,
                       RUMOR_NET_KIND_HELLO,
                       sender,
                       1,
                       0,
                       body,
                       sizeof body);
    t_raw_send(r, frame, n);
}

/* Receives one frame from the node into buf; returns its size, -1 at the
 * deadline. */
static inline int
t_raw_recv(struct t_raw *r, uint8_t *buf, size_t cap, uint64_t deadline)
{
    while (rumor_clock_ns() < deadline) {
        zmq_pollitem_t it = {r->sock, 0, ZMQ_POLLIN, 0};
        if (zmq_poll(&it, 1, 10) > 0)
            return zmq_recv(r->sock, buf, cap, 0);
    }
    return -1;
}

#endif
