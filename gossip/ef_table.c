/*
 * An error-feedback memory through a backend table (gossip/ef_table.h).
 *
 * The residual is p with the payload decode-added at -1, not p minus a
 * decode into zeros: a device's decode into zeros would turn a sent -0
 * into +0 (p - C(p) then -0 where the host has +0), and added at -1 it is
 * the host's p - C(p) bit for bit.
 */
#include "gossip/ef_table.h"

#include <math.h>
#include <stdlib.h>

/* Bytes that crossed PCIe: none on host memory. */
static void
s_count(const struct gossip_ef_mem *m, uint64_t *counter, size_t bytes)
{
    *counter += m->be->host_memory ? 0 : bytes;
}

rumor_err
gossip_ef_residual(const struct gossip_ef_mem *m,
                   const float *p,
                   size_t n,
                   const uint8_t *pay,
                   size_t len)
{
    rumor_err rc = m->be->copy(m->e, p, n * sizeof(float), GOSSIP_ON_DEVICE);
    if (rc == RUMOR_OK)
        rc = m->be->decode_add(m->codec, pay, len, -1.0f, m->e, n);
    s_count(m, m->pcie_h2d, len);
    if (RUMOR_NEVER(rc == RUMOR_EPROTO))
        return rc; /* own bytes always decode, or the codec has a bug */
    *m->steps += rc == RUMOR_OK;
    return rc;
}

/* DGC's clip of x: 1, or clip / norm above the clip (errfb.c's sum of
 * (double)x * x, in order on the host). */
static rumor_err
s_dgc_scale(const struct gossip_ef_mem *m,
            const float *x,
            size_t n,
            double clip,
            float *scale)
{
    double sq = 0;
    *scale = 1.0f;
    if (clip <= 0)
        return RUMOR_OK;
    rumor_err rc = m->be->sumsq_add(x, NULL, n, &sq);
    double norm = sqrt(sq);
    if (rc == RUMOR_OK && norm > clip)
        *scale = (float)(clip / norm);
    return rc;
}

/* u = u' but 0 at the indices the payload (this node's own) sent; the
 * index list goes down. */
static rumor_err
s_dgc_mask(const struct gossip_ef_mem *m,
           const uint8_t *pay,
           size_t len,
           size_t n)
{
    uint32_t *idx = NULL;
    size_t k = 0;
    rumor_err rc = rumor_ef_dgc_sent(m->codec, pay, len, n, &idx, &k);
    if (RUMOR_NEVER(rc == RUMOR_EPROTO || rc == RUMOR_EINVAL))
        return rc; /* own bytes always parse */
    if (rc == RUMOR_OK)
        rc = m->be->copy(m->u, m->un, n * sizeof(float), GOSSIP_ON_DEVICE);
    if (rc == RUMOR_OK)
        rc = m->be->zero_at(m->u, idx, k);
    s_count(m, m->pcie_h2d, k * sizeof *idx);
    free(idx);
    return rc;
}

rumor_err
gossip_ef_dgc_encode(const struct gossip_ef_mem *m,
                     float *v,
                     const float *x,
                     size_t n,
                     uint64_t seed,
                     uint64_t step,
                     uint8_t *out,
                     size_t cap,
                     size_t *len)
{
    const struct gossip_backend_i *be = m->be;
    float mu = 0, scale = 1.0f;
    double clip = 0;
    uint64_t warmup = 0;
    rumor_err rc = rumor_ef_dgc(m->dgc, &mu, &clip, &warmup);
    if (rc == RUMOR_OK)
        rc = s_dgc_scale(m, x, n, clip, &scale);
    if (rc == RUMOR_OK)
        rc = be->dgc_step(m->un, v, m->e, m->u, x, mu, scale, n);
    rumor_ef_set_steps(m->dgc, *m->steps); /* the warm-up's count */
    size_t k = rumor_ef_dgc_count(m->dgc, m->codec, n);
    if (rc == RUMOR_OK && warmup > 0)
        rc = be->encode_k(m->codec, v, n, k, seed, step, out, cap, len);
    else if (rc == RUMOR_OK)
        rc = be->encode(m->codec, v, n, seed, step, out, cap, len);
    if (rc != RUMOR_OK)
        return rc;
    s_count(m, m->pcie_d2h, *len);
    rc = s_dgc_mask(m, out, *len, n);
    return rc == RUMOR_OK ? gossip_ef_residual(m, v, n, out, *len) : rc;
}
