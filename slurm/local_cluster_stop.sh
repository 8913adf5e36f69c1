#!/usr/bin/env bash
# local_cluster_stop.sh [--purge]: stops what local_cluster.sh started and removes
# what it created: cancels the cluster's jobs, stops slurmd, slurmctld and (only if
# local_cluster.sh started it) munged by their pid files, stops whatever still runs in
# its namespaces, then deletes those namespaces, veths and the bridge. Never signals a
# process by name. --purge also deletes $TR_SLURM_DIR. Same environment as the start.
set -uo pipefail

DIR=${TR_SLURM_DIR:-/var/spool/terarec-slurm}
RUN=$DIR/run
PURGE=0
case ${1:-} in
    --purge) PURGE=1 ;;
    '') ;;
    *) echo "usage: $0 [--purge]" >&2; exit 2 ;;
esac
export SLURM_CONF=$DIR/etc/slurm.conf

say() { echo "local_cluster_stop: $*" >&2; }
# pid_of PIDFILE COMM: prints the pid in PIDFILE if it is still the program COMM
pid_of() {
    local pid
    pid=$(cat "$1" 2>/dev/null) || return 1
    [ -n "$pid" ] && [ "$(cat "/proc/$pid/comm" 2>/dev/null)" = "$2" ] && echo "$pid"
}
# stop WAIT WHAT PID...: SIGTERM, up to WAIT seconds to exit, then SIGKILL
stop() {
    local wait=$1 what=$2 pid left=()
    shift 2
    [ $# -gt 0 ] || return 0
    kill -TERM "$@" 2>/dev/null
    for _ in $(seq $((wait * 10))); do
        left=()
        for pid in "$@"; do kill -0 "$pid" 2>/dev/null && left+=("$pid"); done
        [ ${#left[@]} -eq 0 ] && { say "stopped $what ($*)"; return 0; }
        sleep 0.1
    done
    kill -KILL "${left[@]}" 2>/dev/null
    say "killed $what (${left[*]}) after $wait s"
}

[ "$(id -u)" -eq 0 ] || { say "must run as root"; exit 1; }
[ -d "$RUN" ] || { say "nothing to stop ($RUN does not exist)"; exit 0; }
rc=0

# 1. the jobs, so that their slurmstepd and tasks end by themselves within KillWait
if pid_of "$RUN/slurmctld.pid" slurmctld >/dev/null; then
    jobs=$(squeue -h -o %A 2>/dev/null | tr '\n' ' ')
    if [ -n "${jobs// /}" ]; then
        say "cancelling jobs $jobs"
        # shellcheck disable=SC2086
        scancel $jobs 2>/dev/null
        kw=$(scontrol show config 2>/dev/null | awk '$1 == "KillWait" { print $3 }')
        for _ in $(seq $(((${kw:-30} + 10) * 4))); do
            [ -z "$(squeue -h -o %A 2>/dev/null)" ] && break
            sleep 0.25
        done
    fi
fi

# 2. the daemons, every slurmd and slurmctld together (each takes 1 to 2 s to exit)
pids=()
for f in "$RUN"/slurmd-*.pid "$RUN/slurmctld.pid"; do
    [ -e "$f" ] || continue
    comm=${f##*/} && comm=${comm%%-*} && comm=${comm%.pid}
    p=$(pid_of "$f" "$comm") && pids+=("$p")
    rm -f "$f"
done
stop 10 "slurmd and slurmctld" "${pids[@]}"

# 3. what is still running in our namespaces (steps, tasks), then the namespaces and links
if [ -e "$RUN/created" ]; then
    while read -r -u 3 kind name; do
        [ "$kind" = netns ] && [ -e "/run/netns/$name" ] || continue
        # slurmstepd ignores SIGTERM; the jobs were cancelled above, so this is only leftovers
        # shellcheck disable=SC2046
        stop 2 "processes in $name" $(ip netns pids "$name" 2>/dev/null)
        if ip netns del "$name"; then say "deleted namespace $name"; else rc=1; fi
    done 3<"$RUN/created"
    while read -r -u 3 kind name; do
        [ "$kind" = link ] && ip link show "$name" >/dev/null 2>&1 || continue
        # a veth whose peer was in a namespace deleted above goes away with it, a
        # moment later: gone before our delete is as good as deleted
        if ip link del "$name" 2>/dev/null || ! ip link show "$name" >/dev/null 2>&1; then
            say "deleted link $name"
        else
            ip link del "$name" || rc=1
        fi
    done 3<"$RUN/created"
fi

# 4. munged, only if local_cluster.sh started it for this cluster, and no other cluster of
# local_cluster.sh (another TR_SLURM_DIR) still runs: that one would lose its munged, so it
# inherits the pid file instead and stops munged when it stops
REG=/run/terarec-slurm.clusters
if [ -e "$REG" ]; then
    grep -vxF "$DIR" "$REG" >"$REG.tmp"
    mv -f "$REG.tmp" "$REG"
    [ -s "$REG" ] || rm -f "$REG"
fi
if p=$(pid_of "$RUN/munged.pid" munged); then
    heir=""
    while read -r -u 3 d; do
        if pid_of "$d/run/slurmctld.pid" slurmctld >/dev/null && [ ! -e "$d/run/munged.pid" ]; then heir=$d; break; fi
    done 3< <(cat "$REG" 2>/dev/null)
    if [ -n "$heir" ]; then
        cp "$RUN/munged.pid" "$heir/run/munged.pid" && say "left munged ($p) running for the cluster in $heir"
    else
        stop 10 munged "$p"
    fi
fi
rm -f "$RUN/munged.pid" "$RUN/nodes"

if [ $PURGE = 1 ]; then
    if grep -qx 'file /etc/munge/munge.key' "$RUN/created" 2>/dev/null; then
        rm -f /etc/munge/munge.key && say "removed /etc/munge/munge.key (created by local_cluster.sh)"
    fi
    if [ -e "$DIR/.terarec-local-cluster" ]; then
        rm -rf "$DIR" && say "removed $DIR"
    else
        say "not removing '$DIR': it lacks the mark .terarec-local-cluster"; rc=1
    fi
elif [ $rc = 0 ]; then
    grep -v '^\(netns\|link\) ' "$RUN/created" >"$RUN/created.tmp" 2>/dev/null
    mv -f "$RUN/created.tmp" "$RUN/created"
    [ -s "$RUN/created" ] || rm -f "$RUN/created"
fi
say "done"
exit $rc
