/*
 * The chunk plan of a copy between host and model memory (issue #31:
 * chunk i + 1's DMA overlaps the host's copy of chunk i through two
 * pinned staging buffers), and copies by it on the reference device and,
 * where there is one, on the GPU: the bytes that come back are the bytes
 * that went in, whatever the length against the chunk.
 */
#include "tests/cmocka_compat.h"

#include "gossip/backend.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Lengths around the chunk's multiples, and one within a chunk. */
static const size_t s_len[] = {1,
                               4093,
                               GOSSIP_COPY_CHUNK - 1,
                               GOSSIP_COPY_CHUNK,
                               GOSSIP_COPY_CHUNK + 1,
                               2 * GOSSIP_COPY_CHUNK,
                               5 * GOSSIP_COPY_CHUNK / 2};
#define S_LENS (sizeof s_len / sizeof s_len[0])

/* The chunks tile [0, bytes) in order, none empty nor over a chunk, and
 * alternate between the two buffers starting at 0. */
static void
test_chunks_tile_the_copy_in_order(void **state)
{
    (void)state;
    assert_int_equal(gossip_copy_chunks(0), 0);
    for (size_t l = 0; l < S_LENS; l++) {
        size_t bytes = s_len[l], n = gossip_copy_chunks(bytes), next = 0;
        assert_int_equal(n,
                         bytes / GOSSIP_COPY_CHUNK +
                             (bytes % GOSSIP_COPY_CHUNK != 0));
        for (size_t i = 0; i < n; i++) {
            struct gossip_copy_chunk c = gossip_copy_chunk_at(bytes, i);
            assert_int_equal(c.offset, next);
            assert_true(c.bytes > 0 && c.bytes <= GOSSIP_COPY_CHUNK);
            assert_int_equal(c.buffer, i % 2);
            next += c.bytes;
        }
        assert_int_equal(next, bytes);
    }
}

/* Down and back up through mem, for every length: the bytes survive and
 * the copy back writes nothing past its end. */
static void
s_round_trip(const struct gossip_backend_i *mem)
{
    /* each length starts l bytes in, so no copy is aligned alike */
    size_t most = s_len[S_LENS - 1];
    uint8_t *src = malloc(most + S_LENS), *back = malloc(most + 1);
    assert_non_null(src);
    assert_non_null(back);
    for (size_t i = 0; i < most + S_LENS; i++)
        src[i] = (uint8_t)(i * 131u + (i >> 12));
    void *dev = NULL;
    assert_int_equal(mem->alloc(most, &dev), RUMOR_OK);
    for (size_t l = 0; l < S_LENS; l++) {
        size_t bytes = s_len[l];
        memset(back, 0xA5, most + 1);
        assert_int_equal(mem->copy(dev, src + l, bytes, GOSSIP_TO_DEVICE),
                         RUMOR_OK);
        assert_int_equal(mem->copy(back, dev, bytes, GOSSIP_TO_HOST), RUMOR_OK);
        assert_memory_equal(back, src + l, bytes);
        assert_int_equal(back[bytes], 0xA5);
    }
    mem->release(dev);
    free(src);
    free(back);
}

static void
test_ref_copies_round_trip(void **state)
{
    (void)state;
    s_round_trip(&gossip_backend_ref);
}

/* On a GPU, through the pinned double buffer; skipped with the reason
 * elsewhere. */
static void
test_cuda_copies_round_trip(void **state)
{
    (void)state;
    const struct gossip_backend_i *cuda = NULL;
    const char *why = NULL;
    if (gossip_backend_cuda(&cuda, &why) != RUMOR_OK) {
        printf("skipped: %s\n", why);
        skip();
    }
    s_round_trip(cuda);
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_chunks_tile_the_copy_in_order),
        cmocka_unit_test(test_ref_copies_round_trip),
        cmocka_unit_test(test_cuda_copies_round_trip),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
