/*
 * Metrics of a node run: DIR/node-N.jsonl, one JSON object per line,
 * written with cJSON (Debian libcjson) so every line is valid JSON
 * whatever the numbers (cJSON writes non-finite values as null; fields
 * that are not known at a step, such as accuracy between evaluations, are
 * left out instead). Each line goes to the file with one write(2) of the
 * whole line (O_APPEND), so a run that is killed keeps every completed
 * step, and a reader (`rumor plot`, a test) may follow the file while the
 * run goes on. A write that fails part-way (a full disk, a file size
 * limit) is cut back to the line before with ftruncate: no torn line
 * stays, and the next line starts on a line of its own. The format is
 * listed in docs/node.md "Metrics".
 */
#include "rumor/node.h"

#include "node/runtime_impl.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

struct node_metrics {
    int fd;                              /* O_APPEND */
    char path[RUMOR_NODE_PATH_MAX + 32]; /* for the errors */
};

int
node_mkdirs(const char *path)
{
    char buf[RUMOR_NODE_PATH_MAX];
    size_t len = strlen(path);
    if (len == 0 || len >= sizeof buf) {
        errno = len == 0 ? ENOENT : ENAMETOOLONG;
        return -1;
    }
    memcpy(buf, path, len + 1);
    for (size_t i = 1; i <= len; i++) {
        if (buf[i] != '/' && buf[i] != '\0')
            continue;
        char saved = buf[i];
        buf[i] = '\0';
        if (mkdir(buf, 0755) != 0 && errno != EEXIST)
            return -1;
        buf[i] = saved;
    }
    return 0;
}

rumor_err
node_metrics_open(const char *dir,
                  uint32_t id,
                  node_metrics **out,
                  struct rumor_diag *diag)
{
    return node_metrics_open_mode(dir, id, false, out, diag);
}

rumor_err
node_metrics_open_mode(const char *dir,
                       uint32_t id,
                       bool append,
                       node_metrics **out,
                       struct rumor_diag *diag)
{
    *out = NULL;
    if (node_mkdirs(dir) != 0)
        return rumor_diag_errno(diag, dir, "cannot create the directory");
    node_metrics *m = calloc(1, sizeof *m);
    if (m == NULL)
        return RUMOR_ENOMEM;
    snprintf(m->path, sizeof m->path, "%s/node-%u.jsonl", dir, id);
    int flags = O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC;
    m->fd = open(m->path, flags | (append ? 0 : O_TRUNC), 0644);
    if (m->fd < 0) {
        rumor_err rc =
            rumor_diag_errno(diag, m->path, "cannot open for writing");
        free(m);
        return rc;
    }
    *out = m;
    return RUMOR_OK;
}

static bool
s_add_num(cJSON *o, const char *name, double v)
{
    if (isnan(v))
        return true;
    return cJSON_AddNumberToObject(o, name, v) != NULL;
}

/* Adaptive compression: per link the estimate, budget and bytes of the
 * last message, and per layer its settings ("adapt", docs/adaptive.md). */
static bool
s_add_adapt(cJSON *o, const rumor_gossip *g)
{
    struct rumor_gossip_rank_report rank;
    if (g != NULL && rumor_gossip_adapt_rank(g, &rank)) {
        cJSON *k = cJSON_AddObjectToObject(o, "adapt_rank");
        return k != NULL && s_add_num(k, "rank", (double)rank.rank) &&
               s_add_num(k, "rel_error", rank.rel_error) &&
               s_add_num(k, "changes", (double)rank.changes);
    }
    struct rumor_gossip_link_report lr[64];
    size_t links = g != NULL ? rumor_gossip_adapt_links(g, lr, 64) : 0;
    if (links == 0)
        return true;
    cJSON *arr = cJSON_AddArrayToObject(o, "adapt");
    bool ok = arr != NULL;
    for (size_t l = 0; l < links && l < 64 && ok; l++) {
        cJSON *k = cJSON_CreateObject();
        ok = k != NULL && cJSON_AddItemToArray(arr, k);
        ok = ok && s_add_num(k, "peer", lr[l].peer);
        ok = ok && s_add_num(k, "rate_bytes_s", lr[l].rate_bytes_s);
        ok = ok && s_add_num(k, "rtt_s", lr[l].rtt_s);
        ok = ok && s_add_num(k, "budget", (double)lr[l].budget);
        ok = ok && s_add_num(k, "bytes", (double)lr[l].bytes);
        struct rumor_gossip_layer_report y[16];
        size_t layers = rumor_gossip_adapt_layers(g, l, y, 16);
        cJSON *ya = ok ? cJSON_AddArrayToObject(k, "layers") : NULL;
        ok = ya != NULL;
        for (size_t t = 0; t < layers && t < 16 && ok; t++) {
            cJSON *e = cJSON_CreateIntArray(
                (const int[]){(int)y[t].n, (int)y[t].k, (int)y[t].bits},
                3);
            ok = e != NULL && cJSON_AddItemToArray(ya, e);
            ok = ok &&
                 cJSON_AddItemToArray(e, cJSON_CreateNumber(y[t].rel_error));
        }
    }
    return ok;
}

/* Robust mixing's counters (gossip/robust.c, docs/gossip.md), every
 * gossip algorithm. */
static bool
s_add_screen(cJSON *o, const struct node_metrics_row *r)
{
    return s_add_num(o, "clipped", (double)r->clipped) &&
           s_add_num(o, "screened", (double)r->screened) &&
           s_add_num(o, "clip_radius", r->clip_radius) &&
           s_add_num(o, "rejected_outsized", (double)r->rejected_outsized);
}

/* The fault-handling counters (node/faults.c, docs/reliability.md). */
static bool
s_add_faults(cJSON *o, const struct node_metrics_row *r)
{
    return s_add_num(o, "rejected_nonfinite", (double)r->rejected_nonfinite) &&
           s_add_num(o, "rejected_malformed", (double)r->rejected_malformed) &&
           s_add_num(o, "skipped", (double)r->skipped) &&
           s_add_num(o, "peers_down", (double)r->peers_down) &&
           s_add_num(o, "readmitted", (double)r->readmitted) &&
           s_add_num(o, "control_bytes_sent", (double)r->control_bytes_sent) &&
           s_add_num(o, "control_frames_sent", (double)r->control_frames_sent);
}

/* text and a newline with one write(2) (text is cJSON's, with room for
 * nothing more, hence the copy); a short write is finished if it can be,
 * and otherwise cut back to where the line began. */
static rumor_err
s_append_line(node_metrics *m, const char *text, struct rumor_diag *diag)
{
    size_t len = strlen(text);
    char *line = malloc(len + 1);
    if (line == NULL)
        return RUMOR_ENOMEM;
    memcpy(line, text, len);
    line[len++] = '\n';
    off_t start = lseek(m->fd, 0, SEEK_END);
    size_t done = 0;
    errno = 0;
    while (done < len) {
        ssize_t w = write(m->fd, line + done, len - done);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            break;
        done += (size_t)w;
    }
    free(line);
    if (done == len)
        return RUMOR_OK;
    int err = done > 0 && errno == 0 ? EIO : errno;
    if (done > 0 && (start < 0 || ftruncate(m->fd, start) != 0))
        rumor_log(RUMOR_LOG_ERROR,
                  "%s: cannot cut a torn line back: %s",
                  m->path,
                  strerror(errno));
    errno = err;
    return rumor_diag_errno(diag, m->path, "cannot write");
}

rumor_err
node_metrics_write(node_metrics *m,
                   const struct node_metrics_row *r,
                   struct rumor_diag *diag)
{
    cJSON *o = cJSON_CreateObject();
    bool ok = o != NULL;
    /* counters are below 2^53, so doubles hold them exactly */
    ok = ok && s_add_num(o, "step", (double)r->step);
    ok = ok && s_add_num(o, "loss", r->loss);
    ok = ok && s_add_num(o, "lr", r->lr);
    ok = ok && s_add_num(o, "test_loss", r->test_loss);
    ok = ok && s_add_num(o, "accuracy", r->accuracy);
    ok = ok && s_add_num(o, "optimum_error", r->optimum_error);
    ok = ok && s_add_num(o, "bytes_sent", (double)r->bytes_sent);
    ok = ok && s_add_num(o, "bytes_recv", (double)r->bytes_recv);
    ok = ok && s_add_num(o, "frames_sent", (double)r->frames_sent);
    ok = ok &&
         s_add_num(o, "handshake_bytes_sent", (double)r->handshake_bytes_sent);
    ok =
        ok &&
        s_add_num(o, "handshake_frames_sent", (double)r->handshake_frames_sent);
    ok = ok && s_add_num(o, "gossip_bytes_sent", (double)r->gossip_bytes_sent);
    ok = ok && s_add_num(o, "gossip_bytes_recv", (double)r->gossip_bytes_recv);
    ok =
        ok && s_add_num(o, "gossip_frames_sent", (double)r->gossip_frames_sent);
    ok = ok && s_add_num(o, "consensus_edge_sq", r->consensus);
    ok = ok &&
         s_add_num(o, "consensus_bytes_sent", (double)r->consensus_bytes_sent);
    ok =
        ok &&
        s_add_num(o, "consensus_frames_sent", (double)r->consensus_frames_sent);
    ok = ok && s_add_num(o, "seconds", r->seconds);
    ok = ok && s_add_num(o, "seconds_compute", r->seconds_compute);
    ok = ok && s_add_num(o, "seconds_eval", r->seconds_eval);
    ok = ok && s_add_num(o, "seconds_gossip", r->seconds_gossip);
    ok = ok && s_add_num(o, "seconds_wait", r->seconds_wait);
    ok = ok && (!r->pcie ||
                (s_add_num(o, "pcie_h2d_bytes", (double)r->pcie_h2d_bytes) &&
                 s_add_num(o, "pcie_d2h_bytes", (double)r->pcie_d2h_bytes)));
    ok = ok && s_add_screen(o, r) && (!r->faults || s_add_faults(o, r));
    ok = ok && (!r->elastic || (s_add_num(o, "epoch", (double)r->epoch) &&
                                s_add_num(o, "members", r->members)));
    ok = ok && s_add_adapt(o, r->gossip);
    char *text = ok ? cJSON_PrintUnformatted(o) : NULL;
    cJSON_Delete(o);
    if (text == NULL)
        return RUMOR_ENOMEM;
    rumor_err rc = s_append_line(m, text, diag);
    free(text);
    return rc;
}

void
node_metrics_close(node_metrics **self_p)
{
    node_metrics *m = *self_p;
    if (m == NULL)
        return;
    close(m->fd);
    free(m);
    *self_p = NULL;
}
