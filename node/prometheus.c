/*
 * --metrics-listen ADDR:PORT: the node's counters for Prometheus, in its
 * text exposition format (version 0.0.4) at http://ADDR:PORT/metrics.
 *
 * The training thread publishes a snapshot after every step (the metrics
 * line's numbers and each linked neighbour's bytes and state); a thread of
 * this module serves it, one connection at a time, so a scrape never
 * touches the transport or the model. Bound to loopback unless an address
 * is given: the counters say who talks to whom.
 */
#include "node/runtime_impl.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <netdb.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#define PROM_REQUEST_MAX 4096
#define PROM_READ_MS     1000 /* a client that sends nothing is dropped */
#define PROM_POLL_MS     100

struct node_prom {
    int fd;
    int wake[2]; /* written on stop */
    pthread_t thread;
    pthread_mutex_t mu;
    uint32_t id;
    struct node_metrics_row row; /* the last published; gossip unused */
    double test_loss, accuracy;  /* the last evaluated */
    struct node_prom_peer *peers;
    size_t npeers, cap;
};

/* "PORT", ":PORT", "HOST:PORT" or "[V6]:PORT" into host and port. */
static int
s_split(const char *spec, char *host, size_t cap, const char **port)
{
    const char *colon = strrchr(spec, ':');
    if (colon == NULL) {
        snprintf(host, cap, "127.0.0.1");
        *port = spec;
        return 0;
    }
    const char *h = spec;
    size_t len = (size_t)(colon - spec);
    if (len >= 2 && h[0] == '[' && h[len - 1] == ']') {
        h++;
        len -= 2;
    }
    if (len >= cap)
        return -1;
    if (len == 0)
        snprintf(host, cap, "127.0.0.1");
    else {
        memcpy(host, h, len);
        host[len] = '\0';
    }
    *port = colon + 1;
    return 0;
}

static int
s_listen(const char *spec, struct rumor_diag *diag)
{
    char host[256];
    const char *port = NULL;
    if (s_split(spec, host, sizeof host, &port) != 0 || *port == '\0') {
        rumor_diag_set(diag,
                       "",
                       0,
                       0,
                       "--metrics-listen %s: give PORT or ADDR:PORT",
                       spec);
        return -1;
    }
    struct addrinfo hints = {.ai_socktype = SOCK_STREAM,
                             .ai_flags = AI_PASSIVE | AI_NUMERICSERV};
    struct addrinfo *ai = NULL;
    int rc = getaddrinfo(host, port, &hints, &ai);
    if (rc != 0) {
        rumor_diag_set(diag,
                       "",
                       0,
                       0,
                       "--metrics-listen %s: %s",
                       spec,
                       gai_strerror(rc));
        return -1;
    }
    int fd = socket(ai->ai_family, SOCK_STREAM, 0);
    int one = 1;
    if (fd >= 0)
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    int err = fd < 0 || bind(fd, ai->ai_addr, ai->ai_addrlen) != 0 ||
                      listen(fd, 8) != 0
                  ? errno
                  : 0;
    freeaddrinfo(ai);
    if (err == 0)
        return fd;
    if (fd >= 0)
        close(fd);
    rumor_diag_set(diag,
                   "",
                   0,
                   0,
                   "--metrics-listen %s: %s",
                   spec,
                   strerror(err));
    return -1;
}

static void
s_metric(FILE *out,
         const char *name,
         const char *type,
         const char *help,
         uint32_t id,
         double value)
{
    if (isnan(value))
        return;
    fprintf(out, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
    fprintf(out, "%s{node=\"%u\"} %.17g\n", name, id, value);
}

static void
s_peers(FILE *out, const struct node_prom *p)
{
    static const char *const names[][2] = {
        {"rumor_neighbour_bytes_sent_total",
         "Transport bytes sent to the neighbour."},
        {"rumor_neighbour_bytes_recv_total",
         "Transport bytes received from the neighbour."},
        {"rumor_neighbour_state", "1 for the neighbour's link state."}};
    for (size_t m = 0; m < 3; m++) {
        fprintf(out,
                "# HELP %s %s\n# TYPE %s %s\n",
                names[m][0],
                names[m][1],
                names[m][0],
                m < 2 ? "counter" : "gauge");
        for (size_t k = 0; k < p->npeers; k++) {
            const struct node_prom_peer *q = &p->peers[k];
            if (m < 2)
                fprintf(out,
                        "%s{node=\"%u\",peer=\"%u\"} %llu\n",
                        names[m][0],
                        p->id,
                        q->id,
                        (unsigned long long)(m == 0 ? q->bytes_sent
                                                    : q->bytes_recv));
            else
                fprintf(out,
                        "%s{node=\"%u\",peer=\"%u\",state=\"%s\"} 1\n",
                        names[m][0],
                        p->id,
                        q->id,
                        q->state);
        }
    }
}

/* The exposition text of the last snapshot (caller frees). */
static char *
s_render(struct node_prom *p, size_t *len)
{
    char *text = NULL;
    FILE *out = open_memstream(&text, len);
    if (out == NULL)
        return NULL;
    pthread_mutex_lock(&p->mu);
    const struct node_metrics_row *r = &p->row;
    uint32_t id = p->id;
    s_metric(out, "rumor_step", "gauge", "Steps completed.", id, r->step);
    s_metric(out, "rumor_loss", "gauge", "Minibatch loss.", id, r->loss);
    s_metric(out,
             "rumor_test_loss",
             "gauge",
             "Held-out loss, last evaluation.",
             id,
             p->test_loss);
    s_metric(out,
             "rumor_test_accuracy",
             "gauge",
             "Held-out accuracy, last evaluation.",
             id,
             p->accuracy);
    s_metric(out,
             "rumor_bytes_sent_total",
             "counter",
             "Transport bytes sent, headers in.",
             id,
             r->bytes_sent);
    s_metric(out,
             "rumor_bytes_recv_total",
             "counter",
             "Transport bytes received.",
             id,
             r->bytes_recv);
    s_metric(out,
             "rumor_gossip_bytes_sent_total",
             "counter",
             "Wire bytes of gossip messages sent.",
             id,
             r->gossip_bytes_sent);
    s_metric(out,
             "rumor_compute_seconds_total",
             "counter",
             "Gradient, optimizer and evaluation time.",
             id,
             r->seconds_compute);
    s_metric(out,
             "rumor_gossip_seconds_total",
             "counter",
             "Encode and decode time.",
             id,
             r->seconds_gossip);
    s_metric(out,
             "rumor_wait_seconds_total",
             "counter",
             "Time sending and waiting for neighbours.",
             id,
             r->seconds_wait);
    s_metric(out,
             "rumor_clipped_total",
             "counter",
             "Neighbour differences clipped (robust mixing).",
             id,
             r->clipped);
    s_metric(out,
             "rumor_clip_radius",
             "gauge",
             "The last step's clipping radius (robust mixing).",
             id,
             r->clip_radius);
    s_metric(out,
             "rumor_rejected_outsized_total",
             "counter",
             "Ring chunks refused as too large (robust mixing).",
             id,
             r->rejected_outsized);
    if (r->faults) {
        s_metric(out,
                 "rumor_rejected_nonfinite_total",
                 "counter",
                 "Neighbour messages refused for NaN or Inf.",
                 id,
                 r->rejected_nonfinite);
        s_metric(out,
                 "rumor_rejected_malformed_total",
                 "counter",
                 "Neighbour messages refused for their size.",
                 id,
                 r->rejected_malformed);
        s_metric(out,
                 "rumor_skipped_total",
                 "counter",
                 "Neighbour steps skipped past their deadline.",
                 id,
                 r->skipped);
        s_metric(out,
                 "rumor_peers_down",
                 "gauge",
                 "Neighbours marked down now.",
                 id,
                 r->peers_down);
        s_metric(out,
                 "rumor_readmitted_total",
                 "counter",
                 "Returning neighbours taken back.",
                 id,
                 r->readmitted);
    }
    if (r->pcie) {
        s_metric(out,
                 "rumor_pcie_h2d_bytes_total",
                 "counter",
                 "Peer API: bytes copied host to device (CUDA tensors).",
                 id,
                 r->pcie_h2d_bytes);
        s_metric(out,
                 "rumor_pcie_d2h_bytes_total",
                 "counter",
                 "Peer API: bytes copied device to host (CUDA tensors).",
                 id,
                 r->pcie_d2h_bytes);
    }
    s_peers(out, p);
    pthread_mutex_unlock(&p->mu);
    if (fclose(out) != 0) {
        free(text);
        return NULL;
    }
    return text;
}

static void
s_send_all(int fd, const char *data, size_t len)
{
    while (len > 0) {
        ssize_t put = send(fd, data, len, MSG_NOSIGNAL);
        if (put < 0 && errno == EINTR)
            continue;
        if (put <= 0)
            return;
        data += put;
        len -= (size_t)put;
    }
}

/* Reads the request head; 0 when it ended in time. */
static int
s_read_request(int fd, char *buf, size_t cap)
{
    size_t len = 0;
    while (len + 1 < cap) {
        ssize_t got = recv(fd, buf + len, cap - 1 - len, 0);
        if (got < 0 && errno == EINTR)
            continue;
        if (got <= 0)
            return -1;
        len += (size_t)got;
        buf[len] = '\0';
        if (strstr(buf, "\r\n\r\n") != NULL || strstr(buf, "\n\n") != NULL)
            return 0;
    }
    return -1;
}

static void
s_serve(struct node_prom *p, int fd)
{
    struct timeval tv = {PROM_READ_MS / 1000, (PROM_READ_MS % 1000) * 1000};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    char req[PROM_REQUEST_MAX];
    if (s_read_request(fd, req, sizeof req) != 0)
        return;
    bool get = strncmp(req, "GET ", 4) == 0;
    bool metrics = strncmp(req, "GET /metrics ", 13) == 0 ||
                   strncmp(req, "GET /metrics?", 13) == 0;
    size_t len = 0;
    char *body = metrics ? s_render(p, &len) : NULL;
    char head[160];
    int n = snprintf(head,
                     sizeof head,
                     "HTTP/1.0 %s\r\nContent-Type: %s\r\n"
                     "Content-Length: %zu\r\nConnection: close\r\n\r\n",
                     body != NULL ? "200 OK"
                     : get        ? "404 Not Found"
                                  : "400 Bad Request",
                     body != NULL ? "text/plain; version=0.0.4" : "text/plain",
                     body != NULL ? len : 0);
    s_send_all(fd, head, (size_t)n);
    if (body != NULL)
        s_send_all(fd, body, len);
    free(body);
}

static void *
s_main(void *arg)
{
    struct node_prom *p = arg;
    for (;;) {
        struct pollfd fds[2] = {{p->fd, POLLIN, 0}, {p->wake[0], POLLIN, 0}};
        int ready = poll(fds, 2, PROM_POLL_MS);
        if (ready > 0 && (fds[1].revents & POLLIN) != 0)
            return NULL;
        if (ready <= 0 || (fds[0].revents & POLLIN) == 0)
            continue;
        int c = accept(p->fd, NULL, NULL);
        if (c < 0)
            continue;
        s_serve(p, c);
        close(c);
    }
}

rumor_err
node_prom_start(const char *spec,
                uint32_t id,
                node_prom **out,
                struct rumor_diag *diag)
{
    struct node_prom *p = calloc(1, sizeof *p);
    if (p == NULL)
        return RUMOR_ENOMEM;
    p->id = id;
    p->row.loss = p->test_loss = p->accuracy = NAN;
    p->fd = s_listen(spec, diag);
    if (p->fd < 0) {
        free(p);
        return RUMOR_EINVAL;
    }
    pthread_mutex_init(&p->mu, NULL);
    fcntl(p->fd, F_SETFD, FD_CLOEXEC);
    if (pipe(p->wake) != 0 ||
        pthread_create(&p->thread, NULL, s_main, p) != 0) {
        close(p->fd);
        pthread_mutex_destroy(&p->mu);
        free(p);
        return RUMOR_ENOMEM;
    }
    rumor_log(RUMOR_LOG_INFO,
              "metrics for Prometheus on http://%s/metrics",
              spec);
    *out = p;
    return RUMOR_OK;
}

void
node_prom_publish(node_prom *p,
                  const struct node_metrics_row *row,
                  const struct node_prom_peer *peers,
                  size_t npeers)
{
    pthread_mutex_lock(&p->mu);
    if (npeers > p->cap) {
        struct node_prom_peer *grown =
            realloc(p->peers, npeers * sizeof *grown);
        if (grown != NULL) {
            p->peers = grown;
            p->cap = npeers;
        }
    }
    p->npeers = npeers <= p->cap ? npeers : 0;
    if (p->npeers > 0)
        memcpy(p->peers, peers, npeers * sizeof *peers);
    p->row = *row;
    p->row.gossip = NULL;
    if (!isnan(row->test_loss))
        p->test_loss = row->test_loss;
    if (!isnan(row->accuracy))
        p->accuracy = row->accuracy;
    pthread_mutex_unlock(&p->mu);
}

void
node_prom_stop(node_prom **self_p)
{
    node_prom *p = *self_p;
    if (p == NULL)
        return;
    (void)!write(p->wake[1], "x", 1);
    pthread_join(p->thread, NULL);
    close(p->wake[0]);
    close(p->wake[1]);
    close(p->fd);
    pthread_mutex_destroy(&p->mu);
    free(p->peers);
    free(p);
    *self_p = NULL;
}
