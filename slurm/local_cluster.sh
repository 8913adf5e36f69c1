#!/usr/bin/env bash
# local_cluster.sh [NODES]: starts a throwaway SLURM cluster on this one machine:
# munged (unless one already works), slurmctld on the host, and NODES (default 2)
# slurmd, each in its own network, UTS and mount namespace, joined by a private
# bridge. Prints "cluster ready" last when every node is up. Idempotent. It does not
# touch /etc/slurm, and installs nothing unless TR_SLURM_INSTALL=1. Needs root.
#
# Environment (all optional; local_cluster_stop.sh reads the same ones):
#   TR_SLURM_DIR       all state, configs, logs, pid files   [/var/spool/terarec-slurm]
#   TR_SLURM_TAG       names: bridge TAG0, namespaces TAG-node<i>, veths TAG-v<i> [trslc]
#   TR_SLURM_SUBNET    first three octets of the bridge's /24 [10.231.73]
#   TR_SLURM_PORT      slurmctld port (slurmd uses PORT+1)    [6917]
#   TR_SLURM_CPUS      CPUs advertised per node (may exceed the real ones) [4]
#   TR_SLURM_MEM       RealMemory per node, MB                [1000]
#   TR_SLURM_KILLWAIT  seconds from SIGTERM to SIGKILL of a cancelled job [5]
#   TR_SLURM_TIMEOUT   seconds to wait for the nodes          [30]
#   TR_SLURM_INSTALL   1: apt-get install missing packages    [0]
# Clients need SLURM_CONF=$TR_SLURM_DIR/etc/slurm.conf (or: . $TR_SLURM_DIR/env).
set -euo pipefail

NODES=${1:-2}
DIR=${TR_SLURM_DIR:-/var/spool/terarec-slurm}
TAG=${TR_SLURM_TAG:-trslc}
SUBNET=${TR_SLURM_SUBNET:-10.231.73}
PORT=${TR_SLURM_PORT:-6917}
CPUS=${TR_SLURM_CPUS:-4}
MEM=${TR_SLURM_MEM:-1000}
KILLWAIT=${TR_SLURM_KILLWAIT:-5}
TIMEOUT=${TR_SLURM_TIMEOUT:-30}
INSTALL=${TR_SLURM_INSTALL:-0}
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
RUN=$DIR/run
CONF=$DIR/etc/slurm.conf
MARK="# written by terarec slurm/local_cluster.sh"
BRIDGE=${TAG}0
export SLURM_CONF=$CONF

say() { echo "local_cluster: $*" >&2; }
die() { echo "local_cluster: $1" >&2; [ $# -gt 1 ] && echo "hint: $2" >&2; exit 1; }
# alive PIDFILE COMM: the pid in PIDFILE runs and is the program COMM (not a reused pid)
alive() {
    local pid
    pid=$(cat "$1" 2>/dev/null) || return 1
    [ -n "$pid" ] && [ "$(cat "/proc/$pid/comm" 2>/dev/null)" = "$2" ]
}
# record KIND NAME: remembers something this script created, for local_cluster_stop.sh
record() { recorded "$1" "$2" || echo "$1 $2" >>"$RUN/created"; }
recorded() { grep -qx "$1 $2" "$RUN/created" 2>/dev/null; }
# mine KIND NAME: NAME exists; refuses to use a link or namespace of that name it did not create
mine() {
    case $1 in
        link) ip link show "$2" >/dev/null 2>&1 || return 1 ;;
        netns) [ -e "/run/netns/$2" ] || return 1 ;;
    esac
    recorded "$1" "$2" || die "$1 '$2' exists but was not created by this script" \
        "delete it, or set TR_SLURM_TAG to use other names"
}

# ---- arguments and the machine
case $NODES in '' | *[!0-9]*) die "NODES must be a number, not '$NODES'" ;; esac
if [ "$NODES" -lt 1 ] || [ "$NODES" -gt 32 ]; then die "NODES must be 1..32, not $NODES"; fi
[[ $TAG =~ ^[a-z][a-z0-9]{0,7}$ ]] || die "TR_SLURM_TAG '$TAG' must be 1-8 of [a-z0-9], starting with a letter"
[[ $SUBNET =~ ^[0-9]+\.[0-9]+\.[0-9]+$ ]] || die "TR_SLURM_SUBNET '$SUBNET' must look like 10.231.73"
[ "$(id -u)" -eq 0 ] || die "must run as root (namespaces, bridge, daemons)" "sudo $0 $NODES"

missing=() notfound=()
for b in slurmctld:slurmctld slurmd:slurmd srun:slurm-client sinfo:slurm-client munged:munge \
         ip:iproute2 nsenter:util-linux unshare:util-linux; do
    command -v "${b%%:*}" >/dev/null 2>&1 || { missing+=("${b#*:}"); notfound+=("${b%%:*}"); }
done
if [ ${#missing[@]} -gt 0 ]; then
    mapfile -t missing < <(printf '%s\n' "${missing[@]}" | sort -u)
    [ "$INSTALL" = 1 ] || die "missing packages: ${missing[*]} (not found: ${notfound[*]})" \
        "apt-get install ${missing[*]}   (or 'make deps', or TR_SLURM_INSTALL=1 $0)"
    say "installing ${missing[*]}"
    DEBIAN_FRONTEND=noninteractive apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
ip netns list >/dev/null 2>&1 || die "'ip netns' does not work here" "a privileged container or a VM is needed"
# slurmd 22.05 always loads its cgroup plugin, which needs a cgroup fs at /sys/fs/cgroup
case $(stat -f -c %T /sys/fs/cgroup 2>/dev/null) in
    cgroup2fs) ;;
    tmpfs) grep -q ' /sys/fs/cgroup/[^ ]* cgroup' /proc/mounts ||
        die "no cgroup fs mounted under /sys/fs/cgroup (slurmd needs one)" "mount -t cgroup2 none /sys/fs/cgroup" ;;
    *) die "no cgroup fs mounted at /sys/fs/cgroup (slurmd needs one)" "mount -t cgroup2 none /sys/fs/cgroup" ;;
esac

mkdir -p "$RUN" "$DIR/etc" "$DIR/state" "$DIR/log" "$DIR/spool" "$DIR/pmixcli" "$DIR/nodes"
touch "$DIR/.terarec-local-cluster"   # local_cluster_stop.sh --purge removes only a dir with this mark
# clusters with other TR_SLURM_DIRs may share our munged: the stop script looks here before stopping it
REG=/run/terarec-slurm.clusters
grep -qxF "$DIR" "$REG" 2>/dev/null || echo "$DIR" >>"$REG"

# ---- a cluster already running: keep it if it has this size; anything left over: clean it first
if alive "$RUN/slurmctld.pid" slurmctld; then
    have=$(cat "$RUN/nodes" 2>/dev/null || echo "?")
    [ "$have" = "$NODES" ] || die "a cluster with $have node(s) is running in $DIR" "stop it first: $HERE/local_cluster_stop.sh"
    say "slurmctld already running (pid $(cat "$RUN/slurmctld.pid")); keeping it"
elif grep -qs '^\(netns\|link\) ' "$RUN/created" || compgen -G "$RUN/*.pid" >/dev/null; then
    say "cleaning up what an earlier run left in $DIR"
    TR_SLURM_DIR=$DIR "$HERE/local_cluster_stop.sh" >&2 || die "could not clean up the earlier run"
    mkdir -p "$RUN"
fi
echo "$NODES" >"$RUN/nodes"

# ---- munge: reuse a working munged, otherwise start one and remember its pid
if munge -n </dev/null 2>/dev/null | unmunge >/dev/null 2>&1; then
    alive "$RUN/munged.pid" munged || say "using the munged already running (not started for this cluster)"
else
    id munge >/dev/null 2>&1 || die "no user 'munge'" "reinstall the munge package"
    if [ ! -s /etc/munge/munge.key ]; then   # the Debian package creates it; make one if not
        say "creating /etc/munge/munge.key"
        mkdir -p /etc/munge && chmod 0700 /etc/munge
        mungekey --create --keyfile=/etc/munge/munge.key
        chown munge:munge /etc/munge /etc/munge/munge.key
        record file /etc/munge/munge.key
    fi
    if [ ! -d /run/munge ]; then   # on a tmpfs; systemd would create it for munge.service
        mkdir -p /run/munge && chmod 0755 /run/munge && chown munge:munge /run/munge
    fi
    rm -f /run/munge/munged.pid
    runuser -u munge -- munged || die "cannot start munged" "see /var/log/munge/munged.log"
    for _ in $(seq 50); do [ -s /run/munge/munged.pid ] && break; sleep 0.1; done
    cp /run/munge/munged.pid "$RUN/munged.pid" 2>/dev/null || die "munged wrote no pid file" \
        "see /var/log/munge/munged.log"
    munge -n </dev/null | unmunge >/dev/null || die "munged started but 'munge -n | unmunge' fails" \
        "see /var/log/munge/munged.log"
    say "started munged (pid $(cat "$RUN/munged.pid"))"
fi

# ---- configuration (only our own files, under $DIR/etc)
CTL=$(hostname -s)
CTL_ADDR=$SUBNET.1
node_name() { echo "trnode$1"; }
node_addr() { echo "$SUBNET.$((10 + $1))"; }
if [ -e "$CONF" ] && ! grep -qxF "$MARK" "$CONF"; then
    die "'$CONF' exists and was not written by this script" "choose another TR_SLURM_DIR"
fi
{
    echo "$MARK"
    echo "# $NODES emulated node(s); see slurm/README.md. Use with SLURM_CONF=$CONF"
    cat <<EOF
ClusterName=terarec
SlurmctldHost=$CTL($CTL_ADDR)
SlurmctldPort=$PORT
SlurmdPort=$((PORT + 1))
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CryptoType=crypto/munge
StateSaveLocation=$DIR/state
SlurmdSpoolDir=$DIR/spool/%n
SlurmctldPidFile=$RUN/slurmctld.pid
SlurmdPidFile=$RUN/slurmd-%n.pid
SlurmctldLogFile=$DIR/log/slurmctld.log
SlurmdLogFile=$DIR/log/slurmd-%n.log
# no cgroup confinement: works on VMs and laptops without cgroup delegation
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
MpiDefault=pmix
# believe CPUs= below even where the machine has fewer cores
SlurmdParameters=config_overrides
ReturnToService=2
SchedulerType=sched/backfill
SlurmctldTimeout=30
SlurmdTimeout=30
InactiveLimit=0
KillWait=$KILLWAIT
MinJobAge=60
EOF
    for i in $(seq "$NODES"); do
        echo "NodeName=$(node_name "$i") NodeAddr=$(node_addr "$i") CPUs=$CPUS RealMemory=$MEM State=UNKNOWN"
    done
    echo "PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP"
} >"$CONF.tmp"
changed=0
if cmp -s "$CONF.tmp" "$CONF"; then rm -f "$CONF.tmp"; else mv "$CONF.tmp" "$CONF" && changed=1; fi
# mpi/pmix makes <PMIxCliTmpDirBase>/spmix_appdir_<uid>_<job>.<step> on each node; with one
# shared /tmp the second node fails "File exists". Each node's mount namespace puts its own
# directory over $DIR/pmixcli (below). Slurm reads mpi.conf next to slurm.conf.
printf '%s\nPMIxCliTmpDirBase=%s\n' "$MARK" "$DIR/pmixcli" >"$DIR/etc/mpi.conf"
{
    echo "127.0.0.1 localhost"
    echo "$CTL_ADDR $CTL"
    for i in $(seq "$NODES"); do echo "$(node_addr "$i") $(node_name "$i")"; done
} >"$DIR/etc/hosts"
echo "export SLURM_CONF=$CONF" >"$DIR/env"

# ---- network: bridge $BRIDGE ($CTL_ADDR) on the host, one namespace + veth per node
if ! mine link "$BRIDGE"; then
    if ip -4 route show "$SUBNET.0/24" | grep -q .; then
        die "subnet $SUBNET.0/24 is already routed here: $(ip -4 route show "$SUBNET.0/24")" \
            "set TR_SLURM_SUBNET to an unused one, e.g. 10.231.99"
    fi
    ip link add name "$BRIDGE" type bridge
    record link "$BRIDGE"
fi
ip addr replace "$CTL_ADDR/24" dev "$BRIDGE"
ip link set "$BRIDGE" up
for i in $(seq "$NODES"); do
    ns=$TAG-node$i veth=$TAG-v$i
    if ! mine netns "$ns"; then
        ip netns add "$ns"
        record netns "$ns"
    fi
    if ! mine link "$veth"; then
        ip -n "$ns" link del eth0 2>/dev/null || true
        ip link add "$veth" type veth peer name eth0 netns "$ns"
        record link "$veth"
    fi
    ip link set "$veth" master "$BRIDGE" up
    ip -n "$ns" addr replace "$(node_addr "$i")/24" dev eth0
    ip -n "$ns" link set eth0 up
    ip -n "$ns" link set lo up
done
if [ "$(cat /proc/sys/net/bridge/bridge-nf-call-iptables 2>/dev/null || echo 0)" = 1 ]; then
    say "warning: bridged traffic goes through iptables (br_netfilter); if the nodes cannot reach"
    say "         each other, allow forwarding on $BRIDGE (see slurm/README.md)"
fi

# ---- daemons
if ! alive "$RUN/slurmctld.pid" slurmctld; then
    if command -v ss >/dev/null && ss -Hltn "sport = :$PORT" | grep -q .; then
        die "port $PORT is already in use" "set TR_SLURM_PORT to a free port"
    fi
    rm -f "$RUN/slurmctld.pid"
    slurmctld -c -f "$CONF"   # -c: forget the jobs of an earlier run
    say "started slurmctld"
elif [ $changed = 1 ]; then
    say "slurm.conf changed; scontrol reconfigure"
    scontrol reconfigure || die "scontrol reconfigure failed" "stop the cluster and start it again"
fi
for i in $(seq "$NODES"); do
    n=$(node_name "$i")
    alive "$RUN/slurmd-$n.pid" slurmd && continue
    # a step killed earlier may have left its spmix_appdir, which a new step of the same
    # job id would trip over ("File exists"), and a node that crashed its steps' PMIx
    # directories and sockets in its spool directory, which the same step of a requeued
    # job would fail to create ("File exists") or bind ("Address already in use"): a node
    # starts without them, as after a reboot
    rm -rf "$DIR/nodes/$n/pmixcli" "$DIR/spool/$n"/pmix.* "$DIR/spool/$n"/stepd.slurm.pmix.*
    mkdir -p "$DIR/spool/$n" "$DIR/nodes/$n/pmixcli"
    rm -f "$RUN/slurmd-$n.pid"
    # nsenter, not 'ip netns exec': the latter remounts /sys, which hides /sys/fs/cgroup
    # and slurmd then fails "Unable to initialize cgroup plugin". The new mount namespace
    # gets mounts from the host (slave) but its own stay private to the node.
    # shellcheck disable=SC2016
    nsenter --net="/run/netns/$TAG-node$i" -- unshare --uts --mount --propagation slave -- /bin/sh -ec '
        hostname "$1"
        mount --bind "$2/etc/hosts" /etc/hosts
        mount --bind "$2/nodes/$1/pmixcli" "$2/pmixcli"
        exec slurmd -f "$2/etc/slurm.conf" -N "$1"' sh "$n" "$DIR"
    say "started slurmd $n"
done

# ---- wait until every node answers and is usable
deadline=$(($(date +%s) + TIMEOUT))
resumed=0
while :; do
    up=$(sinfo -h -N -r -t idle,mixed,allocated,completing -o %N 2>/dev/null | sort -u | wc -l) || up=0
    [ "$up" -ge "$NODES" ] && break
    if [ $resumed = 0 ] && [ "$(date +%s)" -ge $((deadline - TIMEOUT / 2)) ]; then
        # a node left down or drained by an earlier run: ask once to take it back
        for i in $(seq "$NODES"); do scontrol update NodeName="$(node_name "$i")" State=RESUME >/dev/null 2>&1 || true; done
        resumed=1
    fi
    if [ "$(date +%s)" -ge $deadline ]; then
        sinfo -N -l >&2 || true
        tail -n 5 "$DIR"/log/*.log >&2 || true
        die "only $up of $NODES node(s) up after ${TIMEOUT} s" "logs are in $DIR/log"
    fi
    sleep 0.3
done
sinfo -N
echo "clients: export SLURM_CONF=$CONF   (or: . $DIR/env)"
echo "cluster ready"
