/*
 * `rumor compose`: a docker-compose file for one topology. Every node
 * becomes a service named node-N, and the generated topology (written
 * next to the keys, mounted read-only by every service) lists
 * tcp://node-N:PORT as node N's endpoint, so Docker's embedded DNS is the
 * address book; the runtime listens on every interface when its endpoint
 * names a host (ZeroMQ cannot bind to a DNS name).
 *
 * Secrets stay out of images and environments: each node's CURVE secret
 * key is a file in --keys-dir (generated here when missing, reused when
 * present so a regenerated file keeps its keys) that the compose file
 * hands to that service alone as a docker secret (/run/secrets/node-N.key);
 * the public keys of all nodes are in the topology. Compose outside swarm
 * mounts secrets as the host files, owner and mode included, and the node
 * refuses a key readable by group or others, so the services run as the
 * user who ran `rumor compose` (root gets the image's uid 10001 and
 * chowns the files to it). Checkpoints live in one host directory per
 * node and metrics in one shared directory, both bind mounts.
 *
 * Link shaping is Rumor's own (--rate, --delay-ms on every node): tc in a
 * container would need NET_ADMIN. The YAML is written by hand, every
 * string double-quoted with YAML escapes and '$' doubled (compose expands
 * $VAR), since libyaml is not otherwise a dependency; `docker-compose
 * config` is the check (tests/integration/test_deploy.c).
 */
#include "rumor/net.h"
#include "rumor/node.h"
#include "rumor/topology.h"

#include "cli/cli.h"
#include "node/runtime_impl.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

/* Paths inside the images (docker/Dockerfile); uid 10001 is their user. */
#define COMPOSE_IMAGE       "rumor:latest"
#define COMPOSE_IMAGE_CUDA  "rumor:cuda"
#define COMPOSE_IMAGE_UID   10001u
#define COMPOSE_RUMOR       "/usr/local/bin/rumor"
#define COMPOSE_TOPOLOGY    "/etc/rumor/topology"
#define COMPOSE_CHECKPOINTS "/var/lib/rumor/checkpoints"
#define COMPOSE_METRICS     "/var/lib/rumor/metrics"
#define COMPOSE_PORT        7000u
/* --checkpoint-every unless the user gives one */
#define COMPOSE_CHECKPOINT_EVERY "100"
/* node --rate and --delay-ms bounds */
#define COMPOSE_MAX_RATE     1e13
#define COMPOSE_MAX_DELAY_MS 60000u

struct s_args {
    const char *topology;
    const char *image;
    const char *keys_dir;
    const char *state_dir;
    const char *topo_out;
    const char *restart;
    bool gpus;
    unsigned long long gpu_count;
    unsigned long long port;
    uint64_t rate_bits;
    unsigned long long delay_ms;
    char **pass; /* node options for every service */
    size_t npass;
    struct rumor_node_opts opts; /* the node options as checked */
    unsigned uid, gid;           /* the services' user */
    char topo_abs[PATH_MAX], keys_abs[PATH_MAX], state_abs[PATH_MAX];
};

void
cli_compose_help(FILE *out)
{
    fprintf(out,
            "usage: rumor compose --topology FILE [--image NAME] [--gpus] "
            "[--gpu-count G]\n"
            "         [--link-rate RATE] [--link-delay DELAY] [--keys-dir "
            "DIR]\n"
            "         [--state-dir DIR] [--topology-out FILE] [--port P]\n"
            "         [--restart POLICY] [node options] > "
            "docker-compose.yml\n\n"
            "Prints a docker-compose file with one service node-N per "
            "topology node.\n"
            "Writes FILE with endpoints tcp://node-N:P and every public key "
            "to\n"
            "--topology-out (default compose.topo), a secret key per node to\n"
            "--keys-dir (default keys; existing keys are reused), and a "
            "checkpoint\n"
            "directory per node plus a shared metrics directory to "
            "--state-dir\n"
            "(default rumor-state). Secret keys reach each service as a "
            "docker secret.\n"
            "  --image NAME       default " COMPOSE_IMAGE
            " (" COMPOSE_IMAGE_CUDA " with --gpus)\n"
            "  --gpus             reserve GPU (N mod G) for node N and pass "
            "--cuda\n"
            "  --gpu-count G      GPUs on the Docker host (default 1)\n"
            "  --link-rate RATE   per-link rate, e.g. 100mbit, 1gbit, 10M "
            "(Rumor's --rate)\n"
            "  --link-delay D     one-way delay per link, e.g. 10ms, 1s "
            "(Rumor's --delay-ms)\n"
            "  --port P           port of every node (default 7000)\n"
            "  --restart POLICY   on-failure (default: a crashed node comes "
            "back, a\n"
            "                     finished one stays down), unless-stopped, "
            "always or no\n"
            "Other options go to every node (see 'rumor help node').\n");
}

/* --- parsing ------------------------------------------------------------ */

struct s_unit {
    const char *name;
    double scale; /* to bits per second */
};

/* tc's spellings (bit = bits, bps = bytes per second) and node --rate's
 * bare k, M, G suffixes. */
static const struct s_unit s_rate_units[] = {
    {"", 1},
    {"bit", 1},
    {"kbit", 1e3},
    {"mbit", 1e6},
    {"gbit", 1e9},
    {"tbit", 1e12},
    {"bps", 8},
    {"kbps", 8e3},
    {"mbps", 8e6},
    {"gbps", 8e9},
    {"k", 1e3},
    {"m", 1e6},
    {"g", 1e9},
};

static int
s_parse_rate(const char *text, uint64_t *out)
{
    char *end = NULL;
    errno = 0;
    double x = strtod(text, &end);
    bool number = end != text && errno == 0 && isfinite(x) && x >= 0;
    for (size_t i = 0;
         number && i < sizeof s_rate_units / sizeof s_rate_units[0];
         i++) {
        double bits = x * s_rate_units[i].scale;
        if (strcasecmp(end, s_rate_units[i].name) != 0 ||
            bits > COMPOSE_MAX_RATE)
            continue;
        *out = (uint64_t)llround(bits);
        return 0;
    }
    fprintf(stderr,
            "rumor compose: --link-rate: expected a rate up to 10tbit such "
            "as 100mbit, 1gbit, 10M or 0 (off), got '%s'\n",
            text);
    return -1;
}

/* Whole milliseconds, as node --delay-ms shapes. */
static int
s_parse_delay(const char *text, unsigned long long *out)
{
    char *end = NULL;
    errno = 0;
    double x = strtod(text, &end);
    double ms = -1;
    if (end != text && errno == 0 && isfinite(x) && x >= 0) {
        if (*end == '\0' || strcmp(end, "ms") == 0)
            ms = x;
        else if (strcmp(end, "s") == 0)
            ms = x * 1000;
        else if (strcmp(end, "us") == 0)
            ms = x / 1000;
    }
    if (ms < 0 || ms != floor(ms) || ms > COMPOSE_MAX_DELAY_MS) {
        fprintf(stderr,
                "rumor compose: --link-delay: expected whole milliseconds "
                "up to %u, such as 10ms or 1s, got '%s'\n",
                COMPOSE_MAX_DELAY_MS,
                text);
        return -1;
    }
    *out = (unsigned long long)ms;
    return 0;
}

static bool
s_restart_ok(const char *policy)
{
    return strcmp(policy, "on-failure") == 0 ||
           strcmp(policy, "unless-stopped") == 0 ||
           strcmp(policy, "always") == 0 || strcmp(policy, "no") == 0;
}

/* Options compose sets itself, per node or from its own flags. */
static const char *
s_reserved(const char *arg)
{
    static const char *const names[] = {"id",
                                        "key",
                                        "metrics-dir",
                                        "rate",
                                        "delay-ms",
                                        "config",
                                        "checkpoint-dir",
                                        "resume",
                                        "cuda"};
    static const char *const why[] = {"set per node",
                                      "set per node (a docker secret)",
                                      "set to the shared metrics directory",
                                      "use --link-rate",
                                      "use --link-delay",
                                      "the file is not in the container",
                                      "set to the node's checkpoint volume",
                                      "a restarted container resumes itself",
                                      "use --gpus"};
    if (strncmp(arg, "--", 2) != 0)
        return NULL;
    size_t len = strcspn(arg + 2, "=");
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (strlen(names[i]) == len && strncmp(arg + 2, names[i], len) == 0)
            return why[i];
    return NULL;
}

/* One of compose's own options at argv[*i]; 1 when taken, 0 when not
 * ours, -1 on a bad value. */
static int
s_own_option(int argc, char **argv, int *i, struct s_args *a)
{
    const char *opt = argv[*i];
    if (strcmp(opt, "--gpus") == 0) {
        a->gpus = true;
        return 1;
    }
    static const char *const valued[] = {"--topology",
                                         "--image",
                                         "--keys-dir",
                                         "--state-dir",
                                         "--topology-out",
                                         "--restart",
                                         "--link-rate",
                                         "--link-delay",
                                         "--port",
                                         "--gpu-count"};
    size_t k = 0;
    while (k < sizeof valued / sizeof valued[0] && strcmp(opt, valued[k]) != 0)
        k++;
    if (k == sizeof valued / sizeof valued[0])
        return 0;
    if (*i + 1 >= argc || argv[*i + 1][0] == '\0') {
        fprintf(stderr, "rumor compose: %s needs a value\n", opt);
        return -1;
    }
    const char *v = argv[++*i];
    const char **slots[] = {&a->topology,
                            &a->image,
                            &a->keys_dir,
                            &a->state_dir,
                            &a->topo_out,
                            &a->restart};
    if (k < sizeof slots / sizeof slots[0]) {
        *slots[k] = v;
        return 1;
    }
    if (k == 6)
        return s_parse_rate(v, &a->rate_bits) == 0 ? 1 : -1;
    if (k == 7)
        return s_parse_delay(v, &a->delay_ms) == 0 ? 1 : -1;
    if (k == 8)
        return cli_parse_u64(v, "--port", 1, 65535, &a->port) == 0 ? 1 : -1;
    return cli_parse_u64(v, "--gpu-count", 1, 4096, &a->gpu_count) == 0 ? 1
                                                                        : -1;
}

/* The node options as node 0 gets them, checked: 0, or -1 with diag. */
static int
s_node0_opts(struct s_args *a, rumor_node_config *cfg, struct rumor_diag *diag)
{
    char **argv = a->pass - 1; /* cli_node_parse skips argv[0] */
    if (cli_node_parse((int)a->npass + 1, argv, cfg, diag) != 0)
        return -1;
    if (!rumor_node_config_opts(cfg)->insecure &&
        rumor_node_config_set(cfg, "key", "/run/secrets/node-0", diag) !=
            RUMOR_OK)
        return -1;
    int bad = rumor_node_config_set(cfg, "id", "0", diag) != RUMOR_OK ||
              rumor_node_config_set(cfg, "topology", COMPOSE_TOPOLOGY, diag) !=
                  RUMOR_OK ||
              (rumor_node_opts_known("checkpoint-dir") &&
               rumor_node_config_set(cfg,
                                     "checkpoint-dir",
                                     COMPOSE_CHECKPOINTS,
                                     diag) != RUMOR_OK) ||
              rumor_node_config_check(cfg, diag) != RUMOR_OK;
    return bad ? -1 : 0;
}

/* Checks the node options as node 0 would get them. */
static int
s_check_node_opts(struct s_args *a)
{
    struct rumor_diag diag = {0};
    rumor_node_config *cfg = NULL;
    rumor_err rc = rumor_node_config_new(&cfg);
    if (rc != RUMOR_OK)
        rumor_diag_set(&diag, "", 0, 0, "%s", rumor_strerror(rc));
    int bad = rc != RUMOR_OK || s_node0_opts(a, cfg, &diag) != 0;
    if (!bad)
        a->opts = *rumor_node_config_opts(cfg);
    rumor_node_config_destroy(&cfg);
    if (bad) {
        char text[2 * RUMOR_DIAG_TEXT_BYTES + 32];
        rumor_diag_format(&diag, text, sizeof text);
        fprintf(stderr, "rumor compose: %s\n", text);
    }
    return bad ? -1 : 0;
}

static int
s_parse(int argc, char **argv, struct s_args *a)
{
    a->keys_dir = "keys";
    a->state_dir = "rumor-state";
    a->topo_out = "compose.topo";
    /* a node that finished its steps exits 0: unless-stopped would start
     * it again, resume it from its final checkpoint, and so on forever */
    a->restart = "on-failure";
    a->port = COMPOSE_PORT;
    a->gpu_count = 1;
    for (int i = 1; i < argc; i++) {
        int taken = s_own_option(argc, argv, &i, a);
        if (taken < 0)
            return 2;
        if (taken > 0)
            continue;
        const char *why = s_reserved(argv[i]);
        if (why != NULL) {
            fprintf(stderr, "rumor compose: %s: %s\n", argv[i], why);
            return 2;
        }
        a->pass[a->npass++] = argv[i];
    }
    if (a->topology == NULL) {
        fprintf(stderr, "rumor compose: --topology FILE is required\n");
        return 2;
    }
    if (!s_restart_ok(a->restart)) {
        fprintf(stderr,
                "rumor compose: --restart: expected on-failure, "
                "unless-stopped, always or no, got '%s'\n",
                a->restart);
        return 2;
    }
    if (a->image == NULL)
        a->image = a->gpus ? COMPOSE_IMAGE_CUDA : COMPOSE_IMAGE;
    return s_check_node_opts(a) == 0 ? 0 : 2;
}

/* --- files -------------------------------------------------------------- */

/* Root runs the services as the image's user and hands it the files. */
static int
s_own(const struct s_args *a, const char *path)
{
    if (geteuid() != 0 || chown(path, a->uid, a->gid) == 0)
        return 0;
    fprintf(stderr, "rumor compose: chown %s: %s\n", path, strerror(errno));
    return -1;
}

/* mkdir -p; private (0700) and handed to the services' user when the
 * containers use it, private when it holds keys, as it was otherwise. */
static int
s_mkdir(const struct s_args *a, const char *path, bool mounted, bool secret)
{
    if (node_mkdirs(path) != 0 ||
        ((mounted || secret) && chmod(path, 0700) != 0)) {
        return cli_io_error("compose", path, "cannot create the directory");
    }
    return mounted ? s_own(a, path) : 0;
}

/* Node i's keypair: the existing KEYS/node-i.key (which must match a key
 * the topology lists) or a new one; its public key goes into t. */
static int
s_node_key(const struct s_args *a, rumor_topology *t, size_t i)
{
    char base[PATH_MAX + 32], file[PATH_MAX + 40];
    snprintf(base, sizeof base, "%s/node-%zu", a->keys_abs, i);
    snprintf(file, sizeof file, "%s.key", base);
    const char *listed = rumor_topology_key(t, i);
    rumor_net_keypair *kp = NULL;
    rumor_err rc = rumor_net_keypair_load(base, &kp);
    if (rc == RUMOR_ENOTFOUND && listed != NULL) {
        fprintf(stderr,
                "rumor compose: %s lists a public key for node %zu but %s "
                "is missing\n",
                a->topology,
                i,
                file);
        return -1;
    }
    bool fresh = rc == RUMOR_ENOTFOUND;
    if (fresh) {
        rc = rumor_net_keypair_generate(&kp);
        if (rc == RUMOR_OK)
            rc = rumor_net_keypair_save(kp, base);
    }
    struct rumor_diag diag = {0};
    if (rc == RUMOR_OK && listed != NULL &&
        strcmp(listed, rumor_net_keypair_public(kp)) != 0) {
        rumor_diag_set(&diag, "", 0, 0, "not the key %s lists", a->topology);
        rc = RUMOR_EAUTH;
    }
    if (rc == RUMOR_OK)
        rc = rumor_topology_set_node(t,
                                     i,
                                     NULL,
                                     rumor_net_keypair_public(kp),
                                     &diag);
    rumor_net_keypair_destroy(&kp);
    if (rc != RUMOR_OK) {
        fprintf(stderr,
                "rumor compose: %s: %s\n",
                file,
                diag.msg[0] != '\0' ? diag.msg : rumor_strerror(rc));
        return -1;
    }
    if (fresh)
        fprintf(stderr, "[compose] node %zu: new key %s\n", i, file);
    return s_own(a, file);
}

static int
s_write_topology(struct s_args *a, const rumor_topology *t)
{
    char head[PATH_MAX + 80];
    snprintf(head,
             sizeof head,
             "# written by rumor compose from %s\n",
             a->topology);
    if (cli_topology_write(t, head, a->topo_out, NULL) != 0 ||
        realpath(a->topo_out, a->topo_abs) == NULL)
        return -1;
    return 0;
}

/* Endpoints become service names, keys come from --keys-dir, and the
 * state directories exist: everything the compose file points at. */
static int
s_prepare(struct s_args *a, rumor_topology *t)
{
    bool root = geteuid() == 0;
    a->uid = root ? COMPOSE_IMAGE_UID : (unsigned)getuid();
    a->gid = root ? COMPOSE_IMAGE_UID : (unsigned)getgid();
    size_t n = rumor_topology_nodes(t);
    bool keys = !a->opts.insecure;
    if ((keys && s_mkdir(a, a->keys_dir, false, true) != 0) ||
        s_mkdir(a, a->state_dir, false, false) != 0 ||
        (keys && realpath(a->keys_dir, a->keys_abs) == NULL) ||
        realpath(a->state_dir, a->state_abs) == NULL)
        return -1;
    char path[PATH_MAX + 32];
    snprintf(path, sizeof path, "%s/metrics", a->state_abs);
    if (s_mkdir(a, path, true, false) != 0)
        return -1;
    for (size_t i = 0; i < n; i++) {
        char endpoint[64];
        struct rumor_diag diag = {0};
        snprintf(endpoint, sizeof endpoint, "tcp://node-%zu:%llu", i, a->port);
        snprintf(path, sizeof path, "%s/node-%zu", a->state_abs, i);
        if (rumor_topology_set_node(t, i, endpoint, NULL, &diag) != RUMOR_OK ||
            s_mkdir(a, path, true, false) != 0 ||
            (keys && s_node_key(a, t, i) != 0))
            return -1;
    }
    return s_write_topology(a, t);
}

/* --- YAML --------------------------------------------------------------- */

/* Length of the UTF-8 sequence at s and its code point, 0 when invalid. */
static size_t
s_utf8(const unsigned char *s, uint32_t *cp)
{
    size_t len = s[0] < 0x80         ? 1
                 : (s[0] >> 5) == 6  ? 2
                 : (s[0] >> 4) == 14 ? 3
                 : (s[0] >> 3) == 30 ? 4
                                     : 0;
    static const unsigned char lead_mask[5] = {0, 0x7f, 0x1f, 0x0f, 0x07};
    *cp = s[0] & lead_mask[len];
    for (size_t k = 1; k < len; k++) {
        if ((s[k] & 0xc0) != 0x80)
            return 0;
        *cp = *cp << 6 | (s[k] & 0x3fu);
    }
    static const uint32_t least[5] = {0, 0, 0x80, 0x800, 0x10000};
    if (len == 0 || *cp < least[len] || *cp > 0x10ffff ||
        (*cp >= 0xd800 && *cp <= 0xdfff))
        return 0;
    return len;
}

/* A YAML double-quoted scalar: '"' and '\' escaped, characters YAML
 * does not allow raw as \u escapes, and '$' doubled (compose expands
 * $VAR). Returns -1, writing nothing useful, on invalid UTF-8. */
static int
s_q(FILE *out, const char *text)
{
    const unsigned char *s = (const unsigned char *)text;
    fputc('"', out);
    while (*s != '\0') {
        uint32_t cp = 0;
        size_t len = s_utf8(s, &cp);
        if (len == 0)
            return -1;
        if (cp == '"' || cp == '\\')
            fprintf(out, "\\%c", (int)cp);
        else if (cp == '$')
            fputs("$$", out);
        else if (cp < 0x20 || cp == 0x7f || (cp >= 0x80 && cp < 0xa0) ||
                 cp == 0xfffe || cp == 0xffff || cp == 0xfeff)
            fprintf(out, "\\u%04x", (unsigned)cp);
        else
            fwrite(s, 1, len, out);
        s += len;
    }
    fputc('"', out);
    return 0;
}

/* "KEY: "value"" on its own line at an indent. */
static int
s_kv(FILE *out, int indent, const char *key, const char *value)
{
    fprintf(out, "%*s%s: ", indent, "", key);
    int rc = s_q(out, value);
    fputc('\n', out);
    return rc;
}

static int
s_item(FILE *out, int indent, const char *value)
{
    fprintf(out, "%*s- ", indent, "");
    int rc = s_q(out, value);
    fputc('\n', out);
    return rc;
}

static int
s_bind_mount(FILE *out, const char *source, const char *target, bool ro)
{
    fprintf(out, "      - type: \"bind\"\n");
    int rc = s_kv(out, 8, "source", source);
    rc |= s_kv(out, 8, "target", target);
    if (ro)
        fprintf(out, "        read_only: true\n");
    return rc;
}

/* Whether the user gave node option --NAME. */
static bool
s_passed(const struct s_args *a, const char *name)
{
    size_t len = strlen(name);
    for (size_t k = 0; k < a->npass; k++)
        if (strncmp(a->pass[k], "--", 2) == 0 &&
            strncmp(a->pass[k] + 2, name, len) == 0 &&
            (a->pass[k][2 + len] == '\0' || a->pass[k][2 + len] == '='))
            return true;
    return false;
}

/* A restarted container resumes from its newest checkpoint; the first
 * start has none, and --resume without one is an error, so a shell picks. */
static int
s_entrypoint(FILE *out)
{
    fprintf(out, "    entrypoint:\n");
    int rc = s_item(out, 6, "/bin/sh") | s_item(out, 6, "-c");
    rc |= s_item(out,
                 6,
                 "if ls " COMPOSE_CHECKPOINTS "/node-*.ckpt >/dev/null 2>&1; "
                 "then exec " COMPOSE_RUMOR " \"$@\" --resume; fi; "
                 "exec " COMPOSE_RUMOR " \"$@\"");
    return rc | s_item(out, 6, "rumor");
}

static int
s_command(FILE *out, const struct s_args *a, size_t i)
{
    char id[24], key[64], num[32];
    snprintf(id, sizeof id, "%zu", i);
    snprintf(key, sizeof key, "/run/secrets/node-%zu", i);
    fprintf(out, "    command:\n");
    int rc = s_item(out, 6, "node");
    const char *fixed[] = {"--topology",
                           COMPOSE_TOPOLOGY,
                           "--id",
                           id,
                           "--metrics-dir",
                           COMPOSE_METRICS};
    for (size_t k = 0; k < sizeof fixed / sizeof fixed[0]; k++)
        rc |= s_item(out, 6, fixed[k]);
    if (!a->opts.insecure)
        rc |= s_item(out, 6, "--key") | s_item(out, 6, key);
    if (rumor_node_opts_known("checkpoint-dir"))
        rc |= s_item(out, 6, "--checkpoint-dir") |
              s_item(out, 6, COMPOSE_CHECKPOINTS);
    if (rumor_node_opts_known("checkpoint-every") &&
        !s_passed(a, "checkpoint-every"))
        rc |= s_item(out, 6, "--checkpoint-every") |
              s_item(out, 6, COMPOSE_CHECKPOINT_EVERY);
    if (a->rate_bits > 0) {
        snprintf(num, sizeof num, "%llu", (unsigned long long)a->rate_bits);
        rc |= s_item(out, 6, "--rate") | s_item(out, 6, num);
    }
    if (a->delay_ms > 0) {
        snprintf(num, sizeof num, "%llu", a->delay_ms);
        rc |= s_item(out, 6, "--delay-ms") | s_item(out, 6, num);
    }
    if (a->gpus)
        rc |= s_item(out, 6, "--cuda");
    for (size_t k = 0; k < a->npass; k++)
        rc |= s_item(out, 6, a->pass[k]);
    return rc;
}

static int
s_service(FILE *out, const struct s_args *a, size_t i)
{
    char name[32], user[48], grace[32], path[PATH_MAX + 32];
    snprintf(name, sizeof name, "node-%zu", i);
    snprintf(user, sizeof user, "%u:%u", a->uid, a->gid);
    /* SIGTERM lets the node finish its step, bounded by the deadline */
    snprintf(grace, sizeof grace, "%us", a->opts.deadline_ms / 1000 + 5);
    fprintf(out, "  ");
    int rc = s_q(out, name);
    fprintf(out, ":\n");
    rc |= s_kv(out, 4, "image", a->image);
    if (rumor_node_opts_is_flag("resume"))
        rc |= s_entrypoint(out);
    rc |= s_command(out, a, i);
    rc |= s_kv(out, 4, "user", user);
    fprintf(out, "    init: true\n");
    rc |= s_kv(out, 4, "restart", a->restart);
    rc |= s_kv(out, 4, "stop_grace_period", grace);
    if (!a->opts.insecure)
        fprintf(out,
                "    secrets:\n      - source: \"node-%zu-key\"\n"
                "        target: \"node-%zu.key\"\n",
                i,
                i);
    fprintf(out, "    volumes:\n");
    rc |= s_bind_mount(out, a->topo_abs, COMPOSE_TOPOLOGY, true);
    snprintf(path, sizeof path, "%s/node-%zu", a->state_abs, i);
    rc |= s_bind_mount(out, path, COMPOSE_CHECKPOINTS, false);
    snprintf(path, sizeof path, "%s/metrics", a->state_abs);
    rc |= s_bind_mount(out, path, COMPOSE_METRICS, false);
    if (a->gpus)
        fprintf(out,
                "    deploy:\n      resources:\n        reservations:\n"
                "          devices:\n            - driver: \"nvidia\"\n"
                "              device_ids: [\"%llu\"]\n"
                "              capabilities: [\"gpu\"]\n",
                (unsigned long long)(i % a->gpu_count));
    return rc;
}

static int
s_emit(FILE *out, const struct s_args *a, size_t n)
{
    fprintf(out, "# Written by `rumor compose` for %zu nodes of ", n);
    int rc = s_q(out, a->topology);
    fprintf(out,
            ".\n# Secret keys are docker secrets (files in --keys-dir), "
            "never in an image\n# or an environment variable. Regenerate "
            "rather than edit.\nversion: \"3.8\"\nservices:\n");
    for (size_t i = 0; i < n; i++)
        rc |= s_service(out, a, i);
    if (a->opts.insecure)
        return rc;
    fprintf(out, "secrets:\n");
    for (size_t i = 0; i < n; i++) {
        char path[PATH_MAX + 32];
        snprintf(path, sizeof path, "%s/node-%zu.key", a->keys_abs, i);
        fprintf(out, "  \"node-%zu-key\":\n", i);
        rc |= s_kv(out, 4, "file", path);
    }
    return rc;
}

/* Builds the whole file in memory so a failure prints nothing. */
static int
s_print(const struct s_args *a, size_t n)
{
    char *text = NULL;
    size_t len = 0;
    FILE *mem = open_memstream(&text, &len);
    if (mem == NULL)
        return 1;
    int rc = s_emit(mem, a, n);
    rc |= fclose(mem);
    if (rc != 0) {
        fprintf(stderr,
                "rumor compose: an option or path is not valid UTF-8\n");
        free(text);
        return 2;
    }
    int failed = fwrite(text, 1, len, stdout) != len;
    failed |= fflush(stdout) != 0;
    free(text);
    return failed;
}

int
cli_compose_main(int argc, char **argv)
{
    struct s_args *a = calloc(1, sizeof *a);
    char **pass = calloc((size_t)argc + 2, sizeof *pass);
    if (a == NULL || pass == NULL) {
        free(a);
        free(pass);
        return 1;
    }
    pass[0] = "compose";
    a->pass = pass + 1;
    int status = s_parse(argc, argv, a);
    rumor_topology *t = NULL;
    if (status == 0) {
        struct rumor_diag diag = {0};
        if (rumor_topology_load_file(a->topology, &t, &diag) != RUMOR_OK) {
            char text[2 * RUMOR_DIAG_TEXT_BYTES + 32];
            rumor_diag_format(&diag, text, sizeof text);
            fprintf(stderr, "rumor compose: %s\n", text);
            status = 2;
        }
    }
    if (status == 0 && s_prepare(a, t) != 0)
        status = 1;
    if (status == 0)
        status = s_print(a, rumor_topology_nodes(t));
    if (status == 0)
        fprintf(stderr,
                "[compose] %zu services; topology %s, metrics in "
                "%s/metrics; start with: docker compose up -d\n",
                rumor_topology_nodes(t),
                a->topo_out,
                a->state_dir);
    rumor_topology_destroy(&t);
    free(pass);
    free(a);
    return status;
}
