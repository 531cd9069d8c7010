/*
 * The topology file parser. The format is line based so that a person can
 * write one by hand and a diagnostic can point at the exact token:
 *
 *   nodes N                          (optional)
 *   node ID ENDPOINT [key=ed25519:Z85]
 *   edge A B [WEIGHT]
 *   phase P                          (time-varying graphs)
 *   matrix N                         (then N rows of N numbers)
 *
 * '#' starts a comment at the start of a line or after white space; inside
 * a token it is an ordinary character, because Z85 keys contain it. Every
 * error is "file:line:col: message" with the
 * column of the offending token (1-based). Syntax is checked here; graph
 * properties (range, duplicates, connectivity, weights) are checked by
 * topo_build, shared with the generators. The parser never allocates more
 * than the caps in topology.h allow, whatever the input says.
 */
#include "rumor/topology.h"

#include "topology/topology_impl.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define PARSE_MAX_TOKENS      8
#define PARSE_MAX_TOKEN_BYTES 512

struct token {
    const char *text; /* borrowed, not NUL-terminated */
    size_t len;
    int col;
};

struct line {
    struct token tok[PARSE_MAX_TOKENS];
    size_t count; /* tokens kept (at most PARSE_MAX_TOKENS) */
    size_t total; /* tokens seen */
    int number;   /* 1-based line number */
    int end_col;  /* column just past the last character */
};

struct parser {
    struct topo_builder *b;
    struct rumor_diag *diag;
    const char *name;
    uint32_t phase;          /* phase of the edges being read */
    bool saw_phase;          /* a `phase` line was seen */
    bool saw_edge_unphased;  /* an edge came before any `phase` line */
    size_t matrix_rows_left; /* rows still expected after `matrix N` */
    size_t matrix_row;       /* next row index */
};

/* --- tokens ------------------------------------------------------------- */

static bool
s_blank(char c)
{
    return c == ' ' || c == '\t' || c == '\r';
}

/* A comment starts at a '#' that does not continue a token. */
static bool
s_comment_at(const char *text, size_t i)
{
    return text[i] == '#' && (i == 0 || s_blank(text[i - 1]));
}

static void
s_split(const char *text, size_t len, int number, struct line *out)
{
    out->count = 0;
    out->total = 0;
    out->number = number;
    size_t i = 0;
    while (i < len && !s_comment_at(text, i)) {
        if (s_blank(text[i])) {
            i++;
            continue;
        }
        size_t start = i;
        while (i < len && !s_blank(text[i]))
            i++;
        if (out->count < PARSE_MAX_TOKENS) {
            out->tok[out->count].text = text + start;
            out->tok[out->count].len = i - start;
            out->tok[out->count].col = (int)start + 1;
            out->count++;
        }
        out->total++;
    }
    out->end_col = (int)i + 1;
}

static bool
s_is(const struct token *t, const char *word)
{
    return t->len == strlen(word) && memcmp(t->text, word, t->len) == 0;
}

/* Copies a token into a NUL-terminated scratch buffer (truncated). */
static const char *
s_cstr(const struct token *t, char *buf, size_t cap)
{
    size_t n = t->len < cap - 1 ? t->len : cap - 1;
    memcpy(buf, t->text, n);
    buf[n] = '\0';
    return buf;
}

static rumor_err
s_fail(struct parser *p, int line, int col, const char *fmt, const char *arg)
{
    rumor_diag_set(p->diag, p->name, line, col, fmt, arg);
    return RUMOR_EPROTO;
}

static rumor_err
s_parse_count(struct parser *p,
              const struct token *t,
              int line,
              const char *what,
              unsigned long max,
              unsigned long *out)
{
    char buf[PARSE_MAX_TOKEN_BYTES];
    const char *s = s_cstr(t, buf, sizeof buf);
    if (t->len == 0 || t->len > 12 || strspn(s, "0123456789") != t->len) {
        rumor_diag_set(p->diag,
                       p->name,
                       line,
                       t->col,
                       "expected %s, got '%s'",
                       what,
                       s);
        return RUMOR_EPROTO;
    }
    unsigned long v = strtoul(s, NULL, 10);
    if (v > max) {
        rumor_diag_set(p->diag,
                       p->name,
                       line,
                       t->col,
                       "%s %lu is too large (at most %lu)",
                       what,
                       v,
                       max);
        return RUMOR_ETOOBIG;
    }
    *out = v;
    return RUMOR_OK;
}

static rumor_err
s_parse_weight(struct parser *p,
               const struct token *t,
               int line,
               bool allow_zero,
               double *out)
{
    char buf[PARSE_MAX_TOKEN_BYTES];
    const char *s = s_cstr(t, buf, sizeof buf);
    char *end = NULL;
    errno = 0;
    double v = strtod(s, &end);
    if (end == s || *end != '\0' || errno != 0 || !isfinite(v))
        return s_fail(p, line, t->col, "invalid weight '%s'", s);
    if (v < 0 || v > 1 || (v == 0 && !allow_zero)) {
        return s_fail(p,
                      line,
                      t->col,
                      allow_zero ? "weight must be in [0, 1], got %s"
                                 : "weight must be in (0, 1], got %s",
                      s);
    }
    *out = v;
    return RUMOR_OK;
}

static rumor_err
s_expect_end(struct parser *p, const struct line *l, size_t used)
{
    if (l->total <= used)
        return RUMOR_OK;
    char buf[PARSE_MAX_TOKEN_BYTES];
    return s_fail(p,
                  l->number,
                  l->tok[used].col,
                  "unexpected '%s' at end of line",
                  s_cstr(&l->tok[used], buf, sizeof buf));
}

/* --- directives --------------------------------------------------------- */

static rumor_err
s_directive_nodes(struct parser *p, const struct line *l)
{
    if (l->count < 2)
        return s_fail(p, l->number, l->end_col, "%s", "`nodes` needs a count");
    if (p->b->nodes_line != 0) {
        rumor_diag_set(p->diag,
                       p->name,
                       l->number,
                       l->tok[0].col,
                       "duplicate `nodes` line (first at line %d)",
                       p->b->nodes_line);
        return RUMOR_EPROTO;
    }
    unsigned long n = 0;
    rumor_err rc = s_parse_count(p,
                                 &l->tok[1],
                                 l->number,
                                 "node count",
                                 RUMOR_TOPOLOGY_MAX_NODES,
                                 &n);
    if (rc != RUMOR_OK)
        return rc;
    if (n == 0)
        return s_fail(p, l->number, l->tok[1].col, "%s", "node count is 0");
    if (p->b->matrix != NULL && n != p->b->nodes) {
        rumor_diag_set(p->diag,
                       p->name,
                       l->number,
                       l->tok[1].col,
                       "node count %lu differs from `matrix %zu`",
                       n,
                       p->b->nodes);
        return RUMOR_EPROTO;
    }
    p->b->nodes = n;
    p->b->nodes_line = l->number;
    return s_expect_end(p, l, 2);
}

static rumor_err
s_node_attribute(struct parser *p,
                 const struct line *l,
                 const struct token *t,
                 struct topo_decl *decl)
{
    char buf[PARSE_MAX_TOKEN_BYTES];
    const char *s = s_cstr(t, buf, sizeof buf);
    const char *why = NULL;
    if (strncmp(s, "key=", 4) != 0) {
        return s_fail(p,
                      l->number,
                      t->col,
                      "unknown attribute '%s' (expected key=ed25519:Z85)",
                      s);
    }
    if (decl->key[0] != '\0')
        return s_fail(p, l->number, t->col, "%s", "duplicate key= attribute");
    if (!topo_key_valid(s + 4, &why))
        return s_fail(p, l->number, t->col + 4, "%s", why);
    memcpy(decl->key, s + 4, RUMOR_TOPOLOGY_KEY_TEXT_BYTES + 1);
    return RUMOR_OK;
}

static rumor_err
s_directive_node(struct parser *p, const struct line *l)
{
    if (l->count < 3) {
        return s_fail(p,
                      l->number,
                      l->end_col,
                      "%s",
                      "`node` needs an id and an endpoint");
    }
    unsigned long id = 0;
    rumor_err rc = s_parse_count(p,
                                 &l->tok[1],
                                 l->number,
                                 "node id",
                                 RUMOR_TOPOLOGY_MAX_NODES - 1,
                                 &id);
    if (rc != RUMOR_OK)
        return rc;
    rc = topo_builder_reserve_nodes(p->b, id + 1, p->diag);
    if (rc != RUMOR_OK)
        return rc;
    struct topo_decl *decl = &p->b->decl[id];
    if (decl->line != 0) {
        rumor_diag_set(p->diag,
                       p->name,
                       l->number,
                       l->tok[1].col,
                       "duplicate node %lu (first at line %d)",
                       id,
                       decl->line);
        return RUMOR_EPROTO;
    }
    char buf[PARSE_MAX_TOKEN_BYTES];
    const char *endpoint = s_cstr(&l->tok[2], buf, sizeof buf);
    const char *why = NULL;
    if (!topo_endpoint_valid(endpoint, &why))
        return s_fail(p, l->number, l->tok[2].col, "%s", why);
    if (l->count >= 4) {
        rc = s_node_attribute(p, l, &l->tok[3], decl);
        if (rc != RUMOR_OK)
            return rc;
    }
    rc = s_expect_end(p, l, 4);
    if (rc != RUMOR_OK)
        return rc;
    decl->endpoint = strdup(endpoint);
    if (decl->endpoint == NULL)
        return RUMOR_ENOMEM;
    decl->line = l->number;
    p->b->decl_lines++;
    return RUMOR_OK;
}

static rumor_err
s_directive_edge(struct parser *p, const struct line *l)
{
    if (l->count < 3)
        return s_fail(p,
                      l->number,
                      l->end_col,
                      "%s",
                      "`edge` needs two node ids");
    struct topo_edge e = {.phase = p->phase,
                          .line = l->number,
                          .col_a = l->tok[1].col,
                          .col_b = l->tok[2].col};
    unsigned long a = 0, b = 0;
    const unsigned long max = RUMOR_TOPOLOGY_MAX_NODES - 1;
    rumor_err rc = s_parse_count(p, &l->tok[1], l->number, "node id", max, &a);
    if (rc == RUMOR_OK)
        rc = s_parse_count(p, &l->tok[2], l->number, "node id", max, &b);
    if (rc != RUMOR_OK)
        return rc;
    if (a == b) {
        rumor_diag_set(p->diag,
                       p->name,
                       l->number,
                       l->tok[2].col,
                       "self edge %lu-%lu (a node's own weight is implied)",
                       a,
                       b);
        return RUMOR_EPROTO;
    }
    e.a = (uint32_t)a;
    e.b = (uint32_t)b;
    if (l->count >= 4) {
        rc = s_parse_weight(p, &l->tok[3], l->number, false, &e.weight);
        if (rc != RUMOR_OK)
            return rc;
        e.has_weight = true;
    }
    rc = s_expect_end(p, l, 4);
    if (rc != RUMOR_OK)
        return rc;
    if (!p->saw_phase)
        p->saw_edge_unphased = true;
    return topo_builder_add_edge(p->b, &e, p->diag);
}

static rumor_err
s_directive_phase(struct parser *p, const struct line *l)
{
    if (l->count < 2)
        return s_fail(p, l->number, l->end_col, "%s", "`phase` needs a number");
    if (p->saw_edge_unphased) {
        return s_fail(p,
                      l->number,
                      l->tok[0].col,
                      "%s",
                      "edges before the first `phase` line belong to no "
                      "phase: start with `phase 0`");
    }
    unsigned long k = 0;
    rumor_err rc = s_parse_count(p,
                                 &l->tok[1],
                                 l->number,
                                 "phase",
                                 RUMOR_TOPOLOGY_MAX_PHASES - 1,
                                 &k);
    if (rc != RUMOR_OK)
        return rc;
    unsigned long expected = p->saw_phase ? p->phase + 1ul : 0ul;
    if (k != expected) {
        rumor_diag_set(
            p->diag,
            p->name,
            l->number,
            l->tok[1].col,
            "phases must be numbered in order: expected %lu, got %lu",
            expected,
            k);
        return RUMOR_EPROTO;
    }
    p->saw_phase = true;
    p->phase = (uint32_t)k;
    p->b->phases = k + 1;
    return s_expect_end(p, l, 2);
}

static rumor_err
s_directive_matrix(struct parser *p, const struct line *l)
{
    if (l->count < 2)
        return s_fail(p, l->number, l->end_col, "%s", "`matrix` needs a size");
    if (p->b->matrix != NULL || p->b->edge_count > 0 || p->saw_phase) {
        return s_fail(p,
                      l->number,
                      l->tok[0].col,
                      "%s",
                      "`matrix` cannot be combined with `edge`, `phase` or "
                      "another `matrix`");
    }
    unsigned long n = 0;
    rumor_err rc = s_parse_count(p,
                                 &l->tok[1],
                                 l->number,
                                 "matrix size",
                                 RUMOR_TOPOLOGY_MAX_NODES,
                                 &n);
    if (rc != RUMOR_OK)
        return rc;
    if (n == 0)
        return s_fail(p, l->number, l->tok[1].col, "%s", "matrix size is 0");
    if (p->b->nodes != 0 && p->b->nodes != n) {
        rumor_diag_set(p->diag,
                       p->name,
                       l->number,
                       l->tok[1].col,
                       "matrix size %lu differs from `nodes %zu`",
                       n,
                       p->b->nodes);
        return RUMOR_EPROTO;
    }
    p->b->matrix = calloc(n * n, sizeof(double));
    p->b->row_line = calloc(n, sizeof(int));
    if (p->b->matrix == NULL || p->b->row_line == NULL)
        return RUMOR_ENOMEM;
    p->b->nodes = n;
    p->matrix_rows_left = n;
    p->matrix_row = 0;
    return s_expect_end(p, l, 2);
}

/* A matrix row may be longer than PARSE_MAX_TOKENS, so it is scanned here
 * directly instead of through struct line. */
static rumor_err
s_matrix_row(struct parser *p, const char *text, size_t len, int number)
{
    size_t n = p->b->nodes, col = 0, i = 0;
    double *row = p->b->matrix + p->matrix_row * n;
    while (i < len && !s_comment_at(text, i)) {
        if (s_blank(text[i])) {
            i++;
            continue;
        }
        size_t start = i;
        while (i < len && !s_blank(text[i]))
            i++;
        struct token t = {text + start, i - start, (int)start + 1};
        if (col == n) {
            rumor_diag_set(p->diag,
                           p->name,
                           number,
                           t.col,
                           "matrix row has more than %zu values",
                           n);
            return RUMOR_EPROTO;
        }
        rumor_err rc = s_parse_weight(p, &t, number, true, &row[col]);
        if (rc != RUMOR_OK)
            return rc;
        col++;
    }
    if (col < n) {
        rumor_diag_set(p->diag,
                       p->name,
                       number,
                       (int)i + 1,
                       "matrix row has %zu values, expected %zu",
                       col,
                       n);
        return RUMOR_EPROTO;
    }
    p->b->row_line[p->matrix_row++] = number;
    p->matrix_rows_left--;
    return RUMOR_OK;
}

static rumor_err
s_parse_line(struct parser *p, const char *text, size_t len, int number)
{
    struct line l;
    s_split(text, len, number, &l);
    if (l.total == 0)
        return RUMOR_OK;
    if (p->matrix_rows_left > 0)
        return s_matrix_row(p, text, len, number);
    if (p->b->matrix != NULL && !s_is(&l.tok[0], "node") &&
        !s_is(&l.tok[0], "nodes")) {
        return s_fail(p,
                      number,
                      l.tok[0].col,
                      "%s",
                      "only `node` lines may follow a complete `matrix`");
    }
    if (s_is(&l.tok[0], "node"))
        return s_directive_node(p, &l);
    if (s_is(&l.tok[0], "edge"))
        return s_directive_edge(p, &l);
    if (s_is(&l.tok[0], "nodes"))
        return s_directive_nodes(p, &l);
    if (s_is(&l.tok[0], "phase"))
        return s_directive_phase(p, &l);
    if (s_is(&l.tok[0], "matrix"))
        return s_directive_matrix(p, &l);
    char buf[PARSE_MAX_TOKEN_BYTES];
    return s_fail(p,
                  number,
                  l.tok[0].col,
                  "unknown directive '%s' (expected node, nodes, edge, phase "
                  "or matrix)",
                  s_cstr(&l.tok[0], buf, sizeof buf));
}

/* --- public API ----------------------------------------------------------- */

rumor_err
rumor_topology_parse(const char *text,
                     size_t len,
                     const char *name,
                     rumor_topology **out,
                     struct rumor_diag *diag)
{
    *out = NULL;
    if (len > RUMOR_TOPOLOGY_MAX_FILE_BYTES) {
        rumor_diag_set(diag,
                       name,
                       0,
                       0,
                       "file is larger than %u bytes",
                       RUMOR_TOPOLOGY_MAX_FILE_BYTES);
        return RUMOR_ETOOBIG;
    }
    struct topo_builder b;
    topo_builder_init(&b, name);
    struct parser p = {.b = &b, .diag = diag, .name = name};
    rumor_err rc = RUMOR_OK;
    size_t start = 0;
    int number = 1;
    while (start < len) {
        const char *nl = memchr(text + start, '\n', len - start);
        size_t end = nl ? (size_t)(nl - text) : len;
        if (memchr(text + start, '\0', end - start) != NULL) {
            rumor_diag_set(diag, name, number, 1, "NUL byte in a text file");
            rc = RUMOR_EPROTO;
            goto done;
        }
        rc = s_parse_line(&p, text + start, end - start, number);
        if (rc != RUMOR_OK)
            goto done;
        start = end + 1;
        number++;
    }
    if (p.matrix_rows_left > 0) {
        rumor_diag_set(diag,
                       name,
                       number,
                       1,
                       "matrix ends after %zu of %zu rows",
                       p.matrix_row,
                       b.nodes);
        rc = RUMOR_EPROTO;
        goto done;
    }
    rc = topo_build(&b, out, diag);
done:
    topo_builder_free(&b);
    return rc;
}

rumor_err
rumor_topology_load_file(const char *path,
                         rumor_topology **out,
                         struct rumor_diag *diag)
{
    *out = NULL;
    rumor_buf buf;
    rumor_buf_init(&buf, RUMOR_TOPOLOGY_MAX_FILE_BYTES);
    rumor_err rc = rumor_buf_read_file(&buf, path);
    if (rc == RUMOR_OK) {
        rc = rumor_topology_parse((const char *)buf.data,
                                  buf.len,
                                  path,
                                  out,
                                  diag);
    } else if (rc == RUMOR_ETOOBIG) {
        rumor_diag_set(diag,
                       path,
                       0,
                       0,
                       "file is larger than %u bytes",
                       RUMOR_TOPOLOGY_MAX_FILE_BYTES);
    } else if (rc == RUMOR_EIO || rc == RUMOR_ENOTFOUND) {
        (void)rumor_diag_errno(diag, path, "cannot read");
    } else {
        rumor_diag_set(diag, path, 0, 0, "cannot read: %s", rumor_strerror(rc));
    }
    rumor_buf_free(&buf);
    return rc;
}
