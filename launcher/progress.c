/* progress.c: what terarec train prints: the progress line (redrawn in place on
 * a terminal, one line a report otherwise), --json's lines, and the run's first
 * and last lines. It reads the state the reports fill (intake.c) and decides
 * nothing about the run. */
#define TR_SUBSYS TR_SUB_INIT
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../common/alloc.h"
#include "../db/db.h"
#include "launch_internal.h"

/* Flushes stdout. A reader that went away (`terarec train | head -1`: SIGPIPE is
 * ignored, the write fails with EPIPE) is not a request to stop: the run goes on
 * and is recorded; what it would print goes to /dev/null from then on (said once
 * on stderr). */
void launch_out_flush(void)
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

void launch_clear_line(struct launch *L)
{
    if (L->prog.tty && L->prog.drawn) {
        fputs("\r\033[K", stdout);
        launch_out_flush();
        L->prog.drawn = 0;
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

void launch_show_progress(struct launch *L, int final)
{
    if (L->c->json)
        return;
    double rate = L->prog.samples_per_s;
    double steps_per_s = rate > 0 && L->c->w.job.batch_size > 0 ? rate / (double)L->c->w.job.batch_size : 0;
    char eta[32];
    fmt_eta(steps_per_s > 0 && L->prog.total > 0 ? (double)(L->prog.total - L->prog.step) / steps_per_s : NAN, eta, sizeof eta);
    char line[256];
    int k = snprintf(line, sizeof line, "step %lld", (long long)L->prog.step);
    if (L->prog.total > 0)
        k += snprintf(line + k, sizeof line - (size_t)k, "/%lld", (long long)L->prog.total);
    k += snprintf(line + k, sizeof line - (size_t)k, "  %.0f samples/s  loss %.5f", rate, L->prog.loss);
    if (L->prog.have_auc)
        k += snprintf(line + k, sizeof line - (size_t)k, "  auc %.5f", L->prog.auc);
    if (L->prog.total > 0 && !final)
        snprintf(line + k, sizeof line - (size_t)k, "  ETA %s", eta);
    if (L->prog.tty) {
        printf("\r\033[K%s", line);
        L->prog.drawn = 1;
        if (final) {
            putchar('\n');
            L->prog.drawn = 0;
        }
    } else {
        printf("%s\n", line);
    }
    launch_out_flush();
}

void launch_json_out(struct launch *L, const char *type, json_t *o)
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
    launch_out_flush();
    free(s);
    json_decref(o);
}

/* " (continues RUN from its checkpoint of step N)" for a --resume run that does, else "". */
static const char *continues(const struct launch *L, char *buf, size_t n)
{
    *buf = 0;
    if (*L->hist.resumed_from && *L->hist.from_ckpt_run)
        snprintf(buf, n, " (continues run %s from its checkpoint of step %lld)", L->hist.resumed_from,
                 (long long)L->hist.from_step);
    return buf;
}

void launch_say_start(struct launch *L)
{
    char cont[160];
    if (L->c->json)
        launch_json_out(L, "start", json_pack("{s:s,s:s,s:i,s:i}", "db", db_path(L->hist.db), "run_dir", L->run_dir,
                                              "workers", L->world, "nodes", L->nodes));
    else
        printf("terarec: run %s%s%s: %d worker%s on %d node%s%s%s; logs in %s\n", L->id,
               L->hist.resumed_same_row ? " (requeued: resuming)" : "", continues(L, cont, sizeof cont), L->world,
               L->world == 1 ? "" : "s",
               L->nodes, L->nodes == 1 ? "" : "s", L->slurm ? ", SLURM job " : "", L->slurm ? L->slurm_job : "",
               L->run_dir);
    launch_out_flush();
}

void launch_say_end(struct launch *L, const char *status, const char *reason)
{
    if (L->c->json) {
        launch_json_out(L, "end", json_pack("{s:s,s:s,s:I}", "status", status, "reason", reason, "step",
                                            (json_int_t)L->prog.step));
    } else {
        fprintf(!strcmp(status, DB_COMPLETED) ? stdout : stderr, "terarec: run %s %s%s%s\n", L->id, status,
                *reason ? ": " : "", reason);
        printf("run history: %s (terarec runs show %s)\n", db_path(L->hist.db), L->id);
    }
    launch_out_flush();
}
