/*
 * The baseline: the attacker's node runs unchanged, so a test can tell
 * what an attack did from what the tool itself does.
 */
#include "attack.h"

static const struct attack s_honest = {
    .name = "honest",
    .help = "runs the node unchanged (the baseline of every attack)",
};
ATTACK_REGISTER(s_honest)
