/*
 * The ZAP handler (RFC 27): the allow-list of CURVE client keys.
 *
 * libzmq asks the REP socket bound at inproc://zeromq.zap.01 in the same
 * context about every CURVE handshake; we answer 200 with the client's
 * Z85 key as User-Id when the key is one of the topology's, 400 otherwise.
 *
 * Fail closed. Debian's libzmq 4.3 admits every CURVE client when no ZAP
 * handler answers (the option that would refuse, ZMQ_ZAP_ENFORCE_DOMAIN,
 * is draft-only). So: (1) the handler is bound before any CURVE socket
 * exists (net_zap_start returns only once bound); (2) the I/O thread drops
 * every message whose User-Id is not a listed key, which a handler-less
 * handshake never sets; (3) when the handler stops on its own it says so
 * on an inproc PAIR, and the I/O thread closes its listener and reports
 * RUMOR_EAUTH. Requests are parsed defensively although they come from
 * libzmq: a malformed one is answered 400 (or dropped when it cannot be
 * answered).
 */
#include "rumor/net.h"

#include "net/net_impl.h"

#include <pthread.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zmq.h>

#define ZAP_ENDPOINT    "inproc://zeromq.zap.01"
#define ZAP_FRAMES_MAX  8
#define ZAP_FRAME_BYTES 256
#define ZAP_POLL_MS     50

struct net_zap {
    void *ctx;           /* borrowed */
    void *rep;           /* owned by the handler thread */
    uint8_t (*keys)[32]; /* raw allowed keys */
    size_t nkeys;
    char notify[128]; /* inproc endpoint told "dead" */
    pthread_t thread;
    bool started;
    int stop; /* 0 run, 1 stop and notify, 2 stop silently */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool bound; /* handler reached its loop */
    rumor_err bind_rc;
    bool done; /* the thread has closed its socket */
};

static int
s_stop_flag(struct net_zap *z)
{
    pthread_mutex_lock(&z->mu);
    int s = z->stop;
    pthread_mutex_unlock(&z->mu);
    return s;
}

/* Reads one multipart request into frames; returns the frame count, or -1
 * when it does not fit (the rest is drained). */
static int
s_recv_request(void *rep,
               uint8_t frames[ZAP_FRAMES_MAX][ZAP_FRAME_BYTES],
               size_t lens[ZAP_FRAMES_MAX])
{
    int count = 0;
    bool bad = false;
    int more = 1;
    while (more) {
        zmq_msg_t m;
        zmq_msg_init(&m);
        if (zmq_msg_recv(&m, rep, 0) < 0) {
            zmq_msg_close(&m);
            return -1;
        }
        size_t n = zmq_msg_size(&m);
        if (count < ZAP_FRAMES_MAX && n <= ZAP_FRAME_BYTES) {
            memcpy(frames[count], zmq_msg_data(&m), n);
            lens[count] = n;
        } else {
            bad = true;
        }
        count++;
        more = zmq_msg_more(&m);
        zmq_msg_close(&m);
    }
    return bad ? -1 : count;
}

static void
s_reply(void *rep,
        const uint8_t *req_id,
        size_t req_id_len,
        const char *status,
        const char *text,
        const char *user)
{
    zmq_send(rep, "1.0", 3, ZMQ_SNDMORE);
    zmq_send(rep, req_id, req_id_len, ZMQ_SNDMORE);
    zmq_send(rep, status, strlen(status), ZMQ_SNDMORE);
    zmq_send(rep, text, strlen(text), ZMQ_SNDMORE);
    zmq_send(rep, user, strlen(user), ZMQ_SNDMORE);
    zmq_send(rep, "", 0, 0);
}

static void
s_handle(struct net_zap *z)
{
    uint8_t frames[ZAP_FRAMES_MAX][ZAP_FRAME_BYTES];
    size_t lens[ZAP_FRAMES_MAX];
    int n = s_recv_request(z->rep, frames, lens);
    /* version, request id, domain, address, identity, mechanism, key */
    if (n < 6) {
        /* a REP socket must answer; a reply without request id is refused
         * by libzmq as malformed, which denies the handshake */
        s_reply(z->rep, (const uint8_t *)"", 0, "500", "bad request", "");
        return;
    }
    if (lens[0] != 3 || memcmp(frames[0], "1.0", 3) != 0) {
        s_reply(z->rep, frames[1], lens[1], "400", "bad version", "");
        return;
    }
    char addr[ZAP_FRAME_BYTES + 1];
    size_t alen = lens[3];
    for (size_t i = 0; i < alen; i++) {
        char c = (char)frames[3][i];
        addr[i] = (c >= 0x20 && c < 0x7f) ? c : '?';
    }
    addr[alen] = '\0';
    char key[ZAP_FRAME_BYTES + 32];
    bool curve = lens[5] == 5 && memcmp(frames[5], "CURVE", 5) == 0;
    if (!curve || n != 7 || lens[6] != 32) {
        snprintf(key, sizeof key, "zap:non-curve:%s", addr);
        rumor_log_limited(RUMOR_LOG_WARN,
                          key,
                          NET_REFUSAL_LOG_MS,
                          "zap: refused a non-CURVE client from %s",
                          addr);
        s_reply(z->rep, frames[1], lens[1], "400", "CURVE required", "");
        return;
    }
    for (size_t k = 0; k < z->nkeys; k++) {
        if (sodium_memcmp(z->keys[k], frames[6], 32) == 0) {
            char user[RUMOR_NET_KEY_TEXT_BYTES + 1];
            zmq_z85_encode(user, frames[6], 32);
            s_reply(z->rep, frames[1], lens[1], "200", "OK", user);
            return;
        }
    }
    char z85[RUMOR_NET_KEY_TEXT_BYTES + 1];
    zmq_z85_encode(z85, frames[6], 32);
    /* by address, not key: a flood may bring a new key every time */
    snprintf(key, sizeof key, "zap:unlisted:%s", addr);
    rumor_log_limited(RUMOR_LOG_WARN,
                      key,
                      NET_REFUSAL_LOG_MS,
                      "zap: refused unlisted key %s from %s",
                      z85,
                      addr);
    s_reply(z->rep, frames[1], lens[1], "400", "key not listed", "");
}

static void *
s_thread(void *arg)
{
    struct net_zap *z = arg;
    void *rep = zmq_socket(z->ctx, ZMQ_REP);
    rumor_err rc = RUMOR_OK;
    int linger = 0;
    if (rep == NULL)
        rc = RUMOR_EBACKEND;
    else if (zmq_setsockopt(rep, ZMQ_LINGER, &linger, sizeof linger) != 0 ||
             zmq_bind(rep, ZAP_ENDPOINT) != 0)
        rc = RUMOR_EIO;
    pthread_mutex_lock(&z->mu);
    z->bound = true;
    z->bind_rc = rc;
    z->rep = rep;
    pthread_cond_broadcast(&z->cv);
    pthread_mutex_unlock(&z->mu);
    if (rc != RUMOR_OK) {
        if (rep != NULL)
            zmq_close(rep);
        return NULL;
    }
    int stop = 0;
    while (stop == 0) {
        zmq_pollitem_t item = {rep, 0, ZMQ_POLLIN, 0};
        int r = zmq_poll(&item, 1, ZAP_POLL_MS);
        if (r < 0 && zmq_errno() == ETERM)
            break;
        if (r > 0 && (item.revents & ZMQ_POLLIN))
            s_handle(z);
        rumor_log_limited_flush(); /* the counts of a flood that ended */
        stop = s_stop_flag(z);
    }
    zmq_close(rep);
    if (stop == 1) {
        void *pair = zmq_socket(z->ctx, ZMQ_PAIR);
        if (pair != NULL) {
            zmq_setsockopt(pair, ZMQ_LINGER, &linger, sizeof linger);
            if (zmq_connect(pair, z->notify) == 0)
                zmq_send(pair, "dead", 4, ZMQ_DONTWAIT);
            zmq_close(pair);
        }
        rumor_log(RUMOR_LOG_ERROR, "zap: handler stopped");
    }
    pthread_mutex_lock(&z->mu);
    z->done = true;
    pthread_cond_broadcast(&z->cv);
    pthread_mutex_unlock(&z->mu);
    return NULL;
}

rumor_err
net_zap_start(void *ctx,
              const char *const *keys,
              size_t n,
              const char *notify_endpoint,
              struct net_zap **out)
{
    assert(ctx != NULL);
    assert(out != NULL);
    *out = NULL;
    struct net_zap *z = calloc(1, sizeof *z);
    if (z == NULL)
        return RUMOR_ENOMEM;
    z->ctx = ctx;
    pthread_mutex_init(&z->mu, NULL);
    pthread_cond_init(&z->cv, NULL);
    snprintf(z->notify, sizeof z->notify, "%s", notify_endpoint);
    rumor_err rc = RUMOR_OK;
    if (n > 0) {
        z->keys = calloc(n, sizeof z->keys[0]);
        if (z->keys == NULL) {
            rc = RUMOR_ENOMEM;
            goto done;
        }
    }
    for (size_t i = 0; i < n; i++) {
        if (keys[i] == NULL || strlen(keys[i]) != RUMOR_NET_KEY_TEXT_BYTES ||
            zmq_z85_decode(z->keys[z->nkeys], keys[i]) == NULL) {
            rc = RUMOR_EPROTO;
            goto done;
        }
        z->nkeys++;
    }
    if (pthread_create(&z->thread, NULL, s_thread, z) != 0) {
        rc = RUMOR_ENOMEM;
        goto done;
    }
    z->started = true;
    pthread_mutex_lock(&z->mu);
    while (!z->bound)
        pthread_cond_wait(&z->cv, &z->mu);
    rc = z->bind_rc;
    pthread_mutex_unlock(&z->mu);
done:
    if (rc != RUMOR_OK)
        net_zap_destroy(&z);
    *out = z;
    return rc;
}

void
net_zap_stop(struct net_zap *zap, bool silent)
{
    if (zap == NULL)
        return;
    pthread_mutex_lock(&zap->mu);
    if (zap->stop == 0)
        zap->stop = silent ? 2 : 1;
    /* wait until the socket is closed, so the caller sees the effect */
    while (zap->started && !zap->done && zap->bind_rc == RUMOR_OK)
        pthread_cond_wait(&zap->cv, &zap->mu);
    pthread_mutex_unlock(&zap->mu);
}

void
net_zap_destroy(struct net_zap **self_p)
{
    if (self_p == NULL || *self_p == NULL)
        return;
    struct net_zap *z = *self_p;
    if (z->started) {
        pthread_mutex_lock(&z->mu);
        if (z->stop == 0)
            z->stop = 2;
        pthread_mutex_unlock(&z->mu);
        pthread_join(z->thread, NULL);
    }
    if (z->keys != NULL) {
        sodium_memzero(z->keys, z->nkeys * sizeof z->keys[0]);
        free(z->keys);
    }
    pthread_mutex_destroy(&z->mu);
    pthread_cond_destroy(&z->cv);
    free(z);
    *self_p = NULL;
}
