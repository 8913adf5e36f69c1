/* version.h: version, git hash and compiled-in features of every binary. */
#ifndef TR_VERSION_H
#define TR_VERSION_H

#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

/* "0.1.0" */
const char *tr_version(void);

/* Prints "prog 0.1.0 (git abc123)" and a features line, or with `parsable` one
 * "key:value" per line (version, git, cuda, nccl, mpi, blas, openmp). `blas` is
 * the runtime BLAS description, or NULL. */
void tr_version_print(FILE *fp, const char *prog, int parsable, const char *blas);

#ifdef __cplusplus
}
#endif
#endif
