#!/usr/bin/env bash
# run.sh BUILD: runs every test binary under BUILD/tests and every
# tests/integration/t*.sh, shows their TAP output on failure (or always with
# TR_TEST_VERBOSE=1), and ends with "total: N passed, N failed, N skipped".
# A binary that crashes or prints no summary line counts as one failure.
# TR_TEST_ONLY=bins runs only the test binaries (make test-unit); any other value is
# an extended regular expression: only the tests whose name (as printed) matches it
# run, e.g. TR_TEST_ONLY='kernels/|t1300'. TR_TEST_EXCLUDE (a regular expression too)
# leaves the matching tests out; each is named on a "--" line and counted nowhere.
set -u
build=${1:-build}
root=$(cd "$(dirname "$0")/.." && pwd)
export TR_BUILD="$root/$build" TR_ROOT="$root"
tp=0 tf=0 ts=0
logdir="$root/$build/test-logs"
mkdir -p "$logdir"

only=${TR_TEST_ONLY:-}
[ "$only" = bins ] && only=
run_one() { # name, command...
    local name=$1; shift
    [ -n "$only" ] && ! [[ $name =~ $only ]] && return 0
    if [ -n "${TR_TEST_EXCLUDE:-}" ] && [[ $name =~ $TR_TEST_EXCLUDE ]]; then
        printf -- '--   %-48s not run (TR_TEST_EXCLUDE)\n' "$name"
        return 0
    fi
    local log="$logdir/$(echo "$name" | tr '/' '_').log"
    local t0=$(date +%s.%N)
    "$@" >"$log" 2>&1 </dev/null
    local rc=$?
    local t1=$(date +%s.%N)
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
    tp=$((tp + p)); tf=$((tf + f)); ts=$((ts + s))
    local status=ok
    [ "$f" -gt 0 ] && status=FAIL
    printf '%-4s %-48s %3d passed, %d failed, %d skipped  (%.1fs)\n' "$status" "$name" "$p" "$f" "$s" \
        "$(awk "BEGIN{print $t1 - $t0}")"
    if [ "$f" -gt 0 ] || [ "${TR_TEST_VERBOSE:-0}" = 1 ]; then
        sed 's/^/    /' "$log" | grep -vE '^    ok [0-9]+ - ' | tail -n 60
    fi
    grep -E '^ok [0-9]+ - .*# SKIP' "$log" | sed "s|^|    [$name] |"
}

while IFS= read -r bin; do
    run_one "${bin#$root/$build/tests/}" "$bin"
done < <(find "$root/$build/tests" -type f -name 'test_*' -perm -u+x | sort)

for t in "$root"/tests/integration/t*.sh; do
    [ -e "$t" ] || continue
    [ "${TR_TEST_ONLY:-}" = bins ] && break
    run_one "integration/$(basename "$t")" bash "$t"
done

echo "total: $tp passed, $tf failed, $ts skipped"
[ "$tf" -eq 0 ]
