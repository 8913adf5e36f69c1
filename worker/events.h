/* events.h: what a run reports while it runs (its parameters, progress, each
 * evaluation, a final summary), delivered to every sink added: the DLLogger JSON
 * lines file of the seed now, a socket to the launcher later. An event is a kind,
 * a step and a JSON object (jansson), so every sink receives the same fields.
 * Rank 0 emits; a set of events without sinks ignores what it is given. */
#ifndef TR_EVENTS_H
#define TR_EVENTS_H

#include <stdint.h>

#include <jansson.h>

#include "../common/status.h"

#ifdef __cplusplus
extern "C" {
#endif

enum events_kind {
    EVENTS_PARAMS = 0, /* the effective configuration, once at the start */
    EVENTS_STEP,       /* progress after `step` training steps */
    EVENTS_EVAL,       /* an evaluation after `step` training steps */
    EVENTS_SUMMARY,    /* the end of the run */
    EVENTS_CKPT,       /* a checkpoint of the state after `step` steps was committed */
};

struct events_sink_i {
    const char *name;
    /* Writes one event; data is borrowed. TR_ERR_IO. */
    enum tr_status (*write)(void *ctx, enum events_kind kind, int64_t step, const json_t *data);
    void (*close)(void *ctx);
};

#define EVENTS_MAX_SINKS 4

struct events {
    int n;
    struct {
        const struct events_sink_i *i;
        void *ctx;
    } sink[EVENTS_MAX_SINKS];
};

/* An empty set of sinks (events go nowhere). */
void events_init(struct events *ev);

/* Adds a DLLogger-compatible file sink (NVIDIA dllogger's JSONStreamBackend):
 * each line is "DLLL " + {"timestamp", "datetime", "elapsedtime", "type", "step",
 * "data"}, keys in that order; step is "PARAMETER", the step number, or [] for
 * the summary. The file is created (truncated) now; a NULL or empty path adds
 * nothing. TR_ERR_IO (logged with the path and a hint), TR_ERR_NOMEM. */
enum tr_status events_add_dllog(struct events *ev, const char *path) TR_WUR;

/* Sends one event to every sink and releases data (a reference it owns; NULL is
 * an empty object). Every sink gets it even if one fails; the first error is
 * returned (TR_ERR_IO). */
enum tr_status events_emit(struct events *ev, enum events_kind kind, int64_t step, json_t *data) TR_WUR;

/* Closes every sink (flushing files). Safe twice. */
void events_close(struct events *ev);

/* A JSON number, or null for NaN and infinities (which JSON cannot hold). */
json_t *events_num(double v);

#ifdef __cplusplus
}
#endif
#endif
