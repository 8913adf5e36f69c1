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
# every process this test starts carries its tag (tests may run at once: TR_TEST_JOBS)
export TR_TEST_TAG=$TMP
# own_pids PATTERN: the processes whose command line matches PATTERN (pgrep -f) that
# this test started, never another test's
own_pids() {
    local p
    for p in $(pgrep -f "$1" || true); do
        tr '\0' '\n' 2>/dev/null <"/proc/$p/environ" | grep -qxF "TR_TEST_TAG=$TR_TEST_TAG" && echo "$p"
    done
    return 0
}
# start_store ROOT [FLAGS...]: terarec-ckpt serving ROOT on a free loopback port with the
# token in $TMP/token; sets URL, PORT and SPID (its pid: the test kills it at exit);
# fails (status 1) when it does not say where it listens within 10 s ($TMP/srv.err)
start_store() {
    local root=$1 i
    shift
    "$TR_BIN/terarec-ckpt" --root "$root" --token_file "$TMP/token" "$@" >"$TMP/srv.out" 2>"$TMP/srv.err" &
    SPID=$!
    URL=""
    for i in $(seq 200); do
        URL=$(sed -n 's/^terarec-ckpt: listening on //p' "$TMP/srv.out")
        [ -n "$URL" ] && break
        sleep 0.05
    done
    PORT=${URL##*:}
    [ -n "$URL" ]
}
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
# use_mpi: the environment mpirun needs here (root, more ranks than cores), and no
# LeakSanitizer in MPI-launched processes: Open MPI, PMIx and hwloc keep memory
# until exit from plugins they have unloaded, whose frames show as "<unknown
# module>" and cannot be suppressed by name. ASan and UBSan stay on.
use_mpi() {
    export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
    export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0"
}
# same_dataset DIR_A DIR_B: every column file of both splits of two prepared Criteo
# datasets (label, numerical, cat_0..cat_25) is identical; prints the first that differs
same_dataset() {
    local s f
    for s in train test; do
        for f in label.bin numerical.bin $(for i in $(seq 0 25); do printf 'cat_%d.bin ' "$i"; done); do
            cmp -s "$1/$s/$f" "$2/$s/$f" || { echo "$s/$f differs"; return 1; }
        done
    done
}
# partial_batch_dataset: in the current folder, data.tsv (1100 Criteo-like rows,
# seeded) prepared into ds/ (990 train rows in file order, 110 test rows); sets N
# to the training rows and B to a batch size that leaves a last batch of 2
# samples. Needs $T (terarec) and $PY; ends the test when prepare fails.
partial_batch_dataset() {
    $PY - data.tsv <<'PYEOF'
import random, sys
rnd = random.Random(4)
rows = []
for r in range(1100):
    f = [str(rnd.randint(0, 1))] + [str(rnd.randint(0, 50)) for _ in range(13)]
    f += ["%08x" % rnd.randint(0, 40 + 7 * c) for c in range(26)]
    rows.append("\t".join(f))
open(sys.argv[1], "w").write("\n".join(rows) + "\n")
PYEOF
    if ! $T data prepare --output ds --test_fraction 0.1 --no_shuffle data.tsv >prep.log 2>&1; then
        fail "prepare a dataset" "$(tail -n 5 prep.log)"
        done_testing
    fi
    N=$(stat -c %s ds/train/label.bin)
    B=$($PY -c "n=$N; print(next(b for b in range(50, 400) if n % b == 2))")
}
done_testing() {
    echo "1..$_n"
    echo "$_pass passed, $_fail failed, $_skip skipped"
    [ "$_fail" -eq 0 ]
    exit $?
}
