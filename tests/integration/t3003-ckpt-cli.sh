#!/usr/bin/env bash
# t3003: `terarec ckpt list | show | verify | inspect | export | gc` on a real
# store, once on a local path and once through terarec-ckpt on loopback: the
# fields they print, verify passing and then naming a flipped chunk (exit 2),
# exports checked against the tensors assembled here from the chunk files
# (safetensors by a reader written with the standard library, and by the
# safetensors package when importable; npy with numpy), gc removing what no kept
# manifest names, and bad flags (exit 2). The store is the fixture that
# test_client writes (TR_CKPT_FIXTURE).
. "$(dirname "$0")/lib.sh"
T=$TR_BIN/terarec
PY=/usr/bin/python3
FX=$TR_BUILD/tests/unit/ckpt_store/test_client

if [ ! -x "$FX" ] || ! TR_CKPT_FIXTURE=$TMP/fixture "$FX" >"$TMP/fixture.log" 2>&1; then
    fail "write the fixture store" "$(tail -n 5 "$TMP/fixture.log" 2>/dev/null)"
    done_testing
fi
ok "write the fixture store"

cat >"$TMP/check.py" <<'PYEOF'
import json, os, struct, sys

def manifest(root, step):
    return json.load(open(os.path.join(root, "runs", "demo", "manifests", "%d.json" % step)))

def chunk(root, h):
    return open(os.path.join(root, "chunks", h[:2], h), "rb").read()

def assemble(root, t):
    """The tensor as a flat row-major list of floats, from its chunk files."""
    rows = t["shape"][0]
    cols = t["shape"][1] if len(t["shape"]) == 2 else 1
    out = [None] * (rows * cols)
    for c in t["chunks"]:
        (a, b), (p, q) = c["rows"], c["cols"]
        data = chunk(root, c["hash"])
        w = q - p
        vals = struct.unpack("<%df" % ((b - a) * w), data)
        for r in range(a, b):
            out[r * cols + p:r * cols + q] = vals[(r - a) * w:(r - a + 1) * w]
    assert None not in out
    return out

def npy_name(t, part):
    n = t["name"]
    if n.startswith("emb/") and n.count("/") == 1:
        return "feature_%s_%d_part%d.npy" % (n[4:], t["shape"][0], part)
    if n.startswith("dense/") and not n.endswith("/adagrad"):
        n = n[6:]
    return n.replace("/", "_") + "_part%d.npy" % part

def main():
    what, root, step, out, opt = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4], sys.argv[5] == "1"
    m = manifest(root, step)
    tensors = [t for t in m["tensors"] if opt or not t["name"].endswith("/adagrad")]
    if what == "safetensors":
        raw = open(out, "rb").read()
        (hl,) = struct.unpack("<Q", raw[:8])
        assert hl % 8 == 0, "header length %d not a multiple of 8" % hl
        hdr = json.loads(raw[8:8 + hl])
        meta = hdr.pop("__metadata__")
        assert meta == {"run": "demo", "step": str(step)}, meta
        assert list(hdr) == [t["name"] for t in tensors], list(hdr)
        data = raw[8 + hl:]
        off = 0
        for t in tensors:
            e = hdr[t["name"]]
            assert e["dtype"] == "F32" and e["shape"] == t["shape"], (t["name"], e)
            n = 1
            for d in t["shape"]:
                n *= d
            assert e["data_offsets"] == [off, off + 4 * n], (t["name"], e["data_offsets"], off)
            got = list(struct.unpack("<%df" % n, data[off:off + 4 * n]))
            assert got == assemble(root, t), "values of " + t["name"]
            off += 4 * n
        assert off == len(data), (off, len(data))
        print("%d tensors, %d bytes of data" % (len(tensors), off))
    elif what == "safetensors-package":
        from safetensors.numpy import load_file
        import numpy as np
        d = load_file(out)
        assert sorted(d) == sorted(t["name"] for t in tensors)
        for t in tensors:
            assert np.array_equal(d[t["name"]].reshape(-1), np.array(assemble(root, t), dtype=np.float32))
        print("%d tensors" % len(d))
    elif what == "npy":
        import numpy as np
        want = set()
        for t in tensors:
            name = npy_name(t, 0)
            want.add(name)
            a = np.load(os.path.join(out, name))
            assert a.dtype == np.dtype("<f4") and not np.isfortran(a) and list(a.shape) == t["shape"], (name, a.shape)
            assert np.array_equal(a.reshape(-1), np.array(assemble(root, t), dtype=np.float32)), name
        files = set(os.listdir(out))
        assert files == want, (sorted(files), sorted(want))
        print(" ".join(sorted(files)))
    elif what == "added":
        prev = set(c["hash"] for t in manifest(root, int(out))["tensors"] for c in t["chunks"])
        seen, total = set(), 0
        for t in m["tensors"]:
            for c in t["chunks"]:
                if c["hash"] not in prev and c["hash"] not in seen:
                    seen.add(c["hash"])
                    total += c["bytes"]
        print(total)
    elif what == "chunkfile":  # the file of the first chunk of emb/0
        h = m["tensors"][0]["chunks"][int(out)]
        print(os.path.join(root, "chunks", h["hash"][:2], h["hash"]), h["rows"][0], h["rows"][1], h["cols"][0],
              h["cols"][1], h["hash"])

main()
PYEOF

# suite TAG ROOT FLAGS...: every check against the store at ROOT, reached with FLAGS
suite() {
    local tag=$1 root=$2; shift 2
    local D=("$@") out
    # list
    if out=$($T ckpt list "${D[@]}" 2>&1) && echo "$out" | grep -Eq '^demo +20 +3$'; then
        ok "$tag: list shows the run, its LATEST and 3 manifests"
    else
        fail "$tag: list" "$out"
    fi
    if out=$($T ckpt list "${D[@]}" --run_name demo 2>&1) &&
        echo "$out" | grep -Eq '^ +10 committed +6 +[0-9]+ +[0-9]+$' &&
        echo "$out" | grep -Eq '^ +20 latest +6 ' && echo "$out" | grep -Eq '^ +30 uncommitted +6 '; then
        ok "$tag: list --run_name marks committed, latest and uncommitted manifests"
    else
        fail "$tag: list --run_name" "$out"
    fi
    # show
    if out=$($T ckpt show "${D[@]}" --run_name demo 2>&1) && echo "$out" | grep -q '^run: demo$' &&
        echo "$out" | grep -q '^step: 20 (latest)$' && echo "$out" | grep -q '^world: 1$' &&
        echo "$out" | grep -q '^split: columnwise$' && echo "$out" | grep -q '^created: ' &&
        echo "$out" | grep -q '"embedding_dim": 8' && echo "$out" | grep -q '"step": 20' &&
        echo "$out" | grep -q '^tensors: 6$' && echo "$out" | grep -q '^chunks: 15 ' &&
        echo "$out" | grep -q '^bytes: '; then
        ok "$tag: show prints the header, config and state"
    else
        fail "$tag: show" "$out"
    fi
    check "$tag: show --step 10" sh -c "$T ckpt show ${D[*]} --run_name demo --step 10 | grep -q '^step: 10$'"
    # inspect
    local added
    added=$($PY "$TMP/check.py" added "$root" 20 10 0)
    if out=$($T ckpt inspect "${D[@]}" --run_name demo 2>&1) &&
        echo "$out" | grep -Eq '^emb/0 +\[1000, 8\] +8 +32000$' &&
        echo "$out" | grep -Eq '^emb/0/adagrad +\[1000\] +2 +4000$' &&
        echo "$out" | grep -q 'dedup ratio' &&
        echo "$out" | grep -q "^previous manifest: step 10; added since: $added bytes"; then
        ok "$tag: inspect: shapes, chunks, bytes, dedup ratio, $added bytes added since step 10"
    else
        fail "$tag: inspect" "$out"
    fi
    # verify, then flip one byte of a chunk file
    if out=$($T ckpt verify "${D[@]}" --run_name demo 2>&1) &&
        echo "$out" | grep -Eq '^verify: 15 chunks, [0-9]+ bytes, all match$'; then
        ok "$tag: verify passes"
    else
        fail "$tag: verify passes" "$out"
    fi
    local file r0 r1 c0 c1 hash rc
    read -r file r0 r1 c0 c1 hash <<<"$($PY "$TMP/check.py" chunkfile "$root" 20 1 0)"
    cp "$file" "$TMP/saved"
    printf '\x7f' | dd of="$file" bs=1 seek=5 conv=notrunc status=none
    out=$($T ckpt verify "${D[@]}" --run_name demo 2>/dev/null)
    rc=$?
    local where=$file
    [ "$tag" = http ] && where=$URL/chunks/$hash
    if [ $rc -eq 2 ] && echo "$out" | grep -qF "tensor emb/0 rows [$r0, $r1) cols [$c0, $c1): chunk $where: hash" &&
        [ "$(echo "$out" | grep -c ': chunk ')" -eq 1 ] && echo "$out" | grep -q '1 bad'; then
        ok "$tag: verify names the flipped chunk's tensor, rows and location, exit 2"
    else
        fail "$tag: verify after a flipped byte (exit $rc)" "$out"
    fi
    cp "$TMP/saved" "$file"
    # export safetensors, read here and by the package
    local st=$TMP/$tag.safetensors
    if out=$($T ckpt export "${D[@]}" --run_name demo --output "$st" 2>&1) &&
        res=$($PY "$TMP/check.py" safetensors "$root" 20 "$st" 0 2>&1); then
        ok "$tag: export safetensors, checked by a standard-library reader ($res)"
    else
        fail "$tag: export safetensors" "$out $res"
    fi
    if out=$($T ckpt export "${D[@]}" --run_name demo --step 10 --optimizer_state --output "$st" 2>&1) &&
        res=$($PY "$TMP/check.py" safetensors "$root" 10 "$st" 1 2>&1); then
        ok "$tag: export safetensors --step 10 --optimizer_state ($res)"
    else
        fail "$tag: export safetensors --optimizer_state" "$out $res"
    fi
    if $PY -c 'import safetensors' 2>/dev/null; then
        check "$tag: the safetensors package loads the export" $PY "$TMP/check.py" safetensors-package "$root" 10 "$st" 1
    else
        skip "$tag: the safetensors package loads the export" "python3 safetensors not installed"
    fi
    ls "$TMP" | grep -q "$tag.safetensors.tmp" && fail "$tag: no temporary file left" || ok "$tag: no temporary file left"
    # export npy
    local nd=$TMP/$tag-npy
    if out=$($T ckpt export "${D[@]}" --run_name demo --format npy --output "$nd" 2>&1) &&
        res=$($PY "$TMP/check.py" npy "$root" 20 "$nd" 0 2>&1); then
        ok "$tag: export npy, read by numpy ($res)"
    else
        fail "$tag: export npy" "$out $res"
    fi
    if out=$($T ckpt export "${D[@]}" --run_name demo --format npy --optimizer_state --output "$nd" 2>&1) &&
        res=$($PY "$TMP/check.py" npy "$root" 20 "$nd" 1 2>&1); then
        ok "$tag: export npy --optimizer_state over the previous export ($res)"
    else
        fail "$tag: export npy --optimizer_state" "$out $res"
    fi
    # bad input: exit 2, one error naming the flag or object and a hint
    bad() { # NAME PATTERN ARGS...
        local name=$1 pat=$2; shift 2
        local o r
        o=$($T ckpt "$@" 2>&1)
        r=$?
        if [ $r -eq 2 ] && echo "$o" | grep -q "error: .*$pat" && echo "$o" | grep -q 'hint: '; then
            ok "$tag: $name: exit 2"
        else
            fail "$tag: $name (exit $r)" "$o"
        fi
    }
    bad "unknown run" "--run_name 'nope'" show "${D[@]}" --run_name nope
    bad "unknown step" "--step 15" show "${D[@]}" --run_name demo --step 15
    bad "missing --run_name" "--run_name is required" verify "${D[@]}"
    bad "export without --output" "--output is required" export "${D[@]}" --run_name demo
    o=$($T ckpt export "${D[@]}" --run_name demo --format zip --output x 2>&1)
    [ $? -eq 2 ] && echo "$o" | grep -q 'format' && ok "$tag: bad --format: exit 2" ||
        fail "$tag: bad --format" "$o"
    # gc: keep 1 leaves step 20; the orphan and step 10's own chunks go
    local before after
    before=$(find "$root/chunks" -type f | wc -l)
    if out=$($T ckpt gc "${D[@]}" --keep 1 --grace 0 2>&1) && echo "$out" | grep -q 'manifests kept 1, removed 2' &&
        after=$(find "$root/chunks" -type f | wc -l) && [ "$after" -lt "$before" ] &&
        [ "$after" -eq "$($PY -c "import json; m = json.load(open('$root/runs/demo/manifests/20.json'));
print(len(set(c['hash'] for t in m['tensors'] for c in t['chunks'])))")" ] &&
        $T ckpt verify "${D[@]}" --run_name demo >/dev/null 2>&1; then
        ok "$tag: gc removes old manifests and orphans ($before -> $after chunk files), step 20 still verifies"
    else
        fail "$tag: gc" "$out (chunk files $before -> ${after:-?})"
    fi
}

cp -a "$TMP/fixture" "$TMP/local"
suite local "$TMP/local" --checkpoint_dir "$TMP/local"

# bad flags that need no store
o=$($T ckpt list 2>&1)
[ $? -eq 2 ] && echo "$o" | grep -q -- '--checkpoint_dir is required' && echo "$o" | grep -q 'hint:' &&
    ok "missing --checkpoint_dir: exit 2" || fail "missing --checkpoint_dir" "$o"
o=$($T ckpt list --checkpoint_dir http://127.0.0.1:1 2>&1)
[ $? -eq 2 ] && echo "$o" | grep -q -- '--checkpoint_token_file' && ok "URL without a token file: exit 2" ||
    fail "URL without a token file" "$o"
o=$($T ckpt frobnicate 2>&1)
[ $? -eq 2 ] && ok "unknown subcommand: exit 2" || fail "unknown subcommand" "$o"

if [ ! -x "$TR_BIN/terarec-ckpt" ]; then
    skip "http: the same checks through terarec-ckpt" "no terarec-ckpt binary"
    done_testing
fi
cp -a "$TMP/fixture" "$TMP/remote"
echo "test-token" >"$TMP/token"
"$TR_BIN/terarec-ckpt" --root "$TMP/remote" --token_file "$TMP/token" >"$TMP/server.out" 2>"$TMP/server.log" &
SERVER=$!
trap 'kill $SERVER 2>/dev/null; wait $SERVER 2>/dev/null; rm -rf "$TMP"' EXIT
URL=
for _ in $(seq 100); do
    URL=$(grep -o 'http://[0-9.:]*' "$TMP/server.out" 2>/dev/null | head -n 1)
    [ -n "$URL" ] && break
    sleep 0.1
done
if [ -z "$URL" ]; then
    fail "terarec-ckpt starts" "$(tail -n 5 "$TMP/server.log")"
    done_testing
fi
ok "terarec-ckpt starts ($URL)"
suite http "$TMP/remote" --checkpoint_dir "$URL" --checkpoint_token_file "$TMP/token"
echo wrong >"$TMP/wrong"
o=$($T ckpt list --checkpoint_dir "$URL" --checkpoint_token_file "$TMP/wrong" 2>&1)
r=$?
[ $r -ne 0 ] && echo "$o" | grep -q "GET $URL/runs: 401" && ok "http: a wrong token fails naming the URL and 401" ||
    fail "http: wrong token (exit $r)" "$o"
done_testing
