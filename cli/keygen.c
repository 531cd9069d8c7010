/*
 * `rumor keygen --out DIR/NAME`: makes a node's identity, an Ed25519 key
 * from which its CURVE keypair is derived (net/keys.c). The secret goes to
 * DIR/NAME.key (mode 0600, never overwritten), the listed public key to
 * DIR/NAME.pub and to stdout, ready to paste into a topology line
 * `node ID ENDPOINT key=ed25519:...`. The secret lives in sodium_malloc'd
 * memory and is wiped when the keypair is destroyed (net/keys.c).
 */
#include "cli/cli.h"

#include "rumor/net.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

void
cli_keygen_help(FILE *out)
{
    fprintf(out,
            "usage: rumor keygen --out DIR/NAME\n\n"
            "Makes a node's signing identity (Ed25519; its CURVE keypair is\n"
            "derived from it): DIR/NAME.key (secret, mode 0600) and\n"
            "DIR/NAME.pub; prints the public key (ed25519:Z85) for the\n"
            "topology file. Existing files are never overwritten: to\n"
            "replace a CURVE key from before signing, move it aside first.\n");
}

int
cli_keygen_main(int argc, char **argv)
{
    const char *base = NULL;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--out") == 0 && i + 1 < argc) {
            base = argv[++i];
        } else {
            fprintf(stderr, "rumor keygen: unknown argument '%s'\n", argv[i]);
            cli_keygen_help(stderr);
            return 2;
        }
    }
    if (base == NULL || base[0] == '\0') {
        cli_keygen_help(stderr);
        return 2;
    }
    rumor_net_keypair *kp = NULL;
    rumor_err rc = rumor_net_keypair_generate(&kp);
    if (rc == RUMOR_OK)
        rc = rumor_net_keypair_save(kp, base);
    if (rc != RUMOR_OK) {
        int err = errno;
        char name[16], why[160];
        snprintf(why,
                 sizeof why,
                 "%s (%s)",
                 strerror(err),
                 rumor_errno_name(err, name));
        fprintf(stderr,
                "rumor keygen: %s.key or .pub: cannot write: %s (an existing "
                "key is never overwritten)\n",
                base,
                rc == RUMOR_EIO ? why : rumor_strerror(rc));
        rumor_net_keypair_destroy(&kp);
        return 1;
    }
    printf("%s\n", rumor_net_keypair_public(kp));
    rumor_net_keypair_destroy(&kp);
    return 0;
}
