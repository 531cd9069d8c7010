/*
 * net: the pure parts. Frame codec (known bytes, a table of rejections),
 * HELLO and REFUSE payloads, the replay window, the token bucket, the
 * liveness states and the reconnect backoff with an injected clock, and
 * the keypair files. Sockets are in tests/integration/test_net_*.c.
 */
#include "tests/cmocka_compat.h"

#include "rumor/net.h"
#include "rumor/topology.h"

#include "net/net_impl.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define MS 1000000ull

/* --- frames --------------------------------------------------------------- */

static size_t
s_valid_frame(uint8_t *buf, size_t cap, const uint8_t *payload, uint32_t n)
{
    struct rumor_net_header h = {
        .version = RUMOR_NET_VERSION,
        .kind = RUMOR_NET_KIND_GOSSIP,
        .codec = 7,
        .sender = 0x01020304,
        .round = 2,
        .step = 0x1122334455667788ull,
        .seq = 9,
        .stop = 5,
        .chunk = 1,
        .chunks = 3,
        .payload_len = n,
        .total_len = 3 * n,
    };
    size_t w = 0;
    assert_int_equal(rumor_net_frame_encode(&h, payload, buf, cap, &w),
                     RUMOR_OK);
    return w;
}

static void
test_frame_encode__known_fields__at_documented_offsets(void **state)
{
    (void)state;
    uint8_t buf[128];
    const uint8_t pl[4] = {0xaa, 0xbb, 0xcc, 0xdd};
    size_t n = s_valid_frame(buf, sizeof buf, pl, 4);
    assert_int_equal(n, 68);
    /* hand-written little-endian expectations (docs/protocol.md) */
    static const uint8_t want[60] = {
        'R',  'U',  'M',  'R',  4,    5,    7,    0,    /* magic ver kind */
        0x04, 0x03, 0x02, 0x01, 2,    0,    0,    0,    /* sender round */
        0x88, 0x77, 0x66, 0x55, 0x44, 0x33, 0x22, 0x11, /* step */
        9,    0,    0,    0,    0,    0,    0,    0,    /* seq */
        5,    0,    0,    0,    1,    0,    0,    0,    /* stop chunk */
        3,    0,    0,    0,    4,    0,    0,    0,    /* chunks len */
        0,    0,    0,    0,    0,    0,    0,    0,    /* reserved */
        12,   0,    0,    0,                            /* total_len */
    };
    assert_memory_equal(buf, want, sizeof want);
    assert_memory_equal(buf + 64, pl, 4);
    /* crc32c over the payload, continued over header bytes 0..59 */
    uint32_t crc = rumor_crc32c(rumor_crc32c(0, pl, 4), buf, 60);
    uint32_t got = (uint32_t)buf[60] | (uint32_t)buf[61] << 8 |
                   (uint32_t)buf[62] << 16 | (uint32_t)buf[63] << 24;
    assert_int_equal(got, crc);
}

static void
test_frame_decode__valid_frame__round_trips(void **state)
{
    (void)state;
    uint8_t buf[128];
    const uint8_t pl[4] = {1, 2, 3, 4};
    size_t n = s_valid_frame(buf, sizeof buf, pl, 4);
    struct rumor_net_header h;
    const uint8_t *p = NULL;
    assert_int_equal(rumor_net_frame_decode(buf, n, 1 << 20, &h, &p), RUMOR_OK);
    assert_ptr_equal(p, buf + 64);
    assert_int_equal(h.sender, 0x01020304);
    assert_int_equal(h.step, 0x1122334455667788ull);
    assert_int_equal(h.seq, 9);
    assert_int_equal(h.chunk, 1);
    assert_int_equal(h.chunks, 3);
    assert_int_equal(h.payload_len, 4);
    assert_int_equal(h.total_len, 12);
    assert_int_equal(h.stop, 5);
    assert_int_equal(h.round, 2);
    assert_int_equal(h.kind, RUMOR_NET_KIND_GOSSIP);
    assert_int_equal(h.codec, 7);
}

static void
s_put32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
    p[2] = (uint8_t)(v >> 16);
    p[3] = (uint8_t)(v >> 24);
}

/* Rewrites the crc after a mutation, so that a row tests its own check and
 * not the crc. */
static void
s_fix_crc(uint8_t *buf, size_t len)
{
    uint32_t crc = len > 64 ? rumor_crc32c(0, buf + 64, len - 64) : 0;
    s_put32(buf + 60, rumor_crc32c(crc, buf, 60));
}

struct decode_row {
    const char *what;
    size_t off;     /* byte to overwrite, SIZE_MAX: none */
    uint32_t value; /* 32-bit little-endian value written at off */
    bool byte;      /* write one byte instead */
    long len_delta; /* change of the decoded length */
    bool fix_crc;
    size_t max_message;
    rumor_err want;
};

static void
test_frame_decode__table_of_bad_frames__rejected(void **state)
{
    (void)state;
    static const struct decode_row rows[] = {
        {"valid", SIZE_MAX, 0, false, 0, false, 1 << 20, RUMOR_OK},
        {"empty", SIZE_MAX, 0, false, -68, false, 1 << 20, RUMOR_EPROTO},
        {"header cut", SIZE_MAX, 0, false, -5, false, 1 << 20, RUMOR_EPROTO},
        {"payload cut", SIZE_MAX, 0, false, -1, false, 1 << 20, RUMOR_EPROTO},
        {"trailing byte", SIZE_MAX, 0, false, 1, false, 1 << 20, RUMOR_EPROTO},
        {"bad magic", 0, 0x524d5553, false, 0, true, 1 << 20, RUMOR_EPROTO},
        {"version 1", 4, 1, true, 0, true, 1 << 20, RUMOR_EPROTO},
        {"version 2", 4, 2, true, 0, true, 1 << 20, RUMOR_EPROTO},
        {"version 3", 4, 3, true, 0, true, 1 << 20, RUMOR_EPROTO},
        {"version 5", 4, 5, true, 0, true, 1 << 20, RUMOR_EPROTO},
        {"version 0", 4, 0, true, 0, true, 1 << 20, RUMOR_EPROTO},
        {"kind 0", 5, 0, true, 0, true, 1 << 20, RUMOR_EPROTO},
        {"kind 13 (unknown)", 5, 13, true, 0, true, 1 << 20, RUMOR_EPROTO},
        {"kind 255", 5, 255, true, 0, true, 1 << 20, RUMOR_EPROTO},
        {"ack with a round", 5, 7, true, 0, true, 1 << 20, RUMOR_EPROTO},
        {"flags set", 7, 1, true, 0, true, 1 << 20, RUMOR_EPROTO},
        {"reserved low", 48, 1, false, 0, true, 1 << 20, RUMOR_EPROTO},
        {"reserved high", 52, 1u << 31, false, 0, true, 1 << 20, RUMOR_EPROTO},
        {"chunk == chunks", 36, 3, false, 0, true, 1 << 20, RUMOR_EPROTO},
        {"chunks 0", 40, 0, false, 0, true, 1 << 20, RUMOR_EPROTO},
        {"payload_len says 5", 44, 5, false, 0, true, 1 << 20, RUMOR_EPROTO},
        {"payload_len huge",
         44,
         0xffffffffu,
         false,
         0,
         true,
         1 << 20,
         RUMOR_ETOOBIG},
        {"total < payload", 56, 3, false, 0, true, 1 << 20, RUMOR_EPROTO},
        {"total over cap", 56, 100, false, 0, true, 99, RUMOR_ETOOBIG},
        {"total at cap", 56, 99, false, 0, true, 99, RUMOR_OK},
        {"bad crc", 60, 0, false, 0, false, 1 << 20, RUMOR_EPROTO},
        {"payload flipped", 65, 0x55, true, 0, false, 1 << 20, RUMOR_EPROTO},
        {"sender flipped", 9, 0x55, true, 0, false, 1 << 20, RUMOR_EPROTO},
    };
    for (size_t r = 0; r < sizeof rows / sizeof rows[0]; r++) {
        uint8_t buf[128];
        const uint8_t pl[4] = {1, 2, 3, 4};
        size_t n = s_valid_frame(buf, sizeof buf, pl, 4);
        buf[68] = 0;
        if (rows[r].off != SIZE_MAX) {
            if (rows[r].byte)
                buf[rows[r].off] = (uint8_t)rows[r].value;
            else
                s_put32(buf + rows[r].off, rows[r].value);
        }
        if (rows[r].fix_crc)
            s_fix_crc(buf, n);
        size_t len = (size_t)((long)n + rows[r].len_delta);
        /* an exact-size copy so a read past the end is caught by ASan */
        uint8_t *exact = malloc(len ? len : 1);
        assert_non_null(exact);
        memcpy(exact, buf, len);
        struct rumor_net_header h;
        const uint8_t *p = (const uint8_t *)"x";
        rumor_err rc =
            rumor_net_frame_decode(exact, len, rows[r].max_message, &h, &p);
        if (rc != rows[r].want)
            fail_msg("row '%s': got %s, want %s",
                     rows[r].what,
                     rumor_errname(rc),
                     rumor_errname(rows[r].want));
        if (rc != RUMOR_OK) {
            assert_null(p);
            assert_int_equal(h.sender, 0);
            assert_int_equal(h.total_len, 0);
        }
        free(exact);
    }
}

/* round, stop and codec exist only in GOSSIP: in every other kind each of
 * them alone makes the frame invalid, both ways, and the kind round-trips */
static void
test_frame_kinds__fields_only_where_the_kind_has_them(void **state)
{
    (void)state;
    for (uint8_t kind = RUMOR_NET_KIND_HELLO; kind <= RUMOR_NET_KIND_MAX;
         kind++) {
        for (int field = 0; field < 4; field++) {
            struct rumor_net_header h = {.version = RUMOR_NET_VERSION,
                                         .kind = kind,
                                         .sender = 3,
                                         .step = 11,
                                         .seq = 1,
                                         .chunks = 1};
            h.round = field == 1 ? 2 : 0;
            h.stop = field == 2 ? 4 : 0;
            h.codec = field == 3 ? 4 : 0; /* qsgd */
            bool fits = field == 0 || kind == RUMOR_NET_KIND_GOSSIP;
            uint8_t buf[64];
            size_t w = 0;
            rumor_err rc = rumor_net_frame_encode(&h, NULL, buf, 64, &w);
            if (rc != (fits ? RUMOR_OK : RUMOR_EINVAL))
                fail_msg("encode kind %u field %d: %s",
                         kind,
                         field,
                         rumor_errname(rc));
            if (!fits) {
                /* the same frame forged: the decoder refuses it too */
                h.kind = RUMOR_NET_KIND_GOSSIP;
                assert_int_equal(rumor_net_frame_encode(&h, NULL, buf, 64, &w),
                                 RUMOR_OK);
                buf[5] = kind;
                s_fix_crc(buf, 64);
            }
            struct rumor_net_header d;
            const uint8_t *p = NULL;
            rc = rumor_net_frame_decode(buf, 64, 1 << 20, &d, &p);
            if (rc != (fits ? RUMOR_OK : RUMOR_EPROTO))
                fail_msg("decode kind %u field %d: %s",
                         kind,
                         field,
                         rumor_errname(rc));
            if (fits) {
                assert_int_equal(d.kind, kind);
                assert_int_equal(d.round, h.round);
                assert_int_equal(d.stop, h.stop);
                assert_int_equal(d.codec, h.codec);
            }
        }
    }
    assert_string_equal(rumor_net_kind_name(RUMOR_NET_KIND_SYNC_ANSWER),
                        "sync-answer");
    assert_string_equal(rumor_net_kind_name(RUMOR_NET_KIND_MAX + 1), "unknown");
    /* MEMBER (the view change of elastic rings) is a message of no step:
     * kept until taken, as the handshake kinds */
    assert_string_equal(rumor_net_kind_name(RUMOR_NET_KIND_MEMBER), "member");
    assert_true(net_kind_is_message(RUMOR_NET_KIND_MEMBER));
    assert_false(net_kind_has_step(RUMOR_NET_KIND_MEMBER));
}

static void
test_frame_encode__inconsistent_header__refused(void **state)
{
    (void)state;
    uint8_t buf[128];
    size_t w = 99;
    struct rumor_net_header h = {.kind = RUMOR_NET_KIND_GOSSIP,
                                 .chunks = 1,
                                 .chunk = 1};
    assert_int_equal(rumor_net_frame_encode(&h, NULL, buf, sizeof buf, &w),
                     RUMOR_EINVAL);
    assert_int_equal(w, 0);
    h = (struct rumor_net_header){.kind = RUMOR_NET_KIND_GOSSIP,
                                  .chunks = 1,
                                  .payload_len = 8,
                                  .total_len = 4};
    assert_int_equal(rumor_net_frame_encode(&h, buf, buf, sizeof buf, &w),
                     RUMOR_EINVAL);
    h = (struct rumor_net_header){.kind = RUMOR_NET_KIND_GOSSIP,
                                  .chunks = 1,
                                  .payload_len = 8,
                                  .total_len = 8};
    uint8_t small[70];
    assert_int_equal(rumor_net_frame_encode(&h, buf, small, sizeof small, &w),
                     RUMOR_ETOOBIG);
}

static void
test_hello__round_trip_and_bad_sizes(void **state)
{
    (void)state;
    struct rumor_net_hello a = {.fingerprint = 0xfeedfacecafebeefull,
                                .epoch = 42,
                                .max_message = 1 << 26,
                                .chunk_bytes = 256 << 10};
    /* the fixed part, then a description of DESC_MAX bytes, then one
     * byte too many */
    static uint8_t buf[RUMOR_NET_HELLO_BYTES + RUMOR_NET_HELLO_DESC_MAX + 1];
    rumor_net_hello_encode(&a, buf);
    assert_int_equal(buf[0], 0xef); /* little-endian fingerprint */
    assert_int_equal(buf[7], 0xfe);
    struct rumor_net_hello b;
    assert_int_equal(rumor_net_hello_decode(buf, RUMOR_NET_HELLO_BYTES, &b),
                     RUMOR_OK);
    assert_true(b.fingerprint == a.fingerprint && b.epoch == a.epoch &&
                b.max_message == a.max_message &&
                b.chunk_bytes == a.chunk_bytes);
    assert_int_equal(b.desc_len, 0);
    /* the description is what follows the 24 bytes, borrowed in place */
    assert_int_equal(rumor_net_hello_decode(buf, RUMOR_NET_HELLO_BYTES + 3, &b),
                     RUMOR_OK);
    assert_ptr_equal(b.desc, buf + RUMOR_NET_HELLO_BYTES);
    assert_int_equal(b.desc_len, 3);
    assert_int_equal(
        rumor_net_hello_decode(buf,
                               RUMOR_NET_HELLO_BYTES + RUMOR_NET_HELLO_DESC_MAX,
                               &b),
        RUMOR_OK);
    assert_int_equal(b.desc_len, RUMOR_NET_HELLO_DESC_MAX);
    assert_int_equal(rumor_net_hello_decode(buf, sizeof buf, &b), RUMOR_EPROTO);
    assert_int_equal(b.fingerprint, 0);
    assert_int_equal(rumor_net_hello_decode(buf, RUMOR_NET_HELLO_BYTES - 1, &b),
                     RUMOR_EPROTO);
    assert_int_equal(b.fingerprint, 0);
    assert_null(b.desc);
    a.chunk_bytes = 1000; /* below RUMOR_NET_CHUNK_MIN */
    rumor_net_hello_encode(&a, buf);
    assert_int_equal(rumor_net_hello_decode(buf, RUMOR_NET_HELLO_BYTES, &b),
                     RUMOR_EPROTO);
}

static void
test_refuse__round_trip_and_unprintable__rejected(void **state)
{
    (void)state;
    uint8_t buf[4 + RUMOR_NET_REFUSE_TEXT_MAX + 8];
    size_t n = rumor_net_refuse_encode(2, "bad\nfingerprint", buf, sizeof buf);
    assert_int_equal(n, 4 + 15);
    uint32_t reason = 0;
    char text[RUMOR_NET_REFUSE_TEXT_MAX + 1];
    assert_int_equal(rumor_net_refuse_decode(buf, n, &reason, text), RUMOR_OK);
    assert_int_equal(reason, 2);
    assert_string_equal(text, "bad?fingerprint"); /* sanitised on encode */
    buf[5] = 0x01;
    assert_int_equal(rumor_net_refuse_decode(buf, n, &reason, text),
                     RUMOR_EPROTO);
    assert_int_equal(rumor_net_refuse_decode(buf, 3, &reason, text),
                     RUMOR_EPROTO);
    memset(buf, 'a', sizeof buf);
    assert_int_equal(rumor_net_refuse_decode(buf, sizeof buf, &reason, text),
                     RUMOR_EPROTO);
}

/* --- replay window -------------------------------------------------------- */

static void
test_replay__table_of_sequences__accepts_each_new_seq_once(void **state)
{
    (void)state;
    static const struct {
        uint64_t seq;
        bool want;
    } rows[] = {
        {0, false}, /* 0 is never sent */
        {1, true},
        {1, false}, /* duplicate */
        {3, true},
        {2, true}, /* late but inside the window */
        {2, false},
        {100, true},
        {37, true},  /* 100 - 37 = 63: inside */
        {36, false}, /* 100 - 36 = 64: outside */
        {37, false},
        {164, true},
        {101, true}, /* 63 back: inside */
        {101, false},
        {100, false}, /* 64 back: outside (and seen) */
        {1000, true},
        {999, true},
        {1000, false},
    };
    struct net_replay r;
    net_replay_reset(&r);
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++)
        if (net_replay_accept(&r, rows[i].seq) != rows[i].want)
            fail_msg("row %zu: seq %llu: want %s",
                     i,
                     (unsigned long long)rows[i].seq,
                     rows[i].want ? "accepted" : "rejected");
}

static void
test_replay__random_order__matches_set_reference(void **state)
{
    (void)state;
    /* reference: accept iff not seen and top - seq < 64 */
    struct net_replay r;
    net_replay_reset(&r);
    static bool seen[5000];
    memset(seen, 0, sizeof seen);
    uint64_t top = 0;
    struct rumor_rng rng;
    rumor_rng_init(&rng, 7, 0);
    for (int i = 0; i < 20000; i++) {
        uint64_t seq = 1 + rumor_rng_below(&rng, 4999);
        bool want = !seen[seq] && (seq > top || top - seq < 64);
        assert_int_equal(net_replay_accept(&r, seq), want);
        if (want) {
            seen[seq] = true;
            if (seq > top)
                top = seq;
        }
    }
}

/* --- token bucket --------------------------------------------------------- */

static void
test_bucket__debt_then_wait__exact_times(void **state)
{
    (void)state;
    struct net_bucket b;
    /* 8000 bit/s = 1000 bytes/s, burst 100 bytes, start at t = 1 s */
    net_bucket_init(&b, 8000, 100, 1000 * MS);
    assert_int_equal(net_bucket_take(&b, 100, 1000 * MS), 0);
    assert_int_equal(net_bucket_take(&b, 50, 1000 * MS), 0); /* into debt */
    /* -50 bytes at 1000 B/s: 50 ms to wait */
    assert_int_equal(net_bucket_take(&b, 10, 1000 * MS), 50 * MS);
    assert_int_equal(net_bucket_take(&b, 10, 1020 * MS), 30 * MS);
    assert_int_equal(net_bucket_take(&b, 10, 1050 * MS), 0);
    /* unlimited */
    net_bucket_init(&b, 0, 0, 0);
    assert_int_equal(net_bucket_take(&b, 1u << 30, 0), 0);
}

static void
test_bucket__long_run__rate_within_one_frame(void **state)
{
    (void)state;
    /* 10 Mbit/s for 10 s of simulated time with 64 KiB frames: bytes sent
     * must be rate * t + burst, give or take one frame */
    struct net_bucket b;
    const double rate = 10e6 / 8;
    const size_t frame = 65600;
    net_bucket_init(&b, 10000000, frame, 0);
    uint64_t t = 0, sent = 0;
    const uint64_t end = 10000 * MS;
    while (t <= end) {
        uint64_t wait = net_bucket_take(&b, frame, t);
        if (wait == 0)
            sent += frame;
        else
            t += wait;
    }
    double want = rate * 10.0 + (double)frame;
    assert_true(fabs((double)sent - want) <= (double)frame);
}

/* --- liveness and backoff ------------------------------------------------- */

static void
test_liveness__silence__alive_late_down_then_back(void **state)
{
    (void)state;
    struct net_liveness l = {0};
    const uint32_t late = 100, down = 300;
    assert_int_equal(net_liveness_state(&l, 5 * MS, late, down),
                     RUMOR_NET_PEER_DOWN); /* never heard */
    assert_int_equal(net_liveness_next(&l, late, down), UINT64_MAX);
    net_liveness_heard(&l, 1000 * MS);
    assert_true(net_liveness_update(&l, 1000 * MS, late, down));
    assert_int_equal(l.state, RUMOR_NET_PEER_ALIVE);
    assert_int_equal(net_liveness_next(&l, late, down), 1100 * MS);
    assert_false(net_liveness_update(&l, 1099 * MS, late, down));
    assert_true(net_liveness_update(&l, 1100 * MS, late, down));
    assert_int_equal(l.state, RUMOR_NET_PEER_LATE);
    assert_int_equal(net_liveness_next(&l, late, down), 1300 * MS);
    assert_false(net_liveness_update(&l, 1299 * MS, late, down));
    assert_true(net_liveness_update(&l, 1300 * MS, late, down));
    assert_int_equal(l.state, RUMOR_NET_PEER_DOWN);
    assert_int_equal(net_liveness_next(&l, late, down), UINT64_MAX);
    net_liveness_heard(&l, 5000 * MS);
    assert_true(net_liveness_update(&l, 5000 * MS, late, down));
    assert_int_equal(l.state, RUMOR_NET_PEER_ALIVE);
}

static void
test_backoff__doubles_to_the_cap(void **state)
{
    (void)state;
    static const uint32_t want[] = {100, 200, 400, 800, 1600, 3200, 5000, 5000};
    for (uint32_t i = 0; i < 8; i++)
        assert_int_equal(net_backoff_ms(100, 5000, i), want[i]);
    assert_int_equal(net_backoff_ms(100, 5000, 1000), 5000);
}

/* --- keys ----------------------------------------------------------------- */

static void
s_tmpdir(char *dir, size_t cap)
{
    snprintf(dir, cap, "/tmp/rumor-test-net-XXXXXX");
    assert_non_null(mkdtemp(dir));
}

static void
s_rm(const char *dir, const char *name)
{
    char path[512];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    unlink(path);
}

static void
test_keypair__save_then_load__same_public_key_mode_0600(void **state)
{
    (void)state;
    char dir[64], base[128], path[160];
    s_tmpdir(dir, sizeof dir);
    snprintf(base, sizeof base, "%s/n0", dir);
    rumor_net_keypair *kp = NULL, *back = NULL;
    assert_int_equal(rumor_net_keypair_generate(&kp), RUMOR_OK);
    const char *pub = rumor_net_keypair_public(kp);
    assert_int_equal(strlen(pub), RUMOR_NET_ID_TEXT_BYTES);
    /* Pastes into a topology line as printed, even with a '#' in it. */
    char topo_text[160];
    snprintf(topo_text,
             sizeof topo_text,
             "node 0 tcp://127.0.0.1:7000 key=%s\nnode 1 tcp://127.0.0.1:7001\n"
             "edge 0 1\n",
             pub);
    rumor_topology *t = NULL;
    struct rumor_diag diag = {0};
    assert_int_equal(
        rumor_topology_parse(topo_text, strlen(topo_text), "t", &t, &diag),
        RUMOR_OK);
    assert_string_equal(rumor_topology_key(t, 0), pub);
    rumor_topology_destroy(&t);
    assert_int_equal(rumor_net_keypair_save(kp, base), RUMOR_OK);
    /* never overwritten */
    assert_int_equal(rumor_net_keypair_save(kp, base), RUMOR_EIO);
    snprintf(path, sizeof path, "%s.key", base);
    struct stat st;
    assert_int_equal(stat(path, &st), 0);
    assert_int_equal(st.st_mode & 0777, 0600);
    assert_int_equal(rumor_net_keypair_load(base, &back), RUMOR_OK);
    assert_string_equal(rumor_net_keypair_public(back), pub);
    rumor_net_keypair_destroy(&back);
    /* too open */
    assert_int_equal(chmod(path, 0644), 0);
    assert_int_equal(rumor_net_keypair_load(base, &back), RUMOR_EAUTH);
    assert_null(back);
    /* not a key */
    assert_int_equal(chmod(path, 0600), 0);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs("not a key\n", f);
    fclose(f);
    assert_int_equal(rumor_net_keypair_load(base, &back), RUMOR_EPROTO);
    snprintf(base, sizeof base, "%s/missing", dir);
    assert_int_equal(rumor_net_keypair_load(base, &back), RUMOR_ENOTFOUND);
    rumor_net_keypair_destroy(&kp);
    rumor_net_keypair_destroy(&kp); /* twice is safe */
    assert_null(kp);
    s_rm(dir, "n0.key");
    s_rm(dir, "n0.pub");
    rmdir(dir);
}

static void
test_net_new__bad_options__refused_before_any_socket(void **state)
{
    (void)state;
    rumor_net_keypair *kp = NULL, *other = NULL;
    assert_int_equal(rumor_net_keypair_generate(&kp), RUMOR_OK);
    assert_int_equal(rumor_net_keypair_generate(&other), RUMOR_OK);
    struct rumor_net_peer peers[2] = {
        {.id = 1,
         .endpoint = "tcp://127.0.0.1:1",
         .key = rumor_net_keypair_public(other),
         .link = true},
        {.id = 2, .endpoint = NULL, .key = NULL, .link = false},
    };
    struct {
        const char *what;
        int field;
        rumor_err want;
    } rows[] = {
        {"no keys while secure", 0, RUMOR_EINVAL},
        {"chunk below the minimum", 1, RUMOR_EINVAL},
        {"chunk above the maximum", 2, RUMOR_EINVAL},
        {"peer with our own id", 3, RUMOR_EINVAL},
        {"peer without a key while secure", 4, RUMOR_EINVAL},
        {"key that is not Z85", 5, RUMOR_EPROTO},
        {"down before late", 6, RUMOR_EINVAL},
        {"linked peer without endpoint", 7, RUMOR_EINVAL},
        {"no endpoint to bind", 8, RUMOR_EINVAL},
    };
    for (size_t r = 0; r < sizeof rows / sizeof rows[0]; r++) {
        struct rumor_net_opts o;
        rumor_net_opts_default(&o);
        o.self = 0;
        o.endpoint = "tcp://127.0.0.1:*";
        o.keys = kp;
        o.peers = peers;
        o.npeers = 1;
        struct rumor_net_peer bad = peers[0];
        switch (rows[r].field) {
        case 0:
            o.keys = NULL;
            break;
        case 1:
            o.chunk_bytes = RUMOR_NET_CHUNK_MIN - 1;
            break;
        case 2:
            o.chunk_bytes = RUMOR_NET_CHUNK_MAX + 1;
            break;
        case 3:
            bad.id = 0;
            o.peers = &bad;
            break;
        case 4:
            o.peers = peers;
            o.npeers = 2;
            break;
        case 5:
            /* 40 characters, but spaces are not Z85 */
            bad.key = "this is not a forty character z85 key!!!";
            o.peers = &bad;
            break;
        case 6:
            o.down_ms = o.late_ms - 1;
            break;
        case 7:
            bad.endpoint = NULL;
            o.peers = &bad;
            break;
        default:
            o.endpoint = NULL;
            break;
        }
        rumor_net *net = (rumor_net *)&o; /* must be reset to NULL */
        rumor_err rc = rumor_net_new(&o, &net);
        if (rc != rows[r].want)
            fail_msg("row '%s': got %s, want %s",
                     rows[r].what,
                     rumor_errname(rc),
                     rumor_errname(rows[r].want));
        assert_null(net);
    }
    rumor_net_keypair_destroy(&kp);
    rumor_net_keypair_destroy(&other);
}

int
main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(
            test_frame_encode__known_fields__at_documented_offsets),
        cmocka_unit_test(test_frame_decode__valid_frame__round_trips),
        cmocka_unit_test(test_frame_decode__table_of_bad_frames__rejected),
        cmocka_unit_test(test_frame_kinds__fields_only_where_the_kind_has_them),
        cmocka_unit_test(test_frame_encode__inconsistent_header__refused),
        cmocka_unit_test(test_hello__round_trip_and_bad_sizes),
        cmocka_unit_test(test_refuse__round_trip_and_unprintable__rejected),
        cmocka_unit_test(
            test_replay__table_of_sequences__accepts_each_new_seq_once),
        cmocka_unit_test(test_replay__random_order__matches_set_reference),
        cmocka_unit_test(test_bucket__debt_then_wait__exact_times),
        cmocka_unit_test(test_bucket__long_run__rate_within_one_frame),
        cmocka_unit_test(test_liveness__silence__alive_late_down_then_back),
        cmocka_unit_test(test_backoff__doubles_to_the_cap),
        cmocka_unit_test(
            test_keypair__save_then_load__same_public_key_mode_0600),
        cmocka_unit_test(test_net_new__bad_options__refused_before_any_socket),
    };
    if (argc == 2)
        cmocka_set_test_filter(argv[1]);
    return cmocka_run_group_tests_name("net", tests, NULL, NULL);
}
