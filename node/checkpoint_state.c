/*
 * What a node's checkpoint holds, section by section (docs/protocol.md,
 * "Checkpoint files"): meta (node, nodes, seed, algorithm, model size, to
 * refuse a checkpoint of another run), the model's tensors with their
 * shapes, the optimizer's state (rumor_optim_save), the gossip
 * algorithm's state (rumor_gossip_state_save: error memories, public
 * copies, per-edge factors, warm starts), and the runtime's counters so
 * metrics continue. The step is in the file header. The data order needs
 * nothing more: minibatches are a pure function of (seed, node, step), and
 * every random stream in compress/, lowrank/ and gossip/ is a Philox
 * counter keyed by (seed, node, step), so restoring the step restores
 * them all; this is what makes a resumed run bit-identical.
 *
 * Restoring checks everything before anything changes: meta, shapes and
 * finiteness of the model, the counters; then the optimizer and gossip
 * loaders, each of which is itself all-or-nothing (the optimizer's old
 * state is kept aside so a gossip state that does not fit puts it back).
 * A checkpoint may come from a peer one day, so the decoders here are
 * pure and bounds-checked like every other decoder of outside bytes.
 */
#include "rumor/node.h"

#include "node/checkpoint_impl.h"
#include "node/stale.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define META_BYTES    (4 + 4 + 8 + RUMOR_GOSSIP_ALGO_BYTES + 8 + 4)
#define RUNTIME_BYTES (8 * 11)

/* --- writing ---------------------------------------------------------------
 */

static rumor_err
s_put(rumor_buf *b, const void *p, size_t n)
{
    return rumor_buf_append(b, p, n);
}

static size_t
s_numel(const struct rumor_model *m)
{
    size_t n = 0;
    for (size_t t = 0; t < m->count; t++)
        n += rumor_tensor_numel(&m->tensors[t]);
    return n;
}

static rumor_err
s_meta(const struct node_ckpt_parts *p, rumor_buf *b)
{
    char algo[RUMOR_GOSSIP_ALGO_BYTES] = {0};
    snprintf(algo, sizeof algo, "%s", p->algo);
    uint64_t numel = s_numel(p->model);
    uint32_t count = (uint32_t)p->model->count;
    rumor_err rc = s_put(b, &p->node, 4);
    if (rc == RUMOR_OK)
        rc = s_put(b, &p->nodes, 4);
    if (rc == RUMOR_OK)
        rc = s_put(b, &p->seed, 8);
    if (rc == RUMOR_OK)
        rc = s_put(b, algo, sizeof algo);
    if (rc == RUMOR_OK)
        rc = s_put(b, &numel, 8);
    return rc == RUMOR_OK ? s_put(b, &count, 4) : rc;
}

static rumor_err
s_model(const struct rumor_model *m, rumor_buf *b)
{
    uint32_t count = (uint32_t)m->count;
    rumor_err rc = s_put(b, &count, 4);
    for (size_t t = 0; t < m->count && rc == RUMOR_OK; t++) {
        const struct rumor_tensor *x = &m->tensors[t];
        uint32_t ndim = (uint32_t)x->ndim;
        rc = s_put(b, &ndim, 4);
        for (size_t d = 0; d < x->ndim && rc == RUMOR_OK; d++) {
            uint64_t dim = x->shape[d];
            rc = s_put(b, &dim, 8);
        }
        if (rc == RUMOR_OK)
            rc = s_put(b, x->data, rumor_tensor_numel(x) * sizeof(float));
    }
    return rc;
}

static rumor_err
s_runtime(const struct node_ckpt_counters *c, rumor_buf *b)
{
    const uint64_t u[] = {c->step,
                          c->gossip_bytes_sent,
                          c->gossip_bytes_recv,
                          c->gossip_frames_sent,
                          c->consensus_bytes_sent,
                          c->consensus_frames_sent};
    const double d[] = {c->loss,
                        c->seconds_compute,
                        c->seconds_gossip,
                        c->seconds_wait,
                        c->stopped ? 1.0 : 0.0};
    rumor_err rc = s_put(b, u, sizeof u);
    return rc == RUMOR_OK ? s_put(b, d, sizeof d) : rc;
}

rumor_err
node_ckpt_save(const char *dir,
               uint32_t keep,
               const struct node_ckpt_parts *p,
               struct rumor_diag *diag)
{
    rumor_buf part[5];
    for (size_t i = 0; i < 5; i++)
        rumor_buf_init(&part[i], RUMOR_CHECKPOINT_FILE_MAX);
    rumor_err rc = s_meta(p, &part[0]);
    if (rc == RUMOR_OK)
        rc = s_model(p->model, &part[1]);
    size_t olen = rumor_optim_state_bytes(p->optim);
    if (rc == RUMOR_OK)
        rc = rumor_buf_reserve(&part[2], olen + 1);
    if (rc == RUMOR_OK)
        rc = rumor_optim_save(p->optim, part[2].data, olen, &part[2].len);
    if (rc == RUMOR_OK)
        rc = rumor_gossip_state_save(p->gossip, &part[3]);
    if (rc == RUMOR_OK)
        rc = s_runtime(p->counters, &part[4]);
    struct rumor_checkpoint c = {.node = p->node,
                                 .step = p->counters->step,
                                 .count = 5};
    for (size_t i = 0; i < 5; i++)
        c.sections[i] = (struct rumor_checkpoint_section){(uint32_t)i + 1,
                                                          part[i].data,
                                                          part[i].len};
    if (p->stale_out != NULL && p->stale_out->len > 0)
        c.sections[c.count++] =
            (struct rumor_checkpoint_section){RUMOR_CHECKPOINT_STALE,
                                              p->stale_out->data,
                                              p->stale_out->len};
    if (rc == RUMOR_OK)
        rc = rumor_checkpoint_write(dir, &c, keep, diag);
    else
        rumor_diag_set(diag, "", 0, 0, "checkpoint: %s", rumor_strerror(rc));
    for (size_t i = 0; i < 5; i++)
        rumor_buf_free(&part[i]);
    return rc;
}

/* --- reading ---------------------------------------------------------------
 */

/* A bounds-checked cursor; a failed take returns NULL and stays failed. */
struct s_cur {
    const uint8_t *p;
    size_t left;
    bool bad;
};

static const uint8_t *
s_take(struct s_cur *c, size_t n)
{
    if (c->bad || n > c->left) {
        c->bad = true;
        return NULL;
    }
    const uint8_t *p = c->p;
    c->p += n;
    c->left -= n;
    return p;
}

static uint64_t
s_u(struct s_cur *c, size_t n)
{
    uint64_t v = 0;
    const uint8_t *p = s_take(c, n);
    if (p != NULL)
        memcpy(&v, p, n);
    return v;
}

static rumor_err
s_refuse(struct rumor_diag *diag, uint32_t id, const char *why)
{
    rumor_diag_set(diag,
                   "",
                   0,
                   0,
                   "section %s: %s",
                   rumor_checkpoint_section_name(id),
                   why);
    return RUMOR_EPROTO;
}

static const struct rumor_checkpoint_section *
s_need(const struct rumor_checkpoint *c, uint32_t id, struct rumor_diag *diag)
{
    const struct rumor_checkpoint_section *s = rumor_checkpoint_find(c, id);
    if (s == NULL)
        (void)s_refuse(diag, id, "missing");
    return s;
}

static rumor_err
s_check_meta(const struct rumor_checkpoint_section *s,
             const struct node_ckpt_parts *p,
             struct rumor_diag *diag)
{
    if (s->len != META_BYTES)
        return s_refuse(diag, s->id, "wrong length");
    struct s_cur c = {s->data, s->len, false};
    uint32_t node = (uint32_t)s_u(&c, 4), nodes = (uint32_t)s_u(&c, 4);
    uint64_t seed = s_u(&c, 8);
    const uint8_t *algo = s_take(&c, RUMOR_GOSSIP_ALGO_BYTES);
    uint64_t numel = s_u(&c, 8);
    uint32_t count = (uint32_t)s_u(&c, 4);
    char want[RUMOR_GOSSIP_ALGO_BYTES] = {0};
    snprintf(want, sizeof want, "%s", p->algo);
    if (node != p->node || nodes != p->nodes)
        return s_refuse(diag, s->id, "another node or topology size");
    if (seed != p->seed)
        return s_refuse(diag, s->id, "another --seed (data order differs)");
    if (memcmp(algo, want, sizeof want) != 0)
        return s_refuse(diag, s->id, "another --algo");
    if (numel != s_numel(p->model) || count != p->model->count)
        return s_refuse(diag, s->id, "a model of another size");
    return RUMOR_OK;
}

/* Checks shapes and finiteness; copies into the model when apply. */
static rumor_err
s_load_model(const struct rumor_checkpoint_section *s,
             struct rumor_model *m,
             bool apply,
             struct rumor_diag *diag)
{
    struct s_cur c = {s->data, s->len, false};
    if (s_u(&c, 4) != m->count)
        return s_refuse(diag, s->id, "another tensor count");
    for (size_t t = 0; t < m->count; t++) {
        const struct rumor_tensor *x = &m->tensors[t];
        bool same = s_u(&c, 4) == x->ndim;
        for (size_t d = 0; same && d < x->ndim; d++)
            same = s_u(&c, 8) == x->shape[d];
        size_t n = rumor_tensor_numel(x);
        const uint8_t *data =
            same && n <= c.left / sizeof(float) ? s_take(&c, n * 4) : NULL;
        if (!same || data == NULL)
            return s_refuse(diag, s->id, "a tensor of another shape");
        for (size_t e = 0; e < n; e++) {
            float v;
            memcpy(&v, data + e * sizeof v, sizeof v);
            if (!isfinite(v))
                return s_refuse(diag, s->id, "a non-finite parameter");
            if (apply)
                x->data[e] = v;
        }
    }
    return c.left == 0 ? RUMOR_OK : s_refuse(diag, s->id, "trailing bytes");
}

static rumor_err
s_load_runtime(const struct rumor_checkpoint_section *s,
               const struct rumor_checkpoint *ck,
               struct node_ckpt_counters *out,
               struct rumor_diag *diag)
{
    if (s->len != RUNTIME_BYTES)
        return s_refuse(diag, s->id, "wrong length");
    struct s_cur c = {s->data, s->len, false};
    struct node_ckpt_counters k = {0};
    k.step = s_u(&c, 8);
    k.gossip_bytes_sent = s_u(&c, 8);
    k.gossip_bytes_recv = s_u(&c, 8);
    k.gossip_frames_sent = s_u(&c, 8);
    k.consensus_bytes_sent = s_u(&c, 8);
    k.consensus_frames_sent = s_u(&c, 8);
    double d[5];
    memcpy(d, s_take(&c, sizeof d), sizeof d);
    k.loss = d[0];
    k.seconds_compute = d[1];
    k.seconds_gossip = d[2];
    k.seconds_wait = d[3];
    k.stopped = d[4] == 1.0;
    if (k.step != ck->step)
        return s_refuse(diag, s->id, "a step other than the header's");
    if (out != NULL)
        *out = k;
    return RUMOR_OK;
}

/* The optimizer and gossip states, all or nothing. */
static rumor_err
s_load_states(const struct rumor_checkpoint *c,
              const struct node_ckpt_parts *p,
              struct rumor_diag *diag)
{
    const struct rumor_checkpoint_section *o =
        s_need(c, RUMOR_CHECKPOINT_OPTIM, diag);
    const struct rumor_checkpoint_section *g =
        s_need(c, RUMOR_CHECKPOINT_GOSSIP, diag);
    if (o == NULL || g == NULL)
        return RUMOR_EPROTO;
    size_t olen = rumor_optim_state_bytes(p->optim), got = 0;
    uint8_t *old = malloc(olen + 1);
    if (old == NULL)
        return RUMOR_ENOMEM;
    rumor_err rc = rumor_optim_save(p->optim, old, olen, &got);
    if (rc == RUMOR_OK && rumor_optim_load(p->optim, o->data, o->len) != 0)
        rc = s_refuse(diag, o->id, "does not fit the optimizer");
    if (rc == RUMOR_OK) {
        struct rumor_diag why = {0};
        rc = rumor_gossip_state_load(p->gossip, g->data, g->len, &why);
        if (rc != RUMOR_OK) {
            rumor_diag_set(diag, "", 0, 0, "section gossip: %s", why.msg);
            (void)rumor_optim_load(p->optim, old, got);
        }
    }
    free(old);
    return rc;
}

/* The exchanges in flight (--stale), when the file has them: they must
 * fit this run; a resume keeps their bytes for node_stale_restore. */
static rumor_err
s_check_stale(const struct rumor_checkpoint *c,
              const struct node_ckpt_parts *p,
              struct rumor_diag *diag)
{
    const struct rumor_checkpoint_section *s =
        rumor_checkpoint_find(c, RUMOR_CHECKPOINT_STALE);
    if (s == NULL)
        return RUMOR_OK;
    if (p->stale == 0)
        return s_refuse(diag,
                        s->id,
                        "exchanges in flight: resume with the run's --stale");
    const char *why = NULL;
    if (node_stale_check(s->data,
                         s->len,
                         s_numel(p->model),
                         p->stale,
                         c->step,
                         &why) != RUMOR_OK)
        return s_refuse(diag, s->id, why);
    return RUMOR_OK;
}

static rumor_err
s_keep_stale(const struct rumor_checkpoint *c, const struct node_ckpt_parts *p)
{
    const struct rumor_checkpoint_section *s =
        rumor_checkpoint_find(c, RUMOR_CHECKPOINT_STALE);
    if (s == NULL || p->stale_in == NULL)
        return RUMOR_OK;
    rumor_buf_reset(p->stale_in);
    return rumor_buf_append(p->stale_in, s->data, s->len);
}

rumor_err
node_ckpt_apply(const struct rumor_checkpoint *c,
                const struct node_ckpt_parts *p,
                struct rumor_diag *diag)
{
    const struct rumor_checkpoint_section *meta =
        s_need(c, RUMOR_CHECKPOINT_META, diag);
    const struct rumor_checkpoint_section *model =
        s_need(c, RUMOR_CHECKPOINT_MODEL, diag);
    const struct rumor_checkpoint_section *rt =
        s_need(c, RUMOR_CHECKPOINT_RUNTIME, diag);
    if (meta == NULL || model == NULL || rt == NULL)
        return RUMOR_EPROTO;
    rumor_err rc = s_check_meta(meta, p, diag);
    if (rc == RUMOR_OK)
        rc = s_load_model(model, p->model, false, diag);
    if (rc == RUMOR_OK)
        rc = s_load_runtime(rt, c, NULL, diag);
    if (rc == RUMOR_OK)
        rc = s_check_stale(c, p, diag);
    if (rc == RUMOR_OK)
        rc = s_load_states(c, p, diag);
    if (rc == RUMOR_OK)
        rc = s_keep_stale(c, p);
    if (rc != RUMOR_OK)
        return rc;
    (void)s_load_model(model, p->model, true, diag);
    return s_load_runtime(rt, c, p->counters, diag);
}

rumor_err
node_ckpt_resume(const char *dir,
                 const struct node_ckpt_parts *p,
                 struct rumor_diag *diag)
{
    rumor_buf buf;
    rumor_buf_init(&buf, RUMOR_CHECKPOINT_FILE_MAX);
    struct rumor_checkpoint c;
    char path[RUMOR_NODE_PATH_MAX + 64];
    rumor_err rc = rumor_checkpoint_read_newest(dir,
                                                p->node,
                                                &buf,
                                                &c,
                                                path,
                                                sizeof path,
                                                diag);
    if (rc == RUMOR_OK) {
        struct rumor_diag why = {0};
        rc = node_ckpt_apply(&c, p, &why);
        if (rc != RUMOR_OK)
            rumor_diag_set(diag,
                           path,
                           0,
                           0,
                           "does not fit this run: %s",
                           why.msg);
        else
            rumor_log(RUMOR_LOG_INFO,
                      "resumed from %s (step %llu)",
                      path,
                      (unsigned long long)c.step);
    }
    rumor_buf_free(&buf);
    return rc;
}

/* The step of a metrics line ({"step":N,...}), or UINT64_MAX. */
static uint64_t
s_line_step(const char *line)
{
    static const char key[] = "{\"step\":";
    if (strncmp(line, key, sizeof key - 1) != 0)
        return UINT64_MAX;
    const char *digits = line + sizeof key - 1;
    if (*digits < '0' || *digits > '9')
        return UINT64_MAX;
    return strtoull(digits, NULL, 10);
}

rumor_err
node_ckpt_trim_metrics(const char *dir,
                       uint32_t node,
                       uint64_t step,
                       struct rumor_diag *diag)
{
    char path[RUMOR_NODE_PATH_MAX + 32], tmp[RUMOR_NODE_PATH_MAX + 40];
    snprintf(path, sizeof path, "%s/node-%u.jsonl", dir, node);
    snprintf(tmp, sizeof tmp, "%s/.node-%u.jsonl.tmp", dir, node);
    FILE *in = fopen(path, "r");
    if (in == NULL)
        return errno == ENOENT ? RUMOR_OK
                               : rumor_diag_errno(diag, path, "cannot open");
    FILE *out = fopen(tmp, "w");
    if (out == NULL) {
        rumor_err rc = rumor_diag_errno(diag, tmp, "cannot create");
        fclose(in);
        return rc;
    }
    char *line = NULL;
    size_t cap = 0;
    const char *what = NULL;
    errno = 0;
    ssize_t len = 0;
    /* a line without its newline is torn (a run cut off while writing
     * it): dropped, so the resumed run's first line starts a line */
    while (what == NULL && (len = getline(&line, &cap, in)) > 0)
        if (line[len - 1] == '\n' && s_line_step(line) <= step &&
            fputs(line, out) < 0)
            what = "cannot write";
    if (what == NULL && ferror(in))
        what = "cannot read";
    free(line);
    fclose(in);
    if (fclose(out) != 0 && what == NULL)
        what = "cannot close";
    if (what == NULL && rename(tmp, path) != 0)
        what = "cannot rename into place";
    if (what == NULL)
        return RUMOR_OK;
    rumor_err rc = rumor_diag_errno(diag, tmp, what);
    (void)remove(tmp);
    return rc;
}
