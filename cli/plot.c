/*
 * `rumor plot RUN_DIR [RUN_DIR...]`: PNG plots of runs' metrics. Every
 * DIR/node-*.jsonl is read with cJSON; per node two whitespace tables are
 * written next to the plots (every step: step, loss, bytes sent, seconds;
 * evaluated steps: the same plus held-out loss, accuracy and the lsq
 * distance to the optimum), and gnuplot (Debian gnuplot-nox, driven
 * through a pipe) draws loss and accuracy against steps, bytes sent and
 * seconds, one line per node and run, so runs can be compared on one
 * figure. A summary table (per run: nodes, steps, mean final accuracy,
 * mean bytes sent per node) is printed; `make demo` shows it.
 * matplotlib was the alternative; gnuplot needs no Python stack.
 */
#include "rumor/node.h"

#include "cli/cli.h"
#include "node/runtime_impl.h"

#include <cjson/cJSON.h>
#include <dirent.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define PLOT_MAX_SERIES 256
#define PLOT_LINE_MAX   (1u << 16)

struct s_series {
    char label[160];                     /* "RUN node N" */
    char all[RUMOR_NODE_PATH_MAX + 64];  /* table of every step */
    char eval[RUMOR_NODE_PATH_MAX + 64]; /* table of evaluated steps */
    bool has_accuracy;
};

struct s_final {
    double steps, accuracy, test_loss, optimum_error, bytes_sent, bytes_recv,
        seconds;
};

void
cli_plot_help(FILE *out)
{
    fprintf(out,
            "usage: rumor plot RUN_DIR [RUN_DIR...] [--out DIR]\n\n"
            "Reads every RUN_DIR/node-*.jsonl and writes PNG plots (loss "
            "and accuracy\n"
            "against steps, bytes sent and seconds) with gnuplot into DIR "
            "(default\n"
            "the first RUN_DIR/plots), then prints a summary per run: "
            "nodes, steps,\n"
            "mean final accuracy of the nodes' own models, accuracy of "
            "their average\n"
            "(RUN_DIR/average.json, written by rumor launch), mean bytes "
            "sent per node\n"
            "and the run time.\n");
}

static double
s_num(const cJSON *o, const char *name)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, name);
    return cJSON_IsNumber(v) ? v->valuedouble : NAN;
}

static const char *
s_base(const char *path)
{
    size_t len = strlen(path);
    while (len > 1 && path[len - 1] == '/')
        len--;
    const char *p = path + len;
    while (p > path && p[-1] != '/')
        p--;
    return p;
}

/* Adds one metrics line (o, parsed) to the tables and to fin. */
static void
s_convert_line(const cJSON *o,
               double step,
               FILE *all,
               FILE *ev,
               struct s_series *s,
               struct s_final *fin)
{
    double loss = s_num(o, "loss"), sent = s_num(o, "bytes_sent"),
           secs = s_num(o, "seconds");
    fprintf(all, "%.0f %.9g %.0f %.6f\n", step, loss, sent, secs);
    double acc = s_num(o, "accuracy"), tl = s_num(o, "test_loss"),
           oe = s_num(o, "optimum_error");
    if (!isnan(tl)) {
        fprintf(ev,
                "%.0f %.9g %.0f %.6f %.9g %.9g %.9g\n",
                step,
                loss,
                sent,
                secs,
                tl,
                isnan(acc) ? 0 : 100 * acc,
                isnan(oe) ? 0 : oe);
        s->has_accuracy |= !isnan(acc);
        fin->accuracy = acc;
        fin->test_loss = tl;
        fin->optimum_error = oe;
    }
    fin->steps = step;
    fin->bytes_sent = sent;
    fin->bytes_recv = s_num(o, "bytes_recv");
    fin->seconds = secs;
}

/* Reads jsonl into the open tables; 0, or 1 after a message. A line that
 * is not a metrics line is an error naming it, except the last line of
 * the file: a node cut off while writing it (killed, or a full disk on a
 * build before whole-line writes) leaves it torn, and the steps before it
 * are still good, so it is skipped with a warning. */
static int
s_convert_lines(const char *jsonl,
                FILE *in,
                FILE *all,
                FILE *ev,
                struct s_series *s,
                struct s_final *fin)
{
    char *line = malloc(PLOT_LINE_MAX);
    if (line == NULL) {
        fprintf(stderr, "rumor plot: out of memory\n");
        return 1;
    }
    int status = 0;
    size_t lineno = 0;
    while (status == 0 && fgets(line, PLOT_LINE_MAX, in) != NULL) {
        lineno++;
        cJSON *o = cJSON_Parse(line);
        double step = o != NULL ? s_num(o, "step") : NAN;
        if (!isnan(step))
            s_convert_line(o, step, all, ev, s, fin);
        cJSON_Delete(o);
        if (!isnan(step))
            continue;
        int next = fgetc(in);
        bool last = next == EOF && !ferror(in);
        if (!last)
            ungetc(next, in);
        fprintf(stderr,
                last ? "rumor plot: warning: %s:%zu: the last line is torn "
                       "(not a whole metrics line); skipped\n"
                     : "rumor plot: %s:%zu: not a metrics line\n",
                jsonl,
                lineno);
        status = last ? 0 : 1;
        break;
    }
    if (status == 0 && ferror(in)) {
        cli_io_error("plot", jsonl, "cannot read");
        status = 1;
    }
    free(line);
    return status;
}

/* Converts one metrics file; returns 0 or -1 with a message. */
static int
s_convert(const char *jsonl, struct s_series *s, struct s_final *fin)
{
    FILE *in = fopen(jsonl, "r");
    if (in == NULL)
        return cli_io_error("plot", jsonl, "cannot open");
    FILE *all = fopen(s->all, "w");
    if (all == NULL) {
        cli_io_error("plot", s->all, "cannot open for writing");
        fclose(in);
        return -1;
    }
    FILE *ev = fopen(s->eval, "w");
    int status = ev == NULL
                     ? cli_io_error("plot", s->eval, "cannot open for writing")
                     : s_convert_lines(jsonl, in, all, ev, s, fin);
    fclose(in);
    if (fclose(all) != 0 && status == 0)
        status = cli_io_error("plot", s->all, "cannot write");
    if (ev != NULL && fclose(ev) != 0 && status == 0)
        status = cli_io_error("plot", s->eval, "cannot write");
    return status == 0 ? 0 : -1;
}

static void
s_figure(FILE *gp,
         const char *out,
         const char *name,
         const char *xlabel,
         const char *ylabel,
         int xcol,
         int ycol,
         bool eval,
         const struct s_series *s,
         size_t count,
         bool logy)
{
    fprintf(gp, "set output '%s/%s.png'\n", out, name);
    fprintf(gp, "set xlabel '%s'\nset ylabel '%s'\n", xlabel, ylabel);
    fprintf(gp, logy ? "set logscale y\n" : "unset logscale y\n");
    /* bytes span decades between codecs: a log axis keeps both visible */
    fprintf(gp,
            xcol == 3 ? "set logscale x\nset format x '%%.0s%%cB'\n"
                      : "unset logscale x\nset format x '%%g'\n");
    fprintf(gp, "plot ");
    for (size_t k = 0; k < count; k++)
        fprintf(gp,
                "%s'%s' using %d:%d with lines title '%s'",
                k == 0 ? "" : ", ",
                eval ? s[k].eval : s[k].all,
                xcol,
                ycol,
                s[k].label);
    fprintf(gp, "\n");
}

static int
s_draw(const char *out, const struct s_series *s, size_t count, bool acc)
{
    FILE *gp = popen("gnuplot", "w");
    if (gp == NULL) {
        fprintf(stderr,
                "rumor plot: cannot run gnuplot (Debian: apt-get "
                "install gnuplot-nox)\n");
        return 1;
    }
    fprintf(gp,
            "set terminal pngcairo size 900,600\nset grid\n"
            "set key outside right\n");
    const char *xs[3][3] = {{"steps", "step", "1"},
                            {"bytes", "bytes sent (headers in)", "3"},
                            {"seconds", "seconds", "4"}};
    for (int x = 0; x < 3; x++) {
        char name[64];
        int xcol = xs[x][2][0] - '0';
        snprintf(name, sizeof name, "loss-vs-%s", xs[x][0]);
        s_figure(gp,
                 out,
                 name,
                 xs[x][1],
                 "minibatch loss",
                 xcol,
                 2,
                 false,
                 s,
                 count,
                 true);
        snprintf(name,
                 sizeof name,
                 "%s-vs-%s",
                 acc ? "accuracy" : "test-loss",
                 xs[x][0]);
        s_figure(gp,
                 out,
                 name,
                 xs[x][1],
                 acc ? "held-out accuracy (%)" : "held-out loss",
                 xcol,
                 acc ? 6 : 5,
                 true,
                 s,
                 count,
                 !acc);
    }
    int rc = pclose(gp);
    if (rc != 0) {
        fprintf(stderr,
                "rumor plot: gnuplot failed (status %d; Debian: "
                "apt-get install gnuplot-nox)\n",
                rc);
        return 1;
    }
    return 0;
}

/* The accuracy of the nodes' average model, from RUN/average.json
 * (written by rumor launch when every node ran locally), into text. */
static void
s_average_accuracy(const char *run, char *text, size_t cap)
{
    char path[RUMOR_NODE_PATH_MAX + 32];
    snprintf(path, sizeof path, "%s/average.json", run);
    rumor_buf buf;
    rumor_buf_init(&buf, 1u << 16);
    if (rumor_buf_read_file(&buf, path) == RUMOR_OK) {
        cJSON *o = cJSON_ParseWithLength((const char *)buf.data, buf.len);
        double acc = o != NULL ? s_num(o, "accuracy") : NAN;
        if (!isnan(acc))
            snprintf(text, cap, "%.2f%%", 100 * acc);
        cJSON_Delete(o);
    }
    rumor_buf_free(&buf);
}

/* Adds the series of one run directory; prints its summary line. */
static int
s_add_run(const char *run, const char *out, struct s_series *s, size_t *count)
{
    DIR *d = opendir(run);
    if (d == NULL) {
        fprintf(stderr, "rumor plot: cannot open %s\n", run);
        return -1;
    }
    struct s_final sum = {0};
    size_t nodes = 0, with_acc = 0;
    int status = 0;
    /* node-N.jsonl in node order, so plots and tables are stable */
    unsigned long ids[PLOT_MAX_SERIES];
    size_t nids = 0;
    struct dirent *e = NULL;
    for (e = readdir(d); e != NULL; e = readdir(d)) {
        if (strncmp(e->d_name, "node-", 5) != 0)
            continue;
        char *end = NULL;
        unsigned long id = strtoul(e->d_name + 5, &end, 10);
        if (end == e->d_name + 5 || strcmp(end, ".jsonl") != 0)
            continue;
        if (nids == PLOT_MAX_SERIES) {
            status = -1;
            break;
        }
        size_t k = nids++;
        for (; k > 0 && ids[k - 1] > id; k--)
            ids[k] = ids[k - 1];
        ids[k] = id;
    }
    closedir(d);
    for (size_t j = 0; j < nids && status == 0; j++) {
        char name[64];
        snprintf(name, sizeof name, "node-%lu.jsonl", ids[j]);
        size_t len = strlen(name);
        if (*count == PLOT_MAX_SERIES) {
            fprintf(stderr,
                    "rumor plot: more than %d series\n",
                    PLOT_MAX_SERIES);
            status = -1;
            break;
        }
        struct s_series *x = &s[*count];
        memset(x, 0, sizeof *x);
        int stem = (int)(len - 6);
        snprintf(x->label, sizeof x->label, "%s %.*s", s_base(run), stem, name);
        snprintf(x->all,
                 sizeof x->all,
                 "%s/%s-%.*s.dat",
                 out,
                 s_base(run),
                 stem,
                 name);
        snprintf(x->eval,
                 sizeof x->eval,
                 "%s/%s-%.*s.eval.dat",
                 out,
                 s_base(run),
                 stem,
                 name);
        char path[2 * RUMOR_NODE_PATH_MAX];
        snprintf(path, sizeof path, "%s/%s", run, name);
        struct s_final fin = {NAN, NAN, NAN, NAN, NAN, NAN, NAN};
        status = s_convert(path, x, &fin);
        if (status != 0)
            break;
        (*count)++;
        nodes++;
        sum.steps = fmax(sum.steps, fin.steps);
        if (!isnan(fin.accuracy)) {
            sum.accuracy += fin.accuracy;
            with_acc++;
        }
        sum.bytes_sent += fin.bytes_sent;
        sum.bytes_recv += fin.bytes_recv;
        sum.seconds = fmax(sum.seconds, fin.seconds);
        sum.optimum_error =
            fmax(sum.optimum_error,
                 isnan(fin.optimum_error) ? 0 : fin.optimum_error);
    }
    if (status == 0 && nodes == 0) {
        fprintf(stderr, "rumor plot: no node-*.jsonl in %s\n", run);
        status = -1;
    }
    if (status != 0)
        return -1;
    char acc[32] = "-", avg[32] = "-";
    s_average_accuracy(run, avg, sizeof avg);
    if (with_acc > 0)
        snprintf(acc,
                 sizeof acc,
                 "%.2f%%",
                 100 * sum.accuracy / (double)with_acc);
    printf("%-16s %5zu %7.0f %10s %10s %16.0f %9.1f\n",
           s_base(run),
           nodes,
           sum.steps,
           acc,
           avg,
           sum.bytes_sent / (double)nodes,
           sum.seconds);
    return 0;
}

int
cli_plot_main(int argc, char **argv)
{
    const char *out = NULL;
    const char **runs = calloc((size_t)argc, sizeof *runs);
    struct s_series *s = calloc(PLOT_MAX_SERIES, sizeof *s);
    size_t nruns = 0, count = 0;
    int status = runs == NULL || s == NULL;
    for (int i = 1; i < argc && status == 0; i++) {
        if (strcmp(argv[i], "--out") == 0 && i + 1 < argc)
            out = argv[++i];
        else if (strncmp(argv[i], "--", 2) == 0) {
            fprintf(stderr, "rumor plot: unknown option %s\n", argv[i]);
            status = 2;
        } else
            runs[nruns++] = argv[i];
    }
    if (status == 0 && nruns == 0) {
        cli_plot_help(stderr);
        status = 2;
    }
    char outbuf[RUMOR_NODE_PATH_MAX + 16];
    if (status == 0 && out == NULL) {
        snprintf(outbuf, sizeof outbuf, "%s/plots", runs[0]);
        out = outbuf;
    }
    if (status == 0 && node_mkdirs(out) != 0) {
        cli_io_error("plot", out, "cannot create the directory");
        status = 1;
    }
    if (status == 0)
        printf("%-16s %5s %7s %10s %10s %16s %9s\n",
               "run",
               "nodes",
               "steps",
               "accuracy",
               "average",
               "bytes sent/node",
               "seconds");
    for (size_t r = 0; r < nruns && status == 0; r++)
        status = s_add_run(runs[r], out, s, &count) == 0 ? 0 : 1;
    bool acc = false;
    for (size_t k = 0; k < count; k++)
        acc |= s[k].has_accuracy;
    if (status == 0)
        status = s_draw(out, s, count, acc);
    if (status == 0)
        printf("plots: %s/{loss,%s}-vs-{steps,bytes,seconds}.png\n",
               out,
               acc ? "accuracy" : "test-loss");
    free(runs);
    free(s);
    return status;
}
