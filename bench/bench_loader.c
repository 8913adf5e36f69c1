/* bench_loader.c: how fast the data path produces batches, without training: the
 * in-process reader (loader_svc/source.h, what terarec-loader runs as its producer)
 * cuts training batches from a dataset for at least --seconds or one epoch, and the
 * program prints samples/s, decoded batch bytes/s (the batch block payload the
 * ring carries) and file bytes/s, with --threads decode threads. It also prints the
 * bytes this process fetched from storage during the pass (/proc/self/io
 * read_bytes), divided by the training split's size: the read amplification of one
 * epoch (0 when the files were already in the page cache; drop the caches first to
 * measure it). bench/loader_bench.sh runs it against the trainer's consumption.
 *
 *   bench-bench_loader --dataset_type split_binary --dataset_path D --batch_size B
 *                      [--threads T] [--seconds S] [--shuffle_samples] ... */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../common/check.h"
#include "../common/clock.h"
#include "../common/job.h"
#include "../common/log.h"
#include "../common/param.h"
#include "../loader_svc/batch.h"
#include "../loader_svc/source.h"

#ifdef _OPENMP
#include <omp.h>
#endif

/* read_bytes of /proc/self/io, or -1 when it cannot be read. */
static long long storage_bytes(void)
{
    FILE *f = fopen("/proc/self/io", "r");
    if (!f)
        return -1;
    char line[128];
    long long v = -1;
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "read_bytes: %lld", &v) == 1)
            break;
    fclose(f);
    return v;
}

/* Bytes one sample occupies in the split-binary files (label, float16 numerical,
 * categorical ids of the width the FeatureSpec rule gives their cardinality). */
static int64_t file_bytes_per_sample(const struct source *s)
{
    int64_t b = 1 + 2 * (int64_t)s->num_features;
    for (int t = 0; t < s->ntables; t++)
        b += s->rows[t] <= 128 ? 1 : s->rows[t] <= 32768 ? 2 : 4;
    return b;
}

int main(int argc, char **argv)
{
    struct job_cfg job = {0};
    int threads = 1, want = 0;
    double seconds = 5.0;
    tr_log_init();
    struct tr_opt opts[JOB_MAX_OPTS + 3];
    int k = job_opts(&job, JOB_DATA | JOB_BATCH | JOB_TRAIN, opts);
    opts[k++] = (struct tr_opt){"threads", TR_OPT_INT, &threads, "1", "decode threads (OpenMP)", 1, 4096, NULL,
                                NULL, 0, NULL, 0};
    opts[k++] = (struct tr_opt){"seconds", TR_OPT_DOUBLE, &seconds, "5",
                                "run at least this long, and at least one epoch", 0, 1e6, NULL, NULL, 0, NULL, 0};
    opts[k] = (struct tr_opt){NULL, TR_OPT_END, NULL, NULL, NULL, 0, 0, NULL, NULL, 0, NULL, 0};
    enum tr_status rc = tr_opt_parse(opts, argc, argv, NULL, &want);
    if (rc == TR_OK && (want & TR_OPT_WANT_HELP)) {
        tr_opt_print_help(opts, "usage: bench-bench_loader [options]\n\nbatches/s of the data path, no training",
                          stdout);
        tr_opt_release(opts);
        return 0;
    }
    if (rc == TR_OK)
        rc = job_check(&job, JOB_DATA | JOB_BATCH);
#ifdef _OPENMP
    omp_set_num_threads(threads);
#endif
    struct source s = {0};
    struct batch *b = NULL;
    if (rc == TR_OK)
        rc = source_open_reader(&s, &job);
    if (rc == TR_OK)
        rc = batch_new(s.batch[BATCH_TRAIN], s.num_features, s.ntables, s.hot, &b);
    if (rc != TR_OK) {
        source_close(&s);
        tr_opt_release(opts);
        return tr_status_exit_code(rc);
    }
    const int64_t payload = batch_bytes(1, s.num_features, s.ntables, s.hot) - (int64_t)sizeof(struct batch);
    const long long io0 = storage_bytes();
    const double t0 = tr_clock_now();
    int64_t samples = 0, batches = 0;
    double first_epoch = -1;
    long long io_epoch = -1;
    while (rc == TR_OK) {
        rc = source_next(&s, b);
        samples += b->n;
        batches++;
        if (batches == s.nbatches[BATCH_TRAIN]) {
            first_epoch = tr_clock_now() - t0;
            io_epoch = storage_bytes();
        }
        if (batches >= s.nbatches[BATCH_TRAIN] && tr_clock_now() - t0 >= seconds)
            break;
    }
    const double dt = tr_clock_now() - t0;
    if (rc == TR_OK) {
        const int64_t split = s.nsamples[BATCH_TRAIN] * file_bytes_per_sample(&s);
        printf("data: %s, %lld train samples, %.3f GB of train files, batch %lld, %d decode thread(s)\n", s.desc,
               (long long)s.nsamples[BATCH_TRAIN], split / 1e9, (long long)s.batch[BATCH_TRAIN], threads);
        printf("loader: %lld batches in %.3f s: %.0f samples/s, %.3f GB/s of decoded batches, %.3f GB/s of files\n",
               (long long)batches, dt, samples / dt, samples * (double)payload / dt / 1e9,
               samples * (double)file_bytes_per_sample(&s) / dt / 1e9);
        if (io0 >= 0 && io_epoch >= 0)
            printf("read: first epoch %.3f s, %lld bytes fetched from storage = %.2f x the train files "
                   "(0 when they were in the page cache)\n",
                   first_epoch, io_epoch - io0, split ? (double)(io_epoch - io0) / (double)split : 0.0);
        printf("result samples_per_s=%.0f decoded_gb_per_s=%.3f\n", samples / dt, samples * (double)payload / dt / 1e9);
    }
    batch_free(&b);
    source_close(&s);
    tr_opt_release(opts);
    return tr_status_exit_code(rc);
}
