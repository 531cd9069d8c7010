/*
 * Node identities (R5.7, R9.3, issue 33). A node's identity is an Ed25519
 * signing key (libsodium crypto_sign); its CURVE keypair, which libzmq's
 * CURVE and the ZAP allow-list use, is derived from it
 * (crypto_sign_ed25519_{pk,sk}_to_curve25519), so one listed key serves
 * both: links are encrypted and authenticated by CURVE, and membership and
 * state messages carry Ed25519 signatures any member can check.
 *
 * Text forms: the secret is "ed25519:" and the Z85 of the 32-byte seed;
 * the public ("the listed key", as the topology and BASE.pub hold it) is
 * "ed25519:" and the Z85 of the Ed25519 public key, 48 characters each.
 * The marker tells them from the 40-character CURVE keys of before
 * signing, which are refused with the command that replaces them
 * (docs/protocol.md, "Keys"): a CURVE secret cannot sign, and no Ed25519
 * key can be derived from one.
 *
 * The secrets live in sodium_malloc'd memory (guard pages, mlock'd where
 * the system allows) and are wiped by sodium_free on destroy. Known limit:
 * zmq_setsockopt(ZMQ_CURVE_SECRETKEY) copies the CURVE secret into
 * libzmq's own memory, which we do not control.
 *
 * Files: BASE.key holds the secret (one line, mode 0600, created with
 * O_EXCL so keygen never overwrites a key); BASE.pub the listed key. Every
 * public part is re-derived from the seed on load, so a mismatched .pub
 * file cannot matter. A .key file readable by group or others is refused,
 * as ssh does.
 */
#include "rumor/net.h"

#include "net/net_impl.h"

#include <errno.h>
#include <fcntl.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zmq.h>

#define KEY_FILE_MAX 256 /* a .key file holds 48 characters and a newline */
#define PATH_BYTES   4096
#define MARKER       "ed25519:"
#define MARKER_BYTES 8

/* the secret half, in one sodium_malloc'd block */
struct s_secret {
    uint8_t sign[crypto_sign_SECRETKEYBYTES];
    char curve_z85[RUMOR_NET_KEY_TEXT_BYTES + 1];
    char text[RUMOR_NET_ID_TEXT_BYTES + 1]; /* MARKER + Z85 of the seed */
};

struct rumor_net_keypair {
    char listed[RUMOR_NET_ID_TEXT_BYTES + 1]; /* MARKER + Z85 public */
    char curve_public_z85[RUMOR_NET_KEY_TEXT_BYTES + 1];
    struct s_secret *secret; /* sodium_malloc'd */
};

static rumor_err
s_alloc(rumor_net_keypair **out)
{
    *out = NULL;
    if (sodium_init() < 0)
        return RUMOR_EBACKEND;
    if (!zmq_has("curve"))
        return RUMOR_ENOTSUP;
    rumor_net_keypair *kp = calloc(1, sizeof *kp);
    if (kp == NULL)
        return RUMOR_ENOMEM;
    kp->secret = sodium_malloc(sizeof *kp->secret);
    if (kp->secret == NULL) {
        free(kp);
        return RUMOR_ENOMEM;
    }
    sodium_memzero(kp->secret, sizeof *kp->secret);
    *out = kp;
    return RUMOR_OK;
}

/* Fills every part of kp from a 32-byte seed. */
static rumor_err
s_from_seed(rumor_net_keypair *kp, const uint8_t seed[crypto_sign_SEEDBYTES])
{
    struct s_secret *s = kp->secret;
    uint8_t pk[crypto_sign_PUBLICKEYBYTES];
    uint8_t curve[crypto_scalarmult_curve25519_BYTES];
    uint8_t curve_pk[crypto_scalarmult_curve25519_BYTES];
    rumor_err rc = RUMOR_OK;
    memcpy(s->text, MARKER, MARKER_BYTES);
    memcpy(kp->listed, MARKER, MARKER_BYTES);
    if (crypto_sign_seed_keypair(pk, s->sign, seed) != 0 ||
        crypto_sign_ed25519_sk_to_curve25519(curve, s->sign) != 0 ||
        crypto_sign_ed25519_pk_to_curve25519(curve_pk, pk) != 0 ||
        zmq_z85_encode(s->curve_z85, curve, sizeof curve) == NULL ||
        zmq_z85_encode(kp->curve_public_z85, curve_pk, sizeof curve_pk) ==
            NULL ||
        zmq_z85_encode(s->text + MARKER_BYTES, seed, crypto_sign_SEEDBYTES) ==
            NULL ||
        zmq_z85_encode(kp->listed + MARKER_BYTES, pk, sizeof pk) == NULL)
        rc = RUMOR_EPROTO;
    sodium_memzero(curve, sizeof curve);
    return rc;
}

rumor_err
rumor_net_keypair_generate(rumor_net_keypair **out)
{
    assert(out != NULL);
    rumor_net_keypair *kp = NULL;
    rumor_err rc = s_alloc(&kp);
    if (rc != RUMOR_OK)
        return rc;
    uint8_t seed[crypto_sign_SEEDBYTES];
    randombytes_buf(seed, sizeof seed);
    rc = s_from_seed(kp, seed);
    sodium_memzero(seed, sizeof seed);
    if (rc != RUMOR_OK) {
        rumor_net_keypair_destroy(&kp);
        return rc;
    }
    *out = kp;
    return RUMOR_OK;
}

/* Decodes "ed25519:" + 40 Z85 characters (n bytes of text) into raw. */
static bool
s_decode_marked(const char *text, size_t n, uint8_t raw[32])
{
    if (n != RUMOR_NET_ID_TEXT_BYTES || memcmp(text, MARKER, MARKER_BYTES) != 0)
        return false;
    char tmp[RUMOR_NET_KEY_TEXT_BYTES + 1];
    memcpy(tmp, text + MARKER_BYTES, RUMOR_NET_KEY_TEXT_BYTES);
    tmp[RUMOR_NET_KEY_TEXT_BYTES] = '\0';
    bool ok = zmq_z85_decode(raw, tmp) != NULL;
    sodium_memzero(tmp, sizeof tmp);
    return ok;
}

/* A key from before signing: 40 Z85 characters, no marker. */
static bool
s_is_curve_text(const char *text, size_t n)
{
    if (n != RUMOR_NET_KEY_TEXT_BYTES)
        return false;
    char tmp[RUMOR_NET_KEY_TEXT_BYTES + 1];
    uint8_t raw[32];
    memcpy(tmp, text, n);
    tmp[n] = '\0';
    bool ok = zmq_z85_decode(raw, tmp) != NULL;
    sodium_memzero(raw, sizeof raw);
    sodium_memzero(tmp, sizeof tmp);
    return ok;
}

/* Reads the secret text of the open file fd into kp. */
static rumor_err
s_read_secret(int fd, const char *path, rumor_net_keypair *kp)
{
    char *text = sodium_malloc(KEY_FILE_MAX);
    uint8_t *seed = sodium_malloc(crypto_sign_SEEDBYTES);
    rumor_err rc = RUMOR_OK;
    if (text == NULL || seed == NULL) {
        rc = RUMOR_ENOMEM;
        goto done;
    }
    ssize_t got = read(fd, text, KEY_FILE_MAX - 1);
    if (got < 0) {
        rc = RUMOR_EIO;
        goto done;
    }
    size_t len = (size_t)got;
    while (len > 0 && (text[len - 1] == '\n' || text[len - 1] == '\r' ||
                       text[len - 1] == ' '))
        len--;
    if (s_decode_marked(text, len, seed)) {
        rc = s_from_seed(kp, seed);
    } else {
        if (s_is_curve_text(text, len))
            rumor_log(RUMOR_LOG_ERROR,
                      "%s: a CURVE key from before signed membership, which "
                      "cannot sign: move it aside and run `rumor keygen --out "
                      "BASE` (BASE: the path without .key), then list the "
                      "ed25519:... key it prints in the topology "
                      "(docs/protocol.md, \"Keys\")",
                      path);
        rc = RUMOR_EPROTO;
    }
done:
    if (text != NULL)
        sodium_free(text); /* sodium_free wipes before freeing */
    if (seed != NULL)
        sodium_free(seed);
    return rc;
}

rumor_err
rumor_net_keypair_load(const char *base, rumor_net_keypair **out)
{
    assert(base != NULL);
    assert(out != NULL);
    *out = NULL;
    rumor_net_keypair *kp = NULL;
    rumor_err rc = RUMOR_OK;
    char path[PATH_BYTES];
    int n = snprintf(path, sizeof path, "%s.key", base);
    if (n < 0 || (size_t)n >= sizeof path)
        return RUMOR_EINVAL;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return errno == ENOENT ? RUMOR_ENOTFOUND : RUMOR_EIO;
    struct stat st;
    if (fstat(fd, &st) != 0) {
        rc = RUMOR_EIO;
        goto done;
    }
    if ((st.st_mode & (S_IRWXG | S_IRWXO)) != 0) {
        rumor_log(RUMOR_LOG_ERROR,
                  "%s: secret key readable by others (mode %03o); "
                  "chmod 600 it",
                  path,
                  (unsigned)(st.st_mode & 0777));
        rc = RUMOR_EAUTH;
        goto done;
    }
    rc = s_alloc(&kp);
    if (rc == RUMOR_OK)
        rc = s_read_secret(fd, path, kp);
    if (rc == RUMOR_OK) {
        *out = kp;
        kp = NULL;
    }
done:
    close(fd);
    rumor_net_keypair_destroy(&kp);
    return rc;
}

static rumor_err
s_write_line(const char *path, const char *line, mode_t mode)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, mode);
    if (fd < 0)
        return RUMOR_EIO;
    int err = 0; /* the first failure's errno, kept for the caller */
    size_t n = strlen(line);
    errno = 0;
    if (write(fd, line, n) != (ssize_t)n || write(fd, "\n", 1) != 1 ||
        fsync(fd) != 0)
        err = errno != 0 ? errno : ENOSPC; /* a short write */
    /* the umask may have narrowed the mode; make it exact */
    if (fchmod(fd, mode) != 0 && err == 0)
        err = errno;
    if (close(fd) != 0 && err == 0)
        err = errno;
    errno = err;
    return err == 0 ? RUMOR_OK : RUMOR_EIO;
}

rumor_err
rumor_net_keypair_save(const rumor_net_keypair *kp, const char *base)
{
    assert(kp != NULL);
    assert(base != NULL);
    char key_path[PATH_BYTES], pub_path[PATH_BYTES];
    int a = snprintf(key_path, sizeof key_path, "%s.key", base);
    int b = snprintf(pub_path, sizeof pub_path, "%s.pub", base);
    if (a < 0 || b < 0 || (size_t)a >= sizeof key_path ||
        (size_t)b >= sizeof pub_path)
        return RUMOR_EINVAL;
    rumor_err rc = s_write_line(key_path, kp->secret->text, 0600);
    if (rc != RUMOR_OK)
        return rc;
    return s_write_line(pub_path, kp->listed, 0644);
}

const char *
rumor_net_keypair_public(const rumor_net_keypair *kp)
{
    assert(kp != NULL);
    return kp->listed;
}

const char *
net_keypair_secret(const rumor_net_keypair *kp)
{
    assert(kp != NULL);
    return kp->secret->curve_z85;
}

const char *
net_keypair_curve_public(const rumor_net_keypair *kp)
{
    assert(kp != NULL);
    return kp->curve_public_z85;
}

void
rumor_net_keypair_sign(const rumor_net_keypair *kp,
                       const uint8_t *msg,
                       size_t len,
                       uint8_t sig[RUMOR_NET_SIG_BYTES])
{
    assert(kp != NULL);
    assert(msg != NULL || len == 0);
    crypto_sign_detached(sig, NULL, msg, len, kp->secret->sign);
}

rumor_err
rumor_net_key_check(const char *listed,
                    char curve_z85[RUMOR_NET_KEY_TEXT_BYTES + 1])
{
    assert(listed != NULL);
    uint8_t pk[crypto_sign_PUBLICKEYBYTES];
    uint8_t curve[crypto_scalarmult_curve25519_BYTES];
    if (sodium_init() < 0)
        return RUMOR_EBACKEND;
    if (!s_decode_marked(listed, strlen(listed), pk))
        return s_is_curve_text(listed, strlen(listed)) ? RUMOR_EAUTH
                                                       : RUMOR_EPROTO;
    if (crypto_sign_ed25519_pk_to_curve25519(curve, pk) != 0)
        return RUMOR_EPROTO;
    if (curve_z85 != NULL &&
        zmq_z85_encode(curve_z85, curve, sizeof curve) == NULL)
        return RUMOR_EPROTO;
    return RUMOR_OK;
}

bool
rumor_net_key_verify(const char *listed,
                     const uint8_t *msg,
                     size_t len,
                     const uint8_t sig[RUMOR_NET_SIG_BYTES])
{
    assert(msg != NULL || len == 0);
    uint8_t pk[crypto_sign_PUBLICKEYBYTES];
    if (listed == NULL || !s_decode_marked(listed, strlen(listed), pk))
        return false;
    return crypto_sign_verify_detached(sig, msg, len, pk) == 0;
}

void
rumor_net_keypair_destroy(rumor_net_keypair **self_p)
{
    if (self_p == NULL || *self_p == NULL)
        return;
    rumor_net_keypair *kp = *self_p;
    if (kp->secret != NULL)
        sodium_free(kp->secret);
    free(kp);
    *self_p = NULL;
}
