/* param.h: declarative option tables. A binary lists its options once; the table
 * gives defaults, parses the environment (TR_<NAME>; not TR_ROOT, TR_BUILD and TR_BIN, which
 * the test harness and scripts export for the source tree) and the command line in that
 * order of precedence, checks ranges, and prints --help.
 *
 * Names are written with underscores (the canonical spelling, as in the seed's
 * absl flags); the command line also accepts dashes. Booleans take --x, --x=true,
 * --no_x, --no-x and --nox. Lists are comma-separated. */
#ifndef TR_PARAM_H
#define TR_PARAM_H

#include <stdint.h>
#include <stdio.h>

#include "status.h"

#ifdef __cplusplus
extern "C" {
#endif

enum tr_opt_type {
    TR_OPT_END = 0,
    TR_OPT_BOOL,      /* dst: int (0/1) */
    TR_OPT_INT,       /* dst: int */
    TR_OPT_INT64,     /* dst: int64_t */
    TR_OPT_DOUBLE,    /* dst: double */
    TR_OPT_STRING,    /* dst: char * (owned by the table, tr_opt_release frees it; NULL if unset) */
    TR_OPT_ENUM,      /* dst: int index into choices */
    TR_OPT_INT_LIST,  /* dst: struct tr_i64_list */
    TR_OPT_BYTES,     /* dst: int64_t; text like 73G, 512M, 64K, 1.5T, 1048576 (binary units) */
    TR_OPT_PATH,      /* dst: char *, as TR_OPT_STRING; at most TR_OPT_PATH_MAX bytes */
};

/* The longest path a TR_OPT_PATH option accepts: PATH_MAX less room for the file
 * names and suffixes programs append to it ("/rank12.bin.tmp-4242-0"), so that every
 * path made from an accepted option fits. */
#define TR_OPT_PATH_MAX 4000

struct tr_i64_list {
    int64_t *v; /* (n), owned; freed by tr_opt_release */
    int n;
};

struct tr_opt {
    const char *name;            /* canonical, underscores */
    enum tr_opt_type type;
    void *dst;
    const char *def;             /* default as text; NULL = empty/unset */
    const char *help;
    double min, max;             /* numeric bounds, inclusive; ignored when min > max */
    const char *const *choices;  /* ENUM: NULL-terminated list */
    const char *alias;           /* another accepted name, or NULL */
    int set_by;                  /* filled by parsing: 0 default, 1 env, 2 cli */
    const char *bare;            /* ENUM, STRING: the value a bare --name takes when no
                                    argument follows or the next one is an option (NULL: a
                                    value is required); "--amp fp16" still gives the value.
                                    A STRING with one is unset (NULL) by --no_name */
    unsigned props;              /* enum tr_opt_prop bits: what the programs sharing the
                                    declaration do with it; 0 for most */
};

/* Properties of an option, declared with it, for the programs that pass options
 * on (terarec train to the loader and the workers) or compare them (the workers'
 * agreement on the config): tested by bit, never by the option's name. */
enum tr_opt_prop {
    TR_OPT_RANK_LOCAL = 1u << 0,    /* may differ between the ranks of a job: it changes how fast a rank
                                       runs, not what it computes (left out of their agreement) */
    TR_OPT_LAUNCHER_SETS = 1u << 1, /* terarec train sets it on each worker itself: not one of its flags
                                       (or a flag of its own by the same name) */
    TR_OPT_LAUNCHER_MAPS = 1u << 2, /* terarec train takes it and gives the workers a value of its own
                                       made from it (a path it rewrites, a store it serves) */
    TR_OPT_LOADER = 1u << 3,        /* terarec-loader takes it too: terarec train passes it to both */
    TR_OPT_SHAPES_JOB = 1u << 4,    /* defines the data or the model: given, terarec train trains the job the
                                       flags define instead of its built-in demo (other flags apply on top of
                                       the demo) */
};

#define TR_OPT_NOBOUNDS 1.0, 0.0

/* Parse outcome flags returned through *want. */
enum { TR_OPT_WANT_HELP = 1, TR_OPT_WANT_VERSION = 2, TR_OPT_WANT_PARSABLE = 4 };

/* Applies defaults, then TR_<NAME> environment variables, then argv[1..argc).
 * Positional arguments are not accepted unless `rest` is non-NULL, in which case
 * *rest receives the index of the first non-option argument (or argc).
 * On bad input logs one error line naming the option and a hint, and returns
 * TR_ERR_ARG (or TR_ERR_NOMEM). --help/-h and --version[--parsable] set *want.
 * Not thread-safe. */
enum tr_status tr_opt_parse(struct tr_opt *opts, int argc, char **argv, int *rest,
                            int *want) TR_WUR;

/* How option `name` of the table was set by the last tr_opt_parse: 0 by default
 * (or no such option), 1 by the environment, 2 on the command line. */
int tr_opt_given(const struct tr_opt *opts, const char *name);

/* Options that exclude each other: when both `a` and `b` were given (environment
 * or command line), logs "--a and --b cannot be used together" (naming a
 * TR_<NAME> variable instead where that set it), then `hint` if non-NULL, and
 * returns TR_ERR_ARG; TR_OK otherwise. */
enum tr_status tr_opt_exclusive(const struct tr_opt *opts, const char *a, const char *b, const char *hint) TR_WUR;

/* Writes how option o is named to the user into buf: "--name", or "TR_NAME" when
 * the environment set it. */
void tr_opt_source(const struct tr_opt *o, char *buf, size_t n);

/* Frees strings and lists owned by the table. Safe to call twice. Call it before
 * parsing the same table again: tr_opt_parse does not free earlier values. */
void tr_opt_release(struct tr_opt *opts);

/* Prints "usage" followed by one line per option with its default. */
void tr_opt_print_help(const struct tr_opt *opts, const char *usage, FILE *fp);

/* Formats the current value of `o` as text (lists comma-separated) into buf. */
void tr_opt_format(const struct tr_opt *o, char *buf, size_t n);

/* Finds an option by canonical name; NULL if absent. */
struct tr_opt *tr_opt_find(struct tr_opt *opts, const char *name);

/* Parses a boolean's words: 1, true, yes, on (*out = 1) or 0, false, no, off
 * (*out = 0), in any case. Returns 0, or -1 (*out unchanged) for other text. */
int tr_opt_parse_bool(const char *text, int *out);

/* Parses a size: a number with an optional K, M, G or T suffix (powers of 1024;
 * "GB" and "GiB" are accepted too). Returns 0, -1 on bad text, or -2 when the
 * size does not fit in int64_t. */
int tr_opt_parse_bytes(const char *text, int64_t *out);

/* Parses a comma-separated list of int64 ("1,2,3"; "4x100" repeats 100 four times).
 * On success *out holds a tr_malloc'd array. Returns TR_ERR_ARG on bad text,
 * TR_ERR_RANGE when a number does not fit in int64_t or the list is longer than a
 * million entries. */
enum tr_status tr_opt_parse_i64_list(const char *text, struct tr_i64_list *out) TR_WUR;

#ifdef __cplusplus
}
#endif
#endif
