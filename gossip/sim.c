/*
 * The in-process simulator: every node of a topology in one process, one
 * thread, round by round. All nodes emit (in node order), then each node
 * absorbs the messages addressed to it, listed by sender id. Since an
 * algorithm's result depends only on the messages' contents, never on
 * arrival times, the simulator gives exactly the numbers a network run
 * gives when nothing is lost, and the same bits on every run; it is how
 * algorithms are tested and how consensus experiments run at scale.
 * Bytes are counted as net/ frames them (payload + a header per chunk),
 * per sending node and per directed edge (an n x n table: the simulator
 * is for experiments of up to a few thousand nodes).
 */
#include "rumor/gossip.h"

#include <stdint.h>
#include <stdlib.h>

struct rumor_sim {
    rumor_gossip *const *nodes; /* borrowed */
    size_t n;
    uint64_t *bytes_sent;                 /* per node, headers included */
    uint64_t *edge_bytes, *edge_msgs;     /* n x n, [from * n + to] */
    const struct rumor_gossip_msg **sent; /* per node: emitted this round */
    size_t *sent_count;
    struct rumor_gossip_msg *inbox; /* scratch for one receiver */
    size_t inbox_alloc;
};

uint64_t
rumor_gossip_wire_bytes(size_t len)
{
    uint64_t chunks =
        len == 0 ? 1
                 : (len + RUMOR_FRAME_CHUNK_MAX - 1) / RUMOR_FRAME_CHUNK_MAX;
    return (uint64_t)len + chunks * RUMOR_FRAME_HEADER_BYTES;
}

rumor_err
rumor_sim_new(rumor_gossip *const *nodes, size_t n, rumor_sim **out)
{
    *out = NULL;
    if (n == 0)
        return RUMOR_EINVAL;
    rumor_sim *sim = calloc(1, sizeof *sim);
    if (sim == NULL)
        return RUMOR_ENOMEM;
    sim->nodes = nodes;
    sim->n = n;
    sim->bytes_sent = calloc(n, sizeof *sim->bytes_sent);
    sim->sent = calloc(n, sizeof *sim->sent);
    sim->sent_count = calloc(n, sizeof *sim->sent_count);
    if (n <= SIZE_MAX / sizeof(uint64_t) / n) {
        sim->edge_bytes = calloc(n * n, sizeof *sim->edge_bytes);
        sim->edge_msgs = calloc(n * n, sizeof *sim->edge_msgs);
    }
    if (!sim->bytes_sent || !sim->sent || !sim->sent_count ||
        !sim->edge_bytes || !sim->edge_msgs) {
        rumor_sim_destroy(&sim);
        return RUMOR_ENOMEM;
    }
    *out = sim;
    return RUMOR_OK;
}

void
rumor_sim_destroy(rumor_sim **self_p)
{
    rumor_sim *sim = *self_p;
    if (sim == NULL)
        return;
    free(sim->bytes_sent);
    free(sim->edge_bytes);
    free(sim->edge_msgs);
    free(sim->sent);
    free(sim->sent_count);
    free(sim->inbox);
    free(sim);
    *self_p = NULL;
}

static rumor_err
s_emit_all(rumor_sim *sim, uint64_t step, uint32_t round)
{
    for (size_t i = 0; i < sim->n; i++) {
        rumor_err rc = rumor_gossip_emit(sim->nodes[i],
                                         step,
                                         round,
                                         &sim->sent[i],
                                         &sim->sent_count[i]);
        if (rc != RUMOR_OK)
            return rc;
        for (size_t m = 0; m < sim->sent_count[i]; m++) {
            if (sim->sent[i][m].peer >= sim->n)
                return RUMOR_EINVAL; /* an algorithm bug, not input */
            uint64_t bytes = rumor_gossip_wire_bytes(sim->sent[i][m].len);
            sim->bytes_sent[i] += bytes;
            sim->edge_bytes[i * sim->n + sim->sent[i][m].peer] += bytes;
            sim->edge_msgs[i * sim->n + sim->sent[i][m].peer]++;
        }
    }
    return RUMOR_OK;
}

static rumor_err
s_deliver(rumor_sim *sim, size_t to, uint64_t step, uint32_t round)
{
    size_t count = 0;
    for (size_t i = 0; i < sim->n; i++) {
        for (size_t m = 0; m < sim->sent_count[i]; m++) {
            if (sim->sent[i][m].peer != to)
                continue;
            if (count == sim->inbox_alloc) {
                size_t alloc = sim->inbox_alloc ? 2 * sim->inbox_alloc : 16;
                struct rumor_gossip_msg *inbox =
                    realloc(sim->inbox, alloc * sizeof *inbox);
                if (inbox == NULL)
                    return RUMOR_ENOMEM;
                sim->inbox = inbox;
                sim->inbox_alloc = alloc;
            }
            sim->inbox[count] = sim->sent[i][m];
            sim->inbox[count].peer = (uint32_t)i;
            count++;
        }
    }
    return rumor_gossip_absorb(sim->nodes[to], step, round, sim->inbox, count);
}

rumor_err
rumor_sim_step(rumor_sim *sim, uint64_t step)
{
    uint32_t rounds = rumor_gossip_rounds(sim->nodes[0], step);
    for (size_t i = 1; i < sim->n; i++)
        if (rumor_gossip_rounds(sim->nodes[i], step) != rounds)
            return RUMOR_EINVAL;
    for (uint32_t r = 0; r < rounds; r++) {
        rumor_err rc = s_emit_all(sim, step, r);
        for (size_t i = 0; i < sim->n && rc == RUMOR_OK; i++)
            rc = s_deliver(sim, i, step, r);
        if (rc != RUMOR_OK)
            return rc;
    }
    return RUMOR_OK;
}

uint64_t
rumor_sim_bytes_sent(const rumor_sim *sim, size_t node)
{
    return sim->bytes_sent[node];
}

uint64_t
rumor_sim_bytes_edge(const rumor_sim *sim, size_t from, size_t to)
{
    return from < sim->n && to < sim->n ? sim->edge_bytes[from * sim->n + to]
                                        : 0;
}

uint64_t
rumor_sim_messages_edge(const rumor_sim *sim, size_t from, size_t to)
{
    return from < sim->n && to < sim->n ? sim->edge_msgs[from * sim->n + to]
                                        : 0;
}
