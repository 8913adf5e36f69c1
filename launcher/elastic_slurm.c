/* elastic_slurm.c: an elastic run's nodes under SLURM (launch_internal.h): the
 * allocation's node names, which of them answer (scontrol show node, then a short
 * probe step on each, at once), the probe of the down nodes in the background
 * while an attempt runs, the workers' srun flags of the world chosen, each node's
 * free memory for the re-plan, and the checkpoint store started again on a node
 * that comes back. It runs SLURM's commands; what to do with their answers is
 * elastic.c's. */
#define TR_SUBSYS TR_SUB_INIT
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../common/alloc.h"
#include "../common/check.h"
#include "../common/clock.h"
#include "../common/file.h"
#include "../common/log.h"
#include "launch_internal.h"

#define STR_(x) #x
#define STR(x) STR_(x)

/* Node names are letters, digits and - _ . [ ] , (a host list): nothing a shell reads. */
static int plain(const char *s)
{
    for (; *s; s++)
        if (!strchr("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.[],", *s))
            return 0;
    return 1;
}

enum tr_status launch_elastic_slurm_nodes(struct launch *L, char ***names, int *n)
{
    (void)L;
    *names = NULL;
    *n = 0;
    const char *list = getenv("SLURM_JOB_NODELIST");
    if (!list || !*list || !plain(list)) {
        LOG_ERROR("--elastic: SLURM_JOB_NODELIST '%s' is not a node list", list ? list : "");
        return TR_ERR_IO;
    }
    char cmd[8400];
    snprintf(cmd, sizeof cmd, "scontrol show hostnames '%s' 2>&1 </dev/null", list);
    FILE *fp = popen(cmd, "r");
    if (!fp) {
        LOG_ERROR("--elastic: cannot run scontrol show hostnames");
        return TR_ERR_IO;
    }
    char line[512];
    int cap = 0, bad = 0;
    while (fgets(line, sizeof line, fp)) {
        line[strcspn(line, "\r\n")] = 0;
        if (!*line)
            continue;
        if (!plain(line) || strlen(line) >= ELASTIC_NAME_MAX) {
            bad = 1;
            continue;
        }
        if (*n == cap) {
            cap = cap ? 2 * cap : 16;
            char **v = tr_realloc(*names, (size_t)cap * sizeof *v);
            if (!v) {
                bad = 1;
                break;
            }
            *names = v;
        }
        (*names)[(*n)++] = tr_strdup(line);
    }
    const int st = pclose(fp);
    if (bad || st != 0 || *n == 0) {
        LOG_ERROR("--elastic: 'scontrol show hostnames %s' did not list the allocation's nodes", list);
        launch_elastic_names_free(*names, *n);
        *names = NULL;
        *n = 0;
        return TR_ERR_IO;
    }
    return TR_OK;
}

void launch_elastic_names_free(char **names, int n)
{
    for (int i = 0; names && i < n; i++)
        tr_free(names[i]);
    tr_free(names);
}

/* The probe of the nodes named after it, at once, one line each: "NAME yes", or
 * "NAME no WHY": its state in scontrol show node (down, drained, not
 * responding), its slurmd not accepting a connection within 2 s (bash's
 * /dev/tcp), or the probe step's exit and last line (srun within ELASTIC_PROBE_S). */
static const char probe_script[] =
    "port=$(scontrol show config 2>/dev/null </dev/null | sed -n 's/^SlurmdPort *= *\\([0-9]*\\).*/\\1/p')\n"
    "for n in \"$@\"; do (\n"
    "  line=$(scontrol show node -o \"$n\" 2>/dev/null </dev/null)\n"
    "  st=$(printf '%s\\n' \"$line\" | sed -n 's/.* State=\\([^ ]*\\).*/\\1/p')\n"
    "  addr=$(printf '%s\\n' \"$line\" | sed -n 's/.* NodeAddr=\\([^ ]*\\).*/\\1/p')\n"
    "  case \"$st\" in ''|*DOWN*|*DRAIN*|*FAIL*|*NOT_RESPONDING*|*POWER*|*REBOOT*)\n"
    "    echo \"$n no state ${st:-unknown}\"; exit 0;; esac\n"
    "  if [ -n \"$addr\" ] && ! timeout 2 bash -c \": </dev/tcp/$addr/${port:-6818}\" 2>/dev/null; then\n"
    "    echo \"$n no its slurmd ($addr:${port:-6818}) does not take connections\"; exit 0; fi\n"
    "  out=$(timeout -k 2 " STR(ELASTIC_PROBE_S) " srun --overlap --mpi=none --nodes=1 --ntasks=1 "
    "--ntasks-per-node=1 --nodelist=\"$n\" --job-name=terarec-probe true 2>&1 </dev/null); rc=$?\n"
    "  if [ $rc -eq 0 ]; then echo \"$n yes\"; else echo \"$n no probe step exit $rc: $(printf '%s' \"$out\" | "
    "tail -n 1)\"; fi\n"
    ") & done; wait\n";

/* The probe's command line for the slots idx[0 .. k), into a (sh -c SCRIPT sh NAMES...). */
static void probe_argv(struct launch *L, const int *idx, int k, struct argv *a)
{
    argv_add(a, "bash");
    argv_add(a, "-c");
    argv_add(a, probe_script);
    argv_add(a, "bash");
    for (int j = 0; j < k; j++)
        argv_add(a, L->el.slots.v[idx[j]].name);
}

/* One line of the probe's output: its slot's answer into up[] / why[] (j: its index in idx). */
static void probe_line(struct launch *L, const char *line, const int *idx, int k, int *up,
                       char (*why)[ELASTIC_WHY_MAX])
{
    const size_t nl = strcspn(line, " ");
    for (int j = 0; j < k; j++) {
        const char *name = L->el.slots.v[idx[j]].name;
        if (strlen(name) != nl || strncmp(name, line, nl))
            continue;
        up[j] = !strncmp(line + nl, " yes", 4);
        if (why)
            snprintf(why[j], ELASTIC_WHY_MAX, "%s", up[j] ? "" : line + nl + (line[nl] ? 4 : 0));
    }
}

void launch_elastic_probe(struct launch *L, const int *idx, int k, int *up, char (*why)[ELASTIC_WHY_MAX])
{
    for (int j = 0; j < k; j++) {
        up[j] = 0;
        if (why)
            snprintf(why[j], ELASTIC_WHY_MAX, "no answer from its probe");
    }
    if (k == 0)
        return;
    struct argv a = {0};
    probe_argv(L, idx, k, &a);
    char *q = proc_quote(a.v);
    argv_free(&a);
    if (!q)
        return;
    char *cmd = tr_malloc(strlen(q) + 32);
    if (cmd)
        sprintf(cmd, "%s 2>/dev/null </dev/null", q);
    tr_free(q);
    FILE *fp = cmd ? popen(cmd, "r") : NULL;
    tr_free(cmd);
    if (!fp)
        return;
    char line[1024];
    while (fgets(line, sizeof line, fp)) {
        line[strcspn(line, "\r\n")] = 0;
        probe_line(L, line, idx, k, up, why);
    }
    pclose(fp);
}

void launch_elastic_probe_tick(struct launch *L)
{
    struct launch_elastic *e = &L->el;
    struct elastic_slots *s = &e->slots;
    int idx[256], k = 0;
    for (int i = 0; i < s->n && k < (int)TR_ARRAY_SIZE(idx); i++)
        if (s->v[i].state == ELASTIC_DOWN)
            idx[k++] = i;
    if (e->probe.pid > 0) {
        if (!proc_poll(&e->probe))
            return;
        char *text = NULL;
        size_t len = 0;
        int up[256] = {0};
        if (tr_file_read_all(e->probe.log, &text, &len) == TR_OK) {
            for (char *save = NULL, *ln = strtok_r(text, "\n", &save); ln; ln = strtok_r(NULL, "\n", &save))
                probe_line(L, ln, idx, k, up, NULL);
            tr_free(text);
        }
        proc_release(&e->probe);
        memset(&e->probe, 0, sizeof e->probe);
        int back = 0;
        for (int j = 0; j < k; j++)
            if (up[j]) {
                elastic_slots_answer(s, idx[j], 1, 0);
                launch_clear_line(L);
                fprintf(stderr, "terarec: elastic: node %s answers again: the run grows at the next restart point\n",
                        s->v[idx[j]].name);
                back = 1;
            }
        if (back)
            e->ckpt_mark = L->saved_step; /* the next checkpoint after it came back */
        e->next_probe = tr_clock_now() + ELASTIC_REPROBE_S;
        return;
    }
    if (k == 0 || tr_clock_now() < e->next_probe || elastic_slots_in_world(s) >= s->max_slots)
        return;
    char log[PATH_MAX + 32];
    snprintf(log, sizeof log, "%s/elastic-probe.log", L->run_dir);
    FILE *fp = fopen(log, "w"); /* the last probe's answers only */
    if (fp)
        fclose(fp);
    struct argv a = {0};
    probe_argv(L, idx, k, &a);
    if (proc_start(&e->probe, "node probe", a.v, log, &L->orig_mask) != TR_OK)
        e->next_probe = tr_clock_now() + ELASTIC_REPROBE_S;
    argv_free(&a);
}

void launch_elastic_srun_args(struct launch *L, struct argv *a)
{
    const struct launch_elastic *e = &L->el;
    /* --overlap: a step that ran on a node now gone stays in SLURM's books until
     * that node is declared down, holding its CPUs on the nodes left */
    argv_add(a, "--overlap");
    argv_addf(a, "--nodes=%d", L->nodes);
    argv_addf(a, "--ntasks=%d", L->world);
    argv_addf(a, "--ntasks-per-node=%d", e->per_node);
    argv_addf(a, "--nodelist=%s", e->nodelist);
    if (*e->exclude)
        argv_addf(a, "--exclude=%s", e->exclude);
}

void launch_elastic_node_room(struct launch *L, int64_t *room, int nodes)
{
    const struct elastic_slots *s = &L->el.slots;
    int k = 0;
    for (int i = 0; i < s->n && k < nodes; i++) {
        if (!s->v[i].used)
            continue;
        room[k] = -1;
        char cmd[256];
        snprintf(cmd, sizeof cmd, "scontrol show node -o '%s' 2>/dev/null </dev/null", s->v[i].name);
        FILE *fp = popen(cmd, "r");
        char line[8192];
        while (fp && fgets(line, sizeof line, fp)) {
            const char *p = strstr(line, " FreeMem=");
            long long mb;
            if (p && sscanf(p, " FreeMem=%lld", &mb) == 1 && mb >= 0)
                room[k] = (int64_t)mb << 20;
        }
        if (fp)
            pclose(fp);
        k++;
    }
    for (; k < nodes; k++)
        room[k] = -1;
}

/* Waits up to 30 s for the store started in *p to say it listens (1), or for its
 * end: 1 when another store holds the port already (the node's own, which lived
 * on), 0 otherwise. */
static int store_listens(struct proc *p)
{
    const double until = tr_clock_now() + 30;
    for (;;) {
        char *text = NULL;
        size_t len = 0;
        int ok = -1;
        const int ended = proc_poll(p);
        if (tr_file_read_all(p->log, &text, &len) == TR_OK) {
            if (strstr(text, "terarec-ckpt: listening on "))
                ok = 1;
            else if (ended && strstr(text, "Address already in use"))
                ok = 1;
            tr_free(text);
        }
        if (ok == 1)
            return 1;
        if (ended || tr_clock_now() > until)
            return 0;
        nanosleep(&(struct timespec){0, 50 * 1000 * 1000}, NULL);
    }
}

void launch_elastic_stores(struct launch *L)
{
    struct launch_elastic *e = &L->el;
    struct elastic_slots *s = &e->slots;
    int port = 0;
    if (!L->ckpt_url || L->ckpt.pid <= 0 || sscanf(L->ckpt_where, "http://127.0.0.1:%d", &port) != 1)
        return; /* not our stores: an outside one, or a path the workers write */
    for (int i = 0; i < s->n; i++) {
        struct elastic_slot *sl = &s->v[i];
        if (sl->state != ELASTIC_IN || !sl->was_down)
            continue;
        struct proc *v = tr_realloc(e->stores, (size_t)(e->nstores + 1) * sizeof *v);
        if (!v)
            return;
        e->stores = v;
        struct proc *p = &e->stores[e->nstores];
        memset(p, 0, sizeof *p);
        struct argv a = {0};
        argv_add(&a, "srun");
        argv_add(&a, "--overlap");
        argv_add(&a, "--mpi=none");
        argv_add(&a, "--nodes=1");
        argv_add(&a, "--ntasks=1");
        argv_add(&a, "--ntasks-per-node=1");
        argv_addf(&a, "--nodelist=%s", sl->name);
        argv_add(&a, "--job-name=terarec-ckpt");
        argv_add(&a, "--kill-on-bad-exit=0");
        argv_add(&a, "--no-kill");
        if (L->ctr.image)
            ctr_srun_flags(&L->ctr, &a, L->run_dir);
        argv_addf(&a, "%s/terarec-ckpt", L->ctr.image ? L->c->container_bin_dir : L->exe_dir);
        argv_addf(&a, "--root=%s", L->ckpt_root);
        argv_addf(&a, "--token_file=%s", L->token_file);
        argv_addf(&a, "--listen=127.0.0.1:%d", port);
        argv_add(&a, "--term_grace=600");
        char log[PATH_MAX + ELASTIC_NAME_MAX + 16];
        snprintf(log, sizeof log, "%s/ckpt-%s.log", L->run_dir, sl->name);
        FILE *fp = fopen(log, "w");
        if (fp)
            fclose(fp);
        const enum tr_status rc = proc_start(p, "checkpoint store", a.v, log, &L->orig_mask);
        argv_free(&a);
        if (rc == TR_OK)
            e->nstores++;
        if (rc == TR_OK && store_listens(p)) {
            sl->was_down = 0;
            continue;
        }
        char *tail = proc_tail(log, 3);
        LOG_WARN("elastic: the checkpoint store on node %s did not start (its log %s ends: %s): the node stays out",
                 sl->name, log, tail ? tail : "");
        tr_free(tail);
        elastic_slots_answer(s, i, 0, launch_stop_step(L));
    }
}

void launch_elastic_stores_stop(struct launch *L)
{
    struct launch_elastic *e = &L->el;
    for (int i = 0; i < e->nstores; i++) {
        proc_stop(&e->stores[i], 10);
        proc_release(&e->stores[i]);
    }
    tr_free(e->stores);
    e->stores = NULL;
    e->nstores = 0;
}
