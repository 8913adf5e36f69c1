/* terarec.c: the subcommand table of the `terarec` front end and its help.
 * Subcommands own their options (each parses its own argv); this file only
 * dispatches. */
#define TR_SUBSYS TR_SUB_INIT
#include "terarec.h"

#include <stdio.h>
#include <string.h>

#include "../common/log.h"
#include "../common/version.h"
#include "../db/db.h"
#include "../kernels/kern.h"
#include "../prepare/prepare.h"
#include "ckpt_cmd.h"
#include "plan_cmd.h"
#include "train.h"

struct subcmd {
    const char *name;
    int (*fn)(int argc, char **argv);
    const char *help;
};

static int cmd_data(int argc, char **argv);

static const struct subcmd top_cmds[] = {
    {"train", train_cmd_main, "train a model: start the checkpoint store, loader and workers, watch them, record the run"},
    {"data", cmd_data, "dataset tools: 'terarec data prepare' turns Criteo TSV into the training format"},
    {"ckpt", ckpt_cmd_main, "checkpoint store tools: list, show, verify, inspect, export, gc"},
    {"plan", plan_cmd_main, "per-worker memory of a training job for a model and a cluster shape"},
    {"runs", runs_cmd_main, "run history: list, show, metrics, compare, export, rm, plot"},
};

static const struct subcmd data_cmds[] = {
    {"prepare", prepare_main, "Criteo TSV (plain or .gz) -> split-binary dataset + feature_spec.yaml"},
};

static void usage(FILE *fp, const char *prefix, const struct subcmd *cmds, size_t n)
{
    fprintf(fp, "usage: %s <command> [options]\n\ncommands:\n", prefix);
    for (size_t i = 0; i < n; i++)
        fprintf(fp, "  %-12s %s\n", cmds[i].name, cmds[i].help);
    fprintf(fp, "\n'%s <command> --help' describes a command.\n", prefix);
}

static int dispatch(const char *prefix, const struct subcmd *cmds, size_t n, int argc, char **argv)
{
    if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") || !strcmp(argv[1], "help")) {
        usage(argc < 2 ? stderr : stdout, prefix, cmds, n);
        return tr_status_exit_code(argc < 2 ? TR_ERR_ARG : TR_OK);
    }
    for (size_t i = 0; i < n; i++)
        if (!strcmp(argv[1], cmds[i].name))
            return cmds[i].fn(argc - 1, argv + 1);
    LOG_ERROR("'%s' is not a %s command", argv[1], prefix);
    LOG_HINT("run '%s --help' to list the commands", prefix);
    return tr_status_exit_code(TR_ERR_ARG);
}

static int cmd_data(int argc, char **argv)
{
    return dispatch("terarec data", data_cmds, sizeof data_cmds / sizeof data_cmds[0], argc, argv);
}

int terarec_main(int argc, char **argv)
{
    tr_log_init();
    if (argc >= 2 && (!strcmp(argv[1], "--version") || !strcmp(argv[1], "-V") || !strcmp(argv[1], "version"))) {
        int parsable = argc >= 3 && !strcmp(argv[2], "--parsable");
        tr_version_print(stdout, "terarec", parsable, kern_blas_info());
        kern_backends_print(stdout, parsable);
        return 0;
    }
    return dispatch("terarec", top_cmds, sizeof top_cmds / sizeof top_cmds[0], argc, argv);
}
