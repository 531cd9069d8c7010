/*
 * libFuzzer harness for the membership messages of elastic rings
 * (node/membership_wire.c, R12.1) and the state machine behind them
 * (node/membership.c): bytes a ring member controls. Traps when broken: a
 * message the decoder accepts re-encodes to the same bytes (every field
 * has one meaning, none is dropped); the state machine, fed the input as
 * a message in each of its states (a member, a member in a view change, a
 * joiner), unsigned and then signed (issue 33: Ed25519 keys made from
 * each node's id, so the corpus can hold votes and JOINs that check, and
 * ones that do not), answers only with messages that decode, and never
 * installs a COMMIT without a majority's valid votes. Deterministic, no
 * sockets (R12.4). With gcc it is linked with replay_main.c and replays
 * tests/fuzz/corpus/membership/.
 */
#include "node/membership.h"

#include <sodium.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define RING 5

static struct node_member_msg s_msg;
static uint8_t s_again[NODE_MEMBER_MSG_MAX];
static uint8_t s_pk[RING][crypto_sign_PUBLICKEYBYTES];
static uint8_t s_sk[RING][crypto_sign_SECRETKEYBYTES];

/* Node id's key: the seed is 32 bytes of id + 1 (the corpus's too). */
static void
s_keys(void)
{
    static int done;
    if (done++ || sodium_init() < 0)
        return;
    for (uint32_t i = 0; i < RING; i++) {
        uint8_t seed[crypto_sign_SEEDBYTES];
        memset(seed, (int)i + 1, sizeof seed);
        crypto_sign_seed_keypair(s_pk[i], s_sk[i], seed);
    }
}

static void
s_sign(void *arg, const uint8_t *msg, size_t len, uint8_t *sig)
{
    (void)arg;
    crypto_sign_detached(sig, NULL, msg, len, s_sk[1]);
}

static bool
s_verify(void *arg,
         uint32_t id,
         const uint8_t *msg,
         size_t len,
         const uint8_t *sig)
{
    (void)arg;
    return id < RING &&
           crypto_sign_verify_detached(sig, msg, len, s_pk[id]) == 0;
}

static const struct node_member_signer s_signer = {NULL, s_sign, s_verify};

static void
s_check_round_trip(const uint8_t *data, size_t size, uint32_t n)
{
    if (node_member_decode(data, size, n, &s_msg) != RUMOR_OK)
        return;
    size_t len = node_member_encode(&s_msg, s_again, sizeof s_again);
    if (len != size || memcmp(s_again, data, size) != 0)
        abort();
}

/* Feeds the input to a node of a ring of RING in one of three states,
 * from a member or from the node outside the ring, and checks what it
 * sends. */
static void
s_feed(const uint8_t *data,
       size_t size,
       int how,
       uint32_t from,
       bool signed_ring)
{
    struct node_member_opts opts;
    node_member_opts_default(&opts);
    opts.signer = signed_ring ? &s_signer : NULL;
    node_member *m = NULL;
    if (node_member_new(&m, 1, RING, &opts) != RUMOR_OK)
        return;
    const uint32_t ring[4] = {0, 1, 2, 3}; /* 4 is outside */
    uint32_t three = 3, zero = 0;
    if (how == 2) {
        (void)node_member_join_request(m, &zero, 1, 5, 0);
    } else {
        (void)node_member_start(m, ring, 4, 10);
        if (how == 1)
            (void)node_member_suspect(m, &three, 1, 0);
    }
    uint64_t epoch = node_member_view_of(m)->epoch;
    rumor_err rc = node_member_on_msg(m, from, data, size, 1);
    /* a COMMIT refused for its votes installed nothing */
    if (rc == RUMOR_EAUTH && node_member_view_of(m)->epoch != epoch)
        abort();
    node_member_tick(m, 100000);
    uint32_t to;
    const uint8_t *bytes;
    size_t len;
    while (node_member_pop(m, &to, &bytes, &len))
        if (to >= RING || node_member_decode(bytes, len, RING, &s_msg) != 0)
            abort();
    struct node_member_event ev;
    while (node_member_event(m, &ev))
        if (ev.epoch != node_member_view_of(m)->epoch)
            abort();
    node_member_destroy(&m);
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    s_check_round_trip(data, size, NODE_MEMBER_MAX);
    s_check_round_trip(data, size, RING); /* ids out of range are reachable */
    s_keys();
    for (int how = 0; how < 3; how++)
        for (int sg = 0; sg < 2; sg++) {
            s_feed(data, size, how, 0, sg);
            s_feed(data, size, how, 4, sg);
        }
    return 0;
}
