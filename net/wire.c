/*
 * The frame codec: a fixed 64-byte little-endian header followed by a
 * payload, one ZeroMQ frame per chunk (docs/protocol.md "## Frames").
 *
 * Why a fixed header and not a self-describing format: every frame is
 * checked before anything is allocated (R5.5, R8.2), and a fixed layout
 * makes that a handful of comparisons against named caps; the decoder is
 * a pure function over (buf, len), fuzzed by tests/fuzz/fuzz_frame.c.
 * Fields are read with explicit shifts, never by copying a struct onto the
 * wire (R7.6), so the layout does not depend on the compiler.
 *
 * The crc32c covers the payload, then header bytes 0..59 (in that order,
 * so a frame built ahead of time is numbered and re-sealed by hashing only
 * its header: net_frame_seal). CURVE already
 * authenticates every byte on secure links; the crc catches bugs in our
 * own chunking and the insecure mode, where nothing else would.
 *
 * Also here: the payloads of HELLO and REFUSE, the other frames of the
 * handshake's wire format.
 */
#include "rumor/net.h"

#include "core/le.h"
#include "net/net_impl.h"

#include <string.h>

/* --- frames --------------------------------------------------------------- */

#define OFF_MAGIC       0
#define OFF_VERSION     4
#define OFF_KIND        5
#define OFF_CODEC       6
#define OFF_FLAGS       7
#define OFF_SENDER      8
#define OFF_ROUND       12
#define OFF_STEP        16
#define OFF_SEQ         24
#define OFF_STOP        32
#define OFF_CHUNK       36
#define OFF_CHUNKS      40
#define OFF_PAYLOAD_LEN 44
#define OFF_RESERVED    48 /* 8 bytes, zero (version 2's count) */
#define OFF_TOTAL_LEN   56
#define OFF_CRC         60

bool
net_kind_is_message(uint8_t kind)
{
    return kind >= RUMOR_NET_KIND_GOSSIP && kind <= RUMOR_NET_KIND_MAX;
}

bool
net_kind_has_step(uint8_t kind)
{
    return kind == RUMOR_NET_KIND_GOSSIP || kind == RUMOR_NET_KIND_PROBE ||
           kind == RUMOR_NET_KIND_ACK || kind == RUMOR_NET_KIND_PING;
}

const char *
rumor_net_kind_name(uint8_t kind)
{
    static const char *const names[] = {"unknown",
                                        "hello",
                                        "hello-ok",
                                        "refuse",
                                        "heartbeat",
                                        "gossip",
                                        "probe",
                                        "ack",
                                        "sync",
                                        "sync-answer",
                                        "state",
                                        "ping",
                                        "member"};
    return kind <= RUMOR_NET_KIND_MAX ? names[kind] : names[0];
}

bool
net_kind_fields_fit(uint8_t kind, uint32_t round, uint32_t stop, uint8_t codec)
{
    if (kind < RUMOR_NET_KIND_HELLO || kind > RUMOR_NET_KIND_MAX)
        return false;
    return kind == RUMOR_NET_KIND_GOSSIP ||
           (round == 0 && stop == 0 && codec == 0);
}

rumor_err
net_frame_build(const struct rumor_net_header *h,
                const void *payload,
                uint8_t *out,
                size_t out_cap,
                size_t *written,
                uint32_t *payload_crc)
{
    assert(h != NULL);
    assert(out != NULL);
    assert(written != NULL);
    assert(payload_crc != NULL);
    *written = 0;
    *payload_crc = 0;
    if (h->chunks == 0 || h->chunk >= h->chunks ||
        h->payload_len > h->total_len || h->payload_len > RUMOR_NET_CHUNK_MAX ||
        !net_kind_fields_fit(h->kind, h->round, h->stop, h->codec))
        return RUMOR_EINVAL;
    if (h->payload_len > 0 && payload == NULL)
        return RUMOR_EINVAL;
    if (out_cap < RUMOR_NET_HEADER_BYTES ||
        out_cap - RUMOR_NET_HEADER_BYTES < h->payload_len)
        return RUMOR_ETOOBIG;
    core_put_u32(out + OFF_MAGIC, RUMOR_NET_MAGIC);
    out[OFF_VERSION] = h->version;
    out[OFF_KIND] = h->kind;
    out[OFF_CODEC] = h->codec;
    out[OFF_FLAGS] = 0;
    core_put_u32(out + OFF_SENDER, h->sender);
    core_put_u32(out + OFF_ROUND, h->round);
    core_put_u64(out + OFF_STEP, h->step);
    core_put_u64(out + OFF_SEQ, h->seq);
    core_put_u32(out + OFF_STOP, h->stop);
    core_put_u32(out + OFF_CHUNK, h->chunk);
    core_put_u32(out + OFF_CHUNKS, h->chunks);
    core_put_u32(out + OFF_PAYLOAD_LEN, h->payload_len);
    core_put_u64(out + OFF_RESERVED, 0);
    core_put_u32(out + OFF_TOTAL_LEN, h->total_len);
    if (h->payload_len > 0)
        memcpy(out + RUMOR_NET_HEADER_BYTES, payload, h->payload_len);
    *payload_crc =
        rumor_crc32c(0, out + RUMOR_NET_HEADER_BYTES, h->payload_len);
    net_frame_seal(out, h->seq, *payload_crc);
    *written = RUMOR_NET_HEADER_BYTES + (size_t)h->payload_len;
    return RUMOR_OK;
}

void
net_frame_seal(uint8_t *frame, uint64_t seq, uint32_t payload_crc)
{
    assert(frame != NULL);
    core_put_u64(frame + OFF_SEQ, seq);
    /* payload first, then the header: the sending thread computes the
     * payload's part once, and the I/O thread only re-seals 60 bytes when
     * it numbers the frame */
    core_put_u32(frame + OFF_CRC, rumor_crc32c(payload_crc, frame, OFF_CRC));
}

rumor_err
rumor_net_frame_encode(const struct rumor_net_header *h,
                       const void *payload,
                       uint8_t *out,
                       size_t out_cap,
                       size_t *written)
{
    uint32_t payload_crc = 0;
    return net_frame_build(h, payload, out, out_cap, written, &payload_crc);
}

rumor_err
rumor_net_frame_decode(const uint8_t *buf,
                       size_t len,
                       size_t max_message,
                       struct rumor_net_header *out,
                       const uint8_t **payload)
{
    assert(out != NULL);
    assert(payload != NULL);
    memset(out, 0, sizeof *out);
    *payload = NULL;
    if (buf == NULL || len < RUMOR_NET_HEADER_BYTES)
        return RUMOR_EPROTO;
    if (core_get_u32(buf + OFF_MAGIC) != RUMOR_NET_MAGIC)
        return RUMOR_EPROTO;
    if (buf[OFF_VERSION] != RUMOR_NET_VERSION)
        return RUMOR_EPROTO;
    uint32_t round = core_get_u32(buf + OFF_ROUND);
    uint32_t stop = core_get_u32(buf + OFF_STOP);
    if (!net_kind_fields_fit(buf[OFF_KIND], round, stop, buf[OFF_CODEC]) ||
        buf[OFF_FLAGS] != 0 || core_get_u64(buf + OFF_RESERVED) != 0)
        return RUMOR_EPROTO;
    uint32_t chunk = core_get_u32(buf + OFF_CHUNK);
    uint32_t chunks = core_get_u32(buf + OFF_CHUNKS);
    uint32_t payload_len = core_get_u32(buf + OFF_PAYLOAD_LEN);
    uint32_t total_len = core_get_u32(buf + OFF_TOTAL_LEN);
    if (chunks == 0 || chunk >= chunks)
        return RUMOR_EPROTO;
    if (payload_len > RUMOR_NET_CHUNK_MAX || total_len > max_message)
        return RUMOR_ETOOBIG;
    /* compare against what is left, never ptr + n (R8.3) */
    if (payload_len != len - RUMOR_NET_HEADER_BYTES || payload_len > total_len)
        return RUMOR_EPROTO;
    uint32_t crc = rumor_crc32c(0, buf + RUMOR_NET_HEADER_BYTES, payload_len);
    crc = rumor_crc32c(crc, buf, OFF_CRC);
    if (crc != core_get_u32(buf + OFF_CRC))
        return RUMOR_EPROTO;
    out->version = buf[OFF_VERSION];
    out->kind = buf[OFF_KIND];
    out->codec = buf[OFF_CODEC];
    out->sender = core_get_u32(buf + OFF_SENDER);
    out->round = round;
    out->step = core_get_u64(buf + OFF_STEP);
    out->seq = core_get_u64(buf + OFF_SEQ);
    out->stop = stop;
    out->chunk = chunk;
    out->chunks = chunks;
    out->payload_len = payload_len;
    out->total_len = total_len;
    out->crc = crc;
    *payload = buf + RUMOR_NET_HEADER_BYTES;
    return RUMOR_OK;
}

/* --- HELLO and REFUSE ----------------------------------------------------- */

void
rumor_net_hello_encode(const struct rumor_net_hello *h,
                       uint8_t out[RUMOR_NET_HELLO_BYTES])
{
    assert(h != NULL);
    core_put_u64(out, h->fingerprint);
    core_put_u64(out + 8, h->epoch);
    core_put_u32(out + 16, h->max_message);
    core_put_u32(out + 20, h->chunk_bytes);
}

rumor_err
rumor_net_hello_decode(const uint8_t *buf,
                       size_t len,
                       struct rumor_net_hello *out)
{
    assert(out != NULL);
    memset(out, 0, sizeof *out);
    if (buf == NULL || len < RUMOR_NET_HELLO_BYTES ||
        len - RUMOR_NET_HELLO_BYTES > RUMOR_NET_HELLO_DESC_MAX)
        return RUMOR_EPROTO;
    uint32_t chunk = core_get_u32(buf + 20);
    if (chunk < RUMOR_NET_CHUNK_MIN || chunk > RUMOR_NET_CHUNK_MAX)
        return RUMOR_EPROTO;
    out->fingerprint = core_get_u64(buf);
    out->epoch = core_get_u64(buf + 8);
    out->max_message = core_get_u32(buf + 16);
    out->chunk_bytes = chunk;
    out->desc = buf + RUMOR_NET_HELLO_BYTES;
    out->desc_len = len - RUMOR_NET_HELLO_BYTES;
    return RUMOR_OK;
}

size_t
rumor_net_refuse_encode(uint32_t reason,
                        const char *text,
                        uint8_t *out,
                        size_t out_cap)
{
    assert(text != NULL);
    assert(out != NULL);
    if (out_cap < 4)
        return 0;
    size_t n = strlen(text);
    if (n > RUMOR_NET_REFUSE_TEXT_MAX)
        n = RUMOR_NET_REFUSE_TEXT_MAX;
    if (n > out_cap - 4)
        n = out_cap - 4;
    core_put_u32(out, reason);
    for (size_t i = 0; i < n; i++) {
        char c = text[i];
        out[4 + i] = (uint8_t)((c >= 0x20 && c < 0x7f) ? c : '?');
    }
    return 4 + n;
}

rumor_err
rumor_net_refuse_decode(const uint8_t *buf,
                        size_t len,
                        uint32_t *reason,
                        char text[RUMOR_NET_REFUSE_TEXT_MAX + 1])
{
    assert(reason != NULL);
    assert(text != NULL);
    *reason = 0;
    text[0] = '\0';
    if (buf == NULL || len < 4 || len - 4 > RUMOR_NET_REFUSE_TEXT_MAX)
        return RUMOR_EPROTO;
    for (size_t i = 4; i < len; i++)
        if (buf[i] < 0x20 || buf[i] >= 0x7f)
            return RUMOR_EPROTO;
    *reason = core_get_u32(buf);
    memcpy(text, buf + 4, len - 4);
    text[len - 4] = '\0';
    return RUMOR_OK;
}
