/* elastic_slots.h: the slots of an elastic run (terarec train --elastic MIN[:MAX]):
 * a worker slot locally, a node of the allocation under SLURM. Each slot is in
 * the world, resting after one of its workers died, down (it does not answer), or
 * left out for the rest of the run after failing too often; this module keeps that
 * bookkeeping and chooses the slots of the next attempt. It starts no process and
 * reads nothing: the launcher's elastic.c feeds it what it saw. One thread. */
#ifndef TR_LAUNCHER_ELASTIC_SLOTS_H
#define TR_LAUNCHER_ELASTIC_SLOTS_H

#include <stddef.h>
#include <stdint.h>

#include "../common/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* What --elastic counts: workers ("2:4") or nodes ("2n:4n"). */
enum elastic_unit { ELASTIC_WORKERS = 0, ELASTIC_NODES };

struct elastic_spec {
    int min, max; /* max 0: not given (the run's starting size) */
    enum elastic_unit unit;
};

/* Parses --elastic's MIN[:MAX]: "2", "2:4", "2n", "2n:4n" (1 <= MIN <= MAX, both in
 * one unit). TR_OK, or TR_ERR_ARG with why into err (n bytes: "MAX 1 is less than
 * MIN 2"); not logged. */
enum tr_status elastic_spec_parse(const char *text, struct elastic_spec *sp, char *err, size_t n);

enum elastic_state {
    ELASTIC_IN = 0,  /* usable */
    ELASTIC_RESTING, /* a worker of it died: usable again at the next restart point once the run has
                        trained `grow_every` steps without it (elastic_slots_ready) */
    ELASTIC_DOWN,    /* it does not answer (a node's probe): usable again when it does */
    ELASTIC_OUT,     /* its workers died max_failures times: left out for the rest of the run */
};

#define ELASTIC_NAME_MAX 128

struct elastic_slot {
    char name[ELASTIC_NAME_MAX]; /* "slot 2" locally, the node's name under SLURM */
    enum elastic_state state;
    int failures; /* times a worker of it died */
    int64_t since; /* the step it was left out at (RESTING, DOWN) */
    int used;      /* in the current world */
    int was_down;  /* it was down since the caller last cleared this (what ran on it may be gone) */
};

struct elastic_slots {
    struct elastic_slot *v; /* (n), owned */
    int n;
    int per_slot;          /* workers a slot holds: 1 locally, the tasks of a node under SLURM */
    int min_slots, max_slots;
    int max_failures;
};

/* Fills s with n slots, all usable, named names[i] (NULL: "slot i"), each of
 * per_slot workers; sp in slots: MIN workers need ceil(MIN / per_slot) slots, MAX
 * workers allow floor(MAX / per_slot); MAX not given: n. A slot whose workers died
 * max_failures times is left out. TR_ERR_NOMEM; TR_ERR_ARG with why into err (n
 * bytes) when MIN needs more slots than there are, or MAX allows none. Release with
 * elastic_slots_release. */
enum tr_status elastic_slots_init(struct elastic_slots *s, int n, const char *const *names, int per_slot,
                                  const struct elastic_spec *sp, int max_failures, char *err, size_t errn) TR_WUR;
void elastic_slots_release(struct elastic_slots *s);

/* The slot named name, -1 when none (a host name matches a node's name up to its first '.'). */
int elastic_slots_find(const struct elastic_slots *s, const char *name);

/* A worker of slot i died at step: its failures counted; it rests, or is left out
 * for good at max_failures. Returns its new state. */
enum elastic_state elastic_slots_lost(struct elastic_slots *s, int i, int64_t step);

/* Slot i answers (up: 1) or not (0) at step (a node's probe): a down or resting
 * slot that answers is usable; a usable or resting one that does not is down. A
 * slot left out stays out. */
void elastic_slots_answer(struct elastic_slots *s, int i, int up, int64_t step);

/* Resting slots left out at least grow_every steps before step become usable.
 * Returns how many did. */
int elastic_slots_ready(struct elastic_slots *s, int64_t step, int64_t grow_every);

/* Usable slots (IN), those in the current world, and those left out for good. */
int elastic_slots_usable(const struct elastic_slots *s);
int elastic_slots_in_world(const struct elastic_slots *s);
int elastic_slots_out(const struct elastic_slots *s);

/* The world of the next attempt: the first min(usable, max_slots) usable slots, in
 * slot order, become the world (used), the rest not. Returns how many slots; fewer
 * than min_slots (nothing is changed then) is -1. */
int elastic_slots_choose(struct elastic_slots *s);

/* 1 when the next attempt would have more slots than the current world. */
int elastic_slots_can_grow(const struct elastic_slots *s);

/* The slot holding rank r of the current world (ranks fill the used slots in order,
 * per_slot each), -1 when r is outside it. */
int elastic_slots_of_rank(const struct elastic_slots *s, int r);

/* The names of the slots in state st (or, st < 0, of those in the world), joined
 * by sep, into buf (n bytes; "" for none). Returns buf. */
char *elastic_slots_names(const struct elastic_slots *s, int st, const char *sep, char *buf, size_t n);

/* "usable", "resting", "down", "left out" */
const char *elastic_state_name(enum elastic_state st);

#ifdef __cplusplus
}
#endif
#endif
