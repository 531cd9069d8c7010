/*
 * `rumor ping`: one node of a topology exchanges K rounds of messages with
 * each neighbour over the real transport (CURVE, ZAP allow-list, sender
 * binding, HELLO), and checks every byte. It is the end-to-end check that
 * two `rumor` processes with keys from `rumor keygen` and a topology file
 * talk authenticated and encrypted, and the peer process that the net
 * integration tests stop, resume and kill.
 *
 * Payloads are a pure function of (step, sender, receiver) drawn from the
 * counter-based rng, so the receiver recomputes what it must have got
 * without any side channel. --count 0 serves until SIGTERM/SIGINT.
 */
#include "cli/cli.h"

#include "rumor/net.h"
#include "rumor/topology.h"

#include <signal.h>
#include <stdlib.h>
#include <string.h>

#define PING_MAX_PEERS RUMOR_TOPOLOGY_MAX_NODES
#define PING_MAX_SIZE  (64u << 20)

static volatile sig_atomic_t s_stop;

static void
s_on_signal(int sig)
{
    (void)sig;
    s_stop = 1;
}

void
cli_ping_help(FILE *out)
{
    fprintf(out,
            "usage: rumor ping --topology FILE --id N --key DIR/NAME\n"
            "                  [--count K] [--size BYTES] [--timeout-ms MS]\n"
            "                  [--fingerprint N] [--rate-mbit R] "
            "[--delay-ms D] [--insecure]\n\n"
            "Node N binds its endpoint from FILE and exchanges K rounds "
            "(default 3)\n"
            "of BYTES-byte messages (default 100000) with each neighbour, "
            "checking\n"
            "every byte; exit 0 when all arrived intact. --count 0 serves "
            "until\n"
            "SIGTERM. --insecure uses plain TCP (logged as a warning).\n");
}

static void
s_fill(uint8_t *buf, size_t n, uint64_t step, uint32_t from, uint32_t to)
{
    struct rumor_rng rng;
    rumor_rng_init(&rng, rumor_seed_derive(0x70696e67u, from, to), step);
    for (size_t i = 0; i < n; i++)
        buf[i] = (uint8_t)rumor_rng_u32(&rng);
}

struct s_args {
    const char *topology, *key;
    unsigned long long id, count, size, timeout_ms, fingerprint, delay_ms;
    double rate_mbit;
    bool insecure;
};

static int
s_parse(int argc, char **argv, struct s_args *a)
{
    memset(a, 0, sizeof *a);
    a->count = 3;
    a->size = 100000;
    a->timeout_ms = 10000;
    for (int i = 1; i < argc; i++) {
        const char *opt = argv[i];
        const char *val = i + 1 < argc ? argv[i + 1] : NULL;
        int rc = 0;
        if (strcmp(opt, "--insecure") == 0) {
            a->insecure = true;
            continue;
        }
        if (val == NULL) {
            fprintf(stderr, "rumor ping: '%s' needs a value\n", opt);
            return -1;
        }
        i++;
        if (strcmp(opt, "--topology") == 0)
            a->topology = val;
        else if (strcmp(opt, "--key") == 0)
            a->key = val;
        else if (strcmp(opt, "--id") == 0)
            rc = cli_parse_u64(val, "--id", 0, PING_MAX_PEERS - 1, &a->id);
        else if (strcmp(opt, "--count") == 0)
            rc = cli_parse_u64(val, "--count", 0, 1000000000, &a->count);
        else if (strcmp(opt, "--size") == 0)
            rc = cli_parse_u64(val, "--size", 0, PING_MAX_SIZE, &a->size);
        else if (strcmp(opt, "--timeout-ms") == 0)
            rc = cli_parse_u64(val, "--timeout-ms", 1, 3600000, &a->timeout_ms);
        else if (strcmp(opt, "--fingerprint") == 0)
            rc = cli_parse_u64(val,
                               "--fingerprint",
                               0,
                               UINT64_MAX,
                               &a->fingerprint);
        else if (strcmp(opt, "--delay-ms") == 0)
            rc = cli_parse_u64(val, "--delay-ms", 0, 10000, &a->delay_ms);
        else if (strcmp(opt, "--rate-mbit") == 0)
            rc = cli_parse_double(val, "--rate-mbit", 0, 1e6, &a->rate_mbit);
        else {
            fprintf(stderr, "rumor ping: unknown option '%s'\n", opt);
            return -1;
        }
        if (rc != 0)
            return -1;
    }
    if (a->topology == NULL || (a->key == NULL && !a->insecure)) {
        cli_ping_help(stderr);
        return -1;
    }
    return 0;
}

/* One round: send to every linked peer, then receive from each. Returns
 * the number of messages that arrived intact. */
static size_t
s_round(rumor_net *net,
        const struct rumor_net_peer *peers,
        size_t npeers,
        const struct s_args *a,
        uint64_t step,
        uint8_t *out,
        uint8_t *expect)
{
    uint32_t self = (uint32_t)a->id;
    uint64_t deadline = rumor_clock_ns() + a->timeout_ms * 1000000u;
    for (size_t i = 0; i < npeers; i++) {
        if (!peers[i].link)
            continue;
        s_fill(out, a->size, step, self, peers[i].id);
        struct rumor_net_header h = {.kind = RUMOR_NET_KIND_PING, .step = step};
        rumor_err rc =
            rumor_net_send(net, peers[i].id, &h, out, a->size, deadline);
        if (rc != RUMOR_OK)
            fprintf(stderr,
                    "rumor ping: step %llu: send to %u: %s\n",
                    (unsigned long long)step,
                    peers[i].id,
                    rumor_strerror(rc));
    }
    size_t ok = 0;
    for (size_t i = 0; i < npeers && !s_stop; i++) {
        if (!peers[i].link)
            continue;
        struct rumor_net_msg msg;
        rumor_err rc = rumor_net_recv(net,
                                      peers[i].id,
                                      RUMOR_NET_KIND_PING,
                                      step,
                                      0,
                                      deadline,
                                      &msg);
        if (rc != RUMOR_OK) {
            fprintf(stderr,
                    "rumor ping: step %llu: from %u: %s\n",
                    (unsigned long long)step,
                    peers[i].id,
                    rumor_strerror(rc));
            continue;
        }
        s_fill(expect, a->size, step, peers[i].id, self);
        if (msg.len == a->size && memcmp(msg.payload, expect, a->size) == 0)
            ok++;
        else
            fprintf(stderr,
                    "rumor ping: step %llu: from %u: %zu bytes, "
                    "content differs\n",
                    (unsigned long long)step,
                    peers[i].id,
                    msg.len);
        rumor_net_msg_free(&msg);
    }
    rumor_net_close_steps_before(net, step + 1);
    return ok;
}

int
cli_ping_main(int argc, char **argv)
{
    struct s_args a;
    if (s_parse(argc, argv, &a) != 0)
        return 2;
    int status = 1;
    rumor_topology *topo = NULL;
    rumor_net_keypair *kp = NULL;
    rumor_net *net = NULL;
    struct rumor_net_peer *peers = NULL;
    uint8_t *out = NULL, *expect = NULL;
    struct rumor_diag diag;
    memset(&diag, 0, sizeof diag);
    rumor_err rc = rumor_topology_load_file(a.topology, &topo, &diag);
    if (rc != RUMOR_OK) {
        char text[2 * RUMOR_DIAG_TEXT_BYTES + 32];
        rumor_diag_format(&diag, text, sizeof text);
        fprintf(stderr, "rumor ping: %s (%s)\n", text, rumor_strerror(rc));
        goto done;
    }
    size_t nodes = rumor_topology_nodes(topo);
    if (a.id >= nodes || rumor_topology_endpoint(topo, a.id) == NULL) {
        fprintf(stderr,
                "rumor ping: node %llu has no endpoint in %s\n",
                a.id,
                a.topology);
        goto done;
    }
    if (!a.insecure) {
        rc = rumor_net_keypair_load(a.key, &kp);
        if (rc != RUMOR_OK) {
            fprintf(stderr,
                    "rumor ping: %s.key: %s\n",
                    a.key,
                    rumor_strerror(rc));
            goto done;
        }
        const char *listed = rumor_topology_key(topo, a.id);
        if (listed == NULL ||
            strcmp(listed, rumor_net_keypair_public(kp)) != 0) {
            fprintf(stderr,
                    "rumor ping: the key in %s.key is not node "
                    "%llu's key in %s\n",
                    a.key,
                    a.id,
                    a.topology);
            goto done;
        }
    }
    peers = calloc(nodes, sizeof *peers);
    out = malloc(a.size ? a.size : 1);
    expect = malloc(a.size ? a.size : 1);
    if (peers == NULL || out == NULL || expect == NULL)
        goto done;
    size_t npeers = 0;
    rc = rumor_net_peers_from_topology(topo, a.id, peers, nodes, &npeers);
    struct rumor_net_opts o;
    rumor_net_opts_default(&o);
    o.self = (uint32_t)a.id;
    o.endpoint = rumor_topology_endpoint(topo, a.id);
    o.keys = kp;
    o.peers = peers;
    o.npeers = npeers;
    o.insecure = a.insecure;
    o.fingerprint = a.fingerprint;
    o.rate_bits = (uint64_t)(a.rate_mbit * 1e6);
    o.delay_ms = (uint32_t)a.delay_ms;
    if (rc == RUMOR_OK)
        rc = rumor_net_new(&o, &net);
    if (rc != RUMOR_OK) {
        fprintf(stderr, "rumor ping: transport: %s\n", rumor_strerror(rc));
        goto done;
    }
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = s_on_signal;
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    printf("ping: node %llu listening on %s (%s)\n",
           a.id,
           rumor_net_endpoint(net),
           a.insecure ? "INSECURE" : "CURVE");
    fflush(stdout);
    size_t links = 0, intact = 0;
    for (size_t i = 0; i < npeers; i++)
        links += peers[i].link;
    uint64_t step = 0;
    while (!s_stop && (a.count == 0 || step < a.count)) {
        size_t ok = s_round(net, peers, npeers, &a, step, out, expect);
        intact += ok;
        printf("ping: step %llu: %zu of %zu neighbours intact\n",
               (unsigned long long)step,
               ok,
               links);
        fflush(stdout);
        step++;
    }
    struct rumor_net_stats st;
    rumor_net_stats(net, RUMOR_NET_ALL, &st);
    printf("ping: node %llu: %zu of %zu messages intact; sent %llu bytes, "
           "received %llu bytes; rejected %llu auth, %llu proto\n",
           a.id,
           intact,
           (size_t)step * links,
           (unsigned long long)st.bytes_sent,
           (unsigned long long)st.bytes_recv,
           (unsigned long long)st.rejected_auth,
           (unsigned long long)st.rejected_proto);
    status = (a.count == 0 || intact == (size_t)step * links) ? 0 : 1;
done:
    rumor_net_destroy(&net);
    rumor_net_keypair_destroy(&kp);
    rumor_topology_destroy(&topo);
    free(peers);
    free(out);
    free(expect);
    return status;
}
