/* proc.h: the launcher's children: each started in a process group of its own
 * (so a Ctrl-C at the terminal reaches only the launcher, which decides what the
 * children get), with the launcher's blocked signals unblocked again, stdin from
 * /dev/null and stdout/stderr appended to a log file. */
#ifndef TR_LAUNCHER_PROC_H
#define TR_LAUNCHER_PROC_H

#include <signal.h>
#include <stddef.h>
#include <sys/types.h>

#include "../common/status.h"

#ifdef __cplusplus
extern "C" {
#endif

struct proc {
    const char *what; /* "loader", "workers", ... for messages */
    pid_t pid;        /* 0: not running */
    int status;       /* waitpid status once ended */
    int ended;
    char *log;        /* its log file (owned) */
};

/* Starts argv (argv[0] looked up in PATH when it has no '/') with its output
 * appended to log. mask: the signal mask the child gets (the launcher's before
 * it blocked its own). TR_ERR_IO (logged: the log cannot be opened, fork fails);
 * an exec failure is the child's exit status 127, its reason in the log. */
enum tr_status proc_start(struct proc *p, const char *what, char *const argv[], const char *log,
                          const sigset_t *mask) TR_WUR;

/* proc_start, with the signal the child gets when the launcher dies (kill -9, a
 * closed terminal): prctl(PR_SET_PDEATHSIG) before the exec, 0 for none.
 * proc_start gives SIGTERM: what makes srun kill its tasks at once ("forcing
 * job termination"), mpirun end its ranks, and the loader and a local store stop. */
enum tr_status proc_start_ex(struct proc *p, const char *what, char *const argv[], const char *log,
                             const sigset_t *mask, int death_sig) TR_WUR;

/* Sends sig to the child's process group (nothing when it ended). */
void proc_signal(const struct proc *p, int sig);

/* Reaps p if it ended (WNOHANG); returns 1 when it has ended. */
int proc_poll(struct proc *p);

/* SIGTERM, then SIGKILL after grace seconds, to the group; waits for the end. */
void proc_stop(struct proc *p, double grace);

/* "exit 0", "exit 3", "signal 9 (Killed)" for a waitpid status, into buf. */
const char *proc_describe(int status, char *buf, size_t n);

/* The last `lines` lines of a file (tr_malloc'd text, "" when unreadable). */
char *proc_tail(const char *path, int lines);

/* argv as one shell-quoted line (tr_malloc'd). */
char *proc_quote(char *const argv[]);

void proc_release(struct proc *p);

/* A growing NULL-terminated argument vector (each string owned). */
struct argv {
    char **v;
    int n, cap;
};
void argv_add(struct argv *a, const char *s);
void argv_addf(struct argv *a, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* the space-separated words of s (nothing when s is NULL) */
void argv_split(struct argv *a, const char *s);
void argv_free(struct argv *a);

#ifdef __cplusplus
}
#endif
#endif
