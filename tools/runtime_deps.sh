#!/usr/bin/env bash
# runtime_deps.sh BINARY|PLUGIN.so...: the Debian packages whose files the binaries
# load, one name a line, sorted: every library ldd resolves (transitively, as the
# dynamic loader would) mapped through `dpkg -S` to its package. The containers'
# build stage writes this list and the runtime stage installs exactly it.
# Fails when a library is "not found" or belongs to no package. Libraries loaded
# with dlopen (Open MPI's and PMIx's components) are not seen: their packages come
# with openmpi-bin, which the images install by name.
set -euo pipefail
[ $# -gt 0 ] || { echo "usage: runtime_deps.sh BINARY|PLUGIN.so..." >&2; exit 2; }
command -v dpkg >/dev/null || { echo "runtime_deps: dpkg is not installed (a Debian system is needed)" >&2; exit 1; }

paths=()
for b in "$@"; do
    [ -f "$b" ] || { echo "runtime_deps: $b: no such file" >&2; exit 2; }
    out=$(ldd "$b" 2>&1) || { echo "runtime_deps: ldd $b failed: $out" >&2; exit 1; }
    if grep -q 'not found' <<<"$out"; then
        echo "runtime_deps: $b needs libraries that are not found:" >&2
        grep 'not found' <<<"$out" | sed 's/^[[:space:]]*/  /' >&2
        echo "hint: install the packages that provide them (make deps-build), or fix the RUNPATH" >&2
        exit 1
    fi
    # "libfoo.so.1 => /path/libfoo.so.1 (0x...)" and "/lib64/ld-linux-x86-64.so.2 (0x...)"
    readarray -t -O ${#paths[@]} paths < <(awk '$2 == "=>" && $3 ~ /^\// {print $3} $1 ~ /^\// {print $1}' <<<"$out")
done
readarray -t paths < <(printf '%s\n' "${paths[@]}" | sort -u)

# candidates of each path as dpkg may know it: as printed, with or without /usr
# (merged /usr: /lib is /usr/lib), and its symlink's target likewise
declare -A cands_of=()
all=()
for p in "${paths[@]}"; do
    real=$(readlink -f "$p")
    c=("$p" "${p#/usr}" "/usr$p" "$real" "${real#/usr}" "/usr$real")
    cands_of[$p]="${c[*]}"
    all+=("${c[@]}")
done
# one dpkg -S for all of them (each call reads the whole database):
# "libc6:amd64: /lib/x86_64-linux-gnu/libc.so.6"; unknown paths only print errors
declare -A pkg_of=()
while IFS= read -r line; do
    case $line in diversion*) continue ;; esac
    pkg=${line%%: /*}
    pkg_of[${line#*: }]=${pkg%%[:,]*}
done < <(readarray -t uniq < <(printf '%s\n' "${all[@]}" | sort -u); dpkg -S "${uniq[@]}" 2>/dev/null || true)

pkgs=()
for p in "${paths[@]}"; do
    found=
    for c in ${cands_of[$p]}; do
        [ -n "${pkg_of[$c]:-}" ] && { found=${pkg_of[$c]}; break; }
    done
    if [ -z "$found" ]; then
        echo "runtime_deps: $p belongs to no Debian package" >&2
        echo "hint: a library installed outside dpkg (a CUDA .run installer, /usr/local) cannot be listed" >&2
        exit 1
    fi
    pkgs+=("$found")
done
printf '%s\n' "${pkgs[@]}" | sort -u
