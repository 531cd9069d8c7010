/*
 * Checkpoint files: the container (header, sections, trailer), durable
 * writing and the search for the newest good file. What goes into the
 * sections is node/checkpoint_state.c's.
 *
 * Layout (little-endian; docs/protocol.md, "Checkpoint files"):
 *   header   8 bytes magic "RUMRCKPT", u32 version, u32 section count,
 *            u64 step, u32 node, u32 crc32c of the 28 bytes before it;
 *   section  u32 id, u32 reserved (0), u64 payload length, u32 crc32c of
 *            the payload, u32 crc32c of the 20 bytes before it; payload;
 *   trailer  8 bytes "RCKPTEND".
 * Every part carries its own crc, so a reader can say which section of
 * which file is damaged; the count in the header and the trailer make any
 * truncation visible, even one that ends exactly at a section boundary.
 *
 * Durability follows the usual POSIX recipe (as SQLite's and LevelDB's
 * manifest writers): write a temporary file in the same directory, fsync
 * it, rename it over the final name (atomic), fsync the directory so the
 * rename itself survives a power cut. A writer killed at any moment
 * leaves at worst a stray temporary file (removed by the next write) and
 * the previous checkpoints untouched; old files are pruned only after the
 * new one is durable. The reader trusts nothing anyway: a file that fails
 * any check is refused with the section named, and the previous one used.
 */
#include "rumor/node.h"

#include "core/le.h"
#include "node/runtime_impl.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static const uint8_t s_magic[8] = {'R', 'U', 'M', 'R', 'C', 'K', 'P', 'T'};
static const uint8_t s_trailer[8] = {'R', 'C', 'K', 'P', 'T', 'E', 'N', 'D'};

#define CKPT_STEP_DIGITS 12

const char *
rumor_checkpoint_section_name(uint32_t id)
{
    switch (id) {
    case RUMOR_CHECKPOINT_META:
        return "meta";
    case RUMOR_CHECKPOINT_MODEL:
        return "model";
    case RUMOR_CHECKPOINT_OPTIM:
        return "optim";
    case RUMOR_CHECKPOINT_GOSSIP:
        return "gossip";
    case RUMOR_CHECKPOINT_RUNTIME:
        return "runtime";
    case RUMOR_CHECKPOINT_STALE:
        return "stale";
    default:
        return "unknown";
    }
}

const struct rumor_checkpoint_section *
rumor_checkpoint_find(const struct rumor_checkpoint *c, uint32_t id)
{
    for (size_t i = 0; i < c->count; i++)
        if (c->sections[i].id == id)
            return &c->sections[i];
    return NULL;
}

/* --- encoding ------------------------------------------------------------ */

rumor_err
rumor_checkpoint_encode(const struct rumor_checkpoint *c, rumor_buf *out)
{
    if (c->count == 0 || c->count > RUMOR_CHECKPOINT_MAX_SECTIONS)
        return RUMOR_EINVAL;
    uint8_t h[RUMOR_CHECKPOINT_HEADER_BYTES];
    memcpy(h, s_magic, 8);
    core_put_u32(h + 8, RUMOR_CHECKPOINT_VERSION);
    core_put_u32(h + 12, (uint32_t)c->count);
    core_put_u64(h + 16, c->step);
    core_put_u32(h + 24, c->node);
    core_put_u32(h + 28, rumor_crc32c(0, h, 28));
    rumor_err rc = rumor_buf_append(out, h, sizeof h);
    for (size_t i = 0; i < c->count && rc == RUMOR_OK; i++) {
        const struct rumor_checkpoint_section *s = &c->sections[i];
        uint8_t sh[RUMOR_CHECKPOINT_SECTION_BYTES];
        core_put_u32(sh, s->id);
        core_put_u32(sh + 4, 0);
        core_put_u64(sh + 8, s->len);
        core_put_u32(sh + 16, rumor_crc32c(0, s->data, s->len));
        core_put_u32(sh + 20, rumor_crc32c(0, sh, 20));
        rc = rumor_buf_append(out, sh, sizeof sh);
        if (rc == RUMOR_OK)
            rc = rumor_buf_append(out, s->data, s->len);
    }
    if (rc == RUMOR_OK)
        rc = rumor_buf_append(out, s_trailer, sizeof s_trailer);
    return rc;
}

/* --- decoding ------------------------------------------------------------ */

static rumor_err
s_bad(struct rumor_diag *diag, const char *what)
{
    rumor_diag_set(diag, "", 0, 0, "%s", what);
    return RUMOR_EPROTO;
}

static rumor_err
s_bad_section(struct rumor_diag *diag, size_t k, uint32_t id, const char *what)
{
    rumor_diag_set(diag,
                   "",
                   0,
                   0,
                   "section %zu (%s): %s",
                   k + 1,
                   rumor_checkpoint_section_name(id),
                   what);
    return RUMOR_EPROTO;
}

static rumor_err
s_decode_header(const uint8_t *d,
                size_t len,
                struct rumor_checkpoint *out,
                struct rumor_diag *diag)
{
    if (len < RUMOR_CHECKPOINT_HEADER_BYTES)
        return s_bad(diag, "header: truncated");
    if (memcmp(d, s_magic, 8) != 0)
        return s_bad(diag, "header: not a checkpoint (magic)");
    if (core_get_u32(d + 28) != rumor_crc32c(0, d, 28))
        return s_bad(diag, "header: crc32c mismatch");
    if (core_get_u32(d + 8) != RUMOR_CHECKPOINT_VERSION)
        return s_bad(diag, "header: unknown version");
    uint32_t count = core_get_u32(d + 12);
    if (count == 0 || count > RUMOR_CHECKPOINT_MAX_SECTIONS)
        return s_bad(diag, "header: bad section count");
    out->count = count;
    out->step = core_get_u64(d + 16);
    out->node = core_get_u32(d + 24);
    return RUMOR_OK;
}

rumor_err
rumor_checkpoint_decode(const uint8_t *data,
                        size_t len,
                        struct rumor_checkpoint *out,
                        struct rumor_diag *diag)
{
    memset(out, 0, sizeof *out);
    rumor_err rc = s_decode_header(data, len, out, diag);
    if (rc != RUMOR_OK)
        return rc;
    size_t at = RUMOR_CHECKPOINT_HEADER_BYTES;
    for (size_t k = 0; k < out->count; k++) {
        const uint8_t *sh = data + at;
        if (len - at < RUMOR_CHECKPOINT_SECTION_BYTES)
            return s_bad_section(diag, k, 0, "truncated header");
        uint32_t id = core_get_u32(sh);
        if (core_get_u32(sh + 20) != rumor_crc32c(0, sh, 20))
            return s_bad_section(diag, k, 0, "header crc32c mismatch");
        if (core_get_u32(sh + 4) != 0)
            return s_bad_section(diag, k, id, "reserved field not 0");
        at += RUMOR_CHECKPOINT_SECTION_BYTES;
        uint64_t n = core_get_u64(sh + 8);
        if (n > len - at)
            return s_bad_section(diag, k, id, "truncated payload");
        if (core_get_u32(sh + 16) != rumor_crc32c(0, data + at, (size_t)n))
            return s_bad_section(diag, k, id, "payload crc32c mismatch");
        out->sections[k] =
            (struct rumor_checkpoint_section){id, data + at, (size_t)n};
        at += (size_t)n;
    }
    if (len - at < sizeof s_trailer ||
        memcmp(data + at, s_trailer, sizeof s_trailer) != 0)
        return s_bad(diag, "trailer: missing (truncated file)");
    if (len - at != sizeof s_trailer)
        return s_bad(diag, "trailer: bytes after the end");
    return RUMOR_OK;
}

/* --- files --------------------------------------------------------------- */

void
rumor_checkpoint_path(const char *dir,
                      uint32_t node,
                      uint64_t step,
                      char *path,
                      size_t cap)
{
    snprintf(path,
             cap,
             "%s/node-%u.step-%0*llu.ckpt",
             dir,
             node,
             CKPT_STEP_DIGITS,
             (unsigned long long)step);
}

/* The step of a name "node-N.step-S.ckpt" of this node, or false. With
 * tmp, the name of a temporary file ".node-N.step-S.ckpt.tmp". */
static bool
s_parse_name(const char *name, uint32_t node, bool tmp, uint64_t *step)
{
    char prefix[48];
    snprintf(prefix, sizeof prefix, "%snode-%u.step-", tmp ? "." : "", node);
    size_t plen = strlen(prefix);
    if (strncmp(name, prefix, plen) != 0)
        return false;
    const char *digits = name + plen;
    if (digits[0] < '0' || digits[0] > '9')
        return false;
    char *end = NULL;
    errno = 0;
    unsigned long long v = strtoull(digits, &end, 10);
    if (errno != 0 || strcmp(end, tmp ? ".ckpt.tmp" : ".ckpt") != 0)
        return false;
    *step = v;
    return true;
}

static int
s_cmp_desc(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? 1 : x > y ? -1 : 0;
}

/* The steps of node's checkpoints in dir, newest first (*steps malloc'd;
 * temporary files removed when clean is set). */
static rumor_err
s_list(const char *dir, uint32_t node, bool clean, uint64_t **steps, size_t *n)
{
    *steps = NULL;
    *n = 0;
    DIR *d = opendir(dir);
    if (d == NULL)
        return errno == ENOENT ? RUMOR_ENOTFOUND : RUMOR_EIO;
    size_t cap = 0;
    rumor_err rc = RUMOR_OK;
    for (struct dirent *e = readdir(d); e != NULL && rc == RUMOR_OK;
         e = readdir(d)) {
        uint64_t step = 0;
        if (clean && s_parse_name(e->d_name, node, true, &step)) {
            char path[RUMOR_NODE_PATH_MAX + 300];
            snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
            (void)unlink(path);
            continue;
        }
        if (!s_parse_name(e->d_name, node, false, &step))
            continue;
        if (*n == cap) {
            cap = cap ? 2 * cap : 16;
            uint64_t *grown = realloc(*steps, cap * sizeof *grown);
            if (grown == NULL) {
                rc = RUMOR_ENOMEM;
                break;
            }
            *steps = grown;
        }
        (*steps)[(*n)++] = step;
    }
    closedir(d);
    if (*n > 0)
        qsort(*steps, *n, sizeof **steps, s_cmp_desc);
    return rc;
}

/* Writes all of data to fd, retrying short writes and EINTR. */
static int
s_write_all(int fd, const uint8_t *data, size_t len)
{
    while (len > 0) {
        ssize_t w = write(fd, data, len);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return -1;
        data += w;
        len -= (size_t)w;
    }
    return 0;
}

static int
s_fsync_dir(const char *dir)
{
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    int rc = fsync(fd);
    close(fd);
    return rc;
}

/* The temporary file: written whole and fsync'ed, or removed. */
static rumor_err
s_write_tmp(const char *tmp, const rumor_buf *img, struct rumor_diag *diag)
{
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0)
        return rumor_diag_errno(diag, tmp, "cannot create");
    const char *what = NULL;
    if (s_write_all(fd, img->data, img->len) != 0)
        what = "cannot write";
    else if (fsync(fd) != 0)
        what = "cannot fsync";
    int saved = errno;
    if (close(fd) != 0 && what == NULL) {
        what = "cannot close";
        saved = errno;
    }
    if (what == NULL)
        return RUMOR_OK;
    (void)unlink(tmp);
    errno = saved;
    return rumor_diag_errno(diag, tmp, what);
}

static void
s_prune(const char *dir, uint32_t node, uint32_t keep)
{
    uint64_t *steps = NULL;
    size_t n = 0;
    if (s_list(dir, node, false, &steps, &n) == RUMOR_OK)
        for (size_t i = keep; i < n; i++) {
            char path[RUMOR_NODE_PATH_MAX + 64];
            rumor_checkpoint_path(dir, node, steps[i], path, sizeof path);
            (void)unlink(path);
        }
    free(steps);
}

rumor_err
rumor_checkpoint_write(const char *dir,
                       const struct rumor_checkpoint *c,
                       uint32_t keep,
                       struct rumor_diag *diag)
{
    if (keep == 0)
        return RUMOR_EINVAL;
    if (node_mkdirs(dir) != 0)
        return rumor_diag_errno(diag, dir, "cannot create the directory");
    uint64_t *stale = NULL;
    size_t nstale = 0;
    (void)s_list(dir, c->node, true, &stale, &nstale); /* drops old temps */
    free(stale);
    rumor_buf img;
    rumor_buf_init(&img, RUMOR_CHECKPOINT_FILE_MAX);
    rumor_err rc = rumor_checkpoint_encode(c, &img);
    char path[RUMOR_NODE_PATH_MAX + 64], tmp[RUMOR_NODE_PATH_MAX + 80];
    rumor_checkpoint_path(dir, c->node, c->step, path, sizeof path);
    snprintf(tmp,
             sizeof tmp,
             "%s/.node-%u.step-%0*llu.ckpt.tmp",
             dir,
             c->node,
             CKPT_STEP_DIGITS,
             (unsigned long long)c->step);
    if (rc == RUMOR_OK)
        rc = s_write_tmp(tmp, &img, diag);
    rumor_buf_free(&img);
    if (rc != RUMOR_OK)
        return rc;
    if (rename(tmp, path) != 0) {
        rc = rumor_diag_errno(diag, path, "cannot rename the temporary file");
        (void)unlink(tmp);
        return rc;
    }
    if (s_fsync_dir(dir) != 0)
        return rumor_diag_errno(diag, dir, "cannot fsync the directory");
    s_prune(dir, c->node, keep);
    return RUMOR_OK;
}

/* Reads and decodes one file; diag says why it is refused. */
static rumor_err
s_read_one(const char *path,
           uint32_t node,
           uint64_t step,
           rumor_buf *buf,
           struct rumor_checkpoint *c,
           struct rumor_diag *diag)
{
    rumor_buf_reset(buf);
    rumor_err rc = rumor_buf_read_file(buf, path);
    if (rc == RUMOR_EIO || rc == RUMOR_ENOTFOUND) {
        (void)rumor_diag_errno(diag, "", "cannot read");
        return rc;
    }
    if (rc != RUMOR_OK) {
        rumor_diag_set(diag, "", 0, 0, "cannot read: %s", rumor_strerror(rc));
        return rc;
    }
    rc = rumor_checkpoint_decode(buf->data, buf->len, c, diag);
    if (rc == RUMOR_OK && (c->node != node || c->step != step)) {
        rumor_diag_set(diag,
                       "",
                       0,
                       0,
                       "header: node %u step %llu, not what the name says",
                       c->node,
                       (unsigned long long)c->step);
        rc = RUMOR_EPROTO;
    }
    return rc;
}

rumor_err
rumor_checkpoint_read_newest(const char *dir,
                             uint32_t node,
                             rumor_buf *buf,
                             struct rumor_checkpoint *c,
                             char *path,
                             size_t cap,
                             struct rumor_diag *diag)
{
    uint64_t *steps = NULL;
    size_t n = 0;
    rumor_err rc = s_list(dir, node, false, &steps, &n);
    if (rc == RUMOR_EIO) /* a missing directory holds no checkpoint */
        return rumor_diag_errno(diag, dir, "cannot open the directory");
    if (rc == RUMOR_ENOMEM) {
        free(steps);
        return rc;
    }
    size_t refused = 0;
    for (size_t i = 0; i < n; i++) {
        rumor_checkpoint_path(dir, node, steps[i], path, cap);
        struct rumor_diag why = {0};
        rc = s_read_one(path, node, steps[i], buf, c, &why);
        if (rc == RUMOR_OK) {
            free(steps);
            return RUMOR_OK;
        }
        refused++;
        rumor_log(RUMOR_LOG_WARN,
                  "checkpoint %s refused: %s%s",
                  path,
                  why.msg,
                  i + 1 < n ? "; trying the previous one" : "");
    }
    free(steps);
    rumor_diag_set(diag,
                   dir,
                   0,
                   0,
                   "no good checkpoint of node %u (%zu found, %zu refused)",
                   node,
                   n,
                   refused);
    return RUMOR_ENOTFOUND;
}
