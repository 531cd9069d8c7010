/*
 * gossip: decentralized averaging algorithms (docs/gossip.md), written
 * against a transport-agnostic round structure so the same code runs over
 * the network (node/exchange.c) and in an in-process simulator.
 *
 * An algorithm instance (rumor_gossip) lives on one node and works on that
 * node's model, a list of float32 tensors the caller owns. One gossip step
 * is a number of rounds; in each round the node first *emits* at most one
 * message per peer, then *absorbs* the messages its peers emitted to it in
 * the same round. A driver moves the bytes: the simulator (this module) by
 * routing buffers between instances in node order, the node's exchange
 * over the network. Nothing here calls ZeroMQ.
 *
 * Thread safety: one instance is used by one thread at a time.
 * Ownership: the model's tensor memory is borrowed for the instance's
 * life; emitted message buffers are owned by the instance and stay valid
 * until its next emit (absorb never touches them, so a driver may deliver
 * node i's messages after node i has absorbed its own).
 *
 * This is the module's public header; its declarations are kept in parts
 * by concern, each of which compiles on its own:
 *   rumor/gossip/options.h   the model (tensors) and every algorithm's options
 *   rumor/gossip/instance.h  an instance: create, rounds, emit and absorb
 *   rumor/gossip/state.h     state save, load and adopt; a ring's members
 *   rumor/gossip/adapt.h     the adaptive compression controller
 *   rumor/gossip/edges.h     skipping late neighbours: acks and commits
 *   rumor/gossip/sim.h       the in-process simulator and its links
 */
#ifndef RUMOR_GOSSIP_H
#define RUMOR_GOSSIP_H

#include "rumor/gossip/adapt.h"
#include "rumor/gossip/edges.h"
#include "rumor/gossip/instance.h"
#include "rumor/gossip/options.h"
#include "rumor/gossip/sim.h"
#include "rumor/gossip/state.h"

#endif /* RUMOR_GOSSIP_H */
