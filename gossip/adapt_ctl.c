/*
 * The three compression controllers of issue #12 (docs/adaptive.md).
 *
 * fixed: every layer uses the configured codec, one message for all
 *   neighbours: today's behaviour, bit for bit (the adaptive machinery
 *   only measures and reports).
 * rule: the seed paper's adaptive error-feedback top-k (Sec. "Adaptive
 *   Error-Feedback Sparsification"; the error feedback is CHOCO's public
 *   copy) with k_t from a variance estimate: the byte budget of a message
 *   is split over layers in proportion to sqrt(n_l var_l), var_l an
 *   exponential average over steps of the layer's element variance (the
 *   norm of the layer's spread around its mean), and each layer sends the
 *   largest k that its share buys. The extracted text of the paper lost
 *   its k_t formula (only "alpha is a tunable scaling factor" survives);
 *   this allocation is our reading: k_t grows with the variance, and the
 *   scale alpha is fixed by the budget. Bits per layer come from the error
 *   budget: the fewest bits b whose modelled quantization error
 *   cal_l / (2^b - 1) is within opts.adapt_error, where cal_l is fitted to
 *   the quantization error observed on the layer's last messages (QSGD's
 *   error falls as 1 / s, s = 2^b - 1 levels; Alistarh et al. 2017).
 *   Layers whose dense encoding fits their share are sent dense, in
 *   float32 when even that fits (a fast link sends exact values).
 * learned: the paper's learned quantization schedule (Sec. "Learned
 *   Quantization Schedule"): a model with one weight per layer statistic
 *   (bias, log size, peakiness max sqrt(n) / norm, coefficient of
 *   variation, log of the error scale) maps a layer's statistics to
 *   b = 2 + 6 sigmoid(theta . phi), trained online, one gradient step per
 *   layer and message, on the surrogate loss
 *       L(b) = e(b) + lambda * b / 32,   e(b) = cal_l / (2^b - 1),
 *   the relative compression error plus the bits' cost. k then comes
 *   from the budget as in the rule (the paper's hybrid: adaptive k_t and
 *   learned b_t).
 */
#include "gossip/adapt.h"

#include <math.h>

#define S_CAL_EMA    0.3 /* weight of a new error observation */
#define S_LEARN_LR   0.2 /* learned: gradient step */
#define S_FP32       32u /* bits that mean float32 values */
#define S_HYSTERESIS 0.7 /* learned: bits change past x +- 0.7 */

double
gossip_adapt_layer_bytes(size_t n, size_t k, unsigned bits)
{
    double m = (double)(k >= n ? n : k);
    double values = bits >= S_FP32 ? 4 * m
                                   : 4 * ceil(m / GOSSIP_ADAPT_BUCKET) +
                                         ceil(m * (bits + 1) / 8);
    double bytes = 4 + RUMOR_COMPRESS_HEADER_BYTES + values;
    if (k >= n)
        return bytes;
    /* compress/sparse.c's Rice parameter and the expected stream length:
     * k (r + 1) bits plus the gaps' high parts, sum floor(g / 2^r): the
     * gaps sum to about n - k, and each floor drops (2^r - 1) / 2^(r+1)
     * on average. */
    double mean = (double)(n - k) / (double)k * 0.69;
    unsigned r = 0;
    while (r < 30 && (double)(2u << r) <= mean)
        r++;
    if (mean < 1)
        r = 0;
    double p = (double)(1u << r);
    double high = (double)(n - k) / p - m * (p - 1) / (2 * p);
    double index = ceil((m * (r + 1) + (high > 0 ? high : 0)) / 8);
    return bytes + 4 + index + RUMOR_COMPRESS_HEADER_BYTES;
}

/* The largest k in [1, n) whose layer fits `share` bytes (1 when none). */
static size_t
s_solve_k(size_t n, unsigned bits, double share)
{
    size_t lo = 1, hi = n > 1 ? n - 1 : 1;
    if (gossip_adapt_layer_bytes(n, lo, bits) > share)
        return 1;
    while (lo < hi) {
        size_t mid = lo + (hi - lo + 1) / 2;
        if (gossip_adapt_layer_bytes(n, mid, bits) <= share)
            lo = mid;
        else
            hi = mid - 1;
    }
    return lo;
}

/* Splits budget over the layers in proportion to sqrt(n var) (water
 * filling: a layer whose dense message fits its share takes only that,
 * and the rest is shared again), then sets each layer's k. c.bits must be
 * set; a dense layer that fits in float32 switches to it. */
static void
s_allocate(struct gossip_adapt *a, struct gossip_link *l, double budget)
{
    double w_sum = 0;
    for (size_t t = 0; t < a->layers; t++) {
        struct gossip_layer *y = &l->layers[t];
        y->c.k = 0; /* 0: not placed yet */
        w_sum += sqrt((double)y->n * fmax(y->var_ema, 0)) + 1e-30;
    }
    bool placed = true;
    while (placed) {
        placed = false;
        for (size_t t = 0; t < a->layers; t++) {
            struct gossip_layer *y = &l->layers[t];
            if (y->c.k != 0)
                continue;
            double w = sqrt((double)y->n * fmax(y->var_ema, 0)) + 1e-30;
            double share = budget * w / w_sum;
            double dense = gossip_adapt_layer_bytes(y->n, y->n, y->c.bits);
            if (dense > share)
                continue;
            /* dense: spend the rest of the share on precision */
            y->c.k = y->n;
            if (gossip_adapt_layer_bytes(y->n, y->n, S_FP32) <= share)
                y->c.bits = S_FP32;
            while (y->c.bits < GOSSIP_ADAPT_MAX_BITS &&
                   gossip_adapt_layer_bytes(y->n, y->n, y->c.bits + 1) <= share)
                y->c.bits++;
            budget -= gossip_adapt_layer_bytes(y->n, y->n, y->c.bits);
            w_sum -= w;
            placed = true;
        }
    }
    for (size_t t = 0; t < a->layers; t++) {
        struct gossip_layer *y = &l->layers[t];
        if (y->c.k != 0)
            continue;
        double w = sqrt((double)y->n * fmax(y->var_ema, 0)) + 1e-30;
        y->c.k = s_solve_k(y->n, y->c.bits, fmax(budget, 0) * w / w_sum);
    }
}

/* --- fixed --------------------------------------------------------------- */

static void
s_fixed_choose(struct gossip_adapt *a, struct gossip_link *l, double budget)
{
    (void)budget;
    for (size_t t = 0; t < a->layers; t++)
        l->layers[t].c = (struct gossip_choice){0, 0};
}

const struct gossip_ctl_i gossip_ctl_fixed = {
    .name = "fixed",
    .per_link = false,
    .choose = s_fixed_choose,
    .learn = NULL,
};

/* --- rule ---------------------------------------------------------------- */

static double
s_levels(double b)
{
    return exp2(b) - 1;
}

static void
s_rule_choose(struct gossip_adapt *a, struct gossip_link *l, double budget)
{
    for (size_t t = 0; t < a->layers; t++) {
        struct gossip_layer *y = &l->layers[t];
        unsigned b = GOSSIP_ADAPT_MIN_BITS;
        while (b < GOSSIP_ADAPT_MAX_BITS &&
               y->cal / s_levels(b) > a->opts->adapt_error)
            b++;
        y->c.bits = b;
    }
    s_allocate(a, l, budget);
}

/* Fits each layer's error scale to its observed quantization error. */
static void
s_calibrate(struct gossip_adapt *a, const struct gossip_link *l)
{
    for (size_t t = 0; t < a->layers; t++) {
        struct gossip_layer *y = &l->layers[t];
        if (y->c.bits >= S_FP32 || y->c.bits == 0 || !(y->q_err > 0))
            continue;
        double seen = y->q_err * s_levels(y->c.bits);
        y->cal = (1 - S_CAL_EMA) * y->cal + S_CAL_EMA * seen;
    }
}

const struct gossip_ctl_i gossip_ctl_rule = {
    .name = "rule",
    .per_link = true,
    .choose = s_rule_choose,
    .learn = s_calibrate,
};

/* --- learned ------------------------------------------------------------- */

static void
s_features(const struct gossip_layer *y, double *phi)
{
    double n = (double)y->n, sd = sqrt(y->st.var);
    double peak = y->st.norm > 0 ? y->st.max_abs * sqrt(n) / y->st.norm : 1;
    phi[0] = 1;
    phi[1] = log2(n + 1) / 20;
    phi[2] = log(fmax(peak, 1)) / log(sqrt(n) + 2);
    phi[3] = sd / (sd + fabs(y->st.mean) + 1e-30);
    phi[4] = log2(fmax(y->cal, 1e-6)) / 4;
}

static double
s_sigmoid(double z)
{
    return 1 / (1 + exp(-z));
}

/* The model's continuous bit width for a layer, and sigmoid(z). */
static double
s_bits(const struct gossip_adapt *a, const struct gossip_layer *y, double *sg)
{
    double phi[GOSSIP_ADAPT_FEATURES], z = 0;
    s_features(y, phi);
    for (size_t f = 0; f < GOSSIP_ADAPT_FEATURES; f++)
        z += a->theta[f] * phi[f];
    *sg = s_sigmoid(z);
    return GOSSIP_ADAPT_MIN_BITS +
           (GOSSIP_ADAPT_MAX_BITS - GOSSIP_ADAPT_MIN_BITS) * *sg;
}

static void
s_learned_choose(struct gossip_adapt *a, struct gossip_link *l, double budget)
{
    for (size_t t = 0; t < a->layers; t++) {
        double sg = 0;
        struct gossip_layer *y = &l->layers[t];
        double b = s_bits(a, y, &sg);
        /* hysteresis: a width near x.5 would flip every message, and
         * each flip costs the bytes model a step to settle */
        if (y->c.bits < GOSSIP_ADAPT_MIN_BITS ||
            y->c.bits > GOSSIP_ADAPT_MAX_BITS ||
            fabs(b - (double)y->c.bits) > S_HYSTERESIS)
            y->c.bits = (unsigned)lround(b);
    }
    s_allocate(a, l, budget);
}

/* One gradient step per layer on L(b) = cal / (2^b - 1) + lambda b / 32. */
static void
s_learned_learn(struct gossip_adapt *a, const struct gossip_link *l)
{
    s_calibrate(a, l);
    for (size_t t = 0; t < a->layers; t++) {
        const struct gossip_layer *y = &l->layers[t];
        double sg = 0, phi[GOSSIP_ADAPT_FEATURES];
        double b = s_bits(a, y, &sg), s = s_levels(b);
        double dl_db =
            -y->cal * log(2) * exp2(b) / (s * s) + a->opts->adapt_lambda / 32;
        double db_dz =
            (GOSSIP_ADAPT_MAX_BITS - GOSSIP_ADAPT_MIN_BITS) * sg * (1 - sg);
        s_features(y, phi);
        for (size_t f = 0; f < GOSSIP_ADAPT_FEATURES; f++)
            a->theta[f] -= S_LEARN_LR * dl_db * db_dz * phi[f];
    }
}

const struct gossip_ctl_i gossip_ctl_learned = {
    .name = "learned",
    .per_link = true,
    .choose = s_learned_choose,
    .learn = s_learned_learn,
};
