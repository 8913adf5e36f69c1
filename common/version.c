/* version.c: what --version prints. Feature flags come only from the Makefile. */
#include "version.h"

#ifndef TR_VERSION
#define TR_VERSION "0.0.0"
#endif
#ifndef TR_GIT_HASH
#define TR_GIT_HASH "unknown"
#endif
#ifndef TR_BLAS_NAME
#define TR_BLAS_NAME "unknown"
#endif

#if defined(TR_HAVE_CUDA) && TR_HAVE_CUDA
#define FEAT_CUDA "yes"
#else
#define FEAT_CUDA "no"
#endif
#if defined(TR_HAVE_NCCL) && TR_HAVE_NCCL
#define FEAT_NCCL "yes"
#else
#define FEAT_NCCL "no"
#endif
#if defined(TR_HAVE_MPI) && TR_HAVE_MPI
#define FEAT_MPI "yes"
#else
#define FEAT_MPI "no"
#endif
#ifdef _OPENMP
#define FEAT_OMP "yes"
#else
#define FEAT_OMP "no"
#endif

const char *tr_version(void)
{
    return TR_VERSION;
}

void tr_version_print(FILE *fp, const char *prog, int parsable, const char *blas)
{
    if (parsable) {
        fprintf(fp, "version:%s\ngit:%s\ncuda:%s\nnccl:%s\nmpi:%s\nblas:%s\nopenmp:%s\n", TR_VERSION, TR_GIT_HASH,
                FEAT_CUDA, FEAT_NCCL, FEAT_MPI, TR_BLAS_NAME, FEAT_OMP);
        return;
    }
    fprintf(fp, "%s %s (git %s)\n", prog, TR_VERSION, TR_GIT_HASH);
    fprintf(fp, "features: cuda: %s nccl: %s mpi: %s openmp: %s blas: %s%s%s%s\n", FEAT_CUDA, FEAT_NCCL, FEAT_MPI,
            FEAT_OMP, TR_BLAS_NAME, blas ? " (" : "", blas ? blas : "", blas ? ")" : "");
}
