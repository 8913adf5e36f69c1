/* ckpt_cmd.h: the `terarec ckpt` subcommands, over a checkpoint store named by a
 * URL (a terarec-ckpt server) or a local path (ckpt_store/client.h):
 *   list     the runs, or a run's manifests
 *   show     one manifest's header (run, step, world, split, config, state)
 *   verify   fetches and re-hashes every chunk a manifest names
 *   inspect  per-tensor sizes, dedup ratio, bytes added since the previous save
 *   export   a manifest as one safetensors file or a directory of .npy files
 *   gc       the store's garbage collection */
#ifndef TR_CKPT_CMD_H
#define TR_CKPT_CMD_H

#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Runs `terarec ckpt SUBCOMMAND ARGS` (argv[0] = "ckpt"); returns the exit
 * status (tr_status_exit_code): 0 done, 2 bad usage, an unknown run or step, or
 * (verify) a chunk that is missing or does not match, 1 another failure. */
int ckpt_cmd_main(int argc, char **argv);

/* The subcommands' table, "  NAME  what it does" a line, to fp (the front end's
 * help prints it under its own). */
void ckpt_cmd_table(FILE *fp);

#ifdef __cplusplus
}
#endif
#endif
