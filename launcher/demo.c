/* demo.c: `terarec train`'s built-in demo and the console line that names the job
 * being run. The demo is trained when no flag that defines the data or the model
 * (TR_OPT_SHAPES_JOB, declared on the option) is given; every other flag applies on
 * top of it. The line says which job, why, its size and a rough duration on this
 * machine's CPUs (a cost model, not a measurement). It starts nothing. */
#define TR_SUBSYS TR_SUB_INIT
#include <stdio.h>
#include <string.h>

#include "../common/alloc.h"
#include "../common/check.h"
#include "../common/job.h"
#include "../kernels/kern.h"
#include "../worker/plan.h"
#include "launch_internal.h"

/* the demo: a small model on synthetic data (the same as `make run`); each entry
 * is applied unless its option was set (the command line or TR_<NAME>) */
static const struct {
    const char *name, *flag;
} demo_flags[] = {
    {"batch_size", "--batch_size=2048"},
    {"synthetic_dataset_cardinalities", "--synthetic_dataset_cardinalities=26x100000"},
    {"embedding_dim", "--embedding_dim=16"},
    {"bottom_mlp_dims", "--bottom_mlp_dims=64,16"},
    {"top_mlp_dims", "--top_mlp_dims=64,1"},
    {"learning_rate", "--learning_rate=1"},
    {"warmup_steps", "--warmup_steps=20"},
    {"max_steps", "--max_steps=300"},
    {"print_freq", "--print_freq=50"},
    {"synthetic_dataset_valid_batches", "--synthetic_dataset_valid_batches=10"},
};

/* The cost model's CPU speed, in flop/s of one thread on the model's GEMMs and
 * embedding updates: the demo at --threads 1 trained 77k samples/s (~14 Gflop/s
 * by flops_per_sample) on a shared 2-core machine; threads that contend make it
 * lower, so the estimate is a floor on the time, not a promise. */
#define CPU_FLOPS_PER_THREAD 12.0e9
/* seconds a run spends outside its steps: the store, the loader and the workers
 * starting, the evaluation and the last checkpoint (the demo's on that machine) */
#define RUN_OVERHEAD_S 5.0

void launch_demo_why(const struct tr_opt *opts, int nworker, int demo, char *why, size_t n)
{
    size_t w = 0;
    why[0] = 0;
    for (int i = 0; i < nworker && w + 64 < n; i++) {
        const struct tr_opt *o = &opts[i];
        if (!o->set_by || !!(o->props & TR_OPT_SHAPES_JOB) == demo)
            continue;
        char name[96];
        tr_opt_source(o, name, sizeof name);
        w += (size_t)snprintf(why + w, n - w, "%s%s", w ? ", " : "", name);
    }
}

int launch_demo_wanted(const struct tr_opt *opts, int nworker)
{
    for (int i = 0; i < nworker; i++)
        if (opts[i].set_by && (opts[i].props & TR_OPT_SHAPES_JOB))
            return 0;
    return 1;
}

char **launch_demo_argv(const struct tr_opt *opts, int argc, char **argv, int *argc2)
{
    const int n = (int)TR_ARRAY_SIZE(demo_flags);
    char **v = tr_calloc((size_t)(argc + n + 1), sizeof *v);
    if (!v)
        return NULL;
    int k = 0;
    v[k++] = argv[0];
    for (int i = 0; i < n; i++) {
        if (tr_opt_given(opts, demo_flags[i].name))
            continue;
        /* --epochs sets the length instead (--max_steps with --epochs is refused) */
        if (!strcmp(demo_flags[i].name, "max_steps") && tr_opt_given(opts, "epochs"))
            continue;
        v[k++] = (char *)demo_flags[i].flag;
    }
    for (int i = 1; i < argc; i++) /* the user's flags last: they are what was given */
        v[k++] = argv[i];
    *argc2 = k;
    return v;
}

/* Floating-point operations of one training sample (forward and backward: three
 * times the forward's multiply-adds, two flops each), embeddings included. */
static double flops_per_sample(const struct job_cfg *j, int ntables, int nnum)
{
    double macs = 0;
    int in = nnum;
    for (int i = 0; i < j->bottom.n && nnum > 0; i++) {
        macs += (double)in * (double)j->bottom.v[i];
        in = (int)j->bottom.v[i];
    }
    const double n = ntables + (nnum > 0 ? 1 : 0), D = j->embedding_dim;
    if (j->interaction == JOB_INTERACT_DCNV2) {
        macs += j->dcn_num_layers * 2.0 * n * D * j->dcn_low_rank_dim;
        in = (int)(n * D);
    } else {
        macs += n * n * D / 2;
        in = (int)(D + n * (n - 1) / 2);
    }
    for (int i = 0; i < j->top.n; i++) {
        macs += (double)in * (double)j->top.v[i];
        in = (int)j->top.v[i];
    }
    /* each looked-up row is read, its gradient summed and the row updated */
    return 6.0 * macs + 8.0 * ntables * D;
}

void launch_data_set(struct launch_data *d, int ntables, const int64_t *rows, const int32_t *hot, int num_features,
                     int64_t nbatches, int64_t test_samples)
{
    launch_data_release(d);
    d->ntables = ntables;
    d->test_samples = test_samples;
    if (ntables > 0 && (d->rows = tr_malloc((size_t)ntables * sizeof *d->rows)))
        memcpy(d->rows, rows, (size_t)ntables * sizeof *d->rows);
    if (ntables > 0 && hot && (d->hot = tr_malloc((size_t)ntables * sizeof *d->hot)))
        memcpy(d->hot, hot, (size_t)ntables * sizeof *d->hot);
    d->num_features = num_features;
    d->nbatches = nbatches;
    d->rows_same = 1;
    for (int t = 0; t < ntables; t++) {
        d->rows_sum += rows[t];
        d->rows_same &= rows[t] == rows[0];
    }
    d->rows_first = ntables > 0 ? rows[0] : 0;
}

void launch_data_release(struct launch_data *d)
{
    tr_free(d->rows);
    tr_free(d->hot);
    memset(d, 0, sizeof *d);
}

/* "26 tables x 100000 rows" or "26 tables, 1200000 rows in all" */
static void say_tables(char *buf, size_t n, const struct launch_data *d)
{
    if (d->rows_same)
        snprintf(buf, n, "%d table%s x %lld rows", d->ntables, d->ntables == 1 ? "" : "s", (long long)d->rows_first);
    else
        snprintf(buf, n, "%d tables, %lld rows in all", d->ntables, (long long)d->rows_sum);
}

/* "10 s", "4 min", "3.2 h" */
static void say_duration(char *buf, size_t n, double s)
{
    if (s < 90)
        snprintf(buf, n, "%.0f s", s < 1 ? 1 : s);
    else if (s < 90 * 60)
        snprintf(buf, n, "%.0f min", s / 60);
    else if (s < 48 * 3600)
        snprintf(buf, n, "%.1f h", s / 3600);
    else
        snprintf(buf, n, "%.1f days", s / 86400);
}

void launch_say_job(struct launch *L, int demo, const struct launch_data *d)
{
    const struct job_cfg *j = &L->c->w.job;
    char size[256], tables[96] = "", est[128] = "";
    const char *why = L->job_why;
    const int64_t batch = j->batch_size;
    int64_t steps = j->max_steps >= 0 ? j->max_steps : d->nbatches > 0 ? j->epochs * d->nbatches : -1;
    if (steps >= 0)
        snprintf(size, sizeof size, "%lld steps of %lld", (long long)steps, (long long)batch);
    else
        snprintf(size, sizeof size, "%d epoch%s of %s in batches of %lld", j->epochs, j->epochs == 1 ? "" : "s",
                 j->dataset_path ? j->dataset_path : "the dataset", (long long)batch);
    if (d->ntables > 0)
        say_tables(tables, sizeof tables, d);
    /* the estimate: this machine's CPUs only (under SLURM the workers run elsewhere;
     * a GPU's speed is not modelled) */
    const char *be = job_backend_name(j->backend);
    const int device = kern_backend_uses_device(be) == 1 || (kern_backend_uses_device(be) < 0 &&
                                                             kern_backend_device_on_host(be));
    if (steps >= 0 && d->ntables > 0 && !L->slurm && !device) {
        /* the workers' threads, but no more than the CPUs they share */
        const int cpus = kern_cpu_count(), per = plan_threads(j, cpus, L->world);
        const double threads = TR_MIN((double)per * L->world, (double)TR_MAX(cpus, 1));
        double s = (double)steps * (double)batch * flops_per_sample(j, d->ntables, d->num_features) /
                       (CPU_FLOPS_PER_THREAD * threads) +
                   RUN_OVERHEAD_S;
        char dur[32];
        say_duration(dur, sizeof dur, s);
        snprintf(est, sizeof est, ", about %s here (an estimate)", dur);
    }
    FILE *out = L->c->json ? stderr : stdout; /* --json: stdout is JSON only */
    if (demo)
        fprintf(out, "terarec: the built-in demo (no model or data flags%s%s): %s, %s, dim %d%s\n",
                *why ? "; on top of it: " : "", why, size, tables, j->embedding_dim, est);
    else
        fprintf(out, "terarec: the job your flags define (%s): %s%s%s, dim %d%s\n", why, size, *tables ? ", " : "",
                tables, j->embedding_dim, est);
    fflush(out);
}
