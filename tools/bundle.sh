#!/usr/bin/env bash
# bundle.sh OUT BINARY|PLUGIN.so...: a relocatable folder for machines that lack the
# build's -dev packages (GPU nodes built for from a login node):
#   OUT/bin/   the binaries, RUNPATH $ORIGIN/../lib (then the build's own paths)
#   OUT/lib/   the plugins they dlopen (libterarec-cuda.so) and every shared library
#              the binaries and plugins load (ldd, transitively) except the C runtime
#              and the GPU driver, each with RUNPATH $ORIGIN
#   OUT/MANIFEST  what was copied from where
# BUNDLE_CUDA=0 leaves the CUDA toolkit's libraries (cudart, cuBLAS, cuBLASLt,
# NCCL) out, for nodes that have the CUDA runtime installed. It does not carry
# Open MPI's programs and plugins (multi-process runs from a bundle come later).
set -euo pipefail
out=${1:?usage: bundle.sh OUT BINARY|PLUGIN.so...}
shift
[ $# -gt 0 ] || { echo "bundle: no binaries given" >&2; exit 2; }
command -v patchelf >/dev/null || {
    echo "bundle: patchelf is not installed" >&2
    echo "hint: apt-get install patchelf (make deps installs it)" >&2
    exit 1
}
# the C runtime and the driver always come from the machine that runs the bundle
system_re='^(linux-vdso|linux-gate|ld-linux[^ ]*|libc|libm|libpthread|libdl|librt|libresolv|libutil|libgcc_s|libstdc\+\+|libcuda|libnvidia-[^ ]*)\.so'
cuda_re='^(libcudart|libcublas|libcublasLt|libnccl|libnvrtc|libnvJitLink)\.so'

tmp="$out.tmp.$$"
rm -rf "$tmp"
mkdir -p "$tmp/bin" "$tmp/lib"
trap 'rm -rf "$tmp"' EXIT
: > "$tmp/MANIFEST"
declare -A seen=()
for b in "$@"; do
    [ -f "$b" ] || { echo "bundle: $b: no such file" >&2; exit 2; }
    # the bundle's lib/ first; the build's own paths after it (the CUDA toolkit's,
    # where BUNDLE_CUDA=0 leaves its libraries to the machine)
    old_rpath=$(patchelf --print-rpath "$b")
    case "$b" in
    *.so) # a plugin the programs dlopen (the CUDA backend): into lib/, beside its libraries
        cp -p "$b" "$tmp/lib/"
        patchelf --set-rpath "\$ORIGIN${old_rpath:+:$old_rpath}" "$tmp/lib/$(basename "$b")"
        echo "lib/$(basename "$b") <- $b" >> "$tmp/MANIFEST"
        seen[$(basename "$b")]=1 ;;
    *)
        [ -x "$b" ] || { echo "bundle: $b: not an executable" >&2; exit 2; }
        cp -p "$b" "$tmp/bin/"
        patchelf --set-rpath "\$ORIGIN/../lib${old_rpath:+:$old_rpath}" "$tmp/bin/$(basename "$b")"
        echo "bin/$(basename "$b") <- $b" >> "$tmp/MANIFEST" ;;
    esac
    # "libfoo.so.1 => /path/libfoo.so.1 (0x...)"; "not found" fails the bundle
    while read -r name arrow path _; do
        [ "$arrow" = "=>" ] || continue
        if [ "$path" = "not" ]; then
            echo "bundle: $b needs $name, which is not found on this machine" >&2
            exit 1
        fi
        [[ $name =~ $system_re ]] && continue
        [ "${BUNDLE_CUDA:-1}" = 0 ] && [[ $name =~ $cuda_re ]] && continue
        [ -n "${seen[$name]:-}" ] && continue
        seen[$name]=1
        cp -L "$path" "$tmp/lib/$name"
        chmod u+w "$tmp/lib/$name"
        patchelf --set-rpath '$ORIGIN' "$tmp/lib/$name"
        echo "lib/$name <- $path" >> "$tmp/MANIFEST"
    done < <(ldd "$b")
done
rm -rf "$out"
mv "$tmp" "$out"
trap - EXIT
echo "bundle: $out: $(ls "$out/bin" | wc -l) binaries, ${#seen[@]} libraries, $(du -sh "$out" | cut -f1)"
