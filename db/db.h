/* db.h: the run history, one SQLite file. The launcher (`terarec train`) writes
 * it; `terarec runs ...` reads it, read-only (`runs rm` deletes from it; `runs
 * tag`, `note` and `rename` change what people add to a run), and
 * records only what an open decides: a migration of an older file, runs whose
 * launcher vanished (lost), and only where it may write.
 *
 * Tables (schema version in PRAGMA user_version, forward migrations only):
 *   runs        id, name, status, cmdline, config (JSON), git_hash, hosts, nodes,
 *               workers, slurm_job_id, ckpt_url, ckpt_run, start_time, end_time,
 *               final_metrics (JSON), reason, restarts, resumed_from,
 *               launcher_host, launcher_pid, launcher_start (the pid's start time,
 *               /proc/PID/stat field 22), launcher_ns (boot id and pid namespace),
 *               heartbeat (time), tags (JSON array of strings), note (text)
 *   metrics     run, step, name, value, time      (loss, learning_rate, samples_per_s, ...)
 *   evals       run, step, auc, logloss, samples, time
 *   checkpoints run, step, manifest_url, bytes, stall_s, time
 *   processes   run, attempt, rank, host, pid, exit_code, signal, start_time, end_time
 *   events      run, time, kind, data (JSON)   (what happened: started, restarted,
 *               preempted, requeued, resumed, hung, failed, ...)
 *   sysmetrics  run, rank, time, step, cpu_pct (100 per core busy), rss_bytes,
 *               gpu_util (percent; NULL: unknown), gpu_mem_bytes (NULL: no GPU)
 * Times are seconds since the epoch (REAL). Every write is one transaction
 * (BEGIN IMMEDIATE), with a busy timeout, so many launchers can share one file.
 * The journal is WAL on a local file system and DELETE on a network one (NFS,
 * Lustre, GPFS, CIFS/SMB, BeeGFS, ...), where WAL's shared memory does not work. */
#ifndef TR_DB_H
#define TR_DB_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "../common/status.h"

#ifdef __cplusplus
extern "C" {
#endif

#define DB_SCHEMA_VERSION 3

struct db;

/* Run statuses, as stored. */
#define DB_RUNNING "running"
#define DB_COMPLETED "completed"
#define DB_FAILED "failed"
#define DB_HUNG "hung"
#define DB_PREEMPTED "preempted"
#define DB_CANCELLED "cancelled"
/* running, but its launcher vanished (kill -9, a closed terminal, a lost node)
 * without recording an end: decided when the history is opened (db_open,
 * db_open_readonly), from the launcher's pid on its own host, else from its
 * heartbeat being older than DB_LOST_AFTER_S seconds (the environment variable
 * TR_DB_LOST_AFTER_S overrides it: clocks far apart, slow file systems) */
#define DB_LOST "lost"
#define DB_LOST_AFTER_S 300

/* The default path into buf: $TR_DB if set, else $XDG_DATA_HOME/terarec/runs.db,
 * else $HOME/.local/share/terarec/runs.db. Returns buf, or NULL when it does not
 * fit or no home is known (logged with a hint: --db PATH). */
char *db_default_path(char *buf, size_t n);

/* The writer's open (`terarec train`, `runs rm`): the file at path (NULL:
 * db_default_path). create != 0: the file and its directory are created when
 * missing; create == 0: a missing file is TR_ERR_NOT_FOUND ("no run history at
 * PATH" + a hint). The schema is brought up to date (migrations). A file from a
 * newer schema, or not an SQLite database, or one this process cannot write (the
 * file, or its directory where SQLite keeps its journal) is refused: TR_ERR_ARG,
 * one line naming the path and why (no write permission, a read-only file
 * system), and a hint (--db PATH). Errors are logged. Created directories get mode
 * 0700, the file 0600. Busy timeout 30 s. The journal follows db_fs_allows_wal on
 * the file's directory; the environment variable TR_DB_FORCE_NETFS=1 makes any
 * file system count as a network one (journal "delete"), for tests. Running runs
 * whose launcher vanished are recorded lost (DB_LOST). A handle is for one thread
 * at a time; many processes may open one file. */
enum tr_status db_open(const char *path, int create, struct db **out) TR_WUR;
/* The reader's open (`terarec runs list|show|serve|...`): the file at path (NULL:
 * db_default_path) read-only (SQLITE_OPEN_READONLY, a mode=ro URI): it never takes
 * a write lock, so a running job's writes are never blocked, and it works on a
 * file or directory this process cannot write (a read-only mount, another
 * user's file), and on one a writer holds locked (within the busy timeout). Where
 * a WAL file's directory cannot be written, the file is read as it stands
 * (immutable=1, warned). A file of an older schema is migrated first when it may
 * be written, else read as it is (warned). Running runs whose launcher vanished
 * are recorded lost when the file may be written, else shown lost by this
 * connection only. A missing file is TR_ERR_NOT_FOUND; a newer schema or an
 * unreadable file TR_ERR_ARG (all logged, with a hint). Busy timeout as db_open. */
enum tr_status db_open_readonly(const char *path, struct db **out) TR_WUR;
/* Another connection to db's file, opened as db was (for another thread), without
 * the lost-run check of an open (db_internal.h: db_check_lost). Errors as
 * db_open_readonly. */
enum tr_status db_reopen(struct db *db, struct db **out) TR_WUR;
void db_close(struct db *db);
const char *db_path(const struct db *db);
/* "wal" or "delete": the journal mode chosen at open. */
const char *db_journal(const struct db *db);

/* The journal for a file system of statfs() type f_type: 1 when WAL is safe
 * (a local file system), 0 for network file systems. (Exposed for tests.) */
int db_fs_allows_wal(long f_type);

struct db_run {
    const char *id;           /* required, unique */
    const char *name;         /* the user's --name, or NULL */
    const char *status;       /* DB_RUNNING ... */
    const char *cmdline;      /* the command line as typed (shell-quoted) */
    const char *config;       /* JSON object of every effective flag */
    const char *git_hash;
    const char *hosts;        /* comma-separated */
    int nodes, workers;
    const char *slurm_job_id; /* NULL outside SLURM */
    const char *ckpt_url;     /* where its checkpoints go (URL or path) */
    const char *ckpt_run;     /* the run's name in the checkpoint store */
    const char *resumed_from; /* a run id, or NULL */
    double start_time;
    /* the launcher: launcher_pid 0 means the calling process (its host name, pid,
     * the pid's start time and its pid space are filled in) */
    const char *launcher_host;
    int64_t launcher_pid;
    int64_t launcher_start;  /* /proc/PID/stat field 22; <= 0: unknown */
    const char *launcher_ns; /* "BOOT_ID/pid:[INODE]": where the pid means it; NULL: unknown (same as ours) */
};

/* Inserts a run (TR_ERR_ARG, logged, when the id exists). The writes below return
 * TR_ERR_NOT_FOUND (logged) for a run (or, db_process_exit, a process) that does
 * not exist, TR_ERR_DB for an SQLite failure (logged). NaN and inf are stored as NULL. */
enum tr_status db_run_create(struct db *db, const struct db_run *r) TR_WUR;

/* Sets the status; end_time > 0 also sets end_time; final_metrics (a JSON object
 * text) and reason (one line: why it ended so) when non-NULL. A status other
 * than running also ends the run's processes whose end was never recorded (a
 * lost node, a cancelled SLURM job) at the run's end, exit unknown; one
 * transaction. */
enum tr_status db_run_finish(struct db *db, const char *id, const char *status, double end_time,
                             const char *final_metrics, const char *reason) TR_WUR;

/* Back to running after a requeue or a restart: status running, end_time NULL,
 * restarts incremented, hosts replaced when non-NULL; the launcher becomes the
 * calling process (host, pid, start time) and its heartbeat now. */
enum tr_status db_run_reopen(struct db *db, const char *id, const char *hosts) TR_WUR;

/* The run's checkpoint run (its name in the store) becomes ckpt_run: a requeued
 * run whose checkpoints are gone starting again under a name of its own. */
enum tr_status db_run_set_ckpt_run(struct db *db, const char *id, const char *ckpt_run) TR_WUR;

/* A tag: 1 to DB_TAG_MAX letters, digits or _ . : / + @ - (db_tag_ok: 1 when t is one). */
#define DB_TAG_MAX 64
int db_tag_ok(const char *t);

/* The run's tags become its tags and add's, less rm's (a set, sorted). A bad tag
 * is TR_ERR_ARG (logged, naming it); TR_ERR_NOT_FOUND, TR_ERR_DB (logged). */
enum tr_status db_run_tag(struct db *db, const char *id, const char *const *add, int nadd, const char *const *rm,
                          int nrm) TR_WUR;
/* The run's note becomes note (NULL or "": none). TR_ERR_NOT_FOUND, TR_ERR_DB (logged). */
enum tr_status db_run_set_note(struct db *db, const char *id, const char *note) TR_WUR;
/* The run's name becomes name, refused (TR_ERR_ARG, logged naming the other run)
 * when another run has it as its name or id, or when it is empty, longer than 200
 * bytes or holds control characters. TR_ERR_NOT_FOUND, TR_ERR_DB (logged). */
enum tr_status db_run_rename(struct db *db, const char *id, const char *name) TR_WUR;

/* The launcher is alive at `now` (seconds since the epoch): one small write,
 * meant every few seconds (the launcher: about every 10 s; a run whose launcher
 * is on another host is lost after DB_LOST_AFTER_S without one). A run judged
 * lost is running again. TR_ERR_NOT_FOUND, TR_ERR_DB (logged). */
enum tr_status db_run_heartbeat(struct db *db, const char *id, double now) TR_WUR;

/* The newest run of a SLURM job (by start_time), in *id (tr_malloc'd), or
 * TR_ERR_NOT_FOUND (not logged). */
enum tr_status db_run_by_slurm_job(struct db *db, const char *job_id, char **id) TR_WUR;

/* A run id from what the user typed: the id itself, a unique prefix of one, or a
 * unique run name. TR_ERR_NOT_FOUND (logged: "no run 'X' in PATH" + hint:
 * terarec runs list), TR_ERR_ARG when ambiguous (logged, naming two matches). */
enum tr_status db_run_resolve(struct db *db, const char *what, char **id) TR_WUR;

/* Field of a run as text (tr_malloc'd; NULL when SQL NULL), e.g. "ckpt_url".
 * TR_ERR_NOT_FOUND when the run does not exist; TR_ERR_ARG for an unknown column. */
enum tr_status db_run_get(struct db *db, const char *id, const char *column, char **value) TR_WUR;

enum tr_status db_metric_add(struct db *db, const char *run, int64_t step, const char *name, double value,
                             double time) TR_WUR;
enum tr_status db_eval_add(struct db *db, const char *run, int64_t step, double auc, double logloss, int64_t samples,
                           double time) TR_WUR;
/* A committed checkpoint; bytes < 0 and a NaN stall_s are not known (NULL). */
enum tr_status db_ckpt_add(struct db *db, const char *run, int64_t step, const char *manifest_url, int64_t bytes,
                           double stall_s, double time) TR_WUR;
/* A process of attempt `attempt` (0 first, +1 per restart or requeue). */
enum tr_status db_process_add(struct db *db, const char *run, int attempt, int rank, const char *host, int64_t pid,
                              double time) TR_WUR;
/* How it ended: exit_code >= 0 or signal > 0 (the other -1). */
enum tr_status db_process_exit(struct db *db, const char *run, int attempt, int rank, int exit_code, int signal,
                               double time) TR_WUR;
/* A rank's use of the machine at `time` (step: its steps done): cpu_pct (100 per
 * core busy), rss_bytes; gpu_util and gpu_mem_bytes NaN / < 0 when unknown
 * (stored as NULL). */
enum tr_status db_sysmetric_add(struct db *db, const char *run, int rank, double time, int64_t step, double cpu_pct,
                                int64_t rss_bytes, double gpu_util, int64_t gpu_mem_bytes) TR_WUR;
/* data: a JSON object text, or NULL. */
enum tr_status db_event_add(struct db *db, const char *run, double time, const char *kind, const char *data) TR_WUR;

/* `terarec runs ...` (argv[0] is "runs"): list, show, metrics, compare, export,
 * rm, plot, serve, tag, note, rename; each takes --db PATH (or TR_DB) and --json where it prints. Returns
 * the exit status (0, 2 bad input or unknown run, 1 other). */
int runs_cmd_main(int argc, char **argv);

/* runs_cmd_main's subcommands, "  NAME  what it does" a line, to fp (for the front
 * end's help, which prints every group's table). */
void runs_cmd_table(FILE *fp);

#ifdef __cplusplus
}
#endif
#endif
