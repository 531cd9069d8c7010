/*
 * A diverged run stops with one message that names what controls it
 * (issue 18: runs printed "loss inf" and went on, or failed with a bare
 * "numeric error"). Shared by the node runtime and `rumor sim train`.
 *
 * Diverged: a non-finite loss, or one above NODE_DIVERGE_FACTOR times the
 * first step's (for a node, the initial model's at step 0, also after
 * --resume or --join). A run whose steps are too large grows geometrically and
 * passes that a few steps before it overflows; a run that recovers stays
 * far below it: a poisoned neighbour clipped by --clip-norm 50 lifts a
 * least-squares loss to 180 times its first value for a few steps
 * (tests/integration/test_node_faults.c), and a cross-entropy loss that
 * starts near ln(classes) is 10^4 times that only when the logits are.
 */
#include "node/runtime_impl.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#define NODE_DIVERGE_FACTOR 1e4

bool
node_diverged(double loss, double first_loss)
{
    if (!isfinite(loss))
        return true;
    return isfinite(first_loss) && first_loss > 0 &&
           loss > NODE_DIVERGE_FACTOR * first_loss;
}

static bool
s_is(const char *algo, const char *a, const char *b)
{
    return strcmp(algo, a) == 0 || (b != NULL && strcmp(algo, b) == 0);
}

void
node_diverge_message(const struct rumor_gossip_opts *g,
                     double gamma,
                     double lr,
                     uint64_t step,
                     double loss,
                     char *buf,
                     size_t cap)
{
    const char *algo = g->algo;
    bool has_gamma = s_is(algo, "dpsgd", "choco") ||
                     s_is(algo, "deepsqueeze", "moniqua") ||
                     s_is(algo, "powergossip", NULL);
    char gamma_text[64] = "", more[RUMOR_COMPRESS_SPEC_MAX + 48] = "";
    if (has_gamma)
        snprintf(gamma_text,
                 sizeof gamma_text,
                 "--gamma %.4g%s, ",
                 gamma,
                 g->gamma == RUMOR_GOSSIP_GAMMA_AUTO ? " (auto)" : "");
    if (s_is(algo, "choco", "deepsqueeze"))
        snprintf(more, sizeof more, ", --codec %s", g->codec);
    else if (s_is(algo, "moniqua", NULL))
        snprintf(more, sizeof more, ", --theta %g", g->theta);
    char lr_text[48] = "the learning rate";
    char what[64] = "the model is no longer finite";
    if (lr >= 0)
        snprintf(lr_text, sizeof lr_text, "--lr %g", lr);
    if (!isnan(loss))
        snprintf(what, sizeof what, "the loss is %g", loss);
    snprintf(buf,
             cap,
             "step %llu: %s: training diverged. With --algo %s "
             "it is set by %s%s%s: lower %s%s%s (docs/gossip.md, "
             "\"Defaults\")",
             (unsigned long long)step,
             what,
             algo,
             gamma_text,
             lr_text,
             more,
             has_gamma ? "--gamma or " : "",
             lr >= 0 ? "--lr" : "the learning rate",
             s_is(algo, "choco", "deepsqueeze") ? ", or use a finer --codec"
                                                : "");
}
