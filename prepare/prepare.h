/* prepare.h: `terarec data prepare`: Criteo TSV (plain or gzip) to the seed's
 * split-binary dataset with a feature_spec.yaml. */
#ifndef TR_PREPARE_H
#define TR_PREPARE_H

#ifdef __cplusplus
extern "C" {
#endif

/* Runs the subcommand with its own arguments (argv[0] = "prepare"); returns the
 * exit status, tr_status_exit_code() of how it ended: 0 ok, 2 bad usage or input,
 * 130 interrupted by SIGINT or SIGTERM, 1 any other failure. Installs its own
 * SIGINT/SIGTERM handlers for the run and restores the previous ones. */
int prepare_main(int argc, char **argv);

#ifdef __cplusplus
}
#endif
#endif
