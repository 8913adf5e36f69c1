/* plan_cmd.h: the `terarec plan` subcommand. */
#ifndef TR_PLAN_CMD_H
#define TR_PLAN_CMD_H

#ifdef __cplusplus
extern "C" {
#endif

/* Runs `terarec plan ARGS` (argv[0] = "plan"); returns the exit status: 0 fits,
 * 1 a worker does not fit (or an internal error), 2 bad usage. */
int plan_main(int argc, char **argv);

#ifdef __cplusplus
}
#endif
#endif
