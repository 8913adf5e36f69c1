#!/usr/bin/env bash
# slurm_multinode.sh: the seed's generic SLURM batch script, for terarec. Like the
# seed's it has no #SBATCH lines (resources come from the sbatch command line) and
# takes the same environment variables:
#   cmd         the command every task runs (through /bin/bash -c); the seed's
#               'python -u main.py FLAGS' runs terarec-worker FLAGS (the seed's flag
#               names). Unset: 'terarec train ARGS' once on the first node, which
#               starts the store, the loader and the workers itself (ARGS: this
#               script's arguments)
#   srun_flags  extra srun options (the seed's example: --mpi=pmix; no longer needed)
#   cont        a container image for pyxis/enroot (srun --container-image); unset: bare
#               metal. Without cmd: terarec train --container-image=$cont (the launcher
#               runs here, its programs in the image: containers/README.md)
#   mounts      SRC:DST[:FLAGS][,...] for --container-mounts
# Example (the 1.68 TB model on 4 nodes x 8 GPUs), as the seed writes it:
#   cmd='python -u main.py --dataset_path /data/dlrm/full_criteo_data --columnwise_split
#        --data_parallel_bottom_mlp --embedding_dim 512 --bottom_mlp_dims 512,256,512'
#   cmd=$cmd sbatch -n 32 -N 4 -t 00:20:00 slurm/slurm_multinode.sh
# What cmd runs as:
# - exactly 'terarec-worker FLAGS' (after the translation; no shell syntax) and
#   srun_flags choosing no --mpi but pmix: 'terarec train FLAGS' (srun_flags as its
#   --srun_args), which starts the workers with srun --mpi=pmix on the allocation's
#   -n tasks over -N nodes (srun's own layout of them), with the checkpoint store and
#   the loader, and records the run in the run history (terarec runs list; --db: the
#   default, or TR_DB) as any terarec train does. Without a data or model flag that
#   is terarec train's demo, not terarec-worker's defaults. When terarec train
#   refuses FLAGS (a --dry_run says so: e.g. --mode eval), the next way is taken,
#   with a line saying why;
# - any other cmd: srun --mpi=pmix when it runs terarec-worker, else --mpi=none, then
#   srun_flags (a --mpi there wins), --ntasks-per-node=ceil(-n / -N), /bin/bash -c cmd.
#   Workers started without PMIx refuse to train alone (each would see a world of 1).
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

# does srun_flags choose an MPI plugin other than PMIx? (--mpi=X or --mpi X: the
# user's choice, which the workers' srun then takes as given)
mpi_given=0
case " ${srun_flags:-} " in
*[[:space:]]--mpi=pmix* | *[[:space:]]--mpi[[:space:]]pmix*) ;;
*[[:space:]]--mpi=* | *[[:space:]]--mpi[[:space:]]*) mpi_given=1 ;;
esac

# 'terarec-worker FLAGS' alone: through terarec train, which records the run
if [ $mpi_given = 0 ] && [[ $cmd =~ ^[[:space:]]*terarec-worker([[:space:]]|$) ]] &&
    ! [[ $cmd =~ [\;\|\&\$\`\<\>\(\)\{\}] ]]; then
    # the words as bash -c would split them (quotes kept), without running anything
    eval "flags=(${cmd#*terarec-worker})"
    train=(terarec train)
    [ -n "${cont:-}" ] && train+=("--container-image=$cont")
    [ -n "${cont:-}" ] && [ -n "${mounts:-}" ] && train+=("--container-mounts=$mounts")
    [ -n "${srun_flags:-}" ] && train+=("--srun_args=$srun_flags")
    train+=("${flags[@]}")
    if why=$("${train[@]}" --dry_run 2>&1 >/dev/null); then
        echo "slurm_multinode.sh: cmd runs as: ${train[*]}"
        exec "${train[@]}"
    fi
    echo "slurm_multinode.sh: terarec train refuses these flags ($(echo "$why" | grep -m1 'error' || true)):" \
        "cmd runs under srun as given" >&2
fi

# --mpi first, then srun_flags: a later --mpi there wins, as in the seed. Workers
# need PMIx (without it each is a world of 1, and refuses)
mpi=--mpi=none
[[ $cmd =~ (^|[[:space:]/])terarec-worker([[:space:]]|$) ]] && mpi=--mpi=pmix
# shellcheck disable=SC2086
exec srun $mpi ${srun_flags:-} --ntasks-per-node="$per_node" "${cont_flags[@]}" /bin/bash -c "$cmd"
