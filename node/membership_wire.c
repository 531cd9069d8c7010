/*
 * The codec of the membership messages (docs/protocol.md, "Membership
 * messages"): a 16-byte header (magic, version, type, epoch), then each
 * type's fixed fields, then for ACCEPT, COMMIT and a PROMISE that carries
 * one, the value: step, holder, fate, the member count and 16 bytes per
 * member; a COMMIT ends with its votes (id, zero, signature). Everything
 * is little-endian (core/le.h); the decoder is a pure function that
 * checks every length, field and list before it returns anything, fuzzed
 * by tests/fuzz/fuzz_membership.c. It checks no signature: that needs the
 * view (node/membership.c).
 *
 * The signed statements are built here so that the encoder, the state
 * machine and the tests agree on them byte for byte: each starts with a
 * domain string of its own, so a signature over one kind of statement can
 * never be taken for another (nor for a STATE vouch, node/statesync.c).
 */
#include "node/membership.h"

#include "core/le.h"

#include <assert.h>
#include <sodium.h>
#include <string.h>

#define MEMBER_MAGIC   0x4d454d52u /* "RMEM" */
#define MEMBER_VERSION 2           /* 2: signatures (issue 33) */

#define VOTE_DOMAIN "rumor/member/vote/v2" /* NUL included in the bytes */
#define JOIN_DOMAIN "rumor/member/join/v2"
#define HASH_BYTES  32

/* value layout: step 0, holder 8, fate 12, count 16, then (id, flags, inc)
 * per member */
#define VALUE_FIXED        20
#define ENTRY_BYTES        16
#define ENTRY_FLAG_JOINING 1u
#define BALLOT_BYTES       8
#define PROMISE_FIXED      24 /* ballot, done, accepted ballot */
#define JOIN_FIXED                                     \
    (16 + NODE_MEMBER_SIG_BYTES) /* joiner, zero, inc, \
                                    signature */
#define ACCEPTED_FIXED (BALLOT_BYTES + NODE_MEMBER_SIG_BYTES)
#define COMMIT_FIXED   16 /* ballot, vote count, zero */

static bool
s_has_ballot(uint32_t type)
{
    return type == NODE_MEMBER_PREPARE || type == NODE_MEMBER_PROMISE ||
           type == NODE_MEMBER_ACCEPT || type == NODE_MEMBER_ACCEPTED;
}

static bool
s_is_join(uint32_t type)
{
    return type == NODE_MEMBER_JOIN || type == NODE_MEMBER_JOIN_FWD;
}

/* Whether the message carries a value. */
static bool
s_has_value(const struct node_member_msg *msg)
{
    return msg->type == NODE_MEMBER_ACCEPT || msg->type == NODE_MEMBER_COMMIT ||
           (msg->type == NODE_MEMBER_PROMISE && msg->accepted.round != 0);
}

/* The rules a value obeys, checked alike before encoding and after
 * decoding. */
static bool
s_value_ok(const struct node_member_view *v, uint32_t n)
{
    if (v->count == 0 || v->count > NODE_MEMBER_MAX || v->fate > 1 ||
        (v->fate == NODE_MEMBER_COMPLETE && v->step == UINT64_MAX))
        return false;
    bool holder = false;
    for (uint32_t i = 0; i < v->count; i++) {
        const struct node_member_entry *e = &v->members[i];
        if (e->id >= n || (i > 0 && e->id <= v->members[i - 1].id) ||
            (e->joining && e->inc == 0))
            return false;
        if (e->id == v->holder)
            holder = !e->joining;
    }
    return holder;
}

/* The bytes of a type's fixed fields, between header and value. */
static size_t
s_fixed(uint32_t type)
{
    switch (type) {
    case NODE_MEMBER_PREPARE:
    case NODE_MEMBER_ACCEPT:
        return BALLOT_BYTES;
    case NODE_MEMBER_PROMISE:
        return PROMISE_FIXED;
    case NODE_MEMBER_ACCEPTED:
        return ACCEPTED_FIXED;
    case NODE_MEMBER_COMMIT:
        return COMMIT_FIXED;
    case NODE_MEMBER_JOIN:
    case NODE_MEMBER_JOIN_FWD:
        return JOIN_FIXED;
    default:
        return 0;
    }
}

/* Votes sorted by id, unique, ids < n, no more than the value has
 * members' worth of room for. */
static bool
s_cert_ok(const struct node_member_cert *c, uint32_t n)
{
    if (c->count > NODE_MEMBER_MAX ||
        (c->count > 0 && (c->ballot.round == 0 || c->ballot.id >= n)) ||
        (c->count == 0 && (c->ballot.round != 0 || c->ballot.id != 0)))
        return false;
    for (uint32_t i = 0; i < c->count; i++)
        if (c->votes[i].id >= n ||
            (i > 0 && c->votes[i].id <= c->votes[i - 1].id))
            return false;
    return true;
}

static size_t
s_bytes(const struct node_member_msg *msg)
{
    size_t n = NODE_MEMBER_HEADER_BYTES + s_fixed(msg->type);
    if (s_has_value(msg))
        n += NODE_MEMBER_VALUE_BYTES(msg->value.count);
    if (msg->type == NODE_MEMBER_COMMIT)
        n += NODE_MEMBER_VOTE_BYTES * (size_t)msg->cert.count;
    return n;
}

static bool
s_msg_ok(const struct node_member_msg *msg, uint32_t n)
{
    if (msg->type < NODE_MEMBER_PREPARE || msg->type > NODE_MEMBER_JOIN_FWD)
        return false;
    if (s_is_join(msg->type))
        return msg->epoch == 0 && msg->joiner < n && msg->inc != 0;
    if (msg->epoch == 0)
        return false;
    if (s_has_ballot(msg->type) &&
        (msg->ballot.round == 0 || msg->ballot.id >= n))
        return false;
    if (msg->type == NODE_MEMBER_PROMISE &&
        (msg->accepted.id >= n ||
         (msg->accepted.round == 0 && msg->accepted.id != 0)))
        return false;
    if (msg->type == NODE_MEMBER_COMMIT && !s_cert_ok(&msg->cert, n))
        return false;
    return !s_has_value(msg) ||
           (msg->value.epoch == msg->epoch && s_value_ok(&msg->value, n));
}

static void
s_put_value(uint8_t *p, const struct node_member_view *v)
{
    core_put_u64(p, v->step);
    core_put_u32(p + 8, v->holder);
    core_put_u32(p + 12, v->fate);
    core_put_u32(p + 16, v->count);
    for (uint32_t i = 0; i < v->count; i++) {
        uint8_t *e = p + VALUE_FIXED + (size_t)i * ENTRY_BYTES;
        core_put_u32(e, v->members[i].id);
        core_put_u32(e + 4, v->members[i].joining ? ENTRY_FLAG_JOINING : 0);
        core_put_u64(e + 8, v->members[i].inc);
    }
}

size_t
node_member_encode(const struct node_member_msg *msg, uint8_t *out, size_t cap)
{
    assert(msg != NULL);
    assert(out != NULL);
    size_t need = s_bytes(msg);
    if (!s_msg_ok(msg, NODE_MEMBER_MAX) || cap < need)
        return 0;
    memset(out, 0, need);
    core_put_u32(out, MEMBER_MAGIC);
    out[4] = MEMBER_VERSION;
    out[5] = (uint8_t)msg->type;
    core_put_u64(out + 8, msg->epoch);
    uint8_t *p = out + NODE_MEMBER_HEADER_BYTES;
    if (s_has_ballot(msg->type)) {
        core_put_u32(p, msg->ballot.round);
        core_put_u32(p + 4, msg->ballot.id);
        p += BALLOT_BYTES;
    }
    if (msg->type == NODE_MEMBER_PROMISE) {
        core_put_u64(p, msg->done);
        core_put_u32(p + 8, msg->accepted.round);
        core_put_u32(p + 12, msg->accepted.id);
        p += PROMISE_FIXED - BALLOT_BYTES;
    }
    if (msg->type == NODE_MEMBER_ACCEPTED) {
        memcpy(p, msg->sig, NODE_MEMBER_SIG_BYTES);
        p += NODE_MEMBER_SIG_BYTES;
    }
    if (msg->type == NODE_MEMBER_COMMIT) {
        core_put_u32(p, msg->cert.ballot.round);
        core_put_u32(p + 4, msg->cert.ballot.id);
        core_put_u32(p + 8, msg->cert.count);
        p += COMMIT_FIXED;
    }
    if (s_is_join(msg->type)) {
        core_put_u32(p, msg->joiner);
        core_put_u64(p + 8, msg->inc);
        memcpy(p + 16, msg->sig, NODE_MEMBER_SIG_BYTES);
        p += JOIN_FIXED;
    }
    if (s_has_value(msg)) {
        s_put_value(p, &msg->value);
        p += NODE_MEMBER_VALUE_BYTES(msg->value.count);
    }
    for (uint32_t i = 0; msg->type == NODE_MEMBER_COMMIT && i < msg->cert.count;
         i++) {
        core_put_u32(p, msg->cert.votes[i].id);
        memcpy(p + 8, msg->cert.votes[i].sig, NODE_MEMBER_SIG_BYTES);
        p += NODE_MEMBER_VOTE_BYTES;
    }
    return need;
}

/* Reads the value at p (len bytes left, all of them its own). */
static bool
s_get_value(const uint8_t *p, size_t len, struct node_member_view *v)
{
    if (len < VALUE_FIXED)
        return false;
    uint32_t fate = core_get_u32(p + 12);
    uint32_t count = core_get_u32(p + 16);
    if (fate > 1 || count == 0 || count > NODE_MEMBER_MAX ||
        len != NODE_MEMBER_VALUE_BYTES(count))
        return false;
    v->step = core_get_u64(p);
    v->holder = core_get_u32(p + 8);
    v->fate = fate;
    v->count = count;
    for (uint32_t i = 0; i < count; i++) {
        const uint8_t *e = p + VALUE_FIXED + (size_t)i * ENTRY_BYTES;
        uint32_t flags = core_get_u32(e + 4);
        if ((flags & ~ENTRY_FLAG_JOINING) != 0)
            return false;
        v->members[i].id = core_get_u32(e);
        v->members[i].joining = flags != 0;
        v->members[i].inc = core_get_u64(e + 8);
    }
    return true;
}

/* Reads the COMMIT's votes at p (len bytes left, all of them theirs). */
static bool
s_get_votes(const uint8_t *p, size_t len, struct node_member_cert *c)
{
    if (c->count > NODE_MEMBER_MAX ||
        len != NODE_MEMBER_VOTE_BYTES * (size_t)c->count)
        return false;
    for (uint32_t i = 0; i < c->count; i++) {
        const uint8_t *v = p + (size_t)i * NODE_MEMBER_VOTE_BYTES;
        if (core_get_u32(v + 4) != 0)
            return false;
        c->votes[i].id = core_get_u32(v);
        memcpy(c->votes[i].sig, v + 8, NODE_MEMBER_SIG_BYTES);
    }
    return true;
}

/* Reads the fixed fields of out->type at p (fixed bytes). */
static bool
s_get_fixed(const uint8_t *p, struct node_member_msg *out)
{
    if (s_has_ballot(out->type)) {
        out->ballot.round = core_get_u32(p);
        out->ballot.id = core_get_u32(p + 4);
    }
    if (out->type == NODE_MEMBER_PROMISE) {
        out->done = core_get_u64(p + 8);
        out->accepted.round = core_get_u32(p + 16);
        out->accepted.id = core_get_u32(p + 20);
    }
    if (out->type == NODE_MEMBER_ACCEPTED)
        memcpy(out->sig, p + BALLOT_BYTES, NODE_MEMBER_SIG_BYTES);
    if (out->type == NODE_MEMBER_COMMIT) {
        out->cert.ballot.round = core_get_u32(p);
        out->cert.ballot.id = core_get_u32(p + 4);
        out->cert.count = core_get_u32(p + 8);
        if (core_get_u32(p + 12) != 0)
            return false;
    }
    if (s_is_join(out->type)) {
        if (core_get_u32(p + 4) != 0)
            return false;
        out->joiner = core_get_u32(p);
        out->inc = core_get_u64(p + 8);
        memcpy(out->sig, p + 16, NODE_MEMBER_SIG_BYTES);
    }
    return true;
}

static rumor_err
s_decode(const uint8_t *buf,
         size_t len,
         uint32_t n,
         struct node_member_msg *out)
{
    if (len < NODE_MEMBER_HEADER_BYTES || core_get_u32(buf) != MEMBER_MAGIC ||
        buf[4] != MEMBER_VERSION || buf[6] != 0 || buf[7] != 0)
        return RUMOR_EPROTO;
    out->type = buf[5];
    out->epoch = core_get_u64(buf + 8);
    const uint8_t *p = buf + NODE_MEMBER_HEADER_BYTES;
    size_t left = len - NODE_MEMBER_HEADER_BYTES;
    size_t fixed = s_fixed(out->type);
    if (fixed == 0 && out->type != NODE_MEMBER_ASK)
        return RUMOR_EPROTO; /* unknown type */
    if (left < fixed || !s_get_fixed(p, out))
        return RUMOR_EPROTO;
    p += fixed;
    left -= fixed;
    if (s_has_value(out)) {
        out->value.epoch = out->epoch;
        size_t vlen = left;
        if (out->type == NODE_MEMBER_COMMIT) {
            if (left < VALUE_FIXED)
                return RUMOR_EPROTO;
            uint32_t count = core_get_u32(p + 16);
            if (count == 0 || count > NODE_MEMBER_MAX)
                return RUMOR_EPROTO;
            vlen = NODE_MEMBER_VALUE_BYTES(count);
            if (vlen > left || !s_get_votes(p + vlen, left - vlen, &out->cert))
                return RUMOR_EPROTO;
        }
        if (!s_get_value(p, vlen, &out->value))
            return RUMOR_EPROTO;
    } else if (left != 0) {
        return RUMOR_EPROTO;
    }
    return s_msg_ok(out, n) ? RUMOR_OK : RUMOR_EPROTO;
}

rumor_err
node_member_decode(const uint8_t *buf,
                   size_t len,
                   uint32_t n,
                   struct node_member_msg *out)
{
    assert(buf != NULL || len == 0);
    assert(out != NULL);
    memset(out, 0, sizeof *out);
    if (n > NODE_MEMBER_MAX)
        return RUMOR_EINVAL;
    rumor_err rc = s_decode(buf, len, n, out);
    if (rc != RUMOR_OK)
        memset(out, 0, sizeof *out);
    return rc;
}

size_t
node_member_vote_statement(uint64_t epoch,
                           struct node_member_ballot ballot,
                           const struct node_member_view *value,
                           uint8_t out[NODE_MEMBER_STATEMENT_MAX])
{
    assert(value != NULL);
    assert(value->count <= NODE_MEMBER_MAX);
    uint8_t head[8 + VALUE_FIXED], entry[ENTRY_BYTES];
    crypto_generichash_state h;
    crypto_generichash_init(&h, NULL, 0, HASH_BYTES);
    core_put_u64(head, value->epoch);
    core_put_u64(head + 8, value->step);
    core_put_u32(head + 16, value->holder);
    core_put_u32(head + 20, value->fate);
    core_put_u32(head + 24, value->count);
    crypto_generichash_update(&h, head, sizeof head);
    for (uint32_t i = 0; i < value->count; i++) {
        core_put_u32(entry, value->members[i].id);
        core_put_u32(entry + 4,
                     value->members[i].joining ? ENTRY_FLAG_JOINING : 0);
        core_put_u64(entry + 8, value->members[i].inc);
        crypto_generichash_update(&h, entry, sizeof entry);
    }
    size_t k = sizeof VOTE_DOMAIN;
    memcpy(out, VOTE_DOMAIN, k);
    core_put_u64(out + k, epoch);
    core_put_u32(out + k + 8, ballot.round);
    core_put_u32(out + k + 12, ballot.id);
    crypto_generichash_final(&h, out + k + 16, HASH_BYTES);
    return k + 16 + HASH_BYTES;
}

size_t
node_member_join_statement(uint32_t joiner,
                           uint64_t inc,
                           uint8_t out[NODE_MEMBER_STATEMENT_MAX])
{
    size_t k = sizeof JOIN_DOMAIN;
    memcpy(out, JOIN_DOMAIN, k);
    core_put_u32(out + k, joiner);
    core_put_u64(out + k + 4, inc);
    return k + 12;
}
