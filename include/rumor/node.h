/*
 * node: the runtime a user runs, built on the training pieces of
 * rumor/train.h:
 *   - the node process (`rumor node`): its options (by name, from an INI
 *     file), the run (workload, optimizer, gossip algorithm and transport;
 *     steps with deadlines, the fault path, stop and resume) and its
 *     summary;
 *   - the peer: the same runtime under the caller's own training loop and
 *     tensors (the python/rumor package is built on it);
 *   - checkpoint files: the crc-checked container the node writes durably
 *     and resumes from.
 *
 * Thread safety: an object is used by one thread at a time; distinct
 * objects may be used concurrently. rumor_node_stop may be called from
 * another thread, it and rumor_peer_stop from a signal handler.
 * Ownership: every object is owned by its creator and freed with its
 * _destroy(&p); borrowed pointers are named in each contract.
 *
 * This is the module's public header; its declarations are kept in parts
 * by concern, each of which compiles on its own:
 *   rumor/node/config.h      the options, by name and from an INI file
 *   rumor/node/run.h         the node process: build, run, stop, summary
 *   rumor/node/peer.h        the peer API over the caller's tensors
 *   rumor/node/checkpoint.h  checkpoint files
 */
#ifndef RUMOR_NODE_H
#define RUMOR_NODE_H

#include "rumor/node/checkpoint.h"
#include "rumor/node/config.h"
#include "rumor/node/peer.h"
#include "rumor/node/run.h"

#endif /* RUMOR_NODE_H */
