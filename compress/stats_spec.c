/*
 * The spec of the codec that decodes a given payload (issue #12): with
 * adaptive compression every message may use other settings (bits, kept
 * count) per layer and per link, and a decoder made from the receiver's
 * own spec would reject them (topk checks k, qsgd checks its bits). Every
 * payload already carries its settings in its 12-byte header
 * (docs/protocol.md, "Codec payloads"), so the receiver reads them back
 * instead of guessing: this function turns a header (and for sparse
 * payloads the header of the values payload inside) into spec text, and
 * rumor_codec_new of that text then decodes the payload with all of the
 * codec's own checks.
 *
 * Network input: every offset is checked against len before it is read,
 * counts against RUMOR_COMPRESS_MAX_ELEMS and parameters against the
 * ranges rumor_codec_new accepts, and nothing is allocated; anything else
 * is RUMOR_EPROTO. The settings that do not travel (the threshold value,
 * dgc's ratio) are not needed to decode: those decoders accept any count.
 */
#include "rumor/compress.h"

#include "core/le.h"

#include <stdio.h>

static bool
s_fits(int w, size_t cap)
{
    return w >= 0 && (size_t)w < cap;
}

/* A dense codec's spec from its header (in has at least 12 bytes). */
static rumor_err
s_dense(const uint8_t *in, char *spec, size_t cap)
{
    uint32_t p2 = core_get_u32(in + 8);
    const char *name = rumor_codec_name((rumor_codec_id)in[0]);
    int w = -1;
    switch ((rumor_codec_id)in[0]) {
    case RUMOR_CODEC_QSGD:
        if (in[2] < 1 || in[2] > 8 || in[3] > 1 || p2 < 1 || p2 > 1u << 24)
            return RUMOR_EPROTO;
        w = snprintf(spec,
                     cap,
                     "qsgd:bits=%u,bucket=%u,elias=%u",
                     in[2],
                     p2,
                     in[3]);
        break;
    case RUMOR_CODEC_TERNGRAD:
    case RUMOR_CODEC_SIGN:
        if (p2 < 1 || p2 > 1u << 24)
            return RUMOR_EPROTO;
        w = snprintf(spec, cap, "%s:bucket=%u", name, p2);
        break;
    case RUMOR_CODEC_FP32:
    case RUMOR_CODEC_FP16:
    case RUMOR_CODEC_BF16:
    case RUMOR_CODEC_NATURAL:
    case RUMOR_CODEC_FP8:
    case RUMOR_CODEC_FP4:
    case RUMOR_CODEC_HUFFMAN:
        w = snprintf(spec, cap, "%s", name);
        break;
    default:
        return RUMOR_EPROTO;
    }
    return s_fits(w, cap) ? RUMOR_OK : RUMOR_ETOOBIG;
}

rumor_err
rumor_codec_spec_of_payload(const uint8_t *in,
                            size_t len,
                            char *spec,
                            size_t cap)
{
    rumor_codec_id id;
    size_t n = 0;
    if (cap > 0)
        spec[0] = '\0';
    rumor_err rc = rumor_codec_peek(in, len, &id, &n);
    if (rc != RUMOR_OK)
        return rc;
    if (id != RUMOR_CODEC_TOPK && id != RUMOR_CODEC_THRESHOLD &&
        id != RUMOR_CODEC_DGC)
        return s_dense(in, spec, cap);
    /* Sparse: header, u32 L, L index bytes, then the values payload. */
    size_t at = RUMOR_COMPRESS_HEADER_BYTES;
    uint32_t k = core_get_u32(in + 8);
    if (len - at < 4 || k > n)
        return RUMOR_EPROTO;
    uint32_t ilen = core_get_u32(in + at);
    at += 4;
    if (ilen > len - at || len - at - ilen < RUMOR_COMPRESS_HEADER_BYTES)
        return RUMOR_EPROTO;
    const uint8_t *inner = in + at + ilen;
    rumor_codec_id iid;
    size_t ik = 0;
    rc = rumor_codec_peek(inner, len - at - ilen, &iid, &ik);
    if (rc != RUMOR_OK)
        return rc;
    if (ik != k || (id == RUMOR_CODEC_TOPK && k == 0))
        return RUMOR_EPROTO;
    char values[RUMOR_COMPRESS_SPEC_MAX];
    rc = s_dense(inner, values, sizeof values);
    if (rc != RUMOR_OK)
        return rc == RUMOR_ETOOBIG ? RUMOR_EPROTO : rc;
    int w = id == RUMOR_CODEC_TOPK
                ? snprintf(spec, cap, "topk:k=%u|%s", k, values)
                : snprintf(spec, cap, "%s|%s", rumor_codec_name(id), values);
    return s_fits(w, cap) ? RUMOR_OK : RUMOR_ETOOBIG;
}
