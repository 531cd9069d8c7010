/*
 * gossip, part 1 of 6 (include rumor/gossip.h): a model as the algorithms
 * see it (borrowed float32 tensors) and the options of every algorithm,
 * with their defaults.
 */
#ifndef RUMOR_PUBLIC_GOSSIP_OPTIONS_H
#define RUMOR_PUBLIC_GOSSIP_OPTIONS_H

#include "rumor/compress.h"
#include "rumor/core.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define RUMOR_GOSSIP_MAX_DIMS    8
#define RUMOR_GOSSIP_MAX_TENSORS 65536
#define RUMOR_GOSSIP_ALGO_BYTES  32
#define RUMOR_GOSSIP_GAMMA_MAX   2.0 /* over-relaxation beyond 2 diverges */
#define RUMOR_GOSSIP_GAMMA_AUTO  0.0 /* gamma chosen from topology and codec */
#define RUMOR_GOSSIP_ADAPT_BYTES 16
#define RUMOR_GOSSIP_PSGD_RANK   4 /* powersgd's rank when none is given */
#define RUMOR_GOSSIP_SAEF_BYTES  (RUMOR_COMPRESS_SPEC_MAX + 16)

/* One tensor of a model: data is borrowed (numel floats, row-major). */
struct rumor_tensor {
    float *data;
    size_t ndim;
    size_t shape[RUMOR_GOSSIP_MAX_DIMS];
};

struct rumor_model {
    struct rumor_tensor *tensors; /* borrowed array */
    size_t count;
};

/* Elements of a tensor (the product of its shape; 1 for ndim == 0). */
RUMOR_API size_t rumor_tensor_numel(const struct rumor_tensor *t);

struct rumor_gossip_opts {
    char algo[RUMOR_GOSSIP_ALGO_BYTES];  /* allreduce allreduce-f64 dpsgd
                               choco powergossip powersgd localsgd
                               deepsqueeze moniqua */
    char codec[RUMOR_COMPRESS_SPEC_MAX]; /* choco, deepsqueeze, and
                               allreduce with compressed: a codec */
    bool compressed; /* allreduce: each node's vector goes as codec's
                        message (with ef), all-gathered and averaged
                        (compressed data-parallel SGD), not exactly; the
                        node sets it when --codec is given; choco and
                        deepsqueeze always compress */
    /* error feedback memory of the compressing sender (rumor_ef_new's
     * spec: ef, ef-decay:BETA, dgc:MOMENTUM[,CLIP][,WARMUP], saef) or ""
     * (none): allreduce with compressed, localsgd with a delta_codec
     * ("" there: saef); rumor_gossip_ef_check says why other algorithms
     * refuse it */
    char ef[RUMOR_COMPRESS_SPEC_MAX];
    double gamma;        /* consensus step size, the reference's diffusion rate
                            (dpsgd, choco, powergossip, deepsqueeze, moniqua),
                            in (0, 2], or RUMOR_GOSSIP_GAMMA_AUTO: chosen by
                            rumor_gossip_new (rumor_gossip_gamma) */
    size_t rank;         /* powergossip, powersgd: rank of the factors;
                            0: the algorithm's (rumor_gossip_rank) */
    unsigned iterations; /* powergossip: power iterations per step */
    unsigned period;     /* localsgd: synchronize every H steps */
    unsigned gossip_rounds; /* localsgd: 0 = exact average, k = k rounds of
                               plain gossip */
    char delta_codec[RUMOR_COMPRESS_SPEC_MAX]; /* localsgd: "" or a codec
                               for the delta since the last sync, sent with
                               error feedback (exact averaging only) */
    double outer_lr;       /* localsgd: outer step on the averaged delta */
    double outer_momentum; /* localsgd: its Nesterov momentum; with
                              outer_lr, DiLoCo's outer optimizer */
    unsigned fragments;    /* localsgd: the model synchronized in this many
                              fragments at staggered steps (streaming DiLoCo);
                              1: all of it at once */
    unsigned stale;        /* the exchange of step t lands at step t + stale,
                              the inner steps in between computed while it
                              travels; 0: it lands before step t + 1 */
    double theta;  /* moniqua: bound on how far neighbours' models are apart */
    uint64_t seed; /* run seed, equal on every node */
    double ef_alpha;  /* localsgd with delta_codec: step-ahead error feedback
                         coefficient in [0, 1]; 0 = plain EF, 1 = SAEF (see
                         rumor_gossip_step_ahead) */
    double clip_norm; /* robust mixing with this fixed radius instead of
                         the adaptive one (see robust below); 0: adaptive */
    /* localsgd with ef_alpha > 0: whose errors the look-ahead uses:
     * "self" (each node its own), "neighbourhood" (the W-weighted average
     * of the neighbours' errors, sent in one extra round, compressed with
     * delta_codec) or "neighbourhood:CODEC" (with that codec); "" is the
     * default */
    char saef_scope[RUMOR_GOSSIP_SAEF_BYTES];
    char adapt[RUMOR_GOSSIP_ADAPT_BYTES]; /* choco: "" (off), "fixed",
                        "rule" or "learned": the adaptive compression
                        controller (docs/adaptive.md); powersgd: "fixed"
                        or "rule" (the rank) */
    double comm_share;    /* adapt: target share of the step time spent
                             communicating, in [0, 1); 0: no link budget */
    double adapt_density; /* adapt without a link budget: message bytes
                             as a fraction of the dense fp32 message */
    double adapt_error;   /* rule: quantization error budget per layer;
                             powersgd: relative approximation error */
    double adapt_lambda;  /* learned: weight of bits in the surrogate loss */

    size_t adapt_rank_min; /* powersgd rule: lowest rank (0: 1) */
    size_t adapt_rank_max; /* powersgd rule: highest rank (0: 4 x rank) */

    /* powersgd, as PyTorch's PowerSGDState (docs/gossip.md, "PowerSGD
     * options"): */
    uint64_t start_iter;         /* steps of plain all-reduce first (0) */
    double min_compression_rate; /* compress a matrix only where (n + m) r
                                    rate < n m, else all-reduce it (2) */
    bool use_error_feedback;     /* keep e = M - approx per node (true) */
    bool warm_start;             /* reuse Q between steps; false: fresh
                                    from the seed every step (true).
                                    Shared with powergossip, as the same
                                    switch of its reference: each power
                                    iteration starts from the edge's last
                                    factor; false: from one drawn from
                                    the pair's seed and the edge's
                                    iteration count */
    double orth_eps;             /* orthogonalization epsilon (0) */
    bool batch_same_shape;       /* batched kernels per shape group (true) */
    bool one_sided;              /* epfml/powersgd's variant: iterations
                                    averaged products per step, one side
                                    each (false) */
    size_t tensor_base;          /* the model is tensors tensor_base, ... of a
                                    larger one (a bucket of the peer API's tensors,
                                    node/peer.c): per-tensor random streams (the
                                    codecs' seeds of allreduce with compressed,
                                    PowerSGD's Q) are those of the larger model's
                                    tensors, so a bucket's exchange draws what the
                                    whole model's would (0) */

    /* Robust mixing (docs/gossip.md, "Robust mixing"): each gossip
     * algorithm (dpsgd, choco, powergossip, deepsqueeze, moniqua) clips
     * what one neighbour moves the model by in a step, x_i += gamma sum_j
     * w_ij CLIP(x_j - x_i, tau) (the decoded difference for the
     * compressed ones; ClippedGossip), tau adaptive: clip_factor times the
     * clip_quantile of the step's neighbour distances, held back by their
     * history; the ring algorithms reject a non-finite or outsized chunk.
     * clip_norm > 0 fixes tau instead. */
    char robust[8];       /* "clip" (or "": the default) or "off" */
    double clip_quantile; /* in (0, 1]; 0: 0.5, the lower median */
    double clip_factor;   /* >= 1; 0: 3 */
};

/* RUMOR_OK when opts.ef applies to opts.algo (see ef above), else
 * RUMOR_EINVAL with a diag naming the option and why: an algorithm that
 * compresses nothing, or one with its own error compensation (CHOCO's
 * public copies, DeepSqueeze's error, PowerSGD's memory). */
RUMOR_API rumor_err rumor_gossip_ef_check(const struct rumor_gossip_opts *opts,
                                          struct rumor_diag *diag);

/* RUMOR_OK when opts.stale (S) applies, else RUMOR_EINVAL with a diag
 * saying why: S > 0 needs a model exchange (gradients, true when the
 * driver averages gradients, and powersgd refuse it: the step cannot
 * go on without them), and localsgd needs S <= period (a
 * synchronization lands before the next one starts) and ef_alpha 0 (the
 * look-ahead moves the live model, not the exchange's copy). The
 * simulator and the runtime both call it (docs/gossip.md, "Stale
 * exchanges"). */
RUMOR_API rumor_err
rumor_gossip_stale_check(const struct rumor_gossip_opts *opts,
                         bool gradients,
                         struct rumor_diag *diag);

/* Defaults: algo "dpsgd", codec "qsgd:bits=4", compressed false, ef "", gamma
 * RUMOR_GOSSIP_GAMMA_AUTO, rank 0 (the algorithm's), iterations 1, period 1,
 * gossip_rounds 0, delta_codec "", outer_lr 1, outer_momentum 0, fragments
 * 1, stale 0, theta 0.1,
 * seed 1, ef_alpha 0, saef_scope "neighbourhood", start_iter 0,
 * min_compression_rate 2, use_error_feedback, warm_start and
 * batch_same_shape true, orth_eps 0, one_sided false (docs/gossip.md,
 * "Defaults"). */
RUMOR_API void rumor_gossip_opts_default(struct rumor_gossip_opts *opts);

/* The rank opts.algo runs with: opts.rank, or when 0 the algorithm's
 * default: RUMOR_GOSSIP_PSGD_RANK for powersgd (docs/gossip.md, "PowerSGD
 * options": rank 1 trails all-reduce by points), 1 for powergossip. */
RUMOR_API size_t rumor_gossip_rank(const struct rumor_gossip_opts *opts);

#endif /* RUMOR_PUBLIC_GOSSIP_OPTIONS_H */
