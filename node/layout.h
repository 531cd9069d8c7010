/*
 * Private to node/: the description a node sends after HELLO's fixed part
 * (docs/protocol.md, "HELLO description"): the settings that must match
 * and the model's tensor list. The fingerprint only says that two nodes
 * differ; the descriptions say where, so that both ends of a refused link
 * name the same first difference ("tensor 3: node 0 has float32 [10],
 * node 1 has none"). The encoder writes into a caller buffer; the decoder
 * is pure and checks every length against what is left.
 */
#ifndef RUMOR_NODE_LAYOUT_H
#define RUMOR_NODE_LAYOUT_H

#include "rumor/node.h"

#define NODE_LAYOUT_VERSION      1u
#define NODE_LAYOUT_SETTINGS_MAX 1024 /* bytes of the settings text */

/* Writes the description of settings (printable ASCII, "key=value"
 * separated by single spaces) and the model m, whose tensor k has dtype
 * dtypes[k] (dtypes NULL: all float32), into out (cap bytes). Tensors that
 * do not fit are left out (the description says how many it lists).
 * Returns the length; 0 when cap cannot hold even the header or settings
 * is too long or not printable. */
size_t node_layout_encode(const char *settings,
                          const struct rumor_model *m,
                          const rumor_dtype *dtypes,
                          uint8_t *out,
                          size_t cap);

/* RUMOR_OK when buf (len bytes, from a peer) is a well-formed
 * description, RUMOR_EPROTO otherwise. Pure. */
rumor_err node_layout_check(const uint8_t *buf, size_t len);

/* Names the first difference between the descriptions a of node ida and
 * b of node idb in text (cap bytes, printable, the lower node id named
 * first so that both nodes write the same words): a setting, or the first
 * tensor whose shape differs or that one side lacks. Returns false when
 * either description is malformed or no difference is visible in them
 * (text then empty). Pure. */
bool node_layout_explain(const uint8_t *a,
                         size_t alen,
                         uint32_t ida,
                         const uint8_t *b,
                         size_t blen,
                         uint32_t idb,
                         char *text,
                         size_t cap);

#endif /* RUMOR_NODE_LAYOUT_H */
