/*
 * Private to gossip/: one tensor's error-feedback memory stepped through
 * a backend table (gossip/backend.h), the steps the compressed all-reduce
 * (allreduce_codec.c) and local SGD's compressed deltas (localsgd.c)
 * share: the residual e = p - C(p) of the bytes sent, and DGC's memory
 * (rumor_ef_dgc) in errfb.c's s_dgc_encode's roundings. The caller owns
 * every vector; what crosses PCIe is added to its counters, on a device
 * only (host memory copies nothing across).
 */
#ifndef RUMOR_GOSSIP_EF_TABLE_H
#define RUMOR_GOSSIP_EF_TABLE_H

#include "gossip/backend.h"

struct gossip_ef_mem {
    const struct gossip_backend_i *be;
    const rumor_codec *codec;
    float *e;        /* the residual, n floats, be's memory */
    uint64_t *steps; /* the memory's successful steps (rumor_ef_steps) */
    rumor_ef *dgc;   /* dgc: its parameters; or NULL */
    float *u, *un;   /* dgc: u and u', n floats each, be's memory */
    uint64_t *pcie_h2d, *pcie_d2h; /* bytes, added to */
};

/* e = p + -1 C(p), C(p) decoded from pay (len bytes, this node's own
 * payload of n elements); *steps counts it. */
rumor_err gossip_ef_residual(const struct gossip_ef_mem *m,
                             const float *p,
                             size_t n,
                             const uint8_t *pay,
                             size_t len);

/* x's payload (n elements) through m's dgc memory into out (cap bytes,
 * *len written): the clip's scale of x, u' into un and v = e + u' into
 * v (which may be x), v's payload (the warm-up's count while it lasts),
 * u = u' but 0 at the payload's own index list, then gossip_ef_residual
 * of v. The memory changes only once the payload is made. */
rumor_err gossip_ef_dgc_encode(const struct gossip_ef_mem *m,
                               float *v,
                               const float *x,
                               size_t n,
                               uint64_t seed,
                               uint64_t step,
                               uint8_t *out,
                               size_t cap,
                               size_t *len);

#endif
