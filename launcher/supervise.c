/* supervise.c: watching an attempt and ending it: the loop over the signals, the
 * reports and a tick (supervise), a stop asked for (SIGINT, SIGTERM, SIGUSR1,
 * SIGHUP), a hang, a lost rank, a failed loader; how the attempt ended and why;
 * restarts (--max_restarts), and the requeue of a preempted SLURM job. Reading the
 * reports is intake.c's, starting the children start.c's. */
#define TR_SUBSYS TR_SUB_INIT
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/signalfd.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "../common/alloc.h"
#include "../common/check.h"
#include "../common/clock.h"
#include "../common/evproto.h"
#include "../common/log.h"
#include "../db/db.h"
#include "launch_internal.h"

void launch_request_stop(struct launch *L, enum stop_why why, int sig)
{
    if (L->watch.stop == STOP_GROW && why != STOP_GROW) {
        /* a preemption or a cancel during an elastic run's stop for growth: the
         * workers stop as they were going to, and the run ends as asked */
        L->watch.stop = why;
        L->watch.stop_sig = sig;
        launch_clear_line(L);
        fprintf(stderr, "terarec: %s (%s): the workers stop after the next batch and save a checkpoint\n",
                why == STOP_PREEMPT ? "preemption" : "stop requested", strsignal(sig));
        launch_record_event(L, why == STOP_PREEMPT ? "preempt_signal" : "cancel_signal",
                            json_pack("{s:s}", "signal", strsignal(sig)));
        return;
    }
    if (L->watch.stop && (L->watch.stop_sent || why == L->watch.stop)) {
        if (sig == SIGINT && L->watch.stop == STOP_CANCEL) { /* a second Ctrl-C: at once */
            launch_clear_line(L);
            fprintf(stderr, "terarec: second interrupt: stopping the workers now\n");
            proc_signal(&L->workers, SIGKILL);
            proc_signal(&L->loader, SIGKILL);
        }
        return;
    }
    L->watch.stop = why;
    L->watch.stop_sig = sig;
    if (why != STOP_GROW) { /* (elastic.c says why it stops) */
        launch_clear_line(L);
        fprintf(stderr, "terarec: %s (%s): the workers stop after the next batch and save a checkpoint%s\n",
                why == STOP_PREEMPT ? "preemption" : "stop requested", strsignal(sig),
                sig == SIGINT ? " (Ctrl-C again: at once)" : "");
        launch_record_event(L, why == STOP_PREEMPT ? "preempt_signal" : "cancel_signal",
                            json_pack("{s:s}", "signal", strsignal(sig)));
    }
    /* the loader's first SIGTERM drains: every rank stops after the same step */
    proc_signal(&L->loader, SIGTERM);
    L->watch.stop_sent = 1;
}

/* Sends signal `sig` (a name: KILL, INT) to this job's step named `name` (srun
 * --job-name), through scancel: it reaches tasks on every node, a stopped one too.
 * Returns 0 when it went (in the background: when it was started), nonzero when
 * squeue or scancel failed, which a step that has just ended makes them do: not
 * said here (the caller warns when the step is still there). */
static int slurm_step_signal(struct launch *L, const char *name, const char *sig, int background)
{
    char cmd[512];
    snprintf(cmd, sizeof cmd,
             "(for s in $(squeue -h -s -j %s -o '%%i %%j' | awk '$2==\"%s\"{print $1}'); do "
             "scancel --signal=%s \"$s\"; done) >/dev/null 2>&1 </dev/null%s",
             L->slurm_job, name, sig, background ? " &" : "");
    const int st = system(cmd);
    if (st != 0)
        LOG_INFO(INIT, "signalling the SLURM step %s of job %s: %s", name, L->slurm_job,
                 st == -1 ? "could not run the shell" : "squeue or scancel failed (the step may have ended)");
    return st;
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
    if (tmo <= 0 || L->watch.hung || L->workers.ended)
        return;
    const double now = tr_clock_now();
    if (now - L->t_last_progress < tmo)
        return;
    L->watch.hung = 1;
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
    snprintf(L->watch.hung_reason, sizeof L->watch.hung_reason, "no training step for %.0f s after step %lld; silent ranks: %s",
             tmo, (long long)(L->last_progress_step > 0 ? L->last_progress_step : 0), k ? silent : "none");
    launch_clear_line(L);
    LOG_ERROR("run %s hung: %s: killing its workers", L->id, L->watch.hung_reason);
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
    if (L->watch.loader_failed || L->loader.pid <= 0)
        return;
    const int workers_ok = WIFEXITED(L->workers.status) && WEXITSTATUS(L->workers.status) == 0;
    /* workers that failed on their loader's error may end before it has: a second
     * (not after a rank was lost: a loader that ends after that is never blamed) */
    for (int i = 0; final && !workers_ok && !L->watch.stop && !L->t_rank_lost && i < 20 && !proc_poll(&L->loader);
         i++)
        nanosleep(&(struct timespec){0, 50 * 1000 * 1000}, NULL);
    if (!proc_poll(&L->loader))
        return;
    const int st = L->loader.status;
    if (L->watch.stop || (WIFEXITED(st) && WEXITSTATUS(st) == 0))
        return; /* it drained for a stop, or served every batch it had */
    if (final && workers_ok)
        return; /* the workers finished: whatever the loader did after */
    if (!L->watch.loader_end_seen)
        L->watch.loader_end_seen = tr_clock_now();
    if (L->t_rank_lost && L->t_rank_lost <= L->watch.loader_end_seen)
        return;
    if (!final && tr_clock_now() - L->watch.loader_end_seen < LOADER_BLAME_S)
        return;
    L->watch.loader_failed = 1;
    char how[96];
    proc_describe(st, how, sizeof how);
    char *tail = proc_tail(L->loader.log, 40);
    launch_clear_line(L);
    fprintf(stderr, "terarec: the loader failed (%s); its log %s says:\n", how, L->loader.log);
    int shown = 0;
    for (char *save = NULL, *ln = strtok_r(tail ? tail : (char *)"", "\n", &save); ln;
         ln = strtok_r(NULL, "\n", &save)) {
        const char *e = strstr(ln, " error: "), *h = strstr(ln, " hint: ");
        if (!e && !h)
            continue;
        fprintf(stderr, "  %s\n", (e ? e : h) + 1);
        shown++;
        if (e && !*L->watch.loader_error)
            snprintf(L->watch.loader_error, sizeof L->watch.loader_error, "%s", e + 8);
    }
    if (!shown) /* no error line: its last lines */
        fprintf(stderr, "%s\n", tail ? tail : "");
    tr_free(tail);
    launch_record_event(L, "loader_failed", json_pack("{s:s,s:s}", "status", how, "error", L->watch.loader_error));
    if (!final)
        kill_step(L);
}

/* The signals that came (SIGCHLD only wakes the loop). SIGHUP (the terminal
 * closed) is a cancel, like Ctrl-C: the run stops after a checkpoint and is
 * recorded. */
static void read_signals(struct launch *L)
{
    struct signalfd_siginfo si;
    while (read(L->watch.sfd, &si, sizeof si) == (ssize_t)sizeof si) {
        if (si.ssi_signo == SIGUSR1)
            launch_request_stop(L, STOP_PREEMPT, SIGUSR1);
        else if (si.ssi_signo == SIGTERM)
            launch_request_stop(L, L->slurm ? STOP_PREEMPT : STOP_CANCEL, SIGTERM);
        else if (si.ssi_signo == SIGINT || si.ssi_signo == SIGHUP)
            launch_request_stop(L, STOP_CANCEL, (int)si.ssi_signo);
    }
}

/* Runs the loop until the current attempt's workers end. */
static void supervise(struct launch *L, const char *token)
{
    double next_draw = 0, next_beat = 0;
    while (!L->workers.ended) {
        if (tr_clock_now() > next_beat) { /* alive, for the history (a vanished launcher's run is lost) */
            next_beat = tr_clock_now() + 10;
            launch_db_try(db_run_heartbeat(L->hist.db, L->id, tr_clock_wall()), "the heartbeat");
        }
        struct pollfd *pf = tr_malloc((size_t)(L->in.nconns + 2) * sizeof *pf);
        TR_ASSERT(pf);
        pf[0] = (struct pollfd){.fd = L->watch.sfd, .events = POLLIN};
        pf[1] = (struct pollfd){.fd = L->in.lfd, .events = POLLIN};
        const int nc = L->in.nconns;
        for (int i = 0; i < nc; i++)
            pf[2 + i] = (struct pollfd){.fd = L->in.conns[i].fd, .events = POLLIN};
        int k = poll(pf, (nfds_t)(nc + 2), 250);
        if (k > 0 && (pf[0].revents & POLLIN))
            read_signals(L);
        if (k > 0 && (pf[1].revents & POLLIN))
            launch_intake_accept(L);
        if (k > 0)
            launch_intake_read(L, pf + 2, nc, token);
        tr_free(pf);
        proc_poll(&L->workers);
        check_loader(L, 0);
        if (L->watch.stop && !L->watch.stop_sent)
            launch_request_stop(L, L->watch.stop, SIGTERM);
        check_hang(L);
        launch_elastic_tick(L);
        /* a rank died: the step cannot go on (the others would wait in their next
         * collective, and they leave SIGTERM to us): end it now */
        if (L->t_rank_lost && !L->workers.ended) {
            /* an elastic run knows who died first from the connections: its ranks go
             * after 0.2 s (time for mpirun or srun to say how the first one died), at
             * once when one was silent (stopped) */
            const double since = tr_clock_now() - L->t_rank_lost,
                         first = !L->el.on ? 2.0 : launch_elastic_silent(L) ? 0.0 : 0.2;
            if (L->step_killed == 0 && since >= first) { /* the ranks; mpirun or srun then says who died first */
                L->step_killed = 1;
                kill_ranks(L);
            } else if (L->step_killed == 1 && since > first + (L->el.on ? 1.0 : 4.0)) {
                L->step_killed = 2;
                kill_step(L);
            }
        }
        launch_log_flush(L, 0);
        if (L->prog.tty && !L->c->json && tr_clock_now() > next_draw && L->prog.step > 0) {
            next_draw = tr_clock_now() + 1;
            launch_show_progress(L, 0);
        }
    }
    L->t_workers_ended = tr_clock_now();
    /* SLURM's SIGTERM (scontrol requeue, a preemption, the time limit) reaches
     * every process of the job: srun then kills its tasks at once ("forcing job
     * termination"), and ours may come just after the step ended: a failed step is
     * not taken for a failure before a second has passed without one */
    if (L->slurm && !L->watch.stop && !(WIFEXITED(L->workers.status) && WEXITSTATUS(L->workers.status) == 0)) {
        struct pollfd p = {.fd = L->watch.sfd, .events = POLLIN};
        if (poll(&p, 1, 1000) > 0)
            read_signals(L);
    }
    launch_intake_drain(L, token);
    launch_log_flush(L, 1);
}

/* Parses the launcher's lines of a failed worker step's log: Open MPI's "...rank R
 * with PID P on node H exited on signal S" and srun's "srun: error: H: task R:
 * Killed|Exited with exit code C" (and their variants). Fills the first failed
 * rank's *rank, host (n bytes), *sig (0 when none) and *code (-1 when none);
 * returns 1 when a line matched, 0 otherwise. */
static int parse_step_failure(const char *line, int *rank, char *host, size_t n, int *sig, int *code)
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

int launch_scan_step_log(struct launch *L, int *rank, char *host, size_t n, int *sig, int *code)
{
    FILE *fp = L->workers.log ? fopen(L->workers.log, "r") : NULL;
    if (!fp)
        return 0;
    char line[4096], h[256];
    int found = 0, r, s, c;
    while (fgets(line, sizeof line, fp)) {
        if (!strncmp(line, "terarec: attempt ", 17)) { /* the log has every attempt's: this one's only */
            found = 0;
        } else if (!found && parse_step_failure(line, &r, h, sizeof h, &s, &c)) {
            found = 1;
            *rank = r, *sig = s, *code = c;
            snprintf(host, n, "%s", h);
        }
    }
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
    int parsed = launch_scan_step_log(L, &rank, host, sizeof host, &sig, &code);
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

/* The step the workers had reached when they stopped: their last beats' (the
 * progress lines come every --print_freq steps), or their last save's. */
int64_t launch_stop_step(const struct launch *L)
{
    int64_t s = TR_MAX(TR_MAX(L->prog.step, L->last_progress_step), L->saved_step);
    for (int r = 0; r < L->nranks; r++)
        s = TR_MAX(s, L->ranks[r].step);
    return s;
}

/* What a stopped run has to continue from, into buf: the checkpoint committed last
 * (the one rank 0 said it committed, else the store's LATEST, which a save the
 * launcher did not hear of may have moved), said with its step. */
static void saved_said(struct launch *L, char *buf, size_t n)
{
    int64_t s = L->saved_step, latest = -1;
    const int ok = WIFEXITED(L->workers.status) && WEXITSTATUS(L->workers.status) == 0;
    if ((!ok || s < 0) && launch_store_latest(L, &latest) == TR_OK && latest > s)
        s = latest; /* (workers that ended well said what they saved) */
    if (s >= 0)
        snprintf(buf, n, "the checkpoint of step %lld is saved", (long long)s);
    else
        snprintf(buf, n, "no checkpoint was saved");
}

/* How the attempt ended (DB_*), why into reason (n bytes), and the run's status
 * for its exit code (*end). */
static const char *status_of(struct launch *L, enum tr_status *end, char *reason, size_t n)
{
    *reason = 0;
    const int ok = WIFEXITED(L->workers.status) && WEXITSTATUS(L->workers.status) == 0;
    if (L->watch.hung) {
        snprintf(reason, n, "%s", L->watch.hung_reason);
        *end = TR_ERR_REMOTE;
        return DB_HUNG;
    }
    if (L->watch.loader_failed) {
        snprintf(reason, n, "the loader failed: %s (log: %s)", *L->watch.loader_error ? L->watch.loader_error : "see its log",
                 L->loader.log);
        *end = TR_ERR_REMOTE;
        return DB_FAILED;
    }
    char saved[160];
    if (L->watch.stop)
        saved_said(L, saved, sizeof saved);
    if (ok && L->watch.stop == STOP_PREEMPT) {
        snprintf(reason, n, "preempted at step %lld; %s", (long long)launch_stop_step(L), saved);
        *end = TR_OK;
        return DB_PREEMPTED;
    }
    if (L->watch.stop == STOP_PREEMPT) {
        /* SLURM ended the step before the workers' last save (srun kills its tasks
         * on SLURM's SIGTERM): still preempted, and the next attempt continues
         * from the last committed checkpoint */
        char st[96];
        snprintf(reason, n, "preempted at step %lld; the workers were ended (%s) before their last checkpoint: "
                 "%s, the next attempt continues from it",
                 (long long)launch_stop_step(L), proc_describe(L->workers.status, st, sizeof st), saved);
        *end = TR_OK;
        return DB_PREEMPTED;
    }
    if (L->watch.stop == STOP_CANCEL) {
        snprintf(reason, n, "cancelled at step %lld; %s", (long long)launch_stop_step(L), saved);
        *end = TR_ERR_INTERRUPTED;
        return DB_CANCELLED;
    }
    if (ok) {
        *end = TR_OK;
        return DB_COMPLETED;
    }
    failure_reason(L, reason, n);
    *end = TR_ERR_REMOTE;
    return DB_FAILED;
}

static void record_failed_attempt(struct launch *L, const char *reason)
{
    char *tail = proc_tail(L->workers.log, 20);
    launch_record_event(L, "failed_attempt",
                        json_pack("{s:i,s:s,s:s}", "attempt", L->attempt, "reason", reason, "log", tail ? tail : ""));
    tr_free(tail);
}

/* The bookkeeping between two attempts: the next one's number, the run's row
 * running again (its restarts counted), the ended children released, the stop
 * and the loader's end forgotten. */
static void next_attempt(struct launch *L)
{
    L->attempt++;
    launch_db_try(db_run_reopen(L->hist.db, L->id, NULL), "the restart");
    proc_release(&L->workers);
    proc_release(&L->loader);
    L->watch.loader_end_seen = 0;
    L->watch.stop = STOP_NONE;
    L->watch.stop_sent = 0;
    L->watch.stop_sig = 0;
}

enum tr_status launch_supervise_attempts(struct launch *L, int resume, const char **status, char *reason, size_t n)
{
    enum tr_status end = TR_ERR_IO;
    *status = DB_FAILED;
    for (;;) {
        if (launch_start_attempt(L, resume) != TR_OK) {
            snprintf(reason, n, "could not start the loader and workers (logs in %.1800s)", L->run_dir);
            break;
        }
        supervise(L, L->token);
        check_loader(L, 1);
        if (L->el.on && L->t_rank_lost && !L->watch.loader_failed && !L->ctr.image)
            launch_elastic_park_loader(L); /* it ends on its own; the next attempt need not wait */
        else
            proc_stop(&L->loader, 5);
        launch_ctr_remove(L, &L->loader, "loader");
        launch_ctr_remove(L, &L->workers, "workers");
        L->t_attempt_down = tr_clock_now();
        if (!WIFEXITED(L->workers.status) || WEXITSTATUS(L->workers.status) != 0)
            launch_ckpt_catch_up(L);
        *status = status_of(L, &end, reason, n);
        launch_history_exits(L);
        const int was_failed = !strcmp(*status, DB_FAILED);
        const enum elastic_next el = launch_elastic_next(L, status, &end, reason, n);
        if (el == ELASTIC_STOP)
            break;
        if (el == ELASTIC_AGAIN) { /* a lost worker or node, or a larger world: not a --max_restarts restart */
            if (was_failed)
                record_failed_attempt(L, reason);
            next_attempt(L);
            resume = 1;
            continue;
        }
        if (strcmp(*status, DB_FAILED) || L->hist.restarts >= L->c->max_restarts || L->watch.loader_failed)
            break; /* (the loader's error is its input's: a restart would meet it again) */
        record_failed_attempt(L, reason);
        launch_clear_line(L);
        fprintf(stderr, "terarec: attempt %d failed: %s; restarting from the last checkpoint (%d of %d)\n",
                L->attempt, reason, L->hist.restarts + 1, L->c->max_restarts);
        L->hist.restarts++;
        next_attempt(L);
        resume = 1;
    }
    return end;
}

void launch_stop_ckpt(struct launch *L)
{
    int failed = 0;
    if (L->slurm && L->ckpt.pid > 0 && !L->ckpt.ended && !proc_poll(&L->ckpt))
        failed = slurm_step_signal(L, "terarec-ckpt", "INT", 0) != 0; /* SIGTERM would wait out --term_grace */
    /* an elastic run that lost a node: its store's task went with it, and the stores'
     * srun waits for it until the node is declared down; the others have ended */
    const int node_lost = L->el.on && L->el.nodes_lost;
    proc_stop(&L->ckpt, node_lost ? 2 : 10);
    /* only when it matters: the store's step did not end (srun had to be killed) */
    if (failed && !node_lost && L->ckpt.ended && WIFSIGNALED(L->ckpt.status) && WTERMSIG(L->ckpt.status) == SIGKILL)
        LOG_WARN("could not signal the SLURM step terarec-ckpt of job %s: its srun was killed; the stores on "
                 "other nodes end with the job",
                 L->slurm_job);
    launch_ctr_remove(L, &L->ckpt, "ckpt");
    launch_elastic_stores_stop(L);
}

/* Did SLURM take the requeue? (scontrol show job: a restart counted past this
 * attempt's, or a job pending or being requeued.) */
static int requeue_taken(struct launch *L)
{
    char cmd[128], line[8192];
    snprintf(cmd, sizeof cmd, "scontrol show job -o %s 2>/dev/null </dev/null", L->slurm_job);
    FILE *fp = popen(cmd, "r");
    if (!fp)
        return 0;
    int taken = 0;
    while (fgets(line, sizeof line, fp)) {
        const char *r = strstr(line, "Restarts="), *js = strstr(line, "JobState=");
        if (r && atoi(r + 9) > launch_env_int("SLURM_RESTART_COUNT", 0))
            taken = 1;
        if (js && (!strncmp(js + 9, "REQUEUE", 7) || !strncmp(js + 9, "PENDING", 7)))
            taken = 1;
    }
    pclose(fp);
    return taken;
}

void launch_requeue(struct launch *L, const char *status)
{
    /* SIGUSR1 (sbatch --signal) asks us to requeue; a SIGTERM under SLURM comes with
     * SLURM's own decision (requeue, preemption, time limit, scancel) */
    if (strcmp(status, DB_PREEMPTED) || !L->slurm || !L->c->requeue || (L->watch.stop_sig != SIGUSR1 && !L->el.requeue))
        return;
    char cmd[128];
    snprintf(cmd, sizeof cmd, "scontrol requeue %s", L->slurm_job);
    launch_record_event(L, "requeue", json_pack("{s:s}", "slurm_job_id", L->slurm_job));
    fprintf(stderr, "terarec: %s\n", cmd);
    launch_out_flush();
    fflush(stderr);
    /* a requeue ends the job's processes, scontrol's own too: killed by a signal
     * (or the shell saying so, exit 128+N) is not a failure, and an exit status that
     * is not 0 is one only when SLURM did not take the requeue */
    const int st = system(cmd);
    const int killed = st != -1 && (WIFSIGNALED(st) || (WIFEXITED(st) && WEXITSTATUS(st) > 128));
    if (st == 0 || killed || requeue_taken(L))
        return;
    char how[96];
    if (st == -1)
        snprintf(how, sizeof how, "could not run it");
    else
        proc_describe(st, how, sizeof how);
    LOG_ERROR("'%s' failed (%s): the run stays preempted (terarec train --resume %s continues it)", cmd, how, L->id);
}
