/*
 * Private to gossip/: the neighbourhood form of step-ahead error feedback
 * (saef.c), used by localsgd's compressed-delta path. Each node sends its
 * compression error e_i, compressed, to the neighbours of the step's
 * phase; each node then forms e_bar_i = sum_{j in N(i) + i} w_ij e_j
 * from what it received (a missing neighbour's weight goes to the self
 * term) and looks ahead by alpha * e_bar_i instead of alpha * e_i.
 */
#ifndef RUMOR_GOSSIP_SAEF_H
#define RUMOR_GOSSIP_SAEF_H

#include "gossip/gossip_impl.h"

struct gossip_saef {
    bool neighbourhood; /* scope: false = each node's own error */
    rumor_codec *codec; /* the error's codec (neighbourhood only) */
    uint8_t *buf;       /* own encoded error */
    size_t len, cap;
    /* in the model's memory (g->be): */
    float *ebar;    /* e_bar of each range's last sync, numel */
    float *scratch; /* one decoded error, numel */
    double *acc;    /* the weighted sum being formed, numel */
    /* payload bytes the error's codec moved to and from a device */
    uint64_t pcie_h2d, pcie_d2h;
    const struct rumor_gossip_msg **slot;
    uint32_t *peers; /* the error round's, nodes slots */
};

/* Parses opts.saef_scope ("" or "self", "neighbourhood",
 * "neighbourhood:CODEC"; the codec defaults to delta_codec) and, for the
 * neighbourhood scope with a delta codec, allocates the exchange.
 * RUMOR_EINVAL with diag for a bad scope or codec. */
rumor_err gossip_saef_init(struct gossip_saef *s,
                           const rumor_gossip *g,
                           struct rumor_diag *diag);
void gossip_saef_free(struct gossip_saef *s, const rumor_gossip *g);

/* True when a compressed sync ends with the error round: neighbourhood
 * scope and alpha > 0 (alpha 0 never looks ahead, so nothing is sent). */
bool gossip_saef_exchanges(const struct gossip_saef *s, const rumor_gossip *g);

/* The error round's messages: C(e) of the own error e (n floats of g->be's
 * memory: the syncing fragment's, localsgd.c) to every neighbour of the step's
 * phase that is a member of g's ring. */
rumor_err gossip_saef_emit(struct gossip_saef *s,
                           rumor_gossip *g,
                           uint64_t step,
                           const float *e,
                           size_t n);

/* The error round's senders: the neighbours of the step's phase that are
 * members of g's ring (all of them unless rumor_gossip_members_set chose
 * fewer), the first cap into peers; returns how many. */
size_t gossip_saef_expected(const rumor_gossip *g,
                            uint64_t step,
                            uint32_t *peers,
                            size_t cap);

/* Forms ebar[off, off + n) from the own error e (n floats of g->be's memory)
 * and the neighbours' messages. A neighbour whose message is missing gives its
 * weight to the self term (RUMOR_OK). An unexpected or duplicate sender,
 * or a payload that does not decode, is RUMOR_EPROTO / RUMOR_ENUMERIC and
 * leaves no e_bar (ebar unwritten; the caller, which keeps whether each
 * range's e_bar belongs to its last sync, marks it missing): the next
 * look-ahead falls back to the own error. */
rumor_err gossip_saef_absorb(struct gossip_saef *s,
                             const rumor_gossip *g,
                             uint64_t step,
                             const float *e,
                             size_t off,
                             size_t n,
                             const struct rumor_gossip_msg *msgs,
                             size_t count);

#endif
