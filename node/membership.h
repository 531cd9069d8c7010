/*
 * Private to node/: the view change of elastic rings (issue 23;
 * docs/reliability.md, "Elastic rings: the design"), as a state machine
 * with no transport and no clock. One node_member per ring node keeps the
 * installed epoch e and its members M_e, this node's progress (how many
 * steps' results it holds), the Paxos acceptor for epoch e + 1 and, while
 * it proposes, the proposer. Inputs are calls (a suspicion, a message, the
 * time, a step boundary, a join request); outputs are messages to send,
 * which the caller drains with node_member_pop and carries in MEMBER
 * frames, and events (an epoch installed, this node removed). Time is the
 * caller's `now` (any monotonic unit; the options are in the same unit) and
 * nothing is random, so a run is a function of its inputs.
 *
 * The wire format is in docs/protocol.md ("Membership messages"); the
 * decoder is pure and fuzzed (tests/fuzz/fuzz_membership.c).
 *
 * Thread safety: none; one thread drives a node_member. Ownership: the
 * object copies what it is given; bytes handed out by node_member_pop are
 * borrowed.
 */
#ifndef RUMOR_NODE_MEMBERSHIP_H
#define RUMOR_NODE_MEMBERSHIP_H

#include "rumor/core.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define NODE_MEMBER_MAX                1024 /* nodes of a ring (and ids < it) */
#define NODE_MEMBER_NONE               UINT32_MAX
#define NODE_MEMBER_HEADER_BYTES       16
#define NODE_MEMBER_VALUE_BYTES(count) (20 + 16 * (size_t)(count))
#define NODE_MEMBER_SIG_BYTES          64 /* Ed25519 */
#define NODE_MEMBER_VOTE_BYTES         (8 + NODE_MEMBER_SIG_BYTES)
/* the largest message: a COMMIT with every member's vote */
#define NODE_MEMBER_MSG_MAX                     \
    (NODE_MEMBER_HEADER_BYTES + 16 +            \
     NODE_MEMBER_VALUE_BYTES(NODE_MEMBER_MAX) + \
     NODE_MEMBER_VOTE_BYTES * (size_t)NODE_MEMBER_MAX)
#define NODE_MEMBER_HISTORY       8  /* decided views kept to answer ASK */
#define NODE_MEMBER_STATEMENT_MAX 96 /* the bytes a signature covers */

typedef enum node_member_type {
    NODE_MEMBER_PREPARE = 1,  /* proposer -> M_e: ballot */
    NODE_MEMBER_PROMISE = 2,  /* -> proposer: ballot, done, accepted */
    NODE_MEMBER_ACCEPT = 3,   /* proposer -> M_e: ballot, value */
    NODE_MEMBER_ACCEPTED = 4, /* -> proposer: ballot */
    NODE_MEMBER_COMMIT = 5,   /* the decided value of an epoch */
    NODE_MEMBER_ASK = 6,      /* "send me the COMMIT of this epoch" */
    NODE_MEMBER_JOIN = 7,     /* a returning node -> any member */
    NODE_MEMBER_JOIN_FWD = 8  /* that member -> the lowest member */
} node_member_type;

/* The fate of step t in a decided view. */
typedef enum node_member_fate {
    NODE_MEMBER_DROP = 0,    /* nobody kept holds step t: all run it again */
    NODE_MEMBER_COMPLETE = 1 /* the holder has step t's result: all apply
                                it (those without it fetch it) */
} node_member_fate;

struct node_member_entry {
    uint32_t id;
    bool joining; /* enters in this epoch: gets its state from the holder */
    uint64_t inc; /* incarnation: 0 for the nodes of the start, else the
                     one its JOIN named */
};

/* A decided value: epoch e's members and what happens to step t. The new
 * ring runs from step t + fate on (node_member_first_step); a member
 * whose done is below that fetches step t's result (and a joining member
 * the whole state) from the holder. */
struct node_member_view {
    uint64_t epoch;
    uint64_t step;   /* t */
    uint32_t fate;   /* node_member_fate */
    uint32_t holder; /* a non-joining member that holds the state at the
                        first step: the lowest id with the most steps */
    uint32_t count;
    struct node_member_entry members[NODE_MEMBER_MAX]; /* sorted by id */
};

static inline uint64_t
node_member_first_step(const struct node_member_view *v)
{
    return v->step + v->fate;
}

/* (epoch, round, id), compared in that order; the epoch is the message's.
 * Rounds start at 1; round 0 means "no ballot". */
struct node_member_ballot {
    uint32_t round;
    uint32_t id;
};

/* A vote: member id's signature of node_member_vote_statement (epoch,
 * ballot, the value's hash), sent in ACCEPTED. */
struct node_member_vote {
    uint32_t id;
    uint8_t sig[NODE_MEMBER_SIG_BYTES];
};

/* What makes a COMMIT true: the votes of a majority of the epoch's
 * members for its value at one ballot (docs/protocol.md). Empty in an
 * unsigned (insecure) ring. */
struct node_member_cert {
    struct node_member_ballot ballot;
    uint32_t count;
    struct node_member_vote votes[NODE_MEMBER_MAX]; /* sorted by id */
};

/* One decoded message; a field a type does not carry is zero. */
struct node_member_msg {
    uint32_t type;                      /* node_member_type */
    uint64_t epoch;                     /* the epoch the message is about;
                                           JOIN, JOIN_FWD: 0 */
    struct node_member_ballot ballot;   /* PREPARE PROMISE ACCEPT ACCEPTED */
    uint64_t done;                      /* PROMISE: steps whose result the
                                           sender holds (frozen) */
    struct node_member_ballot accepted; /* PROMISE: round 0: none */
    uint32_t joiner;                    /* JOIN JOIN_FWD */
    uint64_t inc;                       /* JOIN JOIN_FWD: >= 1 */
    struct node_member_view value;      /* ACCEPT COMMIT, and PROMISE with
                                           an accepted value; its epoch is
                                           the message's */
    uint8_t sig[NODE_MEMBER_SIG_BYTES]; /* ACCEPTED: the sender's vote;
                                           JOIN JOIN_FWD: the joiner's */
    struct node_member_cert cert;       /* COMMIT */
};

/* The bytes a vote signs: a domain string, epoch, ballot and the BLAKE2b
 * hash of the value's encoding. Returns their length. */
size_t node_member_vote_statement(uint64_t epoch,
                                  struct node_member_ballot ballot,
                                  const struct node_member_view *value,
                                  uint8_t out[NODE_MEMBER_STATEMENT_MAX]);

/* The bytes a JOIN's signature covers: a domain string, joiner, inc. */
size_t node_member_join_statement(uint32_t joiner,
                                  uint64_t inc,
                                  uint8_t out[NODE_MEMBER_STATEMENT_MAX]);

/* Writes msg into out (cap bytes); returns the length, 0 when it does not
 * fit or msg is not a valid message. */
size_t
node_member_encode(const struct node_member_msg *msg, uint8_t *out, size_t cap);

/* RUMOR_EPROTO (out zeroed) unless buf is exactly one valid message for a
 * ring of n nodes: known version and type, reserved bytes zero, every
 * length exact, member ids sorted, unique and < n, the holder a
 * non-joining member, a joiner's incarnation >= 1. */
rumor_err node_member_decode(const uint8_t *buf,
                             size_t len,
                             uint32_t n,
                             struct node_member_msg *out);

/* --- the state machine ---------------------------------------------------- */

typedef struct node_member node_member;

typedef enum node_member_state {
    NODE_MEMBER_OUT = 0,      /* not a member (new, or removed): join */
    NODE_MEMBER_ACTIVE = 1,   /* a member of the installed epoch */
    NODE_MEMBER_CHANGING = 2, /* a view change for epoch e + 1 is under
                                 way: apply no result of epoch e */
    NODE_MEMBER_JOINING = 3   /* asked to join; waits for its COMMIT */
} node_member_state;

typedef enum node_member_event_kind {
    NODE_MEMBER_INSTALLED = 1, /* this node is a member of a new epoch */
    NODE_MEMBER_REMOVED = 2    /* an epoch was decided without this node */
} node_member_event_kind;

struct node_member_event {
    uint32_t kind;  /* node_member_event_kind */
    uint64_t epoch; /* the epoch installed or the one that removed us */
};

/* Signatures (node/elastic.c: the node's Ed25519 key and the topology's
 * listed keys). A ring without one signs and checks nothing (insecure). */
struct node_member_signer {
    void *arg;
    void (*sign)(void *arg,
                 const uint8_t *msg,
                 size_t len,
                 uint8_t sig[NODE_MEMBER_SIG_BYTES]);
    bool (*verify)(void *arg,
                   uint32_t id,
                   const uint8_t *msg,
                   size_t len,
                   const uint8_t sig[NODE_MEMBER_SIG_BYTES]);
};

struct node_member_opts {
    const struct node_member_signer *signer; /* borrowed; NULL: unsigned */
    uint64_t timeout;     /* a view change's first wait for its proposer,
                             and a joiner's first wait for its COMMIT */
    uint64_t timeout_max; /* the doubling of those waits stops here */
    uint64_t resend;      /* a proposer resends to members that have not
                             answered its phase this often */
    uint64_t grace;       /* with a majority of promises, a proposer waits
                             this long for the other members it does not
                             suspect, so a live but slower one stays in */
    uint64_t done_max;    /* the run's steps: a PROMISE, ACCEPT or COMMIT
                             that puts a member past them is refused (a
                             forged "I hold step 2^62" would make its
                             sender the holder); 0: no bound */
};

/* Defaults in milliseconds: 1000, 16000, 200, 100. */
void node_member_opts_default(struct node_member_opts *opts);

/* A node `self` of a ring of n nodes (ids 0..n-1, n <= NODE_MEMBER_MAX,
 * else RUMOR_ETOOBIG), not yet a member (NODE_MEMBER_OUT). RUMOR_EINVAL
 * for self >= n or options with a zero timeout or resend; RUMOR_ENOMEM.
 * *out: output slot. */
rumor_err node_member_new(node_member **out,
                          uint32_t self,
                          uint32_t n,
                          const struct node_member_opts *opts);

/* Frees *self_p and sets it NULL; safe on NULL and twice. */
void node_member_destroy(node_member **self_p);

/* Installs epoch 0 with the members ids[0..count) (any order, self among
 * them) at step `step`, on every node of the ring alike. RUMOR_EINVAL for
 * a bad list or when the node is not NODE_MEMBER_OUT without a view. */
rumor_err node_member_start(node_member *m,
                            const uint32_t *ids,
                            size_t count,
                            uint64_t step);

/* The node now holds the results of steps 0..done-1 (a step boundary;
 * done never goes back). Only while ACTIVE (RUMOR_EINVAL otherwise: while
 * CHANGING the node must not apply results). The lowest member, with
 * joins pending, starts the view change that admits them here. */
rumor_err node_member_step_done(node_member *m, uint64_t done, uint64_t now);

/* The deadline of the current step passed without peers[0..count): starts
 * (or feeds) the view change for epoch e + 1. Ids that are not members,
 * and this node, are ignored; RUMOR_EINVAL for an id >= n. */
rumor_err node_member_suspect(node_member *m,
                              const uint32_t *peers,
                              size_t count,
                              uint64_t now);

/* A MEMBER payload from node `from` (the transport's authenticated
 * sender). RUMOR_EPROTO when it is malformed or does not fit the state it
 * names, RUMOR_EAUTH when a signature it needs is missing or wrong (a
 * COMMIT without a majority's votes, a JOIN not signed by its joiner, a
 * vote that is not its sender's); the caller logs it, nothing changed.
 * RUMOR_EINVAL for from >= n. */
rumor_err node_member_on_msg(node_member *m,
                             uint32_t from,
                             const uint8_t *buf,
                             size_t len,
                             uint64_t now);

/* A frame of a later epoch came from `from` (a lost COMMIT): asks it for
 * the decision of epoch e + 1. Nothing when epoch is not above ours. */
rumor_err
node_member_ask(node_member *m, uint32_t from, uint64_t epoch, uint64_t now);

/* The passing of time: proposer resends, its grace, the timeout that
 * hands the view change to the next proposer (with a doubled wait), a
 * joiner's retries. Call it often (every resend / 4, say). */
void node_member_tick(node_member *m, uint64_t now);

/* A node that is not a member (new, restarted, or removed) asks to join:
 * JOIN to contacts[0], then on each timeout to the next contact. inc is
 * this incarnation, >= 1 and above any this node id had before (e.g. the
 * wall clock at start, or the old one + 1 after a removal), so that old
 * requests are told from new ones. RUMOR_EINVAL for bad arguments or
 * while ACTIVE or CHANGING. */
rumor_err node_member_join_request(node_member *m,
                                   const uint32_t *contacts,
                                   size_t count,
                                   uint64_t inc,
                                   uint64_t now);

/* Takes the oldest message to send: its destination and bytes (a MEMBER
 * payload, borrowed until the next call on m other than this one); false
 * when there is none. Messages a node sends itself never show here. */
bool node_member_pop(node_member *m,
                     uint32_t *to,
                     const uint8_t **bytes,
                     size_t *len);

/* Takes the oldest event; false when there is none. At most one comes of
 * each call; node_member_view then has the view it names. */
bool node_member_event(node_member *m, struct node_member_event *ev);

node_member_state node_member_state_of(const node_member *m);

/* The installed view (for an OUT node: the one that removed it; count 0
 * before any); borrowed, valid until the next call on m. */
const struct node_member_view *node_member_view_of(const node_member *m);

/* Why node_member_on_msg last refused a message (a static string). */
const char *node_member_why(const node_member *m);

/* Steps whose results the node holds, as it reports them in a PROMISE. */
uint64_t node_member_done(const node_member *m);

#endif
