/*
 * `rumor lowrank ratio --model FILE [--rank R ...] [--min-rate X]`: the
 * floats a model sends per step under PowerSGD / PowerGossip and the
 * compression ratio, for a shape file (the .shapes files in tests/data).
 *
 * The ratio counts as the PowerSGD paper's code does, so the printed
 * numbers can be checked against its tables (243x, 136x, 72x for the
 * CIFAR-10 ResNet-18 at ranks 1, 2, 4): every tensor of two or more
 * dimensions sends (n + m) min(r, n, m) floats, every 1-D tensor is sent
 * whole, ratio = all parameters / floats sent. A second column applies
 * the PyTorch hook's rule instead (matrices that gain less than
 * --min-rate, default 2, go uncompressed), which is what
 * rumor_lowrank_psgd actually sends.
 */
#include "rumor/lowrank.h"

#include "cli/cli.h"

#include <stdlib.h>
#include <string.h>

#define LOWRANK_CLI_MAX_RANKS 16
#define LOWRANK_CLI_MAX_FILE  (64u << 20) /* shape files are small text */

void
cli_lowrank_help(FILE *out)
{
    fprintf(out,
            "usage: rumor lowrank ratio --model FILE [--rank R]... "
            "[--min-rate X]\n\n"
            "FILE lists one tensor per line: NAME DIM [DIM...] ('#' "
            "comments).\n"
            "Prints per rank (default 1, 2, 4) the floats sent per step and "
            "the\n"
            "ratio, counted as the PowerSGD paper: (n + m) min(r, n, m) per "
            "tensor\n"
            "of 2+ dimensions viewed as (dims[0], rest), 1-D tensors whole; "
            "and\n"
            "the same with the hook's rule (compress only where it gains "
            "more\n"
            "than --min-rate, default 2).\n");
}

/* Floats sent with the hook's rule: uncompressed where it does not gain. */
static uint64_t
s_hook_floats(const struct rumor_lowrank_shape *shapes,
              size_t count,
              size_t rank,
              double min_rate)
{
    uint64_t sent = 0;
    for (size_t i = 0; i < count; i++) {
        size_t n = 0, m = 0;
        if (rumor_lowrank_matricize(&shapes[i], &n, &m) != RUMOR_OK)
            continue;
        size_t r = rank < n ? rank : n;
        r = r < m ? r : m;
        if (shapes[i].ndim >= 2 && rumor_lowrank_worth(n, m, rank, min_rate))
            sent += (uint64_t)(n + m) * r;
        else
            sent += (uint64_t)n * m;
    }
    return sent;
}

static int
s_ratio(int argc, char **argv)
{
    const char *model = NULL;
    size_t ranks[LOWRANK_CLI_MAX_RANKS];
    size_t nranks = 0;
    double min_rate = 2;
    for (int i = 2; i < argc; i++) {
        if (strcmp(argv[i], "--model") == 0 && i + 1 < argc) {
            model = argv[++i];
        } else if (strcmp(argv[i], "--rank") == 0 && i + 1 < argc) {
            unsigned long long r = 0;
            if (cli_parse_u64(argv[++i],
                              "--rank",
                              1,
                              RUMOR_LOWRANK_MAX_RANK,
                              &r) != 0)
                return 2;
            if (nranks == LOWRANK_CLI_MAX_RANKS) {
                fprintf(stderr,
                        "rumor lowrank: at most %d ranks\n",
                        LOWRANK_CLI_MAX_RANKS);
                return 2;
            }
            ranks[nranks++] = (size_t)r;
        } else if (strcmp(argv[i], "--min-rate") == 0 && i + 1 < argc) {
            if (cli_parse_double(argv[++i], "--min-rate", 0, 1e9, &min_rate) !=
                0)
                return 2;
        } else {
            fprintf(stderr,
                    "rumor lowrank ratio: unknown argument %s\n",
                    argv[i]);
            cli_lowrank_help(stderr);
            return 2;
        }
    }
    if (model == NULL) {
        fprintf(stderr, "rumor lowrank ratio: --model FILE is required\n");
        return 2;
    }
    if (nranks == 0) {
        ranks[0] = 1;
        ranks[1] = 2;
        ranks[2] = 4;
        nranks = 3;
    }
    int status = 1;
    rumor_buf text;
    rumor_buf_init(&text, LOWRANK_CLI_MAX_FILE);
    struct rumor_lowrank_shape *shapes = NULL;
    size_t count = 0;
    rumor_err rc = rumor_buf_read_file(&text, model);
    if (rc != RUMOR_OK) {
        fprintf(stderr, "rumor lowrank: %s: %s\n", model, rumor_strerror(rc));
        goto done;
    }
    struct rumor_diag diag = {0};
    rc = rumor_lowrank_shapes_parse((const char *)text.data,
                                    text.len,
                                    model,
                                    &shapes,
                                    &count,
                                    &diag);
    if (rc != RUMOR_OK) {
        char msg[2 * RUMOR_DIAG_TEXT_BYTES + 32];
        rumor_diag_format(&diag, msg, sizeof msg);
        fprintf(stderr, "%s\n", diag.msg[0] ? msg : rumor_strerror(rc));
        goto done;
    }
    struct rumor_lowrank_count c0;
    rc = rumor_lowrank_count_floats(shapes, count, 1, &c0);
    if (rc != RUMOR_OK) {
        fprintf(stderr, "rumor lowrank: %s\n", rumor_strerror(rc));
        goto done;
    }
    printf("model %s: %zu tensors (%llu of 2+ dimensions), %llu parameters\n",
           model,
           count,
           (unsigned long long)c0.compressed,
           (unsigned long long)c0.params);
    printf("%6s %14s %10s %14s %10s\n",
           "rank",
           "floats/step",
           "ratio",
           "hook floats",
           "hook ratio");
    for (size_t k = 0; k < nranks; k++) {
        struct rumor_lowrank_count c;
        rc = rumor_lowrank_count_floats(shapes, count, ranks[k], &c);
        if (rc != RUMOR_OK) {
            fprintf(stderr, "rumor lowrank: %s\n", rumor_strerror(rc));
            goto done;
        }
        uint64_t hook = s_hook_floats(shapes, count, ranks[k], min_rate);
        printf("%6zu %14llu %9.0fx %14llu %9.0fx\n",
               ranks[k],
               (unsigned long long)c.floats_sent,
               c.floats_sent ? (double)c.params / (double)c.floats_sent : 0.0,
               (unsigned long long)hook,
               hook ? (double)c.params / (double)hook : 0.0);
    }
    status = 0;
done:
    free(shapes);
    rumor_buf_free(&text);
    return status;
}

int
cli_lowrank_main(int argc, char **argv)
{
    if (argc >= 2 && strcmp(argv[1], "ratio") == 0)
        return s_ratio(argc, argv);
    cli_lowrank_help(stderr);
    return 2;
}
