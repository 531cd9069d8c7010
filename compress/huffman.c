/*
 * Canonical Huffman coding of byte symbols: the entropy stage of the fp8 and
 * fp4 codecs (CO3, Chen et al., section IV-A(ii)), usable alone through
 * rumor_huffman_encode/decode and as the lossless `huffman` codec (the four
 * byte planes of float32, each with its own code: the exponent plane is
 * where the redundancy of a gradient sits).
 *
 * Stream: the code lengths (4 bits per symbol of the alphabet, 0 = unused,
 * low nibble first), then the codes LSB-first, each code bit-reversed so
 * that a decoder peeks 12 bits and finds (symbol, length) in one table
 * lookup (the DEFLATE/zstd arrangement). The symbols are cut into four
 * segments coded as four bit streams (sizes in the header), as zstd's
 * 4-stream Huffman does: one stream is a chain of dependent lookups (about
 * seven cycles a symbol), four interleaved chains overlap. Lengths are limited
 * to 12 bits: a Huffman tree is built with the two-queue method on sorted
 * counts, lengths over 12 are cut to 12 and the Kraft sum is repaired by
 * lengthening the least frequent short codes, then refilled by shortening the
 * most frequent ones; this costs a fraction of a percent against the unlimited
 * code only when symbols rarer than 2^-12 exist. Package-merge (optimal) was
 * rejected for its code size against a gain that the benchmark does not show.
 *
 * The decoder accepts only a complete prefix code (Kraft sum exactly 1) or
 * a single symbol of length 1, so every 12-bit window either decodes or is
 * rejected, and checks that the stream ends exactly where the n-th symbol
 * does.
 */
#include "compress/huffman.h"
#include "compress/compress_impl.h"
#include "core/bits.h"

#include <stdlib.h>

_Static_assert(HUFFMAN_STREAMS == 4,
               "huffman_decode's fast loop is written out for four streams");

/* --- code construction --------------------------------------------------- */

static int
s_count_cmp(const void *a, const void *b, const uint64_t *count)
{
    uint32_t p = *(const uint32_t *)a, q = *(const uint32_t *)b;
    if (count[p] != count[q])
        return count[p] < count[q] ? -1 : 1;
    return p < q ? -1 : p > q;
}

/* Insertion sort of at most 256 symbols by (count, symbol). */
static void
s_sort_symbols(uint32_t *sym, unsigned m, const uint64_t *count)
{
    for (unsigned i = 1; i < m; i++) {
        uint32_t v = sym[i];
        unsigned j = i;
        while (j > 0 && s_count_cmp(&sym[j - 1], &v, count) > 0) {
            sym[j] = sym[j - 1];
            j--;
        }
        sym[j] = v;
    }
}

void
huffman_lengths(const uint64_t *count, unsigned alphabet, uint8_t *len)
{
    uint32_t sym[256];
    unsigned m = 0;
    memset(len, 0, alphabet);
    for (unsigned s = 0; s < alphabet; s++)
        if (count[s] > 0)
            sym[m++] = s;
    if (m == 0)
        return;
    if (m == 1) {
        len[sym[0]] = 1;
        return;
    }
    s_sort_symbols(sym, m, count);
    /* Two-queue Huffman: leaves 0..m-1 (sorted), internal nodes m.. */
    uint64_t weight[512];
    uint32_t parent[512];
    for (unsigned i = 0; i < m; i++)
        weight[i] = count[sym[i]];
    unsigned leaf = 0, node = m, next = m;
    for (unsigned made = 0; made < m - 1; made++) {
        uint32_t pick[2];
        for (int t = 0; t < 2; t++) {
            if (leaf < m && (node >= next || weight[leaf] <= weight[node]))
                pick[t] = leaf++;
            else
                pick[t] = node++;
        }
        weight[next] = weight[pick[0]] + weight[pick[1]];
        parent[pick[0]] = parent[pick[1]] = next;
        next++;
    }
    unsigned depth[512];
    depth[next - 1] = 0;
    for (unsigned i = next - 1; i-- > 0;)
        depth[i] = depth[parent[i]] + 1;
    /* Limit to HUFFMAN_MAX_BITS and repair the Kraft sum (in units of
     * 2^-HUFFMAN_MAX_BITS). sym[] is in increasing count order. */
    const int64_t full = 1 << HUFFMAN_MAX_BITS;
    int64_t kraft = 0;
    unsigned l[256];
    for (unsigned i = 0; i < m; i++) {
        l[i] = depth[i] > HUFFMAN_MAX_BITS ? HUFFMAN_MAX_BITS : depth[i];
        kraft += (int64_t)1 << (HUFFMAN_MAX_BITS - l[i]);
    }
    while (kraft > full) {
        /* Lengthen the least frequent code that is still short. */
        for (unsigned i = 0; i < m && kraft > full; i++) {
            if (l[i] < HUFFMAN_MAX_BITS) {
                kraft -= (int64_t)1 << (HUFFMAN_MAX_BITS - l[i] - 1);
                l[i]++;
            }
        }
    }
    for (unsigned i = m; i-- > 0 && kraft < full;) {
        /* Shorten the most frequent codes while the sum allows. */
        while (l[i] > 1 &&
               kraft + ((int64_t)1 << (HUFFMAN_MAX_BITS - l[i])) <= full) {
            kraft += (int64_t)1 << (HUFFMAN_MAX_BITS - l[i]);
            l[i]--;
        }
    }
    for (unsigned i = 0; i < m; i++)
        len[sym[i]] = (uint8_t)l[i];
}

/* Canonical codes from lengths, bit-reversed for LSB-first output. */
static void
s_codes(const uint8_t *len, unsigned alphabet, uint16_t *code)
{
    unsigned bl_count[HUFFMAN_MAX_BITS + 1] = {0};
    unsigned next_code[HUFFMAN_MAX_BITS + 2] = {0};
    for (unsigned s = 0; s < alphabet; s++)
        bl_count[len[s]]++;
    bl_count[0] = 0;
    unsigned c = 0;
    for (unsigned b = 1; b <= HUFFMAN_MAX_BITS; b++) {
        c = (c + bl_count[b - 1]) << 1;
        next_code[b] = c;
    }
    for (unsigned s = 0; s < alphabet; s++) {
        unsigned l = len[s];
        if (l == 0) {
            code[s] = 0;
            continue;
        }
        unsigned v = next_code[l]++, r = 0;
        for (unsigned b = 0; b < l; b++)
            r |= ((v >> b) & 1u) << (l - 1 - b);
        code[s] = (uint16_t)r;
    }
}

rumor_err
huffman_table(const uint8_t *len, unsigned alphabet, uint16_t *table)
{
    int64_t kraft = 0;
    unsigned used = 0;
    for (unsigned s = 0; s < alphabet; s++) {
        if (len[s] > HUFFMAN_MAX_BITS)
            return RUMOR_EPROTO;
        if (len[s] > 0) {
            kraft += (int64_t)1 << (HUFFMAN_MAX_BITS - len[s]);
            used++;
        }
    }
    bool single = used == 1 && kraft == (1 << (HUFFMAN_MAX_BITS - 1));
    if (used > 0 && kraft != (1 << HUFFMAN_MAX_BITS) && !single)
        return RUMOR_EPROTO;
    uint16_t code[256];
    s_codes(len, alphabet, code);
    memset(table, 0, sizeof(uint16_t) << HUFFMAN_MAX_BITS);
    for (unsigned s = 0; s < alphabet; s++) {
        unsigned l = len[s];
        if (l == 0)
            continue;
        for (unsigned f = 0; f < (1u << (HUFFMAN_MAX_BITS - l)); f++)
            table[code[s] | f << l] = (uint16_t)(s << 4 | l);
    }
    return RUMOR_OK;
}

/* --- encode / decode ---------------------------------------------------- */

size_t
huffman_bound(size_t n, unsigned alphabet)
{
    /* Each stream may end in a partly used byte. */
    return alphabet / 2 + 4 * (HUFFMAN_STREAMS - 1) +
           (n * HUFFMAN_MAX_BITS + 7) / 8 + HUFFMAN_STREAMS;
}

void
huffman_histogram(const uint8_t *sym, size_t n, uint64_t *count)
{
    uint32_t h[4][256];
    memset(h, 0, sizeof h);
    memset(count, 0, 256 * sizeof *count);
    size_t i = 0;
    for (; i + 4 <= n; i += 4) {
        h[0][sym[i]]++;
        h[1][sym[i + 1]]++;
        h[2][sym[i + 2]]++;
        h[3][sym[i + 3]]++;
        if ((i & 0xfffffu) == 0) { /* flush before 32-bit counts wrap */
            for (int s = 0; s < 256; s++) {
                count[s] += (uint64_t)h[0][s] + h[1][s] + h[2][s] + h[3][s];
                h[0][s] = h[1][s] = h[2][s] = h[3][s] = 0;
            }
        }
    }
    for (; i < n; i++)
        count[sym[i]]++;
    for (int s = 0; s < 256; s++)
        count[s] += (uint64_t)h[0][s] + h[1][s] + h[2][s] + h[3][s];
}

/* Symbols [at, at + count) of stream j: four nearly equal segments. */
static void
s_segment(size_t n, unsigned j, size_t *at, size_t *count)
{
    size_t q = (n + HUFFMAN_STREAMS - 1) / HUFFMAN_STREAMS;
    size_t lo = (size_t)j * q < n ? (size_t)j * q : n;
    size_t hi = (size_t)(j + 1) * q < n ? (size_t)(j + 1) * q : n;
    *at = lo;
    *count = hi - lo;
}

rumor_err
huffman_encode(const uint8_t *sym,
               size_t n,
               unsigned alphabet,
               uint8_t *out,
               size_t cap,
               size_t *written)
{
    uint64_t count[256];
    uint8_t len[256];
    huffman_histogram(sym, n, count);
    huffman_lengths(count, alphabet, len);
    return huffman_encode_lengths(sym, n, alphabet, len, out, cap, written);
}

rumor_err
huffman_encode_lengths(const uint8_t *sym,
                       size_t n,
                       unsigned alphabet,
                       const uint8_t *len,
                       uint8_t *out,
                       size_t cap,
                       size_t *written)
{
    uint16_t code[256];
    size_t head = alphabet / 2 + 4 * (HUFFMAN_STREAMS - 1);
    *written = 0;
    if (cap < head)
        return RUMOR_ETOOBIG;
    s_codes(len, alphabet, code);
    for (unsigned s = 0; s < alphabet; s += 2)
        out[s / 2] = (uint8_t)(len[s] | len[s + 1] << 4);
    size_t at = head;
    for (unsigned j = 0; j < HUFFMAN_STREAMS; j++) {
        size_t first = 0, m = 0;
        s_segment(n, j, &first, &m);
        const uint8_t *seg = sym + first;
        struct core_bw w;
        core_bw_init(&w, out + at, cap - at);
        /* Two codes per write: 2 x 12 bits fit the writer's 32. */
        size_t i = 0;
        for (; i + 2 <= m; i += 2) {
            unsigned a = seg[i], b = seg[i + 1];
            core_bw_put(&w,
                        code[a] | (uint32_t)code[b] << len[a],
                        len[a] + len[b]);
        }
        for (; i < m; i++)
            core_bw_put(&w, code[seg[i]], len[seg[i]]);
        size_t body = core_bw_finish(&w, out + at);
        if (body == SIZE_MAX)
            return RUMOR_ETOOBIG;
        if (j < HUFFMAN_STREAMS - 1)
            core_put_u32(out + alphabet / 2 + 4 * j, (uint32_t)body);
        at += body;
    }
    *written = at;
    return RUMOR_OK;
}

/* Finishes one stream symbol by symbol, checking every read. */
static rumor_err
s_decode_tail(struct core_br *r,
              const uint16_t *table,
              uint8_t *sym,
              size_t from,
              size_t count)
{
    for (size_t i = from; i < count; i++) {
        uint16_t e = table[core_br_peek(r, HUFFMAN_MAX_BITS)];
        unsigned l = e & 15u;
        if (l == 0)
            return RUMOR_EPROTO;
        core_br_skip(r, l);
        if (r->overrun)
            return RUMOR_EPROTO;
        sym[i] = (uint8_t)(e >> 4);
    }
    return RUMOR_OK;
}

rumor_err
huffman_decode(const uint8_t *in,
               size_t len,
               unsigned alphabet,
               uint8_t *sym,
               size_t n)
{
    uint8_t lens[256];
    uint16_t table[1u << HUFFMAN_MAX_BITS];
    size_t head = alphabet / 2 + 4 * (HUFFMAN_STREAMS - 1);
    if (len < head)
        return RUMOR_EPROTO;
    for (unsigned s = 0; s < alphabet; s += 2) {
        lens[s] = in[s / 2] & 0x0f;
        lens[s + 1] = in[s / 2] >> 4;
    }
    rumor_err rc = huffman_table(lens, alphabet, table);
    if (rc != RUMOR_OK)
        return rc;
    /* Stream boundaries: three sizes, the last stream takes the rest. */
    struct core_br r[HUFFMAN_STREAMS];
    const uint8_t *start[HUFFMAN_STREAMS];
    size_t size[HUFFMAN_STREAMS], first[HUFFMAN_STREAMS], cnt[HUFFMAN_STREAMS];
    size_t at = head;
    for (unsigned j = 0; j < HUFFMAN_STREAMS; j++) {
        size_t sz = j < HUFFMAN_STREAMS - 1
                        ? core_get_u32(in + alphabet / 2 + 4 * j)
                        : len - at;
        if (sz > len - at)
            return RUMOR_EPROTO;
        s_segment(n, j, &first[j], &cnt[j]);
        if (cnt[j] > 0 && sz == 0)
            return RUMOR_EPROTO;
        start[j] = in + at;
        size[j] = sz;
        core_br_init(&r[j], in + at, sz);
        at += sz;
    }
    /* Fast loop: the four streams in lockstep (independent dependency
     * chains), four symbols each per refill while 8 input bytes remain.
     * The windows live in locals: the byte stores to sym may alias any
     * memory, so windows kept in the reader structs would be reloaded
     * after every store. */
    const uint64_t mask = (1u << HUFFMAN_MAX_BITS) - 1;
    size_t i = 0;
    size_t lock = cnt[HUFFMAN_STREAMS - 1]; /* the shortest segment */
    /* Bit positions instead of reader structs: a window is reloaded from
     * its stream at each refill, so only (window, position) per stream
     * stays in registers. */
    size_t q0 = 0, q1 = 0, q2 = 0, q3 = 0; /* bits consumed per stream */
    uint8_t *o0 = sym + first[0], *o1 = sym + first[1];
    uint8_t *o2 = sym + first[2], *o3 = sym + first[3];
    unsigned bad = 0;
    while (i + 4 <= lock && q0 / 8 + 8 <= size[0] && q1 / 8 + 8 <= size[1] &&
           q2 / 8 + 8 <= size[2] && q3 / 8 + 8 <= size[3]) {
        uint64_t a0 = core_get_u64(start[0] + q0 / 8) >> (q0 & 7);
        uint64_t a1 = core_get_u64(start[1] + q1 / 8) >> (q1 & 7);
        uint64_t a2 = core_get_u64(start[2] + q2 / 8) >> (q2 & 7);
        uint64_t a3 = core_get_u64(start[3] + q3 / 8) >> (q3 & 7);
        for (int t = 0; t < 4; t++, i++) {
            /* At least 57 fresh bits, 4 codes of <= 12 bits: no refill. */
            uint16_t e0 = table[a0 & mask], e1 = table[a1 & mask];
            uint16_t e2 = table[a2 & mask], e3 = table[a3 & mask];
            unsigned l0 = e0 & 15u, l1 = e1 & 15u, l2 = e2 & 15u, l3 = e3 & 15u;
            bad |= (l0 == 0) | (l1 == 0) | (l2 == 0) | (l3 == 0);
            o0[i] = (uint8_t)(e0 >> 4);
            o1[i] = (uint8_t)(e1 >> 4);
            o2[i] = (uint8_t)(e2 >> 4);
            o3[i] = (uint8_t)(e3 >> 4);
            a0 >>= l0;
            a1 >>= l1;
            a2 >>= l2;
            a3 >>= l3;
            q0 += l0;
            q1 += l1;
            q2 += l2;
            q3 += l3;
        }
        if (bad)
            return RUMOR_EPROTO;
    }
    const size_t used[HUFFMAN_STREAMS] = {q0, q1, q2, q3};
    for (unsigned j = 0; j < HUFFMAN_STREAMS; j++) {
        core_br_init(&r[j], start[j] + used[j] / 8, size[j] - used[j] / 8);
        core_br_skip(&r[j], (unsigned)(used[j] & 7));
    }
    for (unsigned j = 0; j < HUFFMAN_STREAMS; j++) {
        rc = s_decode_tail(&r[j], table, sym + first[j], i, cnt[j]);
        if (rc != RUMOR_OK)
            return rc;
        if (core_br_used(&r[j], start[j]) != size[j])
            return RUMOR_EPROTO;
    }
    return RUMOR_OK;
}

/* --- public byte API ---------------------------------------------------- */

size_t
rumor_huffman_bound(size_t n)
{
    return huffman_bound(n, 256);
}

rumor_err
rumor_huffman_encode(const uint8_t *in,
                     size_t n,
                     uint8_t *out,
                     size_t cap,
                     size_t *written)
{
    return huffman_encode(in, n, 256, out, cap, written);
}

rumor_err
rumor_huffman_decode(const uint8_t *in, size_t len, uint8_t *out, size_t n)
{
    if (in == NULL || (n > 0 && out == NULL))
        return RUMOR_EPROTO;
    return huffman_decode(in, len, 256, out, n);
}

/* --- the lossless `huffman` codec: four byte planes ------------------------
 */

static void
s_codec_size(const rumor_codec *c, size_t n, size_t *bytes, bool *exact)
{
    (void)c;
    *bytes = RUMOR_COMPRESS_HEADER_BYTES + 4 * (4 + huffman_bound(n, 256));
    *exact = false;
}

static rumor_err
s_codec_encode(const rumor_codec *c,
               const float *x,
               size_t n,
               uint64_t seed,
               uint64_t counter,
               uint8_t *out,
               size_t cap,
               size_t *written,
               float *approx)
{
    (void)seed;
    (void)counter;
    rumor_err rc = RUMOR_OK;
    uint8_t *plane = malloc(n ? n : 1);
    if (plane == NULL)
        return RUMOR_ENOMEM;
    size_t at = RUMOR_COMPRESS_HEADER_BYTES;
    for (unsigned b = 0; b < 4; b++) {
        for (size_t i = 0; i < n; i++)
            plane[i] = (uint8_t)(compress_f2u(x[i]) >> (8 * b));
        size_t got = 0;
        if (cap - at < 4) {
            rc = RUMOR_ETOOBIG;
            goto done;
        }
        rc = huffman_encode(plane, n, 256, out + at + 4, cap - at - 4, &got);
        if (rc != RUMOR_OK)
            goto done;
        core_put_u32(out + at, (uint32_t)got);
        at += 4 + got;
    }
    struct compress_header h =
        {(uint8_t)c->id, RUMOR_COMPRESS_VERSION, 0, 0, (uint32_t)n, 0};
    compress_header_write(out, &h);
    if (approx != NULL && n > 0)
        memcpy(approx, x, n * sizeof *x);
    *written = at;
done:
    free(plane);
    return rc;
}

static rumor_err
s_codec_decode(const rumor_codec *c,
               const uint8_t *in,
               size_t len,
               bool add,
               float alpha,
               float *y,
               size_t n)
{
    (void)c;
    rumor_err rc = RUMOR_OK;
    uint8_t *plane = NULL;
    uint32_t *word = NULL;
    if (in[2] != 0 || in[3] != 0 || core_get_u32(in + 8) != 0)
        return RUMOR_EPROTO;
    /* Every plane needs at least its length word and table: check the
     * total before allocating anything sized by n. */
    if (len - RUMOR_COMPRESS_HEADER_BYTES <
        4 * (4 + 128 + 4 * (HUFFMAN_STREAMS - 1)))
        return RUMOR_EPROTO;
    plane = malloc(n ? n : 1);
    word = calloc(n ? n : 1, sizeof *word);
    if (plane == NULL || word == NULL) {
        rc = RUMOR_ENOMEM;
        goto done;
    }
    size_t at = RUMOR_COMPRESS_HEADER_BYTES;
    for (unsigned b = 0; b < 4; b++) {
        if (len - at < 4) {
            rc = RUMOR_EPROTO;
            goto done;
        }
        uint32_t plen = core_get_u32(in + at);
        if (plen > len - at - 4) {
            rc = RUMOR_EPROTO;
            goto done;
        }
        rc = huffman_decode(in + at + 4, plen, 256, plane, n);
        if (rc != RUMOR_OK)
            goto done;
        for (size_t i = 0; i < n; i++)
            word[i] |= (uint32_t)plane[i] << (8 * b);
        at += 4 + plen;
    }
    if (at != len) {
        rc = RUMOR_EPROTO;
        goto done;
    }
    for (size_t i = 0; i < n; i++) {
        if ((word[i] & 0x7f800000u) == 0x7f800000u) {
            rc = RUMOR_ENUMERIC;
            goto done;
        }
    }
    for (size_t i = 0; i < n; i++) {
        float v = compress_u2f(word[i]);
        y[i] = add ? y[i] + alpha * v : v;
    }
done:
    free(plane);
    free(word);
    return rc;
}

const struct compress_ops compress_huffman_ops = {s_codec_size,
                                                  s_codec_encode,
                                                  false,
                                                  s_codec_decode};
