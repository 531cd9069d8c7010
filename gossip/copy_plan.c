#include "gossip/backend.h"

size_t
gossip_copy_chunks(size_t bytes)
{
    return (bytes + GOSSIP_COPY_CHUNK - 1) / GOSSIP_COPY_CHUNK;
}

struct gossip_copy_chunk
gossip_copy_chunk_at(size_t bytes, size_t i)
{
    struct gossip_copy_chunk c;
    c.offset = i * GOSSIP_COPY_CHUNK;
    c.bytes = bytes - c.offset < GOSSIP_COPY_CHUNK ? bytes - c.offset
                                                   : GOSSIP_COPY_CHUNK;
    c.buffer = (unsigned)(i % 2);
    return c;
}
