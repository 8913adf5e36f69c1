/* prepare.h: `terarec data prepare`: Criteo TSV (plain or gzip) to the seed's
 * split-binary dataset with a feature_spec.yaml. */
#ifndef TR_PREPARE_H
#define TR_PREPARE_H

#ifdef __cplusplus
extern "C" {
#endif

/* Runs the subcommand with its own arguments (argv[0] = "prepare"); returns the
 * exit status (0 ok, 2 bad usage or input, 1 other failure). */
int prepare_main(int argc, char **argv);

#ifdef __cplusplus
}
#endif
#endif
