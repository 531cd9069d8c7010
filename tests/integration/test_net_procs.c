/*
 * net with real `rumor` processes ($RUMOR_BIN) on 127.0.0.1: two processes
 * with keys from `rumor keygen` and a two-node topology file exchange
 * authenticated, encrypted messages; a peer process that stops answering
 * (SIGSTOP) turns late then down and comes back alive after SIGCONT; a
 * stopped receiver does not make the sender's queue grow past its bound.
 * Every process a test starts it also stops (SIGTERM, then SIGKILL at a
 * deadline) and reaps.
 */
#include "tests/cmocka_compat.h"

#include "tests/integration/test_net_common.h"

#include "rumor/topology.h"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>

extern char **environ;

struct t_dir {
    char path[64];
};

static void
t_dir_new(struct t_dir *d)
{
    snprintf(d->path, sizeof d->path, "/tmp/rumor-test-netp-XXXXXX");
    assert_non_null(mkdtemp(d->path));
}

static void
t_dir_remove(struct t_dir *d)
{
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", d->path);
    assert_int_equal(system(cmd), 0);
}

static const char *
t_rumor_bin(void)
{
    const char *bin = getenv("RUMOR_BIN");
    if (bin == NULL || access(bin, X_OK) != 0)
        return NULL;
    return bin;
}

/* Starts argv with stdout and stderr to out_path; returns the pid. */
static pid_t
t_spawn(char *const argv[], const char *out_path)
{
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa,
                                     1,
                                     out_path,
                                     O_WRONLY | O_CREAT | O_TRUNC,
                                     0644);
    posix_spawn_file_actions_adddup2(&fa, 1, 2);
    pid_t pid = -1;
    int rc = posix_spawn(&pid, argv[0], &fa, NULL, argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    assert_int_equal(rc, 0);
    return pid;
}

/* Waits for pid to exit until the deadline; returns its exit status, or
 * -1 after killing it at the deadline. */
static int
t_reap(pid_t pid, uint64_t deadline)
{
    int status = 0;
    while (rumor_clock_ns() < deadline) {
        pid_t r = waitpid(pid, &status, WNOHANG);
        if (r == pid)
            return WIFEXITED(status) ? WEXITSTATUS(status) : 128;
        t_pause_1ms();
    }
    kill(pid, SIGKILL);
    waitpid(pid, &status, 0);
    return -1;
}

static void
t_stop(pid_t pid)
{
    kill(pid, SIGCONT);
    kill(pid, SIGTERM);
    int status = t_reap(pid, t_deadline(T_DEADLINE_MS));
    if (status != 0) /* -1: ignored SIGTERM; else a failure (or ASan) */
        fail_msg("process %d ended with status %d", (int)pid, status);
}

/* Runs `rumor keygen --out DIR/NAME` and reads the printed public key. */
static void
t_keygen(const char *bin,
         const struct t_dir *d,
         const char *name,
         char key[RUMOR_NET_ID_TEXT_BYTES + 1])
{
    char base[128], out[160];
    snprintf(base, sizeof base, "%s/%s", d->path, name);
    snprintf(out, sizeof out, "%s/%s.out", d->path, name);
    char *argv[] = {(char *)bin, "keygen", "--out", base, NULL};
    pid_t pid = t_spawn(argv, out);
    assert_int_equal(t_reap(pid, t_deadline(T_DEADLINE_MS)), 0);
    FILE *f = fopen(out, "r");
    assert_non_null(f);
    char line[128] = {0};
    assert_non_null(fgets(line, sizeof line, f));
    fclose(f);
    line[strcspn(line, "\n")] = '\0';
    assert_int_equal(strlen(line), RUMOR_NET_ID_TEXT_BYTES);
    memcpy(key, line, RUMOR_NET_ID_TEXT_BYTES + 1);
}

static void
t_write_topology(const struct t_dir *d,
                 char path[160],
                 const char keys[2][RUMOR_NET_ID_TEXT_BYTES + 1],
                 const int ports[2])
{
    snprintf(path, 160, "%s/two.topo", d->path);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fprintf(f, "# two nodes on loopback\n");
    for (int i = 0; i < 2; i++)
        fprintf(f, "node %d tcp://127.0.0.1:%d key=%s\n", i, ports[i], keys[i]);
    fprintf(f, "edge 0 1\n");
    fclose(f);
}

static bool
t_file_contains(const char *path, const char *needle)
{
    FILE *f = fopen(path, "r");
    if (f == NULL)
        return false;
    char buf[65536];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    return strstr(buf, needle) != NULL;
}

static void
test_ping__two_processes_with_keygen_keys__exchange_encrypted(void **state)
{
    (void)state;
    const char *bin = t_rumor_bin();
    if (bin == NULL) {
        printf("skipped: RUMOR_BIN is not set to the rumor binary\n");
        skip();
    }
    struct t_dir d;
    t_dir_new(&d);
    char keys[2][RUMOR_NET_ID_TEXT_BYTES + 1];
    t_keygen(bin, &d, "n0", keys[0]);
    t_keygen(bin, &d, "n1", keys[1]);
    int ports[2] = {t_free_port(), t_free_port()};
    char topo[160];
    t_write_topology(&d, topo, keys, ports);
    pid_t pid[2];
    char out[2][160];
    for (int i = 0; i < 2; i++) {
        char base[128], id[16];
        snprintf(base, sizeof base, "%s/n%d", d.path, i);
        snprintf(id, sizeof id, "%d", i);
        snprintf(out[i], sizeof out[i], "%s/ping%d.out", d.path, i);
        char *argv[] = {(char *)bin,
                        "ping",
                        "--topology",
                        topo,
                        "--id",
                        id,
                        "--key",
                        base,
                        "--count",
                        "4",
                        "--size",
                        "700000",
                        NULL};
        pid[i] = t_spawn(argv, out[i]);
    }
    int st0 = t_reap(pid[0], t_deadline(3 * T_DEADLINE_MS));
    int st1 = t_reap(pid[1], t_deadline(3 * T_DEADLINE_MS));
    if (st0 != 0 || st1 != 0)
        fail_msg("ping exit statuses %d and %d (logs in %s)", st0, st1, d.path);
    for (int i = 0; i < 2; i++) {
        assert_true(t_file_contains(out[i], "4 of 4 messages intact"));
        assert_true(t_file_contains(out[i], "(CURVE)"));
        assert_true(t_file_contains(out[i], "rejected 0 auth, 0 proto"));
    }
    t_dir_remove(&d);
}

static void
test_ping__insecure_flag__warns_at_start_and_works(void **state)
{
    (void)state;
    const char *bin = t_rumor_bin();
    if (bin == NULL) {
        printf("skipped: RUMOR_BIN is not set to the rumor binary\n");
        skip();
    }
    struct t_dir d;
    t_dir_new(&d);
    char topo[160];
    snprintf(topo, sizeof topo, "%s/plain.topo", d.path);
    FILE *f = fopen(topo, "w");
    assert_non_null(f);
    for (int i = 0; i < 2; i++) /* no keys: only --insecure can run this */
        fprintf(f, "node %d tcp://127.0.0.1:%d\n", i, t_free_port());
    fprintf(f, "edge 0 1\n");
    fclose(f);
    pid_t pid[2];
    char out[2][160];
    for (int i = 0; i < 2; i++) {
        char id[16];
        snprintf(id, sizeof id, "%d", i);
        snprintf(out[i], sizeof out[i], "%s/plain%d.out", d.path, i);
        char *argv[] = {(char *)bin,
                        "ping",
                        "--topology",
                        topo,
                        "--id",
                        id,
                        "--insecure",
                        "--count",
                        "2",
                        NULL};
        pid[i] = t_spawn(argv, out[i]);
    }
    int st0 = t_reap(pid[0], t_deadline(3 * T_DEADLINE_MS));
    int st1 = t_reap(pid[1], t_deadline(3 * T_DEADLINE_MS));
    if (st0 != 0 || st1 != 0)
        fail_msg("ping --insecure statuses %d and %d (logs in %s)",
                 st0,
                 st1,
                 d.path);
    for (int i = 0; i < 2; i++) {
        assert_true(t_file_contains(out[i], "WARN  net: INSECURE mode"));
        assert_true(t_file_contains(out[i], "2 of 2 messages intact"));
    }
    /* without the flag and without keys, nothing runs */
    char *argv[] = {(char *)bin, "ping", "--topology", topo, "--id", "0", NULL};
    pid_t p = t_spawn(argv, out[0]);
    assert_int_equal(t_reap(p, t_deadline(T_DEADLINE_MS)), 2);
    t_dir_remove(&d);
}

/* Node 0 runs in this process; node 1 is a `rumor ping --count 0`. */
struct t_pair {
    struct t_dir d;
    rumor_net_keypair *kp0;
    rumor_net *net;
    pid_t peer;
};

static bool
t_pair_start(struct t_pair *p, struct rumor_net_opts *o)
{
    const char *bin = t_rumor_bin();
    if (bin == NULL)
        return false;
    memset(p, 0, sizeof *p);
    t_dir_new(&p->d);
    char keys[2][RUMOR_NET_ID_TEXT_BYTES + 1];
    char base0[128];
    snprintf(base0, sizeof base0, "%s/n0", p->d.path);
    assert_int_equal(rumor_net_keypair_generate(&p->kp0), RUMOR_OK);
    assert_int_equal(rumor_net_keypair_save(p->kp0, base0), RUMOR_OK);
    memcpy(keys[0],
           rumor_net_keypair_public(p->kp0),
           RUMOR_NET_ID_TEXT_BYTES + 1);
    t_keygen(bin, &p->d, "n1", keys[1]);
    int ports[2] = {t_free_port(), t_free_port()};
    char topo[160];
    t_write_topology(&p->d, topo, keys, ports);
    char base1[128], out[160];
    snprintf(base1, sizeof base1, "%s/n1", p->d.path);
    snprintf(out, sizeof out, "%s/peer.out", p->d.path);
    char *argv[] = {(char *)bin,
                    "ping",
                    "--topology",
                    topo,
                    "--id",
                    "1",
                    "--key",
                    base1,
                    "--count",
                    "0",
                    "--size",
                    "1000",
                    "--timeout-ms",
                    "200",
                    NULL};
    p->peer = t_spawn(argv, out);
    /* node 0 from the same topology file, through the topology parser */
    rumor_topology *t = NULL;
    struct rumor_diag diag;
    assert_int_equal(rumor_topology_load_file(topo, &t, &diag), RUMOR_OK);
    struct rumor_net_peer peers[1];
    size_t n = 0;
    assert_int_equal(rumor_net_peers_from_topology(t, 0, peers, 1, &n),
                     RUMOR_OK);
    assert_int_equal(n, 1);
    assert_true(peers[0].link);
    o->self = 0;
    o->endpoint = rumor_topology_endpoint(t, 0);
    o->keys = p->kp0;
    o->peers = peers;
    o->npeers = n;
    assert_int_equal(rumor_net_new(o, &p->net), RUMOR_OK);
    rumor_topology_destroy(&t);
    return true;
}

static void
t_pair_stop(struct t_pair *p)
{
    t_stop(p->peer);
    rumor_net_destroy(&p->net);
    rumor_net_keypair_destroy(&p->kp0);
    t_dir_remove(&p->d);
}

static void
t_wait_state(rumor_net *net, rumor_net_state want, uint64_t deadline)
{
    while (rumor_net_peer_state(net, 1) != want) {
        if (rumor_clock_ns() >= deadline)
            fail_msg("peer never became %s (is %s)",
                     rumor_net_state_name(want),
                     rumor_net_state_name(rumor_net_peer_state(net, 1)));
        t_pause_1ms();
    }
}

static void
test_liveness__stopped_peer__late_then_down_then_alive_again(void **state)
{
    (void)state;
    struct rumor_net_opts o;
    t_test_opts(&o);
    o.late_ms = 300;
    o.down_ms = 900;
    struct t_pair p;
    if (!t_pair_start(&p, &o)) {
        printf("skipped: RUMOR_BIN is not set to the rumor binary\n");
        skip();
    }
    t_wait_state(p.net, RUMOR_NET_PEER_ALIVE, t_deadline(T_DEADLINE_MS));
    assert_int_equal(kill(p.peer, SIGSTOP), 0);
    uint64_t stopped = rumor_clock_ns();
    t_wait_state(p.net, RUMOR_NET_PEER_LATE, t_deadline(T_DEADLINE_MS));
    uint64_t late_at = rumor_clock_ns();
    t_wait_state(p.net, RUMOR_NET_PEER_DOWN, t_deadline(T_DEADLINE_MS));
    uint64_t down_at = rumor_clock_ns();
    /* the last heartbeat came at most one period before the stop, so the
     * states cannot change earlier than the timeouts minus that period */
    assert_true(late_at - stopped + 100 * T_MS >= 300 * T_MS);
    assert_true(down_at - stopped + 100 * T_MS >= 900 * T_MS);
    assert_true(down_at - late_at + 100 * T_MS >= 600 * T_MS);
    assert_int_equal(kill(p.peer, SIGCONT), 0);
    t_wait_state(p.net, RUMOR_NET_PEER_ALIVE, t_deadline(T_DEADLINE_MS));
    t_pair_stop(&p);
}

static void
test_memory__receiver_stops_reading__sender_queue_stays_bounded(void **state)
{
    (void)state;
    struct rumor_net_opts o;
    t_test_opts(&o);
    o.queue_bytes = 4u << 20;
    o.linger_ms = 0;
    struct t_pair p;
    if (!t_pair_start(&p, &o)) {
        printf("skipped: RUMOR_BIN is not set to the rumor binary\n");
        skip();
    }
    assert_int_equal(rumor_net_wait_ready(p.net, 1, t_deadline(T_DEADLINE_MS)),
                     RUMOR_OK);
    assert_int_equal(kill(p.peer, SIGSTOP), 0);
    size_t len = 1u << 20;
    uint8_t *buf = calloc(1, len);
    assert_non_null(buf);
    struct rumor_net_header h = {.kind = RUMOR_NET_KIND_GOSSIP, .step = 1};
    rumor_err rc = RUMOR_OK;
    int sent = 0;
    /* 1 GiB would be sent if nothing pushed back */
    while (sent < 1024) {
        rc = rumor_net_send(p.net, 1, &h, buf, len, t_deadline(300));
        if (rc != RUMOR_OK)
            break;
        sent++;
    }
    free(buf);
    assert_int_equal(rc, RUMOR_ETIMEDOUT);
    struct rumor_net_stats st;
    rumor_net_stats(p.net, 1, &st);
    printf("stopped receiver: %d MiB accepted before the queue filled; "
           "queued now %llu, most ever %llu bytes (bound %zu)\n",
           sent,
           (unsigned long long)st.queued_bytes,
           (unsigned long long)st.queued_bytes_max,
           o.queue_bytes);
    assert_true(st.queued_bytes_max <= o.queue_bytes);
    /* what left the queue sits in libzmq (SNDHWM derived from the same
     * byte budget) and in the kernel's socket buffers: with libzmq's
     * default HWM of 1000 messages, 256 MiB of frames could pile up */
    size_t kernel_slack = 16u << 20;
    assert_true((size_t)sent * len <= 2 * o.queue_bytes + kernel_slack);
    t_pair_stop(&p);
}

int
main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(
            test_ping__two_processes_with_keygen_keys__exchange_encrypted),
        cmocka_unit_test(test_ping__insecure_flag__warns_at_start_and_works),
        cmocka_unit_test(
            test_liveness__stopped_peer__late_then_down_then_alive_again),
        cmocka_unit_test(
            test_memory__receiver_stops_reading__sender_queue_stays_bounded),
    };
    if (argc == 2)
        cmocka_set_test_filter(argv[1]);
    return cmocka_run_group_tests_name("net_procs", tests, NULL, NULL);
}
