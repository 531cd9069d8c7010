/*
 * rumor-attack: an insider for the trust tests (docs/reliability.md,
 * "Trust"). It holds a listed node's key and either runs that node for
 * real while rewriting, dropping or adding the frames it sends (a
 * compromised participant), or speaks to a node's ROUTER on its own (a
 * stolen key). Each attack lives in its own tests/tools/attack_*.c and
 * registers itself with ATTACK_REGISTER; attack.c holds what they share.
 *
 *   rumor-attack NAME [ATTACK-OPTIONS] -- [--NODE-OPTION=VALUE | --FLAG]...
 *
 * Node options take the `rumor node` names (--name=value or a bare flag);
 * the node is the attacker's identity (--id, --key, --topology).
 */
#ifndef RUMOR_TESTS_ATTACK_H
#define RUMOR_TESTS_ATTACK_H

#include <rumor/core.h>
#include <rumor/net.h>
#include <rumor/node.h>

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* One frame the attacker's node is about to send. An on_send hook may
 * rewrite the header and the payload (replace *payload with memory it
 * owns until the next call; attack_payload_own helps), or drop it. */
struct attack_frame {
    rumor_net *net;
    uint32_t peer;
    struct rumor_net_header hdr;
    const void *payload;
    size_t len;
};

struct attack {
    const char *name;
    const char *help; /* one line: what it forges, and its options */
    /* Parses the attack's own options (argv[0] is NAME); 0, or -1 after a
     * message on stderr. NULL: it takes none. */
    int (*parse)(int argc, char **argv);
    /* Runs the node (node options after --) and calls on_send for each of
     * its frames: true sends the (possibly rewritten) frame, false drops
     * it. May send more frames itself through attack_send. */
    bool (*on_send)(struct attack_frame *f);
    /* Instead of a node: the whole attack, given the node options already
     * parsed (keys, topology); returns the exit status. */
    int (*run)(const struct rumor_node_opts *opts);
};

/* Makes a registered attack known to main (at most ATTACK_MAX). */
void attack_register(const struct attack *a);
#define ATTACK_MAX 64
#define ATTACK_REGISTER(a)                                        \
    __attribute__((constructor)) static void s_register_##a(void) \
    {                                                             \
        attack_register(&(a));                                    \
    }

/* Sends a frame of the attacker's own past the on_send hook. */
rumor_err attack_send(rumor_net *net,
                      uint32_t peer,
                      const struct rumor_net_header *h,
                      const void *payload,
                      size_t len);

/* A copy of len bytes the hook may rewrite, valid until the next call
 * (NULL when out of memory). */
uint8_t *attack_payload_own(const void *payload, size_t len);

/* Parses an unsigned decimal or 0x hex option value; false (after a
 * message naming opt) when it is not one. */
bool attack_parse_u64(const char *opt, const char *text, uint64_t *out);

/* Writes one line to stderr prefixed "rumor-attack: ", so a test reading
 * the attacker's output can tell what it did and when. */
void attack_say(const char *fmt, ...) RUMOR_PRINTF(1, 2);

#endif
