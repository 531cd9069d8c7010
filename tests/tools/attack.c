/*
 * rumor-attack's shared part: the attack registry, the node run as the
 * attacker's identity, and the hook on every frame that node sends. The
 * tool is linked with -Wl,--wrap=rumor_net_send (Makefile), so the node's
 * own code sends through s_hook without knowing it is one.
 */
#include "attack.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

rumor_err __real_rumor_net_send(rumor_net *net,
                                uint32_t peer,
                                const struct rumor_net_header *h,
                                const void *payload,
                                size_t len,
                                uint64_t deadline_ns);
rumor_err __wrap_rumor_net_send(rumor_net *net,
                                uint32_t peer,
                                const struct rumor_net_header *h,
                                const void *payload,
                                size_t len,
                                uint64_t deadline_ns);

static const struct attack *s_attacks[ATTACK_MAX];
static size_t s_nattacks;
static const struct attack *s_active;
/* The node sends from more than one thread (the elastic ring's); a hook
 * sees one frame at a time and need not lock its own counters. */
static pthread_mutex_t s_hook_lock = PTHREAD_MUTEX_INITIALIZER;

void
attack_register(const struct attack *a)
{
    if (s_nattacks < ATTACK_MAX)
        s_attacks[s_nattacks++] = a;
}

void
attack_say(const char *fmt, ...)
{
    char line[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    fprintf(stderr, "rumor-attack: %s\n", line);
}

bool
attack_parse_u64(const char *opt, const char *text, uint64_t *out)
{
    char *end = NULL;
    unsigned long long v = strtoull(text, &end, 0);
    if (text[0] == '\0' || text[0] == '-' || *end != '\0') {
        attack_say("%s wants an unsigned number, not '%s'", opt, text);
        return false;
    }
    *out = v;
    return true;
}

uint8_t *
attack_payload_own(const void *payload, size_t len)
{
    static _Thread_local uint8_t *copy;
    static _Thread_local size_t cap;
    if (len > cap) {
        uint8_t *grown = realloc(copy, len);
        if (grown == NULL)
            return NULL;
        copy = grown;
        cap = len;
    }
    if (len > 0)
        memcpy(copy, payload, len);
    return copy;
}

rumor_err
attack_send(rumor_net *net,
            uint32_t peer,
            const struct rumor_net_header *h,
            const void *payload,
            size_t len)
{
    const uint64_t two_seconds = 2000000000ull;
    return __real_rumor_net_send(net,
                                 peer,
                                 h,
                                 payload,
                                 len,
                                 rumor_clock_ns() + two_seconds);
}

rumor_err
__wrap_rumor_net_send(rumor_net *net,
                      uint32_t peer,
                      const struct rumor_net_header *h,
                      const void *payload,
                      size_t len,
                      uint64_t deadline_ns)
{
    if (s_active == NULL || s_active->on_send == NULL)
        return __real_rumor_net_send(net, peer, h, payload, len, deadline_ns);
    struct attack_frame f = {net, peer, *h, payload, len};
    pthread_mutex_lock(&s_hook_lock);
    bool send = s_active->on_send(&f);
    pthread_mutex_unlock(&s_hook_lock);
    if (!send)
        return RUMOR_OK; /* the node believes it went */
    return __real_rumor_net_send(f.net,
                                 f.peer,
                                 &f.hdr,
                                 f.payload,
                                 f.len,
                                 deadline_ns);
}

static void
s_usage(FILE *out)
{
    fprintf(out,
            "usage: rumor-attack NAME [OPTIONS] -- [--NODE-OPTION=VALUE]...\n"
            "attacks:\n");
    for (size_t i = 0; i < s_nattacks; i++)
        fprintf(out, "  %-20s %s\n", s_attacks[i]->name, s_attacks[i]->help);
}

static const struct attack *
s_find(const char *name)
{
    for (size_t i = 0; i < s_nattacks; i++)
        if (strcmp(s_attacks[i]->name, name) == 0)
            return s_attacks[i];
    return NULL;
}

/* One `--name=value` or `--flag` node option into cfg. */
static rumor_err
s_node_option(rumor_node_config *cfg, const char *arg, struct rumor_diag *diag)
{
    if (strncmp(arg, "--", 2) != 0) {
        rumor_diag_set(diag, "", 0, 0, "unexpected argument '%s'", arg);
        return RUMOR_EINVAL;
    }
    char name[64];
    const char *eq = strchr(arg + 2, '=');
    size_t len = eq != NULL ? (size_t)(eq - arg - 2) : strlen(arg + 2);
    if (len >= sizeof name) {
        rumor_diag_set(diag, "", 0, 0, "unknown option %s", arg);
        return RUMOR_EINVAL;
    }
    memcpy(name, arg + 2, len);
    name[len] = '\0';
    if (eq == NULL && !rumor_node_opts_is_flag(name)) {
        rumor_diag_set(diag, "", 0, 0, "write %s=VALUE", arg);
        return RUMOR_EINVAL;
    }
    if (strcmp(name, "config") == 0)
        return rumor_node_config_load(cfg, eq + 1, diag);
    return rumor_node_config_set(cfg, name, eq != NULL ? eq + 1 : "", diag);
}

static rumor_err
s_node_opts(int argc,
            char **argv,
            rumor_node_config *cfg,
            struct rumor_diag *diag)
{
    for (int i = 0; i < argc; i++) {
        rumor_err rc = s_node_option(cfg, argv[i], diag);
        if (rc != RUMOR_OK)
            return rc;
    }
    return rumor_node_config_check(cfg, diag);
}

static int
s_fail(const struct rumor_diag *diag, rumor_err rc)
{
    char text[2 * RUMOR_DIAG_TEXT_BYTES + 32];
    if (diag->msg[0] != '\0')
        rumor_diag_format(diag, text, sizeof text);
    else
        snprintf(text, sizeof text, "%s", rumor_strerror(rc));
    attack_say("%s", text);
    return 1;
}

static int
s_run_node(const struct rumor_node_opts *opts)
{
    struct rumor_diag diag = {0};
    rumor_node *node = NULL;
    rumor_err rc = rumor_node_new(opts, &node, &diag);
    if (rc == RUMOR_OK)
        rc = rumor_node_run(node, &diag);
    rumor_node_destroy(&node);
    if (rc != RUMOR_OK)
        return s_fail(&diag, rc);
    attack_say("node finished");
    return 0;
}

int
main(int argc, char **argv)
{
    if (argc < 2 || strcmp(argv[1], "--help") == 0) {
        s_usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    const struct attack *a = s_find(argv[1]);
    if (a == NULL) {
        attack_say("no attack named '%s'", argv[1]);
        s_usage(stderr);
        return 2;
    }
    int sep = 2;
    while (sep < argc && strcmp(argv[sep], "--") != 0)
        sep++;
    if (a->parse != NULL ? a->parse(sep - 1, argv + 1) != 0 : sep != 2) {
        if (a->parse == NULL)
            attack_say("%s takes no options", a->name);
        return 2;
    }
    rumor_node_config *cfg = NULL;
    struct rumor_diag diag = {0};
    rumor_err rc = rumor_node_config_new(&cfg);
    if (rc == RUMOR_OK && sep < argc)
        rc = s_node_opts(argc - sep - 1, argv + sep + 1, cfg, &diag);
    else if (rc == RUMOR_OK)
        rc = rumor_node_config_check(cfg, &diag);
    if (rc != RUMOR_OK) {
        rumor_node_config_destroy(&cfg);
        return s_fail(&diag, rc);
    }
    struct rumor_node_opts opts = *rumor_node_config_opts(cfg);
    s_active = a;
    int status = a->run != NULL ? a->run(&opts) : s_run_node(&opts);
    rumor_node_config_destroy(&cfg);
    return status;
}
