/* logfold.h: the workers' warn, error and hint lines on the launcher's console,
 * folded: the same line from several ranks within LOGFOLD_WINDOW_S is one line
 * naming them all (`warn: [ranks 0-3 on a,b] ...`), and a line said again is
 * counted and shown once with its count (`(repeated 12 times)`), at most every
 * LOGFOLD_REPEAT_S and at the end. One thread; the clock is the caller's. */
#ifndef TR_LAUNCHER_LOGFOLD_H
#define TR_LAUNCHER_LOGFOLD_H

#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

#define LOGFOLD_WINDOW_S 0.5  /* how long a new line waits for the other ranks' */
#define LOGFOLD_REPEAT_S 10.0 /* how often a repeated line's count is shown */

struct logfold;

/* A new fold writing to out (borrowed); before(ctx), when not NULL, is called
 * before each line is written (the launcher clears its progress line). NULL
 * when out of memory. */
struct logfold *logfold_new(FILE *out, void (*before)(void *ctx), void *ctx);

/* Rank rank on host said msg at level ("warn", "error", "hint") at time now
 * (seconds, any monotonic clock); shows what is due (logfold_flush). Strings
 * are copied (a message is cut at 1023 bytes). f NULL: nothing. */
void logfold_add(struct logfold *f, int rank, const char *host, const char *level, const char *msg, double now);

/* Shows the lines that are due at time now: a new one LOGFOLD_WINDOW_S after it
 * was first said, a repeated one LOGFOLD_REPEAT_S after it was last shown;
 * final: every line with something to show. f NULL: nothing. */
void logfold_flush(struct logfold *f, int final, double now);

/* Frees f (what it has not shown is not shown); *f becomes NULL. Safe on NULL. */
void logfold_free(struct logfold **f);

#ifdef __cplusplus
}
#endif
#endif
