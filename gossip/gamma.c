/*
 * gamma "auto" (RUMOR_GOSSIP_GAMMA_AUTO, the default): the consensus step
 * size chosen from the topology and the codec instead of one number for
 * every algorithm (issue 18: gamma 1 made CHOCO, DeepSqueeze and Moniqua
 * diverge with their default codecs).
 *
 * CHOCO and DeepSqueeze. With an exact exchange any gamma < 2 / beta is
 * stable (beta = ||I - W||_2 = 1 - lambda_min(W)). With a codec, CHOCO's
 * public copy of x misses e = x - xhat; one step leaves the new miss
 * e' = gamma (W - I) x + (I - gamma (W - I)) eps with ||eps||^2 =
 * omega ||e||^2, omega = ||C(v) - v||^2 / ||v||^2 the codec's relative
 * error, so the misses shrink only while (1 + gamma beta)^2 omega < 1:
 *   gamma < (1 / sqrt(omega) - 1) / beta.
 * Half of that bound, capped at 1, is the default:
 *   gamma = min(1, (1 / sqrt(omega) - 1) / (2 beta)).
 * DeepSqueeze carries its codec's error the same way (delta' = v - C(v)).
 * The bound matches the sweep in docs/gossip.md ("Defaults"): CHOCO's
 * consensus with qsgd:bits=4 (omega 0.37) diverges above gamma 0.6-0.7 and
 * with topk:ratio=0.01 (omega 0.92) from 0.2-0.4, on rings, tori and complete
 * graphs. CHOCO's own theorem (Koloskova et al. 2019, Theorem 2),
 * gamma* = delta^2 w / (16 delta + delta^2 + 4 beta^2 + 2 delta beta^2 -
 * 8 delta w) with delta the spectral gap and w = 1 - omega, is a proof's
 * worst case: 0.006 on a 6-ring with qsgd:bits=4, a hundred times below
 * what converges, and it mixes too slowly to keep up with training.
 *
 * omega is measured, not looked up: the codec encodes a standard normal
 * sample shaped like the model's tensors (same sizes, so top-k's k and
 * QSGD's buckets are the real ones), seeded by the run seed alone, so every
 * node computes the same gamma. A codec with omega >= 1 (an unscaled
 * unbiased quantizer coarser than its bucket, e.g. qsgd:bits=2) makes the
 * copies drift apart at every gamma and is refused.
 *
 * Moniqua's rounding noise does not depend on a codec but on theta: its
 * default gamma is from the sweep. Every other algorithm takes 1 (exact
 * gossip or low-rank steps that only shrink the difference of an edge).
 */
#include "gossip/gossip_impl.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define GAMMA_SAFETY  0.5 /* fraction of the stability bound */
#define GAMMA_MONIQUA 0.2 /* docs/gossip.md, "Defaults" */
#define GAMMA_STREAM  0x67616d6dULL

/* Sum over the tensors of ||C(v) - v||^2 and ||v||^2 for a standard normal
 * v of each tensor's size. */
static rumor_err
s_codec_error(const rumor_gossip *g,
              const rumor_codec *codec,
              double *err,
              double *norm)
{
    size_t most = 0;
    for (size_t t = 0; t < g->tensor_count; t++) {
        size_t n = rumor_tensor_numel(&g->tensors[t]);
        most = n > most ? n : most;
    }
    size_t cap = 0;
    bool exact = false;
    rumor_err rc = rumor_codec_encoded_size(codec, most, &cap, &exact);
    float *v = malloc((most + 1) * sizeof *v);
    float *approx = malloc((most + 1) * sizeof *approx);
    uint8_t *buf = malloc(cap + 1);
    if (rc == RUMOR_OK && (v == NULL || approx == NULL || buf == NULL))
        rc = RUMOR_ENOMEM;
    *err = *norm = 0;
    for (size_t t = 0; t < g->tensor_count && rc == RUMOR_OK; t++) {
        size_t n = rumor_tensor_numel(&g->tensors[t]), written = 0;
        struct rumor_rng rng;
        rumor_rng_init(&rng, g->opts.seed, GAMMA_STREAM + t);
        for (size_t e = 0; e < n; e++)
            v[e] = (float)rumor_rng_normal(&rng);
        rc = rumor_codec_encode(codec,
                                v,
                                n,
                                g->opts.seed,
                                t,
                                buf,
                                cap,
                                &written,
                                approx);
        for (size_t e = 0; e < n && rc == RUMOR_OK; e++) {
            double d = (double)approx[e] - v[e];
            *err += d * d;
            *norm += (double)v[e] * v[e];
        }
    }
    free(v);
    free(approx);
    free(buf);
    return rc;
}

/* min(1, (1 / sqrt(omega) - 1) / (2 beta)) for the codec of opts.codec. */
static rumor_err
s_gamma_codec(rumor_gossip *g, struct rumor_diag *diag)
{
    rumor_codec *codec = NULL;
    rumor_err rc = rumor_codec_new(g->opts.codec, &codec, diag);
    double err = 0, norm = 0, beta = 0;
    if (rc == RUMOR_OK)
        rc = s_codec_error(g, codec, &err, &norm);
    rumor_codec_destroy(&codec);
    if (rc == RUMOR_OK)
        rc = rumor_topology_mixing_norm(g->topo, &beta);
    if (rc != RUMOR_OK)
        return rc;
    double omega = norm > 0 ? err / norm : 0;
    if (!(omega < 1)) {
        rumor_diag_set(diag,
                       "",
                       0,
                       0,
                       "%s: codec '%s' loses more than it keeps (relative "
                       "error %.3g >= 1), so the copies drift apart at any "
                       "gamma: choose a finer --codec (e.g. qsgd:bits=4) or "
                       "set --gamma",
                       g->algo->name,
                       g->opts.codec,
                       omega);
        return RUMOR_EINVAL;
    }
    double gamma = beta > 0 ? GAMMA_SAFETY * (1 / sqrt(omega) - 1) / beta : 1;
    g->opts.gamma = gamma < 1 ? gamma : 1;
    if (!(g->opts.gamma > 1e-6)) {
        rumor_diag_set(diag,
                       "",
                       0,
                       0,
                       "%s: codec '%s' keeps too little (relative error "
                       "%.6f) for a usable gamma: choose a finer --codec "
                       "or set --gamma",
                       g->algo->name,
                       g->opts.codec,
                       omega);
        return RUMOR_EINVAL;
    }
    rumor_log(RUMOR_LOG_DEBUG,
              "gossip %s: gamma auto = %.4g (codec %s: relative error %.4g; "
              "||I - W|| = %.4g)",
              g->algo->name,
              g->opts.gamma,
              g->opts.codec,
              omega,
              beta);
    return RUMOR_OK;
}

/* Stale exchanges (opts.stale = S >= 2) delay the consensus correction:
 * per eigenvalue lambda of W the disagreement follows e_{u+1} = e_u -
 * c e_{u+1-S}, c = gamma (1 - lambda) (S = 1 is today's e_{u+1} = (1 -
 * c) e_u: the exchange of step t lands before step t + 1's snapshot).
 * That delayed recurrence is stable iff 0 < c < 2 cos(k pi / (2k + 1)),
 * k = S - 1 (Levin and May 1976): 2 for S <= 1, 1 for S = 2, 0.618 for
 * S = 3. Since 1 - lambda <= 2 on every W, gamma <= cos(k pi / (2k + 1))
 * keeps every eigenvalue inside that bound: the auto gamma is capped
 * there (docs/gossip.md, "Stale exchanges"). */
static double
s_stale_cap(unsigned stale)
{
    double k = stale > 1 ? (double)(stale - 1) : 0;
    return cos(k * M_PI / (2 * k + 1));
}

/* The algorithms with a consensus step size. */
static bool
s_uses_gamma(const char *name)
{
    return strcmp(name, "dpsgd") == 0 || strcmp(name, "choco") == 0 ||
           strcmp(name, "deepsqueeze") == 0 || strcmp(name, "moniqua") == 0 ||
           strcmp(name, "powergossip") == 0;
}

rumor_err
gossip_gamma_resolve(rumor_gossip *g, struct rumor_diag *diag)
{
    if (g->opts.gamma != RUMOR_GOSSIP_GAMMA_AUTO)
        return RUMOR_OK;
    const char *name = g->algo->name;
    rumor_err rc = RUMOR_OK;
    if (strcmp(name, "choco") == 0 || strcmp(name, "deepsqueeze") == 0)
        rc = s_gamma_codec(g, diag);
    else
        g->opts.gamma = strcmp(name, "moniqua") == 0 ? GAMMA_MONIQUA : 1.0;
    double cap = s_stale_cap(g->opts.stale);
    if (rc == RUMOR_OK && s_uses_gamma(name) && g->opts.gamma > cap)
        g->opts.gamma = cap;
    return rc;
}

double
rumor_gossip_gamma(const rumor_gossip *g)
{
    return g->opts.gamma;
}
