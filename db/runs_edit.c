/* runs_edit.c: the subcommands of `terarec runs` that change what people add to a
 * run: tag (tags added, --rm removed), note (a text, or a file's) and rename.
 * Each is one transaction of write.c's on a writer's open (db_open: busy timeout,
 * a history this process cannot write refused with its path); nothing else of a
 * run is ever changed here. */
#define TR_SUBSYS TR_SUB_DB
#define _GNU_SOURCE
#include "db.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "../common/alloc.h"
#include "../common/check.h"
#include "../common/file.h"
#include "../common/log.h"
#include "runs_cmd.h"

#define NOTE_MAX (64 * 1024)

enum tr_status runs_cmd_tag(struct runs_ctx *x)
{
    if (x->nargs < 1 || (x->nargs < 2 && x->cfg->nrm == 0)) {
        LOG_ERROR("give a run and one tag or more (or --rm TAG)");
        LOG_HINT("terarec runs tag RUN baseline lr-sweep [--rm old]");
        return TR_ERR_ARG;
    }
    char *id = NULL;
    TR_CHECK(db_run_resolve(x->db, x->args[0], &id));
    enum tr_status rc = db_run_tag(x->db, id, (const char *const *)x->args + 1, x->nargs - 1,
                                   (const char *const *)x->cfg->rm, x->cfg->nrm);
    if (rc == TR_OK) {
        char *tags = NULL;
        rc = db_run_get(x->db, id, "tags", &tags);
        if (rc == TR_OK)
            printf("run %s: tags %s\n", id, tags ? tags : "[]");
        tr_free(tags);
    }
    tr_free(id);
    return rc;
}

/* The note from -F FILE ("-": standard input) into *out (tr_malloc'd), at most
 * NOTE_MAX bytes, a final newline dropped. TR_ERR_IO, TR_ERR_ARG (logged). */
static enum tr_status read_note(const char *path, char **out)
{
    FILE *f = strcmp(path, "-") ? fopen(path, "rb") : stdin;
    char *b = tr_malloc(NOTE_MAX + 2);
    *out = NULL;
    if (!f || !b) {
        if (!f)
            LOG_ERROR("cannot read the note '%s': %s", path, strerror(errno));
        tr_free(b);
        return f ? TR_ERR_NOMEM : TR_ERR_IO;
    }
    size_t n = fread(b, 1, NOTE_MAX + 1, f);
    int err = ferror(f);
    if (f != stdin)
        fclose(f);
    if (err || n > NOTE_MAX) {
        LOG_ERROR("cannot read the note '%s': %s", path, err ? "a read error" : "longer than 64 KiB");
        tr_free(b);
        return err ? TR_ERR_IO : TR_ERR_ARG;
    }
    while (n && (b[n - 1] == '\n' || b[n - 1] == '\r'))
        n--;
    b[n] = '\0';
    if (strlen(b) != n) {
        LOG_ERROR("the note '%s' holds NUL bytes: it is not text", path);
        tr_free(b);
        return TR_ERR_ARG;
    }
    *out = b;
    return TR_OK;
}

enum tr_status runs_cmd_note(struct runs_ctx *x)
{
    const int from_file = x->cfg->file != NULL;
    if (x->nargs != (from_file ? 1 : 2)) {
        LOG_ERROR(from_file ? "give a run and -F FILE, not a text too" : "give a run and the note's text (one argument)");
        LOG_HINT("terarec runs note RUN 'why this run' (or -F FILE; '' clears it)");
        return TR_ERR_ARG;
    }
    char *id = NULL, *text = NULL;
    enum tr_status rc = TR_OK;
    if (from_file)
        TR_CHECK(read_note(x->cfg->file, &text));
    else if (strlen(x->args[1]) > NOTE_MAX) {
        LOG_ERROR("the note is longer than 64 KiB");
        return TR_ERR_ARG;
    }
    TR_CHECK_GOTO(db_run_resolve(x->db, x->args[0], &id), rc, exit);
    TR_CHECK_GOTO(db_run_set_note(x->db, id, from_file ? text : x->args[1]), rc, exit);
    printf("run %s: %s\n", id, *(from_file ? text : x->args[1]) ? "note set" : "note cleared");
exit:
    tr_free(text);
    tr_free(id);
    return rc;
}

enum tr_status runs_cmd_rename(struct runs_ctx *x)
{
    if (x->nargs != 2) {
        LOG_ERROR("give a run and its new name");
        LOG_HINT("terarec runs rename RUN NEWNAME");
        return TR_ERR_ARG;
    }
    char *id = NULL, *old = NULL;
    TR_CHECK(db_run_resolve(x->db, x->args[0], &id));
    enum tr_status rc = db_run_get(x->db, id, "name", &old);
    if (rc == TR_OK)
        rc = db_run_rename(x->db, id, x->args[1]);
    if (rc == TR_OK)
        printf("run %s: renamed from '%s' to '%s'\n", id, old ? old : "", x->args[1]);
    tr_free(old);
    tr_free(id);
    return rc;
}
