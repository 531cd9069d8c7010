/*
 * A poisoned model (issue 33, robust mixing): the attacker's node runs
 * D-PSGD for real, and from step --from on rewrites --count of its GOSSIP
 * frames so that every float32 of the payload is --value (default 1e30):
 * well-formed frames, on the right connection, with the right sequence
 * numbers, of a model no honest node would send.
 *
 *   gossip-huge  --from=STEP (default 20) --count=N frames (default 20)
 *                --value=V (default 1e30)
 *
 * Says on stderr each frame it rewrote (step and receiver).
 */
#include "attack.h"

#include <stdlib.h>
#include <string.h>

static uint64_t s_from = 20;
static uint64_t s_count = 20;
static float s_value = 1e30f;
static uint64_t s_done;

static int
s_parse(int argc, char **argv)
{
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strncmp(a, "--value=", 8) == 0) {
            char *end = NULL;
            s_value = strtof(a + 8, &end);
            if (end == a + 8 || *end != '\0') {
                attack_say("%s: not a number", a);
                return -1;
            }
        } else if (strncmp(a, "--from=", 7) == 0) {
            if (!attack_parse_u64("--from", a + 7, &s_from))
                return -1;
        } else if (strncmp(a, "--count=", 8) == 0) {
            if (!attack_parse_u64("--count", a + 8, &s_count))
                return -1;
        } else {
            attack_say("unknown option %s", a);
            return -1;
        }
    }
    return 0;
}

static bool
s_on_send(struct attack_frame *f)
{
    if (f->hdr.kind != RUMOR_NET_KIND_GOSSIP || f->hdr.step < s_from ||
        s_done >= s_count || f->len % sizeof(float) != 0)
        return true;
    uint8_t *p = attack_payload_own(f->payload, f->len);
    if (p == NULL)
        return true;
    for (size_t e = 0; e < f->len / sizeof(float); e++)
        memcpy(p + e * sizeof(float), &s_value, sizeof(float));
    f->payload = p;
    s_done++;
    attack_say("GOSSIP step %llu to %u: %zu floats of %g (%llu of %llu)",
               (unsigned long long)f->hdr.step,
               f->peer,
               f->len / sizeof(float),
               (double)s_value,
               (unsigned long long)s_done,
               (unsigned long long)s_count);
    return true;
}

static const struct attack s_gossip_huge = {
    .name = "gossip-huge",
    .help = "D-PSGD whose GOSSIP frames from --from (20) carry --value "
            "(1e30) everywhere, --count (20) of them",
    .parse = s_parse,
    .on_send = s_on_send,
};
ATTACK_REGISTER(s_gossip_huge)
