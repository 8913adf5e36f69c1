#!/usr/bin/env bash
# t3002: the worker's checkpoints, end to end, on real stores (a directory, and
# terarec-ckpt over loopback HTTP): bitwise resume (N = 1 and 3, async and
# incremental saves on and off, multi-hot tables), restore on other world sizes
# and split modes,
# kill -9 of a worker during an upload and of the server during a commit, a
# corrupted chunk, a config that does not match, --mode eval and inference, bad
# flags.
. "$(dirname "$0")/lib.sh"
W=$TR_BIN/terarec-worker
T=$TR_BIN/terarec
S=$TR_BIN/terarec-ckpt
CMP="python3 $TR_ROOT/tests/integration/compare_runs.py"
for b in "$W" "$T" "$S"; do
    [ -x "$b" ] || { fail "$b is built"; done_testing; }
done
HAVE_MPI=1
command -v mpirun >/dev/null 2>&1 || HAVE_MPI=0
use_mpi
printf 'tok-%s\n' "$RANDOM$RANDOM" >"$TMP/token"
SPIDS=()
trap 'for p in "${SPIDS[@]}"; do kill -9 "$p" 2>/dev/null; done; rm -rf "$TMP"' EXIT

# 10 tables of mixed sizes; 7 batches an epoch, so 12 steps cross an epoch with
# shuffled samples; Adagrad, so the optimizer state must come back too
CARDS=30,7,50,7,20000,3,200,90,5,64
base() {
    echo "--batch_size 250 --synthetic_dataset_cardinalities $CARDS --embedding_dim 8 --bottom_mlp_dims 16,8
          --top_mlp_dims 16,1 --learning_rate 0.5 --warmup_steps 3 --print_freq 1
          --synthetic_dataset_valid_batches 2 --synthetic_dataset_train_batches 7 --shuffle_samples
          --optimizer adagrad --threads 1 --checkpoint_chunk_bytes 4096 --columnwise_split
          --data_parallel_bottom_mlp"
}
# wrk N ARGS...: one worker, or N under mpirun; output in $OUT, status returned
wrk() {
    local n=$1; shift
    if [ "$n" -eq 1 ]; then
        OUT=$(timeout 300 $W "$@" 2>&1)
    else
        OUT=$(timeout 300 mpirun -np "$n" $W "$@" 2>&1)
    fi
}
# start_server ROOT [VAR=VALUE...]: terarec-ckpt on a free loopback port; sets URL and SPID
start_server() {
    local root=$1; shift
    local out="$TMP/srv.$RANDOM"
    env "$@" $S --root "$root" --token_file "$TMP/token" >"$out" 2>"$out.err" &
    SPID=$!
    SPIDS+=("$SPID")
    URL=""
    for _ in $(seq 200); do
        URL=$(sed -n 's/^terarec-ckpt: listening on //p' "$out")
        [ -n "$URL" ] && return 0
        sleep 0.05
    done
    echo "# server did not start: $(tail -n 3 "$out.err")"
    return 1
}
ckpt() { $T ckpt "$@" --checkpoint_token_file "$TMP/token"; }

# resume_case NAME N STORE EXTRA...: ref trains 12 steps; a trains 5 saving every 2
# steps; b resumes to 12; b's weights, optimizer state and the losses of steps
# 6..12 must equal ref's bit for bit
resume_case() {
    local name=$1 n=$2 store=$3; shift 3
    local d="$TMP/$name" tok=""
    mkdir -p "$d/ref" "$d/b"
    case "$store" in http*) tok="--checkpoint_token_file $TMP/token" ;; esac
    if ! wrk "$n" $(base) --max_steps 12 --log_path "$d/ref/log.json" --dump_weights "$d/ref" "$@"; then
        fail "$name: reference run" "$(echo "$OUT" | tail -n 5)"
        return
    fi
    if ! wrk "$n" $(base) --max_steps 5 --log_path "$d/a.json" --checkpoint_dir "$store" $tok --run_name "$name" \
        --checkpoint_every 2 "$@"; then
        fail "$name: first part (5 steps, saving every 2)" "$(echo "$OUT" | tail -n 5)"
        return
    fi
    if ! wrk "$n" $(base) --max_steps 12 --log_path "$d/b/log.json" --dump_weights "$d/b" --checkpoint_dir "$store" \
        $tok --run_name "$name" --resume --checkpoint_every 2 "$@"; then
        fail "$name: resumed part (to 12)" "$(echo "$OUT" | tail -n 5)"
        return
    fi
    local out
    if out=$($CMP "$d/ref" "$d/b" --bitwise --steps-after=5 2>&1) && echo "$OUT" | grep -q 'restored .*step 5'; then
        ok "$name: resumed at step 5, N=$n: weights, optimizer state and losses of steps 6-12 bitwise equal"
    else
        fail "$name: bitwise resume" "$(echo "$out" | grep -v '^ok' | tail -n 6)"
    fi
}

resume_case local-n1 1 "$TMP/store1" --keep_checkpoints 0
resume_case local-n1-sync-full 1 "$TMP/store1" --no_checkpoint_async --no_checkpoint_incremental
# the incremental saves of local-n1 named unchanged chunks of the save before
python3 - "$TMP/store1/runs/local-n1/manifests" <<'EOF' && ok "an incremental save names chunks of the previous save (unchanged blocks)" || fail "incremental saves reuse chunks"
import json, sys, os
d = sys.argv[1]
m = {int(f[:-5]): json.load(open(os.path.join(d, f))) for f in os.listdir(d) if f.endswith(".json")}
assert {2, 4, 5} <= set(m), sorted(m)
h = lambda k: {c["hash"] for t in m[k]["tensors"] if t["name"].startswith("emb/") for c in t["chunks"]}
shared, total = len(h(5) & h(4)), len(h(5))
print("# step 5 shares %d of its %d embedding chunks with step 4" % (shared, total))
assert 0 < shared < total
EOF

# each commit is an event: a DLLogger record of its step, naming the store and the run
python3 - "$TMP/local-n1/a.json" "$TMP/store1" <<'EOF' && ok "each committed checkpoint is a DLLogger record (steps 2, 4, 5)" || fail "checkpoint events"
import json, sys
recs = [json.loads(l[5:]) for l in open(sys.argv[1]) if l.startswith("DLLL ")]
c = [(r["step"], r["data"]) for r in recs if "checkpoint_committed" in r["data"]]
assert [s for s, _ in c] == [2, 4, 5], c
assert all(d["checkpoint_committed"] == sys.argv[2] and d["run"] == "local-n1" and d["bytes"] > 0 for _, d in c), c
EOF

if [ $HAVE_MPI = 1 ] && start_server "$TMP/srv1"; then
    resume_case http-n3 3 "$URL"
    resume_case http-n3-sync-full 3 "$URL" --no_checkpoint_async --no_checkpoint_incremental
    resume_case http-n1-rowwise 1 "$URL" --optimizer rowwise_adagrad
else
    skip "resume over HTTP on 3 workers" "mpirun or terarec-ckpt unavailable"
fi
resume_case local-n3-tablewise 3 "$TMP/store1" --no_columnwise_split
# multi-hot tables (fixed and variable hotness, empty bags, averaged): the bags
# come back from the data position, and incremental saves mark the rows of every
# id of a bag
MH="--synthetic_dataset_multi_hot_sizes 3,1,4,2,5,1,2,1,3,2 --synthetic_dataset_multi_hot_lengths variable"
if [ $HAVE_MPI = 1 ]; then
    resume_case multihot-n3 3 "$TMP/store1" $MH --pooling mean
else
    resume_case multihot-n1 1 "$TMP/store1" $MH --pooling mean
fi
# --pooling is the model's: a run that sums the bags a checkpoint averaged is refused
mh_run=$([ $HAVE_MPI = 1 ] && echo multihot-n3 || echo multihot-n1)
wrk 1 $(base) $MH --pooling sum --max_steps 12 --log_path "$TMP/mh.json" --restore "$TMP/store1#$mh_run"
rc=$?
if [ $rc -eq 2 ] && echo "$OUT" | grep -q 'pooling is \["mean",.*this run.s (--pooling) is \["sum",'; then
    ok "a checkpoint of averaged bags is refused by a run that sums them, naming --pooling (exit 2)"
else
    fail "pooling mismatch refused" "rc=$rc $(echo "$OUT" | tail -n 3)"
fi

# ---- reshard: saved by 4 column-wise workers, restored on 1, 3 and 2 (table-wise)
reshard() { # NAME OPT: saves on 4, restores on the others, compares the weights bit for bit
    local name=$1 opt=$2 d="$TMP/$1"
    mkdir -p "$d/src"
    if ! wrk 4 $(base) --optimizer "$opt" --max_steps 6 --log_path "$d/src/log.json" --dump_weights "$d/src" \
        --checkpoint_dir "$TMP/store2" --run_name "$name"; then
        fail "$name: save on 4 workers" "$(echo "$OUT" | tail -n 5)"
        return
    fi
    local n mode
    for n_mode in 1:--columnwise_split 3:--columnwise_split 2:--no_columnwise_split; do
        n=${n_mode%%:*} mode=${n_mode#*:}
        mkdir -p "$d/n$n"
        if wrk "$n" $(base) --optimizer "$opt" $mode --max_steps 6 --log_path "$d/n$n/log.json" \
            --dump_weights "$d/n$n" --restore "$TMP/store2#$name" &&
            out=$($CMP "$d/src" "$d/n$n" --bitwise --no-losses 2>&1); then
            ok "$name: saved on 4 column-wise, restored on $n ${mode#--}: weights and optimizer state equal"
        else
            fail "$name: restore on $n ${mode#--}" "$(echo "$OUT $out" | grep -v '^ok' | tail -n 6)"
        fi
    done
}
if [ $HAVE_MPI = 1 ]; then
    reshard reshard-adagrad adagrad
    reshard reshard-rowwise rowwise_adagrad
else
    skip "reshard 4 -> 1, 3, 2" "mpirun not found"
fi

# ---- a corrupted chunk: resume and verify fail naming the tensor, rows and file
cp -r "$TMP/store1" "$TMP/store3"
chunk=$(python3 - "$TMP/store3" <<'EOF'
import json, sys, os
root = sys.argv[1]
step = open(os.path.join(root, "runs/local-n1/LATEST")).read().strip()
m = json.load(open(os.path.join(root, "runs/local-n1/manifests/%s.json" % step)))
t = [t for t in m["tensors"] if t["name"] == "emb/4"][0]
c = t["chunks"][0]
print(os.path.join(root, "chunks", c["hash"][:2], c["hash"]))
EOF
)
python3 -c "
import sys; p=sys.argv[1]; b=bytearray(open(p,'rb').read()); b[5]^=0x40; open(p,'wb').write(bytes(b))" "$chunk"
wrk 1 $(base) --max_steps 12 --log_path "$TMP/c.json" --checkpoint_dir "$TMP/store3" --run_name local-n1 --resume
rc=$?
if [ $rc -ne 0 ] && echo "$OUT" | grep -q "emb/4 rows \[0, " && echo "$OUT" | grep -qF "$chunk"; then
    ok "resume from a corrupted chunk fails naming the tensor, rows and file (exit $rc)"
else
    fail "resume from a corrupted chunk" "rc=$rc $(echo "$OUT" | tail -n 4)"
fi
out=$(ckpt verify --checkpoint_dir "$TMP/store3" --run_name local-n1 2>&1)
rc=$?
if [ $rc -ne 0 ] && echo "$out" | grep -q "emb/4 rows \[0, " && echo "$out" | grep -qF "$chunk"; then
    ok "ckpt verify reports the corrupted chunk (tensor, rows, file; exit $rc)"
else
    fail "ckpt verify on a corrupted chunk" "rc=$rc $(echo "$out" | tail -n 4)"
fi
check "ckpt verify passes on the intact store" ckpt verify --checkpoint_dir "$TMP/store1" --run_name local-n1

# ---- a config that does not match is refused naming the field
wrk 1 $(base | sed 's/--embedding_dim 8/--embedding_dim 16/; s/16,8/16,16/') --max_steps 12 --log_path "$TMP/m.json" \
    --checkpoint_dir "$TMP/store1" --run_name local-n1 --resume
rc=$?
if [ $rc -eq 2 ] && echo "$OUT" | grep -q "embedding_dim is 8, this run's (--embedding_dim) is 16"; then
    ok "a checkpoint of another embedding_dim is refused naming the field (exit 2)"
else
    fail "config mismatch refused" "rc=$rc $(echo "$OUT" | tail -n 3)"
fi
wrk 1 $(base | sed 's/adagrad/sgd/') --max_steps 12 --log_path "$TMP/m.json" --restore "$TMP/store1#local-n1"
rc=$?
if [ $rc -eq 2 ] && echo "$OUT" | grep -q "optimizer is \"adagrad\""; then
    ok "a checkpoint of another optimizer is refused naming the field (exit 2)"
else
    fail "optimizer mismatch refused" "rc=$rc $(echo "$OUT" | tail -n 3)"
fi

# ---- --mode eval and --mode inference on a restored model
want=$(grep -o 'validation: step=12, auc=[0-9.]*' <<<"$(timeout 60 $W $(base) --max_steps 12 --log_path "$TMP/e0.json" \
    --checkpoint_dir "$TMP/store4" --run_name ev 2>&1)" | sed 's/.*auc=//')
wrk 1 $(base) --mode eval --restore "$TMP/store4#ev@12" --log_path "$TMP/e1.json"
got=$(echo "$OUT" | sed -n 's/.*Evaluation completed, AUC: \([0-9.]*\), test_loss: [0-9.]*$/\1/p')
if [ -n "$want" ] && [ "$got" = "$want" ]; then
    ok "--mode eval of the restored model prints the seed's line with the AUC the run ended with ($got)"
else
    fail "--mode eval" "want '$want' got '$got': $(echo "$OUT" | tail -n 3)"
fi
wrk 1 $(base) --mode inference --max_steps 30 --restore "$TMP/store4#ev" --log_path "$TMP/e2.json"
if echo "$OUT" | grep -q 'mean_inference_throughput=.*p90_inference_latency=.*p95_inference_latency=.*p99_inference_latency='; then
    ok "--mode inference prints throughput and p90/p95/p99 latency"
else
    fail "--mode inference" "$(echo "$OUT" | tail -n 3)"
fi

# ---- kill -9 of a worker during an upload: LATEST names the last complete
# checkpoint, which verifies and resumes; gc removes what the dead save left
if start_server "$TMP/srv5" TR_CKPT_FAULT_PUT_DELAY_MS=40; then
    $W $(base) --max_steps 100000 --synthetic_dataset_train_batches 100000 --log_path "$TMP/k.json" \
        --checkpoint_dir "$URL" --checkpoint_token_file "$TMP/token" --run_name kw --checkpoint_every 3 \
        --checkpoint_incremental=false >"$TMP/k.out" 2>&1 &
    wpid=$!
    for _ in $(seq 600); do [ -s "$TMP/srv5/runs/kw/LATEST" ] && break; sleep 0.05; done
    # the next save is uploading once a chunk's temporary file shows up
    for _ in $(seq 600); do find "$TMP/srv5/chunks" -name '*.tmp-*' | grep -q . && break; sleep 0.02; done
    kill -9 $wpid
    wait $wpid 2>/dev/null
    latest=$(cat "$TMP/srv5/runs/kw/LATEST" 2>/dev/null)
    if [ -n "$latest" ] && ckpt verify --checkpoint_dir "$URL" --run_name kw >/dev/null 2>&1; then
        ok "worker killed during an upload: LATEST names step $latest, which verifies"
    else
        fail "worker killed during an upload" "LATEST='$latest' $(tail -n 3 "$TMP/k.out")"
    fi
    sleep 0.5 # the server finishes the request it was in
    ckpt gc --checkpoint_dir "$URL" --keep 1 --grace 0 >"$TMP/gc.out" 2>&1
    named=$(python3 -c "
import json,sys; m=json.load(open(sys.argv[1])); print(len({c['hash'] for t in m['tensors'] for c in t['chunks']}))" \
        "$TMP/srv5/runs/kw/manifests/$latest.json")
    have=$(find "$TMP/srv5/chunks" -type f | wc -l)
    if [ "$named" = "$have" ] && [ -z "$(find "$TMP/srv5" -name '*.tmp-*')" ] &&
        ckpt verify --checkpoint_dir "$URL" --run_name kw >/dev/null 2>&1; then
        ok "gc after the kill: the $have chunk files left are exactly those LATEST names, no temporary file"
    else
        fail "gc after the kill" "named=$named files=$have $(cat "$TMP/gc.out")"
    fi
    wrk 1 $(base) --max_steps $((latest + 2)) --log_path "$TMP/k2.json" --checkpoint_dir "$URL" \
        --checkpoint_token_file "$TMP/token" --run_name kw --resume
    if echo "$OUT" | grep -q "restored .*step $latest"; then
        ok "the run resumes from step $latest after the kill"
    else
        fail "resume after the kill" "$(echo "$OUT" | tail -n 3)"
    fi
    kill "$SPID"
fi

# ---- kill -9 of the server during a commit: LATEST still names the previous
# checkpoint; the restarted server serves it; gc removes the uncommitted one
if start_server "$TMP/srv6" TR_CKPT_FAULT_COMMIT_DELAY_MS=1500; then
    $W $(base) --max_steps 100000 --synthetic_dataset_train_batches 100000 --log_path "$TMP/s.json" \
        --checkpoint_dir "$URL" --checkpoint_token_file "$TMP/token" --run_name ks --checkpoint_every 2 \
        >"$TMP/s.out" 2>&1 &
    wpid=$!
    for _ in $(seq 600); do [ -s "$TMP/srv6/runs/ks/LATEST" ] && break; sleep 0.05; done
    first=$(cat "$TMP/srv6/runs/ks/LATEST" 2>/dev/null)
    # the next commit is in its delay once the new LATEST's temporary file exists
    for _ in $(seq 600); do find "$TMP/srv6/runs/ks" -maxdepth 1 -name 'LATEST.tmp-*' | grep -q . && break; sleep 0.02; done
    { kill -9 "$SPID"; wait "$SPID"; } 2>/dev/null
    wait "$wpid" 2>/dev/null
    wrc=$?
    latest=$(cat "$TMP/srv6/runs/ks/LATEST" 2>/dev/null)
    nman=$(ls "$TMP/srv6/runs/ks/manifests" | grep -c '\.json$')
    if [ -n "$first" ] && [ "$latest" = "$first" ] && [ "$nman" -ge 2 ] && [ $wrc -ne 0 ]; then
        ok "server killed during a commit: LATEST still names step $first ($nman manifests stored; the worker failed, exit $wrc)"
    else
        fail "server killed during a commit" "first=$first latest=$latest manifests=$nman worker=$wrc"
    fi
    if start_server "$TMP/srv6"; then
        check "the restarted server's LATEST verifies" ckpt verify --checkpoint_dir "$URL" --run_name ks
        ckpt gc --checkpoint_dir "$URL" --keep 1 --grace 0 >"$TMP/gc2.out" 2>&1
        if [ "$(ls "$TMP/srv6/runs/ks/manifests" | grep '\.json$')" = "$first.json" ] && [ -z "$(find "$TMP/srv6" -name '*.tmp-*')" ]; then
            ok "gc removes the uncommitted manifest and the temporary files"
        else
            fail "gc after the server kill" "$(ls "$TMP/srv6/runs/ks/manifests") $(cat "$TMP/gc2.out")"
        fi
        kill "$SPID"
    fi
fi

# ---- the seed's flag names: --save_checkpoint_path (the run gets a generated name,
# printed) and --restore_checkpoint_path (the store's only run, its latest step)
wrk 1 $(base) --max_steps 4 --log_path "$TMP/al.json" --save_checkpoint_path "$TMP/store8"
gen=$(echo "$OUT" | sed -n 's/^checkpoint: run \([^ ]*\) to .*/\1/p')
if [ -n "$gen" ] && [ -s "$TMP/store8/runs/$gen/LATEST" ]; then
    ok "--save_checkpoint_path saves run $gen (a generated name, printed)"
else
    fail "--save_checkpoint_path" "$(echo "$OUT" | tail -n 3)"
fi
wrk 1 $(base) --max_steps 4 --log_path "$TMP/al2.json" --restore_checkpoint_path "$TMP/store8" --mode eval
echo "$OUT" | grep -q "restored --restore $TMP/store8#$gen@4" && echo "$OUT" | grep -q 'Evaluation completed, AUC:' &&
    ok "--restore_checkpoint_path DIR restores the store's only run at its latest step" ||
    fail "--restore_checkpoint_path" "$(echo "$OUT" | tail -n 3)"

# the memory plan counts the staging copy of a saving run
wrk 1 $(base) --max_steps 2 --log_path "$TMP/p0.json"
p0=$(echo "$OUT" | sed -n 's/^memory: rank 0 peak .* plan \([0-9.]*\) MiB$/\1/p')
wrk 1 $(base) --max_steps 2 --log_path "$TMP/p1.json" --checkpoint_dir "$TMP/store9" --run_name pm
p1=$(echo "$OUT" | sed -n 's/^memory: rank 0 peak .* plan \([0-9.]*\) MiB$/\1/p')
st=$(echo "$OUT" | sed -n 's/^checkpoint: \([0-9.]*\) MiB of staging memory on rank 0.*/\1/p')
if [ -n "$p0" ] && [ -n "$p1" ] && [ -n "$st" ] &&
    python3 -c "import sys; a, b, s = map(float, sys.argv[1:]); sys.exit(not abs(b - a - s) <= 0.1 + 0.01 * s)" "$p0" "$p1" "$st"; then
    ok "the memory plan of a saving run adds its staging ($p0 -> $p1 MiB, staging $st MiB)"
else
    fail "plan with staging" "plan $p0 -> $p1, staging $st"
fi

# ---- bad flags
wrk 1 $(base) --max_steps 2 --checkpoint_dir "$TMP/store1" --resume --log_path "$TMP/x.json"
[ $? -eq 2 ] && echo "$OUT" | grep -q -- '--resume needs --run_name' && ok "--resume without --run_name: exit 2" ||
    fail "--resume without --run_name" "$(echo "$OUT" | tail -n 2)"
wrk 1 $(base) --max_steps 2 --checkpoint_dir http://127.0.0.1:9 --log_path "$TMP/x.json"
[ $? -eq 2 ] && echo "$OUT" | grep -q -- 'token' && ok "a URL without --checkpoint_token_file: exit 2" ||
    fail "URL without a token file" "$(echo "$OUT" | tail -n 2)"
wrk 1 $(base) --max_steps 2 --restore "$TMP/store1#bad/name" --log_path "$TMP/x.json"
[ $? -eq 2 ] && echo "$OUT" | grep -q "is not a run name" && ok "--restore with a bad run name: exit 2" ||
    fail "--restore bad run name" "$(echo "$OUT" | tail -n 2)"
wrk 1 $(base) --max_steps 2 --restore "$TMP/store1#local-n1@77" --log_path "$TMP/x.json"
[ $? -eq 2 ] && echo "$OUT" | grep -q "77" && ok "--restore of a step that does not exist: exit 2" ||
    fail "--restore missing step" "$(echo "$OUT" | tail -n 2)"
wrk 1 $(base) --max_steps 2 --log_path "$TMP/x.json" --checkpoint_dir "$TMP/store7" --run_name fresh --resume
echo "$OUT" | grep -q "has no checkpoint in .* yet: training starts at step 0" && [ -s "$TMP/store7/runs/fresh/LATEST" ] &&
    ok "--resume of a run with no checkpoint starts at step 0 and saves at the end" ||
    fail "--resume of a new run" "$(echo "$OUT" | tail -n 2)"
done_testing
