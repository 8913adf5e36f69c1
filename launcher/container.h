/* container.h: terarec train's programs in a container image (--container-image).
 * Under SLURM each srun step gets pyxis's flags (--container-image,
 * --container-mounts); on one machine each program runs under `docker run` or
 * `podman run`, with the same mounts. Mounts are written in pyxis's syntax,
 * SRC[:DST[:FLAGS]][,...], FLAGS '+'-separated ("ro+rprivate"); a missing DST is
 * SRC. Paths given to the programs are the container's; the launcher, which runs
 * outside it, reads them through the mounts (ctr_host_path). */
#ifndef TR_LAUNCHER_CONTAINER_H
#define TR_LAUNCHER_CONTAINER_H

#include <stddef.h>

#include "../common/status.h"
#include "proc.h"

#ifdef __cplusplus
extern "C" {
#endif

#define CTR_MAX_MOUNTS 64

struct ctr_mount {
    char *src, *dst; /* absolute, without a trailing '/' (but "/") */
    char *flags;     /* pyxis's, '+'-separated; NULL: none */
};

struct ctr {
    const char *image;
    const char *bin_dir; /* where the programs are inside the image */
    const char *runtime; /* "docker" or "podman" locally; NULL under SLURM */
    int no_init;         /* 1: no --init (podman without its init binary, catatonit) */
    struct ctr_mount m[CTR_MAX_MOUNTS];
    int n;
};

/* Parses --container-mounts into c (appending). TR_ERR_ARG with one error line
 * naming the mount at fault and a hint. */
enum tr_status ctr_mounts_parse(struct ctr *c, const char *spec) TR_WUR;

/* Adds path:path (for the run's own directories) unless a mount already puts
 * that host path at the same place. */
void ctr_mount_same(struct ctr *c, const char *path);

void ctr_release(struct ctr *c);

/* The host's path of a path in the container: under the deepest mount whose DST
 * holds it, that mount's SRC plus the rest. Returns 1 when a mount holds it, 0
 * when none does (out is then the path as given: it is the image's own). */
int ctr_host_path(const struct ctr *c, const char *path, char *out, size_t n);

/* pyxis's flags for an srun step: --container-image=IMAGE [--container-mounts=...]
 * [--container-workdir=WORKDIR] */
void ctr_srun_flags(const struct ctr *c, struct argv *a, const char *workdir);

/* The start of a local run: RUNTIME run --rm --init (unless c->no_init) --name NAME --network=host
 * --ipc=host --user UID:GID -w WORKDIR -v SRC:DST[:opts]... -e NAME... [GPUs]
 * IMAGE. The environment passed on: TR_*, NCCL_*, OMP_*, OMPI_MCA_*, PMIX_MCA_*,
 * UCX_* and CUDA_VISIBLE_DEVICES. gpus: hand the machine's GPUs to the container
 * (docker --gpus=all; podman through CDI, --device=nvidia.com/gpu=all). */
void ctr_run_prefix(const struct ctr *c, struct argv *a, const char *name, const char *workdir, int gpus);

/* "docker" or "podman": the first on PATH (NULL when neither is). */
const char *ctr_runtime_find(void);

/* Whether the engine NAME ("docker", "podman") answers: `NAME info` exits 0
 * within timeout_s seconds (killed after). 1 if so; else 0, and why holds the
 * reason ("not on PATH", "did not answer within 20 s", or the first error line
 * it printed). Not thread-safe (forks and reaps its child). */
int ctr_runtime_answers(const char *name, double timeout_s, char *why, size_t n);

/* --container_runtime auto: the first of docker and podman that answers
 * (ctr_runtime_answers, timeout TR_CONTAINER_PROBE_TIMEOUT seconds, default 20),
 * so that an installed docker whose daemon is down does not hide a working podman.
 * Returns its name, with in why what was found ("docker's daemon does not answer
 * (...)"); NULL when neither answers, why then saying what each said. */
const char *ctr_runtime_pick(char *why, size_t n);

/* Whether podman's --init finds its init binary: init_path in containers.conf
 * ($CONTAINERS_CONF alone when set, else /usr/share/containers/, /etc/containers/
 * and the user's ~/.config/containers/, the later winning), else catatonit in
 * podman's helper directories (/usr/local/libexec/podman, /usr/local/lib/podman,
 * /usr/libexec/podman, /usr/lib/podman) or on PATH. 1 when found; 0 with what was
 * looked for in why. */
int ctr_podman_init_found(char *why, size_t n);

#ifdef __cplusplus
}
#endif
#endif
