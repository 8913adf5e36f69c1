# lib.sh: a TAP harness for integration scripts (source it). Provides
#   ok NAME / fail NAME [DETAIL] / skip NAME REASON / check NAME CMD...
#   done_testing   (prints "N passed, N failed, N skipped", exits 1 on failure)
# plus TR_BIN (the built binaries), TR_ROOT, and a scratch dir $TMP removed at exit.
set -u
TR_ROOT=${TR_ROOT:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)}
TR_BUILD=${TR_BUILD:-$TR_ROOT/build}
TR_BIN=$TR_BUILD/bin
TMP=$(mktemp -d "${TMPDIR:-/tmp}/terarec-test.XXXXXX")
trap 'rm -rf "$TMP"' EXIT
_n=0 _pass=0 _fail=0 _skip=0
ok() { _n=$((_n + 1)); _pass=$((_pass + 1)); echo "ok $_n - $1"; }
fail() { _n=$((_n + 1)); _fail=$((_fail + 1)); echo "not ok $_n - $1"; [ $# -gt 1 ] && echo "# $2"; return 0; }
skip() { _n=$((_n + 1)); _skip=$((_skip + 1)); echo "ok $_n - $1 # SKIP $2"; }
# check NAME CMD...: passes when CMD exits 0; shows its output otherwise
check() {
    local name=$1; shift
    local out
    if out=$("$@" 2>&1); then ok "$name"; else fail "$name" "$(echo "$out" | tail -n 20 | sed 's/^/# /')"; fi
}
done_testing() {
    echo "1..$_n"
    echo "$_pass passed, $_fail failed, $_skip skipped"
    [ "$_fail" -eq 0 ]
    exit $?
}
