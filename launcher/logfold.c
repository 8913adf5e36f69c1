/* logfold.c: the workers' log lines on the console, folded by text across ranks
 * and repeats (logfold.h). Lines are kept by (level, text), at most FOLD_MAX of
 * them: a new one beyond that forgets the oldest with nothing left to show. It
 * does not write the run history nor workers.log. */
#include "logfold.h"

#include <string.h>

#include "../common/alloc.h"

#define FOLD_MAX 64
#define FOLD_MSG_MAX 1024
#define FOLD_HOST_MAX 64

struct who {
    int rank;
    char host[FOLD_HOST_MAX];
};

struct fold {
    char level[8];
    char msg[FOLD_MSG_MAX];
    struct who *who; /* (n) the ranks that said it since it was last shown, ascending */
    int n, cap;
    long count;   /* times it was said since it was last shown */
    double first; /* when it was first said since it was last shown */
    double shown; /* when it was last shown; 0: never */
    int was_shown;
};

struct logfold {
    FILE *out;
    void (*before)(void *ctx);
    void *ctx;
    struct fold v[FOLD_MAX];
    int n;
};

struct logfold *logfold_new(FILE *out, void (*before)(void *ctx), void *ctx)
{
    struct logfold *f = tr_calloc(1, sizeof *f);
    if (f)
        f->out = out, f->before = before, f->ctx = ctx;
    return f;
}

static void add_who(struct fold *f, int rank, const char *host)
{
    int i = 0;
    while (i < f->n && f->who[i].rank < rank)
        i++;
    if (i < f->n && f->who[i].rank == rank)
        return;
    if (f->n == f->cap) {
        const int cap = f->cap ? 2 * f->cap : 4;
        struct who *p = tr_realloc(f->who, (size_t)cap * sizeof *p);
        if (!p)
            return;
        f->who = p;
        f->cap = cap;
    }
    memmove(f->who + i + 1, f->who + i, (size_t)(f->n - i) * sizeof *f->who);
    f->who[i].rank = rank;
    snprintf(f->who[i].host, sizeof f->who[i].host, "%s", host && *host ? host : "?");
    f->n++;
}

/* "rank 0 on a" or "ranks 0-3,5 on a,b" (hosts in rank order, four at most) into buf. */
static void say_who(const struct fold *f, char *buf, size_t n)
{
    size_t k = (size_t)snprintf(buf, n, "rank%s ", f->n == 1 ? "" : "s");
    for (int i = 0; i < f->n && k < n; i++) {
        int j = i;
        while (j + 1 < f->n && f->who[j + 1].rank == f->who[j].rank + 1)
            j++;
        if (j > i)
            k += (size_t)snprintf(buf + k, n - k, "%s%d-%d", i ? "," : "", f->who[i].rank, f->who[j].rank);
        else
            k += (size_t)snprintf(buf + k, n - k, "%s%d", i ? "," : "", f->who[i].rank);
        i = j;
    }
    int hosts = 0;
    for (int i = 0; i < f->n && k < n; i++) {
        int seen = 0;
        for (int j = 0; j < i && !seen; j++)
            seen = !strcmp(f->who[i].host, f->who[j].host);
        if (seen)
            continue;
        if (hosts == 4) {
            k += (size_t)snprintf(buf + k, n - k, ",...");
            break;
        }
        k += (size_t)snprintf(buf + k, n - k, "%s%s", hosts ? "," : " on ", f->who[i].host);
        hosts++;
    }
}

static void show(struct logfold *F, struct fold *f, double now)
{
    char w[512];
    say_who(f, w, sizeof w);
    if (F->before)
        F->before(F->ctx);
    const long again = f->was_shown ? f->count : f->count - f->n; /* said again since it was shown */
    if (again > 0)
        fprintf(F->out, "%s: [%s] %s (repeated %ld time%s)\n", f->level, w, f->msg, again, again == 1 ? "" : "s");
    else
        fprintf(F->out, "%s: [%s] %s\n", f->level, w, f->msg);
    fflush(F->out);
    f->shown = now;
    f->was_shown = 1;
    f->count = 0;
    f->n = 0;
}

void logfold_add(struct logfold *F, int rank, const char *host, const char *level, const char *msg, double now)
{
    if (!F || !level || !msg)
        return;
    struct fold *f = NULL;
    for (int i = 0; i < F->n && !f; i++)
        if (!strcmp(F->v[i].level, level) && !strncmp(F->v[i].msg, msg, FOLD_MSG_MAX - 1))
            f = &F->v[i];
    if (!f) {
        if (F->n == FOLD_MAX) { /* forget the oldest line with nothing left to show */
            int old = -1;
            for (int i = 0; i < F->n; i++)
                if (!F->v[i].count && (old < 0 || F->v[i].shown < F->v[old].shown))
                    old = i;
            if (old < 0) { /* every one waits: show the first now */
                old = 0;
                show(F, &F->v[0], now);
            }
            tr_free(F->v[old].who);
            memmove(F->v + old, F->v + old + 1, (size_t)(F->n - old - 1) * sizeof *F->v);
            F->n--;
        }
        f = &F->v[F->n++];
        memset(f, 0, sizeof *f);
        snprintf(f->level, sizeof f->level, "%s", level);
        snprintf(f->msg, sizeof f->msg, "%s", msg);
    }
    if (!f->count)
        f->first = now;
    f->count++;
    add_who(f, rank, host);
    logfold_flush(F, 0, now);
}

void logfold_flush(struct logfold *F, int final, double now)
{
    if (!F)
        return;
    for (int i = 0; i < F->n; i++) {
        struct fold *f = &F->v[i];
        if (!f->count)
            continue;
        const int due = f->was_shown ? now - f->shown >= LOGFOLD_REPEAT_S : now - f->first >= LOGFOLD_WINDOW_S;
        if (final || due)
            show(F, f, now);
    }
}

void logfold_free(struct logfold **pf)
{
    struct logfold *F = *pf;
    if (!F)
        return;
    for (int i = 0; i < F->n; i++)
        tr_free(F->v[i].who);
    tr_free(F);
    *pf = NULL;
}
