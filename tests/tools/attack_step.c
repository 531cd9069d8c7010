/*
 * Lies about steps (docs/reliability.md, "Claims from peers"): the
 * attacker's node trains honestly and, from the moment its own gossip
 * reaches step --at=T (header value, from 0), adds or rewrites one field
 * that moves a node that believes it:
 *
 *   gossip-step  one GOSSIP per neighbour claiming step --step=S, in
 *                place of its message of step T (so the neighbour,
 *                waiting for that one, finds the claim)
 *   gossip-stop  every GOSSIP from T on says stop --stop=K (default 1)
 *   sync-step    one SYNC per neighbour saying its next step is --step=S
 *   sync-done    one SYNC with DONE per neighbour, step --step=S (the
 *                run's --steps: "I ran the last step")
 *   state-step   every STATE it sends (to a joiner) says step --step=S
 *
 * Each says what it did on stderr (attack_say), so a test can tell that
 * the lie went out.
 */
#include "attack.h"

#include "node/statesync.h"

#include <string.h>

#define STEP_PEERS_MAX 4096

static uint64_t s_step;     /* the claimed step */
static uint64_t s_at;       /* from the attacker's own step */
static uint64_t s_stop = 1; /* gossip-stop's field */
static bool s_told[STEP_PEERS_MAX];

static int
s_parse(int argc, char **argv)
{
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        bool ok = strncmp(a, "--step=", 7) == 0
                      ? attack_parse_u64("--step", a + 7, &s_step)
                  : strncmp(a, "--at=", 5) == 0
                      ? attack_parse_u64("--at", a + 5, &s_at)
                  : strncmp(a, "--stop=", 7) == 0
                      ? attack_parse_u64("--stop", a + 7, &s_stop)
                      : false;
        if (!ok) {
            attack_say("%s: options --step=S --at=T --stop=K, not '%s'",
                       argv[0],
                       a);
            return -1;
        }
    }
    if (s_stop == 0 || s_stop > UINT32_MAX) {
        attack_say("--stop=%llu: 1 to 2^32 - 1", (unsigned long long)s_stop);
        return -1;
    }
    return 0;
}

/* The first gossip frame of step T or later to f's peer (once each). */
static bool
s_due(const struct attack_frame *f)
{
    if (f->hdr.kind != RUMOR_NET_KIND_GOSSIP || f->hdr.step < s_at ||
        f->peer >= STEP_PEERS_MAX || s_told[f->peer])
        return false;
    s_told[f->peer] = true;
    return true;
}

static bool
s_gossip_step(struct attack_frame *f)
{
    if (!s_due(f))
        return true;
    struct rumor_net_header h = f->hdr;
    h.step = s_step;
    rumor_err rc = attack_send(f->net, f->peer, &h, f->payload, f->len);
    attack_say("gossip-step: told node %u it is at step %llu (own step "
               "%llu): %s",
               f->peer,
               (unsigned long long)s_step,
               (unsigned long long)f->hdr.step,
               rumor_strerror(rc));
    return false;
}

static bool
s_gossip_stop(struct attack_frame *f)
{
    if (f->hdr.kind != RUMOR_NET_KIND_GOSSIP || f->hdr.step < s_at)
        return true;
    if (f->peer < STEP_PEERS_MAX && !s_told[f->peer])
        attack_say("gossip-stop: from step %llu on, node %u hears stop %llu",
                   (unsigned long long)f->hdr.step,
                   f->peer,
                   (unsigned long long)s_stop);
    if (f->peer < STEP_PEERS_MAX)
        s_told[f->peer] = true;
    f->hdr.stop = (uint32_t)s_stop;
    return true;
}

/* One SYNC of flags claiming step s_step to f's peer, beside f. */
static void
s_sync(const struct attack_frame *f, uint32_t flags, const char *name)
{
    struct node_sync s = {.flags = flags, .step = s_step};
    uint8_t buf[NODE_SYNC_BYTES_MAX];
    size_t len = node_sync_encode(&s, buf, sizeof buf);
    struct rumor_net_header h = {.version = f->hdr.version,
                                 .kind = RUMOR_NET_KIND_SYNC,
                                 .sender = f->hdr.sender,
                                 .step = s_step};
    rumor_err rc =
        len > 0 ? attack_send(f->net, f->peer, &h, buf, len) : RUMOR_EINVAL;
    attack_say("%s: sent node %u a SYNC (flags %u) for step %llu (own step "
               "%llu): %s",
               name,
               f->peer,
               flags,
               (unsigned long long)s_step,
               (unsigned long long)f->hdr.step,
               rumor_strerror(rc));
}

static bool
s_sync_step(struct attack_frame *f)
{
    if (s_due(f))
        s_sync(f, 0, "sync-step");
    return true;
}

static bool
s_sync_done(struct attack_frame *f)
{
    if (s_due(f))
        s_sync(f, NODE_SYNC_DONE, "sync-done");
    return true;
}

/* STATE: magic u32, version u32, step u64 (statesync.c). */
static bool
s_state_step(struct attack_frame *f)
{
    if (f->hdr.kind != RUMOR_NET_KIND_STATE || f->len < 16)
        return true;
    uint8_t *p = attack_payload_own(f->payload, f->len);
    if (p == NULL)
        return true;
    for (int b = 0; b < 8; b++)
        p[8 + b] = (uint8_t)(s_step >> (8 * b));
    f->payload = p;
    f->hdr.step = s_step;
    attack_say("state-step: sent node %u a state of step %llu",
               f->peer,
               (unsigned long long)s_step);
    return true;
}

static const struct attack s_attack_gossip_step = {
    .name = "gossip-step",
    .help = "a GOSSIP per neighbour claiming step S for its step T's",
    .parse = s_parse,
    .on_send = s_gossip_step,
};
ATTACK_REGISTER(s_attack_gossip_step)

static const struct attack s_attack_gossip_stop = {
    .name = "gossip-stop",
    .help = "every GOSSIP from T on says stop K (--at=T --stop=K, 1)",
    .parse = s_parse,
    .on_send = s_gossip_stop,
};
ATTACK_REGISTER(s_attack_gossip_stop)

static const struct attack s_attack_sync_step = {
    .name = "sync-step",
    .help = "one SYNC per neighbour saying its next step is S (--step --at)",
    .parse = s_parse,
    .on_send = s_sync_step,
};
ATTACK_REGISTER(s_attack_sync_step)

static const struct attack s_attack_sync_done = {
    .name = "sync-done",
    .help = "one SYNC with DONE per neighbour, step S (--step=S --at=T)",
    .parse = s_parse,
    .on_send = s_sync_done,
};
ATTACK_REGISTER(s_attack_sync_done)

static const struct attack s_attack_state_step = {
    .name = "state-step",
    .help = "every STATE it sends (to a joiner) says step S (--step=S)",
    .parse = s_parse,
    .on_send = s_state_step,
};
ATTACK_REGISTER(s_attack_state_step)
