/*
 * Private to gossip/: the algorithm interface (a table of functions, as
 * ggml's backends) and the pieces every algorithm shares: the flat view of
 * a model, outgoing message slots, and inbox validation.
 */
#ifndef RUMOR_GOSSIP_IMPL_H
#define RUMOR_GOSSIP_IMPL_H

#include "gossip/backend.h"
#include "rumor/gossip.h"
#include "rumor/lowrank.h"

/* --- state encoding helpers (state.c) ------------------------------------ */

/* A cursor over untrusted state bytes: every take checks what is left;
 * the first failure sets err (with why) and makes every later take fail,
 * so a decoder checks once at the end. */
struct gossip_reader {
    const uint8_t *p;
    size_t left;
    rumor_err err;
    const char *why; /* static text for the diag */
    bool peer;       /* another member's state (adopt): its header names
                        another node, and so may an inner state's */
};

/* What an algorithm's state_load does with the bytes. */
enum gossip_state_mode {
    GOSSIP_STATE_CHECK, /* a pure decode: nothing changes */
    GOSSIP_STATE_LOAD,  /* all of it (rumor_gossip_state_load) */
    GOSSIP_STATE_ADOPT, /* what the members share (rumor_gossip_state_adopt) */
};

/* Checks a whole state (header and body) against g, then, unless mode is
 * GOSSIP_STATE_CHECK, abandons g's step and applies it: the public load
 * and adopt, and an instance inside another (localsgd's mixer). With peer
 * the header may name another node (r->peer). *why: static text on
 * error. */
rumor_err gossip_state_read(rumor_gossip *g,
                            const uint8_t *data,
                            size_t len,
                            enum gossip_state_mode mode,
                            bool peer,
                            const char **why);

void gossip_reader_init(struct gossip_reader *r, const uint8_t *p, size_t len);
/* Marks the state bad (keeps the first reason). */
void
gossip_reader_fail(struct gossip_reader *r, rumor_err err, const char *why);
uint32_t gossip_read_u32(struct gossip_reader *r);
uint64_t gossip_read_u64(struct gossip_reader *r);
/* A u64 length that must equal want (else RUMOR_EPROTO with why). */
void gossip_read_len(struct gossip_reader *r, uint64_t want, const char *why);
/* n floats (or doubles) into dst, or only checked when dst is NULL;
 * non-finite values are RUMOR_ENUMERIC. */
void gossip_read_f32(struct gossip_reader *r, float *dst, size_t n);
void gossip_read_f64(struct gossip_reader *r, double *dst, size_t n);
/* A u64 length, then that many bytes, borrowed: *len receives it. */
const uint8_t *gossip_read_blob(struct gossip_reader *r, size_t *len);

rumor_err gossip_write_u32(struct rumor_buf *b, uint32_t v);
rumor_err gossip_write_u64(struct rumor_buf *b, uint64_t v);
rumor_err gossip_write_f32(struct rumor_buf *b, const float *v, size_t n);
rumor_err gossip_write_f64(struct rumor_buf *b, const double *v, size_t n);

struct gossip_algo_i {
    const char *name;
    /* Allocates g->state; the diag explains an invalid option. */
    rumor_err (*init)(rumor_gossip *g, struct rumor_diag *diag);
    void (*free)(rumor_gossip *g); /* frees g->state; NULL-safe */
    uint32_t (*rounds)(const rumor_gossip *g, uint64_t step);
    /* (optional, NULL: every step) rumor_gossip_exchanges; reads only
     * g->opts */
    bool (*exchanges)(const rumor_gossip *g, uint64_t step);
    /* Fills g->out[0..g->out_count). */
    rumor_err (*emit)(rumor_gossip *g, uint64_t step, uint32_t round);
    /* The senders whose messages absorb needs in that round. */
    size_t (*expected)(const rumor_gossip *g,
                       uint64_t step,
                       uint32_t round,
                       uint32_t *peers,
                       size_t cap);
    /* (optional, NULL: false) sends to the next member of g's ring
     * (node self + 1 unless rumor_gossip_members_set chose fewer nodes),
     * whatever the topology */
    bool (*uses_ring)(const rumor_gossip *g);
    rumor_err (*absorb)(rumor_gossip *g,
                        uint64_t step,
                        uint32_t round,
                        const struct rumor_gossip_msg *msgs,
                        size_t count);
    /* (optional, NULL: no-op) rumor_gossip_step_ahead */
    rumor_err (*step_ahead)(rumor_gossip *g);
    /* (optional, NULL: cannot skip a neighbour) writes x_j - x_i of the
     * step (numel doubles, in g->be's memory) for message m, and its
     * Euclidean norm (be->norm's, or gossip_term_norm's); RUMOR_EPROTO for
     * a wrong size, RUMOR_ENUMERIC for NaN or Inf. Edge terms are then
     * staged by gossip/edges.c. */
    rumor_err (*edge_diff)(rumor_gossip *g,
                           uint64_t step,
                           const struct rumor_gossip_msg *m,
                           double *d,
                           double *norm);
    /* (optional, NULL: no per-edge state) the term of (peer, step) that
     * the last edge_diff with peer staged is applied (both ends hold
     * both messages): its per-edge state update becomes the edge's. An
     * algorithm with this hook emits nothing to, and stages nothing from,
     * a peer while gossip_edge_busy (docs/reliability.md). */
    void (*edge_commit)(rumor_gossip *g, uint32_t peer, uint64_t step);
    /* (optional) the peer restarted: the per-edge state starts over from
     * the value both ends derive alone (the pair's seed, zero copies). */
    void (*edge_reset)(rumor_gossip *g, uint32_t peer);
    /* (optional) the edge terms kept by the algorithm itself, factored,
     * rather than as numel doubles (where init set g->own_terms):
     * edge_diff then gets d NULL, and this adds c times elements
     * [at, at + n) of tensor t of the term its last edge_diff with peer
     * made into acc (n doubles, host memory), in the roundings of
     * be->axpy over that term's doubles. */
    rumor_err (*term_add)(rumor_gossip *g,
                          uint32_t peer,
                          size_t t,
                          size_t at,
                          size_t n,
                          double c,
                          double *acc);
    /* (optional, NULL: no state between steps) appends the state */
    rumor_err (*state_save)(const rumor_gossip *g, struct rumor_buf *out);
    /* (optional, NULL: nothing follows the ring) the ring's members change
     * to members[0..count) (checked: sorted, unique, this node among
     * them), between steps: what the algorithm keeps outside g (an inner
     * instance) follows. Called before g's list changes; on an error
     * nothing has. */
    rumor_err (*members)(rumor_gossip *g,
                         const uint32_t *members,
                         size_t count);
    /* (optional, NULL: only an empty state fits) reads the state from r:
     * GOSSIP_STATE_CHECK only checks it (a pure decode, nothing changes);
     * after a successful check, GOSSIP_STATE_LOAD writes all of it into
     * g and GOSSIP_STATE_ADOPT what the ring's members share (another
     * member's state: g keeps its own memories). Both run after abandon,
     * so nothing of a step in flight is left. */
    rumor_err (*state_load)(rumor_gossip *g,
                            struct gossip_reader *r,
                            enum gossip_state_mode mode);
    /* (optional, NULL: nothing in flight outlives a step) the step in
     * progress will not end: undoes what of it lies outside the state
     * (an inner instance's step, a model written mid-step), so that a
     * state_load that follows leaves g as before the step. Safe between
     * steps (then a no-op). */
    void (*abandon)(rumor_gossip *g);
    /* (optional) adds the host <-> device copies made by what the
     * algorithm holds (its compressor) to the counts */
    void (*pcie)(const rumor_gossip *g, uint64_t *h2d, uint64_t *d2h);
    /* (optional, NULL: rumor_gossip_snapshot is RUMOR_ENOTSUP) the state
     * between steps copied into a snapshot kept where it lives (device to
     * device: no PCIe), RUMOR_ENOTSUP where this configuration cannot;
     * back to it (after abandon); and the body state_save wrote at the
     * snapshot, serialized from it (the live state left alone, mid-step
     * too) */
    rumor_err (*snap_take)(rumor_gossip *g);
    rumor_err (*snap_restore)(rumor_gossip *g);
    rumor_err (*snap_save)(const rumor_gossip *g, struct rumor_buf *out);
};

struct rumor_gossip {
    const struct gossip_algo_i *algo;
    struct rumor_gossip_opts opts;
    const rumor_topology *topo; /* borrowed */
    uint32_t self;
    size_t nodes;
    struct rumor_tensor *tensors;      /* copy of the caller's array */
    const struct gossip_backend_i *be; /* where the tensors live, its ops */
    uint64_t pcie_h2d, pcie_d2h;       /* bytes g->be copied each way */
    size_t tensor_count;
    size_t numel;                 /* total elements of the model */
    struct rumor_gossip_msg *out; /* emitted messages, out_alloc slots */
    size_t out_count, out_alloc;
    /* rumor_gossip_emit_each's receiver, during an emit, and how many of
     * out[] it has had */
    rumor_gossip_ready_fn ready;
    void *ready_arg;
    size_t out_handed;
    void *state;                  /* the algorithm's */
    struct gossip_ledger *ledger; /* edges.c: staged terms, made on use */
    bool own_terms;               /* the algorithm keeps its edge terms */
    struct gossip_robust *robust; /* robust.c: the radius, made on use */
    struct rumor_gossip_screen_stats screen; /* rumor_gossip_screen_stats */
    struct gossip_adapt *adapt; /* adapt.c: opts.adapt's controller */
    uint8_t codec;              /* rumor_gossip_codec */
    /* the ring of the ring algorithms (rumor_gossip_members_set) */
    uint32_t *ring;    /* member node ids, sorted; nodes slots, all at first */
    size_t ring_n;     /* members */
    uint32_t ring_pos; /* self's index in ring */
    /* rumor_gossip_snapshot: taken (and not invalid since), and the
     * robust history of its boundary */
    bool snap_has;
    uint64_t snap_robust_steps;
    double snap_robust_ema;
    bool in_step; /* round 0 emitted, the last round not yet absorbed, and
                     no call of the step failed */
};

/* --- robust mixing (robust.c) ------------------------------------------ */

/* RUMOR_EINVAL with a diag for robust, clip_quantile, clip_factor or
 * clip_norm out of range. */
rumor_err gossip_robust_check(const struct rumor_gossip_opts *o,
                              struct rumor_diag *diag);
/* True unless robust is "off" (and no clip_norm). */
bool gossip_robust_on(const rumor_gossip *g);
/* d = (double)a - (double)b (b NULL: (double)a), n elements of a term;
 * where the backend sums in the same pass (diff_sq), *sq += their squares
 * in order. A term written by these calls, in element order, then has
 * gossip_term_norm's norm without a pass of its own. */
rumor_err gossip_term_diff(rumor_gossip *g,
                           double *d,
                           const float *a,
                           const float *b,
                           size_t n,
                           double *sq);
/* *norm of the term d (numel doubles) that gossip_term_diff wrote from
 * sq = 0 on: sqrt(sq) where the backend summed, be->norm otherwise (the
 * same bits on the host: both sum in element order). */
rumor_err
gossip_term_norm(rumor_gossip *g, const double *d, double sq, double *norm);

/* count model-sized terms d[k] (doubles in the backend's memory) and
 * their weights c[k]; with g->own_terms, peer[k] names the edge whose
 * term the algorithm keeps (term_add) and d is unused. */
struct gossip_terms {
    const double *const *d;
    const double *c;
    size_t count;
    const uint32_t *peer;
};
/* The step's radius from the finite norms of its neighbour differences
 * (and the history, which it updates); INFINITY when off. */
double gossip_robust_radius(rumor_gossip *g, const double *norm, size_t count);
/* The factor min(1, tau / norm) for peer's difference, counted and (rate-
 * limited) logged when below 1. */
double
gossip_robust_scale(rumor_gossip *g, uint32_t peer, double norm, double tau);
/* Logs (rate-limited, with the sender) a clipped difference, or a rejected
 * one when norm is not finite. */
void
gossip_robust_note(rumor_gossip *g, uint32_t peer, double norm, double tau);
/* The strict path's robust mix: each neighbour's difference d_k, the
 * algorithm's edge_diff of slot[k], and its weight w[k] CLIP(d_k, tau)
 * into *out (the instance's memory, valid until the next call), for
 * gossip_apply_terms (the ledger's doubles when nothing is clipped). An
 * edge_diff error, or a non-finite difference (RUMOR_ENUMERIC), returns
 * before the model changes. */
rumor_err gossip_robust_mix(rumor_gossip *g,
                            uint64_t step,
                            const struct rumor_gossip_msg *const *slot,
                            const double *w,
                            size_t peers,
                            struct gossip_terms *out);
void gossip_robust_free(rumor_gossip *g);
/* The radius's history (steps with history, its EMA; 0 and 0 before the
 * first step), which the gossip state carries so that a resumed or redone
 * step clips as the uninterrupted one did. */
void gossip_robust_history(const rumor_gossip *g, uint64_t *steps, double *ema);
rumor_err gossip_robust_restore(rumor_gossip *g, uint64_t steps, double ema);
/* Adds the screen counts of localsgd's inner mixers (allreduce or dpsgd,
 * one per fragment; those made so far) into out, and takes the clip radius
 * of the last sync's: they are localsgd's. */
void gossip_localsgd_screen(const rumor_gossip *g,
                            struct rumor_gossip_screen_stats *out);

/* Frees g->ledger (edges.c); NULL-safe. */
void gossip_ledger_free(rumor_gossip *g);
/* True while a term staged with peer waits for its verdict or its commit
 * (edges.c): an algorithm with per-edge state cannot take the edge's next
 * step before it knows whether the last one counts. */
bool gossip_edge_busy(const rumor_gossip *g, uint32_t peer);

/* Replaces g->opts.gamma == RUMOR_GOSSIP_GAMMA_AUTO by the algorithm's
 * default (gamma.c); RUMOR_EINVAL with a diag for a codec too coarse. */
rumor_err gossip_gamma_resolve(rumor_gossip *g, struct rumor_diag *diag);

extern const struct gossip_algo_i gossip_allreduce;
extern const struct gossip_algo_i gossip_allreduce_f64;
extern const struct gossip_algo_i gossip_allreduce_codec; /* compressed */
extern const struct gossip_algo_i gossip_dpsgd;
extern const struct gossip_algo_i gossip_choco;
extern const struct gossip_algo_i gossip_choco_edge; /* adapt_choco.c */
extern const struct gossip_algo_i gossip_powergossip;
extern const struct gossip_algo_i gossip_powersgd;
extern const struct gossip_algo_i gossip_localsgd;
extern const struct gossip_algo_i gossip_deepsqueeze;
extern const struct gossip_algo_i gossip_moniqua;

/* expected() for algorithms that talk to the step's neighbours, and for
 * those that receive from the ring predecessor (the previous member). */
size_t gossip_expected_neighbors(const rumor_gossip *g,
                                 uint64_t step,
                                 uint32_t round,
                                 uint32_t *peers,
                                 size_t cap);
bool gossip_always_ring(const rumor_gossip *g);
size_t gossip_expected_prev(const rumor_gossip *g,
                            uint64_t step,
                            uint32_t round,
                            uint32_t *peers,
                            size_t cap);

/* Copies model elements [offset, offset + len) of the flattened model into
 * dst, or dst into the model (put), or adds alpha * src into it. */
void
gossip_flat_get(const rumor_gossip *g, size_t offset, size_t len, float *dst);
void
gossip_flat_put(rumor_gossip *g, size_t offset, size_t len, const float *src);

/* rumor_gossip_new with the model memory given (the tests' way to run
 * the device path on gossip_backend_ref). */
rumor_err gossip_new_in(const struct rumor_gossip_opts *opts,
                        const rumor_topology *t,
                        uint32_t self,
                        const struct rumor_model *model,
                        const struct gossip_backend_i *be,
                        rumor_gossip **out,
                        struct rumor_diag *diag);

/* A copy through g->be, counted when it crosses to or from the host. */
rumor_err gossip_mem_copy(rumor_gossip *g,
                          void *dst,
                          const void *src,
                          size_t bytes,
                          enum gossip_copy kind);

/* x = from + gamma * sum_k c[k] d[k] over the model's tensors (from: the
 * model's floats, flat, in the backend's memory; NULL: x itself), per
 * element the sum in double in k order from +0, rounded once into x:
 * every absorb's and the ledger's last pass. acc: gossip_apply_bytes(g)
 * of scratch in the backend's memory. Host memory goes GOSSIP_APPLY_CHUNK
 * elements at a time, all passes over a chunk before the next, so the sum
 * never leaves the cache; each element's arithmetic is the same either
 * way. */
#define GOSSIP_APPLY_CHUNK ((size_t)8192)
rumor_err gossip_apply_terms(rumor_gossip *g,
                             double *acc,
                             const float *from,
                             const struct gossip_terms *terms);
/* The bytes of gossip_apply_terms's acc: one chunk of doubles on host
 * memory (GOSSIP_APPLY_CHUNK, or two rows of the widest matrix where
 * more), the model's numel on a device, which sums it in one pass. */
size_t gossip_apply_bytes(const rumor_gossip *g);

/* Model elements [offset, offset + len) into buf (read) or from buf into
 * the model (write); buf is host memory (GOSSIP_TO_HOST for a read,
 * GOSSIP_TO_DEVICE for a write) or model memory (GOSSIP_ON_DEVICE). */
rumor_err gossip_model_read(rumor_gossip *g,
                            size_t offset,
                            size_t len,
                            float *buf,
                            enum gossip_copy kind);
rumor_err gossip_model_write(rumor_gossip *g,
                             size_t offset,
                             size_t len,
                             const float *buf,
                             enum gossip_copy kind);

/* rounds() of the algorithms that exchange once per step. */
uint32_t gossip_one_round(const rumor_gossip *g, uint64_t step);

/* Emits the same len bytes at data to every neighbour of the step's phase
 * (data stays owned by the caller, valid until its next emit). */
rumor_err gossip_out_to_neighbors(rumor_gossip *g,
                                  uint64_t step,
                                  const uint8_t *data,
                                  size_t len);

/* Makes room for count outgoing messages and sets out_count = count. */
rumor_err gossip_out_reserve(rumor_gossip *g, size_t count);

/* Makes room for count outgoing messages, none yet (out_count = 0), for
 * gossip_out_push. */
rumor_err gossip_out_start(rumor_gossip *g, size_t count);

/* Appends m to the round's messages (room made by gossip_out_start) and
 * hands it to the driver at once (rumor_gossip_emit_each), so that the
 * network sends it while the next one is made. */
void gossip_out_push(rumor_gossip *g, struct rumor_gossip_msg m);

/* Finds, for each expected peer, its message in msgs: slot[k] receives the
 * message of peers[k]. RUMOR_EPROTO for an unexpected sender, a duplicate
 * or a length != want_len; RUMOR_ETIMEDOUT when one is missing; both
 * logged with the peer id. */
rumor_err gossip_match_inbox(const rumor_gossip *g,
                             const uint32_t *peers,
                             size_t peer_count,
                             const struct rumor_gossip_msg *msgs,
                             size_t count,
                             size_t want_len,
                             const struct rumor_gossip_msg **slot);

/* RUMOR_ENUMERIC (logged with the peer) when a payload of float32 values
 * holds a NaN or an Inf. */
rumor_err gossip_check_finite(const rumor_gossip *g,
                              const struct rumor_gossip_msg *msg);

/* --- codec payloads of a whole model (payload.c) ------------------------ */

/* Writes tensor t's vector to compress (n floats) into out (backend
 * memory); base is the tensor's offset in the flat model. */
typedef rumor_err (*gossip_fill_fn)(const rumor_gossip *g,
                                    size_t t,
                                    size_t base,
                                    float *out,
                                    void *arg);

struct gossip_packer {
    const struct gossip_backend_i *be; /* where scratch and the vectors are */
    rumor_codec *codec;
    uint8_t *buf;   /* the last encoded message */
    size_t len;     /* its length */
    size_t cap;     /* the largest message the codec can produce */
    float *scratch; /* one tensor, backend memory */
    /* payload bytes the codec moved to (encode) and from (decode) a
     * device, rumor_gossip_pcie_bytes' share of the packer */
    uint64_t pcie_h2d, pcie_d2h;
};

rumor_err gossip_packer_init(struct gossip_packer *p,
                             const rumor_gossip *g,
                             const char *spec,
                             struct rumor_diag *diag);
void gossip_packer_free(struct gossip_packer *p);
/* Adds the packer's payload bytes to and from a device to the counts. */
void
gossip_packer_pcie(const struct gossip_packer *p, uint64_t *h2d, uint64_t *d2h);

/* RUMOR_EINVAL (diag naming the algorithm) for a codec with share=1: only
 * the compressed all-reduce agrees on scalers between nodes. */
rumor_err gossip_codec_unshared(const rumor_gossip *g,
                                const rumor_codec *codec,
                                struct rumor_diag *diag);

/* RUMOR_ENOTSUP (diag naming the algorithm) for a codec without device
 * kernels on the CUDA backend (rumor_codec_device_supported). */
rumor_err gossip_codec_on_device(const rumor_gossip *g,
                                 const rumor_codec *codec,
                                 struct rumor_diag *diag);

/* The setup CHOCO and DeepSqueeze share: gamma in (0,
 * RUMOR_GOSSIP_GAMMA_MAX] (else RUMOR_EINVAL, the diag naming the
 * algorithm), the packer for opts.codec, and one inbox slot per node. */
rumor_err gossip_codec_init(rumor_gossip *g,
                            struct gossip_packer *pack,
                            const struct rumor_gossip_msg ***slot,
                            struct rumor_diag *diag);
/* Frees what gossip_codec_init made; safe after a failed init. */
void gossip_codec_free(struct gossip_packer *pack,
                       const struct rumor_gossip_msg ***slot);

/* Encodes fill's vector of every tensor into p->buf; stochastic codecs
 * draw from (seed of this node and tensor, step). */
rumor_err gossip_packer_encode(struct gossip_packer *p,
                               const rumor_gossip *g,
                               uint64_t step,
                               gossip_fill_fn fill,
                               void *arg);

/* Decodes every tensor of a message and adds weight * C(v) into `into`
 * (numel doubles). RUMOR_EPROTO / RUMOR_ENUMERIC for a bad message. */
rumor_err gossip_packer_stage(struct gossip_packer *p,
                              const rumor_gossip *g,
                              const uint8_t *data,
                              size_t len,
                              double weight,
                              double *into);

/* As gossip_match_inbox, for messages whose lengths vary (no size check). */
rumor_err gossip_match_peers(const rumor_gossip *g,
                             const uint32_t *peers,
                             size_t peer_count,
                             const struct rumor_gossip_msg *msgs,
                             size_t count,
                             const struct rumor_gossip_msg **slot);

/* --- the ring's members (ring.c) ---------------------------------------- */

/* The ring neighbours of g: the next member and the previous one. */
uint32_t gossip_ring_next(const rumor_gossip *g);
uint32_t gossip_ring_prev(const rumor_gossip *g);
/* Whether node is a member of g's ring. */
bool gossip_ring_has(const rumor_gossip *g, uint32_t node);

/* --- the ring all-reduce engine (ring.c) -------------------------------- */

/* Works in ring positions: self and n are g's position and member count,
 * read when a reduction starts. */
struct gossip_ring {
    uint32_t self;   /* this node's position on the ring */
    size_t n;        /* members on the ring */
    size_t cap;      /* elements work can hold */
    size_t len;      /* elements being reduced */
    bool average;    /* divide the sums by n */
    bool wide;       /* float64 elements: work64 instead of work */
    float *work;     /* the caller fills work[0..len) before round 0 */
    double *work64;  /* the same, for a wide ring */
    void *sendbuf;   /* the chunk emitted this round */
    size_t send_cap; /* elements sendbuf holds */
    /* robust mixing's screen: the norms of this node's own chunks (and
     * of all of them) when the reduction starts */
    double *own;
    size_t own_cap;
    double own_total;
};

rumor_err gossip_ring_init(struct gossip_ring *r, size_t cap);

/* As gossip_ring_init, for float64 elements (work64; 8 bytes each on the
 * wire). Sums of up to 16 float32 inputs whose non-zero magnitudes lie
 * within a factor 2^24 of each other are exact in float64, so the result
 * is then the correctly rounded mean whatever the order of additions. */
rumor_err gossip_ring_init_wide(struct gossip_ring *r, size_t cap);
void gossip_ring_free(struct gossip_ring *r);
/* Rounds of one reduction over g's ring: 2 (n - 1), 0 for a lone member. */
uint32_t gossip_ring_rounds(const rumor_gossip *g);

/* Starts a reduction of work[0..len) (len <= cap) over g's ring: a sum,
 * or an average. RUMOR_ENOMEM when a smaller ring's chunks do not fit. */
rumor_err gossip_ring_start(struct gossip_ring *r,
                            const rumor_gossip *g,
                            size_t len,
                            bool average);

/* The single message of a round, to the next member, as g->out[0]. */
rumor_err
gossip_ring_emit(rumor_gossip *g, struct gossip_ring *r, uint32_t round);

/* Takes the previous member's chunk. After the last round work holds the
 * result, the same bits on every member. With robust mixing a chunk whose
 * norm passes what its members could honestly sum to (RING_SCREEN_FACTOR
 * times this node's own chunk per member, ring.c) is refused,
 * RUMOR_EPROTO. */
rumor_err gossip_ring_absorb(rumor_gossip *g,
                             struct gossip_ring *r,
                             uint32_t round,
                             const struct rumor_gossip_msg *msgs,
                             size_t count);

/* --- the payload all-gather (ring.c) ------------------------------------ */

/* Every member's payload (its own length, at most cap bytes) passes round
 * g's ring: in round r position i forwards to i + 1 the payload of
 * position i - r, so after n - 1 rounds every member holds all n. For
 * codecs whose payloads cannot be summed on the way (not linear, not the
 * same length): decoded in position order (the members' id order), they
 * give the same bits on every member. */
struct gossip_gather {
    size_t slots; /* payloads allocated: one per topology node */
    size_t cap;
    uint8_t **payload; /* position j's; the caller writes its own */
    size_t *len;       /* and its length, at g->ring_pos */
};

rumor_err
gossip_gather_init(struct gossip_gather *a, const rumor_gossip *g, size_t cap);
void gossip_gather_free(struct gossip_gather *a);

/* The single message of a round, to the next member, as g->out[0]. */
rumor_err gossip_gather_emit(rumor_gossip *g,
                             const struct gossip_gather *a,
                             uint32_t round);

/* Takes the previous member's payload; *complete after the last round. */
rumor_err gossip_gather_absorb(const rumor_gossip *g,
                               struct gossip_gather *a,
                               uint32_t round,
                               const struct rumor_gossip_msg *msgs,
                               size_t count,
                               bool *complete);

#endif
