/*
 * `rumor bench net`: loopback throughput for 64 KiB, 1 MiB and 16 MiB
 * messages through
 *   - raw TCP (two threads, write/read, measured here: the floor of cost),
 *   - plain libzmq (DEALER -> ROUTER, no security),
 *   - CURVE libzmq (the same with CURVE; libzmq boxes each message),
 *   - rumor_net insecure and rumor_net CURVE (our framing, crc32c, chunks,
 *     I/O thread and queues on top of libzmq),
 * next to libsodium's crypto_box_easy_afternm on one core over the size of
 * one box (the message for libzmq, the chunk for rumor_net): the cipher
 * ceiling CURVE cannot beat, since every byte is boxed once by the sender
 * and unboxed once by the receiver, each on its own core. Plus the round
 * trip of a 64-byte message (TCP, libzmq plain and CURVE, rumor_net CURVE).
 * "pipe" boxes on one thread and unboxes on another (the cipher work a
 * CURVE link does, without TCP or libzmq): on a machine whose cores are
 * shared, it is the fairer ceiling for a loopback run. Last, link shaping:
 * the rate a shaped link achieves at 10 Mbit/s, 100 Mbit/s and 1 Gbit/s,
 * and the one-way time of a small message with 1, 10 and 50 ms of delay.
 *
 * Each figure is the best of BENCH_REPS runs moving BENCH_BYTES; the
 * ratios are to same-run references. The bench-only libzmq CURVE server
 * runs without a ZAP handler (it measures the cipher path, not the allow
 * list); rumor_net runs with its real ZAP handler.
 */
#include "bench/bench.h"

#include "rumor/net.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <sodium.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>
#include <zmq.h>

int bench_net_main(int argc, char **argv);

#define BENCH_BYTES     (128u << 20)
#define BENCH_REPS      3
#define BENCH_RTT_COUNT 2000
#define BENCH_CHUNK     (1u << 20) /* rumor_net chunk for the benchmark */

static const size_t s_sizes[] = {64u << 10, 1u << 20, 16u << 20};
#define SIZE_COUNT (sizeof s_sizes / sizeof s_sizes[0])

/* --- raw TCP -------------------------------------------------------------- */

struct s_tcp {
    int listen_fd;
    size_t total;
    size_t msg;
};

static int
s_tcp_listen(int *port)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a;
    memset(&a, 0, sizeof a);
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof a;
    if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof a) != 0 ||
        listen(fd, 1) != 0 ||
        getsockname(fd, (struct sockaddr *)&a, &len) != 0) {
        if (fd >= 0)
            close(fd);
        return -1;
    }
    *port = ntohs(a.sin_port);
    return fd;
}

static int
s_tcp_connect(int port)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a;
    memset(&a, 0, sizeof a);
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = htons((uint16_t)port);
    if (fd >= 0 && connect(fd, (struct sockaddr *)&a, sizeof a) != 0) {
        close(fd);
        return -1;
    }
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    return fd;
}

static bool
s_read_all(int fd, uint8_t *buf, size_t n)
{
    size_t got = 0;
    while (got < n) {
        ssize_t r = read(fd, buf + got, n - got);
        if (r <= 0)
            return false;
        got += (size_t)r;
    }
    return true;
}

static bool
s_write_all(int fd, const uint8_t *buf, size_t n)
{
    size_t put = 0;
    while (put < n) {
        ssize_t w = write(fd, buf + put, n - put);
        if (w <= 0)
            return false;
        put += (size_t)w;
    }
    return true;
}

static void *
s_tcp_sink(void *arg)
{
    struct s_tcp *t = arg;
    int fd = accept(t->listen_fd, NULL, NULL);
    uint8_t *buf = malloc(t->msg);
    for (size_t done = 0; fd >= 0 && buf && done < t->total; done += t->msg)
        if (!s_read_all(fd, buf, t->msg))
            break;
    free(buf);
    if (fd >= 0)
        close(fd);
    return NULL;
}

static double
s_tcp_gbps(size_t msg)
{
    struct s_tcp t = {.total = BENCH_BYTES / msg * msg, .msg = msg};
    int port = 0;
    t.listen_fd = s_tcp_listen(&port);
    if (t.listen_fd < 0)
        return 0;
    pthread_t th;
    pthread_create(&th, NULL, s_tcp_sink, &t);
    int fd = s_tcp_connect(port);
    uint8_t *buf = calloc(1, msg);
    uint64_t t0 = rumor_clock_ns();
    for (size_t done = 0; fd >= 0 && buf && done < t.total; done += msg)
        if (!s_write_all(fd, buf, msg))
            break;
    pthread_join(th, NULL);
    double gbps = (double)t.total / (double)(rumor_clock_ns() - t0);
    free(buf);
    if (fd >= 0)
        close(fd);
    close(t.listen_fd);
    return gbps;
}

static double
s_tcp_rtt_us(void)
{
    struct s_tcp t = {0};
    int port = 0;
    t.listen_fd = s_tcp_listen(&port);
    if (t.listen_fd < 0)
        return 0;
    int c = s_tcp_connect(port);
    int s = accept(t.listen_fd, NULL, NULL);
    int one = 1;
    setsockopt(s, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    uint8_t buf[64] = {0};
    uint64_t t0 = rumor_clock_ns();
    for (int i = 0; i < BENCH_RTT_COUNT; i++) {
        if (!s_write_all(c, buf, 64) || !s_read_all(s, buf, 64) ||
            !s_write_all(s, buf, 64) || !s_read_all(c, buf, 64))
            break;
    }
    double us = (double)(rumor_clock_ns() - t0) / BENCH_RTT_COUNT / 1e3;
    close(c);
    close(s);
    close(t.listen_fd);
    return us;
}

/* --- plain and CURVE libzmq ----------------------------------------------- */

struct s_zmq {
    void *ctx, *router, *dealer;
    char server_pub[41], server_sec[41], client_pub[41], client_sec[41];
};

static bool
s_zmq_open(struct s_zmq *z, bool curve, size_t msg)
{
    memset(z, 0, sizeof *z);
    z->ctx = zmq_ctx_new();
    z->router = zmq_socket(z->ctx, ZMQ_ROUTER);
    z->dealer = zmq_socket(z->ctx, ZMQ_DEALER);
    int zero = 0;
    int hwm = (int)((64u << 20) / msg) + 2; /* 64 MiB in flight at most */
    zmq_setsockopt(z->router, ZMQ_LINGER, &zero, sizeof zero);
    zmq_setsockopt(z->dealer, ZMQ_LINGER, &zero, sizeof zero);
    zmq_setsockopt(z->router, ZMQ_RCVHWM, &hwm, sizeof hwm);
    zmq_setsockopt(z->dealer, ZMQ_SNDHWM, &hwm, sizeof hwm);
    if (curve) {
        zmq_curve_keypair(z->server_pub, z->server_sec);
        zmq_curve_keypair(z->client_pub, z->client_sec);
        int one = 1;
        zmq_setsockopt(z->router, ZMQ_CURVE_SERVER, &one, sizeof one);
        zmq_setsockopt(z->router, ZMQ_CURVE_SECRETKEY, z->server_sec, 40);
        zmq_setsockopt(z->dealer, ZMQ_CURVE_SERVERKEY, z->server_pub, 40);
        zmq_setsockopt(z->dealer, ZMQ_CURVE_PUBLICKEY, z->client_pub, 40);
        zmq_setsockopt(z->dealer, ZMQ_CURVE_SECRETKEY, z->client_sec, 40);
    }
    if (zmq_bind(z->router, "tcp://127.0.0.1:*") != 0)
        return false;
    char ep[128];
    size_t n = sizeof ep;
    zmq_getsockopt(z->router, ZMQ_LAST_ENDPOINT, ep, &n);
    return zmq_connect(z->dealer, ep) == 0;
}

static void
s_zmq_close(struct s_zmq *z)
{
    zmq_close(z->router);
    zmq_close(z->dealer);
    zmq_ctx_term(z->ctx);
}

struct s_zmq_sink_arg {
    void *router;
    size_t count;
};

static void *
s_zmq_sink(void *arg)
{
    struct s_zmq_sink_arg *a = arg;
    for (size_t i = 0; i < a->count; i++) {
        zmq_msg_t id, m;
        zmq_msg_init(&id);
        zmq_msg_init(&m);
        zmq_msg_recv(&id, a->router, 0);
        zmq_msg_recv(&m, a->router, 0);
        zmq_msg_close(&id);
        zmq_msg_close(&m);
    }
    return NULL;
}

static double
s_zmq_gbps(size_t msg, bool curve)
{
    struct s_zmq z;
    double gbps = 0;
    if (s_zmq_open(&z, curve, msg)) {
        struct s_zmq_sink_arg a = {z.router, BENCH_BYTES / msg};
        uint8_t *buf = calloc(1, msg);
        /* one message first, so the handshake is not timed */
        zmq_send(z.dealer, buf, msg, 0);
        struct s_zmq_sink_arg first = {z.router, 1};
        s_zmq_sink(&first);
        pthread_t th;
        pthread_create(&th, NULL, s_zmq_sink, &a);
        uint64_t t0 = rumor_clock_ns();
        for (size_t i = 0; i < a.count; i++)
            zmq_send(z.dealer, buf, msg, 0);
        pthread_join(th, NULL);
        gbps = (double)(a.count * msg) / (double)(rumor_clock_ns() - t0);
        free(buf);
    }
    s_zmq_close(&z);
    return gbps;
}

static double
s_zmq_rtt_us(bool curve)
{
    struct s_zmq z;
    double us = 0;
    if (s_zmq_open(&z, curve, 64)) {
        uint8_t buf[64] = {0}, id[256];
        uint64_t t0 = 0;
        for (int i = -1; i < BENCH_RTT_COUNT; i++) {
            if (i == 0)
                t0 = rumor_clock_ns(); /* after the handshake */
            zmq_send(z.dealer, buf, 64, 0);
            int n = zmq_recv(z.router, id, sizeof id, 0);
            zmq_recv(z.router, buf, sizeof buf, 0);
            zmq_send(z.router, id, (size_t)(n > 0 ? n : 0), ZMQ_SNDMORE);
            zmq_send(z.router, buf, 64, 0);
            zmq_recv(z.dealer, buf, sizeof buf, 0);
        }
        us = (double)(rumor_clock_ns() - t0) / BENCH_RTT_COUNT / 1e3;
    }
    s_zmq_close(&z);
    return us;
}

/* --- the cipher ceiling --------------------------------------------------- */

static double
s_box_gbps(size_t msg)
{
    unsigned char pk[crypto_box_PUBLICKEYBYTES], sk[crypto_box_SECRETKEYBYTES];
    unsigned char k[crypto_box_BEFORENMBYTES], nonce[crypto_box_NONCEBYTES];
    if (crypto_box_keypair(pk, sk) != 0 || crypto_box_beforenm(k, pk, sk) != 0)
        return 0;
    randombytes_buf(nonce, sizeof nonce);
    uint8_t *in = calloc(1, msg);
    uint8_t *out = malloc(msg + crypto_box_MACBYTES);
    size_t count = BENCH_BYTES / msg;
    double best = 0;
    for (int r = 0; in && out && r < BENCH_REPS; r++) {
        uint64_t t0 = rumor_clock_ns();
        for (size_t i = 0; i < count; i++) {
            nonce[0]++;
            crypto_box_easy_afternm(out, in, msg, nonce, k);
        }
        double gbps = (double)(count * msg) / (double)(rumor_clock_ns() - t0);
        if (gbps > best)
            best = gbps;
    }
    free(in);
    free(out);
    sodium_memzero(sk, sizeof sk);
    sodium_memzero(k, sizeof k);
    return best;
}

/* The cipher pipeline: one thread boxes, another unboxes, handing boxes
 * over a 4-slot ring: what CURVE could reach on this machine if nothing
 * else (TCP copies, libzmq) cost anything. */
#define PIPE_SLOTS 4

struct s_pipe {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    uint8_t *box[PIPE_SLOTS];
    size_t msg, count;
    size_t produced, consumed;
    unsigned char k[crypto_box_BEFORENMBYTES];
    bool failed;
};

static void *
s_pipe_open(void *arg)
{
    struct s_pipe *q = arg;
    uint8_t *plain = malloc(q->msg);
    unsigned char nonce[crypto_box_NONCEBYTES] = {0};
    for (size_t i = 0; plain != NULL && i < q->count; i++) {
        pthread_mutex_lock(&q->mu);
        while (q->produced == i)
            pthread_cond_wait(&q->cv, &q->mu);
        pthread_mutex_unlock(&q->mu);
        memcpy(nonce, &i, sizeof i);
        if (crypto_box_open_easy_afternm(plain,
                                         q->box[i % PIPE_SLOTS],
                                         q->msg + crypto_box_MACBYTES,
                                         nonce,
                                         q->k) != 0)
            q->failed = true;
        pthread_mutex_lock(&q->mu);
        q->consumed = i + 1;
        pthread_cond_broadcast(&q->cv);
        pthread_mutex_unlock(&q->mu);
    }
    free(plain);
    return NULL;
}

static double
s_box_pipe_gbps(size_t msg)
{
    struct s_pipe q;
    memset(&q, 0, sizeof q);
    unsigned char pk[crypto_box_PUBLICKEYBYTES], sk[crypto_box_SECRETKEYBYTES];
    if (crypto_box_keypair(pk, sk) != 0 ||
        crypto_box_beforenm(q.k, pk, sk) != 0)
        return 0;
    q.msg = msg;
    q.count = BENCH_BYTES / msg;
    pthread_mutex_init(&q.mu, NULL);
    pthread_cond_init(&q.cv, NULL);
    uint8_t *in = calloc(1, msg);
    bool ok = in != NULL;
    for (int s = 0; s < PIPE_SLOTS; s++) {
        q.box[s] = malloc(msg + crypto_box_MACBYTES);
        ok = ok && q.box[s] != NULL;
    }
    double gbps = 0;
    if (ok) {
        pthread_t th;
        unsigned char nonce[crypto_box_NONCEBYTES] = {0};
        uint64_t t0 = rumor_clock_ns();
        pthread_create(&th, NULL, s_pipe_open, &q);
        for (size_t i = 0; i < q.count; i++) {
            pthread_mutex_lock(&q.mu);
            while (i - q.consumed >= PIPE_SLOTS)
                pthread_cond_wait(&q.cv, &q.mu);
            pthread_mutex_unlock(&q.mu);
            memcpy(nonce, &i, sizeof i);
            crypto_box_easy_afternm(q.box[i % PIPE_SLOTS], in, msg, nonce, q.k);
            pthread_mutex_lock(&q.mu);
            q.produced = i + 1;
            pthread_cond_broadcast(&q.cv);
            pthread_mutex_unlock(&q.mu);
        }
        pthread_join(th, NULL);
        if (!q.failed)
            gbps = (double)(q.count * msg) / (double)(rumor_clock_ns() - t0);
    }
    for (int s = 0; s < PIPE_SLOTS; s++)
        free(q.box[s]);
    free(in);
    pthread_mutex_destroy(&q.mu);
    pthread_cond_destroy(&q.cv);
    sodium_memzero(sk, sizeof sk);
    sodium_memzero(q.k, sizeof q.k);
    return gbps;
}

/* --- rumor_net ------------------------------------------------------------ */

struct s_pair {
    rumor_net_keypair *kp[2];
    rumor_net *net[2];
};

static bool
s_pair_open(struct s_pair *p,
            bool secure,
            size_t msg,
            uint64_t rate_bits,
            uint32_t delay_ms)
{
    memset(p, 0, sizeof *p);
    char ep[2][64];
    for (int i = 0; i < 2; i++) {
        int port = 0;
        int fd = s_tcp_listen(&port);
        if (fd < 0)
            return false;
        close(fd);
        snprintf(ep[i], sizeof ep[i], "tcp://127.0.0.1:%d", port);
        if (rumor_net_keypair_generate(&p->kp[i]) != RUMOR_OK)
            return false;
    }
    for (int i = 0; i < 2; i++) {
        struct rumor_net_peer peer = {
            .id = (uint32_t)(1 - i),
            .endpoint = ep[1 - i],
            .key = secure ? rumor_net_keypair_public(p->kp[1 - i]) : NULL,
            .link = true,
        };
        struct rumor_net_opts o;
        rumor_net_opts_default(&o);
        o.self = (uint32_t)i;
        o.endpoint = ep[i];
        o.keys = secure ? p->kp[i] : NULL;
        o.insecure = !secure;
        o.peers = &peer;
        o.npeers = 1;
        o.chunk_bytes = BENCH_CHUNK;
        o.queue_bytes = msg < (32u << 20) ? 32u << 20 : msg;
        o.inbox_bytes = 4 * o.queue_bytes;
        o.rate_bits = i == 0 ? rate_bits : 0; /* shape 0 -> 1 only */
        o.delay_ms = i == 0 ? delay_ms : 0;
        if (rumor_net_new(&o, &p->net[i]) != RUMOR_OK)
            return false;
    }
    uint64_t deadline = rumor_clock_ns() + 10000000000ull;
    return rumor_net_wait_ready(p->net[0], 1, deadline) == RUMOR_OK &&
           rumor_net_wait_ready(p->net[1], 0, deadline) == RUMOR_OK;
}

static void
s_pair_close(struct s_pair *p)
{
    for (int i = 0; i < 2; i++) {
        rumor_net_destroy(&p->net[i]);
        rumor_net_keypair_destroy(&p->kp[i]);
    }
}

struct s_net_src {
    rumor_net *net;
    size_t msg, count;
    const uint8_t *buf;
};

static void *
s_net_source(void *arg)
{
    struct s_net_src *s = arg;
    for (size_t i = 0; i < s->count; i++) {
        struct rumor_net_header h = {.kind = RUMOR_NET_KIND_GOSSIP, .step = i};
        rumor_net_send(s->net,
                       1,
                       &h,
                       s->buf,
                       s->msg,
                       rumor_clock_ns() + 10000000000ull);
    }
    return NULL;
}

static double
s_net_gbps(size_t msg, bool secure)
{
    struct s_pair p;
    double gbps = 0;
    uint8_t *buf = calloc(1, msg);
    if (buf != NULL && s_pair_open(&p, secure, msg, 0, 0)) {
        struct s_net_src src = {p.net[0], msg, BENCH_BYTES / msg, buf};
        pthread_t th;
        uint64_t t0 = rumor_clock_ns();
        pthread_create(&th, NULL, s_net_source, &src);
        size_t got = 0;
        for (size_t i = 0; i < src.count; i++) {
            struct rumor_net_msg m;
            if (rumor_net_recv(p.net[1],
                               0,
                               RUMOR_NET_KIND_GOSSIP,
                               i,
                               0,
                               rumor_clock_ns() + 10000000000ull,
                               &m) != RUMOR_OK)
                break;
            got += m.len;
            rumor_net_msg_free(&m);
        }
        gbps = (double)got / (double)(rumor_clock_ns() - t0);
        pthread_join(th, NULL);
    }
    s_pair_close(&p);
    free(buf);
    return gbps;
}

static double
s_net_rtt_us(void)
{
    struct s_pair p;
    double us = 0;
    if (s_pair_open(&p, true, 64, 0, 0)) {
        uint8_t buf[64] = {0};
        uint64_t t0 = 0;
        for (int i = -1; i < BENCH_RTT_COUNT; i++) {
            if (i == 0)
                t0 = rumor_clock_ns();
            uint64_t step = (uint64_t)(i + 1);
            uint64_t deadline = rumor_clock_ns() + 10000000000ull;
            struct rumor_net_header h = {.kind = RUMOR_NET_KIND_GOSSIP,
                                         .step = step};
            struct rumor_net_msg m;
            rumor_net_send(p.net[0], 1, &h, buf, 64, deadline);
            if (rumor_net_recv(p.net[1],
                               0,
                               RUMOR_NET_KIND_GOSSIP,
                               step,
                               0,
                               deadline,
                               &m) != RUMOR_OK)
                break;
            rumor_net_msg_free(&m);
            rumor_net_send(p.net[1], 0, &h, buf, 64, deadline);
            if (rumor_net_recv(p.net[0],
                               1,
                               RUMOR_NET_KIND_GOSSIP,
                               step,
                               0,
                               deadline,
                               &m) != RUMOR_OK)
                break;
            rumor_net_msg_free(&m);
        }
        us = (double)(rumor_clock_ns() - t0) / BENCH_RTT_COUNT / 1e3;
    }
    s_pair_close(&p);
    return us;
}

/* Link shaping: the rate a shaped CURVE link achieves with 64 KiB
 * messages over about one second, in Mbit/s. */
static double
s_shaped_mbit(uint64_t rate_bits)
{
    struct s_pair p;
    double mbit = 0;
    size_t msg = 64u << 10;
    size_t count = (size_t)(rate_bits / 8 / msg) + 4;
    uint8_t *buf = calloc(1, msg);
    if (buf != NULL && s_pair_open(&p, true, msg, rate_bits, 0)) {
        struct s_net_src src = {p.net[0], msg, count, buf};
        pthread_t th;
        uint64_t t0 = rumor_clock_ns();
        pthread_create(&th, NULL, s_net_source, &src);
        /* timed from the arrival of the first quarter on, so the one-frame
         * burst the bucket starts with is not counted */
        size_t got = 0, skip = count / 4;
        for (size_t i = 0; i < count; i++) {
            struct rumor_net_msg m;
            uint64_t deadline = rumor_clock_ns() + 10000000000ull;
            if (rumor_net_recv(p.net[1],
                               0,
                               RUMOR_NET_KIND_GOSSIP,
                               i,
                               0,
                               deadline,
                               &m) != RUMOR_OK)
                break;
            if (i == skip)
                t0 = rumor_clock_ns();
            else if (i > skip)
                got += m.len;
            rumor_net_msg_free(&m);
        }
        mbit = (double)got * 8 / ((double)(rumor_clock_ns() - t0) * 1e-9) / 1e6;
        pthread_join(th, NULL);
    }
    s_pair_close(&p);
    free(buf);
    return mbit;
}

/* Link shaping: mean one-way time of a 64-byte message with delay_ms. */
static double
s_shaped_delay_ms(uint32_t delay_ms)
{
    struct s_pair p;
    double ms = 0;
    const int n = 20;
    if (s_pair_open(&p, true, 64, 0, delay_ms)) {
        uint8_t buf[64] = {0};
        uint64_t total = 0;
        for (int i = 0; i < n; i++) {
            uint64_t deadline = rumor_clock_ns() + 10000000000ull;
            struct rumor_net_header h = {.kind = RUMOR_NET_KIND_GOSSIP,
                                         .step = (uint64_t)i};
            struct rumor_net_msg m;
            uint64_t t0 = rumor_clock_ns();
            rumor_net_send(p.net[0], 1, &h, buf, 64, deadline);
            if (rumor_net_recv(p.net[1],
                               0,
                               RUMOR_NET_KIND_GOSSIP,
                               (uint64_t)i,
                               0,
                               deadline,
                               &m) != RUMOR_OK)
                break;
            total += rumor_clock_ns() - t0;
            rumor_net_msg_free(&m);
        }
        ms = (double)total / n / 1e6;
    }
    s_pair_close(&p);
    return ms;
}

/* --- the table ------------------------------------------------------------ */

typedef double (*s_measure)(size_t msg, bool flag);

static double
s_best(s_measure f, size_t msg, bool flag)
{
    double best = 0;
    for (int r = 0; r < BENCH_REPS; r++) {
        double v = f(msg, flag);
        if (v > best)
            best = v;
    }
    return best;
}

static double
s_tcp_adapter(size_t msg, bool flag)
{
    (void)flag;
    return s_tcp_gbps(msg);
}

/* `rumor bench net --only KIND SIZE`: one figure, for profiling. */
static int
s_only(const char *kind, const char *size_text)
{
    char *end = NULL;
    unsigned long long msg = strtoull(size_text, &end, 10);
    if (end == size_text || *end != '\0' || msg == 0 || msg > (64ull << 30)) {
        fprintf(stderr, "rumor bench net: bad size '%s'\n", size_text);
        return 2;
    }
    double v = 0;
    if (strcmp(kind, "tcp") == 0)
        v = s_tcp_gbps(msg);
    else if (strcmp(kind, "zmq") == 0 || strcmp(kind, "curve") == 0)
        v = s_zmq_gbps(msg, strcmp(kind, "curve") == 0);
    else if (strcmp(kind, "net") == 0 || strcmp(kind, "netcurve") == 0)
        v = s_net_gbps(msg, strcmp(kind, "netcurve") == 0);
    else if (strcmp(kind, "box") == 0)
        v = s_box_gbps(msg);
    else if (strcmp(kind, "pipe") == 0)
        v = s_box_pipe_gbps(msg);
    else if (strcmp(kind, "rate") == 0) { /* SIZE is the rate in bit/s */
        printf("rate %llu bit/s: achieved %.1f Mbit/s\n",
               msg,
               s_shaped_mbit(msg));
        return 0;
    } else {
        fprintf(stderr,
                "rumor bench net: --only tcp|zmq|curve|net|netcurve|"
                "box|pipe SIZE | --only rate BITS\n");
        return 2;
    }
    printf("%s %llu bytes: %.2f GB/s\n", kind, msg, v);
    return 0;
}

int
bench_net_main(int argc, char **argv)
{
    if (sodium_init() < 0)
        return 1;
    rumor_log_set_level(RUMOR_LOG_ERROR); /* no INSECURE warnings */
    if (argc == 4 && strcmp(argv[1], "--only") == 0)
        return s_only(argv[2], argv[3]);
    printf("net bench on 127.0.0.1: %u MiB per run, best of %d, GB/s = 1e9 "
           "B/s\n",
           BENCH_BYTES >> 20,
           BENCH_REPS);
    printf("rumor_net chunk %u KiB; cipher ceiling = crypto_box_easy_afternm "
           "on one core over one box (message for libzmq, chunk for "
           "rumor_net); pipe = one thread boxing, another unboxing (what "
           "CURVE could reach here if TCP and libzmq were free)\n\n",
           BENCH_CHUNK >> 10);
    printf("%-8s %8s %8s %8s %8s %8s %8s %8s %8s %9s %9s %9s %9s %9s\n",
           "message",
           "tcp",
           "zmq",
           "curve",
           "net",
           "netcurve",
           "box(msg)",
           "box(chk)",
           "pipe",
           "zmq/tcp",
           "curve/box",
           "net/tcp",
           "ncurve/box",
           "curve/pipe");
    for (size_t i = 0; i < SIZE_COUNT; i++) {
        size_t msg = s_sizes[i];
        double tcp = s_best(s_tcp_adapter, msg, false);
        double zplain = s_best(s_zmq_gbps, msg, false);
        double zcurve = s_best(s_zmq_gbps, msg, true);
        double nplain = s_best(s_net_gbps, msg, false);
        double ncurve = s_best(s_net_gbps, msg, true);
        double box_msg = s_box_gbps(msg);
        size_t chunk = msg < BENCH_CHUNK ? msg : BENCH_CHUNK;
        double box_chunk = s_box_gbps(chunk);
        double pipe = s_box_pipe_gbps(msg);
        char label[32];
        snprintf(label,
                 sizeof label,
                 "%zu%s",
                 msg >= (1u << 20) ? msg >> 20 : msg >> 10,
                 msg >= (1u << 20) ? "MiB" : "KiB");
        printf("%-8s %8.2f %8.2f %8.2f %8.2f %8.2f %8.2f %8.2f %8.2f %8.0f%% "
               "%8.0f%% %8.0f%% %8.0f%% %8.0f%%\n",
               label,
               tcp,
               zplain,
               zcurve,
               nplain,
               ncurve,
               box_msg,
               box_chunk,
               pipe,
               100 * zplain / tcp,
               100 * zcurve / box_msg,
               100 * nplain / tcp,
               100 * ncurve / box_chunk,
               100 * zcurve / pipe);
        fflush(stdout);
    }
    printf("\nround trip of a 64-byte message (mean of %d): tcp %.1f us, zmq "
           "%.1f us, curve %.1f us, rumor_net curve %.1f us\n",
           BENCH_RTT_COUNT,
           s_tcp_rtt_us(),
           s_zmq_rtt_us(false),
           s_zmq_rtt_us(true),
           s_net_rtt_us());
    printf("\nlink shaping (rumor_net CURVE, 64 KiB messages, about 1 s "
           "each):\n");
    static const uint64_t rates[] = {10000000, 100000000, 1000000000};
    for (size_t i = 0; i < sizeof rates / sizeof rates[0]; i++) {
        double got = s_shaped_mbit(rates[i]);
        printf("  rate %5.0f Mbit/s: achieved %7.1f Mbit/s (%.0f%%)\n",
               rates[i] / 1e6,
               got,
               100 * got / (rates[i] / 1e6));
    }
    static const uint32_t delays[] = {1, 10, 50};
    for (size_t i = 0; i < sizeof delays / sizeof delays[0]; i++)
        printf("  delay %2u ms: one-way time of 64 bytes %.2f ms\n",
               delays[i],
               s_shaped_delay_ms(delays[i]));
    return 0;
}
