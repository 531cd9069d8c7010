/*
 * node, part 1 of 4 (include rumor/node.h): the options of a node
 * (`rumor node` and the peer share them), set by name from the command
 * line, an INI file or the Python binding, and their checks.
 */
#ifndef RUMOR_PUBLIC_NODE_CONFIG_H
#define RUMOR_PUBLIC_NODE_CONFIG_H

#include "rumor/core.h"
#include "rumor/gossip.h"
#include "rumor/train.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define RUMOR_NODE_PATH_MAX     1024 /* topology, key and metrics paths */
#define RUMOR_NODE_LISTEN_BYTES 280  /* --metrics-listen: host and port */

typedef enum rumor_node_exchange {
    RUMOR_NODE_EXCHANGE_AUTO = 0,    /* gradient for powersgd and allreduce,
                                        model for the others */
    RUMOR_NODE_EXCHANGE_MODEL = 1,   /* gossip the parameters x_t */
    RUMOR_NODE_EXCHANGE_GRADIENT = 2 /* average the gradients (data-parallel;
                                        powersgd and allreduce only) */
} rumor_node_exchange;

struct rumor_node_opts {
    char topology[RUMOR_NODE_PATH_MAX];   /* topology file (endpoints, keys) */
    uint32_t id;                          /* this node */
    char key[RUMOR_NODE_PATH_MAX];        /* key base: DIR/NAME(.key, .pub) */
    bool insecure;                        /* plain TCP, no CURVE */
    struct rumor_workload_opts workload;  /* node, nodes, dataset set by new */
    char dataset[RUMOR_DATASET_SPEC_MAX]; /* rumor_dataset_open spec; "" =
                                             default for the workload */
    struct rumor_optim_opts optim;
    struct rumor_gossip_opts gossip;
    rumor_node_exchange exchange;
    bool overlap;         /* model exchange: compute the gradient in a second
                             thread while the gossip runs (same numbers) */
    uint64_t steps;       /* training steps */
    uint32_t deadline_ms; /* per gossip step */
    uint32_t connect_ms;  /* waiting for the links to come up, and the
                             deadline of the first step */
    uint64_t eval_every; /* held-out evaluation period in steps; 0 = end only */
    uint64_t consensus_every; /* period of the consensus probe (full models
                                 exchanged with the neighbours, counted
                                 apart from the gossip bytes); 0 = off */
    char metrics_dir[RUMOR_NODE_PATH_MAX]; /* "" = no metrics file */
    /* "" (off), or PORT, :PORT or ADDR:PORT: the counters for Prometheus
     * at http://ADDR:PORT/metrics, on loopback unless ADDR is given */
    char metrics_listen[RUMOR_NODE_LISTEN_BYTES];
    rumor_log_level log_level;
    uint64_t rate_bits; /* link shaping: bit/s per link, 0 = none */
    uint32_t delay_ms;  /* link shaping: one-way delay */
    int progress;       /* -1: when stdout is a terminal; 0 off; 1 on */
    char checkpoint_dir[RUMOR_NODE_PATH_MAX]; /* "" = no checkpoints */
    uint64_t checkpoint_every; /* steps between checkpoints; 0 = only the
                                  final one on a stop */
    uint32_t checkpoint_keep;  /* newest files kept (default 3) */
    bool resume;               /* continue from the newest good checkpoint */
    uint32_t down_after;       /* dpsgd: missed steps before a neighbour is
                                  marked down and probed (1..32, default 3) */
    double deadline_factor;    /* adaptive step deadline: min(deadline_ms,
                                  max(2 s, factor * longest recent wait));
                                  0 = always deadline_ms (default 8) */
    bool join; /* fetch the model and step from a live neighbour first */
};

/* Defaults: see docs/node.md (mlp 64-32-10 on the digits, momentum SGD
 * lr 0.05, dpsgd, 300 steps, deadline 10 s, connect 30 s, eval every 50). */
RUMOR_API void rumor_node_opts_default(struct rumor_node_opts *opts);

/* Checks that the values fit together: --topology, --key or --insecure,
 * PowerSGD's and error feedback's combinations, --exchange against the
 * algorithm. For callers that fill the struct themselves, so nothing was
 * given by name: the refusals of options that do not apply (and of a
 * missing --id) are rumor_node_config_check's. rumor_node_new and
 * rumor_peer_new run this check. RUMOR_EINVAL with diag naming the
 * options. */
RUMOR_API rumor_err rumor_node_opts_check(const struct rumor_node_opts *opts,
                                          struct rumor_diag *diag);

/* True when name is an option rumor_node_config_set knows. */
RUMOR_API bool rumor_node_opts_known(const char *name);

/* True when name is a flag (an option that takes no value on a command
 * line: insecure, cuda). */
RUMOR_API bool rumor_node_opts_is_flag(const char *name);

/*
 * Options set by name, as the command line, the INI file and the Python
 * binding spell them: a struct rumor_node_opts and which options were
 * given, so an option that does not apply to the chosen workload,
 * optimizer or algorithm is refused rather than ignored.
 */
typedef struct rumor_node_config rumor_node_config;

/* A config with the defaults of rumor_node_opts_default and nothing
 * given. RUMOR_ENOMEM. */
RUMOR_API rumor_err rumor_node_config_new(rumor_node_config **out);

/* Frees the config and sets *self_p to NULL; safe on NULL and twice. */
RUMOR_API void rumor_node_config_destroy(rumor_node_config **self_p);

/* The options, borrowed for the config's life: for rumor_node_new,
 * rumor_peer_new and callers that read them. A field written through the
 * pointer counts as not given. */
RUMOR_API struct rumor_node_opts *
rumor_node_config_opts(rumor_node_config *cfg);

/* Sets one option by its long name without the dashes ("lr", "algo",
 * "hidden", ...) from its text value (booleans: "true"/"false"/"1"/"0";
 * "" for a flag means true) and records it as given. "ef" with a dgc
 * value also makes the optimizer plain SGD unless "optimizer" was given
 * (DGC's memory carries the momentum). RUMOR_EINVAL with diag for an
 * unknown name or a bad value; cfg is unchanged then. */
RUMOR_API rumor_err rumor_node_config_set(rumor_node_config *cfg,
                                          const char *name,
                                          const char *value,
                                          struct rumor_diag *diag);

/* Applies an INI file (keys = long option names, an optional [node]
 * section; other sections are refused). Errors: RUMOR_ENOTFOUND /
 * RUMOR_EIO, RUMOR_EINVAL with diag at file:line. */
RUMOR_API rumor_err rumor_node_config_load(rumor_node_config *cfg,
                                           const char *path,
                                           struct rumor_diag *diag);

#define RUMOR_NODE_CONFIG_MAX (1 << 20) /* bytes of a config file */

/* The parse behind rumor_node_config_load, a pure function of the bytes
 * text[0..len) (name is only used in diag): all options applied, or none
 * (cfg unchanged) and RUMOR_EINVAL with diag at name:line. Text with a
 * NUL byte or longer than RUMOR_NODE_CONFIG_MAX is refused. */
RUMOR_API rumor_err rumor_node_config_parse_ini(rumor_node_config *cfg,
                                                const char *name,
                                                const uint8_t *text,
                                                size_t len,
                                                struct rumor_diag *diag);

/* rumor_node_opts_check, and before its checks of the values the
 * refusals that need to know what was given: a missing --id, and an
 * option given that does not apply to the chosen workload, optimizer or
 * algorithm ("--rank does not apply to --algo dpsgd"). RUMOR_EINVAL with
 * diag naming the options of the first problem found. */
RUMOR_API rumor_err rumor_node_config_check(const rumor_node_config *cfg,
                                            struct rumor_diag *diag);

/* True when the run averages gradients instead of gossiping the model
 * (--exchange, with auto resolved by the algorithm: powersgd and
 * allreduce): what a training loop hands the peer. */
RUMOR_API bool
rumor_node_opts_gradient_exchange(const struct rumor_node_opts *opts);

#endif /* RUMOR_PUBLIC_NODE_CONFIG_H */
