/* prepare_internal.h: the pieces of `terarec data prepare` shared by the
 * prepare/prepare*.c files (nothing outside prepare/ but its unit test includes it):
 * the Criteo line parser (prepare_parse.c), the chunked multi-threaded text
 * pipeline (prepare_pipe.c), exact frequency counting with spilled sorted runs
 * and the dictionaries built from it (prepare_count.c), the seeded shuffle
 * (prepare_shuffle.c), the column sinks (prepare_io.c), and the run's options
 * and state that prepare.c shares with its passes (prepare_pass.c) and its
 * output (prepare_output.c). */
#ifndef TR_PREPARE_INTERNAL_H
#define TR_PREPARE_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "../common/param.h"
#include "../common/status.h"

#ifdef __cplusplus
extern "C" {
#endif

#define PREPARE_NUM 13                 /* I1..I13 */
#define PREPARE_CAT 26                 /* C1..C26 */
#define PREPARE_FIELDS (1 + PREPARE_NUM + PREPARE_CAT)
#define PREPARE_NCOL (2 + PREPARE_CAT) /* output columns: label, numerical, cat_0..cat_25 */
#define PREPARE_COL_LABEL 0
#define PREPARE_COL_NUM 1
#define PREPARE_COL_CAT0 2
#define PREPARE_MAX_ERRS 5             /* malformed lines shown (and kept per chunk) */
#define PREPARE_MAX_LINE (256u << 20)  /* a chunk grows up to this to hold one line */

/* ---- parsing (prepare_parse.c) --------------------------------------------------- */

/* One parsed line. cat[i] is the integer value of the hex string of C(i+1),
 * meaningful only when bit i of cat_present is set (empty field = missing). */
#define PREPARE_LIST_MAX 8192 /* values of all list columns of one line together */

struct prepare_row {
    uint64_t cat[PREPARE_CAT];
    uint32_t cat_present;
    uint16_t num[PREPARE_NUM]; /* float16 bits of the numerical transform (0 for missing) */
    uint8_t label;          /* 0 or 1 */
    /* list columns (prepare_parse_set_lists): column i's values are
     * list_v[list_at[i] .. list_at[i] + list_n[i]); cat[i] and its present bit 0 */
    uint16_t list_n[PREPARE_CAT];
    uint32_t list_at[PREPARE_CAT];
    uint64_t list_v[PREPARE_LIST_MAX];
};

enum prepare_bad {
    PREPARE_LINE_OK = 0,
    PREPARE_BAD_FIELDS, /* not 40 tab-separated fields */
    PREPARE_BAD_LABEL,  /* label not "0" or "1" */
    PREPARE_BAD_INT,    /* I_j not an integer */
    PREPARE_BAD_RANGE,  /* I_j outside int64 */
    PREPARE_BAD_HEX,    /* C_i not 1 to 16 hex digits (a list column: not such values separated) */
    PREPARE_BAD_LIST,   /* a list column with more than max_hotness values */
};

/* The numerical transform of integer x (missing values give 0 under both):
 * NVIDIA  the seed's: float16 bits of (float)ln(x + 3) when x + 3 > 0, else 0
 * LOG1P   facebookresearch/dlrm, TorchRec, MLPerf: (float)ln(1 + max(x, 0))
 * each computed in double, rounded to float, then to half (round-to-nearest-even). */
enum prepare_num_transform { PREPARE_NUM_NVIDIA = 0, PREPARE_NUM_LOG1P = 1 };

/* Selects the transform for every later parse and builds its table of halves
 * for small x. Call before any thread parses (not thread-safe); a second call
 * with the same transform does nothing. */
void prepare_parse_init_transform(enum prepare_num_transform t);
/* prepare_parse_init_transform(PREPARE_NUM_NVIDIA). */
void prepare_parse_init(void);

/* Makes the columns of mask (bit i: C(i+1)) lists for every later parse: each a
 * field of 0 to max_hotness hex values separated by sep (an empty field: an
 * empty list; max_hotness * columns <= PREPARE_LIST_MAX). Call before any thread
 * parses (not thread-safe); mask 0 (the default): no lists. */
void prepare_parse_set_lists(uint32_t mask, char sep, int max_hotness);

/* The selected transform of integer x, as float16 bits. Thread-safe after
 * prepare_parse_init*. */
uint16_t prepare_num_half(int64_t x);

/* Parses one line s[0, n) (no '\n'; a trailing '\r' must already be removed).
 * Returns PREPARE_LINE_OK and fills *row, or the reason the line is malformed with
 * *field set to the 0-based field it concerns (0 label, 1..13 I1..I13, 14..39
 * C1..C26) or to the number of fields found for PREPARE_BAD_FIELDS. Thread-safe. */
enum prepare_bad prepare_parse_line(const char *s, size_t n, struct prepare_row *row, int *field);

/* Writes "reason" text for a malformed line into buf (always NUL-terminated),
 * e.g. "I3: '1.5' is not an integer". */
void prepare_describe_bad(const char *s, size_t n, enum prepare_bad why, int field, char *buf, size_t cap);

/* ---- the text pipeline (prepare_pipe.c) -------------------------------------------- */

struct prepare_input {
    const char *path; /* borrowed from argv */
    int64_t bytes;    /* size on disk (compressed size for gzip) */
};

struct prepare_err {
    int64_t line;     /* 1-based, relative to the chunk's first line */
    char msg[192];
};

/* One chunk of whole lines of one input file, and what a work function made of it. */
struct prepare_chunk {
    char *buf;        /* (len) text, whole lines; the last may lack its '\n' at end of file */
    size_t cap, len;
    int file;         /* index into the inputs */
    int64_t seq;      /* position in the stream of chunks */
    int state;        /* pipeline bookkeeping */
    /* results, filled by the work function */
    int64_t nlines, nempty, nbad, nrows;
    int nerrs;
    struct prepare_err errs[PREPARE_MAX_ERRS];
    /* rows in column form, filled by the write pass */
    uint8_t *col[PREPARE_NCOL]; /* (rows_cap * width[c]) each */
    int64_t rows_cap;
};

typedef enum tr_status (*prepare_work_fn)(void *ctx, int thread, struct prepare_chunk *c);
typedef enum tr_status (*prepare_consume_fn)(void *ctx, struct prepare_chunk *c);

struct prepare_pipe_cfg {
    const struct prepare_input *inputs;
    int ninputs;
    int threads;                /* work threads (>= 1) */
    size_t chunk_size;          /* bytes of text per chunk (a chunk grows for a longer line) */
    prepare_work_fn work;       /* runs on a work thread; `thread` in [0, threads) */
    prepare_consume_fn consume; /* runs on the calling thread, chunks in input order */
    void *ctx;
    const char *label;          /* progress bar label */
    int progress;               /* draw a progress bar on stderr */
};

/* Reads the inputs in order (plain or gzip, detected by the magic bytes), cuts
 * them into chunks at line ends, runs cfg->work on `threads` threads and
 * cfg->consume on the calling thread in input order. *tsv_bytes receives the
 * uncompressed bytes read. Stops at the first error of any stage and returns it:
 * TR_ERR_IO (read error), TR_ERR_FORMAT (corrupt gzip, a line over
 * PREPARE_MAX_LINE), TR_ERR_NOMEM, TR_ERR_SYS (a thread or lock could not be
 * created), TR_ERR_INTERRUPTED (prepare_interrupted was set by a signal), or
 * what a callback returned. Errors are logged naming the file; an interruption
 * is not logged (the caller says it once). */
enum tr_status prepare_pipe_run(const struct prepare_pipe_cfg *cfg, int64_t *tsv_bytes) TR_WUR;

/* Set by the SIGINT/SIGTERM handler that prepare_main installs. */
extern volatile int prepare_interrupted;

/* Erases the progress bar line on stderr if one is shown (call before logging
 * from the consuming thread). */
void prepare_progress_clear(void);
/* Draws "label [####....] 45%  suffix" over the current stderr line. */
void prepare_progress_draw(const char *label, double frac, const char *suffix);

/* ---- counting and dictionaries (prepare_count.c) ------------------------------------- */

/* A key with a 64-bit payload: a 16-byte record of kern_sort_radix (kernels/sort.h),
 * which sorts by the key in its first 8 bytes. */
struct prepare_kv {
    uint64_t key, val;
};
_Static_assert(sizeof(struct prepare_kv) == 16 && offsetof(struct prepare_kv, key) == 0,
               "struct prepare_kv is a 16-byte kern_sort_radix record keyed by its first uint64");

struct prepare_counter;

/* Per-thread exact counters of (column, value) for `threads` threads, together
 * using about budget bytes of hash tables (plus as much again while a spill
 * sorts); when a thread's tables are full they are spilled to scratch_dir as a
 * sorted run of (value, count) per column. scratch_dir is borrowed and must
 * outlive the counter. TR_ERR_NOMEM, TR_ERR_SYS (the lock). */
enum tr_status prepare_counter_new(int threads, int64_t budget, const char *scratch_dir,
                                   struct prepare_counter **out) TR_WUR;
/* The columns of mask are lists (prepare_parse_set_lists): each value of their
 * lists is counted. Call before counting. */
void prepare_counter_set_lists(struct prepare_counter *pc, uint32_t mask);
/* Counts the present categorical values of row. Call only from thread `thread`.
 * TR_ERR_IO / TR_ERR_NOMEM when a spill fails. */
enum tr_status prepare_counter_add(struct prepare_counter *pc, int thread, const struct prepare_row *row) TR_WUR;
/* Number of runs spilled to disk so far. */
int prepare_counter_spills(const struct prepare_counter *pc);
void prepare_counter_free(struct prepare_counter **pp);

/* Value -> id maps of the threshold mode, one per column. */
struct prepare_dict {
    uint64_t *keys[PREPARE_CAT]; /* (mask + 1) open addressing */
    uint32_t *ids[PREPARE_CAT];  /* (mask + 1); 0 = empty slot */
    uint64_t mask[PREPARE_CAT];
    int64_t nkept[PREPARE_CAT];  /* K: ids 1..K are used, cardinality K + 1 */
};

/* Merges every thread's tables and spilled runs into exact counts, keeps the
 * values with count >= threshold and numbers them 1..K by descending count,
 * ties by ascending value. The counter is emptied. TR_ERR_IO, TR_ERR_NOMEM,
 * TR_ERR_RANGE (more than 2^31 - 2 kept values in a column). */
enum tr_status prepare_counter_finish(struct prepare_counter *pc, int64_t threshold, struct prepare_dict *d) TR_WUR;

/* The id of value v in column c: 1..K, or 0 when it was not kept. Thread-safe. */
uint32_t prepare_dict_lookup(const struct prepare_dict *d, int c, uint64_t v);
void prepare_dict_release(struct prepare_dict *d);

/* ---- shuffle (prepare_shuffle.c) -------------------------------------------------------- */

/* The permutation: train row g (0-based, input order) gets the key
 * prepare_shuffle_key(s, g) with s = prepare_shuffle_seed(seed); the output holds
 * the rows by ascending key. Both maps are bijections, so keys never tie. */
uint64_t prepare_shuffle_seed(uint64_t seed);
uint64_t prepare_shuffle_key(uint64_t s, uint64_t g);

struct prepare_shuffle_cfg {
    const char *src_dir;     /* the staged column files, input order */
    const char *dst_dir;     /* where the shuffled column files go */
    const char *scratch_dir; /* bucket files */
    const char *const *names; /* (PREPARE_NCOL) file names */
    const size_t *width;     /* (PREPARE_NCOL) bytes per row of each column */
    int64_t nrows;
    uint64_t seed;
    int64_t memory_limit;
    int progress;
};

/* Writes the columns of src_dir to dst_dir in the order of the permutation
 * above, and deletes the source files. Uses about memory_limit bytes: when the
 * rows do not fit, they are first scattered into 2^k bucket files by the top
 * bits of their keys (each bucket then fits), which gives the same output. *bytes
 * receives the bytes written. TR_ERR_IO, TR_ERR_NOMEM, TR_ERR_FORMAT (a source
 * file of the wrong size), TR_ERR_INTERRUPTED (prepare_interrupted was set). */
enum tr_status prepare_shuffle(const struct prepare_shuffle_cfg *cfg, int *nbuckets, int64_t *bytes) TR_WUR;

/* ---- column sinks (prepare_io.c) ------------------------------------------------------------- */

/* The PREPARE_NCOL output files of one split. Used from one thread (the consumer). */
struct prepare_sink {
    int fd[PREPARE_NCOL];
    char *path[PREPARE_NCOL];
    int64_t rows;
    int64_t bytes;
};

/* Opens (creates, truncates) dir/names[c] for every column. *s must be closed
 * with prepare_sink_close whatever the result. TR_ERR_IO, TR_ERR_NOMEM. */
enum tr_status prepare_sink_open(struct prepare_sink *s, const char *dir, const char *const *names) TR_WUR;
/* Appends rows [r0, r0 + n) of chunk c (columns of the given widths). */
enum tr_status prepare_sink_put(struct prepare_sink *s, const struct prepare_chunk *c, int64_t r0, int64_t n,
                                const size_t *width) TR_WUR;
/* Moves the last n rows of `from` to the end of `to` (copy, then truncate). */
enum tr_status prepare_sink_move_tail(struct prepare_sink *from, struct prepare_sink *to, int64_t n,
                                      const size_t *width) TR_WUR;
/* Closes the files (keeping them); TR_ERR_IO if a close fails. Safe twice. */
enum tr_status prepare_sink_close(struct prepare_sink *s) TR_WUR;

/* ---- multi-hot materialization (prepare_multihot.c) ------------------------------------------ */

struct prepare_mh_cfg {
    const char *dir;      /* the staged output: dir/train/cat_<t>.bin, dir/test/cat_<t>.bin */
    const int64_t *card;  /* (PREPARE_CAT) rows of each table */
    const int64_t *sizes; /* (PREPARE_CAT) --multi_hot_sizes: ids a sample; 1 leaves a table one-hot */
    const size_t *width;  /* (PREPARE_CAT) bytes of an id of each table (its dtype) */
    uint32_t seed;        /* --multi_hot_seed: the RandomState seed (the reference's 0) */
    int progress;
};

/* TR_ERR_ARG (logged, naming the table and the flag) when a table's lookup (rows x
 * (size - 1) int32) would not fit memory_limit. */
enum tr_status prepare_multihot_check(const int64_t *card, const int64_t *sizes, int64_t memory_limit) TR_WUR;

/* Rewrites the one-hot id files of every table of size > 1 as size ids a row, the
 * reference's rule (prepare_multihot.c); *bytes receives the bytes written.
 * TR_ERR_IO, TR_ERR_NOMEM, TR_ERR_FORMAT (an id outside its table, logged),
 * TR_ERR_INTERRUPTED. */
enum tr_status prepare_multihot(const struct prepare_mh_cfg *c, int64_t *bytes) TR_WUR;

/* ---- list columns (prepare_lists.c) ------------------------------------------------------------ */

/* Rewrites each list column (bit i of lists) of dir/train and dir/test, rows of a
 * u32 length and max_hotness ids of idw[i] bytes, as its ids one after the other
 * (cat_<i>.bin) and its lengths (cat_<i>_lengths.bin, the type
 * feature_spec_lengths_dtype gives the longest list); most[i] receives the longest
 * (at least 1; 0 for the other columns), *bytes the bytes written. TR_ERR_IO,
 * TR_ERR_NOMEM, TR_ERR_INTERRUPTED. */
enum tr_status prepare_lists_compact(const char *dir, uint32_t lists, const size_t *idw, int max_hotness,
                                     int32_t *most, int64_t *bytes) TR_WUR;

/* ---- the run (prepare.c), its passes (prepare_pass.c), its output (prepare_output.c) ---- */

/* The options, as prepare.c's table parses them. */
struct prepare_opts {
    char *output;
    int64_t frequency_threshold;
    int64_t max_ind_range;
    int test_files;
    double test_fraction;
    int shuffle;
    int64_t shuffle_seed;
    int threads;
    int64_t memory_limit;
    int64_t chunk_size;
    int strict, force, progress;
    int numerical_transform;   /* enum prepare_num_transform */
    int hash_missing;          /* HASH_MISSING_* of prepare.c */
    struct tr_i64_list multi_hot_sizes; /* empty: one-hot output */
    struct tr_i64_list list_columns;    /* cat columns whose fields are lists (multi-hot TSV) */
    char *list_separator;
    int max_hotness;                    /* the most values of a list */
    int multi_hot_distribution; /* 0: uniform (the only one) */
    int64_t multi_hot_seed;
};

/* The passes over the text: rows (with --test_fraction in threshold mode: how
 * many rows, and where each chunk's rows start), count (threshold mode: the
 * vocabulary), write. */
enum prepare_pass { PREPARE_PASS_ROWS, PREPARE_PASS_COUNT, PREPARE_PASS_WRITE };

/* State shared by the work threads (read-only during a pass) and the consumer. */
struct prepare_ctx {
    const struct prepare_opts *o;
    const struct prepare_input *inputs;
    int ninputs;
    int hash;                  /* hash mode */
    int pass;
    int reserved;              /* hash mode: id 0 only for missing, 1 + h % (R - 1) for the rest */
    uint64_t M;                /* hash mode modulus (R, or R - 1 when reserved) */
    uint64_t M_inv;            /* fastmod constant for 32-bit values */
    struct prepare_counter *counter;
    struct prepare_dict dict;
    size_t width[PREPARE_NCOL];    /* bytes a row of each column (a list column: 4 + max_hotness ids) */
    int64_t card[PREPARE_CAT];
    uint32_t lists;                /* list columns (--list_columns), bit i: cat_i */
    size_t idw[PREPARE_CAT];       /* bytes of one id of each column (its dtype) */
    int nthreads;
    /* consumer state */
    int cur_file;
    int64_t line_base, rows, nbad, nempty;
    int report, shown;
    int64_t n_train;           /* rows before the test split by position; -1 unknown */
    int64_t *chunk_row0;       /* (nchunks) rows before chunk seq, from the PASS_ROWS pass; NULL without one */
    int64_t nchunks, chunks_cap;
    struct prepare_sink train, test;
};

/* Runs pass `pass` (enum prepare_pass) over x's inputs with x->nthreads work
 * threads (prepare_pipe_run): resets the consumer state, counts rows, malformed
 * and empty lines into x, and in the write pass puts the rows into x->train and
 * x->test. report: show malformed lines (and, with --strict, fail on the first).
 * *tsv_bytes receives the text bytes read. Errors as prepare_pipe_run, and
 * TR_ERR_ARG (logged: a malformed line under --strict, inputs changed since the
 * rows pass), TR_ERR_IO and TR_ERR_NOMEM from the sinks. */
enum tr_status prepare_run_pass(struct prepare_ctx *x, int pass, int report, int64_t *tsv_bytes) TR_WUR;

/* The file names of the PREPARE_NCOL output columns, in column order. */
extern const char *const prepare_col_names[PREPARE_NCOL];
/* 1 if dir exists and holds anything, 0 if empty or absent, -1 if it is not a directory. */
int prepare_dir_state(const char *dir);
/* Removes the staging folders OUT.tmp-PID (and OUT.tmp-PID.old) that runs killed
 * before they could clean up left next to `out`: those whose process no longer
 * exists on this host. Folders of live processes, of this process and of other
 * hosts are left alone. Prints one line for each folder removed. Failing to
 * remove one is a warning, not an error: the run does not need it gone.
 * TR_ERR_NOMEM. */
enum tr_status prepare_remove_stale_staging(const char *out) TR_WUR;
/* Writes dir/feature_spec.yaml for the split-binary columns with these
 * cardinalities (PREPARE_CAT of them); vocabulary_rows, when not NULL, is recorded
 * as metadata (threshold mode: "train"); hot (PREPARE_CAT, may be NULL) a fixed
 * hotness of every table (0 or 1: one-hot); varmax (PREPARE_CAT, may be NULL)
 * varmax[i] > 0 makes column i of variable hotness up to varmax[i] (its ids and
 * cat_<i>_lengths.bin). TR_ERR_IO (logged), TR_ERR_NOMEM. */
enum tr_status prepare_write_spec(const char *dir, const int64_t *card, const char *vocabulary_rows,
                                  const int64_t *hot, const int32_t *varmax) TR_WUR;

#ifdef __cplusplus
}
#endif
#endif
