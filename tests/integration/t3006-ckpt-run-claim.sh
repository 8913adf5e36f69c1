#!/usr/bin/env bash
# t3006: one run name, one job (issue 32), on terarec-ckpt and on a directory.
# A second job with a --run_name in use and no --resume is refused before
# training (exit 2, one line naming the run and the store, a hint); of two jobs
# starting at once with one new name exactly one trains; LATEST never moves back
# (a commit of a lower step: 409 with the reason); --resume continues the run;
# --keep_checkpoints N leaves the N newest manifests (also through `terarec
# train`), and gc then removes their chunks.
. "$(dirname "$0")/lib.sh"
W=$TR_BIN/terarec-worker
T=$TR_BIN/terarec
S=$TR_BIN/terarec-ckpt
for b in "$W" "$T" "$S"; do
    [ -x "$b" ] || { fail "$b is built"; done_testing; }
done
printf 'tok-%s\n' "$RANDOM$RANDOM" >"$TMP/token"
SPID=""
trap 'for p in $SPID; do kill -9 "$p" 2>/dev/null; done; rm -rf "$TMP"' EXIT
start_store "$TMP/store" || { fail "server starts" "$(tail -n 3 "$TMP/srv.err")"; done_testing; }
AUTH="Authorization: Bearer $(cat "$TMP/token")"
BASE="--batch_size 250 --synthetic_dataset_cardinalities 30,7,50,7,2000,3 --embedding_dim 8 --bottom_mlp_dims 16,8
      --top_mlp_dims 16,1 --learning_rate 0.5 --synthetic_dataset_valid_batches 2 --synthetic_dataset_train_batches 7
      --threads 1 --print_freq 1"

claim_case() {
    local tag=$1 store=$2 root=$3 tok=""
    case "$store" in http*) tok="--checkpoint_token_file $TMP/token" ;; esac
    if ! out=$(timeout 120 $W $BASE --max_steps 6 --checkpoint_every 2 --keep_checkpoints 0 --checkpoint_dir "$store" \
        $tok --run_name shared 2>&1); then
        fail "$tag: the first job" "$(echo "$out" | tail -n 3)"
        return
    fi
    ok "$tag: the first job commits steps 2, 4, 6"
    local before
    before=$(cd "$root/runs/shared/manifests" && cat *.json | md5sum)
    out=$(timeout 120 $W $BASE --max_steps 4 --checkpoint_every 2 --checkpoint_dir "$store" $tok \
        --run_name shared 2>&1)
    local rc=$?
    if [ "$rc" -eq 2 ] && echo "$out" | grep -qE "run name 'shared'" && echo "$out" | grep -qF "$store" &&
        echo "$out" | grep -q 'hint: .*--resume.*--run_name'; then
        ok "$tag: a second job with the name is refused (exit 2, the run and the store named, a hint)"
    else
        fail "$tag: a second job with the name" "exit $rc: $(echo "$out" | grep -E 'error|hint' | head -n 3)"
    fi
    echo "$out" | grep -qiE 'loss' && fail "$tag: the refused job trained" || ok "$tag: refused before training"
    [ "$(cat "$root/runs/shared/LATEST")" = 6 ] && ok "$tag: LATEST still 6" ||
        fail "$tag: LATEST" "$(cat "$root/runs/shared/LATEST")"
    [ "$(cd "$root/runs/shared/manifests" && cat *.json | md5sum)" = "$before" ] && ok "$tag: its manifests untouched" ||
        fail "$tag: manifests changed"
    # --resume continues it
    if out=$(timeout 120 $W $BASE --max_steps 10 --checkpoint_every 2 --keep_checkpoints 0 --checkpoint_dir "$store" \
        $tok --run_name shared --resume 2>&1) && [ "$(cat "$root/runs/shared/LATEST")" = 10 ]; then
        ok "$tag: --resume continues the run to step 10"
    else
        fail "$tag: --resume" "$(echo "$out" | tail -n 3)"
    fi
    # two jobs at once with a new name: exactly one trains
    timeout 120 $W $BASE --max_steps 4 --checkpoint_every 2 --checkpoint_dir "$store" $tok --run_name twin \
        >"$TMP/$tag.twin1" 2>&1 &
    local p1=$!
    timeout 120 $W $BASE --max_steps 4 --checkpoint_every 2 --checkpoint_dir "$store" $tok --run_name twin \
        >"$TMP/$tag.twin2" 2>&1 &
    local p2=$!
    wait "$p1"
    local r1=$?
    wait "$p2"
    local r2=$?
    if { [ "$r1" -eq 0 ] && [ "$r2" -eq 2 ]; } || { [ "$r1" -eq 2 ] && [ "$r2" -eq 0 ]; }; then
        ok "$tag: of two jobs starting at once with one name, one trains and one is refused"
    else
        fail "$tag: two jobs at once" "exits $r1 and $r2: $(grep -h error "$TMP/$tag.twin1" "$TMP/$tag.twin2" | head -n 2)"
    fi
    # --keep_checkpoints 2: the two newest committed manifests stay
    if out=$(timeout 120 $W $BASE --max_steps 8 --checkpoint_every 1 --keep_checkpoints 2 --checkpoint_dir "$store" \
        $tok --run_name kept 2>&1); then
        local left
        left=$(ls "$root/runs/kept/manifests" | grep -c '\.json$')
        [ "$left" = 2 ] && [ -f "$root/runs/kept/manifests/7.json" ] && [ -f "$root/runs/kept/manifests/8.json" ] &&
            ok "$tag: --keep_checkpoints 2 leaves steps 7 and 8" ||
            fail "$tag: --keep_checkpoints 2" "$(ls "$root/runs/kept/manifests")"
    else
        fail "$tag: --keep_checkpoints 2" "$(echo "$out" | tail -n 3)"
    fi
}
claim_case http "$URL" "$TMP/store"
claim_case path "$TMP/local" "$TMP/local"

# LATEST never moves back
code=$(curl -s -o "$TMP/c.body" -w '%{http_code}' -X PUT --data-binary 4 -H "$AUTH" "$URL/runs/shared/LATEST")
[ "$code" = 409 ] && grep -q 'never moves back' "$TMP/c.body" && [ "$(cat "$TMP/store/runs/shared/LATEST")" = 10 ] &&
    ok "a commit of step 4 below LATEST 10: 409 ($(cat "$TMP/c.body"))" || fail "commit below LATEST" "$code $(cat "$TMP/c.body")"
code=$(curl -s -o "$TMP/c.body" -w '%{http_code}' -X PUT --data-binary 10 -H "$AUTH" "$URL/runs/shared/LATEST")
[ "$code" = 200 ] && ok "a commit of LATEST's own step again: 200" || fail "recommit LATEST" "$code"

# gc then removes the chunks only the pruned manifests named
before=$(find "$TMP/store/chunks" -type f | wc -l)
if out=$($T ckpt gc --checkpoint_dir "$URL" --checkpoint_token_file "$TMP/token" --grace 0 2>&1); then
    after=$(find "$TMP/store/chunks" -type f | wc -l)
    [ "$after" -lt "$before" ] && ok "gc removes the pruned manifests' chunks ($before -> $after)" ||
        fail "gc after pruning" "$before -> $after: $out"
    bad=0
    for s in 7 8; do
        $T ckpt verify --checkpoint_dir "$URL" --checkpoint_token_file "$TMP/token" --run_name kept --step $s \
            >/dev/null 2>&1 || bad=1
    done
    [ "$bad" = 0 ] && ok "the kept steps still verify" || fail "kept steps verify"
else
    fail "gc" "$out"
fi

# terarec train forwards --keep_checkpoints (and names the run itself)
export TR_DB=$TMP/runs.db
if out=$(timeout 300 $T train $BASE --max_steps 4 --checkpoint_every 1 --keep_checkpoints 1 \
    --checkpoint_dir "$TMP/trainstore" 2>&1); then
    run=$(ls "$TMP/trainstore/runs" | head -n 1)
    left=$(ls "$TMP/trainstore/runs/$run/manifests" 2>/dev/null | grep -c '\.json$')
    [ "$left" = 1 ] && [ -f "$TMP/trainstore/runs/$run/manifests/4.json" ] &&
        ok "terarec train --keep_checkpoints 1 leaves step 4 only" ||
        fail "terarec train --keep_checkpoints 1" "$(ls "$TMP/trainstore/runs/$run/manifests" 2>&1)"
else
    fail "terarec train --keep_checkpoints 1" "$(echo "$out" | tail -n 3)"
fi
kill -TERM "$SPID"
wait "$SPID"
SPID=""
done_testing
