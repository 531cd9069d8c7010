/*
 * Stale exchanges (node/stale.h): a queue of at most S jobs, each a step
 * whose exchange is to run, with the snapshot s_t of the model and, once
 * run, the exchanged copy G_t. One thread runs them in step order, each
 * as rumor_node_run runs a step's exchange (node_step_begin, then
 * node_gossip_step, retried after an elastic ring's recovery), on
 * node->mix. The caller lands them at fixed steps, so a run's numbers do
 * not depend on when the network delivered: a late exchange makes the
 * caller wait instead.
 */
#include "node/stale.h"

#include "node/runtime_node.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

struct s_job {
    uint64_t t;
    struct rumor_model *snap, *result;
    bool done, stop;
    rumor_err rc;
};

struct node_stale {
    rumor_node *node;
    uint32_t stale;
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    struct s_job *jobs;          /* a ring of `stale` slots, under mu */
    size_t head, count, running; /* oldest, queued, next to run (count) */
    bool quit, stopped;
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
    pthread_mutex_lock(&st->mu);
    st->pub = c;
    pthread_mutex_unlock(&st->mu);
}

static rumor_err
s_moved(uint64_t want, uint64_t got)
{
    rumor_log(RUMOR_LOG_ERROR,
              "stale exchange of step %llu: the ring moved to step %llu "
              "while later steps were already computed; run without "
              "--stale to let a node catch up",
              (unsigned long long)want + 1,
              (unsigned long long)got + 1);
    return RUMOR_EPROTO;
}

/* Step j->t's exchange on node->mix, as rumor_node_run's loop runs one. */
static rumor_err
s_exchange(rumor_node *node, struct s_job *j)
{
    uint64_t t = j->t;
    for (;;) {
        bool stop = false;
        rumor_err rc = node_step_begin(node, &t, &stop);
        if (rc != RUMOR_OK || stop) {
            j->stop = stop;
            return rc;
        }
        if (t != j->t)
            return s_moved(j->t, t);
        uint64_t deadline = rumor_clock_ns() + node_step_span(node, t);
        rc = node_gossip_step(node, NULL, t, deadline);
        if (rc == RUMOR_OK || !node_step_retry(node, &rc, &t) || rc != RUMOR_OK)
            return rc;
        if (t != j->t)
            return s_moved(j->t, t);
    }
}

static void
s_run(node_stale *st, struct s_job *j)
{
    rumor_node *node = st->node;
    node_copy_model(node->mix, j->snap);
    rumor_err rc = s_exchange(node, j);
    if (rc == RUMOR_OK && !j->stop)
        node_copy_model(j->result, node->mix);
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
    if (st->jobs == NULL)
        return RUMOR_ENOMEM;
    rumor_err rc = RUMOR_OK;
    for (size_t k = 0; k < st->stale && rc == RUMOR_OK; k++) {
        rc = rumor_model_clone(model, &st->jobs[k].snap);
        if (rc == RUMOR_OK)
            rc = rumor_model_clone(model, &st->jobs[k].result);
    }
    return rc;
}

static void
s_free(node_stale *st)
{
    for (size_t k = 0; st->jobs != NULL && k < st->stale; k++) {
        rumor_model_free(&st->jobs[k].snap);
        rumor_model_free(&st->jobs[k].result);
    }
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
    rumor_err rc = s_jobs_new(st, node->mix);
    if (rc == RUMOR_OK && pthread_mutex_init(&st->mu, NULL) != 0)
        rc = RUMOR_ENOMEM;
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
    node_copy_model(j->snap, model);
    j->t = t;
    j->done = j->stop = false;
    j->rc = RUMOR_OK;
    pthread_mutex_lock(&st->mu);
    st->count++;
    pthread_cond_broadcast(&st->cv);
    pthread_mutex_unlock(&st->mu);
    return RUMOR_OK;
}

/* model += result - snap, in float as the simulator does. */
static void
s_apply(struct rumor_model *model, const struct s_job *j)
{
    for (size_t k = 0; k < model->count; k++) {
        float *x = model->tensors[k].data;
        const float *g = j->result->tensors[k].data;
        const float *s = j->snap->tensors[k].data;
        size_t n = rumor_tensor_numel(&model->tensors[k]);
        for (size_t e = 0; e < n; e++) {
            float d = g[e] - s[e];
            x[e] += d;
        }
    }
}

/* Waits for the oldest job and takes it off the queue. */
static struct s_job *
s_pop_done(node_stale *st)
{
    pthread_mutex_lock(&st->mu);
    struct s_job *j = s_slot(st, 0);
    while (!j->done && !(st->stopped && st->running == 0))
        pthread_cond_wait(&st->cv, &st->mu);
    st->head = (st->head + 1) % st->stale;
    st->count--;
    st->running -= st->running > 0 ? 1 : 0;
    pthread_mutex_unlock(&st->mu);
    return j;
}

rumor_err
node_stale_land(node_stale *st,
                struct rumor_model *model,
                uint64_t t,
                bool *stopped)
{
    *stopped = false;
    for (;;) {
        pthread_mutex_lock(&st->mu);
        bool due = st->count > 0 &&
                   (t == UINT64_MAX || s_slot(st, 0)->t + st->stale <= t);
        pthread_mutex_unlock(&st->mu);
        if (!due)
            return RUMOR_OK;
        struct s_job *j = s_pop_done(st);
        if (!j->done) /* after a stop or a failure: never run */
            continue;
        if (j->rc != RUMOR_OK)
            return j->rc;
        if (j->stop) {
            *stopped = true;
            return RUMOR_OK;
        }
        s_apply(model, j);
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
