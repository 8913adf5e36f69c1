/* test_options.c: the worker's option table (worker/options.h): --resume's
 * spellings, old and new, resolved by worker_opts_resolve; the properties
 * terarec train and the ranks' agreement read; the checkpoint store's flags
 * declared once (job_store_opts) for the worker and `terarec ckpt`. */
#define _POSIX_C_SOURCE 200809L
#include <stdlib.h>
#include <string.h>

#include "../../../common/check.h"
#include "../../../common/harness.h"
#include "../../../loader_svc/loader.h"
#include "../../../worker/options.h"

/* Parses argv (argv[0] added) into *c and resolves it; the table goes in o. */
static enum tr_status parse(struct worker_cfg *c, struct tr_opt *o, const char *const *args)
{
    char *argv[16] = {"terarec-worker"};
    int argc = 1, want = 0;
    for (; args[argc - 1]; argc++)
        argv[argc] = (char *)args[argc - 1];
    memset(c, 0, sizeof *c);
    worker_opts_fill(c, o);
    enum tr_status rc = tr_opt_parse(o, argc, argv, NULL, &want);
    return rc != TR_OK ? rc : worker_opts_resolve(c);
}

static void resume_spellings(void)
{
    struct worker_cfg c;
    struct tr_opt o[WORKER_MAX_OPTS];
    const char *none[] = {NULL}, *bare[] = {"--run_name", "r1", "--resume", NULL},
               *before[] = {"--resume", "--run_name", "r1", NULL}, *run[] = {"--resume", "r2", NULL},
               *same[] = {"--run_name", "r2", "--resume", "r2", NULL},
               *other[] = {"--run_name", "r1", "--resume", "r2", NULL},
               *yes[] = {"--run_name", "r1", "--resume=true", NULL},
               *no[] = {"--run_name", "r1", "--resume=false", NULL},
               *neg[] = {"--run_name", "r1", "--resume", "--no_resume", NULL},
               *alias[] = {"--name", "r3", "--resume", NULL}, *env[] = {"--run_name", "r1", NULL};
    TH_EQ_ST(parse(&c, o, none), TR_OK);
    TH_EQ(c.resume, 0);
    TH_CHECK(c.run_name == NULL);
    tr_opt_release(o);
    TH_EQ_ST(parse(&c, o, bare), TR_OK);
    TH_EQ(c.resume, 1);
    TH_EQ_STR(c.run_name, "r1");
    tr_opt_release(o);
    TH_EQ_ST(parse(&c, o, before), TR_OK); /* bare before another option */
    TH_EQ(c.resume, 1);
    TH_EQ_STR(c.run_name, "r1");
    tr_opt_release(o);
    TH_EQ_ST(parse(&c, o, run), TR_OK); /* --resume RUN: --run_name RUN --resume */
    TH_EQ(c.resume, 1);
    TH_EQ_STR(c.run_name, "r2");
    tr_opt_release(o);
    TH_EQ_ST(parse(&c, o, same), TR_OK);
    TH_EQ_STR(c.run_name, "r2");
    tr_opt_release(o);
    TH_EQ_ST(parse(&c, o, other), TR_ERR_ARG); /* two runs named */
    tr_opt_release(o);
    TH_EQ_ST(parse(&c, o, yes), TR_OK); /* the old boolean's words */
    TH_EQ(c.resume, 1);
    TH_EQ_STR(c.run_name, "r1");
    tr_opt_release(o);
    TH_EQ_ST(parse(&c, o, no), TR_OK);
    TH_EQ(c.resume, 0);
    tr_opt_release(o);
    TH_EQ_ST(parse(&c, o, neg), TR_OK);
    TH_EQ(c.resume, 0);
    tr_opt_release(o);
    TH_EQ_ST(parse(&c, o, alias), TR_OK); /* --name: --run_name's alias */
    TH_EQ(c.resume, 1);
    TH_EQ_STR(c.run_name, "r3");
    tr_opt_release(o);
    setenv("TR_RESUME", "1", 1);
    TH_EQ_ST(parse(&c, o, env), TR_OK);
    unsetenv("TR_RESUME");
    TH_EQ(c.resume, 1);
    tr_opt_release(o);
}

/* The properties terarec train and the ranks' agreement read, on the options
 * they concern; and --checkpoint_dir, one declaration for the worker and
 * `terarec ckpt` (job_store_opts). */
static void properties(void)
{
    struct worker_cfg c;
    memset(&c, 0, sizeof c);
    struct tr_opt o[WORKER_MAX_OPTS];
    worker_opts_fill(&c, o);
    const struct {
        const char *name;
        unsigned props;
    } want[] = {
        {"threads", TR_OPT_RANK_LOCAL},
        {"seed", TR_OPT_LOADER},
        {"batch_size", TR_OPT_LOADER},
        {"start_position", TR_OPT_LOADER},
        {"learning_rate", 0},
        {"loader", TR_OPT_LAUNCHER_SETS},
        {"events_addr", TR_OPT_LAUNCHER_SETS},
        {"events_token_file", TR_OPT_LAUNCHER_SETS},
        {"run_name", TR_OPT_LAUNCHER_SETS},
        {"resume", TR_OPT_LAUNCHER_SETS},
        {"log_path", TR_OPT_LAUNCHER_MAPS},
        {"checkpoint_dir", TR_OPT_LAUNCHER_MAPS},
        {"checkpoint_token_file", TR_OPT_LAUNCHER_MAPS},
    };
    for (size_t i = 0; i < TR_ARRAY_SIZE(want); i++) {
        const struct tr_opt *p = tr_opt_find(o, want[i].name);
        TH_CHECKF(p && p->props == want[i].props, "--%s: props %#x, want %#x", want[i].name, p ? p->props : 0u,
                  want[i].props);
    }
    char *dir = NULL, *tok = NULL;
    struct tr_opt s[3];
    TH_EQ(job_store_opts(&dir, NULL, s), 1);
    TH_EQ(job_store_opts(&dir, &tok, s), 2);
    const struct tr_opt *w = tr_opt_find(o, "checkpoint_dir");
    TH_REQUIRE(w != NULL);
    TH_EQ(w->type, s[0].type);
    TH_EQ_STR(w->help, s[0].help);
    TH_EQ_STR(w->alias, s[0].alias);
    TH_CHECK(s[0].dst == &dir && s[1].dst == &tok && w->dst == &c.checkpoint_dir);
}

/* TR_OPT_LOADER is what terarec train passes to terarec-loader: every worker
 * option it marks is one the loader takes (else the loader would refuse the
 * flag), and every option both take is marked (else the two would differ). */
static void loader_marks(void)
{
    struct worker_cfg c;
    memset(&c, 0, sizeof c);
    struct tr_opt w[WORKER_MAX_OPTS];
    worker_opts_fill(&c, w);
    struct loader_cfg lc;
    memset(&lc, 0, sizeof lc);
    struct tr_opt l[LOADER_MAX_OPTS];
    loader_opts_fill(&lc, l);
    int marked = 0;
    for (const struct tr_opt *o = w; o->type != TR_OPT_END; o++) {
        const struct tr_opt *in = tr_opt_find(l, o->name);
        marked += (o->props & TR_OPT_LOADER) != 0;
        TH_CHECKF(!(o->props & TR_OPT_LOADER) == !in, "--%s: %s", o->name,
                  in ? "the loader takes it, but it is not marked TR_OPT_LOADER"
                     : "marked TR_OPT_LOADER, but the loader does not take it");
        if (in)
            TH_CHECKF(in->type == o->type, "--%s: the worker's type %d, the loader's %d", o->name, (int)o->type,
                      (int)in->type);
    }
    TH_CHECK(marked > 5);
}

/* --preset dlrm_dcnv2_mlperf gives MLPerf's model, data shape, optimizer and
 * schedule; a flag given (command line or environment) wins; criteo_tb_t0 gives
 * the tables; --pooling takes one word or one per table. */
static void presets(void)
{
    struct worker_cfg c;
    struct tr_opt o[WORKER_MAX_OPTS];
    const char *mlperf[] = {"--preset", "dlrm_dcnv2_mlperf", NULL};
    TH_EQ_ST_REQ(parse(&c, o, mlperf), TR_OK);
    const struct job_cfg *j = &c.job;
    TH_CHECK(j->embedding_dim == 128 && j->interaction == JOB_INTERACT_DCNV2 && j->dcn_num_layers == 3 &&
             j->dcn_low_rank_dim == 512 && j->optimizer == JOB_OPT_ADAGRAD);
    TH_CHECK(j->bottom.n == 3 && j->bottom.v[2] == 128 && j->top.n == 5 && j->top.v[0] == 1024 && j->top.v[4] == 1);
    TH_CHECK(j->learning_rate == 0.005 && j->adagrad_eps == 1e-10 && j->adagrad_init == 0.0 && j->warmup_steps == 0);
    TH_CHECK(j->batch_size == 65536 && j->evals_per_epoch == 20 && j->auc_threshold == 0.8030 && j->epochs == 1);
    TH_CHECK(j->rows.n == 26 && j->rows.v[0] == 40000000 && j->rows.v[25] == 36);
    TH_CHECK(j->multi_hot.n == 26 && j->multi_hot.v[20] == 100 && j->multi_hot.v[0] == 3 && !j->multi_hot_variable);
    int32_t hot[26];
    job_synthetic_hot(j, hot);
    TH_CHECK(hot[0] == 3 && hot[2] == 0 && hot[20] == 100);
    TH_EQ_ST(job_check(j, JOB_ALL), TR_OK);
    tr_opt_release(o);
    /* the flags given win, the rest stays the preset's */
    setenv("TR_LEARNING_RATE", "0.004", 1);
    const char *over[] = {"--preset", "dlrm_dcnv2_mlperf", "--synthetic_dataset_cardinalities", "26x1000",
                          "--embedding_dim", "16", "--bottom_mlp_dims", "64,16", NULL};
    TH_EQ_ST_REQ(parse(&c, o, over), TR_OK);
    unsetenv("TR_LEARNING_RATE");
    TH_CHECK(j->embedding_dim == 16 && j->bottom.v[1] == 16 && j->rows.v[0] == 1000 && j->learning_rate == 0.004);
    TH_CHECK(j->dcn_low_rank_dim == 512 && j->multi_hot.v[20] == 100 && j->optimizer == JOB_OPT_ADAGRAD);
    tr_opt_release(o);
    const char *tb[] = {"--preset", "criteo_tb_t0", NULL};
    TH_EQ_ST_REQ(parse(&c, o, tb), TR_OK);
    TH_CHECK(j->rows.n == 26 && j->rows.v[19] == 292000000 && j->embedding_dim == 128 && j->optimizer == JOB_OPT_SGD);
    tr_opt_release(o);
    const char *none[] = {NULL};
    TH_EQ_ST_REQ(parse(&c, o, none), TR_OK);
    TH_CHECK(j->rows.n == 26 && j->rows.v[0] == 1000 && j->multi_hot.n == 0); /* the defaults */
    uint8_t mean[3];
    char *given = c.job.pooling; /* the table's, freed by tr_opt_release */
    c.job.pooling = (char *)"mean";
    TH_EQ_ST(job_pooling(j, 3, mean), TR_OK);
    TH_CHECK(mean[0] == 1 && mean[2] == 1);
    c.job.pooling = (char *)"sum,mean,sum";
    TH_EQ_ST(job_pooling(j, 3, mean), TR_OK);
    TH_CHECK(mean[0] == 0 && mean[1] == 1 && mean[2] == 0);
    TH_EQ_ST(job_pooling(j, 4, mean), TR_ERR_ARG); /* 3 words for 4 tables */
    c.job.pooling = (char *)"sum,max";
    TH_EQ_ST(job_pooling(j, -1, NULL), TR_ERR_ARG);
    c.job.pooling = given;
    tr_opt_release(o);
}

static const struct th_case cases[] = {
    {"presets", presets},
    {"resume_spellings", resume_spellings},
    {"properties", properties},
    {"loader_marks", loader_marks},
};

int main(int argc, char **argv)
{
    return th_main(cases, (int)TR_ARRAY_SIZE(cases), argc, argv);
}
