/*
 * CURVE keypairs (R5.7, R9.3). A node's identity is a Curve25519 keypair
 * made by libzmq's zmq_curve_keypair (libsodium underneath) and kept as Z85
 * text, the form libzmq's socket options and the topology file use.
 *
 * The secret lives in sodium_malloc'd memory (guard pages, mlock'd where
 * the system allows) and is wiped by sodium_free on destroy. Known limit:
 * zmq_setsockopt(ZMQ_CURVE_SECRETKEY) copies the key into libzmq's own
 * memory, which we do not control.
 *
 * Files: BASE.key holds the Z85 secret (one line, mode 0600, created with
 * O_EXCL so keygen never overwrites a key); BASE.pub holds the public key.
 * The public key is re-derived from the secret on load (zmq_curve_public),
 * so a mismatched .pub file cannot matter. A .key file readable by group
 * or others is refused, as ssh does.
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

#define KEY_FILE_MAX 256 /* a .key file holds 40 characters and a newline */
#define PATH_BYTES   4096

struct rumor_net_keypair {
    char public_z85[RUMOR_NET_KEY_TEXT_BYTES + 1];
    char *secret_z85; /* sodium_malloc'd, RUMOR_NET_KEY_TEXT_BYTES + 1 */
};

static rumor_err
s_alloc(rumor_net_keypair **out)
{
    *out = NULL;
    if (sodium_init() < 0)
        return RUMOR_EBACKEND;
    rumor_net_keypair *kp = calloc(1, sizeof *kp);
    if (kp == NULL)
        return RUMOR_ENOMEM;
    kp->secret_z85 = sodium_malloc(RUMOR_NET_KEY_TEXT_BYTES + 1);
    if (kp->secret_z85 == NULL) {
        free(kp);
        return RUMOR_ENOMEM;
    }
    sodium_memzero(kp->secret_z85, RUMOR_NET_KEY_TEXT_BYTES + 1);
    *out = kp;
    return RUMOR_OK;
}

rumor_err
rumor_net_keypair_generate(rumor_net_keypair **out)
{
    assert(out != NULL);
    rumor_net_keypair *kp = NULL;
    rumor_err rc = s_alloc(&kp);
    if (rc != RUMOR_OK)
        return rc;
    if (!zmq_has("curve")) {
        rumor_net_keypair_destroy(&kp);
        return RUMOR_ENOTSUP;
    }
    if (zmq_curve_keypair(kp->public_z85, kp->secret_z85) != 0) {
        rumor_net_keypair_destroy(&kp);
        return RUMOR_ENOTSUP;
    }
    *out = kp;
    return RUMOR_OK;
}

/* True when text is exactly 40 Z85 characters that decode to 32 bytes. */
static bool
s_is_z85_key(const char *text, size_t n)
{
    if (n != RUMOR_NET_KEY_TEXT_BYTES)
        return false;
    char tmp[RUMOR_NET_KEY_TEXT_BYTES + 1];
    memcpy(tmp, text, n);
    tmp[n] = '\0';
    uint8_t raw[32];
    bool ok = zmq_z85_decode(raw, tmp) != NULL;
    sodium_memzero(raw, sizeof raw);
    sodium_memzero(tmp, sizeof tmp);
    return ok;
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
    char *text = NULL;
    int fd = -1;
    int n = snprintf(path, sizeof path, "%s.key", base);
    if (n < 0 || (size_t)n >= sizeof path)
        return RUMOR_EINVAL;
    fd = open(path, O_RDONLY | O_CLOEXEC);
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
    if (rc != RUMOR_OK)
        goto done;
    text = sodium_malloc(KEY_FILE_MAX);
    if (text == NULL) {
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
    if (!s_is_z85_key(text, len)) {
        rc = RUMOR_EPROTO;
        goto done;
    }
    memcpy(kp->secret_z85, text, RUMOR_NET_KEY_TEXT_BYTES);
    kp->secret_z85[RUMOR_NET_KEY_TEXT_BYTES] = '\0';
    if (zmq_curve_public(kp->public_z85, kp->secret_z85) != 0) {
        rc = RUMOR_ENOTSUP;
        goto done;
    }
    *out = kp;
    kp = NULL;
done:
    if (text != NULL)
        sodium_free(text); /* sodium_free wipes before freeing */
    if (fd >= 0)
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
    rumor_err rc = s_write_line(key_path, kp->secret_z85, 0600);
    if (rc != RUMOR_OK)
        return rc;
    return s_write_line(pub_path, kp->public_z85, 0644);
}

const char *
rumor_net_keypair_public(const rumor_net_keypair *kp)
{
    assert(kp != NULL);
    return kp->public_z85;
}

const char *
net_keypair_secret(const rumor_net_keypair *kp)
{
    assert(kp != NULL);
    return kp->secret_z85;
}

void
rumor_net_keypair_destroy(rumor_net_keypair **self_p)
{
    if (self_p == NULL || *self_p == NULL)
        return;
    rumor_net_keypair *kp = *self_p;
    if (kp->secret_z85 != NULL)
        sodium_free(kp->secret_z85);
    free(kp);
    *self_p = NULL;
}
