#!/usr/bin/env bash
# run.sh BUILD: runs every test binary under BUILD/tests and every
# tests/integration/t*.sh, shows their TAP output on failure (or always with
# TR_TEST_VERBOSE=1), and ends with "total: N passed, N failed, N skipped".
# A binary that crashes or prints no summary line counts as one failure.
# TR_TEST_ONLY=bins runs only the test binaries (make test-unit); any other value is
# an extended regular expression: only the tests whose name (as printed) matches it
# run, e.g. TR_TEST_ONLY='kernels/|t1300'. TR_TEST_EXCLUDE (a regular expression too)
# leaves the matching tests out; each is named on a "--" line and counted nowhere.
# TR_TEST_JOBS=N runs up to N tests at once (default 1), each reported when it ends.
# Lines in a script's header schedule it: "# run.sh: holds NAME..." (no two tests
# that hold the same NAME run at once, and of those the earlier in order runs
# first: a SLURM cluster's ports, podman's storage and the image one test leaves
# for the next); "# run.sh: long" starts it before the others; "# run.sh: alone"
# runs it after the others, with none beside it (a time bound that load would
# break: a checkpoint within SLURM's grace period, say).
set -u
build=${1:-build}
root=$(cd "$(dirname "$0")/.." && pwd)
export TR_BUILD="$root/$build" TR_ROOT="$root"
tp=0 tf=0 ts=0
logdir="$root/$build/test-logs"
mkdir -p "$logdir"
jobs=${TR_TEST_JOBS:-1}
[[ $jobs =~ ^[1-9][0-9]*$ ]] || { echo "run.sh: TR_TEST_JOBS=$jobs is not a positive number" >&2; exit 2; }

only=${TR_TEST_ONLY:-}
[ "$only" = bins ] && only=
log_of() { echo "$logdir/$(echo "$1" | tr '/' '_').log"; }

# run NAME CMD...: runs one test into its log; what it reports goes to LOG.report,
# its counts ("passed failed skipped") to LOG.count
run() {
    local name=$1; shift
    local log
    log=$(log_of "$name")
    local t0 t1 rc
    t0=$(date +%s.%N)
    "$@" >"$log" 2>&1 </dev/null
    rc=$?
    t1=$(date +%s.%N)
    local summary
    summary=$(grep -E '^[0-9]+ passed, [0-9]+ failed, [0-9]+ skipped$' "$log" | tail -n 1)
    local p=0 f=0 s=0
    if [ -n "$summary" ]; then
        read -r p _ f _ s _ <<<"${summary//,/}"
    fi
    if [ -z "$summary" ] || { [ $rc -ne 0 ] && [ "$f" -eq 0 ]; }; then
        f=$((f + 1))
        echo "# $name: exit status $rc$([ -z "$summary" ] && echo ', no summary line')" >>"$log"
    fi
    local status=ok
    [ "$f" -gt 0 ] && status=FAIL
    {
        printf '%-4s %-48s %3d passed, %d failed, %d skipped  (%.1fs)\n' "$status" "$name" "$p" "$f" "$s" \
            "$(awk "BEGIN{print $t1 - $t0}")"
        if [ "$f" -gt 0 ] || [ "${TR_TEST_VERBOSE:-0}" = 1 ]; then
            sed 's/^/    /' "$log" | grep -vE '^    ok [0-9]+ - ' | tail -n 60
        fi
        grep -E '^ok [0-9]+ - .*# SKIP' "$log" | sed "s|^|    [$name] |"
    } >"$log.report"
    echo "$p $f $s" >"$log.count"
}

# report NAME: prints a finished test's report and adds its counts
report() {
    local log p f s
    log=$(log_of "$1")
    cat "$log.report"
    read -r p f s <"$log.count" || { p=0 f=1 s=0; echo "FAIL $1 (no result)"; }
    tp=$((tp + p)); tf=$((tf + f)); ts=$((ts + s))
    rm -f "$log.report" "$log.count"
}

declare -A running=() held=() holder=() alone=() # pid -> test; resource -> test; test -> its resources
reap() { # waits for one running test to end, then reports it and frees what it held
    local pid='' p r
    wait -n -p pid
    if [ -z "$pid" ]; then # no child left (cannot happen): what is listed has ended
        for p in "${!running[@]}"; do report "${running[$p]}"; unset "running[$p]"; done
        held=()
        return 0
    fi
    [ -n "${running[$pid]:-}" ] || return 0
    report "${running[$pid]}"
    for r in ${holder[${running[$pid]}]:-}; do unset "held[$r]"; done
    unset "running[$pid]"
}

# the queue: "NAME KIND PATH" (KIND bin or sh), the long scripts first
queue=()
mapfile -t bins < <(find "$root/$build/tests" -type f -name 'test_*' -perm -u+x | sort)
for bin in "${bins[@]}"; do queue+=("${bin#$root/$build/tests/} bin $bin"); done
if [ "${TR_TEST_ONLY:-}" != bins ]; then
    long=() rest=() last=()
    for t in "$root"/tests/integration/t*.sh; do
        [ -e "$t" ] || continue
        e="integration/${t##*/} sh $t"
        head=$(head -n 40 "$t")
        if grep -q '^# run.sh: long' <<<"$head"; then
            long+=("$e")
        elif grep -q '^# run.sh: alone' <<<"$head"; then
            last+=("$e")
            alone["integration/${t##*/}"]=1
        else
            rest+=("$e")
        fi
        holder["integration/${t##*/}"]=$(sed -n 's/^# run.sh: holds \([^(]*\).*/\1/p' <<<"$head")
    done
    queue=("${long[@]}" "${queue[@]}" "${rest[@]}" "${last[@]}")
fi
# the filters
todo=()
for e in "${queue[@]}"; do
    name=${e%% *}
    [ -n "$only" ] && ! [[ $name =~ $only ]] && continue
    if [ -n "${TR_TEST_EXCLUDE:-}" ] && [[ $name =~ $TR_TEST_EXCLUDE ]]; then
        printf -- '--   %-48s not run (TR_TEST_EXCLUDE)\n' "$name"
        continue
    fi
    todo+=("$e")
done
# the first test whose resources are free starts when a slot is; else one ends. A
# test that runs alone waits for the running ones, and nothing starts beside it.
free() { # NAME: none of its resources is held by a running test
    local r
    for r in ${holder[$1]:-}; do [ -z "${held[$r]:-}" ] || return 1; done
}
solo=
while [ ${#todo[@]} -gt 0 ]; do
    started=-1
    [ -n "$solo" ] && [ -z "${running[$solo]:-}" ] && solo=
    if [ ${#running[@]} -lt "$jobs" ] && [ -z "$solo" ]; then
        wanted=" "
        for i in "${!todo[@]}"; do
            read -r name kind path <<<"${todo[$i]}"
            if [ -n "${alone[$name]:-}" ]; then
                [ ${#running[@]} -eq 0 ] || break
                run "$name" bash "$path" &
                running[$!]=$name
                solo=$!
                started=$i
                break
            fi
            ok=1
            free "$name" || ok=0
            for r in ${holder[$name]:-}; do [[ $wanted == *" $r "* ]] && ok=0; done
            for r in ${holder[$name]:-}; do wanted+="$r "; done
            [ $ok = 1 ] || continue
            for r in ${holder[$name]:-}; do held[$r]=$name; done
            if [ "$kind" = bin ]; then run "$name" "$path" & else run "$name" bash "$path" & fi
            running[$!]=$name
            started=$i
            break
        done
    fi
    if [ "$started" -ge 0 ]; then
        unset "todo[$started]"
        todo=("${todo[@]}")
    else
        reap
    fi
done
while [ ${#running[@]} -gt 0 ]; do reap; done

echo "total: $tp passed, $tf failed, $ts skipped"
[ "$tf" -eq 0 ]
