/*
 * Codec registry and dispatch: spec parsing, the shared payload header and
 * the checks every codec needs (finite input, capacity, element count), so
 * that the codec files only hold their algorithm.
 *
 * Spec grammar: SPEC = PART ["|" PART]; PART = NAME [":" KV *("," KV)];
 * KV = KEY "=" VALUE. A two-part spec is a sparsifier followed by the dense
 * codec of its kept values ("topk:ratio=0.01|qsgd:bits=4"), the hybrid
 * scheme of the seed paper (sparsify, then quantize). Parameters are
 * checked here once, so encoders and decoders can trust the codec object;
 * they never trust a payload: every decoder re-checks the header against
 * the codec (id, version, element count) before reading further.
 *
 * Why one header for every codec (12 bytes): a payload alone says what it
 * is, so a mismatched sender is an EPROTO instead of garbage; the net/
 * frame repeats the id and count, which costs 12 bytes against payloads of
 * kilobytes. Alternatives rejected: no header (a codec-parameter mismatch
 * between peers would decode silently into wrong numbers).
 */
#include "rumor/compress.h"

#include "compress/compress_impl.h"

#include <errno.h>
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* --- registry ------------------------------------------------------------ */

enum s_kind { S_DENSE, S_SPARSE };

static const struct {
    const char *name;
    rumor_codec_id id;
    enum s_kind kind;
    const struct compress_ops *ops;
    bool stochastic;
} s_codecs[] = {
    {"fp32", RUMOR_CODEC_FP32, S_DENSE, &compress_fp32_ops, false},
    {"fp16", RUMOR_CODEC_FP16, S_DENSE, &compress_fp16_ops, false},
    {"bf16", RUMOR_CODEC_BF16, S_DENSE, &compress_bf16_ops, false},
    {"qsgd", RUMOR_CODEC_QSGD, S_DENSE, &compress_qsgd_ops, true},
    {"terngrad", RUMOR_CODEC_TERNGRAD, S_DENSE, &compress_terngrad_ops, true},
    {"sign", RUMOR_CODEC_SIGN, S_DENSE, &compress_sign_ops, false},
    {"natural", RUMOR_CODEC_NATURAL, S_DENSE, &compress_natural_ops, true},
    {"fp8", RUMOR_CODEC_FP8, S_DENSE, &compress_fp8_ops, false},
    {"fp4", RUMOR_CODEC_FP4, S_DENSE, &compress_fp8_ops, false},
    {"huffman", RUMOR_CODEC_HUFFMAN, S_DENSE, &compress_huffman_ops, false},
    {"topk", RUMOR_CODEC_TOPK, S_SPARSE, &compress_sparse_ops, false},
    {"randk", RUMOR_CODEC_RANDK, S_SPARSE, &compress_sparse_ops, true},
    {"threshold", RUMOR_CODEC_THRESHOLD, S_SPARSE, &compress_sparse_ops, false},
    {"dgc", RUMOR_CODEC_DGC, S_SPARSE, &compress_sparse_ops, true},
};

#define S_CODEC_COUNT (sizeof s_codecs / sizeof s_codecs[0])

static int
s_find(const char *name, size_t len)
{
    for (size_t i = 0; i < S_CODEC_COUNT; i++)
        if (strlen(s_codecs[i].name) == len &&
            memcmp(s_codecs[i].name, name, len) == 0)
            return (int)i;
    return -1;
}

static int
s_find_id(rumor_codec_id id)
{
    for (size_t i = 0; i < S_CODEC_COUNT; i++)
        if (s_codecs[i].id == id)
            return (int)i;
    return -1;
}

const char *
rumor_codec_name(rumor_codec_id id)
{
    int i = s_find_id(id);
    return i < 0 ? NULL : s_codecs[i].name;
}

/* --- spec parsing ----------------------------------------------------------
 */

/* Parses value text [v, v + len) as a double; false when not a whole,
 * finite number. */
static bool
s_parse_double(const char *v, size_t len, double *out)
{
    char tmp[64];
    if (len == 0 || len >= sizeof tmp)
        return false;
    memcpy(tmp, v, len);
    tmp[len] = '\0';
    char *end = NULL;
    errno = 0;
    double d = strtod(tmp, &end);
    if (errno != 0 || end != tmp + len || !isfinite(d))
        return false;
    *out = d;
    return true;
}

static bool
s_parse_uint(const char *v, size_t len, unsigned long long max, size_t *out)
{
    char tmp[32];
    if (len == 0 || len >= sizeof tmp || v[0] < '0' || v[0] > '9')
        return false;
    memcpy(tmp, v, len);
    tmp[len] = '\0';
    char *end = NULL;
    errno = 0;
    unsigned long long u = strtoull(tmp, &end, 10);
    if (errno != 0 || end != tmp + len || u > max)
        return false;
    *out = (size_t)u;
    return true;
}

static bool
s_key_is(const char *key, size_t klen, const char *want)
{
    return strlen(want) == klen && memcmp(key, want, klen) == 0;
}

/* fp8/fp4 option words, indexed by enum compress_fp_bias / _code. */
static const char *const s_bias_names[] = {"real", "int", "fit"};
static const char *const s_code_names[] = {"message", "gennorm"};
/* qsgd code words, indexed by enum compress_qsgd_code. */
static const char *const s_qcode_names[] = {"fixed", "gamma", "elias"};

/* Index of value text [v, v + len) in names, -1 when absent. */
static int
s_pick(const char *v, size_t len, const char *const *names, int count)
{
    for (int i = 0; i < count; i++)
        if (s_key_is(v, len, names[i]))
            return i;
    return -1;
}

/* Applies one KEY=VALUE to c; col is the 1-based column of the key. */
static rumor_err
s_apply_kv(rumor_codec *c,
           const char *key,
           size_t klen,
           const char *val,
           size_t vlen,
           int col,
           struct rumor_diag *diag)
{
    const char *name = rumor_codec_name(c->id);
    size_t u = 0;
    double d = 0;
    bool known = true, ok = true;
    switch (c->id) {
    case RUMOR_CODEC_QSGD:
        if (s_key_is(key, klen, "bits")) {
            ok = s_parse_uint(val, vlen, 8, &u) && u >= 1;
            c->levels = (1u << u) - 1;
        } else if (s_key_is(key, klen, "levels")) {
            ok =
                s_parse_uint(val, vlen, COMPRESS_QSGD_MAX_LEVELS, &u) && u >= 1;
            c->levels = (uint32_t)u;
        } else if (s_key_is(key, klen, "code")) {
            int v = s_pick(val, vlen, s_qcode_names, 3);
            ok = v >= 0;
            c->qcode = (enum compress_qsgd_code)(ok ? v : 0);
        } else if (s_key_is(key, klen, "bucket")) {
            ok = s_parse_uint(val, vlen, 1u << 24, &u) && u >= 1;
            c->bucket = u;
        } else if (s_key_is(key, klen, "elias")) {
            ok = s_parse_uint(val, vlen, 1, &u);
            c->qcode = u == 1 ? COMPRESS_QCODE_GAMMA : COMPRESS_QCODE_FIXED;
        } else if (s_key_is(key, klen, "biased")) {
            ok = s_parse_uint(val, vlen, 1, &u);
            c->biased = u == 1;
        } else {
            known = false;
        }
        break;
    case RUMOR_CODEC_TERNGRAD:
    case RUMOR_CODEC_SIGN:
        if (s_key_is(key, klen, "bucket")) {
            ok = s_parse_uint(val, vlen, 1u << 24, &u) && u >= 1;
            c->bucket = u;
        } else if (s_key_is(key, klen, "clip") &&
                   c->id == RUMOR_CODEC_TERNGRAD) {
            ok = s_parse_double(val, vlen, &d) && d >= 0 && d <= 1e6;
            c->clip = d;
        } else if (s_key_is(key, klen, "share") &&
                   c->id == RUMOR_CODEC_TERNGRAD) {
            ok = s_parse_uint(val, vlen, 1, &u);
            c->share = u == 1;
        } else {
            known = false;
        }
        break;
    case RUMOR_CODEC_TOPK:
    case RUMOR_CODEC_RANDK:
    case RUMOR_CODEC_DGC:
        if (s_key_is(key, klen, "ratio")) {
            ok = s_parse_double(val, vlen, &d) && d > 0 && d <= 1;
            c->ratio = d;
            c->k = 0;
        } else if (s_key_is(key, klen, "k") && c->id != RUMOR_CODEC_DGC) {
            ok =
                s_parse_uint(val, vlen, RUMOR_COMPRESS_MAX_ELEMS, &u) && u >= 1;
            c->k = u;
        } else if (s_key_is(key, klen, "scale") && c->id == RUMOR_CODEC_RANDK) {
            ok = s_parse_uint(val, vlen, 1, &u);
            c->scale = u == 1;
        } else {
            known = false;
        }
        break;
    case RUMOR_CODEC_FP8:
    case RUMOR_CODEC_FP4:
        if (s_key_is(key, klen, "bias")) {
            int v = s_pick(val, vlen, s_bias_names, 3);
            ok = v >= 0;
            c->fp_bias = (enum compress_fp_bias)(ok ? v : 0);
        } else if (s_key_is(key, klen, "code")) {
            int v = s_pick(val, vlen, s_code_names, 2);
            ok = v >= 0;
            c->fp_code = (enum compress_fp_code)(ok ? v : 0);
        } else {
            known = false;
        }
        break;
    case RUMOR_CODEC_THRESHOLD:
        if (s_key_is(key, klen, "t")) {
            ok = s_parse_double(val, vlen, &d) && d >= 0 && d <= FLT_MAX;
            c->threshold = (float)d;
        } else {
            known = false;
        }
        break;
    default:
        known = false;
        break;
    }
    if (!known) {
        rumor_diag_set(diag,
                       "",
                       0,
                       col,
                       "%s: unknown key '%.*s'",
                       name,
                       (int)klen,
                       key);
        return RUMOR_EINVAL;
    }
    if (!ok) {
        rumor_diag_set(diag,
                       "",
                       0,
                       col,
                       "%s: bad value '%.*s' for key '%.*s'",
                       name,
                       (int)vlen,
                       val,
                       (int)klen,
                       key);
        return RUMOR_EINVAL;
    }
    return RUMOR_OK;
}

/* Picks the qsgd payload format: levels 2^b - 1 (b <= 8) without gap
 * coding keep the vector kernels and the bytes of bits=b (bits = b);
 * anything else takes the levels format (bits = 0), which has no gamma
 * code. */
static rumor_err
s_qsgd_format(rumor_codec *c, int col, struct rumor_diag *diag)
{
    uint32_t s1 = c->levels + 1;
    bool pow2 = (s1 & (s1 - 1)) == 0 && c->levels <= 255;
    c->bits = pow2 && c->qcode != COMPRESS_QCODE_ELIAS
                  ? (unsigned)__builtin_ctz(s1)
                  : 0;
    if (c->bits == 0 && c->qcode == COMPRESS_QCODE_GAMMA) {
        rumor_diag_set(diag,
                       "",
                       0,
                       col,
                       "qsgd: code=gamma (elias=1) needs levels 2^b - 1 <= "
                       "255 (got %u): use code=elias or code=fixed",
                       c->levels);
        return RUMOR_EINVAL;
    }
    return RUMOR_OK;
}

static void
s_set_defaults(rumor_codec *c)
{
    c->bits = 4;
    c->levels = 15;
    c->qcode = COMPRESS_QCODE_FIXED;
    c->biased = false;
    c->bucket = 512;
    c->clip = 0;
    c->share = false;
    c->ratio = c->id == RUMOR_CODEC_DGC ? 0.001 : 0.01;
    c->k = 0;
    c->threshold = 0;
    c->scale = false;
    c->fp_bias = COMPRESS_BIAS_INT;
    c->fp_code = COMPRESS_CODE_MESSAGE;
}

static void
s_format_spec(rumor_codec *c)
{
    const char *name = rumor_codec_name(c->id);
    char own[RUMOR_COMPRESS_SPEC_MAX];
    switch (c->id) {
    case RUMOR_CODEC_QSGD:
        if (c->bits > 0) /* the spec of every codec before levels= */
            snprintf(own,
                     sizeof own,
                     "%s:bits=%u,bucket=%zu,elias=%d,biased=%d",
                     name,
                     c->bits,
                     c->bucket,
                     c->qcode == COMPRESS_QCODE_GAMMA,
                     c->biased ? 1 : 0);
        else
            snprintf(own,
                     sizeof own,
                     "%s:levels=%u,bucket=%zu,code=%s,biased=%d",
                     name,
                     c->levels,
                     c->bucket,
                     s_qcode_names[c->qcode],
                     c->biased ? 1 : 0);
        break;
    case RUMOR_CODEC_TERNGRAD:
    case RUMOR_CODEC_SIGN:
        /* clip and share only when on: the spec of every earlier codec is
         * kept. */
        snprintf(own, sizeof own, "%s:bucket=%zu", name, c->bucket);
        if (c->clip > 0) {
            size_t len = strlen(own);
            snprintf(own + len, sizeof own - len, ",clip=%.9g", c->clip);
        }
        if (c->share) {
            size_t len = strlen(own);
            snprintf(own + len, sizeof own - len, ",share=1");
        }
        break;
    case RUMOR_CODEC_TOPK:
    case RUMOR_CODEC_RANDK:
    case RUMOR_CODEC_DGC:
        if (c->k > 0)
            snprintf(own, sizeof own, "%s:k=%zu", name, c->k);
        else
            snprintf(own, sizeof own, "%s:ratio=%.9g", name, c->ratio);
        if (c->id == RUMOR_CODEC_RANDK) {
            size_t len = strlen(own);
            snprintf(own + len, sizeof own - len, ",scale=%d", c->scale);
        }
        break;
    case RUMOR_CODEC_FP8:
    case RUMOR_CODEC_FP4:
        snprintf(own,
                 sizeof own,
                 "%s:bias=%s,code=%s",
                 name,
                 s_bias_names[c->fp_bias],
                 s_code_names[c->fp_code]);
        break;
    case RUMOR_CODEC_THRESHOLD:
        snprintf(own, sizeof own, "%s:t=%.9g", name, (double)c->threshold);
        break;
    default:
        snprintf(own, sizeof own, "%s", name);
        break;
    }
    /* Concatenated by hand: both parts fit (each canonical part is short),
     * and truncation, if it ever happened, must not overflow. */
    size_t a = strnlen(own, sizeof own);
    a = a < sizeof c->spec - 1 ? a : sizeof c->spec - 1;
    memcpy(c->spec, own, a);
    if (c->inner != NULL && a + 1 < sizeof c->spec - 1) {
        size_t b = strnlen(c->inner->spec, sizeof c->inner->spec);
        c->spec[a++] = '|';
        b = b < sizeof c->spec - 1 - a ? b : sizeof c->spec - 1 - a;
        memcpy(c->spec + a, c->inner->spec, b);
        a += b;
    }
    c->spec[a] = '\0';
}

/* Parses one PART [p, p + len) starting at column col0 into a new codec. */
static rumor_err
s_parse_part(const char *p,
             size_t len,
             int col0,
             rumor_codec **out,
             int *kind,
             struct rumor_diag *diag)
{
    rumor_err rc = RUMOR_OK;
    rumor_codec *c = NULL;
    const char *colon = memchr(p, ':', len);
    size_t nlen = colon ? (size_t)(colon - p) : len;
    int at = s_find(p, nlen);
    if (at < 0) {
        rumor_diag_set(diag, "", 0, col0, "unknown codec '%.*s'", (int)nlen, p);
        rc = RUMOR_EINVAL;
        goto done;
    }
    c = calloc(1, sizeof *c);
    if (c == NULL) {
        rc = RUMOR_ENOMEM;
        goto done;
    }
    c->id = s_codecs[at].id;
    c->ops = s_codecs[at].ops;
    *kind = (int)s_codecs[at].kind;
    s_set_defaults(c);
    if (colon != NULL) {
        const char *q = colon + 1, *end = p + len;
        while (q <= end) {
            const char *comma = memchr(q, ',', (size_t)(end - q));
            const char *stop = comma ? comma : end;
            const char *eq = memchr(q, '=', (size_t)(stop - q));
            int col = col0 + (int)(q - p);
            if (eq == NULL || eq == q) {
                rumor_diag_set(diag,
                               "",
                               0,
                               col,
                               "%s: expected KEY=VALUE, got '%.*s'",
                               s_codecs[at].name,
                               (int)(stop - q),
                               q);
                rc = RUMOR_EINVAL;
                goto done;
            }
            rc = s_apply_kv(c,
                            q,
                            (size_t)(eq - q),
                            eq + 1,
                            (size_t)(stop - eq - 1),
                            col,
                            diag);
            if (rc != RUMOR_OK)
                goto done;
            q = stop + 1;
        }
    }
    if (c->id == RUMOR_CODEC_QSGD)
        rc = s_qsgd_format(c, col0, diag);
done:
    if (rc != RUMOR_OK) {
        free(c);
        c = NULL;
    }
    *out = c;
    return rc;
}

rumor_err
rumor_codec_new(const char *spec, rumor_codec **out, struct rumor_diag *diag)
{
    rumor_err rc = RUMOR_OK;
    rumor_codec *outer = NULL, *inner = NULL;
    *out = NULL;
    if (spec == NULL) {
        rumor_diag_set(diag, "", 0, 0, "codec spec is NULL");
        return RUMOR_EINVAL;
    }
    size_t len = strlen(spec);
    if (len == 0 || len >= RUMOR_COMPRESS_SPEC_MAX) {
        rumor_diag_set(diag, "", 0, 0, "codec spec is empty or too long");
        return RUMOR_EINVAL;
    }
    const char *bar = memchr(spec, '|', len);
    size_t first = bar ? (size_t)(bar - spec) : len;
    int kind_outer = 0, kind_inner = 0;
    rc = s_parse_part(spec, first, 1, &outer, &kind_outer, diag);
    if (rc != RUMOR_OK)
        goto done;
    if (bar != NULL) {
        const char *second = bar + 1;
        if (memchr(second, '|', len - first - 1) != NULL) {
            rumor_diag_set(diag, "", 0, 0, "at most two codecs compose");
            rc = RUMOR_EINVAL;
            goto done;
        }
        rc = s_parse_part(second,
                          len - first - 1,
                          (int)first + 2,
                          &inner,
                          &kind_inner,
                          diag);
        if (rc != RUMOR_OK)
            goto done;
        if (kind_outer != S_SPARSE || kind_inner != S_DENSE) {
            rumor_diag_set(diag,
                           "",
                           0,
                           (int)first + 1,
                           "composition must be SPARSE|DENSE (got '%s')",
                           spec);
            rc = RUMOR_EINVAL;
            goto done;
        }
        if (inner->share) { /* the scalers are agreed per message */
            rumor_diag_set(diag,
                           "",
                           0,
                           (int)first + 2,
                           "terngrad: share=1 needs terngrad as the whole "
                           "codec, not the values of a sparse one");
            rc = RUMOR_EINVAL;
            goto done;
        }
    } else if (kind_outer == S_SPARSE) {
        int dummy = 0;
        rc = s_parse_part("fp32", 4, 1, &inner, &dummy, diag);
        if (rc != RUMOR_OK)
            goto done;
    }
    if (inner != NULL)
        s_format_spec(inner);
    outer->inner = inner;
    inner = NULL;
    s_format_spec(outer);
done:
    free(inner);
    if (rc != RUMOR_OK) {
        free(outer);
        outer = NULL;
    }
    *out = outer;
    return rc;
}

void
rumor_codec_destroy(rumor_codec **codec_p)
{
    if (codec_p == NULL || *codec_p == NULL)
        return;
    free((*codec_p)->inner);
    free(*codec_p);
    *codec_p = NULL;
}

rumor_codec_id
rumor_codec_id_of(const rumor_codec *codec)
{
    return codec->id;
}

const char *
rumor_codec_spec(const rumor_codec *codec)
{
    return codec->spec;
}

bool
rumor_codec_is_stochastic(const rumor_codec *codec)
{
    int at = s_find_id(codec->id);
    bool inner = codec->inner && rumor_codec_is_stochastic(codec->inner);
    return s_codecs[at].stochastic || inner;
}

/* --- header ----------------------------------------------------------------
 */

void
compress_header_write(uint8_t *out, const struct compress_header *h)
{
    out[0] = h->id;
    out[1] = h->version;
    out[2] = h->p0;
    out[3] = h->p1;
    core_put_u32(out + 4, h->n);
    core_put_u32(out + 8, h->p2);
}

rumor_err
compress_header_read(const uint8_t *in,
                     size_t len,
                     rumor_codec_id want,
                     size_t n_want,
                     struct compress_header *h)
{
    memset(h, 0, sizeof *h);
    if (len < RUMOR_COMPRESS_HEADER_BYTES)
        return RUMOR_EPROTO;
    h->id = in[0];
    h->version = in[1];
    h->p0 = in[2];
    h->p1 = in[3];
    h->n = core_get_u32(in + 4);
    h->p2 = core_get_u32(in + 8);
    if (h->version != RUMOR_COMPRESS_VERSION || h->id != (uint8_t)want)
        return RUMOR_EPROTO;
    if (h->n > RUMOR_COMPRESS_MAX_ELEMS)
        return RUMOR_EPROTO;
    if (n_want != SIZE_MAX && (size_t)h->n != n_want)
        return RUMOR_EPROTO;
    return RUMOR_OK;
}

rumor_err
rumor_codec_peek(const uint8_t *in, size_t len, rumor_codec_id *id, size_t *n)
{
    *id = 0;
    *n = 0;
    if (in == NULL || len < RUMOR_COMPRESS_HEADER_BYTES)
        return RUMOR_EPROTO;
    if (in[1] != RUMOR_COMPRESS_VERSION || s_find_id(in[0]) < 0)
        return RUMOR_EPROTO;
    uint32_t count = core_get_u32(in + 4);
    if (count > RUMOR_COMPRESS_MAX_ELEMS)
        return RUMOR_EPROTO;
    *id = (rumor_codec_id)in[0];
    *n = count;
    return RUMOR_OK;
}

/* --- dispatch ----------------------------------------------------------------
 */

rumor_err
rumor_codec_encoded_size(const rumor_codec *codec,
                         size_t n,
                         size_t *bytes,
                         bool *exact)
{
    *bytes = 0;
    *exact = false;
    if (n > RUMOR_COMPRESS_MAX_ELEMS)
        return RUMOR_ETOOBIG;
    codec->ops->size(codec, n, bytes, exact);
    return RUMOR_OK;
}

rumor_err
rumor_codec_encode(const rumor_codec *codec,
                   const float *x,
                   size_t n,
                   uint64_t seed,
                   uint64_t counter,
                   uint8_t *out,
                   size_t cap,
                   size_t *written,
                   float *approx)
{
    *written = 0;
    if (n > RUMOR_COMPRESS_MAX_ELEMS)
        return RUMOR_ETOOBIG;
    if (n > 0 && x == NULL)
        return RUMOR_EINVAL;
    if (!codec->ops->checks_finite && !compress_all_finite(x, n))
        return RUMOR_ENUMERIC;
    if (out == NULL || cap < RUMOR_COMPRESS_HEADER_BYTES)
        return RUMOR_ETOOBIG;
    return codec->ops
        ->encode(codec, x, n, seed, counter, out, cap, written, approx);
}

size_t
rumor_codec_scaler_count(const rumor_codec *codec, size_t n)
{
    return codec->share ? compress_buckets(n, codec->bucket) : 0;
}

rumor_err
rumor_codec_scalers(const rumor_codec *codec,
                    const float *x,
                    size_t n,
                    float *out)
{
    if (!codec->share || n > RUMOR_COMPRESS_MAX_ELEMS ||
        (n > 0 && (x == NULL || out == NULL)))
        return RUMOR_EINVAL;
    if (!compress_all_finite(x, n))
        return RUMOR_ENUMERIC;
    compress_terngrad_scalers(codec, x, n, out);
    return RUMOR_OK;
}

rumor_err
rumor_codec_encode_shared(const rumor_codec *codec,
                          const float *x,
                          size_t n,
                          const float *scalers,
                          uint64_t seed,
                          uint64_t counter,
                          uint8_t *out,
                          size_t cap,
                          size_t *written,
                          float *approx)
{
    if (scalers == NULL)
        return rumor_codec_encode(codec,
                                  x,
                                  n,
                                  seed,
                                  counter,
                                  out,
                                  cap,
                                  written,
                                  approx);
    *written = 0;
    if (!codec->share || n > RUMOR_COMPRESS_MAX_ELEMS || (n > 0 && x == NULL))
        return RUMOR_EINVAL;
    for (size_t k = 0; k < rumor_codec_scaler_count(codec, n); k++)
        if (!(scalers[k] >= 0 && scalers[k] <= FLT_MAX))
            return RUMOR_EINVAL;
    /* the scalers replace the buckets' max |x|, which checked x */
    if (!compress_all_finite(x, n))
        return RUMOR_ENUMERIC;
    if (out == NULL || cap < RUMOR_COMPRESS_HEADER_BYTES)
        return RUMOR_ETOOBIG;
    return compress_terngrad_encode_shared(codec,
                                           x,
                                           n,
                                           scalers,
                                           seed,
                                           counter,
                                           out,
                                           cap,
                                           written,
                                           approx);
}

static rumor_err
s_decode(const rumor_codec *codec,
         const uint8_t *in,
         size_t len,
         bool add,
         float alpha,
         float *y,
         size_t n)
{
    struct compress_header h;
    if (n > RUMOR_COMPRESS_MAX_ELEMS || (n > 0 && y == NULL))
        return RUMOR_EINVAL;
    if (in == NULL)
        return RUMOR_EPROTO;
    rumor_err rc = compress_header_read(in, len, codec->id, n, &h);
    if (rc != RUMOR_OK)
        return rc;
    return codec->ops->decode(codec, in, len, add, alpha, y, n);
}

rumor_err
rumor_codec_decode(const rumor_codec *codec,
                   const uint8_t *in,
                   size_t len,
                   float *y,
                   size_t n)
{
    return s_decode(codec, in, len, false, 1.0f, y, n);
}

rumor_err
rumor_codec_decode_add(const rumor_codec *codec,
                       const uint8_t *in,
                       size_t len,
                       float alpha,
                       float *y,
                       size_t n)
{
    return s_decode(codec, in, len, true, alpha, y, n);
}
