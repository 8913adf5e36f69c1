#!/usr/bin/env bash
# t0003: the help lists every command.
# - every entry of every dispatch table in the sources (terarec.c's top_cmds and
#   data_cmds, ckpt_cmd.c's and runs_cmd.c's subs; read from the files, not from the
#   program) is in `terarec --help` (a group's subcommands under that group's heading)
#   and in its group's own --help, and `terarec GROUP SUB --help` exits 0 with a usage;
# - each top-level command answers --help; `terarec version` is `terarec --version`;
# - `terarec` alone: the usage on stderr, exit 2; an unknown command: one error, exit 2;
# - `make help` runs without building anything, and every target it names is a
#   target of the Makefile (and the ones a user needs are there).
. "$(dirname "$0")/lib.sh"
T=$TR_BIN/terarec
cd "$TMP" || exit 1

# names FILE ARRAY: the "name" of each {"name", ...} entry of `ARRAY[] = {` ... `};`
names() {
    awk -v a="$2" '$0 ~ "[^a-z_]" a "\\[\\] = \\{" { f = 1; next } f && /^};/ { f = 0 } f' "$TR_ROOT/$1" |
        sed -n 's/^[[:space:]]*{"\([a-z_-]*\)",.*/\1/p'
}
top=$(names launcher/terarec.c top_cmds)
declare -A group_src=([data]="launcher/terarec.c data_cmds" [ckpt]="launcher/ckpt_cmd.c subs" [runs]="db/runs_cmd.c subs")

$T --help >help.out 2>help.err
rc=$?
[ $rc -eq 0 ] && [ ! -s help.err ] && grep -q '^usage: terarec <command>' help.out && ok "terarec --help: usage on stdout, exit 0" ||
    fail "terarec --help" "exit $rc: $(cat help.out help.err)"
missing=""
for c in $top; do grep -q "^  $c  " help.out || missing+=" $c"; done
[ -n "$top" ] && [ -z "$missing" ] && ok "terarec --help lists every top-level command ($(echo $top))" ||
    fail "top-level commands in --help" "missing:${missing:- (no table read from launcher/terarec.c)}"

m_help=""
for c in $top; do
    $T $c --help >c.out 2>&1 && grep -Eq "^usage: terarec( $c)? " c.out || m_help+=" $c"
done
[ -z "$m_help" ] && ok "terarec CMD --help: a usage, exit 0, for each top-level command" || fail "terarec CMD --help" "failed:$m_help"
$T --version --parsable >v.out 2>&1 && grep -q '^version:' v.out && $T version --parsable | cmp -s - v.out &&
    ok "terarec version --parsable = terarec --version --parsable" || fail "version" "$(cat v.out)"

for g in data ckpt runs; do
    subs=$(names ${group_src[$g]})
    [ -n "$subs" ] || {
        fail "terarec $g: its table" "no entries read from ${group_src[$g]}"
        continue
    }
    # the group's block of terarec --help: from its heading to the next empty line
    block=$(awk -v h="^terarec $g <command>" '$0 ~ h { f = 1; next } f && /^$/ { f = 0 } f' help.out)
    $T $g --help >g.out 2>&1
    grc=$?
    m_top="" m_own="" m_sub=""
    for s in $subs; do
        grep -q "^  $s  " <<<"$block" || m_top+=" $s"
        grep -q "^  $s  " g.out || m_own+=" $s"
        $T $g $s --help >s.out 2>&1 && grep -q "^usage: terarec $g $s" s.out || m_sub+=" $s"
    done
    [ -z "$m_top" ] && ok "terarec --help lists every terarec $g command ($(echo $subs))" ||
        fail "terarec $g commands in terarec --help" "missing:$m_top; the block: $block"
    [ $grc -eq 0 ] && [ -z "$m_own" ] && ok "terarec $g --help lists them too" ||
        fail "terarec $g --help" "exit $grc, missing:$m_own"
    [ -z "$m_sub" ] && ok "terarec $g SUB --help: a usage, exit 0, for each" || fail "terarec $g SUB --help" "failed:$m_sub"
done

$T >none.out 2>none.err
rc=$?
[ $rc -eq 2 ] && [ ! -s none.out ] && grep -q '^usage: terarec' none.err && ok "terarec alone: the usage on stderr, exit 2" ||
    fail "terarec alone" "exit $rc: $(cat none.out none.err)"
$T nosuch >bad.out 2>&1
rc=$?
[ $rc -eq 2 ] && [ "$(grep -c 'error:' bad.out)" = 1 ] && grep -q "'nosuch' is not a terarec command" bad.out &&
    grep -q "hint: run 'terarec --help'" bad.out && ok "an unknown command: one error and a hint, exit 2" ||
    fail "unknown command" "exit $rc: $(cat bad.out)"

# ---- make help --------------------------------------------------------------------------------
if ! command -v make >/dev/null; then
    skip "make help" "no make"
else
    flags_before=$(stat -c %Y "$TR_BUILD/gen/flags" 2>/dev/null)
    make -s -C "$TR_ROOT" help >mh.out 2>&1
    rc=$?
    targets=$(sed -n 's/^  make \([a-z][a-z0-9-]*\) .*/\1/p' mh.out)
    [ $rc -eq 0 ] && [ -n "$targets" ] && [ "$(stat -c %Y "$TR_BUILD/gen/flags" 2>/dev/null)" = "$flags_before" ] &&
        ok "make help: exit 0, $(echo $targets | wc -w) targets, the build's flags untouched" ||
        fail "make help" "exit $rc: $(cat mh.out)"
    notarget=""
    for t in $targets; do grep -q "^$t:" "$TR_ROOT/Makefile" || notarget+=" $t"; done
    [ -z "$notarget" ] && ok "each target make help names is a target of the Makefile" || fail "make help targets" "not targets:$notarget"
    need=""
    for t in deps run test install bundle image-cpu clean; do grep -qx "$t" <<<"$targets" || need+=" $t"; done
    grep -q '^  make  ' mh.out || need+=" (plain make)"
    [ -z "$need" ] && ok "make help names deps, make, run, test, install, bundle, image-cpu, clean" ||
        fail "make help: the targets a user needs" "missing:$need"
fi
done_testing
