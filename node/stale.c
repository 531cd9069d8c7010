/*
 * Stale exchanges (node/stale.h): a queue of at most S jobs, each a step
 * whose exchange is to run, with the snapshot s_t of the model and, once
 * run, the change it lands, d_t = G_t - s_t (G_t: the exchanged copy),
 * formed on the exchange's thread so that landing is one pass on the
 * training thread's. One thread runs them in step order, each
 * as rumor_node_run runs a step's exchange (node_step_begin, then
 * node_gossip_step, retried after an elastic ring's recovery), on
 * node->mix. The caller lands them at fixed steps, so a run's numbers do
 * not depend on when the network delivered: a late exchange makes the
 * caller wait instead.
 *
 * The snapshots and the changes live where the model does
 * (node->src.be: a device's memory, issue #31), and landing is the
 * backend's float arithmetic, so a device node's queue never crosses
 * PCIe; only a checkpoint's save and restore copy it through the host.
 * A job takes a snapshot-and-change pair when it is queued and gives it
 * back when it lands; pairs are made only when none is free, and the
 * last one given back is the next one taken. So the memory is that of
 * the most jobs ever in flight, not S pairs: local SGD with --stale H
 * syncs once in H steps and keeps one, where S pairs would cost 2 H
 * models (and a fault on every page of a pair the first time a sync
 * reaches it).
 */
#include "node/stale.h"

#include "core/cuda_stream.h"
#include "gossip/backend.h"
#include "node/runtime_node.h"

#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

/* A job's models: s_t and, once run, d_t, views of one block of be's
 * memory. */
struct s_pair {
    float *block;
    struct rumor_model *snap, *change;
};

struct s_job {
    uint64_t t;
    struct s_pair *pair; /* while queued */
    bool own_stream;     /* the queuing thread's (core/cuda_stream.h) */
    int device;          /* with own_stream: the queuing thread's device */
    bool done, stop;
    rumor_err rc;
};

struct node_stale {
    rumor_node *node;
    uint32_t stale;
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    const struct gossip_backend_i *be; /* the model's memory */
    size_t floats;                     /* the model's */
    struct s_job *jobs;                /* a ring of `stale` slots, under mu */
    /* the pairs made so far; free ones stacked in spare. The queuing
     * thread's alone: it takes them (push, restore) and gives them back
     * (land). */
    struct s_pair *pairs, **spare;
    size_t made, spare_count;
    size_t head, count, running; /* oldest, queued, next to run (count) */
    bool quit, stopped;
    uint64_t floor; /* the thread's: the ring went on from this step */
    struct node_stale_counters pub; /* under mu */
};

static struct s_job *
s_slot(node_stale *st, size_t k)
{
    return &st->jobs[(st->head + k) % st->stale];
}

/* The exchange's counters, read on the thread that writes them. */
static void
s_publish(node_stale *st)
{
    const rumor_node *node = st->node;
    struct node_stale_counters c = {
        .t_gossip = node->t_gossip,
        .t_wait = node->t_wait,
        .gossip_bytes_sent = node->sum.gossip_bytes_sent,
        .gossip_bytes_recv = node->sum.gossip_bytes_recv,
        .gossip_frames_sent = node->gossip_frames_sent,
    };
    rumor_gossip_screen_stats(node->g, &c.screen);
    if (node->faults != NULL)
        node_faults_stats(node->faults, &c.faults);
    if (node->elastic != NULL)
        node_elastic_view(node->elastic, &c.epoch, &c.members);
    pthread_mutex_lock(&st->mu);
    st->pub = c;
    pthread_mutex_unlock(&st->mu);
}

/* The ring moved past step want (an elastic ring's recovery: the step
 * dropped by every member, or completed with a holder's state): the
 * exchange's copy holds what the recovery left, which lands as this
 * step's change, and the exchanges queued for steps before got are
 * skipped, as the ring's members skip them. */
static void
s_moved(node_stale *st, uint64_t want, uint64_t got)
{
    rumor_log(RUMOR_LOG_WARN,
              "stale exchange of step %llu: the ring went on from step "
              "%llu; the steps between are not exchanged",
              (unsigned long long)want + 1,
              (unsigned long long)got + 1);
    st->floor = got;
}

/* Step j->t's exchange on node->mix, as rumor_node_run's loop runs one. */
static rumor_err
s_exchange(node_stale *st, struct s_job *j)
{
    rumor_node *node = st->node;
    uint64_t t = j->t;
    for (;;) {
        bool stop = false;
        rumor_err rc = node_step_begin(node, &t, &stop);
        if (rc != RUMOR_OK || stop) {
            j->stop = stop;
            return rc;
        }
        if (t < j->t) { /* a ring never goes back */
            rumor_log(RUMOR_LOG_ERROR,
                      "stale exchange of step %llu: the ring went back to "
                      "step %llu",
                      (unsigned long long)j->t + 1,
                      (unsigned long long)t + 1);
            return RUMOR_EPROTO;
        }
        if (t > j->t) {
            s_moved(st, j->t, t);
            return RUMOR_OK;
        }
        uint64_t deadline = rumor_clock_ns() + node_step_span(node, t);
        rc = node_gossip_step(node, NULL, t, deadline);
        if (rc == RUMOR_OK || !node_step_retry(node, &rc, &t) || rc != RUMOR_OK)
            return rc;
        if (t > j->t) {
            s_moved(st, j->t, t);
            return RUMOR_OK;
        }
    }
}

/* d = g - s, in float as the simulator does: g + -1 s (a product by -1
 * is exact, so that is g - s), on be's memory. */
static rumor_err
s_change(node_stale *st,
         struct rumor_model *d,
         const struct rumor_model *g,
         const struct rumor_model *s)
{
    rumor_err rc = RUMOR_OK;
    for (size_t k = 0; k < d->count && rc == RUMOR_OK; k++)
        rc = st->be->add_scaled(d->tensors[k].data,
                                g->tensors[k].data,
                                -1.0f,
                                s->tensors[k].data,
                                rumor_tensor_numel(&d->tensors[k]));
    return rc;
}

static void
s_run(node_stale *st, struct s_job *j)
{
    rumor_node *node = st->node;
    /* on the device and stream the snapshot was copied on, after that
     * copy (a peer's tensors need not be on device 0) */
    if (j->own_stream)
        core_cuda_device_set(j->device);
    bool was = core_cuda_own_stream(j->own_stream);
    struct s_pair *pair = j->pair;
    rumor_err rc =
        node_model_copy(st->be, node->mix, pair->snap, GOSSIP_ON_DEVICE);
    /* a step the ring went past changes nothing */
    if (rc == RUMOR_OK && j->t >= st->floor)
        rc = s_exchange(st, j);
    if (rc == RUMOR_OK && !j->stop)
        rc = s_change(st, pair->change, node->mix, pair->snap);
    core_cuda_own_stream(was);
    s_publish(st);
    pthread_mutex_lock(&st->mu);
    j->rc = rc;
    j->done = true;
    /* no later exchange runs once the stop is agreed or one failed */
    st->stopped = st->stopped || j->stop || rc != RUMOR_OK;
    pthread_cond_broadcast(&st->cv);
    pthread_mutex_unlock(&st->mu);
}

static void *
s_main(void *arg)
{
    node_stale *st = arg;
    pthread_mutex_lock(&st->mu);
    for (;;) {
        while (!st->quit && (st->running == st->count || st->stopped))
            pthread_cond_wait(&st->cv, &st->mu);
        if (st->quit)
            break;
        struct s_job *j = s_slot(st, st->running++);
        pthread_mutex_unlock(&st->mu);
        s_run(st, j);
        pthread_mutex_lock(&st->mu);
    }
    pthread_mutex_unlock(&st->mu);
    return NULL;
}

static rumor_err
s_jobs_new(node_stale *st, const struct rumor_model *model)
{
    st->jobs = calloc(st->stale, sizeof *st->jobs);
    st->pairs = calloc(st->stale, sizeof *st->pairs);
    st->spare = calloc(st->stale, sizeof *st->spare);
    for (size_t k = 0; k < model->count; k++)
        st->floats += rumor_tensor_numel(&model->tensors[k]);
    return st->jobs != NULL && st->pairs != NULL && st->spare != NULL
               ? RUMOR_OK
               : RUMOR_ENOMEM;
}

/* A free pair for job j: the last one given back, else a new one. */
static rumor_err
s_pair_take(node_stale *st, struct s_job *j)
{
    if (st->spare_count > 0) {
        j->pair = st->spare[--st->spare_count];
        return RUMOR_OK;
    }
    struct s_pair *p = &st->pairs[st->made];
    const struct rumor_model *shape = st->node->mix;
    rumor_err rc =
        st->be->alloc((2 * st->floats + 1) * sizeof(float), (void **)&p->block);
    if (rc == RUMOR_OK)
        rc = node_model_view(shape, p->block, &p->snap);
    if (rc == RUMOR_OK)
        rc = node_model_view(shape, p->block + st->floats, &p->change);
    if (rc != RUMOR_OK) {
        rumor_model_free(&p->snap);
        st->be->release(p->block);
        p->block = NULL;
        return rc;
    }
    st->made++;
    j->pair = p;
    return RUMOR_OK;
}

static void
s_pair_give(node_stale *st, struct s_job *j)
{
    st->spare[st->spare_count++] = j->pair;
    j->pair = NULL;
}

static void
s_free(node_stale *st)
{
    for (size_t k = 0; k < st->made; k++) {
        rumor_model_free(&st->pairs[k].snap);
        rumor_model_free(&st->pairs[k].change);
        st->be->release(st->pairs[k].block);
    }
    free(st->pairs);
    free(st->spare);
    free(st->jobs);
    free(st);
}

rumor_err
node_stale_start(rumor_node *node, uint32_t stale, node_stale **out)
{
    *out = NULL;
    node_stale *st = calloc(1, sizeof *st);
    if (st == NULL)
        return RUMOR_ENOMEM;
    st->node = node;
    st->stale = stale;
    st->be = node->src.be != NULL ? node->src.be : &gossip_backend_host;
    rumor_err rc = s_jobs_new(st, node->mix);
    if (rc == RUMOR_OK && pthread_mutex_init(&st->mu, NULL) != 0)
        rc = RUMOR_ENOMEM;
    /* the counters as they stand: the metrics lines before the first
     * exchange ends (the ring's view, a resume's byte counts) */
    if (rc == RUMOR_OK)
        s_publish(st);
    if (rc == RUMOR_OK && pthread_cond_init(&st->cv, NULL) != 0) {
        pthread_mutex_destroy(&st->mu);
        rc = RUMOR_ENOMEM;
    }
    if (rc == RUMOR_OK && pthread_create(&st->thread, NULL, s_main, st) != 0) {
        pthread_cond_destroy(&st->cv);
        pthread_mutex_destroy(&st->mu);
        rc = RUMOR_ENOMEM;
    }
    if (rc != RUMOR_OK) {
        s_free(st);
        return rc;
    }
    *out = st;
    return RUMOR_OK;
}

void
node_stale_stop(node_stale **self_p)
{
    node_stale *st = *self_p;
    if (st == NULL)
        return;
    pthread_mutex_lock(&st->mu);
    st->quit = true;
    pthread_cond_broadcast(&st->cv);
    pthread_mutex_unlock(&st->mu);
    pthread_join(st->thread, NULL);
    pthread_cond_destroy(&st->cv);
    pthread_mutex_destroy(&st->mu);
    /* what the queue cost: an operator sizing device memory for a long
     * --stale learns what the run really held */
    if (st->made > 0)
        rumor_log(RUMOR_LOG_INFO,
                  "stale exchanges (--stale %u): at most %zu in flight, "
                  "held in %zu model copies (%.1f MB)",
                  st->stale,
                  st->made,
                  2 * st->made,
                  (double)(2 * st->made * st->floats * sizeof(float)) / 1e6);
    s_free(st);
    *self_p = NULL;
}

rumor_err
node_stale_push(node_stale *st, const struct rumor_model *model, uint64_t t)
{
    pthread_mutex_lock(&st->mu);
    /* S queued: the oldest lands at t at the latest, before this push */
    if (st->count == st->stale) {
        pthread_mutex_unlock(&st->mu);
        return RUMOR_EINVAL;
    }
    struct s_job *j = s_slot(st, st->count);
    pthread_mutex_unlock(&st->mu);
    /* the slot is free: the thread reads only slots below count */
    rumor_err rc = s_pair_take(st, j);
    if (rc == RUMOR_OK)
        rc = node_model_copy(st->be, j->pair->snap, model, GOSSIP_ON_DEVICE);
    if (rc != RUMOR_OK && j->pair != NULL)
        s_pair_give(st, j);
    if (rc != RUMOR_OK)
        return rc;
    j->t = t;
    j->own_stream = core_cuda_own_stream_on();
    j->device = j->own_stream ? core_cuda_device() : -1;
    j->done = j->stop = false;
    j->rc = RUMOR_OK;
    pthread_mutex_lock(&st->mu);
    st->count++;
    pthread_cond_broadcast(&st->cv);
    pthread_mutex_unlock(&st->mu);
    return RUMOR_OK;
}

/* model += d_t, in float as the simulator does, on be's memory. */
static rumor_err
s_apply(node_stale *st, struct rumor_model *model, const struct s_job *j)
{
    rumor_err rc = RUMOR_OK;
    for (size_t k = 0; k < model->count && rc == RUMOR_OK; k++) {
        float *x = model->tensors[k].data;
        size_t n = rumor_tensor_numel(&model->tensors[k]);
        rc = st->be->add(x, x, j->pair->change->tensors[k].data, n);
    }
    return rc;
}

/* The oldest job once it is due by step t and has run (NULL: none due).
 * After the stop was agreed, it and the jobs after it never run: they
 * stay queued, unrun, for the final checkpoint, and *stopped is set. */
static struct s_job *
s_oldest_due(node_stale *st, uint64_t t, bool *stopped)
{
    pthread_mutex_lock(&st->mu);
    struct s_job *j = st->count > 0 ? s_slot(st, 0) : NULL;
    if (j != NULL && t != UINT64_MAX && j->t + st->stale > t)
        j = NULL;
    while (j != NULL && !j->done && !(st->stopped && st->running == 0))
        pthread_cond_wait(&st->cv, &st->mu);
    if (j != NULL && (!j->done || j->stop)) {
        j->done = j->stop = false; /* a stop's exchange did not run */
        st->running = 0;
        *stopped = true;
        j = NULL;
    }
    pthread_mutex_unlock(&st->mu);
    return j;
}

static void
s_pop(node_stale *st)
{
    s_pair_give(st, s_slot(st, 0));
    pthread_mutex_lock(&st->mu);
    st->head = (st->head + 1) % st->stale;
    st->count--;
    st->running--;
    pthread_mutex_unlock(&st->mu);
}

rumor_err
node_stale_land(node_stale *st,
                struct rumor_model *model,
                uint64_t t,
                bool *stopped)
{
    *stopped = false;
    for (;;) {
        struct s_job *j = s_oldest_due(st, t, stopped);
        if (j == NULL)
            return RUMOR_OK;
        if (j->rc != RUMOR_OK)
            return j->rc;
        rumor_err rc = s_apply(st, model, j);
        if (rc != RUMOR_OK)
            return rc;
        s_pop(st);
    }
}

bool
node_stale_idle(const node_stale *st)
{
    node_stale *m = (node_stale *)st;
    pthread_mutex_lock(&m->mu);
    bool idle = m->count == 0;
    pthread_mutex_unlock(&m->mu);
    return idle;
}

void
node_stale_counters(node_stale *st, struct node_stale_counters *out)
{
    pthread_mutex_lock(&st->mu);
    *out = st->pub;
    pthread_mutex_unlock(&st->mu);
}

/* --- checkpoints ------------------------------------------------------
 * The exchanges in flight, so that a resumed run lands them at the steps
 * it would have: u32 count, then per exchange u64 step, u8 ran, the
 * snapshot's floats and, when it ran, the model's float count more: the
 * change d_t (ran = 2) or, as builds before 2026-11-29 wrote, the
 * exchanged copy G_t (ran = 1), whose change is formed on restore. Those
 * that ran come first (they run in order). */
enum { S_UNRUN = 0, S_RAN_COPY = 1, S_RAN_CHANGE = 2 };

/* m's floats appended to out, copied from be's memory through the host. */
static rumor_err
s_put_model(const node_stale *st, rumor_buf *out, const struct rumor_model *m)
{
    rumor_err rc = RUMOR_OK;
    for (size_t k = 0; k < m->count && rc == RUMOR_OK; k++) {
        size_t bytes = rumor_tensor_numel(&m->tensors[k]) * sizeof(float);
        rc = rumor_buf_reserve(out, bytes);
        if (rc == RUMOR_OK)
            rc = st->be->copy(out->data + out->len,
                              m->tensors[k].data,
                              bytes,
                              GOSSIP_TO_HOST);
        if (rc == RUMOR_OK)
            out->len += bytes;
    }
    return rc;
}

rumor_err
node_stale_save(node_stale *st, rumor_buf *out)
{
    pthread_mutex_lock(&st->mu);
    /* every exchange queued runs first, unless the stop was agreed */
    while (!st->stopped && st->running < st->count)
        pthread_cond_wait(&st->cv, &st->mu);
    while (st->running > 0 && !s_slot(st, st->running - 1)->done)
        pthread_cond_wait(&st->cv, &st->mu);
    size_t count = st->count;
    pthread_mutex_unlock(&st->mu);
    uint32_t n = (uint32_t)count;
    rumor_err rc = rumor_buf_append(out, &n, sizeof n);
    for (size_t k = 0; k < count && rc == RUMOR_OK; k++) {
        const struct s_job *j = s_slot(st, k);
        uint8_t ran =
            j->done && !j->stop && j->rc == RUMOR_OK ? S_RAN_CHANGE : S_UNRUN;
        rc = rumor_buf_append(out, &j->t, sizeof j->t);
        if (rc == RUMOR_OK)
            rc = rumor_buf_append(out, &ran, 1);
        if (rc == RUMOR_OK)
            rc = s_put_model(st, out, j->pair->snap);
        if (rc == RUMOR_OK && ran)
            rc = s_put_model(st, out, j->pair->change);
    }
    return rc;
}

/* m's floats from p (host memory) into be's memory. */
static rumor_err
s_get_model(const node_stale *st, struct rumor_model *m, const uint8_t *p)
{
    rumor_err rc = RUMOR_OK;
    for (size_t k = 0; k < m->count && rc == RUMOR_OK; k++) {
        size_t bytes = rumor_tensor_numel(&m->tensors[k]) * sizeof(float);
        rc = st->be->copy(m->tensors[k].data, p, bytes, GOSSIP_TO_DEVICE);
        p += bytes;
    }
    return rc;
}

static rumor_err
s_restore_job(node_stale *st,
              size_t k,
              uint64_t t,
              uint8_t ran,
              const uint8_t *p,
              size_t floats)
{
    struct s_job *j = &st->jobs[k];
    *j = (struct s_job){.t = t, .done = ran != S_UNRUN, .rc = RUMOR_OK};
    rumor_err rc = s_pair_take(st, j);
    if (rc != RUMOR_OK)
        return rc;
    struct s_pair *pair = j->pair;
    rc = s_get_model(st, pair->snap, p);
    if (rc == RUMOR_OK && ran != S_UNRUN)
        rc = s_get_model(st, pair->change, p + floats);
    if (rc == RUMOR_OK && ran == S_RAN_COPY)
        rc = s_change(st, pair->change, pair->change, pair->snap);
    return rc;
}

/* A bounds-checked walk over a saved queue (the checkpoint's bytes are
 * outside input); with jobs != NULL it also copies them in. */
static const char *
s_walk(const uint8_t *p,
       size_t len,
       size_t numel,
       uint32_t stale,
       uint64_t step,
       node_stale *into)
{
    uint32_t n = 0;
    if (len < sizeof n)
        return "truncated";
    memcpy(&n, p, sizeof n);
    size_t at = sizeof n, floats = numel * sizeof(float);
    if (n > stale)
        return "more exchanges in flight than --stale allows";
    bool ran_before = true;
    uint64_t last = 0;
    for (uint32_t k = 0; k < n; k++) {
        uint64_t t = 0;
        if (len - at < sizeof t + 1)
            return "truncated";
        memcpy(&t, p + at, sizeof t);
        uint8_t ran = p[at + sizeof t];
        at += sizeof t + 1;
        if (ran > S_RAN_CHANGE || (ran && !ran_before))
            return "an exchange that ran after one that did not";
        if (t >= step || t + stale < step || (k > 0 && t <= last))
            return "an exchange of a step that cannot be in flight";
        size_t need = floats * (ran ? 2u : 1u);
        if (len - at < need)
            return "truncated";
        for (size_t e = 0; e < need / sizeof(float); e++) {
            float v;
            memcpy(&v, p + at + e * sizeof v, sizeof v);
            if (!isfinite(v))
                return "a value that is not finite";
        }
        if (into != NULL &&
            s_restore_job(into, k, t, ran, p + at, floats) != RUMOR_OK)
            return "the copy into the model's memory failed";
        at += need;
        ran_before = ran;
        last = t;
    }
    return at == len ? NULL : "trailing bytes";
}

rumor_err
node_stale_check(const uint8_t *p,
                 size_t len,
                 size_t numel,
                 uint32_t stale,
                 uint64_t step,
                 const char **why)
{
    *why = s_walk(p, len, numel, stale, step, NULL);
    return *why == NULL ? RUMOR_OK : RUMOR_EPROTO;
}

rumor_err
node_stale_restore(node_stale *st, const uint8_t *p, size_t len, uint64_t step)
{
    size_t numel = 0;
    for (size_t k = 0; k < st->node->model->count; k++)
        numel += rumor_tensor_numel(&st->node->model->tensors[k]);
    pthread_mutex_lock(&st->mu);
    const char *why = st->count == 0
                          ? s_walk(p, len, numel, st->stale, step, st)
                          : "exchanges already queued";
    if (why == NULL) {
        uint32_t n = 0;
        memcpy(&n, p, sizeof n);
        st->head = 0;
        st->count = n;
        st->running = 0;
        while (st->running < n && st->jobs[st->running].done)
            st->running++;
        pthread_cond_broadcast(&st->cv);
    } else if (st->count == 0) {
        for (size_t k = 0; k < st->stale; k++)
            if (st->jobs[k].pair != NULL) /* restored before the fault */
                s_pair_give(st, &st->jobs[k]);
    }
    pthread_mutex_unlock(&st->mu);
    return why == NULL ? RUMOR_OK : RUMOR_EPROTO;
}

uint64_t
node_stale_first(const uint8_t *p, size_t len, uint64_t none)
{
    uint32_t n = 0;
    uint64_t t = none;
    if (len >= sizeof n + sizeof t)
        memcpy(&n, p, sizeof n);
    if (n > 0)
        memcpy(&t, p + sizeof n, sizeof t);
    return t;
}
