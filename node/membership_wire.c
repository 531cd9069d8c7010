/*
 * The codec of the membership messages (docs/protocol.md, "Membership
 * messages"): a 16-byte header (magic, version, type, epoch), then each
 * type's fixed fields, then for ACCEPT, COMMIT and a PROMISE that carries
 * one, the value: step, holder, fate, the member count and 16 bytes per
 * member. Everything is little-endian (core/le.h); the decoder is a pure
 * function that checks every length, field and list before it returns
 * anything, fuzzed by tests/fuzz/fuzz_membership.c.
 */
#include "node/membership.h"

#include "core/le.h"

#include <assert.h>
#include <string.h>

#define MEMBER_MAGIC   0x4d454d52u /* "RMEM" */
#define MEMBER_VERSION 1

/* value layout: step 0, holder 8, fate 12, count 16, then (id, flags, inc)
 * per member */
#define VALUE_FIXED        20
#define ENTRY_BYTES        16
#define ENTRY_FLAG_JOINING 1u
#define BALLOT_BYTES       8
#define PROMISE_FIXED      24 /* ballot, done, accepted ballot */
#define JOIN_FIXED         16 /* joiner, zero, inc */

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

static size_t
s_bytes(const struct node_member_msg *msg)
{
    size_t n = NODE_MEMBER_HEADER_BYTES;
    if (s_has_ballot(msg->type))
        n += msg->type == NODE_MEMBER_PROMISE ? PROMISE_FIXED : BALLOT_BYTES;
    if (s_is_join(msg->type))
        n += JOIN_FIXED;
    if (s_has_value(msg))
        n += NODE_MEMBER_VALUE_BYTES(msg->value.count);
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
    if (s_is_join(msg->type)) {
        core_put_u32(p, msg->joiner);
        core_put_u64(p + 8, msg->inc);
        p += JOIN_FIXED;
    }
    if (s_has_value(msg))
        s_put_value(p, &msg->value);
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
    size_t fixed = 0;
    if (s_has_ballot(out->type))
        fixed = out->type == NODE_MEMBER_PROMISE ? PROMISE_FIXED : BALLOT_BYTES;
    else if (s_is_join(out->type))
        fixed = JOIN_FIXED;
    else if (out->type != NODE_MEMBER_COMMIT && out->type != NODE_MEMBER_ASK)
        return RUMOR_EPROTO; /* unknown type */
    if (left < fixed)
        return RUMOR_EPROTO;
    if (s_has_ballot(out->type)) {
        out->ballot.round = core_get_u32(p);
        out->ballot.id = core_get_u32(p + 4);
    }
    if (out->type == NODE_MEMBER_PROMISE) {
        out->done = core_get_u64(p + 8);
        out->accepted.round = core_get_u32(p + 16);
        out->accepted.id = core_get_u32(p + 20);
    }
    if (s_is_join(out->type)) {
        if (core_get_u32(p + 4) != 0)
            return RUMOR_EPROTO;
        out->joiner = core_get_u32(p);
        out->inc = core_get_u64(p + 8);
    }
    p += fixed;
    left -= fixed;
    if (s_has_value(out)) {
        out->value.epoch = out->epoch;
        if (!s_get_value(p, left, &out->value))
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
