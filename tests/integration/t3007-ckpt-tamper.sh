#!/usr/bin/env bash
# t3007: a manifest that lies (issue 32), on terarec-ckpt and on a directory.
# (1) The chunk records of two tensors of the same size swapped in a committed
# manifest (hash and tag moved together, and the recorded manifest hash gone as
# in a manifest written that way): every chunk still hashes to its name, yet
# --resume fails naming the tensor and `ckpt verify` fails naming it. (2) One
# number of a committed manifest edited: the manifest no longer matches the
# xxh3-128 recorded when it was stored, and resume and verify refuse it.
# (3) A manifest of format 1 (no tags) still restores.
. "$(dirname "$0")/lib.sh"
W=$TR_BIN/terarec-worker
T=$TR_BIN/terarec
S=$TR_BIN/terarec-ckpt
PY=/usr/bin/python3
for b in "$W" "$T" "$S"; do
    [ -x "$b" ] || { fail "$b is built"; done_testing; }
done
printf 'tok-%s\n' "$RANDOM$RANDOM" >"$TMP/token"
SPID=""
trap 'for p in $SPID; do kill -9 "$p" 2>/dev/null; done; rm -rf "$TMP"' EXIT
start_store "$TMP/store" || { fail "server starts" "$(tail -n 3 "$TMP/srv.err")"; done_testing; }
# emb/1 and emb/3 are both 7 x 8: chunks of one size
BASE="--batch_size 250 --synthetic_dataset_cardinalities 30,7,50,7,2000,3 --embedding_dim 8 --bottom_mlp_dims 16,8
      --top_mlp_dims 16,1 --learning_rate 0.5 --synthetic_dataset_valid_batches 2 --synthetic_dataset_train_batches 7
      --threads 1 --print_freq 1"

cat >"$TMP/tamper.py" <<'PYEOF'
import json, os, sys
path, how = sys.argv[1], sys.argv[2]
m = json.load(open(path))
if how == "swap":
    t = {x["name"]: x for x in m["tensors"]}
    a, b = t["emb/1"]["chunks"][0], t["emb/3"]["chunks"][0]
    assert a["bytes"] == b["bytes"] and a["hash"] != b["hash"], (a, b)
    for k in ("hash", "tag"):
        if k in a:
            a[k], b[k] = b[k], a[k]
    side = path[: -len(".json")] + ".xxh3"
    if os.path.exists(side):
        os.remove(side)
elif how == "edit":
    m["state"]["position"]["index"] += 1
elif how == "v1":
    m["format_version"] = 1
    for x in m["tensors"]:
        for c in x["chunks"]:
            c.pop("tag", None)
    side = path[: -len(".json")] + ".xxh3"
    if os.path.exists(side):
        os.remove(side)
open(path, "w").write(json.dumps(m))
PYEOF

tamper_case() {
    local tag=$1 store=$2 root=$3 tok=""
    case "$store" in http*) tok="--checkpoint_token_file $TMP/token" ;; esac
    for r in swap edit v1; do
        if ! out=$(timeout 120 $W $BASE --max_steps 4 --checkpoint_every 2 --checkpoint_dir "$store" $tok \
            --run_name $r 2>&1); then
            fail "$tag $r: save" "$(echo "$out" | tail -n 3)"
            continue
        fi
        $PY "$TMP/tamper.py" "$root/runs/$r/manifests/4.json" $r
    done
    # (1) swapped chunks
    out=$(timeout 120 $W $BASE --max_steps 6 --checkpoint_dir "$store" $tok --run_name swap --resume 2>&1)
    rc=$?
    [ "$rc" -ne 0 ] && echo "$out" | grep -q 'tensor emb/[13] rows .*holds other bytes than were saved there' &&
        ok "$tag: resume from swapped chunks fails naming the tensor (exit $rc)" ||
        fail "$tag: resume from swapped chunks" "exit $rc: $(echo "$out" | grep -iE 'error|restor' | head -n 3)"
    out=$($T ckpt verify --checkpoint_dir "$store" $tok --run_name swap 2>&1)
    rc=$?
    [ "$rc" -eq 2 ] && echo "$out" | grep -q '^tensor emb/1 rows .*holds other bytes' &&
        echo "$out" | grep -q '^tensor emb/3 rows .*holds other bytes' &&
        ok "$tag: ckpt verify names both swapped tensors (exit 2)" ||
        fail "$tag: ckpt verify of swapped chunks" "exit $rc: $(echo "$out" | tail -n 3)"
    # (2) an edited number
    out=$(timeout 120 $W $BASE --max_steps 6 --checkpoint_dir "$store" $tok --run_name edit --resume 2>&1)
    rc=$?
    [ "$rc" -ne 0 ] && echo "$out" | grep -q 'changed after it was stored' &&
        ok "$tag: resume from an edited manifest fails (exit $rc)" ||
        fail "$tag: resume from an edited manifest" "exit $rc: $(echo "$out" | grep -iE 'error' | head -n 3)"
    out=$($T ckpt verify --checkpoint_dir "$store" $tok --run_name edit 2>&1)
    rc=$?
    [ "$rc" -ne 0 ] && echo "$out" | grep -q 'changed after it was stored' &&
        ok "$tag: ckpt verify refuses an edited manifest (exit $rc)" ||
        fail "$tag: ckpt verify of an edited manifest" "exit $rc: $(echo "$out" | tail -n 3)"
    # (3) format 1 still restores, with a warning; verify says what it cannot check
    out=$(timeout 120 $W $BASE --max_steps 6 --checkpoint_dir "$store" $tok --run_name v1 --resume 2>&1)
    rc=$?
    [ "$rc" -eq 0 ] && echo "$out" | grep -q 'format 1 (before chunk tags)' &&
        ok "$tag: a format 1 manifest restores, with a warning" ||
        fail "$tag: format 1 manifest" "exit $rc: $(echo "$out" | grep -iE 'error|warn' | head -n 3)"
}
tamper_case http "$URL" "$TMP/store"
tamper_case path "$TMP/local" "$TMP/local"
kill -TERM "$SPID"
wait "$SPID"
SPID=""
done_testing
