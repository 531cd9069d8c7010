/*
 * gossip, part 4 of 6 (include rumor/gossip.h): the adaptive compression
 * controller (opts.adapt; docs/adaptive.md): the link and compute
 * measurements the drivers feed it and what it reports.
 */
#ifndef RUMOR_PUBLIC_GOSSIP_ADAPT_H
#define RUMOR_PUBLIC_GOSSIP_ADAPT_H

#include "rumor/gossip/instance.h"

/* --- adaptive compression (issue #12, docs/adaptive.md) ---------------- */

/* Feeds one link measurement: the message of peer in some round arrived
 * elapsed_ns after this node sent its own message of that round, and
 * carried recv_bytes payload bytes. The drivers call it (no probes: the
 * gossip traffic itself is measured). A no-op without opts.adapt or for a
 * peer that is not a neighbour. */
RUMOR_API void rumor_gossip_link_observe(rumor_gossip *g,
                                         uint32_t peer,
                                         uint64_t recv_bytes,
                                         uint64_t elapsed_ns);

/* Feeds the compute time of one training step (the part of the step that
 * is not communication): with opts.comm_share it sets the time the link
 * budgets aim for. A no-op without opts.adapt. */
RUMOR_API void rumor_gossip_compute_observe(rumor_gossip *g,
                                            uint64_t compute_ns);

/* One link's view, as of the last emit. */
struct rumor_gossip_link_report {
    uint32_t peer;
    double rate_bytes_s; /* estimated throughput (0: no sample yet) */
    double rtt_s;        /* smallest send-to-reply time in the window */
    uint64_t budget;     /* payload bytes the last message aimed for */
    uint64_t bytes;      /* payload bytes of the last message */
};

/* The links (one per neighbour) into out[0..cap); returns how many there
 * are (0 without opts.adapt). */
RUMOR_API size_t rumor_gossip_adapt_links(const rumor_gossip *g,
                                          struct rumor_gossip_link_report *out,
                                          size_t cap);

/* One layer of the last message on a link. */
struct rumor_gossip_layer_report {
    size_t n;         /* elements of the layer */
    size_t k;         /* elements sent (n: dense) */
    unsigned bits;    /* quantizer bits (32: float32 values; 0: the fixed
                         controller's codec as configured) */
    double rel_error; /* ||v - C(v)|| / ||v|| of that message */
};

/* The layers of the last message sent on link index `link` (an index
 * into rumor_gossip_adapt_links' order) into out[0..cap); returns the
 * layer count (0 without opts.adapt or for a bad index). */
RUMOR_API size_t
rumor_gossip_adapt_layers(const rumor_gossip *g,
                          size_t link,
                          struct rumor_gossip_layer_report *out,
                          size_t cap);

/* PowerSGD's rank under opts.adapt (docs/adaptive.md): "rule" picks it
 * every step from the relative approximation error
 * sqrt(sum ||M - P Q^T||^2 / sum ||M||^2) summed over every node (the
 * sums ride with P, so every node picks the same rank); "fixed" keeps
 * opts.rank and reports this node's own error. */
struct rumor_gossip_rank_report {
    size_t rank;      /* the rank of the next step */
    double rel_error; /* the last error seen (< 0: none yet) */
    uint64_t changes; /* rank changes so far */
};

/* Fills *out and returns true for powersgd with opts.adapt; false (out
 * untouched) otherwise. */
RUMOR_API bool rumor_gossip_adapt_rank(const rumor_gossip *g,
                                       struct rumor_gossip_rank_report *out);

#endif /* RUMOR_PUBLIC_GOSSIP_ADAPT_H */
