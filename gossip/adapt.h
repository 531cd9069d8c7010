/*
 * Private to gossip/: adaptive compression (issue #12, docs/adaptive.md).
 * A controller (a small table of functions, as the algorithms') chooses,
 * for each message and each layer, the sparsity k and the quantizer bits,
 * within a byte budget per link that the link estimator derives from the
 * gossip traffic's own timing. Messages keep the packer's layout (per
 * tensor: u32 length, codec payload); each payload's header carries the
 * settings it was made with and the receiver decodes with a codec built
 * from that header (rumor_codec_spec_of_payload).
 */
#ifndef RUMOR_GOSSIP_ADAPT_H
#define RUMOR_GOSSIP_ADAPT_H

#include "gossip/gossip_impl.h"

#define GOSSIP_ADAPT_WINDOW      4 /* link samples the estimators span */
#define GOSSIP_ADAPT_MIN_BITS    2 /* quantizer bits the controllers use */
#define GOSSIP_ADAPT_MAX_BITS    8
#define GOSSIP_ADAPT_BUCKET      128 /* qsgd bucket of the adaptive codecs */
#define GOSSIP_ADAPT_FEATURES    5   /* learned: inputs per layer */
#define GOSSIP_ADAPT_ALL         ((size_t)-1) /* one message to every link */
#define GOSSIP_ADAPT_LINK_HEADER 12 /* per-link messages: tag, us, bytes */

/* The settings of one layer of one message. */
struct gossip_choice {
    size_t k;      /* kept elements (n: dense); 0: the configured codec */
    unsigned bits; /* qsgd bits of the values */
};

/* What a controller sees of one layer on one link. */
struct gossip_layer {
    size_t n;
    struct rumor_layer_stats st; /* of this message's vector */
    double var_ema;              /* variance estimate across steps (<0:
                                    none yet) */
    double cal;        /* quantization error model: e(b) = cal / (2^b - 1) */
    double err, q_err; /* last message: total and quantization error */
    struct gossip_choice c;
};

struct gossip_link {
    uint32_t peer;
    double rate[GOSSIP_ADAPT_WINDOW], tau[GOSSIP_ADAPT_WINDOW];
    size_t samples; /* taken so far (the window holds the last ones) */
    struct {
        uint32_t tag;   /* messages encoded on the link when measured */
        double tau;     /* elapsed (s) */
        uint32_t bytes; /* received */
    } mine[4];          /* this node's last measurements, by tag % 4 */
    uint32_t sent;      /* messages encoded on the link */
    bool sym;           /* the peer reports its side: samples are pairs */
    double corr;        /* bytes model correction (actual vs predicted) */
    uint64_t budget;    /* of the last message */
    uint64_t bytes;     /* of the last message */
    struct gossip_layer *layers;
    uint8_t *buf; /* the last message */
    size_t len, cap;
};

struct gossip_adapt;

/* The controller interface. */
struct gossip_ctl_i {
    const char *name;
    bool per_link; /* false: one message for every neighbour (fixed) */
    /* Fills l->layers[*].c for a message of at most budget bytes. */
    void (*choose)(struct gossip_adapt *a,
                   struct gossip_link *l,
                   double budget);
    /* Learns from the errors of the message just encoded (may be NULL). */
    void (*learn)(struct gossip_adapt *a, const struct gossip_link *l);
};

extern const struct gossip_ctl_i gossip_ctl_fixed;
extern const struct gossip_ctl_i gossip_ctl_rule;
extern const struct gossip_ctl_i gossip_ctl_learned;

struct gossip_adapt {
    const struct gossip_ctl_i *ctl;
    const struct rumor_gossip_opts *opts; /* the instance's */
    size_t layers;
    size_t dense_bytes; /* fp32 message of the whole model */
    struct gossip_link *links;
    size_t nlinks;
    double compute_s; /* estimate of the compute time per step */
    double theta[GOSSIP_ADAPT_FEATURES]; /* learned: the model */
    rumor_codec *base;                   /* the configured codec (fixed) */
    rumor_codec **enc; /* per layer: the last encoder and its spec */
    char (*enc_spec)[RUMOR_COMPRESS_SPEC_MAX];
    rumor_codec **dec; /* per layer: the last decoder and its spec */
    char (*dec_spec)[RUMOR_COMPRESS_SPEC_MAX];
    /* where the model lives: the vectors below are its memory */
    const struct gossip_backend_i *be;
    float *vec, *approx; /* one flat model each */
    float *scratch;      /* one layer's decode */
    /* payload bytes encoded from (d2h) and decoded into (h2d) a device:
     * rumor_gossip_pcie_bytes' share of the controller */
    uint64_t pcie_h2d, pcie_d2h;
};

/* Makes the controller named by g->opts.adapt for g's neighbours; diag
 * explains an unknown name or a bad option. */
rumor_err gossip_adapt_new(const rumor_gossip *g,
                           struct gossip_adapt **out,
                           struct rumor_diag *diag);
void gossip_adapt_destroy(struct gossip_adapt **a_p);

/* Makes g->adapt for opts.adapt (choco only) and, for a per-link
 * controller, switches g to the per-edge CHOCO (adapt_choco.c). */
rumor_err gossip_adapt_attach(rumor_gossip *g, struct rumor_diag *diag);

/* Index of peer among the links, or nlinks. */
size_t gossip_adapt_link_of(const struct gossip_adapt *a, uint32_t peer);

/* Encodes fill's vector for link (or GOSSIP_ADAPT_ALL: the fixed
 * controller's one message, recorded on every link) into the link's
 * buffer (*data, *len: valid until the next encode on that link). */
rumor_err gossip_adapt_encode(struct gossip_adapt *a,
                              const rumor_gossip *g,
                              size_t link,
                              uint64_t step,
                              gossip_fill_fn fill,
                              void *arg,
                              const uint8_t **data,
                              size_t *len);

/* A per-link message's body (after its link header); RUMOR_EPROTO when
 * shorter than the header. Pure. */
rumor_err gossip_adapt_body(const uint8_t *data,
                            size_t len,
                            const uint8_t **body,
                            size_t *blen);

/* Takes the link header of a message received on link: the peer's own
 * measurement of the previous exchange, which paired with this node's
 * makes one skew-free sample (see adapt.c). */
void gossip_adapt_peer_report(struct gossip_adapt *a,
                              size_t link,
                              const uint8_t *data,
                              size_t len);

/* Adds the controller's payload bytes to and from a device to the
 * counts. */
void
gossip_adapt_pcie(const struct gossip_adapt *a, uint64_t *h2d, uint64_t *d2h);

/* As gossip_packer_stage, decoding each tensor with the codec its
 * payload header names. */
rumor_err gossip_adapt_stage(struct gossip_adapt *a,
                             const rumor_gossip *g,
                             const uint8_t *data,
                             size_t len,
                             double weight,
                             double *into);

/* The controller's own state between steps (link windows, compute
 * time, per layer the variance estimate, calibration, errors and
 * settings, the learned weights), for checkpoints (docs/adaptive.md):
 * appended to out; the load is a pure, bounds-checked decode with apply
 * false and writes into a only with apply true, as state_load. */
rumor_err gossip_adapt_state_save(const struct gossip_adapt *a,
                                  struct rumor_buf *out);
rumor_err gossip_adapt_state_load(struct gossip_adapt *a,
                                  struct gossip_reader *r,
                                  bool apply);

/* The budget in bytes for the next message on a link (0: none known; the
 * controller then uses opts.adapt_density). */
double gossip_adapt_budget(const struct gossip_adapt *a,
                           const struct gossip_link *l);

/* Predicted payload bytes of one layer (u32 length included). */
double gossip_adapt_layer_bytes(size_t n, size_t k, unsigned bits);

#endif
