/*
 * train/optim.c: the local optimizer applied after the gradient (and gossip)
 * of each step: SGD, heavy-ball momentum (Polyak 1964) and Nesterov
 * momentum, with L2 weight decay and a learning-rate schedule.
 *
 * The update rules are exactly PyTorch's torch.optim.SGD with dampening 0
 * (docs of torch.optim.SGD, "Algorithm"), so runs can be compared with
 * PyTorch step for step:
 *     g = grad + wd * p
 *     b = mu * b + g            (b = g at the first step; the same as
 *                                starting from b = 0)
 *     momentum: d = b;  nesterov: d = g + mu * b;  sgd: d = g
 *     p = p - lr(step) * d
 * Weight decay is added to the gradient, not decoupled (AdamW-style),
 * because that is what SGD-based decentralized papers use.
 * Schedule: linear warm-up (Goyal et al. 2017, "Accurate, large minibatch
 * SGD", section 2.2) to the base rate over warmup_steps, then step decay
 * by decay_factor every decay_every steps.
 *
 * The update is one pass of the gossip backend's sgd entry (host: the
 * loop gossip_ref_sgd; CUDA: its kernel twin, _rn intrinsics), so the
 * parameters, gradients and momentum buffer may live on a device (issue
 * #31) and the host and CUDA computations are the same bits.
 *
 * State for checkpoints: "ROPT", version, kind, float count, then the
 * momentum buffer as little-endian float32; loading checks every field
 * against this optimizer before touching its state. On a device the
 * buffer crosses through a host copy at save and load only (counted).
 */
#include "rumor/train.h"

#include "core/le.h"
#include "gossip/backend.h"
#include "train/train_impl.h"

#include <assert.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define OPTIM_MAGIC   0x54504f52u /* "ROPT" little-endian */
#define OPTIM_VERSION 1u
#define OPTIM_HEADER                                   \
    24u /* magic, version, kind (u32) + floats (u64) + \
           reserved (u32) */

struct rumor_optim {
    struct rumor_optim_opts opts;
    size_t count;                      /* tensors */
    size_t *numel;                     /* per tensor */
    size_t floats;                     /* total */
    const struct gossip_backend_i *be; /* where the vectors below live */
    float *buf;        /* momentum buffer (NULL for plain SGD) */
    uint64_t h2d, d2h; /* bytes the state copied to / from be's memory */
};

rumor_err
rumor_optim_kind_parse(const char *name, rumor_optim_kind *out)
{
    assert(name != NULL);
    assert(out != NULL);
    if (strcmp(name, "sgd") == 0)
        *out = RUMOR_OPTIM_SGD;
    else if (strcmp(name, "momentum") == 0)
        *out = RUMOR_OPTIM_MOMENTUM;
    else if (strcmp(name, "nesterov") == 0)
        *out = RUMOR_OPTIM_NESTEROV;
    else
        return RUMOR_EINVAL;
    return RUMOR_OK;
}

void
rumor_optim_opts_default(struct rumor_optim_opts *opts)
{
    assert(opts != NULL);
    memset(opts, 0, sizeof *opts);
    opts->kind = RUMOR_OPTIM_SGD;
    opts->lr = 0.1;
    opts->momentum = 0.9;
    opts->decay_factor = 0.1;
}

rumor_err
rumor_optim_new(const struct rumor_optim_opts *opts,
                const struct rumor_model *params,
                rumor_optim **out)
{
    return train_optim_new_in(opts, params, &gossip_backend_host, out);
}

static rumor_err
s_opts_check(const struct rumor_optim_opts *opts,
             const struct rumor_model *params)
{
    if (opts->kind != RUMOR_OPTIM_SGD && opts->kind != RUMOR_OPTIM_MOMENTUM &&
        opts->kind != RUMOR_OPTIM_NESTEROV)
        return RUMOR_EINVAL;
    if (!(opts->lr >= 0) || !isfinite(opts->lr) || !(opts->weight_decay >= 0) ||
        !isfinite(opts->weight_decay) || !(opts->decay_factor >= 0) ||
        !isfinite(opts->decay_factor))
        return RUMOR_EINVAL;
    if (opts->kind != RUMOR_OPTIM_SGD &&
        !(opts->momentum >= 0 && opts->momentum < 1))
        return RUMOR_EINVAL;
    if (params->count > RUMOR_GOSSIP_MAX_TENSORS)
        return RUMOR_ETOOBIG;
    return RUMOR_OK;
}

rumor_err
train_optim_new_in(const struct rumor_optim_opts *opts,
                   const struct rumor_model *params,
                   const struct gossip_backend_i *be,
                   rumor_optim **out)
{
    assert(opts != NULL);
    assert(params != NULL);
    assert(be != NULL);
    assert(out != NULL);
    *out = NULL;
    rumor_err rc = s_opts_check(opts, params);
    if (rc != RUMOR_OK)
        return rc;
    rumor_optim *o = calloc(1, sizeof *o);
    if (o == NULL)
        return RUMOR_ENOMEM;
    o->opts = *opts;
    o->be = be;
    o->count = params->count;
    o->numel = calloc(params->count ? params->count : 1, sizeof *o->numel);
    if (o->numel == NULL) {
        rumor_optim_destroy(&o);
        return RUMOR_ENOMEM;
    }
    for (size_t i = 0; i < params->count; i++) {
        o->numel[i] = rumor_tensor_numel(&params->tensors[i]);
        o->floats += o->numel[i];
    }
    if (opts->kind != RUMOR_OPTIM_SGD)
        rc = be->alloc(o->floats * sizeof(float), (void **)&o->buf);
    if (rc != RUMOR_OK) {
        rumor_optim_destroy(&o);
        return rc;
    }
    *out = o;
    return RUMOR_OK;
}

void
train_optim_pcie(const rumor_optim *o, uint64_t *h2d, uint64_t *d2h)
{
    assert(o != NULL);
    *h2d = o->h2d;
    *d2h = o->d2h;
}

void
rumor_optim_destroy(rumor_optim **self_p)
{
    if (self_p == NULL || *self_p == NULL)
        return;
    rumor_optim *o = *self_p;
    free(o->numel);
    if (o->be != NULL) {
        o->be->release(o->buf);
    }
    free(o);
    *self_p = NULL;
}

double
rumor_optim_lr(const rumor_optim *o, uint64_t step)
{
    assert(o != NULL);
    double lr = o->opts.lr;
    if (o->opts.warmup_steps > 0 && step < o->opts.warmup_steps)
        lr *= (double)(step + 1) / (double)o->opts.warmup_steps;
    if (o->opts.decay_every > 0)
        lr *= pow(o->opts.decay_factor, (double)(step / o->opts.decay_every));
    return lr;
}

static bool
s_matches(const rumor_optim *o, const struct rumor_model *m)
{
    if (m->count != o->count)
        return false;
    for (size_t i = 0; i < m->count; i++)
        if (rumor_tensor_numel(&m->tensors[i]) != o->numel[i])
            return false;
    return true;
}

rumor_err
rumor_optim_step(rumor_optim *o,
                 uint64_t step,
                 const struct rumor_model *params,
                 const struct rumor_model *grads)
{
    assert(o != NULL);
    assert(params != NULL);
    assert(grads != NULL);
    if (!s_matches(o, params) || !s_matches(o, grads))
        return RUMOR_EINVAL;
    float lr = (float)rumor_optim_lr(o, step);
    float wd = (float)o->opts.weight_decay;
    float mu = (float)o->opts.momentum;
    float *b = o->buf;
    rumor_err rc = RUMOR_OK;
    for (size_t t = 0; t < o->count && rc == RUMOR_OK; t++) {
        size_t n = o->numel[t];
        if (n > 0)
            rc = o->be->sgd(params->tensors[t].data,
                            grads->tensors[t].data,
                            b,
                            lr,
                            wd,
                            mu,
                            o->opts.kind == RUMOR_OPTIM_NESTEROV,
                            n);
        if (b != NULL)
            b += n;
    }
    return rc;
}

/* --- state bytes ------------------------------------------------------ */

size_t
rumor_optim_state_bytes(const rumor_optim *o)
{
    assert(o != NULL);
    return OPTIM_HEADER + (o->buf != NULL ? o->floats * 4 : 0);
}

/* The momentum buffer where host code can read it: the buffer itself on
 * host memory, else a malloc'd copy (*owned set) read from the device
 * when `fetch`. */
static rumor_err
s_host_view(rumor_optim *o, bool fetch, float **view, bool *owned)
{
    *owned = !o->be->host_memory;
    *view = o->buf;
    if (*owned)
        *view = malloc(o->floats * sizeof(float) + 1);
    if (*view == NULL)
        return RUMOR_ENOMEM;
    if (!*owned || !fetch)
        return RUMOR_OK;
    rumor_err rc =
        o->be->copy(*view, o->buf, o->floats * sizeof(float), GOSSIP_TO_HOST);
    o->d2h += o->floats * sizeof(float);
    if (rc != RUMOR_OK) {
        free(*view);
        *view = NULL;
    }
    return rc;
}

rumor_err
rumor_optim_save(const rumor_optim *o, uint8_t *out, size_t cap, size_t *len)
{
    assert(o != NULL);
    assert(len != NULL);
    size_t need = rumor_optim_state_bytes(o);
    *len = 0;
    if (out == NULL || cap < need)
        return RUMOR_ETOOBIG;
    size_t floats = o->buf != NULL ? o->floats : 0;
    float *view = NULL;
    bool owned = false;
    /* the counters are the only thing a save changes */
    rumor_err rc = floats > 0
                       ? s_host_view((rumor_optim *)o, true, &view, &owned)
                       : RUMOR_OK;
    if (rc != RUMOR_OK)
        return rc;
    core_put_u32(out, OPTIM_MAGIC);
    core_put_u32(out + 4, OPTIM_VERSION);
    core_put_u32(out + 8, (uint32_t)o->opts.kind);
    core_put_u32(out + 12, (uint32_t)floats);
    core_put_u32(out + 16, (uint32_t)((uint64_t)floats >> 32));
    core_put_u32(out + 20, 0);
    for (size_t i = 0; i < floats; i++) {
        uint32_t bits;
        memcpy(&bits, &view[i], 4);
        core_put_u32(out + OPTIM_HEADER + 4 * i, bits);
    }
    if (owned)
        free(view);
    *len = need;
    return RUMOR_OK;
}

rumor_err
rumor_optim_load(rumor_optim *o, const uint8_t *in, size_t len)
{
    assert(o != NULL);
    if (in == NULL || len < OPTIM_HEADER)
        return RUMOR_EPROTO;
    uint64_t floats = (uint64_t)core_get_u32(in + 12) |
                      ((uint64_t)core_get_u32(in + 16) << 32);
    uint64_t want = o->buf != NULL ? o->floats : 0;
    if (core_get_u32(in) != OPTIM_MAGIC ||
        core_get_u32(in + 4) != OPTIM_VERSION ||
        core_get_u32(in + 8) != (uint32_t)o->opts.kind ||
        core_get_u32(in + 20) != 0 || floats != want ||
        len - OPTIM_HEADER != want * 4)
        return RUMOR_EPROTO;
    for (size_t i = 0; i < want; i++) {
        uint32_t bits = core_get_u32(in + OPTIM_HEADER + 4 * i);
        float v;
        memcpy(&v, &bits, 4);
        if (!isfinite(v))
            return RUMOR_ENUMERIC;
    }
    if (want == 0)
        return RUMOR_OK;
    float *view = NULL;
    bool owned = false;
    rumor_err rc = s_host_view(o, false, &view, &owned);
    if (rc != RUMOR_OK)
        return rc;
    for (size_t i = 0; i < want; i++) {
        uint32_t bits = core_get_u32(in + OPTIM_HEADER + 4 * i);
        memcpy(&view[i], &bits, 4);
    }
    if (owned) {
        rc = o->be->copy(o->buf, view, want * sizeof(float), GOSSIP_TO_DEVICE);
        o->h2d += want * sizeof(float);
        free(view);
    }
    return rc;
}
