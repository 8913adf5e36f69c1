#!/usr/bin/env bash
# t1003: terarec-loader serving worker rank 0 through the shared-memory ring.
# Loader + 1 worker and loader + 3 workers (column-wise and table-wise) train
# bitwise the same per-step losses, evaluations and final weights as the
# in-process reader, on synthetic data and on a prepared split-binary dataset
# with a partial last batch, with and without --shuffle_samples (and with NaN/inf
# inputs replaced by 0, counted alike). Then failures
# with processes really killed: a killed loader stops every rank (non-zero, the
# loader named) and a killed worker stops the loader, each within ~10 s; a stale
# ring is replaced, a live one refused; mismatched flags are refused (exit 2); a
# dataset error in the loader stops the worker with exit 2, naming the loader;
# SIGTERM before any worker attached removes the ring. --shuffle_batches and
# --start_position pass through the loader (a worker whose start differs is
# refused), and a run resumed on a loader started at 0:0 has it seek to the
# checkpoint's position (the same losses as a loader started there); SIGUSR2/SIGUSR1 to the loader put an evaluation / a checkpoint request
# on the next batch, seen by the worker; SIGTERM with a worker attached stops
# every rank after the same step (worker exit 0). After each case nothing named
# terarec-<ring>* is left in /dev/shm.
. "$(dirname "$0")/lib.sh"
W=$TR_BIN/terarec-worker
L=$TR_BIN/terarec-loader
T=$TR_BIN/terarec
PY=$(command -v python3)
R=t1003-$$
trap 'kill -9 $(jobs -p) 2>/dev/null; rm -f /dev/shm/terarec-$R-*; rm -rf "$TMP"' EXIT
cd "$TMP" || exit 1

# records LOG: "step loss" per training step and "step auc logloss" per evaluation, full precision
records() {
    $PY -c 'import json,sys
for l in open(sys.argv[1]):
    if not l.startswith("DLLL "): continue
    r = json.loads(l[5:]); d = r["data"]
    for k in ("loss", "auc", "logloss"):
        if k in d: print(r["step"], k, repr(d[k]))' "$1"
}
wait_for() { # FILE PATTERN: up to 30 s
    local i
    for i in $(seq 300); do grep -q "$2" "$1" 2>/dev/null && return 0; sleep 0.1; done
    return 1
}

no_shm_left() { # NAME
    local left
    left=$(ls /dev/shm 2>/dev/null | grep "^terarec-$R" || true)
    [ -z "$left" ] && ok "$1: nothing left in /dev/shm" || fail "$1: nothing left in /dev/shm" "$left"
}

# the split-binary dataset: a last training batch of 2 samples and a partial test batch
partial_batch_dataset
SB="--dataset_type split_binary --dataset_path ds --batch_size $B --valid_batch_size 37 --seed 5"
SB_MODEL="--embedding_dim 4 --bottom_mlp_dims 8,4 --top_mlp_dims 8,1"
SYN="--synthetic_dataset_cardinalities 30,7,100,1000,5 --synthetic_dataset_num_numerical_features 5
     --synthetic_dataset_train_batches 7 --synthetic_dataset_valid_batches 3 --batch_size 48 --valid_batch_size 40
     --seed 7"
SYN_MODEL="--embedding_dim 4 --bottom_mlp_dims 8,4 --top_mlp_dims 8,1"
RUN="--learning_rate 0.2 --warmup_steps 0 --print_freq 1 --threads 1 --epochs 2 --evals_per_epoch 2"
use_mpi

# same NAME NP DATA MODEL EXTRA: the in-process reader against the loader (EXTRA:
# data flags, then worker flags after a '|')
same() {
    local name=$1 np=$2 data="$3 ${5%%|*}" model="$4 ${5#*|}" extra="" ring=$R-$1
    local launch="" rc_ref rc_w rc_l
    [ "$np" -gt 1 ] && launch="timeout 300 mpirun -np $np"
    $launch $W $data $model $RUN $extra --log_path "$name.ref.json" --dump_weights "$name.ref" \
        >"$name.ref.out" 2>&1
    rc_ref=$?
    timeout 300 $L --ring "$ring" $data $extra --attach_timeout 60 >"$name.l.out" 2>&1 &
    local lp=$!
    ${launch:-timeout 300} $W $data $model $RUN $extra --loader "shm:$ring" --log_path "$name.json" \
        --dump_weights "$name.w" >"$name.out" 2>&1
    rc_w=$?
    wait $lp
    rc_l=$?
    if [ $rc_ref -ne 0 ] || [ $rc_w -ne 0 ] || [ $rc_l -ne 0 ]; then
        fail "$name: runs" "exit ref $rc_ref worker $rc_w loader $rc_l; $(tail -n 3 "$name.out" "$name.l.out")"
        return
    fi
    records "$name.ref.json" >"$name.ref.rec"
    records "$name.json" >"$name.rec"
    local nl ne
    nl=$(grep -c ' loss ' "$name.rec")
    ne=$(grep -c ' auc ' "$name.rec")
    if [ "$nl" -gt 0 ] && [ "$ne" -gt 0 ] && cmp -s "$name.ref.rec" "$name.rec"; then
        ok "$name: the same $nl step losses and $ne evaluations, bitwise"
    else
        fail "$name: the same losses and evaluations" "$(diff "$name.ref.rec" "$name.rec" | head -n 4)"
    fi
    local r bad=""
    for r in $(seq 0 $((np - 1))); do
        cmp -s "$name.ref/rank$r.bin" "$name.w/rank$r.bin" || bad="$bad rank$r"
    done
    [ -z "$bad" ] && ok "$name: the same final weights on $np rank(s)" || fail "$name: the same final weights" "$bad"
    if grep -q "^nonfinite inputs:" "$name.ref.out"; then
        local a b
        a=$(grep "^nonfinite inputs:" "$name.ref.out")
        b=$(grep "^nonfinite inputs:" "$name.out")
        [ "$a" = "$b" ] && ok "$name: the same count of replaced NaN/inf inputs (${a#*: })" \
            || fail "$name: the same count of replaced NaN/inf inputs" "reader '$a', loader '$b'"
    fi
}

same syn-1 1 "$SYN" "$SYN_MODEL" "|"
same syn-1-shuf 1 "$SYN" "$SYN_MODEL" "--shuffle_samples|"
same sb-1 1 "$SB" "$SB_MODEL" "|"
same sb-1-shuf 1 "$SB" "$SB_MODEL" "--shuffle_samples --drop_last|"
# the batch order permuted, and a run resumed at epoch 1, batch 3 (t1004 checks the
# reader's resumed batches against an uninterrupted run's)
same sb-1-batches 1 "$SB" "$SB_MODEL" "--shuffle_batches|"
same sb-1-start 1 "$SB" "$SB_MODEL" "--shuffle_samples --start_position 1:3|"
ring=$R-startpos
$L --ring $ring $SB --start_position 1:3 --attach_timeout 20 >sp.l.out 2>&1 &
lp=$!
out=$(timeout 60 $W $SB $SB_MODEL $RUN --loader shm:$ring --loader_timeout 20 --log_path '' 2>&1)
rc=$?
kill $lp 2>/dev/null; wait $lp 2>/dev/null
[ $rc -eq 2 ] && echo "$out" | grep -q "error: --start_position: ring '/terarec-$ring' starts at 1:3, this worker at 0:0" \
    && ok "a worker without the loader's --start_position is refused (exit 2)" \
    || fail "a worker without the loader's --start_position is refused" "exit $rc: $out"
no_shm_left "start position mismatch"

# requests by signal: SIGUSR2 asks for an evaluation, SIGUSR1 for a checkpoint, on
# the next training batch the loader produces; every rank acts on it at that step.
# Sent before the worker attaches, they land on a batch just past the prefetched
# ones (at most --ring_slots 4 ahead), well before the last of 60 steps.
ring=$R-sig
$L --ring $ring $SYN --synthetic_dataset_train_batches 60 --attach_timeout 30 >sig.l.out 2>&1 &
lp=$!
wait_for sig.l.out "ring '/terarec-$ring' ready"
kill -USR2 $lp; kill -USR1 $lp
timeout 120 $W $SYN --synthetic_dataset_train_batches 60 $SYN_MODEL --learning_rate 0.2 --warmup_steps 0 \
    --print_freq 100 --threads 1 --evals_per_epoch 0 --loader shm:$ring --log_path '' --checkpoint_dir ck-sig \
    --run_name sig >sig.out 2>&1
rc=$?
wait $lp
es=$(sed -n 's/^step \([0-9]*\): the data source asks for an evaluation after this step$/\1/p' sig.out | head -n 1)
[ $rc -eq 0 ] && [ -n "$es" ] && [ "$es" -le 6 ] && grep -q "^validation: step=$es, auc=" sig.out \
    && ok "SIGUSR2 to the loader: an evaluation after step $es of 60" \
    || fail "SIGUSR2 to the loader: an evaluation" "exit $rc: $(grep -E 'asks|validation' sig.out | head -n 3)"
cs=$(sed -n 's/^checkpoint: step \([0-9]*\): full snapshot .*/\1/p' sig.out | head -n 1)
[ -n "$cs" ] && [ "$cs" -le 6 ] && [ -s "ck-sig/runs/sig/manifests/$cs.json" ] \
    && ok "SIGUSR1 to the loader: a checkpoint after step $cs, committed" \
    || fail "SIGUSR1 to the loader: the checkpoint request reaches the worker" "$(tail -n 3 sig.out)"
no_shm_left "signal requests"
# SIGTERM with a worker attached drains: every rank stops after the same step, the
# worker exits 0, the loader 130; nothing is left behind (20000 steps: the run is
# still going when the signal comes after its first step)
ring=$R-drain
$L --ring $ring $SYN --synthetic_dataset_train_batches 20000 --attach_timeout 30 >drain.l.out 2>&1 &
lp=$!
wait_for drain.l.out "ring '/terarec-$ring' ready"
timeout 120 mpirun -np 2 $W $SYN --synthetic_dataset_train_batches 20000 $SYN_MODEL --learning_rate 0.2 \
    --warmup_steps 0 --print_freq 1 --threads 1 --evals_per_epoch 0 --loader shm:$ring --log_path '' >drain.out 2>&1 &
wp=$!
wait_for drain.out '^step='
kill -TERM $lp
wait $wp
rc=$?
wait $lp
rc_l=$?
ss=$(sed -n 's/^summary: steps=\([0-9]*\),.*/\1/p' drain.out)
sq=$(sed -n 's/^step \([0-9]*\): the data source asks to stop after this step$/\1/p' drain.out)
[ $rc -eq 0 ] && [ $rc_l -eq 130 ] && [ -n "$sq" ] && [ "$ss" = "$sq" ] && [ "$ss" -lt 20000 ] \
    && ok "SIGTERM to the loader: 2 workers stop after step $ss of 20000 and exit 0, the loader 130" \
    || fail "SIGTERM to the loader drains" "worker $rc loader $rc_l steps '$ss' stop '$sq': $(tail -n 3 drain.out)"
no_shm_left "SIGTERM drain"
# NaN/inf numerical inputs replaced by 0: the loader counts them as the reader does
cp -r ds dsnf
$PY - <<'PYEOF'
for path, row, feat, val in (("dsnf/train/numerical.bin", 37, 5, 0x7e00), ("dsnf/train/numerical.bin", 200, 12, 0x7c00),
                             ("dsnf/test/numerical.bin", 3, 0, 0xfc00)):
    with open(path, "r+b") as f:
        f.seek((row * 13 + feat) * 2)
        f.write(val.to_bytes(2, "little"))
PYEOF
same sb-1-nonfinite 1 "${SB/--dataset_path ds/--dataset_path dsnf}" "$SB_MODEL" "--nonfinite_inputs zero|"
# a dataset error in the loader reaches the worker: both exit 2, the worker naming the loader
ring=$R-bad
$L --ring $ring ${SB/--dataset_path ds/--dataset_path dsnf} --attach_timeout 30 >bad.l.out 2>&1 &
lp=$!
out=$(timeout 60 $W ${SB/--dataset_path ds/--dataset_path dsnf} $SB_MODEL $RUN --loader shm:$ring --log_path '' 2>&1)
rc=$?
wait $lp
rc_l=$?
[ $rc -eq 2 ] && [ $rc_l -eq 2 ] && echo "$out" | grep -q "loader (pid $lp) of ring '/terarec-$ring' failed: " \
    && grep -q "train/numerical.bin': row 37 (sample 37), numerical feature 5 of 13 is NaN" bad.l.out \
    && ok "a NaN refused by the loader: loader and worker exit 2, the worker naming the loader" \
    || fail "a NaN refused by the loader: both exit 2" "worker $rc loader $rc_l: $out; $(cat bad.l.out)"
if command -v mpirun >/dev/null 2>&1; then
    same syn-3-col-shuf 3 "$SYN" "$SYN_MODEL" "--shuffle_samples|--columnwise_split --data_parallel_bottom_mlp"
    same sb-3-table 3 "$SB" "$SB_MODEL" "|"
    same sb-3-col-shuf 3 "$SB" "$SB_MODEL" "--shuffle_samples|--columnwise_split --data_parallel_bottom_mlp"
else
    skip "3 workers through the loader" "mpirun not found (install openmpi-bin: make deps)"
fi
no_shm_left "equivalence runs"

# a long run to kill things in the middle of
LONG="--synthetic_dataset_cardinalities 5x100 --synthetic_dataset_num_numerical_features 5
      --synthetic_dataset_train_batches 1000000 --synthetic_dataset_valid_batches 1 --batch_size 32 --seed 3"
LONG_RUN="$SYN_MODEL --learning_rate 0.1 --warmup_steps 0 --print_freq 1 --threads 1 --evals_per_epoch 0
          --log_path none.json"
# kill -9 the loader while 3 workers train
if command -v mpirun >/dev/null 2>&1; then
    ring=$R-kl
    $L --ring $ring $LONG >kl.l.out 2>&1 &
    lp=$!
    timeout 120 mpirun -np 3 $W $LONG $LONG_RUN --loader shm:$ring >kl.out 2>&1 &
    wp=$!
    if wait_for kl.out "loss"; then
        kill -9 $lp
        t0=$(date +%s.%N)
        wait $wp
        rc=$?
        dt=$($PY -c "import time; print('%.1f' % (time.time() - $t0))")
        echo "# workers ended $dt s after the loader was killed (exit $rc)"
        [ $rc -ne 0 ] && [ $rc -ne 124 ] && $PY -c "exit(not $dt < 15)" \
            && ok "kill -9 loader: the 3 workers stop non-zero within ~10 s ($dt s)" \
            || fail "kill -9 loader: the 3 workers stop non-zero within ~10 s" "exit $rc after $dt s"
        grep -q "loader (pid $lp) of ring '/terarec-$ring' is gone" kl.out \
            && ok "kill -9 loader: the error names the loader" \
            || fail "kill -9 loader: the error names the loader" "$(grep -i error kl.out | head -n 3)"
    else
        fail "kill -9 loader: the run started" "$(tail -n 5 kl.out kl.l.out)"
        kill -9 $lp $wp 2>/dev/null
    fi
    wait $lp 2>/dev/null
    no_shm_left "kill -9 loader"
fi

# kill -9 the worker: the loader ends by itself
ring=$R-kw
$L --ring $ring $LONG >kw.l.out 2>&1 &
lp=$!
$W $LONG $LONG_RUN --loader shm:$ring >kw.out 2>&1 &
wp=$!
if wait_for kw.out "loss"; then
    kill -9 $wp
    t0=$(date +%s.%N)
    timeout 30 tail --pid=$lp -f /dev/null
    wait $lp
    rc=$?
    dt=$($PY -c "import time; print('%.1f' % (time.time() - $t0))")
    echo "# loader ended $dt s after the worker was killed (exit $rc)"
    [ $rc -ne 0 ] && $PY -c "exit(not $dt < 10)" \
        && ok "kill -9 worker: the loader stops by itself within ~10 s ($dt s)" \
        || fail "kill -9 worker: the loader stops by itself within ~10 s" "exit $rc after $dt s"
    grep -q "worker (pid $wp) of ring '/terarec-$ring' is gone" kw.l.out \
        && ok "kill -9 worker: the loader says so" || fail "kill -9 worker: the loader says so" "$(cat kw.l.out)"
else
    fail "kill -9 worker: the run started" "$(tail -n 5 kw.out kw.l.out)"
fi
kill -9 $lp $wp 2>/dev/null
wait $lp $wp 2>/dev/null
no_shm_left "kill -9 worker"

# a stale ring (its loader killed before any worker came) is replaced; a live one refused
ring=$R-st
$L --ring $ring $SYN >st1.out 2>&1 &
lp=$!
wait_for st1.out "ready" && kill -9 $lp
wait $lp 2>/dev/null
[ -e /dev/shm/terarec-$ring ] && ok "kill -9 loader before attach: its ring is left behind" \
    || fail "kill -9 loader before attach: its ring is left behind" "$(cat st1.out)"
$L --ring $ring $SYN --attach_timeout 60 >st2.out 2>&1 &
lp=$!
wait_for st2.out "ready"
grep -q "replacing stale ring '/terarec-$ring' (its loader pid [0-9]* is gone)" st2.out \
    && ok "the next loader replaces the stale ring" || fail "the next loader replaces the stale ring" "$(cat st2.out)"
out=$(timeout 30 $L --ring $ring $SYN 2>&1)
rc=$?
[ $rc -eq 2 ] && echo "$out" | grep -q "ring '/terarec-$ring' is in use by loader pid $lp" \
    && ok "a second loader on a live ring is refused (exit 2)" \
    || fail "a second loader on a live ring is refused" "exit $rc: $out"
# flags that differ from the loader's: refused, naming the flag
out=$(timeout 60 $W $SYN $SYN_MODEL $RUN --batch_size 50 --loader shm:$ring --log_path '' 2>&1)
rc=$?
[ $rc -eq 2 ] && echo "$out" | grep -q -- "--batch_size: ring '/terarec-$ring' serves 48, this worker has 50" \
    && ok "a worker whose --batch_size differs is refused (exit 2)" \
    || fail "a worker whose --batch_size differs is refused" "exit $rc: $out"
out=$(timeout 60 $W $SYN $SYN_MODEL $RUN --loader shm:$ring --log_path '' 2>&1)
rc_w=$?
timeout 30 tail --pid=$lp -f /dev/null
wait $lp
rc=$?
[ $rc_w -eq 0 ] && [ $rc -eq 0 ] && ok "the refused worker left the ring to the right one; both end with 0" \
    || fail "the refused worker left the ring to the right one" "worker $rc_w loader $rc: $(tail -n 3 st2.out)"
no_shm_left "stale and live rings"

# SIGTERM before any worker attached: the ring is removed, exit 130
ring=$R-term
$L --ring $ring $SYN >term.out 2>&1 &
lp=$!
wait_for term.out "ready"
kill -TERM $lp
wait $lp
rc=$?
[ $rc -eq 130 ] && [ ! -e /dev/shm/terarec-$ring ] && ok "SIGTERM: the loader removes its ring and exits 130" \
    || fail "SIGTERM: the loader removes its ring and exits 130" "exit $rc; $(ls /dev/shm | grep "$ring")"
out=$(timeout 30 $W $SYN $SYN_MODEL $RUN --loader shm:$ring --loader_timeout 0.5 --log_path '' 2>&1)
rc=$?
[ $rc -ne 0 ] && echo "$out" | grep -q "ring '/terarec-$ring' did not appear within 0.5 s" \
    && ok "no loader: the worker gives up after --loader_timeout, naming the ring" \
    || fail "no loader: the worker gives up after --loader_timeout" "exit $rc: $out"
no_shm_left "SIGTERM"

# bad flags: exit 2 with one line naming the flag
out=$(timeout 30 $W $SYN $SYN_MODEL $RUN --loader tcp:r1 --log_path '' 2>&1)
rc=$?
[ $rc -eq 2 ] && echo "$out" | grep -q "error: --loader 'tcp:r1': expected shm:NAME" \
    && ok "--loader without shm: is refused (exit 2)" || fail "--loader without shm: is refused" "exit $rc: $out"
out=$(timeout 30 $L --ring a/b $SYN 2>&1)
rc=$?
[ $rc -eq 2 ] && echo "$out" | grep -q "ring name 'a/b'" && ok "a ring name with '/' is refused (exit 2)" \
    || fail "a ring name with '/' is refused" "exit $rc: $out"
out=$(timeout 30 $L $SYN 2>&1)
rc=$?
[ $rc -eq 2 ] && echo "$out" | grep -q -- "--ring: required" && ok "terarec-loader without --ring: exit 2" \
    || fail "terarec-loader without --ring: exit 2" "exit $rc: $out"
# ---- a run restored from a checkpoint takes its batches from where the
# checkpoint resumes: rank 0 asks a loader started at 0:0 to seek there, and
# trains the same steps as on a loader started there with --start_position
ring=$R-res
RES="$SYN $SYN_MODEL --learning_rate 0.2 --warmup_steps 0 --threads 1 --print_freq 1 --log_path= --run_name res"
losses() { grep '^step=' "$1" | sed 's/^\(step=[0-9]*\),.*\(loss=[^,]*\),.*/\1 \2/'; }
if timeout 60 $W $RES --checkpoint_dir ck-res --max_steps 4 >res0.out 2>&1 && cp -r ck-res ck-res2; then
    $L --ring $ring $SYN --attach_timeout 30 >res1.l.out 2>&1 &
    lp=$!
    wait_for res1.l.out "ring '/terarec-$ring' ready"
    timeout 60 $W $RES --checkpoint_dir ck-res --max_steps 8 --resume --loader shm:$ring >res1.out 2>&1
    rc=$?
    wait $lp 2>/dev/null
    [ $rc -eq 0 ] && grep -q 'restored --resume ck-res#res@4' res1.out && grep -q '^step=8,' res1.out &&
        ok "resume on a loader that starts at 0:0: the loader seeks to 0:4, steps 5-8 trained" ||
        fail "resume on a loader that starts at 0:0" "exit $rc: $(tail -n 3 res1.out)"
    $L --ring $ring $SYN --start_position 0:4 --attach_timeout 30 >res2.l.out 2>&1 &
    lp=$!
    wait_for res2.l.out "ring '/terarec-$ring' ready"
    timeout 60 $W $RES --checkpoint_dir ck-res2 --max_steps 8 --resume --loader shm:$ring --start_position 0:4 \
        >res2.out 2>&1
    rc=$?
    wait $lp 2>/dev/null
    [ $rc -eq 0 ] && grep -q 'restored --resume ck-res2#res@4' res2.out && grep -q '^step=8,' res2.out &&
        ok "resume on a loader started at the checkpoint's position: steps 5-8 trained" ||
        fail "resume on the loader" "exit $rc: $(tail -n 3 res2.out)"
    [ -n "$(losses res1.out)" ] && [ "$(losses res1.out)" = "$(losses res2.out)" ] &&
        ok "the seeking loader serves the same batches as the one started there: $(losses res1.out | tr '\n' ' ')" ||
        fail "the seeking loader's losses" "$(losses res1.out | tr '\n' ' ') vs $(losses res2.out | tr '\n' ' ')"
else
    fail "resume via the loader: the first run" "$(tail -n 3 res0.out)"
fi
no_shm_left "resume on the loader"

done_testing
