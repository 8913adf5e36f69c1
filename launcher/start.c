/* start.c: starting terarec train's children: the checkpoint store(s), then each
 * attempt's loader and workers, locally (mpirun for more than one worker), under
 * SLURM (srun steps) and in containers (docker/podman here, pyxis under SLURM);
 * and --dry_run, which prints those commands instead. Watching them is
 * supervise.c's, and the processes themselves are proc.c's. */
#define TR_SUBSYS TR_SUB_INIT
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "../common/alloc.h"
#include "../common/check.h"
#include "../common/clock.h"
#include "../common/file.h"
#include "../common/job.h"
#include "../common/log.h"
#include "../kernels/kern.h"
#include "launch_internal.h"

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
void launch_ctr_remove(struct launch *L, const struct proc *prog, const char *what)
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

/* a GPU for a local container: where the host has one and the backend may use a
 * device (the backend registry says which do) */
static int ctr_gpus(struct launch *L)
{
    return kern_backend_device_on_host(job_backend_name(L->c->w.job.backend));
}

/* The given worker flags, as --name=value, but those the launcher makes a value of
 * its own from (TR_OPT_LAUNCHER_MAPS); those the loader also takes (TR_OPT_LOADER)
 * go to *loader as well. */
static void forward_flags(struct launch *L, struct argv *worker, struct argv *loader)
{
    char buf[8192];
    for (int i = 0; i < L->nworker_opts; i++) {
        const struct tr_opt *o = &L->opts[i];
        if (!o->set_by)
            continue;
        if (o->props & TR_OPT_LAUNCHER_MAPS)
            continue; /* set by the launcher from the user's value */
        tr_opt_format(o, buf, sizeof buf);
        argv_addf(worker, "--%s=%s", o->name, buf);
        if (loader && (o->props & TR_OPT_LOADER))
            argv_addf(loader, "--%s=%s", o->name, buf);
    }
}

/* Waits for n "listening on URL" lines in the store's log past its first `from`
 * bytes (a requeued job's log has the lines of the stores before); the URL of the
 * first. */
static enum tr_status wait_listening(struct launch *L, int n, size_t from, char *url, size_t un)
{
    const double until = tr_clock_now() + 60;
    for (;;) {
        char *text = NULL;
        size_t len = 0;
        int seen = 0;
        if (tr_file_read_all(L->ckpt.log, &text, &len) == TR_OK) {
            const char *key = "terarec-ckpt: listening on ";
            for (char *p = strstr(text + (from < len ? from : len), key); p; p = strstr(p + 1, key)) {
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

/* Binds a TCP socket to 127.0.0.1:port (0: any) and closes it; returns the port
 * bound, 0 when the bind failed. */
static int try_port(int port)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in a;
    memset(&a, 0, sizeof a);
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = htons((uint16_t)port);
    socklen_t al = sizeof a;
    int got = 0;
    if (fd >= 0 && bind(fd, (struct sockaddr *)&a, sizeof a) == 0 && getsockname(fd, (struct sockaddr *)&a, &al) == 0)
        got = ntohs(a.sin_port);
    if (fd >= 0)
        close(fd);
    return got;
}

/* Ports below this are left to the site's fixed services. */
#define STORE_PORT_MIN 10000

/* A TCP port free on this machine now, for the per-node stores to bind on 127.0.0.1
 * once srun has started them. It is taken below the kernel's ephemeral range
 * (ip_local_port_range) when there is room: until the stores bind it, a port of
 * the range may be handed to any socket bound to port 0 or connecting out, on this
 * node or another, and a store then failed to listen (EADDRINUSE; seen once in
 * t5003 under CI). Else, or when no such port binds, a port of the range. */
static int free_port(void)
{
    int lo = 32768; /* the range's first port */
    FILE *f = fopen("/proc/sys/net/ipv4/ip_local_port_range", "r");
    if (f) {
        if (fscanf(f, "%d", &lo) != 1)
            lo = 32768;
        fclose(f);
    }
    uint64_t x = (uint64_t)getpid() * 0x9E3779B97F4A7C15ull ^ (uint64_t)(tr_clock_now() * 1e9);
    for (int k = 0; k < 64 && lo - STORE_PORT_MIN > 100; k++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17; /* xorshift64 */
        const int port = try_port(STORE_PORT_MIN + (int)(x % (uint64_t)(lo - STORE_PORT_MIN)));
        if (port)
            return port;
    }
    return try_port(0);
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
        if (L->el.on)
            argv_add(a, "--no-kill"); /* a node lost takes its store, not the others' */
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

enum tr_status launch_start_ckpt(struct launch *L)
{
    struct argv a = {0};
    char log[PATH_MAX + 16];
    snprintf(log, sizeof log, "%s/ckpt.log", L->run_dir);
    int port = L->slurm ? free_port() : 0;
    ckpt_argv(L, &a, port);
    struct stat st;
    const size_t from = stat(log, &st) == 0 ? (size_t)st.st_size : 0;
    enum tr_status rc = proc_start(&L->ckpt, "checkpoint store", a.v, log, &L->orig_mask);
    argv_free(&a);
    if (rc != TR_OK)
        return rc;
    char url[256] = "";
    TR_CHECK(wait_listening(L, L->slurm ? L->nodes : 1, from, url, sizeof url));
    if (L->slurm)
        snprintf(L->ckpt_where, sizeof L->ckpt_where, "http://127.0.0.1:%d", port);
    else
        snprintf(L->ckpt_where, sizeof L->ckpt_where, "%s", url);
    L->ckpt_url = 1;
    return TR_OK;
}

/* The loader's and the workers' commands of one attempt (resume: the workers
 * continue from the run's last checkpoint, and rank 0 asks the loader to seek to
 * its data position; a --resume RUN run's first one restores RUN's checkpoint,
 * until it has saved one of its own). */
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
        if (L->el.on)
            launch_elastic_srun_args(L, w);
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
    if (resume && *L->hist.from_ckpt_run && L->saved_step < 0) /* --resume RUN, before a save of its own */
        argv_addf(w, "--restore=%s#%s@%lld", L->ckpt_where, L->hist.from_ckpt_run, (long long)L->hist.from_step);
    else if (resume)
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

enum tr_status launch_start_attempt(struct launch *L, int resume)
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
    if (resume) { /* from_step and start_position: what rank 0 restores (launch_record_start) */
        launch_record_start(L, NULL);
        L->hist.start_ev = d;
        L->hist.start_kind = L->attempt ? "restarted" : "started";
        L->hist.start_time = tr_clock_wall();
    } else {
        launch_record_event(L, L->attempt ? "restarted" : "started", d);
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

/* --dry_run: the commands of a new run, one per line ("store: ...", "loader: ...",
 * "workers: ..."), with nothing created, started or recorded. */
enum tr_status launch_dry_run(struct launch *L, const char *dbpath)
{
    struct launch_cfg *c = L->c;
    if (c->resume)
        LOG_WARN("--dry_run does not look --resume %s up: the commands shown start from the beginning", c->resume);
    launch_make_id(L->id, sizeof L->id);
    snprintf(L->ckpt_run, sizeof L->ckpt_run, "%s", L->id);
    char base[PATH_MAX];
    launch_run_paths(L, dbpath, base, sizeof base);
    snprintf(L->token_file, sizeof L->token_file, "%s/token", L->run_dir);
    int serve = 0;
    if (launch_ckpt_setup(L, c->w.checkpoint_dir, base, &serve) != TR_OK)
        return TR_ERR_ARG;
    (void)launch_ctr_mount_run(L, serve, 0);
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
    launch_out_flush();
    return TR_OK;
}
