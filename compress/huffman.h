/*
 * compress module-private: canonical Huffman over an alphabet of 16 or 256
 * byte symbols (huffman.c), shared by the fp8/fp4 codecs and the byte API.
 */
#ifndef RUMOR_COMPRESS_HUFFMAN_H
#define RUMOR_COMPRESS_HUFFMAN_H

#include "compress/compress_impl.h"

/* Longest code; the decoder's table has 2^HUFFMAN_MAX_BITS entries. */
#define HUFFMAN_MAX_BITS 12
/* Symbols are split into this many segments, each its own bit stream, so
 * a decoder runs that many independent table-lookup chains at once. */
#define HUFFMAN_STREAMS 4

/* count[256] = occurrences of each byte value in sym[0..n). */
void huffman_histogram(const uint8_t *sym, size_t n, uint64_t *count);

/* Length-limited code lengths (0 = unused) for counts of alphabet symbols. */
void huffman_lengths(const uint64_t *count, unsigned alphabet, uint8_t *len);

/* Decoding table from lengths: entry = symbol << 4 | length, 0 = invalid
 * window. RUMOR_EPROTO unless the lengths form a complete prefix code (or
 * one symbol of length 1). */
rumor_err huffman_table(const uint8_t *len, unsigned alphabet, uint16_t *table);

/* Largest stream for n symbols (length table included). */
size_t huffman_bound(size_t n, unsigned alphabet);

/* Stream = alphabet / 2 bytes of 4-bit lengths, three uint32 sizes of
 * bit streams 0..2, then the four bit streams (stream 3 takes the rest).
 * Symbols must be < alphabet. RUMOR_ETOOBIG when cap is too small. */
rumor_err huffman_encode(const uint8_t *sym,
                         size_t n,
                         unsigned alphabet,
                         uint8_t *out,
                         size_t cap,
                         size_t *written);

/* huffman_encode with the code lengths given (a complete prefix code, or
 * one symbol of length 1, giving every symbol of sym[0..n) a code), e.g.
 * from a model instead of the histogram of sym. */
rumor_err huffman_encode_lengths(const uint8_t *sym,
                                 size_t n,
                                 unsigned alphabet,
                                 const uint8_t *len,
                                 uint8_t *out,
                                 size_t cap,
                                 size_t *written);

/* Decodes exactly n symbols; the stream must end with the last one.
 * RUMOR_EPROTO otherwise. */
rumor_err huffman_decode(const uint8_t *in,
                         size_t len,
                         unsigned alphabet,
                         uint8_t *sym,
                         size_t n);

#endif /* RUMOR_COMPRESS_HUFFMAN_H */
