/* test_param.c: unit tests of the option tables in common/param.c: defaults,
 * --name=value and --name value, dash spellings and aliases, boolean negations,
 * range and syntax errors, lists, enums, TR_<NAME> environment variables under the
 * command line, --help/--version, format/parse round trips, help text, and
 * allocation failures. It does not test config files (not implemented). */
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../../common/alloc.h"
#include "../../../common/check.h"
#include "../../../common/harness.h"
#include "../../../common/param.h"

struct cfg {
    int batch_size, seed, verbose, shuffle, optim;
    int64_t rows, nodef_i64;
    double lr, nodef_dbl;
    char *name;
    struct tr_i64_list dims, tables;
};

enum { NOPTS = 12 }; /* options, not counting TR_OPT_END */
static const char *const optims[] = {"sgd", "adagrad", "adam", NULL};

struct table {
    struct cfg c;
    struct tr_opt opts[NOPTS + 1];
};

/* The table under test, pointing into t->c. */
static void table_init(struct table *t)
{
    memset(t, 0, sizeof *t);
    struct cfg *c = &t->c;
    const struct tr_opt opts[NOPTS + 1] = {
        {.name = "batch_size", .type = TR_OPT_INT, .dst = &c->batch_size, .def = "32", .help = "micro-batch",
         .min = 1, .max = 65536, .alias = "bs"},
        {.name = "seed", .type = TR_OPT_INT, .dst = &c->seed, .def = "7", .min = 1, .max = 0},
        {.name = "rows", .type = TR_OPT_INT64, .dst = &c->rows, .def = "1000", .min = 1, .max = 0},
        {.name = "lr", .type = TR_OPT_DOUBLE, .dst = &c->lr, .def = "0.1", .min = 0, .max = 10},
        {.name = "verbose", .type = TR_OPT_BOOL, .dst = &c->verbose, .def = "false"},
        {.name = "shuffle", .type = TR_OPT_BOOL, .dst = &c->shuffle, .def = "true"},
        {.name = "name", .type = TR_OPT_STRING, .dst = &c->name, .def = "dlrm"},
        {.name = "optim", .type = TR_OPT_ENUM, .dst = &c->optim, .def = "sgd", .choices = optims},
        {.name = "dims", .type = TR_OPT_INT_LIST, .dst = &c->dims, .def = "512,256,128", .min = 1,
         .max = 1 << 20},
        {.name = "tables", .type = TR_OPT_INT_LIST, .dst = &c->tables, .def = NULL, .min = 1, .max = 0},
        {.name = "nodef_i64", .type = TR_OPT_INT64, .dst = &c->nodef_i64, .def = NULL, .min = 1, .max = 0},
        {.name = "nodef_dbl", .type = TR_OPT_DOUBLE, .dst = &c->nodef_dbl, .def = NULL, .min = 1, .max = 0},
        {.type = TR_OPT_END},
    };
    memcpy(t->opts, opts, sizeof opts);
}

/* Parses the NULL-terminated argument list (argv[0] is added). tr_opt_parse resets
 * strings and lists without freeing them (their storage may be uninitialised on the
 * first call), so what an earlier parse allocated is released first. */
static enum tr_status parse(struct table *t, int *want, ...)
{
    char *argv[64] = {"prog"};
    int argc = 1;
    va_list ap;
    va_start(ap, want);
    for (char *a; argc < 63 && (a = va_arg(ap, char *)) != NULL;)
        argv[argc++] = a;
    va_end(ap);
    int w = 0;
    tr_opt_release(t->opts);
    enum tr_status rc = tr_opt_parse(t->opts, argc, argv, NULL, want ? want : &w);
    return rc;
}

static void test_defaults(void)
{
    struct table t;
    table_init(&t);
    t.c.nodef_i64 = 12345; /* garbage a caller might have on the stack */
    t.c.nodef_dbl = 6.5;
    int want = -1;
    TH_EQ_ST_REQ(parse(&t, &want, NULL), TR_OK);
    TH_EQ(want, 0);
    TH_EQ(t.c.batch_size, 32);
    TH_EQ(t.c.seed, 7);
    TH_EQ(t.c.rows, 1000);
    TH_NEAR(t.c.lr, 0.1, 0.0, 0.0);
    TH_EQ(t.c.verbose, 0);
    TH_EQ(t.c.shuffle, 1);
    TH_EQ(t.c.optim, 0);
    TH_EQ_STR(t.c.name, "dlrm");
    TH_EQ(t.c.dims.n, 3);
    if (t.c.dims.n == 3) { /* the elements exist only then */
        TH_EQ(t.c.dims.v[0], 512);
        TH_EQ(t.c.dims.v[1], 256);
        TH_EQ(t.c.dims.v[2], 128);
    }
    TH_EQ(t.c.tables.n, 0);
    TH_CHECK(t.c.tables.v == NULL);
    for (int i = 0; t.opts[i].type != TR_OPT_END; i++)
        TH_CHECKF(t.opts[i].set_by == 0, "--%s: set_by %d after defaults", t.opts[i].name, t.opts[i].set_by);
    /* "def: NULL = empty/unset": numbers without a default are 0 like TR_OPT_INT's,
     * not whatever the caller's storage held */
    TH_CHECKF(t.c.nodef_i64 == 0, "TR_OPT_INT64 without a default keeps %lld", (long long)t.c.nodef_i64);
    TH_CHECKF(t.c.nodef_dbl == 0.0, "TR_OPT_DOUBLE without a default keeps %g", t.c.nodef_dbl);
    tr_opt_release(t.opts);
    TH_CHECK(t.c.name == NULL && t.c.dims.v == NULL);
    TH_EQ(t.c.dims.n, 0);
    tr_opt_release(t.opts); /* twice is safe */
}

static void test_spellings(void)
{
    struct table t;
    table_init(&t);
    TH_EQ_ST_REQ(parse(&t, NULL, "--batch_size=64", "--rows", "5000000000", "--lr=0.5", "--name", "big model", NULL),
                 TR_OK);
    TH_EQ(t.c.batch_size, 64);
    TH_EQ(t.c.rows, 5000000000LL);
    TH_NEAR(t.c.lr, 0.5, 0.0, 0.0);
    TH_EQ_STR(t.c.name, "big model");
    TH_EQ(tr_opt_find(t.opts, "batch_size")->set_by, 2);
    TH_EQ(tr_opt_find(t.opts, "seed")->set_by, 0);
    TH_EQ_ST_REQ(parse(&t, NULL, "--batch-size", "128", NULL), TR_OK);
    TH_EQ(t.c.batch_size, 128);
    TH_EQ_ST_REQ(parse(&t, NULL, "--batch-size=256", NULL), TR_OK);
    TH_EQ(t.c.batch_size, 256);
    TH_EQ_ST_REQ(parse(&t, NULL, "--bs=9", NULL), TR_OK); /* alias */
    TH_EQ(t.c.batch_size, 9);
    /* the value keeps its dashes; only the name is canonicalised */
    TH_EQ_ST_REQ(parse(&t, NULL, "--name=a-b_c", "--lr", "1e-3", "--seed=-5", NULL), TR_OK);
    TH_EQ_STR(t.c.name, "a-b_c");
    TH_NEAR(t.c.lr, 1e-3, 0.0, 0.0);
    TH_EQ(t.c.seed, -5);
    /* the last occurrence wins, and the first string is not leaked (checked by ASan) */
    TH_EQ_ST_REQ(parse(&t, NULL, "--name=first", "--name=second", NULL), TR_OK);
    TH_EQ_STR(t.c.name, "second");
    tr_opt_release(t.opts);
}

static void test_booleans(void)
{
    struct table t;
    table_init(&t);
    struct {
        const char *arg;
        int verbose, shuffle;
    } const ok[] = {
        {"--verbose", 1, 1},         {"--verbose=true", 1, 1}, {"--verbose=yes", 1, 1}, {"--verbose=ON", 1, 1},
        {"--verbose=1", 1, 1},       {"--verbose=false", 0, 1}, {"--verbose=off", 0, 1}, {"--no_shuffle", 0, 0},
        {"--no-shuffle", 0, 0},      {"--noshuffle", 0, 0},    {"--shuffle=0", 0, 0},   {"--shuffle=no", 0, 0},
    };
    for (size_t i = 0; i < TR_ARRAY_SIZE(ok); i++) {
        enum tr_status rc = parse(&t, NULL, ok[i].arg, NULL);
        TH_CHECKF(rc == TR_OK && t.c.verbose == ok[i].verbose && t.c.shuffle == ok[i].shuffle,
                  "'%s': rc %d verbose %d shuffle %d", ok[i].arg, (int)rc, t.c.verbose, t.c.shuffle);
    }
    TH_EQ_ST_REQ(parse(&t, NULL, "--no-shuffle", NULL), TR_OK);
    TH_EQ(tr_opt_find(t.opts, "shuffle")->set_by, 2);
    const char *const bad[] = {"--verbose=maybe", "--verbose=", "--no-batch-size", "--no_verbose=1", "--no-",
                               "--no_bogus"};
    for (size_t i = 0; i < TR_ARRAY_SIZE(bad); i++)
        TH_CHECKF(parse(&t, NULL, bad[i], NULL) == TR_ERR_ARG, "'%s' accepted", bad[i]);
    tr_opt_release(t.opts);
}

static void test_errors(void)
{
    struct table t;
    table_init(&t);
    const char *const bad[][2] = {
        {"--batch_size=0", NULL},      /* below min */
        {"--batch_size=65537", NULL},  /* above max */
        {"--batch_size=12abc", NULL},  /* trailing junk */
        {"--batch_size=", NULL},       /* empty */
        {"--batch_size=1.5", NULL},    /* not an integer */
        {"--seed=3000000000", NULL},   /* beyond int even without bounds */
        {"--seed=-3000000000", NULL},
        {"--rows=99999999999999999999", NULL}, /* beyond int64 */
        {"--lr=11", NULL},
        {"--lr=-0.5", NULL},
        {"--lr=nan", NULL},
        {"--lr=inf", NULL},
        {"--lr=1e400", NULL},
        {"--lr=abc", NULL},
        {"--bogus=1", NULL},           /* unknown */
        {"--bogus", NULL},
        {"--batch", NULL},             /* no prefix matching */
        {"positional", NULL},
        {"-x", NULL},
        {"-", NULL},
        {"--batch_size", NULL},        /* missing value */
        {"--name", NULL},
        {"--lr", "--seed"},            /* the next option is not a value */
        {"--optim=bogus", NULL},
        {"--optim=Adam", NULL},        /* choices are case-sensitive */
        {"--", "extra"},               /* nothing may follow -- without rest */
    };
    for (size_t i = 0; i < TR_ARRAY_SIZE(bad); i++) {
        enum tr_status rc = parse(&t, NULL, bad[i][0], bad[i][1], NULL);
        TH_CHECKF(rc == TR_ERR_ARG, "'%s %s': rc %d, want TR_ERR_ARG", bad[i][0], bad[i][1] ? bad[i][1] : "",
                  (int)rc);
    }
    /* with rest, the first non-option stops parsing, and "--" ends the options */
    char *argv[] = {"prog", "--seed=3", "file1", "--seed=4"};
    int want = 0, rest = -1;
    tr_opt_release(t.opts);
    TH_EQ_ST(tr_opt_parse(t.opts, 4, argv, &rest, &want), TR_OK);
    TH_EQ(rest, 2);
    TH_EQ(t.c.seed, 3);
    char *argv2[] = {"prog", "--seed=5", "--", "--seed=6"};
    tr_opt_release(t.opts);
    TH_EQ_ST(tr_opt_parse(t.opts, 4, argv2, &rest, &want), TR_OK);
    TH_EQ(rest, 3);
    TH_EQ(t.c.seed, 5);
    tr_opt_release(t.opts);
    TH_EQ_ST(tr_opt_parse(t.opts, 2, argv2, &rest, &want), TR_OK);
    TH_EQ(rest, 2);
    tr_opt_release(t.opts);
}

static void test_lists(void)
{
    struct table t;
    table_init(&t);
    /* list elements are read only when the length is right */
    TH_EQ_ST_REQ(parse(&t, NULL, "--dims=512,256,128", NULL), TR_OK);
    TH_EQ(t.c.dims.n, 3);
    if (t.c.dims.n == 3)
        TH_EQ(t.c.dims.v[2], 128);
    TH_EQ_ST_REQ(parse(&t, NULL, "--dims", "4x100", "--tables=3x2,5", NULL), TR_OK);
    TH_EQ(t.c.dims.n, 4);
    if (t.c.dims.n == 4) {
        TH_EQ(t.c.dims.v[0], 100);
        TH_EQ(t.c.dims.v[3], 100);
    }
    TH_EQ(t.c.tables.n, 4);
    if (t.c.tables.n == 4) {
        TH_EQ(t.c.tables.v[0], 2);
        TH_EQ(t.c.tables.v[2], 2);
        TH_EQ(t.c.tables.v[3], 5);
    }
    TH_EQ_ST_REQ(parse(&t, NULL, "--dims= 1 , 2", NULL), TR_OK);
    TH_EQ(t.c.dims.n, 2);
    if (t.c.dims.n == 2) {
        TH_EQ(t.c.dims.v[0], 1);
        TH_EQ(t.c.dims.v[1], 2);
    }
    TH_EQ_ST_REQ(parse(&t, NULL, "--tables=26x1000", NULL), TR_OK);
    TH_EQ(t.c.tables.n, 26);
    if (t.c.tables.n == 26)
        TH_EQ(t.c.tables.v[25], 1000);
    const char *const bad[] = {"--dims=1,,2", "--dims=1,2,", "--dims=,", "--dims=,1", "--dims=0", "--dims=1,x",
                               "--dims=0x5", "--dims=1x", "--dims=x5", "--dims=2;3", "--dims=1048577",
                               "--dims=1 2"};
    for (size_t i = 0; i < TR_ARRAY_SIZE(bad); i++)
        TH_CHECKF(parse(&t, NULL, bad[i], NULL) == TR_ERR_ARG, "'%s' accepted", bad[i]);
    tr_opt_release(t.opts);
    /* the parser on its own */
    static int64_t dummy;
    struct tr_i64_list l = {&dummy, 99};
    TH_EQ_ST(tr_opt_parse_i64_list("", &l), TR_OK);
    TH_EQ(l.n, 0);
    TH_CHECK(l.v == NULL);
    TH_EQ_ST(tr_opt_parse_i64_list(NULL, &l), TR_OK);
    TH_EQ(l.n, 0);
    TH_CHECK(l.v == NULL);
    TH_EQ_ST(tr_opt_parse_i64_list("-3,9223372036854775807", &l), TR_OK);
    TH_EQ(l.n, 2);
    if (l.n == 2) {
        TH_EQ(l.v[0], -3);
        TH_EQ(l.v[1], INT64_MAX);
    }
    tr_free(l.v);
    TH_EQ_ST(tr_opt_parse_i64_list("9223372036854775808", &l), TR_ERR_RANGE);
    TH_CHECK(l.v == NULL);
    TH_EQ_ST(tr_opt_parse_i64_list("2x9223372036854775808", &l), TR_ERR_RANGE);
    TH_CHECK(l.v == NULL);
    TH_EQ_ST(tr_opt_parse_i64_list("1000001x1", &l), TR_ERR_RANGE);
    TH_CHECK(l.v == NULL);
    /* growth past the initial capacity: 100 items */
    char buf[512] = "";
    for (int i = 0; i < 100; i++)
        snprintf(buf + strlen(buf), sizeof buf - strlen(buf), i ? ",%d" : "%d", i);
    TH_EQ_ST_REQ(tr_opt_parse_i64_list(buf, &l), TR_OK);
    TH_EQ(l.n, 100);
    if (l.n == 100) {
        TH_EQ(l.v[0], 0);
        TH_EQ(l.v[57], 57);
        TH_EQ(l.v[99], 99);
    }
    tr_free(l.v);
}

static void test_enums(void)
{
    struct table t;
    table_init(&t);
    TH_EQ_ST_REQ(parse(&t, NULL, "--optim=adam", NULL), TR_OK);
    TH_EQ(t.c.optim, 2);
    TH_EQ_ST_REQ(parse(&t, NULL, "--optim", "adagrad", NULL), TR_OK);
    TH_EQ(t.c.optim, 1);
    TH_EQ_ST_REQ(parse(&t, NULL, NULL), TR_OK);
    TH_EQ(t.c.optim, 0);
    /* without a bare choice the value is required */
    TH_EQ_ST(parse(&t, NULL, "--optim", NULL), TR_ERR_ARG);
    /* with one (--amp): a bare flag takes it when no value follows */
    tr_opt_find(t.opts, "optim")->bare = "adagrad";
    TH_EQ_ST_REQ(parse(&t, NULL, "--optim", NULL), TR_OK);
    TH_EQ(t.c.optim, 1);
    TH_EQ_ST_REQ(parse(&t, NULL, "--optim", "adam", NULL), TR_OK);
    TH_EQ(t.c.optim, 2);
    TH_EQ_ST_REQ(parse(&t, NULL, "--optim", "--seed", "3", NULL), TR_OK);
    TH_EQ(t.c.optim, 1);
    TH_EQ(t.c.seed, 3);
    TH_EQ_ST_REQ(parse(&t, NULL, "--optim=sgd", NULL), TR_OK);
    TH_EQ(t.c.optim, 0);
    /* a word that follows is the value, so a typo is named as one */
    TH_EQ_ST(parse(&t, NULL, "--optim", "adamw", NULL), TR_ERR_ARG);
    TH_EQ(t.c.optim, 0);
    tr_opt_release(t.opts);
}

/* TR_<NAME> sits between the defaults and the command line. */
static void test_environment(void)
{
    struct table t;
    table_init(&t);
    setenv("TR_BATCH_SIZE", "64", 1);
    setenv("TR_VERBOSE", "yes", 1);
    setenv("TR_DIMS", "7,8", 1);
    setenv("TR_OPTIM", "adagrad", 1);
    TH_EQ_ST(parse(&t, NULL, NULL), TR_OK);
    TH_EQ(t.c.batch_size, 64);
    TH_EQ(t.c.verbose, 1);
    TH_EQ(t.c.optim, 1);
    TH_EQ(t.c.dims.n, 2);
    if (t.c.dims.n == 2) { /* the elements exist only then */
        TH_EQ(t.c.dims.v[0], 7);
        TH_EQ(t.c.dims.v[1], 8);
    }
    TH_EQ(tr_opt_find(t.opts, "batch_size")->set_by, 1);
    TH_EQ(tr_opt_find(t.opts, "lr")->set_by, 0);
    TH_EQ_ST(parse(&t, NULL, "--batch-size=8", "--no-verbose", "--dims=1", NULL), TR_OK);
    TH_EQ(t.c.batch_size, 8);
    TH_EQ(t.c.verbose, 0);
    TH_EQ(t.c.dims.n, 1);
    TH_EQ(t.c.optim, 1);
    TH_EQ(tr_opt_find(t.opts, "batch_size")->set_by, 2);
    TH_EQ(tr_opt_find(t.opts, "optim")->set_by, 1);
    /* a bad environment value is an error even when the command line sets the option */
    setenv("TR_LR", "fast", 1);
    TH_EQ_ST(parse(&t, NULL, "--lr=0.5", NULL), TR_ERR_ARG);
    setenv("TR_LR", "20", 1); /* out of range */
    TH_EQ_ST(parse(&t, NULL, NULL), TR_ERR_ARG);
    unsetenv("TR_LR");
    unsetenv("TR_BATCH_SIZE");
    unsetenv("TR_VERBOSE");
    unsetenv("TR_DIMS");
    unsetenv("TR_OPTIM");
    TH_EQ_ST(parse(&t, NULL, NULL), TR_OK);
    TH_EQ(t.c.batch_size, 32);
    TH_EQ(t.c.verbose, 0);
    TH_EQ(t.c.dims.n, 3);
    TH_EQ(t.c.optim, 0);
    tr_opt_release(t.opts);
}

static void test_help_version(void)
{
    struct table t;
    table_init(&t);
    int want = 0;
    TH_EQ_ST(parse(&t, &want, "--help", NULL), TR_OK);
    TH_EQ(want, TR_OPT_WANT_HELP);
    TH_EQ_ST(parse(&t, &want, "-h", "--seed=3", NULL), TR_OK);
    TH_EQ(want, TR_OPT_WANT_HELP);
    TH_EQ(t.c.seed, 3);
    TH_EQ_ST(parse(&t, &want, "--version", NULL), TR_OK);
    TH_EQ(want, TR_OPT_WANT_VERSION);
    TH_EQ_ST(parse(&t, &want, "-V", NULL), TR_OK);
    TH_EQ(want, TR_OPT_WANT_VERSION);
    TH_EQ_ST(parse(&t, &want, "--version", "--parsable", NULL), TR_OK);
    TH_EQ(want, TR_OPT_WANT_VERSION | TR_OPT_WANT_PARSABLE);
    TH_EQ_ST(parse(&t, &want, NULL), TR_OK);
    TH_EQ(want, 0);
    /* the help text lists every option with its default, alias and choices */
    char *text = NULL;
    size_t len = 0;
    FILE *fp = open_memstream(&text, &len);
    TH_REQUIRE(fp != NULL);
    tr_opt_print_help(t.opts, "usage: prog [options]", fp);
    fclose(fp);
    const char *const need[] = {"usage: prog [options]", "--batch_size N", "[default: 32]", "(alias --bs)",
                                "sgd|adagrad|adam", "--dims N,N,...", "--help", "--version", "TR_<NAME>"};
    for (size_t i = 0; i < TR_ARRAY_SIZE(need); i++)
        TH_CHECKF(text && strstr(text, need[i]), "help text lacks '%s'", need[i]);
    free(text);
    tr_opt_release(t.opts);
}

/* tr_opt_format then parsing "--name=<text>" gives back the same value. */
static void test_format_round_trip(void)
{
    struct table a, b;
    table_init(&a);
    table_init(&b);
    TH_EQ_ST_REQ(parse(&a, NULL, "--bs=77", "--rows=-9000000000", "--lr=0.1", "--verbose", "--no-shuffle",
                       "--name=x y,z", "--optim=adam", "--dims=4x100", "--tables=1,2,3", "--nodef_i64=5",
                       "--nodef_dbl=3.25", NULL),
                 TR_OK);
    char *argv[NOPTS + 2] = {"prog"};
    char texts[NOPTS + 1][256];
    int argc = 1;
    for (int i = 0; a.opts[i].type != TR_OPT_END; i++) {
        char val[200];
        tr_opt_format(&a.opts[i], val, sizeof val);
        snprintf(texts[i], sizeof texts[i], "--%s=%s", a.opts[i].name, val);
        argv[argc++] = texts[i];
    }
    int want;
    TH_EQ_ST_REQ(tr_opt_parse(b.opts, argc, argv, NULL, &want), TR_OK);
    TH_EQ(b.c.batch_size, 77);
    TH_EQ(b.c.rows, -9000000000LL);
    TH_NEAR(b.c.lr, 0.1, 0.0, 0.0);
    TH_EQ(b.c.verbose, 1);
    TH_EQ(b.c.shuffle, 0);
    TH_EQ_STR(b.c.name, "x y,z");
    TH_EQ(b.c.optim, 2);
    TH_EQ(b.c.nodef_i64, 5);
    TH_NEAR(b.c.nodef_dbl, 3.25, 0.0, 0.0);
    TH_EQ(b.c.dims.n, 4);
    if (b.c.dims.n == 4) /* the elements exist only then */
        TH_EQ(b.c.dims.v[3], 100);
    TH_EQ(b.c.tables.n, 3);
    if (b.c.tables.n == 3)
        TH_EQ(b.c.tables.v[2], 3);
    char val[64];
    tr_opt_format(tr_opt_find(a.opts, "dims"), val, sizeof val);
    TH_EQ_STR(val, "100,100,100,100");
    tr_opt_format(tr_opt_find(a.opts, "shuffle"), val, sizeof val);
    TH_EQ_STR(val, "false");
    tr_opt_format(tr_opt_find(a.opts, "optim"), val, sizeof val);
    TH_EQ_STR(val, "adam");
    /* doubles: the shortest text that reads back the same, no float noise */
    tr_opt_format(tr_opt_find(a.opts, "lr"), val, sizeof val);
    TH_EQ_STR(val, "0.1");
    a.c.lr = 1e-7;
    tr_opt_format(tr_opt_find(a.opts, "lr"), val, sizeof val);
    TH_EQ_STR(val, "1e-07");
    a.c.lr = 0.1 + 0.2; /* needs all 17 digits */
    tr_opt_format(tr_opt_find(a.opts, "lr"), val, sizeof val);
    TH_EQ_STR(val, "0.30000000000000004");
    tr_opt_format(tr_opt_find(a.opts, "lr"), val, 0); /* n = 0 writes nothing */
    tr_opt_format(tr_opt_find(a.opts, "name"), val, 3); /* truncated, terminated */
    TH_EQ_STR(val, "x ");
    TH_CHECK(tr_opt_find(a.opts, "bs") == tr_opt_find(a.opts, "batch_size"));
    TH_CHECK(tr_opt_find(a.opts, "batch-size") == NULL); /* find takes canonical names only */
    TH_CHECK(tr_opt_find(a.opts, "nope") == NULL);
    tr_opt_release(b.opts);
    tr_opt_release(a.opts);
}

/* Every allocation of a parse may fail: TR_ERR_NOMEM, and after tr_opt_release
 * nothing is left allocated. */
static void test_nomem(void)
{
    struct tr_alloc_stats st0, st;
    tr_alloc_get_stats(&st0);
    int fired = 0;
    for (int k = 1; k <= 64; k++) {
        struct table t;
        table_init(&t);
        tr_alloc_fail_at(k);
        enum tr_status rc = parse(&t, NULL, "--name=abc", "--dims=40x3", "--tables=1,2", NULL);
        int f = tr_alloc_fault_fired();
        tr_alloc_fail_at(0);
        tr_opt_release(t.opts);
        tr_alloc_get_stats(&st);
        TH_CHECKF(st.live_bytes == st0.live_bytes, "failing allocation %d leaks %lld bytes", k,
                  (long long)(st.live_bytes - st0.live_bytes));
        if (!f) {
            TH_EQ_ST(rc, TR_OK);
            break;
        }
        fired++;
        TH_CHECKF(rc == TR_ERR_NOMEM, "failing allocation %d: rc %d, want TR_ERR_NOMEM", k, (int)rc);
    }
    TH_CHECK(fired >= 4);
}

/* A path option refuses text over TR_OPT_PATH_MAX bytes (and keeps no value);
 * exactly TR_OPT_PATH_MAX is accepted. */
static void test_path_limit(void)
{
    char *path = NULL;
    struct tr_opt opts[] = {
        {.name = "out", .type = TR_OPT_PATH, .dst = &path, .def = NULL},
        {.type = TR_OPT_END},
    };
    static char arg[TR_OPT_PATH_MAX + 8];
    memcpy(arg, "--out=", 6);
    memset(arg + 6, 'a', TR_OPT_PATH_MAX + 1);
    arg[6 + TR_OPT_PATH_MAX + 1] = '\0';
    char *argv[] = {"prog", arg};
    int want;
    TH_EQ_ST(tr_opt_parse(opts, 2, argv, NULL, &want), TR_ERR_ARG);
    TH_CHECK(path == NULL);
    tr_opt_release(opts);
    arg[6 + TR_OPT_PATH_MAX] = '\0';
    TH_EQ_ST(tr_opt_parse(opts, 2, argv, NULL, &want), TR_OK);
    TH_CHECK(path && strlen(path) == TR_OPT_PATH_MAX);
    tr_opt_release(opts);
}

/* A STRING with a bare value takes an optional argument: a bare --run (no value
 * follows, or an option does) gives the bare text, --run X gives X, --no_run
 * unsets it; the help shows [TEXT]. Properties stay with the declaration, and the
 * boolean words parse alike everywhere. */
static void test_optional_string(void)
{
    char *run = NULL;
    int verbose = 0;
    struct tr_opt opts[] = {
        {.name = "run", .type = TR_OPT_STRING, .dst = &run, .bare = "true", .props = TR_OPT_LAUNCHER_SETS},
        {.name = "verbose", .type = TR_OPT_BOOL, .dst = &verbose, .props = TR_OPT_RANK_LOCAL | TR_OPT_LOADER},
        {.type = TR_OPT_END},
    };
    int want;
    char *bare[] = {"prog", "--run"}, *before[] = {"prog", "--run", "--verbose"}, *given[] = {"prog", "--run", "r1"},
         *unset[] = {"prog", "--run", "r1", "--no_run"}, *none[] = {"prog"};
    TH_EQ_ST(tr_opt_parse(opts, 2, bare, NULL, &want), TR_OK);
    TH_EQ_STR(run, "true");
    tr_opt_release(opts);
    TH_EQ_ST(tr_opt_parse(opts, 3, before, NULL, &want), TR_OK);
    TH_EQ_STR(run, "true");
    TH_EQ(verbose, 1);
    tr_opt_release(opts);
    TH_EQ_ST(tr_opt_parse(opts, 3, given, NULL, &want), TR_OK);
    TH_EQ_STR(run, "r1");
    tr_opt_release(opts);
    TH_EQ_ST(tr_opt_parse(opts, 4, unset, NULL, &want), TR_OK);
    TH_CHECK(run == NULL);
    TH_EQ(tr_opt_given(opts, "run"), 2);
    tr_opt_release(opts);
    TH_EQ_ST(tr_opt_parse(opts, 1, none, NULL, &want), TR_OK);
    TH_CHECK(run == NULL);
    TH_EQ(tr_opt_given(opts, "run"), 0);
    TH_EQ(tr_opt_find(opts, "run")->props, TR_OPT_LAUNCHER_SETS);
    TH_EQ(tr_opt_find(opts, "verbose")->props, TR_OPT_RANK_LOCAL | TR_OPT_LOADER);
    tr_opt_release(opts);
    char *text = NULL;
    size_t len = 0;
    FILE *fp = open_memstream(&text, &len);
    TH_REQUIRE(fp != NULL);
    tr_opt_print_help(opts, "usage", fp);
    fclose(fp);
    TH_CHECK(strstr(text, "--run [TEXT]") != NULL);
    free(text);
    int b = -1;
    TH_EQ(tr_opt_parse_bool("On", &b), 0);
    TH_EQ(b, 1);
    TH_EQ(tr_opt_parse_bool("no", &b), 0);
    TH_EQ(b, 0);
    TH_EQ(tr_opt_parse_bool("r1", &b), -1);
    TH_EQ(b, 0);
}

/* tr_opt_given tells default, environment and command line apart; tr_opt_exclusive
 * refuses two options given together and only then. */
static void test_given_exclusive(void)
{
    struct table t;
    table_init(&t);
    TH_EQ_ST(parse(&t, NULL, "--seed=3", NULL), TR_OK);
    TH_EQ(tr_opt_given(t.opts, "seed"), 2);
    TH_EQ(tr_opt_given(t.opts, "rows"), 0);
    TH_EQ(tr_opt_given(t.opts, "no_such_option"), 0);
    TH_EQ_ST(tr_opt_exclusive(t.opts, "seed", "rows", NULL), TR_OK);
    TH_EQ_ST(parse(&t, NULL, "--seed=3", "--rows=9", NULL), TR_OK);
    TH_EQ_ST(tr_opt_exclusive(t.opts, "seed", "rows", "a hint"), TR_ERR_ARG);
    TH_EQ_ST(tr_opt_exclusive(t.opts, "rows", "lr", NULL), TR_OK); /* lr by default only */
    setenv("TR_LR", "0.5", 1);
    TH_EQ_ST(parse(&t, NULL, "--rows=9", NULL), TR_OK);
    unsetenv("TR_LR");
    TH_EQ(tr_opt_given(t.opts, "lr"), 1);
    TH_EQ_ST(tr_opt_exclusive(t.opts, "rows", "lr", NULL), TR_ERR_ARG);
    char buf[32];
    tr_opt_source(tr_opt_find(t.opts, "lr"), buf, sizeof buf);
    TH_EQ_STR(buf, "TR_LR");
    tr_opt_source(tr_opt_find(t.opts, "rows"), buf, sizeof buf);
    TH_EQ_STR(buf, "--rows");
    tr_opt_release(t.opts);
}

/* Sizes: -1 for bad text, -2 for a size that does not fit (it was -1, and the
 * message said "not a size"). */
static void test_bytes_overflow(void)
{
    int64_t v = 0;
    TH_EQ(tr_opt_parse_bytes("73G", &v), 0);
    TH_EQ(v, 73LL << 30);
    TH_EQ(tr_opt_parse_bytes("99999999999999999999G", &v), -2);
    TH_EQ(tr_opt_parse_bytes("1e999", &v), -2);
    TH_EQ(tr_opt_parse_bytes("8E", &v), -1);
    TH_EQ(tr_opt_parse_bytes("x", &v), -1);
}

static const struct th_case cases[] = {
    {"defaults", test_defaults},
    {"spellings", test_spellings},
    {"booleans", test_booleans},
    {"errors", test_errors},
    {"lists", test_lists},
    {"enums", test_enums},
    {"environment", test_environment},
    {"help_version", test_help_version},
    {"format_round_trip", test_format_round_trip},
    {"nomem", test_nomem},
    {"path_limit", test_path_limit},
    {"given_exclusive", test_given_exclusive},
    {"bytes_overflow", test_bytes_overflow},
    {"optional_string", test_optional_string},
};

int main(int argc, char **argv)
{
    return th_main(cases, TR_ARRAY_SIZE(cases), argc, argv);
}
