/*
 * The average model of a local run. Decentralized methods leave every
 * node with its own model; the quantity the papers report next to the
 * nodes' own accuracies is the accuracy of their average x-bar (Koloskova
 * et al. 2020, Lian et al. 2017). A node cannot see x-bar, but when every
 * node ran on this machine (`rumor launch`), each one leaves its final
 * model in DIR/node-N.model and the launcher averages them here and
 * evaluates x-bar on the same held-out split the nodes used (the split
 * depends on the seed only, so node 0's workload has the right one).
 *
 * The node opens DIR/.node-N.model.tmp when it starts and writes it at
 * the end, then renames it: a node that used up its descriptors during
 * the run (idle connections count against RLIMIT_NOFILE too) still
 * leaves its model, and a reader never sees half of one.
 *
 * The model file is private to a run directory (written and read by the
 * same binary) but is still read as untrusted bytes: magic, version, the
 * tensor count and every tensor's element count must match the workload's
 * model exactly and the file length must agree, before anything is
 * copied. Little-endian (the machines Rumor targets), float32:
 *   "RMDL" u32 version=1 u32 count { u64 numel float32[numel] }*count
 */
#include "rumor/node.h"

#include "node/runtime_impl.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define NODE_MODEL_MAGIC   "RMDL"
#define NODE_MODEL_VERSION 1u

rumor_err
node_model_save(int fd,
                const char *tmp,
                const char *path,
                const struct rumor_model *m,
                struct rumor_diag *diag)
{
    /* the stream on the descriptor opened at the start: no new one */
    FILE *f = fdopen(fd, "wb");
    if (f == NULL) {
        rumor_err rc = rumor_diag_errno(diag, tmp, "cannot open for writing");
        close(fd);
        (void)unlink(tmp);
        return rc;
    }
    uint32_t head[2] = {NODE_MODEL_VERSION, (uint32_t)m->count};
    bool ok = fwrite(NODE_MODEL_MAGIC, 1, 4, f) == 4 &&
              fwrite(head, sizeof head, 1, f) == 1;
    for (size_t t = 0; t < m->count && ok; t++) {
        uint64_t numel = rumor_tensor_numel(&m->tensors[t]);
        ok = fwrite(&numel, sizeof numel, 1, f) == 1 &&
             fwrite(m->tensors[t].data, sizeof(float), numel, f) == numel;
    }
    const char *what = ok ? NULL : "cannot write";
    if (what == NULL && fflush(f) != 0)
        what = "cannot write";
    if (what == NULL && fsync(fd) != 0)
        what = "cannot fsync";
    int err = errno;
    if (fclose(f) != 0 && what == NULL) {
        what = "cannot close";
        err = errno;
    }
    if (what == NULL && rename(tmp, path) != 0) {
        what = "cannot rename into place";
        err = errno;
    }
    if (what == NULL)
        return RUMOR_OK;
    errno = err;
    rumor_err rc = rumor_diag_errno(diag, tmp, what);
    (void)unlink(tmp);
    return rc;
}

/* Adds the model in path (bytes checked against sum's shapes) to sum. */
static rumor_err
s_add_file(const char *path, struct rumor_model *sum, struct rumor_diag *diag)
{
    size_t floats = 0;
    for (size_t t = 0; t < sum->count; t++)
        floats += rumor_tensor_numel(&sum->tensors[t]);
    size_t want = 12 + sum->count * 8 + floats * sizeof(float);
    rumor_buf buf;
    rumor_buf_init(&buf, want);
    rumor_err rc = rumor_buf_read_file(&buf, path);
    if (rc == RUMOR_EIO || rc == RUMOR_ENOTFOUND) {
        (void)rumor_diag_errno(diag, path, "cannot read");
        rumor_buf_free(&buf);
        return rc;
    }
    const uint8_t *p = buf.data;
    uint32_t head[2] = {0, 0};
    if (rc == RUMOR_OK && buf.len == want) {
        memcpy(head, p + 4, sizeof head);
    }
    if (rc == RUMOR_OK &&
        (buf.len != want || memcmp(p, NODE_MODEL_MAGIC, 4) != 0 ||
         head[0] != NODE_MODEL_VERSION || head[1] != sum->count))
        rc = RUMOR_EPROTO;
    size_t off = 12;
    for (size_t t = 0; t < sum->count && rc == RUMOR_OK; t++) {
        uint64_t numel = 0;
        memcpy(&numel, p + off, sizeof numel);
        off += sizeof numel;
        size_t n = rumor_tensor_numel(&sum->tensors[t]);
        if (numel != n) {
            rc = RUMOR_EPROTO;
            break;
        }
        float *dst = sum->tensors[t].data;
        for (size_t e = 0; e < n; e++, off += sizeof(float)) {
            float v = 0;
            memcpy(&v, p + off, sizeof v);
            if (!isfinite(v))
                rc = RUMOR_ENUMERIC;
            dst[e] += v;
        }
    }
    if (rc != RUMOR_OK)
        rumor_diag_set(diag,
                       path,
                       0,
                       0,
                       "not this run's model (%s)",
                       rumor_strerror(rc));
    rumor_buf_free(&buf);
    return rc;
}

rumor_err
node_average_evaluate(const struct rumor_node_opts *opts,
                      uint32_t nodes,
                      const bool *use,
                      const char *dir,
                      struct node_average *out,
                      struct rumor_diag *diag)
{
    struct rumor_dataset *data = NULL;
    rumor_workload *w = NULL;
    struct rumor_model *avg = NULL;
    struct rumor_workload_opts wo = opts->workload;
    rumor_err rc = RUMOR_OK;
    if (opts->dataset[0] != '\0')
        rc = rumor_dataset_open(opts->dataset, wo.seed, &data, diag);
    wo.dataset = data;
    wo.node = 0;
    wo.nodes = nodes;
    wo.want_cuda = false;
    if (rc == RUMOR_OK)
        rc = rumor_workload_new(&wo, &w, diag);
    if (rc == RUMOR_OK)
        rc = rumor_model_clone(rumor_workload_model(w), &avg);
    for (size_t t = 0; rc == RUMOR_OK && t < avg->count; t++)
        memset(avg->tensors[t].data,
               0,
               rumor_tensor_numel(&avg->tensors[t]) * sizeof(float));
    uint32_t used = 0;
    for (uint32_t i = 0; i < nodes && rc == RUMOR_OK; i++) {
        if (!use[i])
            continue;
        used++;
        char path[RUMOR_NODE_PATH_MAX + 32];
        snprintf(path, sizeof path, "%s/node-%u.model", dir, i);
        rc = s_add_file(path, avg, diag);
    }
    if (rc == RUMOR_OK && used == 0)
        rc = RUMOR_EINVAL;
    for (size_t t = 0; rc == RUMOR_OK && t < avg->count; t++) {
        float *x = avg->tensors[t].data;
        for (size_t e = 0; e < rumor_tensor_numel(&avg->tensors[t]); e++)
            x[e] /= (float)used;
    }
    struct rumor_eval ev = {0};
    if (rc == RUMOR_OK)
        rc = rumor_workload_eval(w, avg, RUMOR_EVAL_TEST, &ev);
    out->test_loss = ev.loss;
    out->accuracy = ev.accuracy;
    out->optimum_error = NAN;
    const struct rumor_model *opt = NULL;
    if (rc == RUMOR_OK && rumor_workload_optimum(w, &opt) == RUMOR_OK) {
        double worst = 0;
        const struct rumor_tensor *a = &avg->tensors[0], *b = &opt->tensors[0];
        for (size_t e = 0; e < rumor_tensor_numel(a); e++)
            worst = fmax(worst, fabs((double)a->data[e] - b->data[e]));
        out->optimum_error = worst;
    }
    rumor_model_free(&avg);
    rumor_workload_destroy(&w);
    rumor_dataset_destroy(&data);
    return rc;
}

rumor_err
node_average_write(const char *dir,
                   uint32_t nodes,
                   const struct node_average *a)
{
    char path[RUMOR_NODE_PATH_MAX + 32];
    snprintf(path, sizeof path, "%s/average.json", dir);
    cJSON *o = cJSON_CreateObject();
    bool ok = o != NULL && cJSON_AddNumberToObject(o, "nodes", nodes) != NULL &&
              cJSON_AddNumberToObject(o, "test_loss", a->test_loss) != NULL;
    if (ok && !isnan(a->accuracy))
        ok = cJSON_AddNumberToObject(o, "accuracy", a->accuracy) != NULL;
    if (ok && !isnan(a->optimum_error))
        ok = cJSON_AddNumberToObject(o, "optimum_error", a->optimum_error) !=
             NULL;
    char *text = ok ? cJSON_PrintUnformatted(o) : NULL;
    cJSON_Delete(o);
    if (text == NULL)
        return RUMOR_ENOMEM;
    FILE *f = fopen(path, "w");
    int failed = f == NULL;
    if (f != NULL) {
        failed |= fprintf(f, "%s\n", text) < 0;
        failed |= fclose(f) != 0;
    }
    free(text);
    return failed ? RUMOR_EIO : RUMOR_OK;
}
