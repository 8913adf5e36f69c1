/* launch_internal.h: the state of one `terarec train` (struct launch) and the
 * functions its files share; nothing outside launcher/ includes it. train.c parses
 * the options and runs the phases; start.c starts the children, intake.c reads the
 * ranks' reports, supervise.c watches an attempt and ends it, rundir.c makes the
 * run's paths, resume.c decides which run this is, history.c writes the run
 * history and progress.c the console. All of it runs on the launcher's one thread. */
#ifndef TR_LAUNCHER_LAUNCH_INTERNAL_H
#define TR_LAUNCHER_LAUNCH_INTERNAL_H

#include <jansson.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stddef.h>
#include <stdint.h>

#include "../common/param.h"
#include "../common/status.h"
#include "../worker/worker.h"
#include "container.h"
#include "elastic_slots.h"
#include "logfold.h"
#include "proc.h"

struct db;

/* ---- options ------------------------------------------------------------------------------ */

struct launch_cfg {
    struct worker_cfg w; /* the training flags, passed on to the workers (and the loader's to it) */
    int workers;
    char *db;
    int json;
    double hang_timeout;
    int max_restarts;
    char *name;
    char *resume;
    char *run_dir;
    int requeue;
    int allow_fresh_start;
    char *mpirun_args;
    char *srun_args;
    char *container_image;
    char *container_mounts;
    int container_runtime; /* index into runtime_choices (train.c) */
    char *container_bin_dir;
    int dry_run;
    char *elastic;            /* --elastic MIN[:MAX] (NULL: not elastic) */
    int64_t elastic_grow_every;
    int elastic_max_failures;
};

/* ---- the state of a launch ---------------------------------------------------------------- */

struct rank {
    int hello, bye, exit_code, error;
    int silent;     /* with --elastic: it stopped beating (elastic.c), taken as lost */
    double hello_at, error_at; /* when its hello and its error came (tr_clock_now) */
    char host[128];
    long pid;
    int64_t step;
    double last_beat, lost_at; /* lost_at: when its connection closed without a bye */
    char message[512];
};

struct conn {
    int fd;
    int rank; /* -1 until its hello */
    char *buf;
    size_t len;
};

/* STOP_GROW: an elastic run's restart point (elastic.c): the workers stop and save,
 * and the run continues on more of them */
enum stop_why { STOP_NONE = 0, STOP_PREEMPT, STOP_CANCEL, STOP_GROW };

/* The report intake (intake.c): the listener and the ranks' connections. */
struct launch_intake {
    int lfd;
    struct conn *conns;
    int nconns;
};

/* What the console shows (progress.c), from rank 0's events (intake.c). */
struct launch_progress {
    int64_t step, total;
    double samples_per_s, loss, auc;
    int have_auc, tty, drawn;
    int threads_said; /* the workers' thread count was shown */
    json_t *final_metrics; /* rank 0's summary event */
};

/* Supervision (supervise.c): the signals, a stop asked for, a hang, a failed loader. */
struct launch_watch {
    int sfd; /* the signalfd of the signals a job gets */
    enum stop_why stop;
    int stop_sent, hung;
    int stop_sig;       /* the signal that asked for the stop */
    int loader_failed;  /* the loader ended on an error before the workers */
    double loader_end_seen; /* when the supervisor saw the loader end on an error (check_loader) */
    char hung_reason[1024];
    char loader_error[1024]; /* its first error line */
};

/* The job's size as the launcher found it (its dataset's, or the synthetic flags'),
 * for the line naming the job (demo.c); ntables 0: not known (a dry run of a dataset). */
struct launch_data {
    int ntables, num_features, rows_same;
    int64_t rows_first, rows_sum;
    int64_t nbatches;     /* training batches an epoch (0: not known) */
    int64_t *rows;        /* (ntables), owned: each table's rows (the elastic re-plan's) */
    int32_t *hot;         /* (ntables), owned: each table's hotness (plan_shape.hot); NULL: one-hot */
    int64_t test_samples; /* rank 0 keeps their logits */
};

/* An elastic run (--elastic MIN[:MAX]; elastic.c, elastic_slurm.c): its slots
 * (worker slots here, nodes under SLURM), the world's changes and their timing. */
struct launch_elastic {
    int on;
    struct elastic_spec spec;
    struct elastic_slots slots;
    int64_t change_step; /* the step the world last changed at (the run's step then) */
    int64_t ckpt_mark;   /* a checkpoint past this step is the next restart point */
    int grow_asked;      /* the workers were asked to stop for a larger world */
    int ev_grow;         /* the change being timed is a growth (its first phase: the stop) */
    int requeue;         /* under SLURM, MIN was not reachable: the job requeues */
    double silent_s;     /* a rank that has not beaten for this long is lost */
    int nodes_lost;      /* nodes found down (under SLURM) */
    /* the change being timed: its "resized" event, recorded at the new world's first step */
    json_t *ev;
    double ev_wall;        /* when it happened (the event's time) */
    double t0, t_decided;  /* the loss (or the stop asked for), the attempt's end decided */
    double t_ended, t_planned, t_started, t_restored;
    double t_saved;        /* when the checkpoint of L->saved_step was heard (tr_clock_now) */
    int64_t lost_step;     /* the step the run had reached at the change */
    /* SLURM: tasks per node, the step's node list and the nodes left out for good */
    int per_node;
    char nodelist[8192], exclude[8192];
    struct proc old_loaders[4]; /* the loaders of attempts that lost a worker, ending on their own */
    struct proc probe;       /* a probe of the down nodes running in the background */
    double next_probe;
    struct proc *stores;     /* checkpoint stores started again on nodes that came back */
    int nstores;
};

/* The run history (history.c) and which run this is (resume.c). */
struct launch_hist {
    struct db *db;
    int restarts;
    int resumed_same_row; /* a requeued SLURM job continuing its run */
    char prev_status[32]; /* how the attempt before it ended */
    char fresh_reason[PATH_MAX + 512]; /* a resumed run starting from step 0: why */
    char resumed_from[64];
    /* --resume RUN: the checkpoint run of RUN and the step of its checkpoint that this
     * run continues from (the first attempt restores it; this run saves under a
     * checkpoint run of its own, so forks of RUN never share one) */
    char from_ckpt_run[64];
    int64_t from_step;
    /* a resumed attempt's "started"/"restarted" event, recorded once rank 0 says where
     * it resumed (its beat's from_step), or before the next event (launch_record_start) */
    json_t *start_ev;
    const char *start_kind;
    double start_time;
};

/* One `terarec train`. Its first fields are the run's identity, paths and
 * placement (rundir.c, resume.c) and its children (start.c), which the commands
 * are built from; then the ranks and the attempt's clocks, which launch_start_attempt
 * resets; then what each of the other files owns. */
struct launch {
    struct launch_cfg *c;
    struct tr_opt *opts;
    int nworker_opts;
    char exe_dir[PATH_MAX];
    char id[64], run_dir[PATH_MAX], token_file[PATH_MAX + 16], token[64], host[128];
    char ckpt_run[64], ckpt_where[PATH_MAX];
    const char *ckpt_token; /* the store's token file: ours, or --checkpoint_token_file for an outside one */
    char *ckpt_root; /* the store's directory (when we serve or write it) */
    int ckpt_url;    /* workers reach it over HTTP */
    int slurm, nodes, world, attempt;
    const char *slurm_job;
    sigset_t orig_mask;
    char events_addr[256];
    struct proc ckpt, loader, workers;
    struct ctr ctr; /* --container-image (ctr.image NULL: none) */
    struct rank *ranks;
    int nranks;
    int64_t last_progress_step;
    double t_last_progress;
    double t_prev_step; /* wall time of the last step report */
    double t_rank_lost; /* when a rank's connection first closed without a bye (0: none) */
    int step_killed;
    int64_t saved_step; /* the step of the last checkpoint committed (heard from rank 0), -1: none yet */
    double t_workers_ended; /* when the attempt's workers ended (tr_clock_now) */
    double t_attempt_down;  /* ... and its loader too (its children all stopped or told to) */
    struct launch_intake in;
    struct logfold *folds; /* the workers' log lines waiting to be shown (logfold.h) */
    struct launch_progress prog;
    struct launch_watch watch;
    struct launch_hist hist;
    struct launch_data data; /* the job's size (check_flags), for launch_say_job */
    struct launch_elastic el; /* --elastic */
    int demo;                /* the built-in demo (launch_demo_wanted) */
    char job_why[512];       /* launch_demo_why's */
};

/* ---- demo.c: the built-in demo and the line naming the job ------------------------------ */

/* Fills *d from a dataset's shape (rows, hot: (ntables), copied, hot NULL for
 * one-hot tables; test_samples: its test split's). Release with launch_data_release. */
void launch_data_set(struct launch_data *d, int ntables, const int64_t *rows, const int32_t *hot, int num_features,
                     int64_t nbatches, int64_t test_samples);
void launch_data_release(struct launch_data *d);

/* 1 when none of the worker flags opts[0 .. nworker) that define the data or the
 * model (TR_OPT_SHAPES_JOB) was set by the last parse (command line or
 * environment): terarec train then trains its built-in demo. */
int launch_demo_wanted(const struct tr_opt *opts, int nworker);

/* Why the job is the one it is, into why (n bytes): the flags set (as
 * tr_opt_source names them) among opts[0 .. nworker) that define the data or the
 * model, or (demo) those that do not, which apply on top of the demo. Call it on
 * the table as parsed from the user's command line. */
void launch_demo_why(const struct tr_opt *opts, int nworker, int demo, char *why, size_t n);

/* The command line of the demo: argv[0], the demo's flags but those the user set
 * (opts as parsed from argv), then argv[1 .. argc), whose flags so apply on top of
 * the demo; *argc2 its length. A tr_calloc'd array of borrowed strings (tr_free
 * it), NULL when out of memory. */
char **launch_demo_argv(const struct tr_opt *opts, int argc, char **argv, int *argc2);

/* Prints the line naming the job being run (demo: the built-in demo), why (the
 * flags that define it, or those on top of the demo: L->job_why), its size from d and an
 * estimate of its duration on this machine's CPUs (none under SLURM or on a GPU):
 * on stdout, on stderr under --json. */
void launch_say_job(struct launch *L, int demo, const struct launch_data *d);

/* ---- rundir.c: the run's paths ------------------------------------------------------------ */

/* The directory of this program into L->exe_dir; checks that the other programs
 * are beside it (unless they are a container image's). TR_ERR_IO, TR_ERR_ARG (logged). */
enum tr_status launch_find_exe_dir(struct launch *L) TR_WUR;

/* A new run id: YYYYMMDD-HHMMSS-xxxxxx (local time, 3 random bytes), into out. */
void launch_make_id(char *out, size_t n);

/* The value of environment variable name as an int, def when unset or empty. */
int launch_env_int(const char *name, int def);

/* The directory of the run history's file dbpath into base (n bytes), and the
 * run's directory into L->run_dir: --run_dir, else runs/<id> beside the history. */
void launch_run_paths(struct launch *L, const char *dbpath, char *base, size_t n);

/* The checkpoint store, from where (--checkpoint_dir, or the resumed run's): a URL
 * (an outside server), a path (written directly), or serve:ROOT or nothing (a
 * terarec-ckpt per node that this launcher runs, *serve = 1; by default in
 * checkpoints/ beside the run history, base). TR_ERR_ARG (logged). */
enum tr_status launch_ckpt_setup(struct launch *L, const char *where, const char *base, int *serve) TR_WUR;

/* In a container: the run's directory and the store's (serve) mounted at their own
 * paths; create: make the store's first. tr_file_mkdir_p's errors (only with create). */
enum tr_status launch_ctr_mount_run(struct launch *L, int serve, int create);

/* Makes the run's directory, its job token and its checkpoint store's setting
 * (from_ckpt_url: the resumed run's store, else --checkpoint_dir), and the mounts;
 * *serve as launch_ckpt_setup. Errors logged: TR_ERR_IO, TR_ERR_ARG. */
enum tr_status launch_rundir_make(struct launch *L, const char *dbpath, const char *from_ckpt_url,
                                  int *serve) TR_WUR;

/* ---- resume.c: which run, and what it continues from ----------------------------------------- */

/* how a resumed run starts (launch_resume_gate) */
enum { FRESH_NO, FRESH_SAME_NAME, FRESH_NEW_NAME };

/* Which run this is: a requeued SLURM job's own row (L->hist.resumed_same_row), a
 * new row after --resume RUN (L->hist.resumed_from), or a new one; fills L->id,
 * L->ckpt_run, L->attempt and *from_ckpt_url (the store the run used, owned by the
 * caller, NULL when none). Errors (logged): the history's, TR_ERR_NOT_FOUND. */
enum tr_status launch_pick_run(struct launch *L, char **from_ckpt_url) TR_WUR;

/* The step of the run's last committed checkpoint in its store (LATEST of
 * L->ckpt_run) in *step (-1: none). TR_ERR_NOT_FOUND (none, or no store yet), the
 * store's errors; not logged by this function. */
enum tr_status launch_store_latest(struct launch *L, int64_t *step) TR_WUR;
/* The same, with the bytes its manifest holds in *bytes (-1: its manifest unread). */
enum tr_status launch_store_latest_bytes(struct launch *L, int64_t *step, int64_t *bytes) TR_WUR;

/* ---- resume_cfg.c: --resume RUN takes RUN's configuration ------------------------------------ */

/* c->resume set, opts parsed from argv[0 .. argc): RUN's recorded flags (the run
 * history's config of RUN, less those that belong to one run: --resume, --run_name,
 * --db, --run_dir, --json, --dry_run, --allow_fresh_start, --restore) that differ
 * from what this parse gave and were not given here, as "--name=value" arguments
 * before argv[1 ..] in *argv2 (*argc2 entries, *ours of them made here:
 * launch_resume_config_free), to parse again; prints the line that lists the
 * flags given here that differ from RUN's. *argv2 NULL: nothing to add (a row
 * without a config, warned). The history's errors (logged: no history, no run). */
enum tr_status launch_resume_config(struct launch_cfg *c, struct tr_opt *opts, int argc, char **argv, int *argc2,
                                    char ***argv2, int *ours) TR_WUR;

/* Frees launch_resume_config's *argv2 (argv) and the ours arguments it made. NULL: nothing. */
void launch_resume_config_free(char **argv, int ours);

/* For a resumed run, before anything starts: is its checkpoint there, whole? Sets
 * *fresh (FRESH_NO, or how it starts from step 0, with L->ckpt_run renamed for
 * FRESH_NEW_NAME); TR_ERR_NOT_FOUND (logged) when it is gone, or the store's errors. */
enum tr_status launch_resume_gate(struct launch *L, int *fresh) TR_WUR;

/* ---- start.c: starting the children ----------------------------------------------------------- */

/* Starts the checkpoint store(s) and waits for them to listen; L->ckpt_where is
 * then their URL. TR_ERR_IO (logged). */
enum tr_status launch_start_ckpt(struct launch *L) TR_WUR;

/* Starts the loader and the workers of one attempt (resume: from the last
 * committed checkpoint) and resets the attempt's clocks and ranks. TR_ERR_IO, the
 * store's errors. */
enum tr_status launch_start_attempt(struct launch *L, int resume) TR_WUR;

/* Removes the local container of prog, a program started as what ("ckpt",
 * "loader", "workers"); nothing without one. */
void launch_ctr_remove(struct launch *L, const struct proc *prog, const char *what);

/* --dry_run: prints the commands of a new run; nothing is created, started or
 * recorded. TR_ERR_ARG (logged) for a bad --checkpoint_dir. */
enum tr_status launch_dry_run(struct launch *L, const char *dbpath) TR_WUR;

/* ---- intake.c: the ranks' reports -------------------------------------------------------------- */

/* Opens the report listener (loopback locally, every address under SLURM) and
 * sets L->events_addr. TR_ERR_IO (logged). */
enum tr_status launch_intake_open(struct launch *L) TR_WUR;

/* Accepts every pending connection on the listener. */
void launch_intake_accept(struct launch *L);

/* Reads what the connections polled in pf[0 .. nc) have (token: the job's). */
void launch_intake_read(struct launch *L, const struct pollfd *pf, int nc, const char *token);

/* Reads the reports still in flight for up to a second, then closes every connection. */
void launch_intake_drain(struct launch *L, const char *token);

/* After an attempt whose workers did not end well: a checkpoint the store has
 * committed (its LATEST) past the last one rank 0 said it committed (killed between
 * its commit and its line) is recorded in the history then, with its manifest's
 * bytes, and L->saved_step moved to it. A store that does not answer: nothing. */
void launch_ckpt_catch_up(struct launch *L);

/* ---- intake.c: the workers' warn, error and hint lines on the console --------------------------- */

/* Rank rank said msg at level ("warn", "error", "hint"): shown on stderr as
 * "LEVEL: [rank R on HOST] msg", folded across ranks and repeats (logfold.h). */
void launch_log_line(struct launch *L, int rank, const char *level, const char *msg);

/* Shows the lines that are due (final: every line waiting, then forgets them all). */
void launch_log_flush(struct launch *L, int final);

/* ---- supervise.c: watching an attempt ----------------------------------------------------------- */

/* Runs the attempts: starts each, supervises it until its workers end, and
 * restarts failed ones (--max_restarts). *status is the run's end (DB_*), reason
 * (n bytes) why. Returns the run's status: TR_OK (completed, preempted),
 * TR_ERR_INTERRUPTED (cancelled), TR_ERR_REMOTE (failed, hung), TR_ERR_IO (the
 * children did not start). */
enum tr_status launch_supervise_attempts(struct launch *L, int resume, const char **status, char *reason,
                                         size_t n) TR_WUR;

/* Asks the workers to stop after the next batch and save (the loader drains):
 * why, sig the signal that asked (0: none, the launcher's own). A stop for
 * growth (STOP_GROW) gives way to a preemption or a cancel that comes after it. */
void launch_request_stop(struct launch *L, enum stop_why why, int sig);

/* The step the workers had reached (their beats', the progress', the last save's). */
int64_t launch_stop_step(const struct launch *L);

/* What the workers' log says about the first rank that failed: its rank, host (n
 * bytes), *sig (0: none) and *code (-1: none), from mpirun's or srun's lines.
 * Returns 1 when a line said, 0 otherwise. */
int launch_scan_step_log(struct launch *L, int *rank, char *host, size_t n, int *sig, int *code);

/* Stops the checkpoint store(s) at the end of the run. */
void launch_stop_ckpt(struct launch *L);

/* A preempted SLURM run that was asked to (SIGUSR1, --requeue) requeues its job. */
void launch_requeue(struct launch *L, const char *status);

/* ---- elastic.c: --elastic MIN[:MAX] ------------------------------------------------------------ */

/* What launch_elastic_next decided about the attempt that ended. */
enum elastic_next {
    ELASTIC_PASS = 0, /* not elastic's: the run ends, or --max_restarts restarts it */
    ELASTIC_AGAIN,    /* another attempt, on the world it chose (L->world, L->nodes) */
    ELASTIC_STOP,     /* the run ends as it set (*status, reason, *end) */
};

/* --elastic and its companions, checked with the other flags (L->slurm, L->world
 * and L->data known): the slots (worker slots here, the allocation's nodes under
 * SLURM) and MIN and MAX in them. TR_ERR_ARG (logged, with a hint). */
enum tr_status launch_elastic_check(struct launch *L) TR_WUR;

/* Frees what the elastic state holds (nothing without --elastic); stops the stores
 * it started again (elastic_slurm.c). Records a change still being timed first. */
void launch_elastic_release(struct launch *L);

/* The attempt lost a worker: its loader is told to stop (its consumer is gone, it
 * ends on its own within seconds) and reaped later, so that the next attempt does
 * not wait for it. */
void launch_elastic_park_loader(struct launch *L);

/* Records the change still being timed (with the phases measured so far), if any. */
void launch_elastic_flush(struct launch *L);

/* Called by the supervision loop while an attempt runs: a rank that stopped beating
 * is taken as lost; a restart point (a checkpoint, or --elastic_grow_every steps)
 * with a slot usable again asks the workers to stop for a larger world; under
 * SLURM the down nodes are probed in the background. */
void launch_elastic_tick(struct launch *L);

/* 1 when the attempt has a rank that went silent (launch_elastic_tick). */
int launch_elastic_silent(const struct launch *L);

/* Rank rank's beat m (intake.c): rank 0's restore and first step time the change. */
void launch_elastic_beat(struct launch *L, int rank, const json_t *m);

/* After an attempt ended (its loader stopped) and status_of judged it (*status,
 * reason, *end): a lost worker or node, or a stop for growth, makes the next
 * world (re-planned; refused when the model no longer fits it, or MIN is not
 * reachable: then *status, reason and *end say so and, under SLURM with
 * --requeue, the run is preempted and L->el.requeue set). See enum elastic_next. */
enum elastic_next launch_elastic_next(struct launch *L, const char **status, enum tr_status *end, char *reason,
                                      size_t n);

/* ---- elastic_slurm.c: the allocation's nodes under --elastic ------------------------------------ */

/* The allocation's node names (scontrol show hostnames $SLURM_JOB_NODELIST) into
 * *names (*n of them; free with launch_elastic_names_free). TR_ERR_IO (logged). */
enum tr_status launch_elastic_slurm_nodes(struct launch *L, char ***names, int *n) TR_WUR;
void launch_elastic_names_free(char **names, int n);

/* Which of the slots idx[0 .. k) answer now, each at once: scontrol show node
 * (down, drained, not responding: no), its slurmd taking a connection (within
 * 2 s), then a probe step (srun --overlap, within ELASTIC_PROBE_S); up[i] 1 or 0,
 * why[i] (ELASTIC_WHY_MAX bytes each, may be NULL) says why not. */
#define ELASTIC_PROBE_S 5
#define ELASTIC_WHY_MAX 160
void launch_elastic_probe(struct launch *L, const int *idx, int k, int *up, char (*why)[ELASTIC_WHY_MAX]);

/* The background probe of the down nodes: started (every ELASTIC_REPROBE_S) and read
 * when it has ended; a node that answers becomes usable. */
#define ELASTIC_REPROBE_S 5
void launch_elastic_probe_tick(struct launch *L);

/* The workers' srun flags of an elastic attempt: --overlap, its nodes, tasks and
 * the nodes left out (--exclude). */
void launch_elastic_srun_args(struct launch *L, struct argv *a);

/* The room of each node of the world (FreeMem of scontrol show node) into
 * room[0 .. nodes), -1 where unknown. */
void launch_elastic_node_room(struct launch *L, int64_t *room, int nodes);

/* Starts a checkpoint store again on each node of the next world that was down
 * (its store went with it) and waits for it to listen. A node whose store does
 * not start is down again (said). */
void launch_elastic_stores(struct launch *L);

/* Stops the stores launch_elastic_stores started. */
void launch_elastic_stores_stop(struct launch *L);

/* ---- history.c: the run history --------------------------------------------------------------- */

/* Logs a warning when rc (a write to the history, of what) failed: the run goes on. */
void launch_db_try(enum tr_status rc, const char *what);

/* Records event kind with data (taken: may be NULL) in the run's history. */
void launch_record_event(struct launch *L, const char *kind, json_t *data);
/* The same, at time `wall` (seconds since the epoch) rather than now. */
void launch_record_event_at(struct launch *L, const char *kind, json_t *data, double wall);
/* Records the pending start event of a resumed attempt (L->hist.start_ev, at the
 * time the attempt started), with the step and data position rank 0 resumed from
 * when beat has them; nothing when none is pending. */
void launch_record_start(struct launch *L, const json_t *beat);

/* The run's row before anything starts: a new one (the command line argv, the
 * config, the store: serve or not), or the requeued one reopened (fresh: how it
 * starts, launch_resume_gate). The history's errors (logged). */
enum tr_status launch_history_open(struct launch *L, char **argv, int serve, int fresh) TR_WUR;

/* The attempt's ranks that never said goodbye, recorded as ended. */
void launch_history_exits(struct launch *L);

/* The run's end: its last event (with the workers' log's tail for a failure, also
 * shown on stderr) and its row's status and reason. */
void launch_history_end(struct launch *L, const char *status, const char *reason);

/* ---- progress.c: the console ------------------------------------------------------------------- */

/* Flushes stdout; a closed one is not a reason to stop (its lines go to /dev/null). */
void launch_out_flush(void);

/* Clears the progress line of a terminal. */
void launch_clear_line(struct launch *L);

/* Shows the progress line (final: the last one, ended by a newline). */
void launch_show_progress(struct launch *L, int final);

/* With --json, prints o (taken) with its type and run as a line; else frees o. */
void launch_json_out(struct launch *L, const char *type, json_t *o);

/* The run's first line: its id, workers, nodes and logs. */
void launch_say_start(struct launch *L);

/* The run's last lines: how it ended and where its history is. */
void launch_say_end(struct launch *L, const char *status, const char *reason);

#endif
