#!/usr/bin/env bash
# slurm_multinode.sh: the seed's generic SLURM batch script, for terarec. Like the
# seed's it has no #SBATCH lines (resources come from the sbatch command line) and
# takes the same environment variables:
#   cmd         the command every task runs (through /bin/bash -c); the seed's
#               'python -u main.py FLAGS' runs terarec-worker FLAGS (the seed's flag
#               names). Unset: 'terarec train ARGS' once on the first node, which
#               starts the store, the loader and the workers itself (ARGS: this
#               script's arguments)
#   srun_flags  extra srun options (the seed's example: --mpi=pmix)
#   cont        a container image for pyxis/enroot (srun --container-image); unset: bare
#               metal. Without cmd: terarec train --container-image=$cont (the launcher
#               runs here, its programs in the image: containers/README.md)
#   mounts      SRC:DST[:FLAGS][,...] for --container-mounts
# Example (the 1.68 TB model on 4 nodes x 8 GPUs):
#   cmd='terarec-worker --dataset_path /data/dlrm/full_criteo_data --columnwise_split
#        --data_parallel_bottom_mlp --embedding_dim 512 --bottom_mlp_dims 512,256,512'
#   srun_flags='--mpi=pmix' sbatch -n 32 -N 4 -t 00:20:00 slurm/slurm_multinode.sh
# Unlike the seed's (which asks for one task per node whatever -n says), tasks are
# spread -n / -N per node: one per GPU.
set -euo pipefail

ntasks=${SLURM_NTASKS:-1}
nodes=${SLURM_JOB_NUM_NODES:-${SLURM_NNODES:-1}}
per_node=$(( (ntasks + nodes - 1) / nodes ))

# terarec's programs: $TR_BIN, else beside the submit directory's build, else PATH
bin=${TR_BIN:-}
if [ -z "$bin" ] && [ -x "${SLURM_SUBMIT_DIR:-.}/build/bin/terarec-worker" ]; then
    bin=${SLURM_SUBMIT_DIR:-.}/build/bin
fi
[ -n "$bin" ] && export PATH="$bin:$PATH"

cont_flags=()
if [ -n "${cont:-}" ]; then
    cont_flags+=("--container-image=$cont")
    [ -n "${mounts:-}" ] && cont_flags+=("--container-mounts=$mounts")
fi

if [ -z "${cmd:-}" ]; then
    # terarec train runs here, outside the container (it calls srun); the programs
    # it starts (stores, loader, workers) run in the image
    if [ -n "${cont:-}" ]; then
        exec terarec train --container-image="$cont" ${mounts:+--container-mounts="$mounts"} "$@"
    fi
    exec terarec train "$@"
fi

# the seed's command line: 'python[3] [-u] main.py FLAGS' -> 'terarec-worker FLAGS'
cmd=$(printf '%s' "$cmd" | sed -E 's#(^|[[:space:]])python3?([[:space:]]+-u)?[[:space:]]+(\./)?main\.py#\1terarec-worker#')

# --mpi=none first, then srun_flags: a later --mpi=pmix wins, as in the seed
# shellcheck disable=SC2086
exec srun --mpi=none ${srun_flags:-} --ntasks-per-node="$per_node" "${cont_flags[@]}" /bin/bash -c "$cmd"
