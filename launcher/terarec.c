/* terarec.c: the subcommand table of the `terarec` front end and its help.
 * Subcommands own their options (each parses its own argv); this file only
 * dispatches, and its help prints every group's table (data, ckpt, runs) from the
 * group's own, so that a new subcommand is listed where it is added. */
#define TR_SUBSYS TR_SUB_INIT
#include "terarec.h"

#include <stdio.h>
#include <string.h>

#include "../common/check.h"
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
    void (*list)(FILE *fp); /* a group: its table of subcommands (NULL: a command) */
    const char *synopsis;   /* a group: how its commands are called */
};

static int cmd_data(int argc, char **argv);
static int cmd_version(int argc, char **argv);
static int cmd_help(int argc, char **argv);
static void data_list(FILE *fp);

static const struct subcmd top_cmds[] = {
    {"train", train_cmd_main, "train a model: start the checkpoint store, loader and workers, watch them, record the run",
     NULL, NULL},
    {"plan", plan_cmd_main, "per-worker memory of a training job for a model and a cluster shape", NULL, NULL},
    {"data", cmd_data, "dataset tools", data_list, "terarec data <command> [options]"},
    {"ckpt", ckpt_cmd_main, "checkpoint store tools", ckpt_cmd_table,
     "terarec ckpt <command> --checkpoint_dir URL_OR_PATH [options]"},
    {"runs", runs_cmd_main, "the run history", runs_cmd_table, "terarec runs <command> [RUN...] [--db PATH] [options]"},
    {"version", cmd_version, "the version, BLAS library and compute backends (--parsable: key=value lines)", NULL,
     NULL},
    {"help", cmd_help, "this list", NULL, NULL},
};

static const struct subcmd data_cmds[] = {
    {"prepare", prepare_main, "Criteo TSV (plain or .gz) -> split-binary dataset + feature_spec.yaml", NULL, NULL},
};

static void data_list(FILE *fp)
{
    for (size_t i = 0; i < TR_ARRAY_SIZE(data_cmds); i++)
        fprintf(fp, "  %-10s %s\n", data_cmds[i].name, data_cmds[i].help);
}

static void usage(FILE *fp, const char *prefix, const struct subcmd *cmds, size_t n)
{
    fprintf(fp, "usage: %s <command> [options]\n\ncommands:\n", prefix);
    for (size_t i = 0; i < n; i++)
        fprintf(fp, "  %-12s %s%s\n", cmds[i].name, cmds[i].help, cmds[i].list ? " (below)" : "");
    for (size_t i = 0; i < n; i++) {
        if (!cmds[i].list)
            continue;
        fprintf(fp, "\n%s:\n", cmds[i].synopsis);
        cmds[i].list(fp);
    }
    fprintf(fp, "\n'%s <command> --help' describes a command%s.\n", prefix,
            cmds == top_cmds ? ", 'terarec runs list --help' a subcommand's options" : "");
    if (cmds == top_cmds)
        fprintf(fp, "The programs it starts, beside it, each with its own --help: terarec-worker (one rank of\n"
                    "training), terarec-loader (the data loader), terarec-ckpt (the checkpoint store).\n");
}

static int dispatch(const char *prefix, const struct subcmd *cmds, size_t n, int argc, char **argv)
{
    if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
        usage(argc < 2 ? stderr : stdout, prefix, cmds, n);
        return tr_status_exit_code(argc < 2 ? TR_ERR_ARG : TR_OK);
    }
    for (size_t i = 0; i < n; i++)
        if (!strcmp(argv[1], cmds[i].name))
            return cmds[i].fn(argc - 1, argv + 1);
    if (!strcmp(argv[1], "help")) {
        usage(stdout, prefix, cmds, n);
        return tr_status_exit_code(TR_OK);
    }
    LOG_ERROR("'%s' is not a %s command", argv[1], prefix);
    LOG_HINT("run '%s --help' to list the commands", prefix);
    return tr_status_exit_code(TR_ERR_ARG);
}

static int cmd_data(int argc, char **argv)
{
    return dispatch("terarec data", data_cmds, TR_ARRAY_SIZE(data_cmds), argc, argv);
}

static int cmd_help(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    usage(stdout, "terarec", top_cmds, TR_ARRAY_SIZE(top_cmds));
    return tr_status_exit_code(TR_OK);
}

static int cmd_version(int argc, char **argv)
{
    int parsable = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--parsable")) {
            parsable = 1;
        } else if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            printf("usage: terarec version [--parsable]  (also terarec --version, -V)\n\n"
                   "the version, git hash, BLAS library and compute backends; --parsable: key=value lines\n");
            return tr_status_exit_code(TR_OK);
        } else {
            LOG_ERROR("terarec version: unknown argument '%s'", argv[i]);
            LOG_HINT("it takes only --parsable");
            return tr_status_exit_code(TR_ERR_ARG);
        }
    }
    tr_version_print(stdout, "terarec", parsable, kern_blas_info());
    kern_backends_print(stdout, parsable);
    return 0;
}

int terarec_main(int argc, char **argv)
{
    tr_log_init();
    if (argc >= 2 && (!strcmp(argv[1], "--version") || !strcmp(argv[1], "-V")))
        return cmd_version(argc - 1, argv + 1);
    return dispatch("terarec", top_cmds, TR_ARRAY_SIZE(top_cmds), argc, argv);
}
