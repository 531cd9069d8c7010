/*
 * topology: the graph of nodes, their endpoints and public keys, and the
 * symmetric doubly stochastic mixing matrix W (docs/topology.md).
 *
 * A topology has one or more phases. A static graph has one; a
 * time-varying graph (the one-peer exponential graph) has K, and step t
 * uses phase t mod K. Every phase is checked on its own (symmetric,
 * non-negative, rows summing to 1); connectivity is checked on the union.
 *
 * File format (line based; '#' after white space or at the start of a
 * line starts a comment, inside a token it is part of it, as in Z85 keys):
 *   nodes N                          optional; else the number of node lines
 *   node ID ENDPOINT [key=ed25519:Z85]  ENDPOINT: tcp://host:port, ipc://path
 *   edge A B [WEIGHT]                weight default: Metropolis-Hastings
 *   phase P                          following edges belong to phase P
 *   matrix N                         then N rows of N weights (dense W)
 *
 * Thread safety: a topology is immutable after it is built, so concurrent
 * readers are safe. Ownership: returned arrays and strings are borrowed and
 * live as long as the topology.
 */
#ifndef RUMOR_TOPOLOGY_H
#define RUMOR_TOPOLOGY_H

#include "rumor/core.h"

#define RUMOR_TOPOLOGY_MAX_NODES      4096
#define RUMOR_TOPOLOGY_MAX_PHASES     64
#define RUMOR_TOPOLOGY_MAX_FILE_BYTES (16u << 20)
#define RUMOR_TOPOLOGY_ENDPOINT_BYTES 256
#define RUMOR_TOPOLOGY_KEY_TEXT_BYTES 48 /* "ed25519:" + Z85 of 32 bytes */
#define RUMOR_TOPOLOGY_ROW_TOLERANCE  1e-6

typedef struct rumor_topology rumor_topology;

/* Parses text (len bytes, need not be NUL-terminated); name is used in
 * diagnostics ("ring.topo:3:7: ..."). *out is set only on success.
 * Errors: RUMOR_EPROTO (syntax or a failed check, described in diag),
 * RUMOR_ETOOBIG (caps above), RUMOR_ENOMEM. */
RUMOR_API rumor_err rumor_topology_parse(const char *text,
                                         size_t len,
                                         const char *name,
                                         rumor_topology **out,
                                         struct rumor_diag *diag);

/* Reads and parses a file; RUMOR_ENOTFOUND / RUMOR_EIO when unreadable. */
RUMOR_API rumor_err rumor_topology_load_file(const char *path,
                                             rumor_topology **out,
                                             struct rumor_diag *diag);

/* Builds a generated topology. kind and args:
 *   ring N | torus R C | complete N | star N | hypercube N (a power of 2)
 *   random-regular N D | watts-strogatz N K P | exponential N
 *   one-peer-exp N (time-varying, N a power of 2: at phase k node i pairs
 *   with i XOR 2^k; the product of a period is the exact average)
 * seed drives the random kinds. Errors: RUMOR_EINVAL with diag. */
RUMOR_API rumor_err rumor_topology_generate(const char *kind,
                                            const char *const *args,
                                            size_t nargs,
                                            uint64_t seed,
                                            rumor_topology **out,
                                            struct rumor_diag *diag);

/* Builds from a compact spec "ring:8", "torus:4x4", "watts-strogatz:16,4,0.2"
 * (arguments separated by ',' or 'x'), or from a file path when the spec
 * names a readable file. */
RUMOR_API rumor_err rumor_topology_from_spec(const char *spec,
                                             uint64_t seed,
                                             rumor_topology **out,
                                             struct rumor_diag *diag);

/* Frees and sets *self_p to NULL; safe on NULL and twice. */
RUMOR_API void rumor_topology_destroy(rumor_topology **self_p);

RUMOR_API size_t rumor_topology_nodes(const rumor_topology *t);
RUMOR_API size_t rumor_topology_phases(const rumor_topology *t);

/* Phase used at a given step (step mod phases). */
RUMOR_API size_t rumor_topology_phase_at(const rumor_topology *t,
                                         uint64_t step);

/* Undirected edges in a phase. */
RUMOR_API size_t rumor_topology_edges(const rumor_topology *t, size_t phase);

/* Neighbours of node in phase, sorted ascending; *count receives how many.
 * weights, when not NULL, receives the matching w_ij array. */
RUMOR_API const uint32_t *rumor_topology_neighbors(const rumor_topology *t,
                                                   size_t phase,
                                                   size_t node,
                                                   size_t *count,
                                                   const double **weights);

RUMOR_API double
rumor_topology_self_weight(const rumor_topology *t, size_t phase, size_t node);

/* w_ij in a phase (0 when i and j are not adjacent and i != j). */
RUMOR_API double rumor_topology_weight(const rumor_topology *t,
                                       size_t phase,
                                       size_t i,
                                       size_t j);

/* Endpoint and listed key ("ed25519:" + Z85 of the node's Ed25519 public
 * key) of a node, or NULL when the file gave none. */
RUMOR_API const char *rumor_topology_endpoint(const rumor_topology *t,
                                              size_t node);
RUMOR_API const char *rumor_topology_key(const rumor_topology *t, size_t node);

/* Sets a node's endpoint and key (either may be NULL to leave it). Checks
 * them as the parser does; RUMOR_EINVAL with diag when invalid. */
RUMOR_API rumor_err rumor_topology_set_node(rumor_topology *t,
                                            size_t node,
                                            const char *endpoint,
                                            const char *key,
                                            struct rumor_diag *diag);

/* Writes the dense n x n matrix of a phase, row-major, into w. */
RUMOR_API void
rumor_topology_matrix(const rumor_topology *t, size_t phase, double *w);

/* True when every row and column of every phase sums to 1 within
 * RUMOR_TOPOLOGY_ROW_TOLERANCE and W is symmetric (always true for a
 * topology that passed its checks; reported by `rumor topo check`). */
RUMOR_API bool rumor_topology_doubly_stochastic(const rumor_topology *t);

/* Spectral gap 1 - max(|lambda_2|, |lambda_n|) of W (LAPACK dsyev). For a
 * time-varying topology: 1 - sigma_max(W_{K-1}...W_0 - J), the contraction
 * of one whole period (LAPACK dgesvd). RUMOR_EBACKEND when LAPACK fails. */
RUMOR_API rumor_err rumor_topology_spectral_gap(const rumor_topology *t,
                                                double *gap);

/* The largest eigenvalue of I - W over every phase, 1 - lambda_min(W_k)
 * (LAPACK dsyev): how far one mixing step can push a disagreement (in
 * [0, 2) for Metropolis-Hastings weights; CHOCO's beta = ||I - W||_2).
 * RUMOR_EBACKEND when LAPACK fails. */
RUMOR_API rumor_err rumor_topology_mixing_norm(const rumor_topology *t,
                                               double *beta);

/* Appends the topology in file format (re-parsable) to out. */
RUMOR_API rumor_err rumor_topology_format(const rumor_topology *t,
                                          rumor_buf *out);

/* Appends a Graphviz `graph` (undirected, weights as labels) to out. */
RUMOR_API rumor_err rumor_topology_format_dot(const rumor_topology *t,
                                              rumor_buf *out);

#endif /* RUMOR_TOPOLOGY_H */
