/*
 * node, part 4 of 4 (include rumor/node.h): checkpoint files
 * (node/checkpoint.c; format in docs/protocol.md, "Checkpoint files", use
 * in docs/node.md).
 */
#ifndef RUMOR_PUBLIC_NODE_CHECKPOINT_H
#define RUMOR_PUBLIC_NODE_CHECKPOINT_H

#include "rumor/core.h"

#include <stddef.h>
#include <stdint.h>

/*
 * A checkpoint is a file of sections, each with its length and crc32c,
 * behind a header with a magic, a version, the node and the step. Files
 * are written to a temporary name, fsync'ed, renamed and the directory
 * fsync'ed, so a crash leaves either the previous set of files or the new
 * one, never a torn file under a checkpoint's name; the reader still
 * checks everything, and a damaged file is refused (naming the file and
 * the section) in favour of the previous good one.
 */

#define RUMOR_CHECKPOINT_VERSION       1
#define RUMOR_CHECKPOINT_MAX_SECTIONS  16
#define RUMOR_CHECKPOINT_FILE_MAX      ((size_t)1 << 40) /* read cap */
#define RUMOR_CHECKPOINT_HEADER_BYTES  32
#define RUMOR_CHECKPOINT_SECTION_BYTES 24 /* a section's own header */
#define RUMOR_CHECKPOINT_TRAILER_BYTES 8

/* Section ids written by `rumor node` (others are kept and ignored). */
typedef enum rumor_checkpoint_section_id {
    RUMOR_CHECKPOINT_META = 1,    /* node, nodes, seed, algorithm, sizes */
    RUMOR_CHECKPOINT_MODEL = 2,   /* shapes and float32 tensors */
    RUMOR_CHECKPOINT_OPTIM = 3,   /* rumor_optim_save */
    RUMOR_CHECKPOINT_GOSSIP = 4,  /* rumor_gossip_state_save */
    RUMOR_CHECKPOINT_RUNTIME = 5, /* counters for the metrics */
    RUMOR_CHECKPOINT_STALE = 6    /* --stale: the exchanges in flight */
} rumor_checkpoint_section_id;

struct rumor_checkpoint_section {
    uint32_t id;
    const uint8_t *data; /* borrowed */
    size_t len;
};

struct rumor_checkpoint {
    uint32_t node;
    uint64_t step; /* steps completed: the run continues at this step */
    size_t count;
    struct rumor_checkpoint_section sections[RUMOR_CHECKPOINT_MAX_SECTIONS];
};

/* "meta", "model", ... or "unknown". */
RUMOR_API const char *rumor_checkpoint_section_name(uint32_t id);

/* The section with that id, or NULL. */
RUMOR_API const struct rumor_checkpoint_section *
rumor_checkpoint_find(const struct rumor_checkpoint *c, uint32_t id);

/* Appends the file image of c to out. RUMOR_EINVAL for more than
 * RUMOR_CHECKPOINT_MAX_SECTIONS sections; buffer errors as they come. */
RUMOR_API rumor_err rumor_checkpoint_encode(const struct rumor_checkpoint *c,
                                            rumor_buf *out);

/* Decodes a file image: a pure function that checks the magic, version,
 * header crc, every section's header crc, length (against what is left)
 * and payload crc32c, and that nothing follows the trailer. Sections of
 * *out point into data. RUMOR_EPROTO with diag naming the section ("section
 * 2 (model): payload crc32c mismatch") on any damage. */
RUMOR_API rumor_err rumor_checkpoint_decode(const uint8_t *data,
                                            size_t len,
                                            struct rumor_checkpoint *out,
                                            struct rumor_diag *diag);

/* DIR/node-N.step-S.ckpt (S zero-padded to 12 digits) into path. */
RUMOR_API void rumor_checkpoint_path(const char *dir,
                                     uint32_t node,
                                     uint64_t step,
                                     char *path,
                                     size_t cap);

/* Writes c durably as rumor_checkpoint_path(dir, c->node, c->step):
 * creates dir, writes a temporary file, fsyncs it, renames it, fsyncs the
 * directory, then removes this node's oldest checkpoints beyond keep
 * (keep >= 1) and any temporary file a killed writer left. RUMOR_EIO with
 * diag naming the file and the system error. */
RUMOR_API rumor_err rumor_checkpoint_write(const char *dir,
                                           const struct rumor_checkpoint *c,
                                           uint32_t keep,
                                           struct rumor_diag *diag);

/* Reads node's newest checkpoint in dir that decodes, trying older ones
 * when the newest is damaged (each refusal logged as a warning naming the
 * file and the section). buf receives the file (c's sections point into
 * it), path its name. RUMOR_ENOTFOUND with diag when dir holds no good
 * checkpoint of node. */
RUMOR_API rumor_err rumor_checkpoint_read_newest(const char *dir,
                                                 uint32_t node,
                                                 rumor_buf *buf,
                                                 struct rumor_checkpoint *c,
                                                 char *path,
                                                 size_t cap,
                                                 struct rumor_diag *diag);

#endif /* RUMOR_PUBLIC_NODE_CHECKPOINT_H */
