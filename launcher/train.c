/* train.c: `terarec train`, the launcher (train.h). One thread: a poll() loop
 * over the ranks' report connections (common/evproto.h), a signalfd for SIGCHLD
 * and the signals a job gets (SIGINT, SIGTERM, SIGUSR1, SIGHUP; SIGPIPE is
 * ignored), and a tick that checks for hangs, a failed loader, and redraws the
 * progress line. Only this process writes the run history (db/). Its death is
 * not handled here: each child gets SIGTERM from the kernel (proc.h), and each
 * worker ends when its report connection closes. */
#define TR_SUBSYS TR_SUB_INIT
#include "train.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <limits.h>
#include <math.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "../ckpt_store/client.h"
#include "../ckpt_store/manifest.h"
#include "../common/alloc.h"
#include "../common/check.h"
#include "../common/clock.h"
#include "../common/evproto.h"
#include "../common/file.h"
#include "../common/log.h"
#include "../common/param.h"
#include "../common/version.h"
#include "version_gen.h" /* TR_GIT_HASH */
#include "../db/db.h"
#include "../kernels/kern.h"
#include "../loader_svc/loader.h"
#include "../loader_svc/source.h"
#include "../worker/plan.h"
#include "../worker/worker.h"
#include "container.h"
#include "proc.h"

/* ---- options -------------------------------------------------------------------------- */

struct launch_cfg {
    struct worker_cfg w; /* the training flags, passed on to the workers (and the loader's to it) */
    int workers;
    char *db;
    int json;
    double hang_timeout;
    int max_restarts;
    char *name;
    char *resume;
    char *run_dir;
    int requeue;
    int allow_fresh_start;
    char *mpirun_args;
    char *srun_args;
    char *container_image;
    char *container_mounts;
    int container_runtime; /* index into runtime_choices */
    char *container_bin_dir;
    int dry_run;
};

static const char *const runtime_choices[] = {"auto", "docker", "podman", NULL};

/* worker flags the launcher sets itself */
static const char *const managed[] = {"loader", "events_addr", "events_token_file", "run_name", "resume", NULL};

static int is_managed(const char *name)
{
    for (int i = 0; managed[i]; i++)
        if (!strcmp(managed[i], name))
            return 1;
    return 0;
}

#define LAUNCH_OWN_OPTS 18

/* `terarec train` without any model or data flag: a small model on synthetic data
 * (the same as `make run`) */
#define DEMO_FLAGS                                                                                                 \
    "--batch_size=2048", "--synthetic_dataset_cardinalities=26x100000", "--embedding_dim=16",                      \
        "--bottom_mlp_dims=64,16", "--top_mlp_dims=64,1", "--learning_rate=1", "--warmup_steps=20",                \
        "--max_steps=300", "--print_freq=50", "--synthetic_dataset_valid_batches=10"
#define LAUNCH_MAX_OPTS (WORKER_MAX_OPTS + LAUNCH_OWN_OPTS)

/* Fills o: the worker's flags less the managed ones, then the launcher's own.
 * Returns how many of o's first entries are the worker's. */
static int launch_opts_fill(struct launch_cfg *c, struct tr_opt o[LAUNCH_MAX_OPTS])
{
    struct tr_opt w[WORKER_MAX_OPTS];
    worker_opts_fill(&c->w, w);
    int k = 0;
    for (int i = 0; w[i].type != TR_OPT_END; i++)
        if (!is_managed(w[i].name))
            o[k++] = w[i];
    const int nw = k;
    const struct tr_opt own[] = {
        {"workers", TR_OPT_INT, &c->workers, "1",
         "worker processes on this machine (under SLURM the allocation decides: sbatch/salloc -N and -n)", 1,
         1 << 20, NULL, NULL, 0, NULL},
        {"db", TR_OPT_PATH, &c->db, NULL,
         "the run history (SQLite); default $TR_DB, else $XDG_DATA_HOME/terarec/runs.db or "
         "~/.local/share/terarec/runs.db",
         1, 0, NULL, NULL, 0, NULL},
        {"json", TR_OPT_BOOL, &c->json, "false", "progress as JSON lines on stdout (for programs)", TR_OPT_NOBOUNDS,
         NULL, NULL, 0, NULL},
        {"hang_timeout", TR_OPT_DOUBLE, &c->hang_timeout, "900",
         "seconds without a finished training step (evaluations included) before the run is declared hung and "
         "its workers are killed (0: never)",
         0, 1e9, NULL, NULL, 0, NULL},
        {"max_restarts", TR_OPT_INT, &c->max_restarts, "0",
         "times failed workers are started again from the last committed checkpoint", 0, 1000, NULL, NULL, 0, NULL},
        {"name", TR_OPT_STRING, &c->name, NULL, "a name for the run in the history (terarec runs list)",
         TR_OPT_NOBOUNDS, NULL, NULL, 0, NULL},
        {"resume", TR_OPT_STRING, &c->resume, NULL,
         "RUN: a new run that continues RUN (id, unique prefix or name) from its last committed checkpoint",
         TR_OPT_NOBOUNDS, NULL, NULL, 0, NULL},
        {"allow_fresh_start", TR_OPT_BOOL, &c->allow_fresh_start, "false",
         "with --resume RUN (or a requeued SLURM job): when the checkpoint to continue from is gone (the store, "
         "the run's directory, its LATEST, the manifest or a chunk), start from step 0 instead of stopping with an "
         "error naming what is missing",
         TR_OPT_NOBOUNDS, NULL, NULL, 0, NULL},
        {"run_dir", TR_OPT_PATH, &c->run_dir, NULL,
         "where the run's logs and job token go (default: runs/<id> beside the history file); every node must "
         "see it",
         1, 0, NULL, NULL, 0, NULL},
        {"requeue", TR_OPT_BOOL, &c->requeue, "true",
         "under SLURM, a preempted run (SIGUSR1 or SIGTERM to the launcher) requeues its job (scontrol requeue)",
         TR_OPT_NOBOUNDS, NULL, NULL, 0, NULL},
        {"mpirun_args", TR_OPT_STRING, &c->mpirun_args, NULL,
         "extra mpirun arguments, space-separated (local runs of more than one worker)", TR_OPT_NOBOUNDS, NULL, NULL,
         0, NULL},
        {"srun_args", TR_OPT_STRING, &c->srun_args, NULL,
         "extra srun arguments for the workers' step, space-separated (under SLURM)",
         TR_OPT_NOBOUNDS, NULL, NULL, 0, NULL},
        {"container_image", TR_OPT_STRING, &c->container_image, NULL,
         "IMAGE: run the store, the loader and the workers in this container image (built from "
         "containers/Dockerfile): srun --container-image (pyxis/enroot) under SLURM, docker or podman run here. "
         "Paths in the other flags are then the container's",
         TR_OPT_NOBOUNDS, NULL, NULL, 0, NULL},
        {"container_mounts", TR_OPT_STRING, &c->container_mounts, NULL,
         "SRC[:DST[:FLAGS]][,...]: host paths mounted into the container (pyxis's syntax, FLAGS like ro or "
         "ro+rprivate); the run's directory and its checkpoint store are mounted at their own paths",
         TR_OPT_NOBOUNDS, NULL, NULL, 0, NULL},
        {"container_runtime", TR_OPT_ENUM, &c->container_runtime, "auto",
         "what runs the container outside SLURM (auto: docker, else podman)", TR_OPT_NOBOUNDS, runtime_choices, NULL,
         0, NULL},
        {"container_bin_dir", TR_OPT_PATH, &c->container_bin_dir, "/opt/terarec/bin",
         "where terarec's programs are inside the image", 1, 0, NULL, NULL, 0, NULL},
        {"dry_run", TR_OPT_BOOL, &c->dry_run, "false",
         "print the commands that would start the store, the loader and the workers, one per line, and exit "
         "without starting anything or writing the run history",
         TR_OPT_NOBOUNDS, NULL, NULL, 0, NULL},
        {NULL, TR_OPT_END, NULL, NULL, NULL, 0, 0, NULL, NULL, 0, NULL},
    };
    TR_ASSERT(TR_ARRAY_SIZE(own) <= LAUNCH_OWN_OPTS);
    memcpy(o + k, own, sizeof own);
    c->w.job.table = o;
    return nw;
}

/* ---- the state of a launch ---------------------------------------------------------------- */

struct rank {
    int hello, bye, exit_code, error;
    char host[128];
    long pid;
    int64_t step;
    double last_beat, lost_at; /* lost_at: when its connection closed without a bye */
    char message[512];
};

struct conn {
    int fd;
    int rank; /* -1 until its hello */
    char *buf;
    size_t len;
};

enum stop_why { STOP_NONE = 0, STOP_PREEMPT, STOP_CANCEL };

struct launch {
    struct launch_cfg *c;
    struct tr_opt *opts;
    int nworker_opts;
    char exe_dir[PATH_MAX];
    char id[64], run_dir[PATH_MAX], token_file[PATH_MAX + 16], token[64], host[128];
    char ckpt_run[64], ckpt_where[PATH_MAX];
    const char *ckpt_token; /* the store's token file: ours, or --checkpoint_token_file for an outside one */
    char *ckpt_root; /* the store's directory (when we serve or write it) */
    int ckpt_url;    /* workers reach it over HTTP */
    struct db *db;
    int slurm, nodes, world, attempt, restarts;
    const char *slurm_job;
    int resumed_same_row; /* a requeued SLURM job continuing its run */
    char prev_status[32]; /* how the attempt before it ended */
    char fresh_reason[PATH_MAX + 512]; /* a resumed run starting from step 0: why */
    char resumed_from[64];
    sigset_t orig_mask;
    int sfd, lfd;
    char events_addr[256];
    struct proc ckpt, loader, workers;
    struct ctr ctr; /* --container-image (ctr.image NULL: none) */
    struct conn *conns;
    int nconns;
    struct rank *ranks;
    int nranks;
    /* progress */
    int64_t step, total, last_progress_step;
    double t_last_progress, samples_per_s, loss, auc;
    double t_prev_step; /* wall time of the last step report */
    int have_auc, tty, drawn;
    enum stop_why stop;
    int stop_sent, hung;
    int stop_sig; /* the signal that asked for the stop */
    double t_rank_lost; /* when a rank's connection first closed without a bye (0: none) */
    int step_killed;
    int loader_failed; /* the loader ended on an error before the workers */
    double loader_end_seen; /* when the supervisor saw the loader end on an error (check_loader) */
    char hung_reason[1024];
    char loader_error[1024]; /* its first error line */
    json_t *final_metrics;
    /* a resumed attempt's "started"/"restarted" event, recorded once rank 0 says where
     * it resumed (its beat's from_step), or before the next event (start_attempt) */
    json_t *start_ev;
    const char *start_kind;
    double start_time;
};

static double now_wall(void)
{
    return tr_clock_wall();
}

/* Flushes stdout. A reader that went away (`terarec train | head -1`: SIGPIPE is
 * ignored, the write fails with EPIPE) is not a request to stop: the run goes on
 * and is recorded; what it would print goes to /dev/null from then on (said once
 * on stderr). */
static void out_flush(void)
{
    static int closed;
    if (fflush(stdout) == 0 || closed)
        return;
    const int e = errno;
    closed = 1;
    int nul = open("/dev/null", O_WRONLY | O_CLOEXEC);
    if (nul >= 0) {
        dup2(nul, 1);
        close(nul);
    }
    clearerr(stdout);
    fprintf(stderr, "terarec: stdout is closed (%s): the run goes on without progress lines (terarec runs show)\n",
            strerror(e));
}

static void db_try(enum tr_status rc, const char *what)
{
    if (rc != TR_OK)
        LOG_WARN("run history: could not record %s (the run goes on)", what);
}

/* Records the pending start event (at the time the attempt started), with the
 * step and data position rank 0 resumed from when beat has them. */
static void record_start(struct launch *L, const json_t *beat)
{
    if (!L->start_ev)
        return;
    const json_t *from = beat ? json_object_get(beat, "from_step") : NULL;
    const json_t *pos = beat ? json_object_get(beat, "start_position") : NULL;
    if (json_is_integer(from) && json_is_string(pos)) {
        json_object_set(L->start_ev, "from_step", (json_t *)from);
        json_object_set(L->start_ev, "start_position", (json_t *)pos);
    }
    char *s = json_dumps(L->start_ev, JSON_COMPACT);
    db_try(db_event_add(L->db, L->id, L->start_time, L->start_kind, s), L->start_kind);
    free(s);
    json_decref(L->start_ev);
    L->start_ev = NULL;
}

static void record_event(struct launch *L, const char *kind, json_t *data)
{
    record_start(L, NULL); /* it came first */
    char *s = data ? json_dumps(data, JSON_COMPACT) : NULL;
    db_try(db_event_add(L->db, L->id, now_wall(), kind, s), kind);
    free(s);
    json_decref(data);
}

/* ---- setup ---------------------------------------------------------------------------------- */

static enum tr_status find_exe_dir(struct launch *L)
{
    ssize_t k = readlink("/proc/self/exe", L->exe_dir, sizeof L->exe_dir - 1);
    if (k <= 0) {
        LOG_ERROR("cannot find this program's directory (/proc/self/exe): %s", strerror(errno));
        return TR_ERR_IO;
    }
    L->exe_dir[k] = 0;
    char *s = strrchr(L->exe_dir, '/');
    if (s)
        *s = 0;
    const char *need[] = {"terarec-worker", "terarec-loader", "terarec-ckpt"};
    for (size_t i = 0; i < TR_ARRAY_SIZE(need) && !L->ctr.image; i++) { /* else they are the image's */
        char p[PATH_MAX + 32];
        snprintf(p, sizeof p, "%s/%s", L->exe_dir, need[i]);
        if (access(p, X_OK) != 0) {
            LOG_ERROR("%s: not found beside terarec", p);
            LOG_HINT("build every program (make), or install them into one directory");
            return TR_ERR_ARG;
        }
    }
    return TR_OK;
}

static void make_id(char *out, size_t n)
{
    time_t t = time(NULL);
    struct tm tm;
    localtime_r(&t, &tm);
    unsigned char r[3] = {0};
    if (getrandom(r, sizeof r, 0) != (ssize_t)sizeof r) {
        unsigned v = (unsigned)getpid() ^ (unsigned)t;
        memcpy(r, &v, sizeof r);
    }
    char ts[32];
    strftime(ts, sizeof ts, "%Y%m%d-%H%M%S", &tm);
    snprintf(out, n, "%s-%02x%02x%02x", ts, r[0], r[1], r[2]);
}

static enum tr_status write_token(struct launch *L)
{
    unsigned char r[24];
    if (getrandom(r, sizeof r, 0) != (ssize_t)sizeof r) {
        LOG_ERROR("cannot draw a job token: getrandom: %s", strerror(errno));
        return TR_ERR_IO;
    }
    char hex[2 * sizeof r + 2];
    for (size_t i = 0; i < sizeof r; i++)
        snprintf(hex + 2 * i, 3, "%02x", r[i]);
    strcat(hex, "\n");
    snprintf(L->token_file, sizeof L->token_file, "%s/token", L->run_dir);
    int fd = open(L->token_file, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0 || write(fd, hex, strlen(hex)) != (ssize_t)strlen(hex) || fsync(fd) != 0) {
        LOG_ERROR("cannot write the job token '%s': %s", L->token_file, strerror(errno));
        if (fd >= 0)
            close(fd);
        return TR_ERR_IO;
    }
    close(fd);
    snprintf(L->token, sizeof L->token, "%.*s", (int)(2 * sizeof r), hex);
    return TR_OK;
}

/* The report listener: loopback locally, every address under SLURM (the ranks of
 * other nodes connect to this node by name). */
static enum tr_status open_listener(struct launch *L)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0) {
        LOG_ERROR("cannot open the launcher's socket: %s", strerror(errno));
        return TR_ERR_IO;
    }
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    struct sockaddr_in a;
    memset(&a, 0, sizeof a);
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(L->slurm ? INADDR_ANY : INADDR_LOOPBACK);
    socklen_t al = sizeof a;
    if (bind(fd, (struct sockaddr *)&a, sizeof a) != 0 || listen(fd, 1024) != 0 ||
        getsockname(fd, (struct sockaddr *)&a, &al) != 0) {
        LOG_ERROR("cannot listen for the workers' reports: %s", strerror(errno));
        close(fd);
        return TR_ERR_IO;
    }
    L->lfd = fd;
    snprintf(L->events_addr, sizeof L->events_addr, "tcp:%s:%u", L->slurm ? L->host : "127.0.0.1",
             (unsigned)ntohs(a.sin_port));
    return TR_OK;
}

/* A TCP port free on this machine now (the per-node stores bind it on 127.0.0.1). */
static int free_port(void)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in a;
    memset(&a, 0, sizeof a);
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t al = sizeof a;
    int port = 0;
    if (fd >= 0 && bind(fd, (struct sockaddr *)&a, sizeof a) == 0 && getsockname(fd, (struct sockaddr *)&a, &al) == 0)
        port = ntohs(a.sin_port);
    if (fd >= 0)
        close(fd);
    return port;
}

static int env_int(const char *name, int def)
{
    const char *s = getenv(name);
    return s && *s ? atoi(s) : def;
}

/* ---- children ------------------------------------------------------------------------------ */

static void exe(struct launch *L, struct argv *a, const char *name)
{
    argv_addf(a, "%s/%s", L->ctr.image ? L->c->container_bin_dir : L->exe_dir, name);
}

/* a local container's name: terarec-RUN-WHAT (the store) or terarec-RUN-WHAT-ATTEMPT */
static void ctr_name(struct launch *L, const char *what, char *name, size_t n)
{
    if (!strcmp(what, "ckpt"))
        snprintf(name, n, "terarec-%s-%s", L->id, what);
    else
        snprintf(name, n, "terarec-%s-%s-%d", L->id, what, L->attempt);
}

/* locally, each program in a container of its own */
static void ctr_local(struct launch *L, struct argv *a, const char *what, int gpus)
{
    if (!L->ctr.image || L->slurm)
        return;
    char name[160];
    ctr_name(L, what, name, sizeof name);
    ctr_run_prefix(&L->ctr, a, name, L->run_dir, gpus);
}

/* Removes the local container of prog, a program started as WHAT (after its client
 * ended: a SIGKILLed `docker run` leaves its container running). */
static void ctr_remove(struct launch *L, const struct proc *prog, const char *what)
{
    if (!L->ctr.image || L->slurm || prog->pid <= 0)
        return;
    char name[160];
    ctr_name(L, what, name, sizeof name);
    char *const argv[] = {(char *)L->ctr.runtime, "rm", "--force", name, NULL};
    struct proc p;
    char log[PATH_MAX + 32];
    snprintf(log, sizeof log, "%s/container.log", L->run_dir);
    if (proc_start(&p, "container removal", argv, log, &L->orig_mask) == TR_OK) {
        const double until = tr_clock_now() + 30;
        while (!proc_poll(&p) && tr_clock_now() < until) {
            struct timespec ts = {0, 50 * 1000 * 1000};
            nanosleep(&ts, NULL);
        }
        proc_stop(&p, 1);
    }
    proc_release(&p);
}

/* a GPU for a local container: where the host has one and the backend may use it */
static int ctr_gpus(struct launch *L)
{
    return L->c->w.job.backend != JOB_BACKEND_CPU && access("/dev/nvidiactl", F_OK) == 0;
}

/* The given worker flags (not the managed ones), as --name=value; those the loader
 * also takes go to *loader as well. */
static void forward_flags(struct launch *L, struct argv *worker, struct argv *loader)
{
    struct loader_cfg lc;
    memset(&lc, 0, sizeof lc);
    struct tr_opt lo[LOADER_MAX_OPTS];
    loader_opts_fill(&lc, lo);
    char buf[8192];
    for (int i = 0; i < L->nworker_opts; i++) {
        const struct tr_opt *o = &L->opts[i];
        if (!o->set_by)
            continue;
        if (!strcmp(o->name, "log_path") || !strcmp(o->name, "checkpoint_dir") ||
            !strcmp(o->name, "checkpoint_token_file"))
            continue; /* set by the launcher from the user's value */
        tr_opt_format(o, buf, sizeof buf);
        argv_addf(worker, "--%s=%s", o->name, buf);
        if (loader)
            for (const struct tr_opt *l = lo; l->type != TR_OPT_END; l++)
                if (!strcmp(l->name, o->name))
                    argv_addf(loader, "--%s=%s", o->name, buf);
    }
}

/* Waits for n "listening on URL" lines in the store's log; the URL of the first. */
static enum tr_status wait_listening(struct launch *L, int n, char *url, size_t un)
{
    const double until = tr_clock_now() + 60;
    for (;;) {
        char *text = NULL;
        size_t len = 0;
        int seen = 0;
        if (tr_file_read_all(L->ckpt.log, &text, &len) == TR_OK) {
            const char *key = "terarec-ckpt: listening on ";
            for (char *p = strstr(text, key); p; p = strstr(p + 1, key)) {
                if (!seen++) {
                    char *e = strchr(p, '\n');
                    size_t k = e ? (size_t)(e - p) - strlen(key) : strlen(p + strlen(key));
                    snprintf(url, un, "%.*s", (int)k, p + strlen(key));
                }
            }
            tr_free(text);
        }
        if (seen >= n)
            return TR_OK;
        if (proc_poll(&L->ckpt) || tr_clock_now() > until) {
            char *tail = proc_tail(L->ckpt.log, 5);
            LOG_ERROR("the checkpoint store did not start (%d of %d listening); its log %s ends:\n%s", seen, n,
                      L->ckpt.log, tail ? tail : "");
            tr_free(tail);
            return TR_ERR_IO;
        }
        struct timespec ts = {0, 50 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
}

/* The stores' command: one per node under SLURM, on the port given. */
static void ckpt_argv(struct launch *L, struct argv *a, int port)
{
    if (L->slurm) {
        argv_add(a, "srun");
        argv_add(a, "--overlap");
        argv_add(a, "--mpi=none");
        argv_addf(a, "--nodes=%d", L->nodes);
        argv_add(a, "--ntasks-per-node=1");
        argv_add(a, "--job-name=terarec-ckpt");
        argv_add(a, "--kill-on-bad-exit=0");
        if (L->ctr.image)
            ctr_srun_flags(&L->ctr, a, L->run_dir);
    }
    ctr_local(L, a, "ckpt", 0);
    exe(L, a, "terarec-ckpt");
    argv_addf(a, "--root=%s", L->ckpt_root);
    argv_addf(a, "--token_file=%s", L->token_file);
    argv_addf(a, "--listen=127.0.0.1:%d", port);
    if (L->slurm)
        argv_add(a, "--term_grace=600"); /* SLURM's SIGTERM to a job: the last checkpoint still goes through */
}

static enum tr_status start_ckpt(struct launch *L)
{
    struct argv a = {0};
    char log[PATH_MAX + 16];
    snprintf(log, sizeof log, "%s/ckpt.log", L->run_dir);
    int port = L->slurm ? free_port() : 0;
    ckpt_argv(L, &a, port);
    enum tr_status rc = proc_start(&L->ckpt, "checkpoint store", a.v, log, &L->orig_mask);
    argv_free(&a);
    if (rc != TR_OK)
        return rc;
    char url[256] = "";
    TR_CHECK(wait_listening(L, L->slurm ? L->nodes : 1, url, sizeof url));
    if (L->slurm)
        snprintf(L->ckpt_where, sizeof L->ckpt_where, "http://127.0.0.1:%d", port);
    else
        snprintf(L->ckpt_where, sizeof L->ckpt_where, "%s", url);
    L->ckpt_url = 1;
    return TR_OK;
}

/* What a resumed run would continue from, checked before anything starts: the
 * store's directory (a store this launcher serves or writes directly), the run's
 * directory runs/RUN in it, its LATEST, the manifest LATEST names and, in a local
 * store, the file of every chunk that manifest lists. TR_OK with *step the
 * checkpoint's step; TR_ERR_NOT_FOUND with `missing` saying what is gone and
 * *level how far the check got (RESUME_NO_STORE ... RESUME_NO_CHUNK), not logged;
 * other errors (a store that cannot be reached, a manifest that does not parse)
 * logged. */
enum resume_gap { RESUME_NO_STORE = 1, RESUME_NO_RUN, RESUME_NO_LATEST, RESUME_NO_MANIFEST, RESUME_NO_CHUNK };

static enum tr_status resume_check(struct launch *L, char *missing, size_t n, enum resume_gap *level, int64_t *step)
{
    *step = -1;
    *level = 0;
    char root[PATH_MAX], token[PATH_MAX], p[PATH_MAX + 128];
    struct stat st;
    if (L->ckpt_root) {
        ctr_host_path(&L->ctr, L->ckpt_root, root, sizeof root);
        const int e = stat(root, &st) != 0 ? errno : S_ISDIR(st.st_mode) ? 0 : ENOTDIR;
        if (e) {
            snprintf(missing, n, "the checkpoint store '%s' (%s)", root, strerror(e));
            *level = RESUME_NO_STORE;
            return TR_ERR_NOT_FOUND;
        }
        snprintf(p, sizeof p, "%s/runs/%s", root, L->ckpt_run);
        if (stat(p, &st) != 0) {
            snprintf(missing, n, "the run's checkpoint directory '%s' (%s)", p, strerror(errno));
            *level = RESUME_NO_RUN;
            return TR_ERR_NOT_FOUND;
        }
    }
    if (L->ckpt_token)
        ctr_host_path(&L->ctr, L->ckpt_token, token, sizeof token);
    struct ckpt_client_opts o = {.token_file = L->ckpt_token ? token : NULL, .retries = 3, .timeout = 60};
    struct ckpt_client *cl = NULL;
    TR_CHECK(ckpt_client_open(L->ckpt_root ? root : L->ckpt_where, &o, &cl));
    char *text = NULL;
    size_t len = 0;
    struct ckpt_manifest m;
    memset(&m, 0, sizeof m);
    int64_t s = -1;
    enum tr_status rc = ckpt_get_latest(cl, L->ckpt_run, &s);
    if (rc == TR_ERR_NOT_FOUND) {
        if (L->ckpt_root)
            snprintf(missing, n, "'%s/runs/%s/LATEST' (no committed checkpoint)", root, L->ckpt_run);
        else
            snprintf(missing, n, "a committed checkpoint (LATEST) of run '%s' in the store %s", L->ckpt_run,
                     L->ckpt_where);
        *level = RESUME_NO_LATEST;
        goto exit;
    }
    if (rc == TR_OK)
        rc = ckpt_get_manifest(cl, L->ckpt_run, s, &text, &len);
    if (rc == TR_ERR_NOT_FOUND) {
        snprintf(missing, n, "the manifest of step %lld that LATEST names (%s/runs/%s/manifests/%lld.json)",
                 (long long)s, L->ckpt_root ? root : L->ckpt_where, L->ckpt_run, (long long)s);
        *level = RESUME_NO_MANIFEST;
        goto exit;
    }
    if (rc == TR_OK)
        rc = ckpt_manifest_parse(text, len, "the latest manifest", &m);
    if (rc != TR_OK)
        goto exit;
    *step = m.step;
    if (!ckpt_client_remote(cl)) /* a chunk file per hash; a remote store's are checked by restore */
        for (int t = 0; t < m.ntensors && rc == TR_OK; t++)
            for (int c = 0; c < m.tensors[t].nchunks && rc == TR_OK; c++) {
                char *where = ckpt_client_chunk_location(cl, m.tensors[t].chunks[c].hash);
                if (where && access(where, F_OK) != 0) {
                    snprintf(missing, n, "chunk %s of tensor '%s' in the manifest of step %lld (%s)",
                             m.tensors[t].chunks[c].hash, m.tensors[t].name, (long long)m.step, where);
                    *level = RESUME_NO_CHUNK;
                    rc = TR_ERR_NOT_FOUND;
                }
                tr_free(where);
            }
exit:
    ckpt_manifest_release(&m);
    tr_free(text);
    ckpt_client_close(&cl);
    return rc;
}

/* The loader's and the workers' commands of one attempt (resume: the workers
 * continue from the run's last checkpoint, and rank 0 asks the loader to seek to
 * its data position). */
static void attempt_argv(struct launch *L, struct argv *w, struct argv *l, int resume)
{
    char ring[96];
    snprintf(ring, sizeof ring, "trl-%s-%d", L->id, L->attempt);
    if (L->slurm && L->ctr.image) {
        /* in the image too, as a one-task step on this node (rank 0's, whose ring it
         * fills through /dev/shm, which enroot binds from the host) */
        const char *node = getenv("SLURMD_NODENAME");
        argv_add(l, "srun");
        argv_add(l, "--overlap");
        argv_add(l, "--mpi=none");
        argv_add(l, "--nodes=1");
        argv_add(l, "--ntasks=1");
        argv_addf(l, "--nodelist=%s", node && *node ? node : L->host);
        argv_add(l, "--job-name=terarec-loader");
        argv_add(l, "--kill-on-bad-exit=0");
        ctr_srun_flags(&L->ctr, l, L->run_dir);
    }
    ctr_local(L, l, "loader", 0);
    exe(L, l, "terarec-loader");
    argv_addf(l, "--ring=%s", ring);
    argv_add(l, "--attach_timeout=600");
    if (L->slurm) {
        argv_add(w, "srun");
        argv_add(w, "--mpi=pmix");
        argv_add(w, "--kill-on-bad-exit=1");
        argv_add(w, "--job-name=terarec-worker");
        if (L->ctr.image)
            ctr_srun_flags(&L->ctr, w, L->run_dir);
        argv_split(w, L->c->srun_args);
    } else {
        ctr_local(L, w, "workers", ctr_gpus(L));
    }
    if (!L->slurm && L->world > 1) { /* in the workers' container, if any */
        /* a bundle's own Open MPI (make bundle: bin/mpirun sets OPAL_PREFIX) before
         * the one on PATH, so a bundle runs on nodes that have none */
        char mpirun[PATH_MAX + 16];
        snprintf(mpirun, sizeof mpirun, "%s/mpirun", L->exe_dir);
        if (!L->ctr.image && access(mpirun, X_OK) == 0)
            argv_add(w, mpirun);
        else
            argv_add(w, "mpirun");
        argv_addf(w, "-np");
        argv_addf(w, "%d", L->world);
        argv_add(w, "--bind-to");
        argv_add(w, "none");
        long cpus = sysconf(_SC_NPROCESSORS_ONLN);
        if (L->world > cpus)
            argv_add(w, "--oversubscribe");
        if (geteuid() == 0)
            argv_add(w, "--allow-run-as-root");
        argv_split(w, L->c->mpirun_args);
    }
    exe(L, w, "terarec-worker");
    forward_flags(L, w, l);
    if (resume)
        argv_add(w, "--resume");
    argv_addf(w, "--loader=shm:%s", ring);
    argv_addf(w, "--events_addr=%s", L->events_addr);
    argv_addf(w, "--events_token_file=%s", L->token_file);
    argv_addf(w, "--run_name=%s", L->ckpt_run);
    argv_addf(w, "--checkpoint_dir=%s", L->ckpt_where);
    if (L->ckpt_url)
        argv_addf(w, "--checkpoint_token_file=%s", L->ckpt_token);
    const struct tr_opt *lp = tr_opt_find(L->opts, "log_path");
    if (lp && lp->set_by)
        argv_addf(w, "--log_path=%s", L->c->w.log_path ? L->c->w.log_path : "");
    else
        argv_addf(w, "--log_path=%s/dlrm_tf_log.json", L->run_dir);
}

/* Starts the loader and the workers of one attempt (0: the first). */
static enum tr_status start_attempt(struct launch *L, int resume)
{
    struct argv w = {0}, l = {0};
    attempt_argv(L, &w, &l, resume);

    char llog[PATH_MAX + 32], wlog[PATH_MAX + 32];
    snprintf(llog, sizeof llog, "%s/loader.log", L->run_dir);
    snprintf(wlog, sizeof wlog, "%s/workers.log", L->run_dir);
    enum tr_status rc = proc_start(&L->loader, "loader", l.v, llog, &L->orig_mask);
    if (rc == TR_OK) {
        char *q = proc_quote(w.v);
        FILE *fp = fopen(wlog, "a");
        if (fp) {
            fprintf(fp, "terarec: attempt %d: %s\n", L->attempt, q ? q : "");
            fclose(fp);
        }
        tr_free(q);
        rc = proc_start(&L->workers, "workers", w.v, wlog, &L->orig_mask);
    }
    argv_free(&w);
    argv_free(&l);
    if (rc != TR_OK)
        return rc;
    json_t *d = json_pack("{s:i,s:i,s:i}", "attempt", L->attempt, "workers", L->world, "nodes", L->nodes);
    if (resume) { /* from_step and start_position: what rank 0 restores (record_start) */
        record_start(L, NULL);
        L->start_ev = d;
        L->start_kind = L->attempt ? "restarted" : "started";
        L->start_time = now_wall();
    } else {
        record_event(L, L->attempt ? "restarted" : "started", d);
    }
    L->t_last_progress = tr_clock_now();
    L->last_progress_step = -1;
    L->t_rank_lost = 0;
    L->step_killed = 0;
    L->t_prev_step = 0;
    for (int r = 0; r < L->nranks; r++)
        memset(&L->ranks[r], 0, sizeof L->ranks[r]);
    return TR_OK;
}

/* ---- reports ------------------------------------------------------------------------------- */

static struct rank *rank_slot(struct launch *L, int r, int size)
{
    if (r < 0 || r >= (1 << 20))
        return NULL;
    int want = size > r + 1 ? size : r + 1;
    if (want > L->nranks) {
        struct rank *v = tr_realloc(L->ranks, (size_t)want * sizeof *v);
        if (!v)
            return NULL;
        memset(v + L->nranks, 0, (size_t)(want - L->nranks) * sizeof *v);
        L->ranks = v;
        L->nranks = want;
    }
    return &L->ranks[r];
}

static void clear_line(struct launch *L)
{
    if (L->tty && L->drawn) {
        fputs("\r\033[K", stdout);
        out_flush();
        L->drawn = 0;
    }
}

static void fmt_eta(double sec, char *buf, size_t n)
{
    if (!isfinite(sec) || sec < 0)
        snprintf(buf, n, "?");
    else if (sec < 90)
        snprintf(buf, n, "%.0fs", sec);
    else if (sec < 5400)
        snprintf(buf, n, "%.0fm%02.0fs", floor(sec / 60), fmod(sec, 60));
    else
        snprintf(buf, n, "%.0fh%02.0fm", floor(sec / 3600), fmod(floor(sec / 60), 60));
}

static void show_progress(struct launch *L, int final)
{
    if (L->c->json)
        return;
    double rate = L->samples_per_s;
    double steps_per_s = rate > 0 && L->c->w.job.batch_size > 0 ? rate / (double)L->c->w.job.batch_size : 0;
    char eta[32];
    fmt_eta(steps_per_s > 0 && L->total > 0 ? (double)(L->total - L->step) / steps_per_s : NAN, eta, sizeof eta);
    char line[256];
    int k = snprintf(line, sizeof line, "step %lld", (long long)L->step);
    if (L->total > 0)
        k += snprintf(line + k, sizeof line - (size_t)k, "/%lld", (long long)L->total);
    k += snprintf(line + k, sizeof line - (size_t)k, "  %.0f samples/s  loss %.5f", rate, L->loss);
    if (L->have_auc)
        k += snprintf(line + k, sizeof line - (size_t)k, "  auc %.5f", L->auc);
    if (L->total > 0 && !final)
        snprintf(line + k, sizeof line - (size_t)k, "  ETA %s", eta);
    if (L->tty) {
        printf("\r\033[K%s", line);
        L->drawn = 1;
        if (final) {
            putchar('\n');
            L->drawn = 0;
        }
    } else {
        printf("%s\n", line);
    }
    out_flush();
}

static void json_out(struct launch *L, const char *type, json_t *o)
{
    if (!L->c->json) {
        json_decref(o);
        return;
    }
    json_object_set_new(o, "type", json_string(type));
    json_object_set_new(o, "run", json_string(L->id));
    char *s = json_dumps(o, JSON_COMPACT);
    if (s)
        printf("%s\n", s);
    out_flush();
    free(s);
    json_decref(o);
}

static double jnum(const json_t *o, const char *k)
{
    const json_t *v = json_object_get(o, k);
    return json_is_number(v) ? json_number_value(v) : NAN;
}

static void on_event(struct launch *L, const json_t *m)
{
    const char *kind = json_string_value(json_object_get(m, "kind"));
    const json_t *d = json_object_get(m, "data");
    const int64_t step = json_integer_value(json_object_get(m, "step"));
    const double t = json_is_number(json_object_get(m, "time")) ? json_number_value(json_object_get(m, "time"))
                                                                 : now_wall();
    if (!kind)
        return;
    if (!strcmp(kind, "params")) {
        const json_t *ts = json_object_get(d, "total_steps");
        if (json_is_integer(ts))
            L->total = json_integer_value(ts);
        char *s = json_dumps(d, JSON_COMPACT | JSON_SORT_KEYS);
        db_try(db_event_add(L->db, L->id, t, "params", s), "the parameters");
        free(s);
    } else if (!strcmp(kind, "step")) {
        const char *names[] = {"loss", "learning_rate", "step_time_ms", "samples_per_s"};
        for (size_t i = 0; i < TR_ARRAY_SIZE(names); i++) {
            double v = jnum(d, names[i]);
            if (json_object_get(d, names[i]))
                db_try(db_metric_add(L->db, L->id, step, names[i], v, t), "a metric");
        }
        /* the display's rate: samples over the wall time between two reports (the
         * worker's samples_per_s is its last step's) */
        double r = jnum(d, "samples_per_s");
        if (L->t_prev_step > 0 && step > L->step && t > L->t_prev_step)
            r = (double)(step - L->step) * (double)L->c->w.job.batch_size / (t - L->t_prev_step);
        if (isfinite(r))
            L->samples_per_s = r;
        L->step = step;
        L->t_prev_step = t;
        L->loss = jnum(d, "loss");
        show_progress(L, 0);
        json_out(L, "step", json_pack("{s:I,s:O,s:O}", "step", (json_int_t)step, "loss",
                                      json_object_get(d, "loss") ? json_object_get(d, "loss") : json_null(),
                                      "samples_per_s",
                                      json_object_get(d, "samples_per_s") ? json_object_get(d, "samples_per_s")
                                                                          : json_null()));
    } else if (!strcmp(kind, "eval")) {
        double auc = jnum(d, "auc"), ll = jnum(d, "logloss");
        db_try(db_eval_add(L->db, L->id, step, auc, ll, json_integer_value(json_object_get(d, "eval_samples")), t),
               "an evaluation");
        L->auc = auc;
        L->have_auc = 1;
        if (L->c->json) {
            json_out(L, "eval", json_pack("{s:I,s:f,s:f}", "step", (json_int_t)step, "auc", isfinite(auc) ? auc : -1,
                                          "logloss", isfinite(ll) ? ll : -1));
        } else {
            clear_line(L);
            printf("validation: step %lld, auc %.6f, logloss %.6f\n", (long long)step, auc, ll);
            out_flush();
        }
    } else if (!strcmp(kind, "ckpt")) {
        const char *where = json_string_value(json_object_get(d, "checkpoint_committed"));
        const char *run = json_string_value(json_object_get(d, "run"));
        char url[PATH_MAX + 256];
        snprintf(url, sizeof url, "%s/runs/%s/manifests/%lld.json", where ? where : "?", run ? run : L->ckpt_run,
                 (long long)step);
        db_try(db_ckpt_add(L->db, L->id, step, url, json_integer_value(json_object_get(d, "bytes")),
                           jnum(d, "stall_seconds"), t),
               "a checkpoint");
        if (L->c->json) {
            json_out(L, "checkpoint", json_pack("{s:I,s:s}", "step", (json_int_t)step, "manifest", url));
        } else {
            clear_line(L);
            printf("checkpoint: step %lld committed (%s)\n", (long long)step, url);
            out_flush();
        }
    } else if (!strcmp(kind, "summary")) {
        json_decref(L->final_metrics);
        L->final_metrics = json_deep_copy(d);
    }
}

/* One line from a rank's connection. Returns 0 to drop the connection. */
static int on_line(struct launch *L, struct conn *cn, const char *line, const char *token)
{
    json_error_t err;
    json_t *m = json_loads(line, 0, &err);
    if (!json_is_object(m)) {
        json_decref(m);
        LOG_WARN("a worker's report is not JSON (%s): dropped", err.text);
        return cn->rank >= 0;
    }
    const char *type = json_string_value(json_object_get(m, "type"));
    if (cn->rank < 0) {
        const char *tok = json_string_value(json_object_get(m, "token"));
        const int r = (int)json_integer_value(json_object_get(m, "rank"));
        const int size = (int)json_integer_value(json_object_get(m, "size"));
        struct rank *rk = NULL;
        if (!type || strcmp(type, "hello") || !tok || strcmp(tok, token) || !(rk = rank_slot(L, r, size))) {
            LOG_WARN("a connection to the launcher did not identify itself with the job token: closed");
            json_decref(m);
            return 0;
        }
        cn->rank = r;
        rk->hello = 1;
        rk->last_beat = tr_clock_now();
        rk->exit_code = -1;
        snprintf(rk->host, sizeof rk->host, "%s", json_string_value(json_object_get(m, "host")) ?: "?");
        rk->pid = (long)json_integer_value(json_object_get(m, "pid"));
        db_try(db_process_add(L->db, L->id, L->attempt, r, rk->host, rk->pid, now_wall()), "a process");
        json_decref(m);
        return 1;
    }
    struct rank *rk = &L->ranks[cn->rank];
    if (!type) {
        /* not ours to read: ignored */
    } else if (!strcmp(type, "beat")) {
        rk->last_beat = tr_clock_now();
        if (cn->rank == 0 && json_object_get(m, "from_step"))
            record_start(L, m); /* rank 0 restored a checkpoint */
        int64_t s = json_integer_value(json_object_get(m, "step"));
        rk->step = s;
        if (s > L->last_progress_step) {
            L->last_progress_step = s;
            L->t_last_progress = tr_clock_now();
        }
    } else if (!strcmp(type, "event") && cn->rank == 0) {
        on_event(L, m);
    } else if (!strcmp(type, "error")) {
        rk->error = 1;
        snprintf(rk->message, sizeof rk->message, "%s", json_string_value(json_object_get(m, "message")) ?: "");
        record_event(L, "error", json_pack("{s:i,s:s,s:s}", "rank", cn->rank, "host", rk->host, "message",
                                           rk->message));
    } else if (!strcmp(type, "bye")) {
        rk->bye = 1;
        rk->exit_code = (int)json_integer_value(json_object_get(m, "exit"));
        db_try(db_process_exit(L->db, L->id, L->attempt, cn->rank, rk->exit_code, -1, now_wall()), "an exit");
    }
    json_decref(m);
    return 1;
}

static void conn_close(struct launch *L, int i)
{
    struct conn *cn = &L->conns[i];
    if (cn->rank >= 0 && cn->rank < L->nranks) {
        struct rank *rk = &L->ranks[cn->rank];
        if (!rk->bye && !rk->error && !*rk->message)
            snprintf(rk->message, sizeof rk->message, "its connection to the launcher closed without a goodbye");
        if (!rk->bye) {
            rk->last_beat = -1; /* gone */
            rk->lost_at = tr_clock_now();
            if (!L->t_rank_lost)
                L->t_rank_lost = rk->lost_at;
        }
    }
    close(cn->fd);
    tr_free(cn->buf);
    L->conns[i] = L->conns[--L->nconns];
}

static void conn_read(struct launch *L, int i, const char *token)
{
    struct conn *cn = &L->conns[i];
    for (;;) {
        if (!cn->buf && !(cn->buf = tr_malloc(EVPROTO_MAX_LINE + 1))) {
            conn_close(L, i);
            return;
        }
        ssize_t k = read(cn->fd, cn->buf + cn->len, EVPROTO_MAX_LINE - cn->len);
        if (k < 0 && (errno == EAGAIN || errno == EINTR))
            return;
        if (k <= 0) {
            conn_close(L, i);
            return;
        }
        cn->len += (size_t)k;
        size_t start = 0;
        for (size_t j = 0; j < cn->len; j++) {
            if (cn->buf[j] != '\n')
                continue;
            cn->buf[j] = 0;
            if (!on_line(L, cn, cn->buf + start, token)) {
                conn_close(L, i);
                return;
            }
            start = j + 1;
        }
        memmove(cn->buf, cn->buf + start, cn->len - start);
        cn->len -= start;
        if (cn->len == EVPROTO_MAX_LINE) {
            LOG_WARN("a worker's report line is longer than %d bytes: connection closed", EVPROTO_MAX_LINE);
            conn_close(L, i);
            return;
        }
    }
}

static void accept_all(struct launch *L)
{
    for (;;) {
        int fd = accept(L->lfd, NULL, NULL);
        if (fd < 0)
            return;
        fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
        fcntl(fd, F_SETFD, FD_CLOEXEC);
        struct conn *v = tr_realloc(L->conns, (size_t)(L->nconns + 1) * sizeof *v);
        if (!v) {
            close(fd);
            return;
        }
        L->conns = v;
        L->conns[L->nconns++] = (struct conn){.fd = fd, .rank = -1};
    }
}

/* ---- the end of an attempt -------------------------------------------------------------------- */

int train_parse_step_failure(const char *line, int *rank, char *host, size_t n, int *sig, int *code)
{
    const char *p;
    char h[256];
    int r, s, c;
    /* Open MPI 4: "mpirun noticed that process rank 1 with PID 123 on node H exited on signal 9 (Killed)." */
    if ((p = strstr(line, "noticed that process rank "))) {
        long pid;
        if (sscanf(p, "noticed that process rank %d with PID %ld on node %255s exited on signal %d", &r, &pid, h,
                   &s) == 4) {
            *rank = r, *sig = s, *code = -1;
            snprintf(host, n, "%s", h);
            return 1;
        }
    }
    /* Open MPI 4: "...process rank 1 with PID 123 on node H exited with status 3" / "exited on signal" variants */
    if ((p = strstr(line, "Primary job  terminated normally")))
        return 0;
    if ((p = strstr(line, "srun: error: "))) {
        char what[128];
        if (sscanf(p, "srun: error: %255[^:]: task %d: %127[^\n]", h, &r, what) == 3) {
            *rank = r;
            snprintf(host, n, "%s", h);
            if (sscanf(what, "Exited with exit code %d", &c) == 1) {
                *code = c, *sig = 0;
                return 1;
            }
            for (s = 1; s < NSIG; s++) {
                const char *nm = strsignal(s);
                if (nm && !strncmp(what, nm, strlen(nm))) {
                    *sig = s, *code = -1;
                    return 1;
                }
            }
            *sig = 0, *code = -1;
            return 1;
        }
    }
    return 0;
}

/* What the workers' log says about the first rank that failed. */
static int scan_step_log(struct launch *L, int *rank, char *host, size_t n, int *sig, int *code)
{
    FILE *fp = fopen(L->workers.log, "r");
    if (!fp)
        return 0;
    char line[4096];
    int found = 0;
    while (!found && fgets(line, sizeof line, fp))
        found = train_parse_step_failure(line, rank, host, n, sig, code);
    fclose(fp);
    return found;
}

/* The reason a failed attempt failed, one line, into buf. */
static void failure_reason(struct launch *L, char *buf, size_t n)
{
    char st[96];
    proc_describe(L->workers.status, st, sizeof st);
    int rank = -1, sig = 0, code = -1;
    char host[256] = "";
    int parsed = scan_step_log(L, &rank, host, sizeof host, &sig, &code);
    /* the reports: a rank that said what went wrong, else one that vanished */
    int rep = -1;
    for (int r = 0; r < L->nranks && rep < 0; r++)
        if (L->ranks[r].error)
            rep = r;
    const int said = rep;
    for (int r = 0; r < L->nranks && said < 0; r++) /* the first to vanish */
        if (L->ranks[r].hello && !L->ranks[r].bye && L->ranks[r].lost_at > 0 &&
            (rep < 0 || L->ranks[r].lost_at < L->ranks[rep].lost_at))
            rep = r;
    if (parsed) {
        if (!*host && rank >= 0 && rank < L->nranks)
            snprintf(host, sizeof host, "%s", L->ranks[rank].host);
        if (sig > 0)
            snprintf(buf, n, "rank %d on %s was killed by signal %d (%s)", rank, host, sig, strsignal(sig));
        else if (code >= 0)
            snprintf(buf, n, "rank %d on %s exited with status %d%s%s", rank, host, code,
                     rank < L->nranks && rank >= 0 && *L->ranks[rank].message ? ": " : "",
                     rank < L->nranks && rank >= 0 ? L->ranks[rank].message : "");
        else
            snprintf(buf, n, "rank %d on %s failed (%s)", rank, host, st);
    } else if (rep >= 0) {
        struct rank *rk = &L->ranks[rep];
        if (L->world == 1 && !L->slurm)
            snprintf(buf, n, "rank %d on %s: %s%s%s", rep, rk->host, st, *rk->message ? ": " : "", rk->message);
        else
            snprintf(buf, n, "rank %d on %s: %s (workers: %s)", rep, rk->host, rk->message, st);
    } else {
        snprintf(buf, n, "the workers ended with %s before reporting", st);
    }
}

/* ---- the loop ------------------------------------------------------------------------------- */

static void request_stop(struct launch *L, enum stop_why why, int sig)
{
    if (L->stop && (L->stop_sent || why == L->stop)) {
        if (sig == SIGINT && L->stop == STOP_CANCEL) { /* a second Ctrl-C: at once */
            clear_line(L);
            fprintf(stderr, "terarec: second interrupt: stopping the workers now\n");
            proc_signal(&L->workers, SIGKILL);
            proc_signal(&L->loader, SIGKILL);
        }
        return;
    }
    L->stop = why;
    L->stop_sig = sig;
    clear_line(L);
    fprintf(stderr,
            "terarec: %s (%s): the workers stop after the next batch and save a checkpoint%s\n",
            why == STOP_PREEMPT ? "preemption" : "stop requested", strsignal(sig),
            sig == SIGINT ? " (Ctrl-C again: at once)" : "");
    record_event(L, why == STOP_PREEMPT ? "preempt_signal" : "cancel_signal",
                 json_pack("{s:s}", "signal", strsignal(sig)));
    /* the loader's first SIGTERM drains: every rank stops after the same step */
    proc_signal(&L->loader, SIGTERM);
    L->stop_sent = 1;
}

/* Sends signal `sig` (a name: KILL, INT) to this job's step named `name` (srun
 * --job-name), through scancel: it reaches tasks on every node, a stopped one too. */
static void slurm_step_signal(struct launch *L, const char *name, const char *sig, int background)
{
    char cmd[512];
    snprintf(cmd, sizeof cmd,
             "(for s in $(squeue -h -s -j %s -o '%%i %%j' | awk '$2==\"%s\"{print $1}'); do "
             "scancel --signal=%s \"$s\"; done) >/dev/null 2>&1 </dev/null%s",
             L->slurm_job, name, sig, background ? " &" : "");
    if (system(cmd) != 0)
        LOG_WARN("could not signal the SLURM step %s of job %s", name, L->slurm_job);
}

/* Ends the workers' step: SIGKILL to the ranks on this node (a stopped process
 * ignores SIGTERM, and the workers leave SIGTERM to us) and, under SLURM, to the
 * step on every node (kill_ranks); then to mpirun or srun (kill_step). */
static void kill_ranks(struct launch *L)
{
    for (int r = 0; r < L->nranks; r++)
        if (L->ranks[r].hello && L->ranks[r].pid > 0 && !strcmp(L->ranks[r].host, L->host))
            kill((pid_t)L->ranks[r].pid, SIGKILL);
    /* scancel (a round trip to slurmctld) reaches the tasks on every node, in the
     * background */
    if (L->slurm)
        slurm_step_signal(L, "terarec-worker", "KILL", 1);
}

static void kill_step(struct launch *L)
{
    kill_ranks(L);
    proc_signal(&L->workers, SIGCONT);
    proc_signal(&L->workers, SIGKILL);
}

static void check_hang(struct launch *L)
{
    const double tmo = L->c->hang_timeout;
    if (tmo <= 0 || L->hung || L->workers.ended)
        return;
    const double now = tr_clock_now();
    if (now - L->t_last_progress < tmo)
        return;
    L->hung = 1;
    char silent[512] = "";
    size_t k = 0;
    for (int r = 0; r < L->world; r++) {
        const struct rank *rk = r < L->nranks ? &L->ranks[r] : NULL;
        if (rk && rk->hello && rk->last_beat > 0 && now - rk->last_beat < 5 * EVPROTO_BEAT_SEC)
            continue;
        if (k < sizeof silent - 64)
            k += (size_t)snprintf(silent + k, sizeof silent - k, "%s%d (%s)", k ? ", " : "", r,
                                  rk && rk->hello ? rk->host : "never reported");
    }
    snprintf(L->hung_reason, sizeof L->hung_reason, "no training step for %.0f s after step %lld; silent ranks: %s",
             tmo, (long long)(L->last_progress_step > 0 ? L->last_progress_step : 0), k ? silent : "none");
    clear_line(L);
    LOG_ERROR("run %s hung: %s: killing its workers", L->id, L->hung_reason);
    kill_step(L);
}

enum { LOADER_BLAME_S = 1 }; /* seconds a rank's death may take to reach us after its loader's end */

/* The loader ended before the workers, on an error (its dataset, its ring): the
 * workers would wait for batches until --loader_timeout, or end on the loader's
 * error. Its error and hint lines go to the console, the step is ended now, and
 * the run fails as the loader's (not restarted: the same input fails again).
 * A loader also ends when the worker it feeds dies ("worker ... is gone"): a
 * rank lost before the loader ended makes it the workers' failure (which
 * --max_restarts restarts). final: the workers have ended (supervise is over). */
static void check_loader(struct launch *L, int final)
{
    if (L->loader_failed || L->loader.pid <= 0)
        return;
    const int workers_ok = WIFEXITED(L->workers.status) && WEXITSTATUS(L->workers.status) == 0;
    /* workers that failed on their loader's error may end before it has: a second */
    for (int i = 0; final && !workers_ok && !L->stop && i < 20 && !proc_poll(&L->loader); i++)
        nanosleep(&(struct timespec){0, 50 * 1000 * 1000}, NULL);
    if (!proc_poll(&L->loader))
        return;
    const int st = L->loader.status;
    if (L->stop || (WIFEXITED(st) && WEXITSTATUS(st) == 0))
        return; /* it drained for a stop, or served every batch it had */
    if (final && workers_ok)
        return; /* the workers finished: whatever the loader did after */
    if (!L->loader_end_seen)
        L->loader_end_seen = tr_clock_now();
    if (L->t_rank_lost && L->t_rank_lost <= L->loader_end_seen)
        return;
    if (!final && tr_clock_now() - L->loader_end_seen < LOADER_BLAME_S)
        return;
    L->loader_failed = 1;
    char how[96];
    proc_describe(st, how, sizeof how);
    char *tail = proc_tail(L->loader.log, 40);
    clear_line(L);
    fprintf(stderr, "terarec: the loader failed (%s); its log %s says:\n", how, L->loader.log);
    int shown = 0;
    for (char *save = NULL, *ln = strtok_r(tail ? tail : (char *)"", "\n", &save); ln;
         ln = strtok_r(NULL, "\n", &save)) {
        const char *e = strstr(ln, " error: "), *h = strstr(ln, " hint: ");
        if (!e && !h)
            continue;
        fprintf(stderr, "  %s\n", (e ? e : h) + 1);
        shown++;
        if (e && !*L->loader_error)
            snprintf(L->loader_error, sizeof L->loader_error, "%s", e + 8);
    }
    if (!shown) /* no error line: its last lines */
        fprintf(stderr, "%s\n", tail ? tail : "");
    tr_free(tail);
    record_event(L, "loader_failed", json_pack("{s:s,s:s}", "status", how, "error", L->loader_error));
    if (!final)
        kill_step(L);
}

/* Reads what the connections polled in pf[0 .. nc) have for us (by fd: a
 * connection that closes leaves the array reordered). */
static void read_ready(struct launch *L, const struct pollfd *pf, int nc, const char *token)
{
    for (int i = nc - 1; i >= 0; i--) {
        if (!(pf[i].revents & (POLLIN | POLLHUP | POLLERR)))
            continue;
        for (int j = 0; j < L->nconns; j++)
            if (L->conns[j].fd == pf[i].fd) {
                conn_read(L, j, token);
                break;
            }
    }
}

/* The signals that came (SIGCHLD only wakes the loop). SIGHUP (the terminal
 * closed) is a cancel, like Ctrl-C: the run stops after a checkpoint and is
 * recorded. */
static void read_signals(struct launch *L)
{
    struct signalfd_siginfo si;
    while (read(L->sfd, &si, sizeof si) == (ssize_t)sizeof si) {
        if (si.ssi_signo == SIGUSR1)
            request_stop(L, STOP_PREEMPT, SIGUSR1);
        else if (si.ssi_signo == SIGTERM)
            request_stop(L, L->slurm ? STOP_PREEMPT : STOP_CANCEL, SIGTERM);
        else if (si.ssi_signo == SIGINT || si.ssi_signo == SIGHUP)
            request_stop(L, STOP_CANCEL, (int)si.ssi_signo);
    }
}

/* Runs the loop until the current attempt's workers end. */
static void supervise(struct launch *L, const char *token)
{
    double next_draw = 0, next_beat = 0;
    while (!L->workers.ended) {
        if (tr_clock_now() > next_beat) { /* alive, for the history (a vanished launcher's run is lost) */
            next_beat = tr_clock_now() + 10;
            db_try(db_run_heartbeat(L->db, L->id, now_wall()), "the heartbeat");
        }
        struct pollfd *pf = tr_malloc((size_t)(L->nconns + 2) * sizeof *pf);
        TR_ASSERT(pf);
        pf[0] = (struct pollfd){.fd = L->sfd, .events = POLLIN};
        pf[1] = (struct pollfd){.fd = L->lfd, .events = POLLIN};
        const int nc = L->nconns;
        for (int i = 0; i < nc; i++)
            pf[2 + i] = (struct pollfd){.fd = L->conns[i].fd, .events = POLLIN};
        int k = poll(pf, (nfds_t)(nc + 2), 250);
        if (k > 0 && (pf[0].revents & POLLIN))
            read_signals(L);
        if (k > 0 && (pf[1].revents & POLLIN))
            accept_all(L);
        if (k > 0)
            read_ready(L, pf + 2, nc, token);
        tr_free(pf);
        proc_poll(&L->workers);
        check_loader(L, 0);
        if (L->stop && !L->stop_sent)
            request_stop(L, L->stop, SIGTERM);
        check_hang(L);
        /* a rank died: the step cannot go on (the others would wait in their next
         * collective, and they leave SIGTERM to us): end it now */
        if (L->t_rank_lost && !L->workers.ended) {
            const double since = tr_clock_now() - L->t_rank_lost;
            if (L->step_killed == 0 && since > 2.0) { /* the ranks; mpirun or srun then says who died first */
                L->step_killed = 1;
                kill_ranks(L);
            } else if (L->step_killed == 1 && since > 6.0) {
                L->step_killed = 2;
                kill_step(L);
            }
        }
        if (L->tty && !L->c->json && tr_clock_now() > next_draw && L->step > 0) {
            next_draw = tr_clock_now() + 1;
            show_progress(L, 0);
        }
    }
    /* SLURM's SIGTERM (scontrol requeue, a preemption, the time limit) reaches
     * every process of the job: srun then kills its tasks at once ("forcing job
     * termination"), and ours may come just after the step ended: a failed step is
     * not taken for a failure before a second has passed without one */
    if (L->slurm && !L->stop && !(WIFEXITED(L->workers.status) && WEXITSTATUS(L->workers.status) == 0)) {
        struct pollfd p = {.fd = L->sfd, .events = POLLIN};
        if (poll(&p, 1, 1000) > 0)
            read_signals(L);
    }
    /* the reports still in flight (a bye written just before the exit) */
    const double until = tr_clock_now() + 1.0;
    while (L->nconns && tr_clock_now() < until) {
        struct pollfd *pf = tr_malloc((size_t)L->nconns * sizeof *pf);
        TR_ASSERT(pf);
        for (int i = 0; i < L->nconns; i++)
            pf[i] = (struct pollfd){.fd = L->conns[i].fd, .events = POLLIN};
        const int nc = L->nconns;
        int k = poll(pf, (nfds_t)nc, 100);
        if (k > 0)
            read_ready(L, pf, nc, token);
        tr_free(pf);
        if (k <= 0)
            break;
    }
    while (L->nconns)
        conn_close(L, L->nconns - 1);
}

/* ---- the command ---------------------------------------------------------------------------- */

static char *config_json(struct launch *L)
{
    json_t *o = json_object();
    char buf[8192];
    for (const struct tr_opt *p = L->opts; p->type != TR_OPT_END; p++) {
        tr_opt_format(p, buf, sizeof buf);
        json_object_set_new(o, p->name, json_string(buf));
    }
    char *s = json_dumps(o, JSON_COMPACT | JSON_SORT_KEYS);
    json_decref(o);
    return s;
}

static int slurm_counts(struct launch *L)
{
    L->nodes = env_int("SLURM_JOB_NUM_NODES", env_int("SLURM_NNODES", 1));
    L->world = env_int("SLURM_NTASKS", 0);
    if (L->world <= 0) {
        int per = env_int("SLURM_NTASKS_PER_NODE", 1);
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
    } else {
        L->ctr.runtime = c->container_runtime ? runtime_choices[c->container_runtime] : ctr_runtime_find();
        if (!L->ctr.runtime) {
            LOG_ERROR("--container-image: neither docker nor podman is on PATH");
            LOG_HINT("install one of them, or run inside a SLURM allocation with pyxis (srun --container-image)");
            return TR_ERR_ARG;
        }
    }
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
    TR_CHECK(job_check(&c->w.job, JOB_ALL));
    TR_CHECK(check_container(L));
    /* the dataset as the workers will see it: in a container, through the mounts
     * (without a container there are none, and data is the path as given) */
    const char *ds = c->w.job.dataset_type != JOB_DATA_SYNTHETIC ? c->w.job.dataset_path : NULL;
    char data[PATH_MAX];
    int mapped = 0, bad = 0;
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
    return TR_OK;
}

static const char *status_of(struct launch *L, int *exit_code, char *reason, size_t n)
{
    *reason = 0;
    const int ok = WIFEXITED(L->workers.status) && WEXITSTATUS(L->workers.status) == 0;
    if (L->hung) {
        snprintf(reason, n, "%s", L->hung_reason);
        *exit_code = 1;
        return DB_HUNG;
    }
    if (L->loader_failed) {
        snprintf(reason, n, "the loader failed: %s (log: %s)", *L->loader_error ? L->loader_error : "see its log",
                 L->loader.log);
        *exit_code = 1;
        return DB_FAILED;
    }
    if (ok && L->stop == STOP_PREEMPT) {
        snprintf(reason, n, "preempted at step %lld (checkpoint saved)", (long long)L->step);
        *exit_code = 0;
        return DB_PREEMPTED;
    }
    if (L->stop == STOP_PREEMPT) {
        /* SLURM ended the step before the workers' last save (srun kills its tasks
         * on SLURM's SIGTERM): still preempted, and the next attempt continues
         * from the last committed checkpoint */
        char st[96];
        snprintf(reason, n, "preempted at step %lld; the workers were ended (%s) before their last checkpoint: "
                 "the next attempt continues from the last committed one",
                 (long long)L->step, proc_describe(L->workers.status, st, sizeof st));
        *exit_code = 0;
        return DB_PREEMPTED;
    }
    if (L->stop == STOP_CANCEL) {
        snprintf(reason, n, "cancelled at step %lld", (long long)L->step);
        *exit_code = 130;
        return DB_CANCELLED;
    }
    if (ok) {
        *exit_code = 0;
        return DB_COMPLETED;
    }
    failure_reason(L, reason, n);
    *exit_code = 1;
    return DB_FAILED;
}

/* The checkpoint store, from where (--checkpoint_dir, or the resumed run's): a URL
 * (an outside server), a path (written directly), or serve:ROOT or nothing (a
 * terarec-ckpt per node that this launcher runs, *serve = 1; by default in
 * checkpoints/ beside the run history, base). */
static enum tr_status ckpt_setup(struct launch *L, const char *where, const char *base, int *serve)
{
    char root[PATH_MAX + 16];
    *serve = 0;
    L->ckpt_token = L->c->w.checkpoint_token_file;
    if (where && (!strncmp(where, "http://", 7) || !strncmp(where, "https://", 8))) {
        snprintf(L->ckpt_where, sizeof L->ckpt_where, "%s", where);
        L->ckpt_url = 1;
        if (!L->ckpt_token) {
            LOG_ERROR("--checkpoint_dir %s: an outside store needs its --checkpoint_token_file", where);
            return TR_ERR_ARG;
        }
    } else if (where && *where && strncmp(where, "serve:", 6)) {
        snprintf(L->ckpt_where, sizeof L->ckpt_where, "%s", where);
        L->ckpt_root = tr_strdup(where);
    } else {
        if (where && !strncmp(where, "serve:", 6))
            snprintf(root, sizeof root, "%s", where + 6);
        else
            snprintf(root, sizeof root, "%s/checkpoints", base);
        L->ckpt_root = tr_strdup(root);
        L->ckpt_token = L->token_file;
        *serve = 1;
    }
    return TR_OK;
}

/* The directory of the run history's file into base (runs/ and checkpoints/ go
 * beside it), and the run's directory: --run_dir, else runs/<id> there. */
static void run_paths(struct launch *L, const char *dbpath, char *base, size_t n)
{
    snprintf(base, n, "%s", dbpath);
    char *sl = strrchr(base, '/');
    if (sl)
        *sl = 0;
    else
        snprintf(base, n, ".");
    if (L->c->run_dir)
        snprintf(L->run_dir, sizeof L->run_dir, "%s", L->c->run_dir);
    else
        snprintf(L->run_dir, sizeof L->run_dir, "%.*s/runs/%s", PATH_MAX - 128, base, L->id);
}

/* In a container: the run's directory and the store's (serve) at their own paths;
 * create: make the store's first (a mount's source must exist: enroot and podman
 * refuse it, docker would make it root's). */
static enum tr_status ctr_mount_run(struct launch *L, int serve, int create)
{
    if (!L->ctr.image)
        return TR_OK;
    ctr_mount_same(&L->ctr, L->run_dir);
    if (serve && create)
        TR_CHECK(tr_file_mkdir_p(L->ckpt_root));
    if (serve)
        ctr_mount_same(&L->ctr, L->ckpt_root);
    return TR_OK;
}

/* --dry_run: the commands of a new run, one per line ("store: ...", "loader: ...",
 * "workers: ..."), with nothing created, started or recorded. */
static int dry_run(struct launch *L, const char *dbpath)
{
    struct launch_cfg *c = L->c;
    if (c->resume)
        LOG_WARN("--dry_run does not look --resume %s up: the commands shown start from the beginning", c->resume);
    make_id(L->id, sizeof L->id);
    snprintf(L->ckpt_run, sizeof L->ckpt_run, "%s", L->id);
    char base[PATH_MAX];
    run_paths(L, dbpath, base, sizeof base);
    snprintf(L->token_file, sizeof L->token_file, "%s/token", L->run_dir);
    int serve = 0;
    if (ckpt_setup(L, c->w.checkpoint_dir, base, &serve) != TR_OK)
        return 2;
    (void)ctr_mount_run(L, serve, 0);
    snprintf(L->events_addr, sizeof L->events_addr, "tcp:%s:PORT", L->slurm ? L->host : "127.0.0.1");
    struct argv a = {0}, w = {0}, l = {0};
    if (serve) {
        ckpt_argv(L, &a, L->slurm ? free_port() : 0);
        snprintf(L->ckpt_where, sizeof L->ckpt_where, "http://127.0.0.1:PORT");
        L->ckpt_url = 1;
    }
    attempt_argv(L, &w, &l, 0);
    struct argv *cmds[] = {&a, &l, &w};
    const char *what[] = {"store", "loader", "workers"};
    for (int i = 0; i < 3; i++) {
        if (!cmds[i]->n)
            continue;
        char *q = proc_quote(cmds[i]->v);
        printf("%s: %s\n", what[i], q ? q : "");
        tr_free(q);
        argv_free(cmds[i]);
    }
    out_flush();
    return 0;
}

/* Before a resumed run starts anything: is its checkpoint there, whole
 * (resume_check)? --resume RUN stops with an error naming what is missing, unless
 * --allow_fresh_start (then *fresh = FRESH_NEW_NAME: it starts from step 0 under a
 * checkpoint run of its own, said on the console and in the history). A requeued
 * job whose run never committed a checkpoint (no run directory or LATEST in a
 * store that is there) starts from step 0 with a warning (*fresh = FRESH_SAME_NAME:
 * its workers resume a run with nothing in it yet); one whose store, manifest or
 * chunks are gone stops like --resume. TR_ERR_NOT_FOUND (logged) or the store's
 * errors. */
enum { FRESH_NO, FRESH_SAME_NAME, FRESH_NEW_NAME };
static enum tr_status resume_gate(struct launch *L, int *fresh)
{
    char missing[PATH_MAX + 512] = "";
    enum resume_gap level = 0;
    int64_t step = -1;
    *fresh = 0;
    enum tr_status rc = resume_check(L, missing, sizeof missing, &level, &step);
    char what[160];
    if (L->resumed_same_row)
        snprintf(what, sizeof what, "the requeued SLURM job %s (run %s, %s before)", L->slurm_job, L->id,
                 L->prev_status);
    else
        snprintf(what, sizeof what, "--resume %s", L->c->resume);
    if (rc == TR_OK) {
        LOG_INFO(INIT, "%s: continuing from the checkpoint of step %lld", what, (long long)step);
        return TR_OK;
    }
    if (rc != TR_ERR_NOT_FOUND) {
        LOG_ERROR("%s: cannot read the checkpoint to continue from (%s)", what, tr_strerror(rc));
        return rc;
    }
    const int never_saved = L->resumed_same_row && (level == RESUME_NO_RUN || level == RESUME_NO_LATEST);
    if (!never_saved && !L->c->allow_fresh_start) {
        LOG_ERROR("%s: the checkpoint to continue from is gone: %s is missing", what, missing);
        LOG_HINT("restore it, or pass --allow_fresh_start to train run %s's steps again from step 0",
                 L->resumed_same_row ? L->id : L->resumed_from);
        return TR_ERR_NOT_FOUND;
    }
    *fresh = never_saved ? FRESH_SAME_NAME : FRESH_NEW_NAME;
    fprintf(stderr, "terarec: %s: %s is missing: starting from step 0%s\n", what, missing,
            never_saved ? " (no checkpoint was committed before)" : " (--allow_fresh_start)");
    snprintf(L->fresh_reason, sizeof L->fresh_reason, "%.*s missing", (int)sizeof L->fresh_reason - 16, missing);
    return TR_OK;
}

static int run_launch(struct launch *L, int argc, char **argv)
{
    struct launch_cfg *c = L->c;
    int exit_code = 1;
    char dbpath[PATH_MAX];
    if (!c->db) {
        if (!db_default_path(dbpath, sizeof dbpath))
            return 2;
    } else {
        snprintf(dbpath, sizeof dbpath, "%s", c->db);
    }
    const char *slurm_job = getenv("SLURM_JOB_ID");
    L->slurm = slurm_job && *slurm_job && getenv("SLURM_JOB_NODELIST");
    L->slurm_job = L->slurm ? slurm_job : NULL;
    gethostname(L->host, sizeof L->host - 1);
    if (L->slurm)
        slurm_counts(L);
    else
        L->nodes = 1, L->world = c->workers;
    /* everything the workers would refuse, before anything is created */
    if (check_flags(L) != TR_OK || find_exe_dir(L) != TR_OK)
        return 2;
    if (c->dry_run)
        return dry_run(L, dbpath);
    if (db_open(dbpath, 1, &L->db) != TR_OK)
        return 2;

    /* which run: a requeued job continues its own row from its last committed
     * checkpoint, whatever ended the attempt before (preempted, failed, hung,
     * cancelled, a node lost, or a row left running by a launcher that was killed);
     * --resume RUN starts a new row after RUN */
    char *prev = NULL;
    const int restarts = env_int("SLURM_RESTART_COUNT", 0);
    if (L->slurm && db_run_by_slurm_job(L->db, slurm_job, &prev) == TR_OK) {
        char *st = NULL, *name = NULL;
        if (db_run_get(L->db, prev, "status", &st) != TR_OK || db_run_get(L->db, prev, "name", &name) != TR_OK)
            return 2;
        /* the same job without a requeue (SLURM_RESTART_COUNT unset): a second
         * `terarec train` in one batch script continues an unfinished run of it,
         * not a finished one nor one of another --name */
        const int other_name = c->name && name && strcmp(c->name, name);
        if (restarts > 0 || (st && strcmp(st, DB_COMPLETED) && !other_name)) {
            snprintf(L->id, sizeof L->id, "%s", prev);
            snprintf(L->prev_status, sizeof L->prev_status, "%s", st ? st : "?");
            L->resumed_same_row = 1;
        }
        tr_free(st);
        tr_free(name);
    } else if (L->slurm && restarts > 0) {
        LOG_WARN("SLURM job %s was requeued (SLURM_RESTART_COUNT=%d) but the run history %s has no run of it: "
                 "a new run starts",
                 slurm_job, restarts, db_path(L->db));
    }
    tr_free(prev);
    char *from_ckpt_run = NULL, *from_ckpt_url = NULL;
    if (!L->resumed_same_row && c->resume) {
        char *rid = NULL;
        if (db_run_resolve(L->db, c->resume, &rid) != TR_OK)
            return 2;
        snprintf(L->resumed_from, sizeof L->resumed_from, "%s", rid);
        if (db_run_get(L->db, rid, "ckpt_run", &from_ckpt_run) != TR_OK ||
            db_run_get(L->db, rid, "ckpt_url", &from_ckpt_url) != TR_OK || !from_ckpt_run) {
            LOG_ERROR("--resume %s: the run has no checkpoint store recorded", c->resume);
            tr_free(rid);
            return 2;
        }
        tr_free(rid);
    }
    if (L->resumed_same_row) {
        char *v = NULL;
        if (db_run_get(L->db, L->id, "ckpt_run", &v) == TR_OK && v)
            snprintf(L->ckpt_run, sizeof L->ckpt_run, "%s", v);
        tr_free(v);
        v = NULL;
        if (db_run_get(L->db, L->id, "ckpt_url", &v) == TR_OK && v)
            from_ckpt_url = v;
        v = NULL;
        if (db_run_get(L->db, L->id, "restarts", &v) == TR_OK && v)
            L->attempt = atoi(v) + 1;
        tr_free(v);
    } else {
        make_id(L->id, sizeof L->id);
        snprintf(L->ckpt_run, sizeof L->ckpt_run, "%s", from_ckpt_run ? from_ckpt_run : L->id);
    }
    tr_free(from_ckpt_run);

    /* the run's directory, token and checkpoint store */
    char base[PATH_MAX];
    run_paths(L, dbpath, base, sizeof base);
    if (tr_file_mkdir_p(L->run_dir) != TR_OK) {
        LOG_HINT("pass --run_dir DIR, a directory every node can write");
        tr_free(from_ckpt_url);
        return 2;
    }
    if (write_token(L) != TR_OK) {
        tr_free(from_ckpt_url);
        return 2;
    }
    int serve = 0;
    enum tr_status crc = ckpt_setup(L, from_ckpt_url ? from_ckpt_url : c->w.checkpoint_dir, base, &serve);
    tr_free(from_ckpt_url);
    if (crc != TR_OK)
        return 2;
    if (ctr_mount_run(L, serve, 1) != TR_OK)
        return 2;
    int fresh = FRESH_NO; /* a resumed run that starts from step 0 (resume_gate) */
    if ((L->resumed_same_row || *L->resumed_from) && resume_gate(L, &fresh) != TR_OK)
        return 2;
    if (fresh == FRESH_NEW_NAME) {
        /* the broken run's name stays the store's (claimed by the job that wrote it,
         * its remains for gc): the fresh start saves under a name of its own */
        if (L->resumed_same_row)
            snprintf(L->ckpt_run, sizeof L->ckpt_run, "%.40s-a%d", L->id, L->attempt);
        else
            snprintf(L->ckpt_run, sizeof L->ckpt_run, "%s", L->id);
        fprintf(stderr, "terarec: its checkpoints go to run '%s' of the store\n", L->ckpt_run);
    }
    if (open_listener(L) != TR_OK)
        return 1;

    /* the run's row, before anything starts */
    (void)argc;
    char *q = proc_quote(argv), *cmdline = tr_malloc(strlen(q ? q : "") + 16);
    if (cmdline)
        sprintf(cmdline, "terarec %s", q ? q : "");
    tr_free(q);
    char *cfg = config_json(L);
    char recorded_url[PATH_MAX + 16];
    if (serve)
        snprintf(recorded_url, sizeof recorded_url, "serve:%s", L->ckpt_root);
    else
        snprintf(recorded_url, sizeof recorded_url, "%s", L->ckpt_where);
    enum tr_status rc;
    if (L->resumed_same_row) {
        rc = db_run_reopen(L->db, L->id, NULL);
        if (rc == TR_OK && fresh == FRESH_NEW_NAME)
            rc = db_run_set_ckpt_run(L->db, L->id, L->ckpt_run);
        if (rc == TR_OK)
            record_event(L, "requeued", json_pack("{s:s,s:i}", "slurm_job_id", L->slurm_job, "attempt", L->attempt));
    } else {
        struct db_run r = {.id = L->id,
                           .name = c->name,
                           .status = DB_RUNNING,
                           .cmdline = cmdline,
                           .config = cfg,
                           .git_hash = TR_GIT_HASH,
                           .hosts = getenv("SLURM_JOB_NODELIST") && L->slurm ? getenv("SLURM_JOB_NODELIST") : L->host,
                           .nodes = L->nodes,
                           .workers = L->world,
                           .slurm_job_id = L->slurm_job,
                           .ckpt_url = recorded_url,
                           .ckpt_run = L->ckpt_run,
                           .resumed_from = *L->resumed_from ? L->resumed_from : NULL,
                           .start_time = now_wall()};
        rc = db_run_create(L->db, &r);
    }
    tr_free(cmdline);
    free(cfg);
    if (rc != TR_OK)
        return 1;

    L->tty = isatty(1) && !c->json;
    if (c->json)
        json_out(L, "start", json_pack("{s:s,s:s,s:i,s:i}", "db", db_path(L->db), "run_dir", L->run_dir, "workers",
                                       L->world, "nodes", L->nodes));
    else
        printf("terarec: run %s%s: %d worker%s on %d node%s%s%s; logs in %s\n", L->id,
               L->resumed_same_row ? " (requeued: resuming)" : "", L->world, L->world == 1 ? "" : "s", L->nodes,
               L->nodes == 1 ? "" : "s", L->slurm ? ", SLURM job " : "", L->slurm ? L->slurm_job : "", L->run_dir);
    out_flush();

    int resume = (L->resumed_same_row || *L->resumed_from) && fresh != FRESH_NEW_NAME;
    if (fresh)
        record_event(L, "fresh_start", json_pack("{s:s}", "reason", L->fresh_reason));
    const char *status = DB_FAILED;
    char reason[2048] = "";
    if (serve && start_ckpt(L) != TR_OK) {
        snprintf(reason, sizeof reason, "the checkpoint store did not start (log: %s)", L->ckpt.log);
        goto done;
    }
    for (;;) {
        if (start_attempt(L, resume) != TR_OK) {
            snprintf(reason, sizeof reason, "could not start the loader and workers (logs in %.1800s)", L->run_dir);
            break;
        }
        supervise(L, L->token);
        check_loader(L, 1);
        proc_stop(&L->loader, 5);
        ctr_remove(L, &L->loader, "loader");
        ctr_remove(L, &L->workers, "workers");
        status = status_of(L, &exit_code, reason, sizeof reason);
        for (int r = 0; r < L->nranks; r++)
            if (L->ranks[r].hello && !L->ranks[r].bye)
                db_try(db_process_exit(L->db, L->id, L->attempt, r, -1, L->hung ? SIGKILL : 0, now_wall()),
                       "an exit");
        if (strcmp(status, DB_FAILED) || L->restarts >= c->max_restarts || L->loader_failed)
            break; /* (the loader's error is its input's: a restart would meet it again) */
        char *tail = proc_tail(L->workers.log, 20);
        record_event(L, "failed_attempt", json_pack("{s:i,s:s,s:s}", "attempt", L->attempt, "reason", reason,
                                                    "log", tail ? tail : ""));
        tr_free(tail);
        clear_line(L);
        fprintf(stderr, "terarec: attempt %d failed: %s; restarting from the last checkpoint (%d of %d)\n",
                L->attempt, reason, L->restarts + 1, c->max_restarts);
        L->restarts++;
        L->attempt++;
        db_try(db_run_reopen(L->db, L->id, NULL), "the restart");
        resume = 1;
        proc_release(&L->workers);
        proc_release(&L->loader);
        L->loader_end_seen = 0;
    }
done:
    clear_line(L);
    if (L->step > 0 && L->tty)
        show_progress(L, 1);
    char *fm = L->final_metrics ? json_dumps(L->final_metrics, JSON_COMPACT) : NULL;
    if (!strcmp(status, DB_FAILED) || !strcmp(status, DB_HUNG)) {
        char *tail = L->workers.log ? proc_tail(L->workers.log, 20) : NULL;
        record_event(L, status, json_pack("{s:s,s:s}", "reason", reason, "log", tail ? tail : ""));
        if (!c->json && tail && *tail)
            fprintf(stderr, "terarec: the workers' log (%s) ends:\n%s\n", L->workers.log, tail);
        tr_free(tail);
    } else {
        record_event(L, status, json_pack("{s:s,s:I}", "reason", reason, "step", (json_int_t)L->step));
    }
    db_try(db_run_finish(L->db, L->id, status, now_wall(), fm, *reason ? reason : NULL), "the end of the run");
    free(fm);
    if (L->slurm && L->ckpt.pid > 0 && !L->ckpt.ended)
        slurm_step_signal(L, "terarec-ckpt", "INT", 0); /* SIGTERM would wait out --term_grace */
    proc_stop(&L->ckpt, 10);
    ctr_remove(L, &L->ckpt, "ckpt");
    if (c->json) {
        json_out(L, "end", json_pack("{s:s,s:s,s:I}", "status", status, "reason", reason, "step", (json_int_t)L->step));
    } else {
        fprintf(!strcmp(status, DB_COMPLETED) ? stdout : stderr, "terarec: run %s %s%s%s\n", L->id, status,
                *reason ? ": " : "", reason);
        printf("run history: %s (terarec runs show %s)\n", db_path(L->db), L->id);
    }
    out_flush();
    /* SIGUSR1 (sbatch --signal) asks us to requeue; a SIGTERM under SLURM comes with
     * SLURM's own decision (requeue, preemption, time limit, scancel) */
    if (!strcmp(status, DB_PREEMPTED) && L->slurm && c->requeue && L->stop_sig == SIGUSR1) {
        char cmd[128];
        snprintf(cmd, sizeof cmd, "scontrol requeue %s", L->slurm_job);
        record_event(L, "requeue", json_pack("{s:s}", "slurm_job_id", L->slurm_job));
        fprintf(stderr, "terarec: %s\n", cmd);
        if (system(cmd) != 0)
            LOG_ERROR("'%s' failed: the run stays preempted (terarec train --resume %s continues it)", cmd, L->id);
    }
    return exit_code;
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
    L.sfd = L.lfd = -1;
    L.nworker_opts = launch_opts_fill(&cfg, opts);
    int want = 0;
    enum tr_status rc = tr_opt_parse(opts, argc, argv, NULL, &want);
    int code, demo = rc == TR_OK && !want;
    for (int i = 0; i < L.nworker_opts && demo; i++)
        if (opts[i].set_by)
            demo = 0;
    char **argv2 = NULL;
    if (demo) {
        /* no model or data flag at all: the built-in demo (the seed's defaults are a
         * 65536-sample batch of a model for Criteo) */
        static const char *const flags[] = {DEMO_FLAGS};
        const int n = (int)TR_ARRAY_SIZE(flags);
        argv2 = tr_calloc((size_t)(argc + n + 1), sizeof *argv2);
        TR_ASSERT(argv2);
        for (int i = 0; i < argc; i++)
            argv2[i] = argv[i];
        for (int i = 0; i < n; i++)
            argv2[argc + i] = (char *)flags[i];
        tr_opt_release(opts);
        rc = tr_opt_parse(opts, argc + n, argv2, NULL, &want);
        argc += n;
        argv = argv2;
    }
    if (rc != TR_OK) {
        code = tr_status_exit_code(rc);
    } else if (want & TR_OPT_WANT_HELP) {
        tr_opt_print_help(opts,
                          "usage: terarec train [options]\n\ntrains a model: starts the checkpoint store, the loader "
                          "and the workers (mpirun here, srun inside a SLURM allocation), watches them and records "
                          "the run in the run history (terarec runs list)",
                          stdout);
        code = 0;
    } else {
        if (demo)
            printf("terarec: no model or data flags: training the built-in demo (%s)\n",
                   "26 synthetic tables of 100000 rows, embedding dim 16, 300 steps of 2048");
        /* the signals a job gets arrive through a signalfd; children get the old mask */
        sigset_t set;
        sigemptyset(&set);
        sigaddset(&set, SIGCHLD);
        sigaddset(&set, SIGINT);
        sigaddset(&set, SIGTERM);
        sigaddset(&set, SIGUSR1);
        sigaddset(&set, SIGHUP);
        sigprocmask(SIG_BLOCK, &set, &L.orig_mask);
        /* a closed stdout is not a reason to stop (out_flush); the children get SIG_DFL back */
        signal(SIGPIPE, SIG_IGN);
        L.sfd = signalfd(-1, &set, SFD_NONBLOCK | SFD_CLOEXEC);
        code = run_launch(&L, argc, argv);
        if (L.sfd >= 0)
            close(L.sfd);
        sigprocmask(SIG_SETMASK, &L.orig_mask, NULL);
    }
    if (L.lfd >= 0)
        close(L.lfd);
    struct proc *left[] = {&L.workers, &L.loader, &L.ckpt};
    const char *what[] = {"workers", "loader", "ckpt"};
    for (int i = 0; i < 3; i++) {
        const int live = left[i]->pid > 0 && !left[i]->ended;
        proc_stop(left[i], 5);
        if (live)
            ctr_remove(&L, left[i], what[i]);
    }
    ctr_release(&L.ctr);
    proc_release(&L.workers);
    proc_release(&L.loader);
    proc_release(&L.ckpt);
    tr_free(L.ranks);
    tr_free(L.conns);
    tr_free(L.ckpt_root);
    json_decref(L.final_metrics);
    if (L.db) {
        record_start(&L, NULL);
        db_close(L.db);
    }
    tr_opt_release(opts);
    tr_free(argv2);
    return code;
}
