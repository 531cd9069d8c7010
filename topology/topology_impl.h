/*
 * Private to topology/: the builder that the parser and the generators
 * fill, and topo_build(), which runs every check once for both. Keeping one
 * checker means a generated graph and a hand-written file are held to the
 * same rules.
 */
#ifndef RUMOR_TOPOLOGY_IMPL_H
#define RUMOR_TOPOLOGY_IMPL_H

#include "rumor/topology.h"

struct topo_edge {
    uint32_t a, b;          /* node ids as written */
    double weight;          /* valid when has_weight */
    bool has_weight;        /* false: Metropolis-Hastings */
    uint32_t phase;         /* which phase the edge belongs to */
    int line, col_a, col_b; /* where it was written (0 when generated) */
};

struct topo_decl {
    char *endpoint; /* owned, NULL when the node has no `node` line */
    char key[RUMOR_TOPOLOGY_KEY_TEXT_BYTES + 1]; /* "" when none */
    int line; /* of the `node` line, 0 when none */
};

struct topo_builder {
    const char *name;       /* for diagnostics; borrowed */
    size_t nodes;           /* from `nodes N` or `matrix N`; 0 when absent */
    int nodes_line;         /* line of `nodes N`, 0 when absent */
    struct topo_decl *decl; /* decl_count entries, indexed by id */
    size_t decl_count;
    size_t decl_lines; /* how many `node` lines */
    struct topo_edge *edges;
    size_t edge_count, edge_alloc;
    size_t phases;  /* 1 + the highest phase number */
    double *matrix; /* dense W when given as `matrix N`, else NULL */
    int *row_line;  /* source line of each matrix row */
};

void topo_builder_init(struct topo_builder *b, const char *name);
void topo_builder_free(struct topo_builder *b);

/* Adds an edge; RUMOR_ENOMEM or RUMOR_ETOOBIG (edge cap). */
rumor_err topo_builder_add_edge(struct topo_builder *b,
                                const struct topo_edge *edge,
                                struct rumor_diag *diag);

/* Makes room for ids below count in b->decl. */
rumor_err topo_builder_reserve_nodes(struct topo_builder *b,
                                     size_t count,
                                     struct rumor_diag *diag);

/* Checks everything and builds the topology; consumes nothing (the caller
 * still frees the builder). */
rumor_err topo_build(struct topo_builder *b,
                     rumor_topology **out,
                     struct rumor_diag *diag);

/* Endpoint and key syntax, shared with rumor_topology_set_node. The
 * message (for a diag) goes to why. */
bool topo_endpoint_valid(const char *endpoint, const char **why);
bool topo_key_valid(const char *key, const char **why);

#define TOPO_MAX_EDGES (1u << 22)

#endif
