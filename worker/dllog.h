/* dllog.h: a DLLogger-compatible JSON-lines log (NVIDIA dllogger's
 * JSONStreamBackend): each line is "DLLL " + {"timestamp", "datetime",
 * "elapsedtime", "type", "step", "data"}, keys in that order. */
#ifndef TR_DLLOG_H
#define TR_DLLOG_H

#include <stdio.h>

#include <jansson.h>

#include "../common/status.h"

#ifdef __cplusplus
extern "C" {
#endif

struct dllog {
    FILE *fp;   /* NULL: disabled */
    double t0;  /* wall clock at open, for elapsedtime */
};

/* Opens (truncates) `path`; a NULL or empty path gives a disabled log.
 * TR_ERR_IO (logged with the path) if it cannot be created. */
enum tr_status dllog_open(struct dllog *l, const char *path) TR_WUR;

/* Writes one record and flushes. Takes ownership of `step` and `data` (either may
 * be NULL: step defaults to [] and data to {}). TR_ERR_IO on a write error. */
enum tr_status dllog_write(struct dllog *l, json_t *step, json_t *data) TR_WUR;

void dllog_close(struct dllog *l);

#ifdef __cplusplus
}
#endif
#endif
