/*
 * Membership and state forgeries (issue 33; docs/reliability.md, "Elastic
 * rings": what a listed attacker can and cannot do). The attacker's node
 * runs for real; once one of its frames is of step --at or later it adds
 * its forgery, signed with its own key, the only one it holds:
 *
 *   forged-commit --at=S --members=LIST --to=LIST [--epoch=E]
 *       a COMMIT of epoch E (default 1) whose members are LIST (node 0's
 *       incarnations), carrying the attacker's own vote, to each of --to;
 *   forged-join --at=S --victim=V --to=LIST
 *       a JOIN_FWD naming live node V with a new incarnation, to each of
 *       --to (the lowest member acts on it);
 *   state-poison [--value=X] [--step=N] [--to=LIST]
 *       rewrites every STATE it sends (to the nodes of --to only, when
 *       given): each model value X, or the state's step N (2^62, say), in
 *       the payload and the frame header.
 *
 * The tool says on stderr what it sent, so a test can wait for it.
 */
#include "attack.h"

#include "node/membership.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

#define LIST_MAX 64

static uint64_t s_at, s_epoch = 1, s_victim, s_step;
static uint32_t s_members[LIST_MAX], s_to[LIST_MAX];
static size_t s_nmembers, s_nto;
static double s_value;
static bool s_has_value, s_has_step, s_done;
static rumor_net_keypair *s_keys;
static uint32_t s_self;
static struct node_member_msg s_msg;
static uint8_t s_buf[NODE_MEMBER_MSG_MAX];

/* "A,B,C" into ids (ascending as given). */
static bool
s_parse_list(const char *opt, const char *text, uint32_t *ids, size_t *n)
{
    *n = 0;
    while (*text != '\0' && *n < LIST_MAX) {
        char *end = NULL;
        unsigned long v = strtoul(text, &end, 10);
        if (end == text || (*end != ',' && *end != '\0')) {
            attack_say("%s wants ids like 0,3, not '%s'", opt, text);
            return false;
        }
        ids[(*n)++] = (uint32_t)v;
        text = *end == ',' ? end + 1 : end;
    }
    return *n > 0;
}

static bool
s_parse_double(const char *text, double *out)
{
    char *end = NULL;
    *out = strtod(text, &end);
    if (end != text && *end == '\0')
        return true;
    attack_say("--value wants a number, not '%s'", text);
    return false;
}

static int
s_parse(int argc, char **argv)
{
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = strchr(a, '=');
        v = v != NULL ? v + 1 : "";
        bool ok = true;
        if (strncmp(a, "--at=", 5) == 0)
            ok = attack_parse_u64("--at", v, &s_at);
        else if (strncmp(a, "--epoch=", 8) == 0)
            ok = attack_parse_u64("--epoch", v, &s_epoch);
        else if (strncmp(a, "--victim=", 9) == 0)
            ok = attack_parse_u64("--victim", v, &s_victim);
        else if (strncmp(a, "--step=", 7) == 0)
            ok = s_has_step = attack_parse_u64("--step", v, &s_step);
        else if (strncmp(a, "--value=", 8) == 0)
            ok = s_has_value = s_parse_double(v, &s_value);
        else if (strncmp(a, "--members=", 10) == 0)
            ok = s_parse_list("--members", v, s_members, &s_nmembers);
        else if (strncmp(a, "--to=", 5) == 0)
            ok = s_parse_list("--to", v, s_to, &s_nto);
        else {
            attack_say("unknown option '%s'", a);
            ok = false;
        }
        if (!ok)
            return -1;
    }
    return 0;
}

/* The node, with the attacker's key at hand for its signatures. */
static int
s_run(const struct rumor_node_opts *opts)
{
    s_self = opts->id;
    rumor_err rc = rumor_net_keypair_load(opts->key, &s_keys);
    struct rumor_diag diag = {0};
    rumor_node *node = NULL;
    if (rc == RUMOR_OK)
        rc = rumor_node_new(opts, &node, &diag);
    if (rc == RUMOR_OK)
        rc = rumor_node_run(node, &diag);
    rumor_node_destroy(&node);
    rumor_net_keypair_destroy(&s_keys);
    if (rc != RUMOR_OK) {
        attack_say("node: %s %s", rumor_strerror(rc), diag.msg);
        return 1;
    }
    attack_say("node finished");
    return 0;
}

static void
s_send_member(rumor_net *net, size_t len, const char *what)
{
    struct rumor_net_header h = {.kind = RUMOR_NET_KIND_MEMBER};
    for (size_t k = 0; k < s_nto; k++) {
        rumor_err rc = attack_send(net, s_to[k], &h, s_buf, len);
        attack_say("sent %s to node %u: %s", what, s_to[k], rumor_strerror(rc));
    }
}

/* A COMMIT that leaves out every node not in --members, with the one vote
 * the attacker can sign: its own. */
static void
s_forge_commit(rumor_net *net, uint64_t step)
{
    memset(&s_msg, 0, sizeof s_msg);
    s_msg.type = NODE_MEMBER_COMMIT;
    s_msg.epoch = s_epoch;
    struct node_member_view *v = &s_msg.value;
    v->epoch = s_epoch;
    v->step = step;
    v->fate = NODE_MEMBER_DROP;
    v->holder = s_members[0];
    v->count = (uint32_t)s_nmembers;
    for (size_t k = 0; k < s_nmembers; k++)
        v->members[k] = (struct node_member_entry){s_members[k], false, 0};
    s_msg.cert.ballot = (struct node_member_ballot){1, s_self};
    s_msg.cert.count = 1;
    s_msg.cert.votes[0].id = s_self;
    uint8_t stmt[NODE_MEMBER_STATEMENT_MAX];
    size_t n = node_member_vote_statement(s_epoch, s_msg.cert.ballot, v, stmt);
    rumor_net_keypair_sign(s_keys, stmt, n, s_msg.cert.votes[0].sig);
    s_send_member(net,
                  node_member_encode(&s_msg, s_buf, sizeof s_buf),
                  "a forged COMMIT");
}

/* A JOIN_FWD in the victim's name, with a new incarnation and the
 * attacker's signature (the victim's it cannot make). */
static void
s_forge_join(rumor_net *net)
{
    memset(&s_msg, 0, sizeof s_msg);
    s_msg.type = NODE_MEMBER_JOIN_FWD;
    s_msg.joiner = (uint32_t)s_victim;
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    s_msg.inc = (uint64_t)now.tv_sec * 1000000u + 1;
    uint8_t stmt[NODE_MEMBER_STATEMENT_MAX];
    size_t n = node_member_join_statement(s_msg.joiner, s_msg.inc, stmt);
    rumor_net_keypair_sign(s_keys, stmt, n, s_msg.sig);
    s_send_member(net,
                  node_member_encode(&s_msg, s_buf, sizeof s_buf),
                  "a forged JOIN");
}

static bool
s_member_hook(struct attack_frame *f, bool commit)
{
    if (s_done || f->hdr.kind == RUMOR_NET_KIND_MEMBER || f->hdr.step < s_at)
        return true;
    s_done = true;
    if (commit)
        s_forge_commit(f->net, f->hdr.step);
    else
        s_forge_join(f->net);
    return true;
}

static bool
s_commit_hook(struct attack_frame *f)
{
    return s_member_hook(f, true);
}

static bool
s_join_hook(struct attack_frame *f)
{
    return s_member_hook(f, false);
}

/* STATE (docs/protocol.md): magic, version, step at 8, tensor count at
 * 16, and from version 2 the epoch, then per tensor its element count and
 * float32 values. */
static bool
s_state_hook(struct attack_frame *f)
{
    bool target = s_nto == 0;
    for (size_t k = 0; k < s_nto; k++)
        target |= s_to[k] == f->peer;
    if (f->hdr.kind != RUMOR_NET_KIND_STATE || f->len < 32 || !target)
        return true;
    uint8_t *p = attack_payload_own(f->payload, f->len);
    if (p == NULL)
        return true;
    uint32_t version = (uint32_t)p[4];
    size_t at = version >= 2 ? 32 : 24;
    uint64_t count = 0;
    memcpy(&count, p + 16, 8);
    for (uint64_t t = 0; s_has_value && t < count && at + 8 <= f->len; t++) {
        uint64_t n = 0;
        memcpy(&n, p + at, 8);
        at += 8;
        float x = (float)s_value;
        for (uint64_t e = 0; e < n && at + 4 <= f->len; e++, at += 4)
            memcpy(p + at, &x, 4);
    }
    if (s_has_step) {
        memcpy(p + 8, &s_step, 8);
        f->hdr.step = s_step;
    }
    f->payload = p;
    attack_say("sent node %u a poisoned STATE", f->peer);
    return true;
}

static const struct attack s_commit = {
    .name = "forged-commit",
    .help = "--at=S --members=LIST --to=LIST [--epoch=E]: a COMMIT with "
            "its own vote only",
    .parse = s_parse,
    .on_send = s_commit_hook,
    .run = s_run,
};
ATTACK_REGISTER(s_commit)

static const struct attack s_join = {
    .name = "forged-join",
    .help = "--at=S --victim=V --to=LIST: a JOIN in live node V's name",
    .parse = s_parse,
    .on_send = s_join_hook,
    .run = s_run,
};
ATTACK_REGISTER(s_join)

static const struct attack s_state = {
    .name = "state-poison",
    .help = "[--value=X] [--step=N] [--to=LIST]: every STATE it sends (to "
            "LIST) rewritten",
    .parse = s_parse,
    .on_send = s_state_hook,
    .run = s_run,
};
ATTACK_REGISTER(s_state)
