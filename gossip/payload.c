/*
 * Codec payloads of a whole model in one message, shared by the
 * algorithms that send C(v) of a model-shaped vector (CHOCO, DeepSqueeze):
 * for each tensor, a little-endian u32 length, then the codec's bytes for
 * that tensor. Per tensor, because codecs bucket and scale per vector and
 * tensors differ in scale. Decoding checks each length against what is
 * left before handing the bytes to the codec's own checked decoder.
 * The vectors encoded and decoded live in the instance's backend memory
 * (gossip/backend.h): on a device the codec runs there and only the
 * payload crosses.
 */
#include "core/le.h"
#include "gossip/gossip_impl.h"

#include <stdlib.h>
#include <string.h>

rumor_err
gossip_packer_init(struct gossip_packer *p,
                   const rumor_gossip *g,
                   const char *spec,
                   struct rumor_diag *diag)
{
    memset(p, 0, sizeof *p);
    p->be = g->be;
    rumor_err rc = rumor_codec_new(spec, &p->codec, diag);
    if (rc == RUMOR_OK && g->algo != &gossip_allreduce_codec)
        rc = gossip_codec_unshared(g, p->codec, diag);
    if (rc == RUMOR_OK)
        rc = gossip_codec_on_device(g, p->codec, diag);
    size_t largest = 0;
    for (size_t t = 0; t < g->tensor_count && rc == RUMOR_OK; t++) {
        size_t n = rumor_tensor_numel(&g->tensors[t]), bytes = 0;
        bool exact = false;
        rc = rumor_codec_encoded_size(p->codec, n, &bytes, &exact);
        p->cap += 4 + bytes;
        largest = n > largest ? n : largest;
    }
    if (rc != RUMOR_OK)
        return rc;
    p->buf = malloc(p->cap);
    rc = g->be->alloc(largest * sizeof(float), (void **)&p->scratch);
    return p->buf == NULL ? RUMOR_ENOMEM : rc;
}

rumor_err
gossip_codec_unshared(const rumor_gossip *g,
                      const rumor_codec *codec,
                      struct rumor_diag *diag)
{
    if (rumor_codec_scaler_count(codec, 1) == 0)
        return RUMOR_OK;
    rumor_diag_set(diag,
                   "",
                   0,
                   0,
                   "%s: %s: share=1 (TernGrad's scaler sharing) needs the "
                   "synchronous exchange --algo allreduce --codec; drop "
                   "share=1 here",
                   g->algo->name,
                   rumor_codec_spec(codec));
    return RUMOR_EINVAL;
}

rumor_err
gossip_codec_on_device(const rumor_gossip *g,
                       const rumor_codec *codec,
                       struct rumor_diag *diag)
{
    /* decided by the memory, not by the backend: the reference device
     * refuses as CUDA does, so the peer's staging fallback is tested */
    if (g->be->host_memory || rumor_codec_device_supported(codec))
        return RUMOR_OK;
    rumor_diag_set(diag,
                   "",
                   0,
                   0,
                   "%s: the codec %s has no device path (the lossless "
                   "huffman codes the floats' bytes on the host; "
                   "rumor_codec_device_supported); choose another, or keep "
                   "the model in host memory",
                   g->algo->name,
                   rumor_codec_spec(codec));
    return RUMOR_ENOTSUP;
}

void
gossip_packer_free(struct gossip_packer *p)
{
    rumor_codec_destroy(&p->codec);
    free(p->buf);
    if (p->be != NULL)
        p->be->release(p->scratch);
    memset(p, 0, sizeof *p);
}

void
gossip_packer_pcie(const struct gossip_packer *p, uint64_t *h2d, uint64_t *d2h)
{
    *h2d += p->pcie_h2d;
    *d2h += p->pcie_d2h;
}

rumor_err
gossip_codec_init(rumor_gossip *g,
                  struct gossip_packer *pack,
                  const struct rumor_gossip_msg ***slot,
                  struct rumor_diag *diag)
{
    if (!(g->opts.gamma > 0 && g->opts.gamma <= RUMOR_GOSSIP_GAMMA_MAX)) {
        rumor_diag_set(diag,
                       "",
                       0,
                       0,
                       "%s: gamma must be in (0, 2]",
                       g->algo->name);
        return RUMOR_EINVAL;
    }
    rumor_err rc = gossip_packer_init(pack, g, g->opts.codec, diag);
    if (rc != RUMOR_OK)
        return rc;
    *slot = malloc(g->nodes * sizeof **slot);
    return *slot != NULL ? RUMOR_OK : RUMOR_ENOMEM;
}

void
gossip_codec_free(struct gossip_packer *pack,
                  const struct rumor_gossip_msg ***slot)
{
    gossip_packer_free(pack);
    free(*slot);
    *slot = NULL;
}

rumor_err
gossip_packer_encode(struct gossip_packer *p,
                     const rumor_gossip *g,
                     uint64_t step,
                     gossip_fill_fn fill,
                     void *arg)
{
    size_t at = 0, base = 0;
    for (size_t t = 0; t < g->tensor_count; t++) {
        size_t n = rumor_tensor_numel(&g->tensors[t]), written = 0;
        uint64_t seed = rumor_seed_derive(g->opts.seed, g->self, t);
        rumor_err rc = fill(g, t, base, p->scratch, arg);
        if (rc == RUMOR_OK)
            rc = p->be->encode(p->codec,
                               p->scratch,
                               n,
                               seed,
                               step,
                               p->buf + at + 4,
                               p->cap - at - 4,
                               &written);
        if (rc != RUMOR_OK)
            return rc;
        p->pcie_d2h += p->be->host_memory ? 0 : written;
        core_put_u32(p->buf + at, (uint32_t)written);
        at += 4 + written;
        base += n;
    }
    p->len = at;
    return RUMOR_OK;
}

rumor_err
gossip_packer_stage(struct gossip_packer *p,
                    const rumor_gossip *g,
                    const uint8_t *data,
                    size_t len,
                    double weight,
                    double *into)
{
    size_t at = 0, base = 0;
    for (size_t t = 0; t < g->tensor_count; t++) {
        size_t n = rumor_tensor_numel(&g->tensors[t]);
        if (len - at < 4)
            return RUMOR_EPROTO;
        uint32_t plen = core_get_u32(data + at);
        at += 4;
        if (plen > len - at)
            return RUMOR_EPROTO;
        rumor_err rc = p->be->decode(p->codec, data + at, plen, p->scratch, n);
        p->pcie_h2d += p->be->host_memory ? 0 : plen;
        if (rc == RUMOR_OK)
            rc = p->be->accum(into + base, weight, p->scratch, n);
        if (rc != RUMOR_OK)
            return rc;
        at += plen;
        base += n;
    }
    return at == len ? RUMOR_OK : RUMOR_EPROTO;
}

rumor_err
gossip_match_peers(const rumor_gossip *g,
                   const uint32_t *peers,
                   size_t peer_count,
                   const struct rumor_gossip_msg *msgs,
                   size_t count,
                   const struct rumor_gossip_msg **slot)
{
    for (size_t k = 0; k < peer_count; k++)
        slot[k] = NULL;
    for (size_t m = 0; m < count; m++) {
        size_t k = 0;
        while (k < peer_count && peers[k] != msgs[m].peer)
            k++;
        if (k == peer_count || slot[k] != NULL) {
            rumor_log(RUMOR_LOG_WARN,
                      "gossip %s: node %u: unexpected or duplicate message "
                      "from %u",
                      g->algo->name,
                      g->self,
                      msgs[m].peer);
            return RUMOR_EPROTO;
        }
        slot[k] = &msgs[m];
    }
    for (size_t k = 0; k < peer_count; k++) {
        if (slot[k] == NULL) {
            rumor_log(RUMOR_LOG_WARN,
                      "gossip %s: node %u has no message from %u",
                      g->algo->name,
                      g->self,
                      peers[k]);
            return RUMOR_ETIMEDOUT;
        }
    }
    return RUMOR_OK;
}
