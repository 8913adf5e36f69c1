/* train.c: `terarec train`, the launcher (train.h): its options, the checks of
 * them before anything starts, and the run's phases in order (run_launch). One
 * thread: the signals a job gets come through a signalfd (SIGPIPE is ignored) and
 * are read by the supervision loop (supervise.c). Only this process writes the run
 * history (db/). Its death is not handled here: each child gets SIGTERM from the
 * kernel (proc.h), and each worker ends when its report connection closes. */
#define TR_SUBSYS TR_SUB_INIT
#include "train.h"

#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../common/alloc.h"
#include "../common/check.h"
#include "../common/cpus.h"
#include "../common/log.h"
#include "../common/param.h"
#include "../db/db.h"
#include "../kernels/kern.h"
#include "../loader_svc/source.h"
#include "../worker/plan.h"
#include "../worker/worker.h"
#include "launch_internal.h"

/* ---- options -------------------------------------------------------------------------- */

static const char *const runtime_choices[] = {"auto", "docker", "podman", NULL};

#define LAUNCH_OWN_OPTS 21

#define LAUNCH_MAX_OPTS (WORKER_MAX_OPTS + LAUNCH_OWN_OPTS)

/* Fills o: the worker's flags less those it sets itself (TR_OPT_LAUNCHER_SETS),
 * then the launcher's own.
 * Returns how many of o's first entries are the worker's. */
static int launch_opts_fill(struct launch_cfg *c, struct tr_opt o[LAUNCH_MAX_OPTS])
{
    struct tr_opt w[WORKER_MAX_OPTS];
    worker_opts_fill(&c->w, w);
    int k = 0;
    for (int i = 0; w[i].type != TR_OPT_END; i++)
        if (!(w[i].props & TR_OPT_LAUNCHER_SETS))
            o[k++] = w[i];
    const int nw = k;
    const struct tr_opt own[] = {
        {"workers", TR_OPT_INT, &c->workers, "1",
         "worker processes on this machine (under SLURM the allocation decides: sbatch/salloc -N and -n)", 1,
         1 << 20, NULL, NULL, 0, NULL, 0},
        {"db", TR_OPT_PATH, &c->db, NULL,
         "the run history (SQLite); default $TR_DB, else $XDG_DATA_HOME/terarec/runs.db or "
         "~/.local/share/terarec/runs.db",
         1, 0, NULL, NULL, 0, NULL, 0},
        {"json", TR_OPT_BOOL, &c->json, "false", "progress as JSON lines on stdout (for programs)", TR_OPT_NOBOUNDS,
         NULL, NULL, 0, NULL, 0},
        {"hang_timeout", TR_OPT_DOUBLE, &c->hang_timeout, "900",
         "seconds without a finished training step (evaluations included) before the run is declared hung and "
         "its workers are killed (0: never)",
         0, 1e9, NULL, NULL, 0, NULL, 0},
        {"max_restarts", TR_OPT_INT, &c->max_restarts, "0",
         "times failed workers are started again from the last committed checkpoint", 0, 1000, NULL, NULL, 0, NULL, 0},
        {"run_name", TR_OPT_STRING, &c->name, NULL,
         "a name for the run in the history (terarec runs list)",
         TR_OPT_NOBOUNDS, NULL, "name", 0, NULL, 0},
        {"resume", TR_OPT_STRING, &c->resume, NULL,
         "RUN: a new run that continues RUN (id, unique prefix or name) from its last committed checkpoint",
         TR_OPT_NOBOUNDS, NULL, NULL, 0, NULL, 0},
        {"allow_fresh_start", TR_OPT_BOOL, &c->allow_fresh_start, "false",
         "with --resume RUN (or a requeued SLURM job): when the checkpoint to continue from is gone (the store, "
         "the run's directory, its LATEST, the manifest or a chunk), start from step 0 instead of stopping with an "
         "error naming what is missing",
         TR_OPT_NOBOUNDS, NULL, NULL, 0, NULL, 0},
        {"run_dir", TR_OPT_PATH, &c->run_dir, NULL,
         "where the run's logs and job token go (default: runs/<id> beside the history file); every node must "
         "see it",
         1, 0, NULL, NULL, 0, NULL, 0},
        {"requeue", TR_OPT_BOOL, &c->requeue, "true",
         "under SLURM, a preempted run (SIGUSR1 or SIGTERM to the launcher) requeues its job (scontrol requeue)",
         TR_OPT_NOBOUNDS, NULL, NULL, 0, NULL, 0},
        {"mpirun_args", TR_OPT_STRING, &c->mpirun_args, NULL,
         "extra mpirun arguments, space-separated (local runs of more than one worker)", TR_OPT_NOBOUNDS, NULL, NULL,
         0, NULL, 0},
        {"srun_args", TR_OPT_STRING, &c->srun_args, NULL,
         "extra srun arguments for the workers' step, space-separated (under SLURM)",
         TR_OPT_NOBOUNDS, NULL, NULL, 0, NULL, 0},
        {"container_image", TR_OPT_STRING, &c->container_image, NULL,
         "IMAGE: run the store, the loader and the workers in this container image (built from "
         "containers/Dockerfile): srun --container-image (pyxis/enroot) under SLURM, docker or podman run here. "
         "Paths in the other flags are then the container's",
         TR_OPT_NOBOUNDS, NULL, NULL, 0, NULL, 0},
        {"container_mounts", TR_OPT_STRING, &c->container_mounts, NULL,
         "SRC[:DST[:FLAGS]][,...]: host paths mounted into the container (pyxis's syntax, FLAGS like ro or "
         "ro+rprivate); the run's directory and its checkpoint store are mounted at their own paths",
         TR_OPT_NOBOUNDS, NULL, NULL, 0, NULL, 0},
        {"container_runtime", TR_OPT_ENUM, &c->container_runtime, "auto",
         "what runs the container outside SLURM (auto: docker when 'docker info' answers, else podman when "
         "'podman info' does)", TR_OPT_NOBOUNDS, runtime_choices, NULL,
         0, NULL, 0},
        {"container_bin_dir", TR_OPT_PATH, &c->container_bin_dir, "/opt/terarec/bin",
         "where terarec's programs are inside the image", 1, 0, NULL, NULL, 0, NULL, 0},
        {"elastic", TR_OPT_STRING, &c->elastic, NULL,
         "MIN[:MAX]: an elastic run: a lost worker (here) or node (under SLURM, with sbatch --no-kill) ends the "
         "attempt, and the run goes on from its last committed checkpoint on the workers left, re-planned, as long "
         "as MIN are left (workers, or Nn for nodes: 2n:4n), growing back to MAX (default: the run's size) at a "
         "restart point",
         TR_OPT_NOBOUNDS, NULL, NULL, 0, NULL, 0},
        {"elastic_grow_every", TR_OPT_INT64, &c->elastic_grow_every, "0",
         "with --elastic: a world made smaller grows back once it has trained this many steps (the workers stop "
         "and save); 0: at the next committed checkpoint (--checkpoint_every)",
         0, 1e15, NULL, NULL, 0, NULL, 0},
        {"elastic_max_failures", TR_OPT_INT, &c->elastic_max_failures, "3",
         "with --elastic: a worker slot (here) or node (under SLURM: srun --exclude) whose workers died this many "
         "times is left out for the rest of the run",
         1, 1000, NULL, NULL, 0, NULL, 0},
        {"dry_run", TR_OPT_BOOL, &c->dry_run, "false",
         "print the commands that would start the store, the loader and the workers, one per line, and exit "
         "without starting anything or writing the run history",
         TR_OPT_NOBOUNDS, NULL, NULL, 0, NULL, 0},
        {NULL, TR_OPT_END, NULL, NULL, NULL, 0, 0, NULL, NULL, 0, NULL, 0},
    };
    TR_ASSERT(TR_ARRAY_SIZE(own) <= LAUNCH_OWN_OPTS);
    memcpy(o + k, own, sizeof own);
    c->w.job.table = o;
    return nw;
}

/* ---- checks -------------------------------------------------------------------------------- */

static int slurm_counts(struct launch *L)
{
    L->nodes = launch_env_int("SLURM_JOB_NUM_NODES", launch_env_int("SLURM_NNODES", 1));
    L->world = launch_env_int("SLURM_NTASKS", 0);
    if (L->world <= 0) {
        int per = launch_env_int("SLURM_NTASKS_PER_NODE", 1);
        L->world = per * L->nodes;
    }
    return L->world > 0;
}

/* Does srun take pyxis's --container-image? (srun --help lists a SPANK plugin's options) */
static int srun_has_pyxis(void)
{
    FILE *fp = popen("srun --help 2>/dev/null", "r");
    if (!fp)
        return 0;
    char line[512];
    int found = 0;
    while (fgets(line, sizeof line, fp))
        if (strstr(line, "--container-image"))
            found = 1;
    pclose(fp);
    return found;
}

/* The engine that runs the containers here: --container_runtime, or (auto) the first
 * of docker and podman that answers, said on the console. podman's --init needs its
 * init binary (catatonit): without it the containers start without --init. */
static enum tr_status pick_runtime(struct launch *L)
{
    struct launch_cfg *c = L->c;
    if (c->container_runtime) {
        L->ctr.runtime = runtime_choices[c->container_runtime];
    } else if (!ctr_runtime_find()) {
        LOG_ERROR("--container-image: neither docker nor podman is on PATH");
        LOG_HINT("install one of them, or run inside a SLURM allocation with pyxis (srun --container-image)");
        return TR_ERR_ARG;
    } else {
        char why[1200];
        L->ctr.runtime = ctr_runtime_pick(why, sizeof why);
        if (!L->ctr.runtime && !c->dry_run) {
            LOG_ERROR("--container-image: neither docker nor podman answers (%s)", why);
            LOG_HINT("start docker's daemon (systemctl start docker), check 'podman info', or name one with "
                     "--container_runtime");
            return TR_ERR_ARG;
        }
        if (!L->ctr.runtime) {
            L->ctr.runtime = ctr_runtime_find();
            LOG_WARN("--container-image: neither docker nor podman answers (%s); --dry_run shows %s", why,
                     L->ctr.runtime);
        } else {
            fprintf(stderr, "terarec: containers run with %s: %s\n", L->ctr.runtime, why);
        }
    }
    if (!strcmp(L->ctr.runtime, "podman")) {
        char why[4200];
        if (!ctr_podman_init_found(why, sizeof why)) {
            L->ctr.no_init = 1;
            LOG_WARN("podman's --init needs catatonit, which is missing: %s; the containers start without --init "
                     "(each program is its container's process 1)", why);
            LOG_HINT("install the Debian package catatonit (make deps does), or set init_path in containers.conf");
        }
    }
    return TR_OK;
}

/* --container-image and its companions */
static enum tr_status check_container(struct launch *L)
{
    struct launch_cfg *c = L->c;
    if (!c->container_image) {
        const char *given[] = {"container_mounts", "container_runtime", "container_bin_dir"};
        const char *shown[] = {"--container-mounts", "--container_runtime", "--container_bin_dir"};
        for (size_t i = 0; i < TR_ARRAY_SIZE(given); i++)
            if (tr_opt_given(L->opts, given[i])) {
                LOG_ERROR("%s needs --container-image", shown[i]);
                return TR_ERR_ARG;
            }
        return TR_OK;
    }
    if (!*c->container_image) {
        LOG_ERROR("--container-image: empty");
        LOG_HINT("a registry image (nvcr.io#org/terarec:0.1.0 for pyxis) or a squashfs file for pyxis; an image "
                 "name for docker/podman");
        return TR_ERR_ARG;
    }
    if (c->container_bin_dir[0] != '/') {
        LOG_ERROR("--container_bin_dir %s: an absolute path inside the image", c->container_bin_dir);
        return TR_ERR_ARG;
    }
    L->ctr.image = c->container_image;
    L->ctr.bin_dir = c->container_bin_dir;
    TR_CHECK(ctr_mounts_parse(&L->ctr, c->container_mounts));
    if (L->slurm) {
        if (tr_opt_given(L->opts, "container_runtime")) {
            LOG_ERROR("--container_runtime: under SLURM the containers are pyxis's (srun --container-image)");
            return TR_ERR_ARG;
        }
        if (!srun_has_pyxis()) {
            if (!c->dry_run) {
                LOG_ERROR("--container-image: this cluster's srun has no --container-image (pyxis is not installed)");
                LOG_HINT("ask for pyxis and enroot (github.com/NVIDIA/pyxis), or run without --container-image");
                return TR_ERR_ARG;
            }
            LOG_WARN("--container-image: this cluster's srun has no --container-image (pyxis is not installed)");
        }
    } /* here: the engine is picked last (check_flags), once the flags are known to be good */
    const char *cd = c->w.checkpoint_dir;
    if (cd && *cd && cd[0] != '/' && strncmp(cd, "http://", 7) && strncmp(cd, "https://", 8) &&
        strncmp(cd, "serve:", 6)) {
        LOG_ERROR("--checkpoint_dir %s: with --container-image, an absolute path as the container sees it", cd);
        return TR_ERR_ARG;
    }
    return TR_OK;
}

static enum tr_status check_flags(struct launch *L)
{
    struct launch_cfg *c = L->c;
    TR_CHECK(check_container(L));
    /* the dataset as the workers will see it: in a container, through the mounts
     * (without a container there are none, and data is the path as given) */
    char data[PATH_MAX];
    int mapped = 0, bad = 0;
    if (c->w.job.dataset_path) {
        mapped = ctr_host_path(&L->ctr, c->w.job.dataset_path, data, sizeof data);
        /* --dataset_path alone: its files say which type (a container's path
         * that is not mounted is the workers' to look at) */
        if ((!L->ctr.image || mapped) && job_infer_dataset_type(&c->w.job, data, NULL) != TR_OK)
            return TR_ERR_ARG;
    }
    TR_CHECK(job_check(&c->w.job, JOB_ALL));
    const char *ds = c->w.job.dataset_type != JOB_DATA_SYNTHETIC ? c->w.job.dataset_path : NULL;
    if (!ds) {
        int32_t *hot = c->w.job.rows.n > 0 ? tr_malloc((size_t)c->w.job.rows.n * sizeof *hot) : NULL;
        if (hot)
            job_synthetic_hot(&c->w.job, hot);
        launch_data_set(&L->data, c->w.job.rows.n, c->w.job.rows.v, hot, c->w.job.num_numerical,
                        c->w.job.train_batches, c->w.job.test_batches * job_test_batch(&c->w.job));
        tr_free(hot);
    }
    if (ds) {
        mapped = ctr_host_path(&L->ctr, ds, data, sizeof data);
        struct stat st;
        if (L->ctr.image && !mapped)
            LOG_WARN("--dataset_path %s is under none of the --container-mounts: it must be in the image", ds);
        else
            bad = stat(data, &st) != 0 ? errno : S_ISDIR(st.st_mode) ? 0 : ENOTDIR;
    }
    if (bad) {
        if (mapped)
            LOG_ERROR("--dataset_path %s (%s on this machine, through --container-mounts): %s",
                      c->w.job.dataset_path, data, strerror(bad));
        else
            LOG_ERROR("--dataset_path %s: %s", c->w.job.dataset_path, strerror(bad));
        LOG_HINT("give the directory 'terarec data prepare --output' wrote");
        return TR_ERR_ARG;
    }
    if (ds && (!L->ctr.image || mapped) && !c->dry_run) {
        /* the loader's own checks (the FeatureSpec, each file's size), here, before
         * anything starts: a bad dataset is one error line naming the file, not a
         * loader that fails in its log while the workers wait for it (a dry run
         * only shows the commands: the directory is enough) */
        struct job_cfg job = c->w.job;
        job.dataset_path = data;
        struct source src;
        enum tr_status rc = source_open_reader(&src, &job);
        if (rc == TR_OK)
            launch_data_set(&L->data, src.ntables, src.rows, src.hot, src.num_features, src.nbatches[BATCH_TRAIN],
                            src.nsamples[BATCH_TEST]);
        source_close(&src);
        if (rc != TR_OK)
            return TR_ERR_ARG; /* logged, with a hint */
    }
    if (c->w.mode != WORKER_MODE_TRAIN) {
        LOG_ERROR("terarec train: --mode %s is for terarec-worker alone", c->w.mode == 1 ? "eval" : "inference");
        LOG_HINT("run terarec-worker --mode eval|inference --restore ... directly");
        return TR_ERR_ARG;
    }
    if (c->w.restore && c->resume) {
        LOG_ERROR("--restore and --resume cannot be used together");
        LOG_HINT("--resume RUN continues a run of the history; --restore starts a new one from any checkpoint");
        return TR_ERR_ARG;
    }
    /* locally the workers run here: a GPU backend (or --amp) needs a device here; under
     * SLURM the launcher may sit on a node the workers do not use, so they decide */
    if (!L->slurm) {
        struct kern_backend_opts bo = plan_backend_opts(&c->w.job, 1, 0, 0);
        if (kern_backend_check(job_backend_name(c->w.job.backend), &bo) != TR_OK)
            return TR_ERR_ARG;
    }
    if (L->slurm && tr_opt_given(L->opts, "workers")) {
        LOG_ERROR("--workers: inside a SLURM allocation the allocation decides (%d tasks on %d nodes)", L->world,
                  L->nodes);
        LOG_HINT("use sbatch/salloc -N NODES -n TASKS (or --ntasks-per-node), without --workers");
        return TR_ERR_ARG;
    }
    const char *cd = c->w.checkpoint_dir;
    if (cd && (!strncmp(cd, "http://", 7) || !strncmp(cd, "https://", 8)) && !c->w.checkpoint_token_file) {
        LOG_ERROR("--checkpoint_dir %s: a store's URL needs its --checkpoint_token_file", cd);
        LOG_HINT("or leave --checkpoint_dir out: terarec train then runs a store of its own");
        return TR_ERR_ARG;
    }
    if (c->w.checkpoint_dir && *c->w.checkpoint_dir && strncmp(c->w.checkpoint_dir, "http://", 7) &&
        strncmp(c->w.checkpoint_dir, "https://", 8) && c->w.checkpoint_dir[0] != '/') {
        /* workers may start elsewhere: an absolute path */
        char *abs = realpath(".", NULL);
        if (abs) {
            char *p = tr_malloc(strlen(abs) + strlen(c->w.checkpoint_dir) + 2);
            sprintf(p, "%s/%s", abs, c->w.checkpoint_dir);
            tr_free(c->w.checkpoint_dir);
            c->w.checkpoint_dir = p;
            free(abs);
        }
    }
    TR_CHECK(launch_elastic_check(L));
    /* last: asking docker and podman takes seconds, bad flags are answered at once */
    if (L->ctr.image && !L->slurm)
        TR_CHECK(pick_runtime(L));
    return TR_OK;
}

/* ---- the run's phases ------------------------------------------------------------------------ */

/* Where the run goes: the run history's path into dbpath (n bytes), and SLURM's
 * allocation or this machine (L->slurm, nodes, world). TR_ERR_ARG (logged) when
 * the history has no default place. */
static enum tr_status place_run(struct launch *L, char *dbpath, size_t n)
{
    struct launch_cfg *c = L->c;
    if (!c->db) {
        if (!db_default_path(dbpath, n))
            return TR_ERR_ARG;
    } else {
        snprintf(dbpath, n, "%s", c->db);
    }
    const char *slurm_job = getenv("SLURM_JOB_ID");
    L->slurm = slurm_job && *slurm_job && getenv("SLURM_JOB_NODELIST");
    L->slurm_job = L->slurm ? slurm_job : NULL;
    gethostname(L->host, sizeof L->host - 1);
    if (L->slurm)
        slurm_counts(L);
    else
        L->nodes = 1, L->world = c->workers;
    return TR_OK;
}

/* Before anything starts: the run history opened, which run this is (resume.c),
 * its directory, token and store (rundir.c), and for a resumed run the checkpoint
 * it continues from (*fresh: how it starts over when that is gone). *serve: this
 * launcher runs the store. Errors logged. */
static enum tr_status prepare_run(struct launch *L, const char *dbpath, int *serve, int *fresh)
{
    TR_CHECK(db_open(dbpath, 1, &L->hist.db));
    char *from_ckpt_url = NULL;
    TR_CHECK(launch_pick_run(L, &from_ckpt_url));
    enum tr_status rc = launch_rundir_make(L, dbpath, from_ckpt_url, serve);
    tr_free(from_ckpt_url);
    TR_CHECK(rc);
    return launch_resume_gate(L, fresh);
}

/* The run's end, whatever it was: the progress line closed, the history's
 * record, the store stopped, the last lines, and a requeue asked for. */
static void finish_run(struct launch *L, const char *status, const char *reason)
{
    launch_clear_line(L);
    if (L->prog.step > 0 && L->prog.tty)
        launch_show_progress(L, 1);
    launch_elastic_flush(L);
    launch_history_end(L, status, reason);
    launch_stop_ckpt(L);
    launch_say_end(L, status, reason);
    launch_requeue(L, status);
}

/* The whole run. Returns its status, for tr_status_exit_code: whatever stops it
 * before anything started is its input's (TR_ERR_ARG: a flag, the dataset, the
 * history or run directory, a resumed run whose checkpoint is gone), then as
 * launch_supervise_attempts (a listener or a history row that cannot be made:
 * their own errors). */
static enum tr_status run_launch(struct launch *L, char **argv)
{
    struct launch_cfg *c = L->c;
    char dbpath[PATH_MAX];
    /* everything the workers would refuse, before anything is created */
    if (place_run(L, dbpath, sizeof dbpath) != TR_OK || check_flags(L) != TR_OK || launch_find_exe_dir(L) != TR_OK)
        return TR_ERR_ARG;
    launch_say_job(L, L->demo, &L->data);
    if (c->dry_run)
        return launch_dry_run(L, dbpath);
    int serve = 0, fresh = FRESH_NO; /* fresh: a resumed run that starts from step 0 (launch_resume_gate) */
    if (prepare_run(L, dbpath, &serve, &fresh) != TR_OK)
        return TR_ERR_ARG;
    TR_CHECK(launch_intake_open(L));
    TR_CHECK(launch_history_open(L, argv, serve, fresh)); /* the run's row, before anything starts */
    L->prog.tty = isatty(1) && !c->json;
    launch_say_start(L);

    int resume = (L->hist.resumed_same_row || *L->hist.resumed_from) && fresh != FRESH_NEW_NAME;
    if (fresh)
        launch_record_event(L, "fresh_start", json_pack("{s:s}", "reason", L->hist.fresh_reason));
    const char *status = DB_FAILED;
    char reason[2048] = "";
    enum tr_status end = TR_ERR_IO;
    if (serve && launch_start_ckpt(L) != TR_OK)
        snprintf(reason, sizeof reason, "the checkpoint store did not start (log: %s)", L->ckpt.log);
    else
        end = launch_supervise_attempts(L, resume, &status, reason, sizeof reason);
    finish_run(L, status, reason);
    return end;
}

int train_cmd_main(int argc, char **argv)
{
    struct launch_cfg cfg;
    memset(&cfg, 0, sizeof cfg);
    struct tr_opt opts[LAUNCH_MAX_OPTS];
    struct launch L;
    memset(&L, 0, sizeof L);
    L.c = &cfg;
    L.opts = opts;
    L.watch.sfd = L.in.lfd = -1;
    L.saved_step = -1;
    L.nworker_opts = launch_opts_fill(&cfg, opts);
    int want = 0;
    enum tr_status rc = tr_opt_parse(opts, argc, argv, NULL, &want);
    char **typed = argv, **resumed = NULL; /* typed: the command line as typed, for the history */
    int nresumed = 0;
    if (rc == TR_OK && !want && cfg.resume) {
        /* --resume RUN: RUN's flags, then these (resume_cfg.c) */
        int argc2 = 0;
        rc = launch_resume_config(&cfg, opts, argc, argv, &argc2, &resumed, &nresumed);
        if (rc == TR_OK && resumed) {
            tr_opt_release(opts);
            rc = tr_opt_parse(opts, argc2, resumed, NULL, &want);
            argc = argc2;
            argv = resumed;
        }
    }
    int code;
    char **argv2 = NULL;
    L.demo = rc == TR_OK && !want && !cfg.resume && launch_demo_wanted(opts, L.nworker_opts);
    if (rc == TR_OK && cfg.resume) /* RUN's flags are all given now: say where they came from */
        snprintf(L.job_why, sizeof L.job_why, "--resume %s: its configuration", cfg.resume);
    else if (rc == TR_OK)
        launch_demo_why(opts, L.nworker_opts, L.demo, L.job_why, sizeof L.job_why);
    if (L.demo) {
        /* no flag defines the data or the model: the built-in demo (the seed's
         * defaults are a 65536-sample batch of a model for Criteo), the flags
         * given on top of it */
        int argc2 = 0;
        argv2 = launch_demo_argv(opts, argc, argv, &argc2);
        TR_ASSERT(argv2);
        tr_opt_release(opts);
        rc = tr_opt_parse(opts, argc2, argv2, NULL, &want);
        argv = argv2;
    }
    if (rc == TR_OK && !want) /* --preset: the flags not given (the workers and the loader apply it too) */
        rc = job_apply_preset(&cfg.w.job);
    if (rc != TR_OK) {
        code = tr_status_exit_code(rc);
    } else if (want & TR_OPT_WANT_HELP) {
        tr_opt_print_help(opts,
                          "usage: terarec train [options]\n\ntrains a model: starts the checkpoint store, the loader "
                          "and the workers (mpirun here, srun inside a SLURM allocation), watches them and records "
                          "the run in the run history (terarec runs list)",
                          stdout);
        code = tr_status_exit_code(TR_OK);
    } else {
        /* the workers' OpenMP threads wait passively, unless the user chose (cpus.h) */
        (void)tr_cpus_passive_wait();
        /* the signals a job gets arrive through a signalfd; children get the old mask */
        sigset_t set;
        sigemptyset(&set);
        sigaddset(&set, SIGCHLD);
        sigaddset(&set, SIGINT);
        sigaddset(&set, SIGTERM);
        sigaddset(&set, SIGUSR1);
        sigaddset(&set, SIGHUP);
        sigprocmask(SIG_BLOCK, &set, &L.orig_mask);
        /* a closed stdout is not a reason to stop (launch_out_flush); the children get SIG_DFL back */
        signal(SIGPIPE, SIG_IGN);
        L.watch.sfd = signalfd(-1, &set, SFD_NONBLOCK | SFD_CLOEXEC);
        code = tr_status_exit_code(run_launch(&L, resumed ? typed : argv));
        if (L.watch.sfd >= 0)
            close(L.watch.sfd);
        sigprocmask(SIG_SETMASK, &L.orig_mask, NULL);
    }
    if (L.in.lfd >= 0)
        close(L.in.lfd);
    struct proc *left[] = {&L.workers, &L.loader, &L.ckpt};
    const char *what[] = {"workers", "loader", "ckpt"};
    for (int i = 0; i < 3; i++) {
        const int live = left[i]->pid > 0 && !left[i]->ended;
        proc_stop(left[i], 5);
        if (live)
            launch_ctr_remove(&L, left[i], what[i]);
    }
    launch_elastic_release(&L);
    ctr_release(&L.ctr);
    proc_release(&L.workers);
    proc_release(&L.loader);
    proc_release(&L.ckpt);
    launch_log_flush(&L, 1);
    tr_free(L.ranks);
    launch_data_release(&L.data);
    tr_free(L.in.conns);
    tr_free(L.ckpt_root);
    json_decref(L.prog.final_metrics);
    if (L.hist.db) {
        launch_record_start(&L, NULL);
        db_close(L.hist.db);
    }
    tr_opt_release(opts);
    tr_free(argv2);
    launch_resume_config_free(resumed, nresumed);
    return code;
}
