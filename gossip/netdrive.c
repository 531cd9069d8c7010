/*
 * The network driver: runs one gossip step of an algorithm over a net/
 * transport. Each round: emit, send every message (a DATA frame header
 * carrying step and round, so late or early messages are never confused
 * with this round's), then receive from every sender the algorithm
 * expects, each wait bounded by the step's deadline, then absorb. A
 * sender that misses the deadline is simply absent from the inbox: the
 * algorithm reports RUMOR_ETIMEDOUT and leaves the model unchanged.
 * Messages of older steps are dropped by the transport.
 * The simulator (sim.c) runs the same emit/absorb sequence, so a run with
 * no loss gives the same bits here and there.
 */
#include "gossip/gossip_impl.h"

#include <stdlib.h>
#include <string.h>

static rumor_err
s_send_all(rumor_gossip *g,
           rumor_net *net,
           uint64_t step,
           uint32_t round,
           uint64_t deadline_ns)
{
    const struct rumor_gossip_msg *msgs = NULL;
    size_t count = 0;
    rumor_err rc = rumor_gossip_emit(g, step, round, &msgs, &count);
    for (size_t m = 0; m < count && rc == RUMOR_OK; m++) {
        struct rumor_net_header h = {.type = RUMOR_NET_TYPE_DATA,
                                     .step = step,
                                     .round = round,
                                     .count = msgs[m].len};
        rc = rumor_net_send(net,
                            msgs[m].peer,
                            &h,
                            msgs[m].data,
                            msgs[m].len,
                            deadline_ns);
    }
    return rc;
}

/* Receives what arrives before the deadline from each expected sender. */
static rumor_err
s_receive_all(rumor_gossip *g,
              rumor_net *net,
              uint64_t step,
              uint32_t round,
              uint64_t deadline_ns,
              struct rumor_net_msg *got,
              struct rumor_gossip_msg *inbox,
              size_t *count)
{
    uint64_t sent_ns = rumor_clock_ns(); /* the round's sends just queued */
    uint32_t *peers = malloc(g->nodes * sizeof *peers);
    size_t expected = 0;
    if (peers == NULL)
        return RUMOR_ENOMEM;
    rumor_err rc =
        rumor_gossip_expected(g, step, round, peers, g->nodes, &expected);
    *count = 0;
    for (size_t k = 0; k < expected && rc == RUMOR_OK; k++) {
        rumor_err r = rumor_net_recv(net,
                                     peers[k],
                                     step,
                                     round,
                                     deadline_ns,
                                     &got[*count]);
        if (r == RUMOR_ETIMEDOUT) {
            rumor_log(RUMOR_LOG_WARN,
                      "gossip: node %u step %llu round %u: nothing from %u "
                      "before the deadline",
                      g->self,
                      (unsigned long long)step + 1,
                      round,
                      peers[k]);
            continue;
        }
        if (r != RUMOR_OK) {
            rc = r;
            break;
        }
        inbox[*count] = (struct rumor_gossip_msg){peers[k],
                                                  got[*count].payload,
                                                  got[*count].len};
        /* adaptive compression measures the links on this traffic */
        rumor_gossip_link_observe(g,
                                  peers[k],
                                  got[*count].len,
                                  rumor_clock_ns() - sent_ns);
        (*count)++;
    }
    free(peers);
    return rc;
}

rumor_err
rumor_gossip_net_step(rumor_gossip *g,
                      rumor_net *net,
                      uint64_t step,
                      uint64_t deadline_ns)
{
    struct rumor_net_msg *got = calloc(g->nodes, sizeof *got);
    struct rumor_gossip_msg *inbox = calloc(g->nodes, sizeof *inbox);
    rumor_err rc = got && inbox ? RUMOR_OK : RUMOR_ENOMEM;
    rumor_net_close_steps_before(net, step);
    uint32_t rounds = rumor_gossip_rounds(g, step);
    for (uint32_t r = 0; r < rounds && rc == RUMOR_OK; r++) {
        size_t count = 0;
        rc = s_send_all(g, net, step, r, deadline_ns);
        if (rc == RUMOR_OK)
            rc =
                s_receive_all(g, net, step, r, deadline_ns, got, inbox, &count);
        if (rc == RUMOR_OK)
            rc = rumor_gossip_absorb(g, step, r, inbox, count);
        for (size_t m = 0; m < count; m++)
            rumor_net_msg_free(&got[m]);
    }
    free(got);
    free(inbox);
    return rc;
}
