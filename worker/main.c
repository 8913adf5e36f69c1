/* main.c: terarec-worker entry point: parse options, run, map the status to the
 * exit code (the one table, tr_status_exit_code). A worker that reports to
 * terarec train (--events_addr) leaves SIGTERM to it: SLURM sends SIGTERM to every
 * process of a job it preempts or requeues, and the launcher then stops all ranks
 * at the same step, after a checkpoint (through the loader); a rank that died of
 * it would lose that checkpoint. A training run without an OpenMP wait policy
 * starts itself again with a passive one (common/cpus.h). */
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "../common/cpus.h"
#include "../common/log.h"
#include "../common/param.h"
#include "../common/version.h"
#include "../kernels/kern.h"
#include "report.h"
#include "worker.h"

static void on_term(int sig)
{
    static const char msg[] = "terarec-worker: SIGTERM: left to terarec train, which stops every rank after the "
                              "next batch and a checkpoint\n";
    (void)sig;
    if (write(2, msg, sizeof msg - 1) < 0) {
    }
}

static void on_launcher_gone(const char *addr)
{
    LOG_ERROR("the launcher at '%s' is gone (its connection closed): this worker ends", addr);
    _exit(1);
}

int main(int argc, char **argv)
{
    struct worker_cfg cfg = {0};
    int want = 0;
    tr_log_init();
    struct tr_opt opts[WORKER_MAX_OPTS];
    worker_opts_fill(&cfg, opts);
    enum tr_status rc = tr_opt_parse(opts, argc, argv, NULL, &want);
    if (rc == TR_OK && (want & TR_OPT_WANT_HELP)) {
        tr_opt_print_help(opts, "usage: terarec-worker [options]\n\ntrains a DLRM model (one process per GPU or CPU slot)",
                          stdout);
    } else if (rc == TR_OK && (want & TR_OPT_WANT_VERSION)) {
        tr_version_print(stdout, "terarec-worker", want & TR_OPT_WANT_PARSABLE, kern_blas_info());
        kern_backends_print(stdout, want & TR_OPT_WANT_PARSABLE);
    } else if (rc == TR_OK) {
        tr_cpus_passive_wait_restart(argv); /* OpenMP threads that wait passively (cpus.h) */
        if (cfg.events_addr && *cfg.events_addr) {
            struct sigaction sa;
            memset(&sa, 0, sizeof sa);
            sa.sa_handler = on_term;
            sa.sa_flags = SA_RESTART;
            sigaction(SIGTERM, &sa, NULL);
            report_on_launcher_gone(on_launcher_gone);
            report_forward_logs(); /* warnings reach the console too */
        }
        rc = worker_opts_resolve(&cfg);
        if (rc == TR_OK)
            rc = worker_run(&cfg, NULL);
        if (tr_status_exit_code(rc) == 1) /* bad input was already reported in one line */
            LOG_ERROR("training failed: %s", tr_strerror(rc));
    }
    tr_opt_release(opts);
    return tr_status_exit_code(rc);
}
