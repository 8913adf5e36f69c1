/* main.c: terarec-loader entry point: parse options, catch SIGINT/SIGTERM (with a
 * worker attached the first one stops every rank after the next batch, a second
 * one more than a second later at once; the loader removes a ring no worker attached to) and SIGUSR1/SIGUSR2
 * (a checkpoint / an evaluation at the next training batch it produces), run, map
 * the status to the exit code (the one table, tr_status_exit_code). */
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "../common/log.h"
#include "../common/param.h"
#include "../common/version.h"
#include "loader.h"

static volatile int stop_flag;
static struct loader_requests requests;

static struct timespec first_stop;

static void on_signal(int sig)
{
    (void)sig;
    /* the first drains (loader_run), the second stops at once; one that follows the
     * first within a second is the same request twice (SLURM signals every process
     * of a job it ends, and terarec train passes the signal on too) */
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    if (stop_flag == 0) {
        first_stop = now;
        stop_flag = 1;
    } else if (stop_flag == 1 && (now.tv_sec - first_stop.tv_sec) * 1000000000L + (now.tv_nsec - first_stop.tv_nsec) >
                                     1000000000L) {
        stop_flag = 2;
    }
}

static void on_request(int sig)
{
    if (sig == SIGUSR1)
        requests.checkpoint = 1;
    else
        requests.evaluate = 1;
}

int main(int argc, char **argv)
{
    struct loader_cfg cfg = {0};
    int want = 0;
    tr_log_init();
    struct tr_opt opts[LOADER_MAX_OPTS];
    loader_opts_fill(&cfg, opts);
    enum tr_status rc = tr_opt_parse(opts, argc, argv, NULL, &want);
    if (rc == TR_OK && (want & TR_OPT_WANT_HELP)) {
        tr_opt_print_help(opts,
                          "usage: terarec-loader --ring NAME [options]\n\nreads the dataset once and serves "
                          "global batches to worker rank 0 (terarec-worker --loader shm:NAME)",
                          stdout);
    } else if (rc == TR_OK && (want & TR_OPT_WANT_VERSION)) {
        tr_version_print(stdout, "terarec-loader", want & TR_OPT_WANT_PARSABLE, NULL);
    } else if (rc == TR_OK) {
        struct sigaction sa;
        memset(&sa, 0, sizeof sa);
        sa.sa_handler = on_signal; /* no SA_RESTART: a wait returns at once */
        sigaction(SIGINT, &sa, NULL);
        sigaction(SIGTERM, &sa, NULL);
        sa.sa_handler = on_request;
        sa.sa_flags = SA_RESTART; /* a request must not cut a read or a wait short */
        sigaction(SIGUSR1, &sa, NULL);
        sigaction(SIGUSR2, &sa, NULL);
        rc = job_infer_dataset_type(&cfg.job, NULL, NULL); /* --dataset_path alone: its files say which type */
        if (rc == TR_OK)
            rc = job_apply_preset(&cfg.job); /* --preset: the flags not given */
        if (rc == TR_OK)
            rc = loader_run(&cfg, &stop_flag, &requests);
        if (tr_status_exit_code(rc) == 1)
            LOG_ERROR("loader failed: %s", tr_strerror(rc));
    }
    tr_opt_release(opts);
    return tr_status_exit_code(rc);
}
