/*
 * Error-feedback memories: the state a compressing sender keeps so that
 * what the codec drops is sent later instead of lost.
 *
 *   ef        (Seide et al. 2014; Karimireddy et al. 2019, Alg. 2)
 *             p = g + e; send C(p); e = p - C(p).
 *   ef-decay  (CO3, Chen et al., eqs. 13-14) v = g + gamma m; q = C(v);
 *             m = gamma m + g - q. gamma < 1 forgets old error.
 *   dgc       (Lin et al. 2018, sections 3.2-3.4) local clipping of g to
 *             norm clip N^-1/2 (N the number of nodes summing their
 *             gradients, rumor_ef_set_nodes: the paper clips the sum at
 *             clip, so each of N independent parts gets clip / sqrt N);
 *             momentum correction u = mu u + g, v = v + u; send the top
 *             of v (the caller's topk, randk or dgc codec, or the
 *             memory's own DGC sampled threshold); factor masking: where
 *             a coordinate was selected, u = 0 and v = v - C(v) (0 with
 *             fp32 values, the quantization residual with a quantizing
 *             values codec, which error feedback then carries). The mask
 *             is the selection itself, not C(v) != 0: a selected value
 *             that quantizes to 0 was still sent. Warm-up: density 25 %
 *             decaying geometrically to the final one over warmup steps.
 *   saef      (Xu, Huo, Huang 2021) the caller forms Delta (which already
 *             holds e-bar); send C(Delta); e = Delta - C(Delta).
 *             rumor_ef_apply_error(ef, -alpha, x) gives the look-ahead.
 *
 * C(p) comes from the codec's approx output (bit-identical to the
 * receiver's decode), so no decode is needed. State changes only after a
 * successful encode (the new vectors are formed in scratch first), so a
 * failed step (ENUMERIC, ETOOBIG) leaves the memory as it was.
 *
 * Save/restore: a small little-endian record ("RMEF", version, kind,
 * parameters, n, step, vectors), validated completely (lengths, parameters
 * against the memory, finite values) before anything is copied.
 */
#include "compress/compress_impl.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

enum s_kind { S_EF = 1, S_EF_DECAY = 2, S_DGC = 3, S_SAEF = 4 };

#define S_STATE_HEAD 48

struct rumor_ef {
    enum s_kind kind;
    size_t n;
    uint64_t steps;      /* successful encode calls */
    float gamma;         /* ef-decay: memory decay */
    float momentum;      /* dgc: mu */
    float ratio;         /* dgc: final density */
    float clip;          /* dgc: max norm of g, 0 = off */
    uint64_t warmup;     /* dgc: warm-up steps, 0 = none */
    size_t nodes;        /* dgc: N of the clip's N^-1/2 */
    rumor_codec *sparse; /* dgc: owned sparsifier (dgc|values) */
    uint8_t *selected;   /* dgc: the last selection (n bytes) */
    float *e;            /* residual: e, m or v (n floats) */
    float *u;            /* dgc momentum (n floats) */
    float *scratch;      /* n floats: p, v or v' */
    float *scratch2;     /* n floats: C(p); dgc: also u' */
    float *scratch3;     /* dgc: u' */
};

/* --- spec -------------------------------------------------------------- */

static bool
s_num(const char *v, size_t len, double lo, double hi, double *out)
{
    char tmp[64];
    if (len == 0 || len >= sizeof tmp)
        return false;
    memcpy(tmp, v, len);
    tmp[len] = '\0';
    char *end = NULL;
    errno = 0;
    double d = strtod(tmp, &end);
    if (errno != 0 || end != tmp + len || !isfinite(d) || d < lo || d > hi)
        return false;
    *out = d;
    return true;
}

static rumor_err
s_parse(rumor_ef *ef, const char *spec, char *values, struct rumor_diag *diag)
{
    size_t len = strlen(spec);
    const char *colon = memchr(spec, ':', len);
    size_t nlen = colon ? (size_t)(colon - spec) : len;
    static const struct {
        const char *name;
        enum s_kind kind;
    } kinds[] = {{"ef", S_EF},
                 {"ef-decay", S_EF_DECAY},
                 {"dgc", S_DGC},
                 {"saef", S_SAEF}};
    ef->kind = 0;
    for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; i++)
        if (strlen(kinds[i].name) == nlen &&
            memcmp(kinds[i].name, spec, nlen) == 0)
            ef->kind = kinds[i].kind;
    if (ef->kind == 0) {
        rumor_diag_set(diag,
                       "",
                       0,
                       1,
                       "unknown error feedback '%.*s'",
                       (int)nlen,
                       spec);
        return RUMOR_EINVAL;
    }
    if (colon == NULL)
        return RUMOR_OK;
    /* Values without a key fill these in order: "dgc:0.9,5,100",
     * "ef-decay:0.7". */
    static const char *const positional[][3] =
        {[S_EF_DECAY] = {"gamma"}, [S_DGC] = {"momentum", "clip", "warmup"}};
    size_t pos = 0;
    const char *q = colon + 1, *end = spec + len;
    while (q <= end) {
        const char *comma = memchr(q, ',', (size_t)(end - q));
        const char *stop = comma ? comma : end;
        const char *eq = memchr(q, '=', (size_t)(stop - q));
        int col = 1 + (int)(q - spec);
        const char *key = q;
        size_t klen = eq ? (size_t)(eq - q) : (size_t)(stop - q);
        const char *v = eq ? eq + 1 : q;
        size_t vlen = (size_t)(stop - v);
        if (eq == NULL && ef->kind <= S_DGC && pos < 3 &&
            positional[ef->kind][pos] != NULL) {
            key = positional[ef->kind][pos++];
            klen = strlen(key);
        } else if (eq == NULL) {
            key = "";
            klen = 0;
        }
        double d = 0;
        bool known = true, ok = vlen > 0;
#define S_KEY(s) (klen == strlen(s) && memcmp(key, s, klen) == 0)
        if (ef->kind == S_EF_DECAY && S_KEY("gamma")) {
            ok = ok && s_num(v, vlen, 0, 1, &d);
            ef->gamma = (float)d;
        } else if (ef->kind == S_DGC && S_KEY("momentum")) {
            ok = ok && s_num(v, vlen, 0, 1, &d);
            ef->momentum = (float)d;
        } else if (ef->kind == S_DGC && S_KEY("ratio")) {
            ok = ok && s_num(v, vlen, 1e-9, 1, &d);
            ef->ratio = (float)d;
        } else if (ef->kind == S_DGC && S_KEY("clip")) {
            ok = ok && s_num(v, vlen, 0, 1e30, &d);
            ef->clip = (float)d;
        } else if (ef->kind == S_DGC && S_KEY("warmup")) {
            ok = ok && s_num(v, vlen, 0, 1e12, &d) && d == floor(d);
            ef->warmup = (uint64_t)d;
        } else if (ef->kind == S_DGC && S_KEY("values")) {
            ok = ok && vlen > 0 && vlen < 32;
            if (ok) {
                memcpy(values, v, vlen);
                values[vlen] = '\0';
            }
        } else {
            known = false;
        }
#undef S_KEY
        if (!known || !ok) {
            rumor_diag_set(diag,
                           "",
                           0,
                           col,
                           "%.*s: %s '%.*s'",
                           (int)nlen,
                           spec,
                           known ? "bad value in" : "unknown key",
                           (int)(stop - q),
                           q);
            return RUMOR_EINVAL;
        }
        q = stop + 1;
    }
    return RUMOR_OK;
}

/* --- life cycle ---------------------------------------------------------- */

rumor_err
rumor_ef_new(const char *spec,
             size_t n,
             rumor_ef **out,
             struct rumor_diag *diag)
{
    rumor_err rc = RUMOR_OK;
    rumor_ef *ef = NULL;
    char values[32] = "fp32";
    *out = NULL;
    if (spec == NULL || strlen(spec) >= RUMOR_COMPRESS_SPEC_MAX) {
        rumor_diag_set(diag, "", 0, 0, "error feedback spec is NULL or long");
        return RUMOR_EINVAL;
    }
    if (n > RUMOR_COMPRESS_MAX_ELEMS)
        return RUMOR_ETOOBIG;
    ef = calloc(1, sizeof *ef);
    if (ef == NULL)
        return RUMOR_ENOMEM;
    ef->n = n;
    ef->gamma = 0.9f;
    ef->momentum = 0.9f;
    ef->ratio = 0.001f;
    ef->nodes = 1;
    rc = s_parse(ef, spec, values, diag);
    if (rc != RUMOR_OK)
        goto done;
    if (ef->kind == S_DGC) {
        char sspec[64];
        snprintf(sspec, sizeof sspec, "dgc:ratio=%.9g|%s", ef->ratio, values);
        rc = rumor_codec_new(sspec, &ef->sparse, diag);
        if (rc != RUMOR_OK)
            goto done;
    }
    size_t bytes = (n ? n : 1) * sizeof(float);
    ef->e = calloc(1, bytes);
    ef->scratch = malloc(bytes);
    ef->scratch2 = malloc(bytes);
    if (ef->kind == S_DGC) {
        ef->u = calloc(1, bytes);
        ef->scratch3 = malloc(bytes);
        ef->selected = malloc(n ? n : 1);
    }
    if (ef->e == NULL || ef->scratch == NULL || ef->scratch2 == NULL ||
        (ef->kind == S_DGC &&
         (ef->u == NULL || ef->scratch3 == NULL || ef->selected == NULL)))
        rc = RUMOR_ENOMEM;
done:
    if (rc != RUMOR_OK)
        rumor_ef_destroy(&ef);
    *out = ef;
    return rc;
}

void
rumor_ef_destroy(rumor_ef **ef_p)
{
    if (ef_p == NULL || *ef_p == NULL)
        return;
    rumor_ef *ef = *ef_p;
    rumor_codec_destroy(&ef->sparse);
    free(ef->e);
    free(ef->u);
    free(ef->scratch);
    free(ef->scratch2);
    free(ef->scratch3);
    free(ef->selected);
    free(ef);
    *ef_p = NULL;
}

/* --- step ------------------------------------------------------------------
 */

rumor_err
rumor_ef_set_nodes(rumor_ef *ef, size_t nodes)
{
    if (nodes == 0)
        return RUMOR_EINVAL;
    ef->nodes = nodes;
    return RUMOR_OK;
}

/* DGC warm-up: density 0.25 at step 0, geometric to the final count k of
 * the selector at warmup. */
static size_t
s_dgc_count(const rumor_ef *ef, size_t k, size_t n)
{
    double ratio = n == 0 ? 1 : (double)k / (double)n;
    if (ef->steps >= ef->warmup || ratio >= 0.25)
        return k;
    double f = (double)ef->steps / (double)ef->warmup;
    size_t warm = (size_t)ceil(0.25 * pow(ratio / 0.25, f) * (double)n);
    return warm > n ? n : warm;
}

static rumor_err
s_dgc_encode(rumor_ef *ef,
             const rumor_codec *sel,
             const float *g,
             size_t n,
             uint64_t seed,
             uint64_t counter,
             uint8_t *out,
             size_t cap,
             size_t *written,
             float *sent)
{
    float *v = ef->scratch, *approx = ef->scratch2, *u = ef->scratch3;
    float scale = 1.0f;
    if (ef->clip > 0) {
        double sq = 0;
        for (size_t i = 0; i < n; i++)
            sq += (double)g[i] * g[i];
        double norm = sqrt(sq), clip = ef->clip / sqrt((double)ef->nodes);
        if (norm > clip)
            scale = (float)(clip / norm);
    }
    for (size_t i = 0; i < n; i++) {
        u[i] = ef->momentum * ef->u[i] + scale * g[i];
        v[i] = ef->e[i] + u[i];
    }
    if (!compress_all_finite(v, n))
        return RUMOR_ENUMERIC;
    size_t k = s_dgc_count(ef, compress_sparse_k(sel, n), n);
    rumor_err rc = compress_sparse_encode_k(sel,
                                            v,
                                            n,
                                            k,
                                            seed,
                                            counter,
                                            out,
                                            cap,
                                            written,
                                            approx,
                                            ef->selected);
    if (rc != RUMOR_OK)
        return rc;
    for (size_t i = 0; i < n; i++) {
        bool was_sent = ef->selected[i] != 0;
        ef->u[i] = was_sent ? 0.0f : u[i];
        ef->e[i] = was_sent ? v[i] - approx[i] : v[i];
    }
    if (sent != NULL && n > 0)
        memcpy(sent, approx, n * sizeof *sent);
    return RUMOR_OK;
}

rumor_err
rumor_ef_encoded_size(const rumor_ef *ef,
                      const rumor_codec *codec,
                      size_t n,
                      size_t *bytes)
{
    bool exact = false;
    if (ef->kind != S_DGC)
        return rumor_codec_encoded_size(codec, n, bytes, &exact);
    if (n > RUMOR_COMPRESS_MAX_ELEMS)
        return RUMOR_ETOOBIG;
    /* the warm-up sends more than the codec's count */
    *bytes = compress_sparse_size_any(codec != NULL ? codec : ef->sparse, n);
    return RUMOR_OK;
}

bool
rumor_ef_codec_fits(const rumor_ef *ef, const rumor_codec *codec)
{
    rumor_codec_id id = codec->id;
    /* topk and randk messages hold exactly the codec's count: the
     * warm-up's larger counts need dgc's, which carry any */
    if (ef->kind == S_DGC && ef->warmup > 0)
        return id == RUMOR_CODEC_DGC;
    return ef->kind != S_DGC || id == RUMOR_CODEC_TOPK ||
           id == RUMOR_CODEC_RANDK || id == RUMOR_CODEC_DGC;
}

/* p = what the codec gets this step (dgc aside). */
static void
s_corrected(const rumor_ef *ef, const float *g, size_t n, float *p)
{
    for (size_t i = 0; i < n; i++) {
        switch (ef->kind) {
        case S_EF:
            p[i] = g[i] + ef->e[i];
            break;
        case S_EF_DECAY:
            p[i] = g[i] + ef->gamma * ef->e[i];
            break;
        default: /* S_SAEF: Delta already holds e-bar */
            p[i] = g[i];
            break;
        }
    }
}

rumor_err
rumor_ef_corrected(const rumor_ef *ef, const float *g, size_t n, float *p)
{
    if (n != ef->n || ef->kind == S_DGC)
        return RUMOR_EINVAL;
    s_corrected(ef, g, n, p);
    return RUMOR_OK;
}

rumor_err
rumor_ef_encode(rumor_ef *ef,
                const rumor_codec *codec,
                const float *g,
                size_t n,
                uint64_t seed,
                uint64_t counter,
                uint8_t *out,
                size_t cap,
                size_t *written,
                float *sent)
{
    return rumor_ef_encode_shared(ef,
                                  codec,
                                  g,
                                  n,
                                  NULL,
                                  seed,
                                  counter,
                                  out,
                                  cap,
                                  written,
                                  sent);
}

rumor_err
rumor_ef_encode_shared(rumor_ef *ef,
                       const rumor_codec *codec,
                       const float *g,
                       size_t n,
                       const float *scalers,
                       uint64_t seed,
                       uint64_t counter,
                       uint8_t *out,
                       size_t cap,
                       size_t *written,
                       float *sent)
{
    *written = 0;
    if (n != ef->n || (ef->kind != S_DGC && codec == NULL) ||
        (ef->kind == S_DGC && codec != NULL &&
         !rumor_ef_codec_fits(ef, codec)) ||
        (ef->kind == S_DGC && scalers != NULL))
        return RUMOR_EINVAL;
    if (!compress_all_finite(g, n))
        return RUMOR_ENUMERIC;
    rumor_err rc = RUMOR_OK;
    if (ef->kind == S_DGC) {
        const rumor_codec *sel = codec != NULL ? codec : ef->sparse;
        rc =
            s_dgc_encode(ef, sel, g, n, seed, counter, out, cap, written, sent);
        if (rc == RUMOR_OK)
            ef->steps++;
        return rc;
    }
    float *p = ef->scratch, *approx = ef->scratch2;
    s_corrected(ef, g, n, p);
    rc = rumor_codec_encode_shared(codec,
                                   p,
                                   n,
                                   scalers,
                                   seed,
                                   counter,
                                   out,
                                   cap,
                                   written,
                                   approx);
    if (rc != RUMOR_OK)
        return rc;
    for (size_t i = 0; i < n; i++)
        ef->e[i] = ef->kind == S_EF_DECAY
                       ? ef->gamma * ef->e[i] + g[i] - approx[i]
                       : p[i] - approx[i];
    if (sent != NULL && n > 0)
        memcpy(sent, approx, n * sizeof *sent);
    ef->steps++;
    return RUMOR_OK;
}

const float *
rumor_ef_error(const rumor_ef *ef, size_t *n)
{
    if (n != NULL)
        *n = ef->n;
    return ef->e;
}

rumor_err
rumor_ef_decay(const rumor_ef *ef, float *decay)
{
    if (ef->kind != S_EF && ef->kind != S_EF_DECAY)
        return RUMOR_EINVAL;
    /* ef-decay's new m = gamma m + g - C(p) is p - C(p): float addition
     * commutes, so gamma m + g is p's own sum */
    *decay = ef->kind == S_EF ? 1.0f : ef->gamma;
    return RUMOR_OK;
}

float *
rumor_ef_residual(rumor_ef *ef, size_t *n)
{
    if (n != NULL)
        *n = ef->n;
    return ef->e;
}

void
rumor_ef_set_steps(rumor_ef *ef, uint64_t steps)
{
    ef->steps = steps;
}

rumor_err
rumor_ef_apply_error(const rumor_ef *ef, float alpha, float *x, size_t n)
{
    if (n != ef->n)
        return RUMOR_EINVAL;
    for (size_t i = 0; i < n; i++)
        x[i] += alpha * ef->e[i];
    return RUMOR_OK;
}

uint64_t
rumor_ef_steps(const rumor_ef *ef)
{
    return ef->steps;
}

rumor_err
rumor_ef_dgc(const rumor_ef *ef, float *mu, double *clip, uint64_t *warmup)
{
    if (ef->kind != S_DGC)
        return RUMOR_EINVAL;
    *mu = ef->momentum;
    /* s_dgc_encode's clip, 0 staying 0 */
    *clip = ef->clip / sqrt((double)ef->nodes);
    *warmup = ef->warmup;
    return RUMOR_OK;
}

size_t
rumor_ef_dgc_count(const rumor_ef *ef, const rumor_codec *codec, size_t n)
{
    return s_dgc_count(ef, compress_sparse_k(codec, n), n);
}

rumor_err
rumor_codec_encode_k(const rumor_codec *codec,
                     const float *x,
                     size_t n,
                     size_t k,
                     uint64_t seed,
                     uint64_t counter,
                     uint8_t *out,
                     size_t cap,
                     size_t *written)
{
    *written = 0;
    if (codec->id != RUMOR_CODEC_DGC || k > n || n > RUMOR_COMPRESS_MAX_ELEMS ||
        (n > 0 && x == NULL))
        return RUMOR_EINVAL;
    if (out == NULL || cap < compress_sparse_size_any(codec, n))
        return RUMOR_ETOOBIG;
    if (!compress_all_finite(x, n)) /* as the device's encode */
        return RUMOR_ENUMERIC;
    return compress_sparse_encode_k(codec,
                                    x,
                                    n,
                                    k,
                                    seed,
                                    counter,
                                    out,
                                    cap,
                                    written,
                                    NULL,
                                    NULL);
}

float *
rumor_ef_momentum(rumor_ef *ef, size_t *n)
{
    if (n != NULL)
        *n = ef->kind == S_DGC ? ef->n : 0;
    return ef->u;
}

rumor_err
rumor_ef_dgc_sent(const rumor_codec *codec,
                  const uint8_t *in,
                  size_t len,
                  size_t n,
                  uint32_t **idx,
                  size_t *k)
{
    rumor_codec_id id = codec->id;
    size_t at = 0;
    *idx = NULL;
    *k = 0;
    if (id != RUMOR_CODEC_TOPK && id != RUMOR_CODEC_RANDK &&
        id != RUMOR_CODEC_DGC)
        return RUMOR_EINVAL;
    struct compress_header h;
    rumor_err rc = compress_header_read(in, len, id, n, &h);
    return rc == RUMOR_OK
               ? compress_sparse_indices(codec, in, len, n, idx, k, &at)
               : rc;
}

/* --- save / restore --------------------------------------------------------
 */

size_t
rumor_ef_state_size(const rumor_ef *ef)
{
    size_t vectors = ef->kind == S_DGC ? 2 : 1;
    return S_STATE_HEAD + 4 * ef->n * vectors;
}

static void
s_head(const rumor_ef *ef, uint8_t *h)
{
    memcpy(h, "RMEF", 4);
    h[4] = 1; /* version */
    h[5] = (uint8_t)ef->kind;
    h[6] = 0;
    h[7] = 0;
    core_put_u64(h + 8, ef->n);
    core_put_u64(h + 16, ef->steps);
    compress_put_f32(h + 24, ef->gamma);
    compress_put_f32(h + 28, ef->momentum);
    compress_put_f32(h + 32, ef->ratio);
    compress_put_f32(h + 36, ef->clip);
    core_put_u64(h + 40, ef->warmup);
}

rumor_err
rumor_ef_save(const rumor_ef *ef, uint8_t *out, size_t cap, size_t *written)
{
    size_t need = rumor_ef_state_size(ef);
    *written = 0;
    if (cap < need)
        return RUMOR_ETOOBIG;
    s_head(ef, out);
    uint8_t *p = out + S_STATE_HEAD;
    for (size_t i = 0; i < ef->n; i++)
        compress_put_f32(p + 4 * i, ef->e[i]);
    if (ef->kind == S_DGC)
        for (size_t i = 0; i < ef->n; i++)
            compress_put_f32(p + 4 * (ef->n + i), ef->u[i]);
    *written = need;
    return RUMOR_OK;
}

rumor_err
rumor_ef_restore(rumor_ef *ef, const uint8_t *in, size_t len)
{
    uint8_t want[S_STATE_HEAD];
    if (in == NULL || len != rumor_ef_state_size(ef) || len < S_STATE_HEAD)
        return RUMOR_EPROTO;
    s_head(ef, want);
    /* Everything but the step counter must match this memory. */
    if (memcmp(in, want, 16) != 0 ||
        memcmp(in + 24, want + 24, S_STATE_HEAD - 24) != 0)
        return RUMOR_EPROTO;
    size_t count = (len - S_STATE_HEAD) / 4;
    const uint8_t *p = in + S_STATE_HEAD;
    for (size_t i = 0; i < count; i++)
        if ((core_get_u32(p + 4 * i) & 0x7f800000u) == 0x7f800000u)
            return RUMOR_ENUMERIC;
    ef->steps = core_get_u64(in + 16);
    for (size_t i = 0; i < ef->n; i++)
        ef->e[i] = compress_get_f32(p + 4 * i);
    if (ef->kind == S_DGC)
        for (size_t i = 0; i < ef->n; i++)
            ef->u[i] = compress_get_f32(p + 4 * (ef->n + i));
    return RUMOR_OK;
}
