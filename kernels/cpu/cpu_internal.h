/* cpu_internal.h: the CPU backend's op implementations, shared by the files of
 * kernels/cpu/ and kernels/backend_cpu.c only. Contracts are those of kern.h. */
#ifndef TR_KERN_CPU_INTERNAL_H
#define TR_KERN_CPU_INTERNAL_H

#include "../kern.h"

#ifdef _OPENMP
#include <omp.h>
#endif

/* A backend instance's cache of GEMM primitives (oneDNN matmuls with a fused
 * epilogue), made on first use; kern_cpu_gemm_cache_free releases it. */
struct kern_cpu_gemm_cache;
enum tr_status kern_cpu_gemm(struct kern_cpu_gemm_cache **cache, int threads, const struct kern_gemm_args *a);
void kern_cpu_gemm_cache_free(struct kern_cpu_gemm_cache **cache);
enum tr_status kern_cpu_bias_act_fwd(const struct kern_bias_act_fwd_args *a);
enum tr_status kern_cpu_bias_act_bwd(const struct kern_bias_act_bwd_args *a);
/* Host memory a bias_act_bwd (or a GEMM's backward epilogue) of (rows, cols)
 * allocates for its call: the chunks' partial sums of the bias gradient. */
size_t kern_cpu_bias_act_bwd_call_bytes(int64_t rows, int64_t cols);
enum tr_status kern_cpu_emb_fwd(const struct kern_emb_fwd_args *a, int n);
enum tr_status kern_cpu_emb_update(const struct kern_emb_update_args *a, int n);
enum tr_status kern_cpu_emb_rowsq(const struct kern_emb_update_args *a, int n);
size_t kern_cpu_emb_update_ws_bytes(int64_t nidx, int64_t width, int ntables, int threads);
enum tr_status kern_cpu_interact_fwd(const struct kern_interact_fwd_args *a);
enum tr_status kern_cpu_interact_bwd(const struct kern_interact_bwd_args *a);
/* Host memory an interaction (either direction) of n vectors of width d allocates
 * for its call on `threads` threads: one buffer per thread. */
size_t kern_cpu_interact_call_bytes(int n, int d, int threads);
enum tr_status kern_cpu_bce(const struct kern_bce_args *a);
enum tr_status kern_cpu_dense_update(const struct kern_dense_update_args *a);
enum tr_status kern_cpu_fill(const struct kern_fill_args *a);
enum tr_status kern_cpu_copy_rows(const struct kern_copy_rows_args *a, int n);
enum tr_status kern_cpu_move_rows(const struct kern_move_rows_args *a, int n);
enum tr_status kern_cpu_sumsq(const struct kern_sumsq_args *a, int n);
enum tr_status kern_cpu_cross_fwd(const struct kern_cross_fwd_args *a);
enum tr_status kern_cpu_cross_bwd(const struct kern_cross_bwd_args *a);
enum tr_status kern_cpu_mark_rows(const struct kern_mark_rows_args *a, int n);
enum tr_status kern_cpu_metrics(const struct kern_metrics_args *a);
/* Host memory a metrics call on n samples allocates for its duration. */
size_t kern_cpu_metrics_call_bytes(int64_t n);
void kern_cpu_blas_set_threads(int threads);

const char *kern_cpu_blas_name(void);

/* Reads index i of an I32 or I64 index array. */
static inline int64_t kern_cpu_idx(const void *idx, enum kern_dtype t, int64_t i)
{
    return t == KERN_I64 ? ((const int64_t *)idx)[i] : (int64_t)((const int32_t *)idx)[i];
}

/* This thread's number and the team size inside an OpenMP parallel region (0 and
 * 1 outside one, or without OpenMP). */
static inline void kern_cpu_thread(int64_t *t, int64_t *nt)
{
#ifdef _OPENMP
    *t = omp_get_thread_num();
    *nt = omp_get_num_threads();
#else
    *t = 0;
    *nt = 1;
#endif
}

#endif
