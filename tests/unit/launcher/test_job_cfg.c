/* test_job_cfg.c: one job config for every program: terarec-worker and
 * `terarec plan` declare their shared flags once (common/job.h), so the same
 * command line (and the same TR_* environment) parses into the same config, with
 * the same defaults, bounds and aliases; and the checks between flags name the
 * flag at fault. */
#define _POSIX_C_SOURCE 200809L
#include <stdlib.h>
#include <string.h>

#include "../../../common/check.h"
#include "../../../common/harness.h"
#include "../../../launcher/plan_cmd.h"
#include "../../../worker/worker.h"

/* Every option of the plan's table that comes from the job must exist in the
 * worker's table with the same declaration and parse to the same value. */
static void compare_tables(struct tr_opt *wt, struct tr_opt *pt, int *shared)
{
    *shared = 0;
    for (struct tr_opt *p = pt; p->type != TR_OPT_END; p++) {
        struct tr_opt *w = tr_opt_find(wt, p->name);
        if (!strcmp(p->name, "test_samples") || !strcmp(p->name, "nodes") ||
            !strcmp(p->name, "workers_per_node") || !strcmp(p->name, "memory_per_worker") ||
            !strcmp(p->name, "json") || !strcmp(p->name, "checkpoints") || !strcmp(p->name, "host_memory_per_node") ||
            !strcmp(p->name, "disk_per_node") || !strcmp(p->name, "fit")) {
            TH_CHECKF(w == NULL, "'%s' is the plan's own flag but the worker has it too", p->name);
            continue;
        }
        TH_CHECKF(w != NULL, "the plan's --%s is not a worker flag", p->name);
        if (!w)
            continue;
        (*shared)++;
        TH_EQ(w->type, p->type);
        TH_CHECKF(w->min == p->min && w->max == p->max, "--%s: bounds differ", p->name);
        TH_CHECKF((!w->def && !p->def) || (w->def && p->def && !strcmp(w->def, p->def)), "--%s: defaults differ",
                  p->name);
        TH_CHECKF((!w->alias && !p->alias) || (w->alias && p->alias && !strcmp(w->alias, p->alias)),
                  "--%s: aliases differ", p->name);
        char a[512], b[512];
        tr_opt_format(w, a, sizeof a);
        tr_opt_format(p, b, sizeof b);
        TH_CHECKF(!strcmp(a, b), "--%s parsed to '%s' by the worker and '%s' by the plan", p->name, a, b);
    }
}

static void parse_both(int argc, char **argv, int *shared)
{
    struct worker_cfg wc;
    struct plan_cmd_cfg pc;
    memset(&wc, 0, sizeof wc);
    memset(&pc, 0, sizeof pc);
    struct tr_opt wt[WORKER_MAX_OPTS], pt[PLAN_CMD_MAX_OPTS];
    worker_opts_fill(&wc, wt);
    plan_cmd_opts(&pc, pt);
    int want = 0;
    TH_EQ_ST(tr_opt_parse(wt, argc, argv, NULL, &want), TR_OK);
    TH_EQ_ST(tr_opt_parse(pt, argc, argv, NULL, &want), TR_OK);
    compare_tables(wt, pt, shared);
    /* the structs agree too, field by field for the scalars */
    const struct job_cfg *a = &wc.job, *b = &pc.job;
    TH_EQ(a->batch_size, b->batch_size);
    TH_EQ(job_test_batch(a), job_test_batch(b));
    TH_EQ(a->embedding_dim, b->embedding_dim);
    TH_EQ(a->optimizer, b->optimizer);
    TH_EQ(a->threads, b->threads);
    TH_EQ(a->backend, b->backend);
    TH_EQ(a->columnwise_split, b->columnwise_split);
    TH_EQ(a->data_parallel_bottom_mlp, b->data_parallel_bottom_mlp);
    TH_EQ(a->rows.n, b->rows.n);
    for (int i = 0; i < a->rows.n && i < b->rows.n; i++)
        TH_EQ(a->rows.v[i], b->rows.v[i]);
    tr_opt_release(wt);
    tr_opt_release(pt);
}

static void same_flags_same_config(void)
{
    char *argv[] = {"x", "--batch_size", "4096", "--cardinalities", "5,6,7", "--embedding_dim", "16",
                    "--bottom_mlp_dims", "32,16", "--top_mlp_dims", "8,1", "--optimizer", "adagrad",
                    "--experimental_columnwise_split", "--data_parallel_bottom_mlp", "--threads", "3",
                    "--valid_batch_size", "100", "--dataset_type", "split_binary", "--dataset_path", "/x",
                    "--backend", "cpu", "--synthetic_dataset_num_numerical_features", "7", "--adagrad_epsilon",
                    "1e-6", "--synthetic_ids", "uniform"};
    int shared = 0;
    parse_both((int)TR_ARRAY_SIZE(argv), argv, &shared);
    TH_CHECKF(shared >= 18, "only %d shared flags", shared);
    /* defaults alone, and the environment */
    char *none[] = {"x"};
    setenv("TR_THREADS", "5", 1);
    setenv("TR_BATCH_SIZE", "333", 1);
    parse_both(1, none, &shared);
    unsetenv("TR_THREADS");
    unsetenv("TR_BATCH_SIZE");
    /* the thread default was the one disagreement: both mean "the node's CPUs" now */
    struct worker_cfg wc;
    memset(&wc, 0, sizeof wc);
    struct tr_opt wt[WORKER_MAX_OPTS];
    worker_opts_fill(&wc, wt);
    int want = 0;
    TH_EQ_ST(tr_opt_parse(wt, 1, none, NULL, &want), TR_OK);
    TH_EQ(wc.job.threads, 0);
    TH_EQ(wc.job.batch_size, 65536);
    tr_opt_release(wt);
}

static void checks_name_the_flag(void)
{
    struct worker_cfg wc;
    memset(&wc, 0, sizeof wc);
    struct tr_opt wt[WORKER_MAX_OPTS];
    worker_opts_fill(&wc, wt);
    int want = 0;
    char *ok[] = {"x", "--embedding_dim", "16", "--bottom_mlp_dims", "64,16", "--top_mlp_dims", "8,1"};
    TH_EQ_ST(tr_opt_parse(wt, (int)TR_ARRAY_SIZE(ok), ok, NULL, &want), TR_OK);
    TH_EQ_ST(job_check(&wc.job, JOB_ALL), TR_OK);
    wc.job.dataset_type = JOB_DATA_SPLIT_BINARY; /* and no --dataset_path */
    TH_EQ_ST(job_check(&wc.job, JOB_ALL), TR_ERR_ARG);
    TH_EQ_ST(job_check(&wc.job, JOB_MODEL), TR_OK); /* a check of other groups does not look */
    wc.job.dataset_type = JOB_DATA_SYNTHETIC;
    wc.job.top.v[wc.job.top.n - 1] = 2;
    TH_EQ_ST(job_check(&wc.job, JOB_MODEL), TR_ERR_ARG);
    wc.job.top.v[wc.job.top.n - 1] = 1;
    TH_EQ_ST(job_check_shape(&wc.job, 13, 26, "test"), TR_OK);
    TH_EQ_ST(job_check_shape(&wc.job, 0, 0, "test"), TR_ERR_ARG);    /* nothing to train */
    TH_EQ_ST(job_check_shape(&wc.job, 13, 2000, "test"), TR_ERR_ARG); /* too many tables */
    wc.job.embedding_dim = 8;                                          /* bottom ends in 16 */
    TH_EQ_ST(job_check_shape(&wc.job, 13, 26, "test"), TR_ERR_ARG);
    TH_EQ_ST(job_check_shape(&wc.job, 0, 26, "test"), TR_OK); /* no bottom MLP without numerical features */
    TH_EQ_STR(job_backend_name(JOB_BACKEND_CUDA), "cuda");
    tr_opt_release(wt);
}

static const struct th_case cases[] = {
    {"same_flags_same_config", same_flags_same_config},
    {"checks_name_the_flag", checks_name_the_flag},
};

int main(int argc, char **argv)
{
    return th_main(cases, TR_ARRAY_SIZE(cases), argc, argv);
}
