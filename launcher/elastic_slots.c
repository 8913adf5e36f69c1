/* elastic_slots.c: the slots of an elastic run (elastic_slots.h): the spec's
 * parse, each slot's state and failures, and the choice of the next world. Pure
 * bookkeeping over an array; what a slot is (a worker slot, a node) and how it was
 * seen to fail or answer are the caller's. */
#define TR_SUBSYS TR_SUB_INIT
#include "elastic_slots.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../common/alloc.h"
#include "../common/check.h"

/* One count of the spec: digits, then 'n' for nodes. Returns the rest of text,
 * NULL on bad text. */
static const char *spec_count(const char *p, int *v, int *nodes)
{
    if (!isdigit((unsigned char)*p))
        return NULL;
    errno = 0;
    char *e = NULL;
    const long x = strtol(p, &e, 10);
    if (errno || x < 1 || x > (1 << 20))
        return NULL;
    *v = (int)x;
    *nodes = *e == 'n' || *e == 'N';
    return *nodes ? e + 1 : e;
}

enum tr_status elastic_spec_parse(const char *text, struct elastic_spec *sp, char *err, size_t n)
{
    memset(sp, 0, sizeof *sp);
    int n1 = 0, n2 = 0;
    const char *p = text ? spec_count(text, &sp->min, &n1) : NULL;
    if (p && *p == ':')
        p = spec_count(p + 1, &sp->max, &n2);
    else if (p && *p)
        p = NULL;
    if (!p || *p) {
        snprintf(err, n, "'%s' is not MIN[:MAX] (workers, e.g. 2:4, or nodes, e.g. 2n:4n; each 1 to 1048576)",
                 text ? text : "");
        return TR_ERR_ARG;
    }
    if (sp->max && n1 != n2) {
        snprintf(err, n, "'%s' mixes workers and nodes: give both as workers (2:4) or both as nodes (2n:4n)", text);
        return TR_ERR_ARG;
    }
    if (sp->max && sp->max < sp->min) {
        snprintf(err, n, "MAX %d is less than MIN %d", sp->max, sp->min);
        return TR_ERR_ARG;
    }
    sp->unit = n1 ? ELASTIC_NODES : ELASTIC_WORKERS;
    return TR_OK;
}

enum tr_status elastic_slots_init(struct elastic_slots *s, int n, const char *const *names, int per_slot,
                                  const struct elastic_spec *sp, int max_failures, char *err, size_t errn)
{
    memset(s, 0, sizeof *s);
    TR_ASSERT(n > 0 && per_slot > 0);
    s->v = tr_calloc((size_t)n, sizeof *s->v);
    if (!s->v)
        return TR_ERR_NOMEM;
    s->n = n;
    s->per_slot = per_slot;
    s->max_failures = max_failures > 0 ? max_failures : 1;
    for (int i = 0; i < n; i++) {
        if (names && names[i])
            snprintf(s->v[i].name, sizeof s->v[i].name, "%s", names[i]);
        else
            snprintf(s->v[i].name, sizeof s->v[i].name, "slot %d", i);
    }
    const int nodes = sp->unit == ELASTIC_NODES;
    s->min_slots = nodes ? sp->min : (sp->min + per_slot - 1) / per_slot;
    s->max_slots = !sp->max ? n : nodes ? sp->max : sp->max / per_slot;
    if (s->max_slots > n)
        s->max_slots = n;
    if (s->max_slots < 1) {
        snprintf(err, errn, "MAX %d workers is less than one node's %d", sp->max, per_slot);
        elastic_slots_release(s);
        return TR_ERR_ARG;
    }
    if (s->min_slots > n) {
        snprintf(err, errn, "MIN %d %s needs %d %s, and the run has %d", sp->min, nodes ? "nodes" : "workers",
                 s->min_slots, per_slot > 1 || nodes ? "nodes" : "worker slots", n);
        elastic_slots_release(s);
        return TR_ERR_ARG;
    }
    return TR_OK;
}

void elastic_slots_release(struct elastic_slots *s)
{
    tr_free(s->v);
    memset(s, 0, sizeof *s);
}

int elastic_slots_find(const struct elastic_slots *s, const char *name)
{
    if (!name)
        return -1;
    const size_t k = strcspn(name, ".");
    for (int i = 0; i < s->n; i++)
        if (!strcmp(s->v[i].name, name) || (strlen(s->v[i].name) == k && !strncmp(s->v[i].name, name, k)))
            return i;
    return -1;
}

enum elastic_state elastic_slots_lost(struct elastic_slots *s, int i, int64_t step)
{
    TR_ASSERT(i >= 0 && i < s->n);
    struct elastic_slot *sl = &s->v[i];
    sl->failures++;
    if (sl->state == ELASTIC_OUT)
        return sl->state;
    sl->state = sl->failures >= s->max_failures ? ELASTIC_OUT : ELASTIC_RESTING;
    sl->since = step;
    return sl->state;
}

void elastic_slots_answer(struct elastic_slots *s, int i, int up, int64_t step)
{
    TR_ASSERT(i >= 0 && i < s->n);
    struct elastic_slot *sl = &s->v[i];
    if (sl->state == ELASTIC_OUT)
        return;
    if (up && (sl->state == ELASTIC_DOWN || sl->state == ELASTIC_RESTING)) {
        sl->state = ELASTIC_IN;
    } else if (!up && sl->state != ELASTIC_DOWN) {
        sl->state = ELASTIC_DOWN;
        sl->since = step;
        sl->was_down = 1;
    }
}

int elastic_slots_ready(struct elastic_slots *s, int64_t step, int64_t grow_every)
{
    int k = 0;
    for (int i = 0; i < s->n; i++)
        if (s->v[i].state == ELASTIC_RESTING && step >= s->v[i].since + grow_every) {
            s->v[i].state = ELASTIC_IN;
            k++;
        }
    return k;
}

static int count(const struct elastic_slots *s, int st)
{
    int k = 0;
    for (int i = 0; i < s->n; i++)
        k += st < 0 ? s->v[i].used : (int)s->v[i].state == st;
    return k;
}

int elastic_slots_usable(const struct elastic_slots *s)
{
    return count(s, ELASTIC_IN);
}

int elastic_slots_in_world(const struct elastic_slots *s)
{
    return count(s, -1);
}

int elastic_slots_out(const struct elastic_slots *s)
{
    return count(s, ELASTIC_OUT);
}

int elastic_slots_choose(struct elastic_slots *s)
{
    int want = elastic_slots_usable(s);
    if (want > s->max_slots)
        want = s->max_slots;
    if (want < s->min_slots)
        return -1;
    int k = 0;
    for (int i = 0; i < s->n; i++) {
        s->v[i].used = s->v[i].state == ELASTIC_IN && k < want;
        k += s->v[i].used;
    }
    return k;
}

int elastic_slots_can_grow(const struct elastic_slots *s)
{
    const int next = TR_MIN(elastic_slots_usable(s), s->max_slots);
    return next > elastic_slots_in_world(s);
}

int elastic_slots_of_rank(const struct elastic_slots *s, int r)
{
    if (r < 0)
        return -1;
    int k = r / s->per_slot;
    for (int i = 0; i < s->n; i++)
        if (s->v[i].used && k-- == 0)
            return i;
    return -1;
}

char *elastic_slots_names(const struct elastic_slots *s, int st, const char *sep, char *buf, size_t n)
{
    size_t k = 0;
    buf[0] = 0;
    for (int i = 0; i < s->n && k < n; i++) {
        if (st < 0 ? !s->v[i].used : (int)s->v[i].state != st)
            continue;
        k += (size_t)snprintf(buf + k, n - k, "%s%s", k ? sep : "", s->v[i].name);
    }
    return buf;
}

const char *elastic_state_name(enum elastic_state st)
{
    switch (st) {
    case ELASTIC_IN: return "usable";
    case ELASTIC_RESTING: return "resting";
    case ELASTIC_DOWN: return "down";
    case ELASTIC_OUT: return "left out";
    }
    return "?";
}
