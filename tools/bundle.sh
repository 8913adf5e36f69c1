#!/usr/bin/env bash
# bundle.sh OUT BINARY|PLUGIN.so...: a relocatable folder for machines that lack the
# build's -dev packages (GPU nodes built for from a login node):
#   OUT/bin/   the binaries, RUNPATH $ORIGIN/../lib (then the build's own paths)
#   OUT/lib/   the plugins they dlopen (libterarec-cuda.so) and every shared library
#              the binaries, plugins and Open MPI's programs and components load (ldd,
#              transitively) except the C runtime, the GPU driver and the RDMA stack
#              (verbs, libfabric, UCX: they must match the node's drivers and their
#              own plugins), each with RUNPATH $ORIGIN
#   OUT/MANIFEST  what was copied from where
# When the binaries link Open MPI's libmpi (BUNDLE_MPI=0 leaves this out), the folder
# also carries Open MPI and PMIx, relocated into it, so multi-process runs work on a
# node that has neither installed:
#   OUT/bin/mpirun (mpiexec, orterun), orted, ompi_info  scripts that set Open MPI's and
#              PMIx's relocation variables (OPAL_PREFIX=OUT, PMIX_PREFIX=OUT, ...; see
#              OUT/env.sh) to wherever the folder lies now, then run the real program
#   OUT/libexec/openmpi/  the real orterun, orted, ompi_info
#   OUT/lib/openmpi3/, OUT/lib/pmix/    Open MPI's MCA components, PMIx's components
#   OUT/lib/hwloc/     hwloc's PCI and OpenCL plugins (HWLOC_PLUGINS_PATH; not the X11
#              and libxml2 ones: large libraries, and Open MPI needs neither)
#   OUT/share/openmpi/, OUT/share/pmix/ their help texts and data files
#   OUT/etc/openmpi/, OUT/etc/pmix/     their default parameter files
#   OUT/env.sh  source it (bash, zsh) for the same variables and OUT/bin first in PATH
#              (srun --mpi=pmix direct launch, or programs started by hand)
# The folder works from any place, also moved after bundling; mpirun passes the
# variables to its ranks, and on other nodes starts the folder's bin/orted, which
# sets them there (the folder must lie at the same path on every node). OPAL_PREFIX alone also finds the components and
# help texts (Debian's layout is mirrored by one symlink), but not the parameter files
# (Debian's sysconfdir /etc/openmpi is absolute) nor PMIx's (all its paths are).
# BUNDLE_CUDA=0 leaves the CUDA toolkit's libraries (cudart, cuBLAS, cuBLASLt,
# NCCL) out, for nodes that have the CUDA runtime installed. BUNDLE_DEPS_OF="PROGRAM
# ..." carries the libraries of more programs (test programs, say) without them.
set -euo pipefail
out=${1:?usage: bundle.sh OUT BINARY|PLUGIN.so...}
shift
[ $# -gt 0 ] || { echo "bundle: no binaries given" >&2; exit 2; }
for b in "$@"; do
    [ -f "$b" ] || { echo "bundle: $b: no such file" >&2; exit 2; }
    case "$b" in
    *.so) ;;
    *) [ -x "$b" ] || { echo "bundle: $b: not an executable" >&2; exit 2; } ;;
    esac
done
command -v patchelf >/dev/null || {
    echo "bundle: patchelf is not installed" >&2
    echo "hint: apt-get install patchelf (make deps installs it)" >&2
    exit 1
}
# the C runtime and the driver always come from the machine that runs the bundle
system_re='^(linux-vdso|linux-gate|ld-linux[^ ]*|libc|libm|libpthread|libdl|librt|libresolv|libutil|libgcc_s|libstdc\+\+|libcuda|libnvidia-[^ ]*)\.so'
cuda_re='^(libcudart|libcublas|libcublasLt|libnccl|libnvrtc|libnvJitLink)\.so'
# and so do the RDMA stack's libraries: a copy would not match the node's verbs
# providers or UCX/libfabric modules (which they dlopen from their own install
# paths), and NCCL, whose RUNPATH is the bundle's lib/, would pick a copy of
# libibverbs up for InfiniBand. The Open MPI components that link them (openib, ofi,
# ucx; Debian's openmpi-mca-params.conf turns them off) load where the node has them.
node_re='^(libibverbs|librdmacm|libefa|libmlx[45]|libfabric|libucp|libuct|libucs|libucm)\.so'

tmp="$out.tmp.$$"
rm -rf "$tmp"
mkdir -p "$tmp/bin" "$tmp/lib"
trap 'rm -rf "$tmp"' EXIT
: > "$tmp/MANIFEST"
declare -A seen=() node=()
note() { echo "$*" >> "$tmp/MANIFEST"; }

# list FILE: the libraries FILE loads, as ldd lists them. The dynamic loader itself
# when the binaries name it (ldd runs it twice, through a shell: a third of the time
# for Open MPI's hundred components)
rtld=""
for b in "$@" /bin/sh; do
    rtld=$(patchelf --print-interpreter "$(readlink -f "$b")" 2>/dev/null) && [ -x "$rtld" ] && break
    rtld=""
done
list() {
    local o
    if [ -n "$rtld" ]; then
        o=$(LD_TRACE_LOADED_OBJECTS=1 "$rtld" "$1" 2>&1) || { echo "bundle: cannot list the libraries of $1: ${o##*$'\n'}" >&2; exit 1; }
    else
        o=$(ldd "$1" 2>&1) || { echo "bundle: ldd $1 failed: ${o##*$'\n'}" >&2; exit 1; }
    fi
    echo "$o"
}
# deps FILE [LDD]: copies into lib/ every library FILE loads (LDD: ldd's output for
# it, when the caller ran it already) that the bundle carries; one that is not found
# fails the bundle. Their RUNPATH ($ORIGIN) is set at the end, all in one patchelf.
declare -A resolved=()
newlibs=()
deps() {
    local file=$1 lddout=${2:-} name arrow path _
    [ -n "$lddout" ] || lddout=$(list "$file")
    # "libfoo.so.1 => /path/libfoo.so.1 (0x...)"; "libfoo.so.1 => not found"
    if [[ $lddout =~ ([^[:space:]]+)\ =\>\ not\ found ]]; then
        echo "bundle: $file needs ${BASH_REMATCH[1]}, which is not found on this machine" >&2
        exit 1
    fi
    while read -r name arrow path _; do
        [ "$arrow" = "=>" ] || continue
        [[ $name =~ $system_re ]] && continue
        [ "${BUNDLE_CUDA:-1}" = 0 ] && [[ $name =~ $cuda_re ]] && continue
        if [[ $name =~ $node_re ]]; then
            [ -n "${node[$name]:-}" ] || { node[$name]=1; note "node: $name (needed by ${file##*/}; the node's own)"; }
            continue
        fi
        [ -n "${resolved[$path]:-}" ] || resolved[$path]=$(readlink -f "$path")
        path=${resolved[$path]}
        if [ -n "${seen[$name]:-}" ]; then
            [ "${seen[$name]}" = "$path" ] && continue
            echo "bundle: $name resolves to both ${seen[$name]} and $path" >&2
            echo "hint: one of the programs or plugins was built against another installation; rebuild or leave it out" >&2
            exit 1
        fi
        seen[$name]=$path
        cp -L "$path" "$tmp/lib/$name"
        newlibs+=("$tmp/lib/$name")
        note "lib/$name <- $path"
    done <<<"$lddout"
}
# elf DIR RUNPATH SRC...: each SRC into DIR/ (relative to the bundle) with RUNPATH,
# and its libraries into lib/
elf() {
    local dir=$1 rpath=$2 src
    shift 2
    for src in "$@"; do deps "$src"; done
    copy "$dir" "$rpath" "$@"
}
# copy DIR RUNPATH SRC...: SRC into DIR/ with RUNPATH (one cp, one patchelf)
copy() {
    local dir=$1 rpath=$2 src dst=()
    shift 2
    [ -d "$tmp/$dir" ] || mkdir -p "$tmp/$dir"
    cp -p "$@" "$tmp/$dir/"
    for src in "$@"; do dst+=("$tmp/$dir/${src##*/}"); done
    chmod u+w "${dst[@]}"
    patchelf --set-rpath "$rpath" "${dst[@]}"
}
# components DIR SRC...: Open MPI's, PMIx's or hwloc's plugins into DIR/ (RUNPATH the
# bundle's lib/); one that cannot load here either (a library it needs is not
# installed) is left out. Sets ncomp to the number carried.
components() {
    local dir=$1 lddout c ok=()
    shift
    for c in "$@"; do
        [ -f "$c" ] || continue
        lddout=$(list "$c")
        if [[ $lddout =~ ([^[:space:]]+)\ =\>\ not\ found ]]; then
            note "left out: $c (needs ${BASH_REMATCH[1]}, which is not found here)"
            continue
        fi
        deps "$c" "$lddout"
        ok+=("$c")
        note "$dir/${c##*/} <- $c"
    done
    ncomp=${#ok[@]}
    [ "$ncomp" -eq 0 ] || copy "$dir" '$ORIGIN/..' "${ok[@]}"
}

for b in "$@"; do
    # the bundle's lib/ first; the build's own paths after it (the CUDA toolkit's,
    # where BUNDLE_CUDA=0 leaves its libraries to the machine)
    old_rpath=$(patchelf --print-rpath "$b")
    case "$b" in
    *.so) # a plugin the programs dlopen (the CUDA backend): into lib/, beside its libraries
        elf lib "\$ORIGIN${old_rpath:+:$old_rpath}" "$b"
        seen[${b##*/}]=$(readlink -f "$b")
        note "lib/${b##*/} <- $b" ;;
    *)
        elf bin "\$ORIGIN/../lib${old_rpath:+:$old_rpath}" "$b"
        note "bin/${b##*/} <- $b" ;;
    esac
done
for b in ${BUNDLE_DEPS_OF:-}; do
    [ -f "$b" ] || { echo "bundle: $b (BUNDLE_DEPS_OF): no such file" >&2; exit 2; }
    deps "$b"
    note "the libraries of $b"
done
nbin=0
for b in "$@"; do case "$b" in *.so) ;; *) nbin=$((nbin + 1)) ;; esac; done

# ---- Open MPI and PMIx, relocated ---------------------------------------------------
libmpi=$(printf '%s\n' "${!seen[@]}" | grep -m1 '^libmpi\.so' || true)
ompi_summary=""
if [ -n "$libmpi" ] && [ "${BUNDLE_MPI:-1}" != 0 ]; then
    command -v ompi_info >/dev/null || {
        echo "bundle: the binaries link $libmpi but Open MPI's programs (ompi_info, mpirun) are not installed" >&2
        echo "hint: apt-get install openmpi-bin (make deps installs it), or BUNDLE_MPI=0 to bundle without mpirun" >&2
        exit 1
    }
    declare -A od=()
    while IFS=: read -r _ key val; do od[$key]=$val; done < <(ompi_info --path all --parsable | grep '^path:')
    for key in prefix bindir libdir pkglibdir pkgdatadir sysconfdir; do
        [ -n "${od[$key]:-}" ] || { echo "bundle: 'ompi_info --path all' does not name Open MPI's $key" >&2; exit 1; }
    done
    # Open MPI's programs: the real ones in libexec/openmpi/, scripts in bin/ (below)
    progs=()
    for p in orterun orted ompi_info; do
        # Open MPI from a bundle (this script's bin/ wrappers): its real programs
        grep -qs '(written by tools/bundle.sh)' "${od[bindir]}/$p" && [ -x "${od[prefix]}/libexec/openmpi/$p" ] &&
            od[bindir]=${od[prefix]}/libexec/openmpi
        [ -x "${od[bindir]}/$p" ] || {
            echo "bundle: ${od[bindir]}/$p: no such program (Open MPI's bindir, from ompi_info)" >&2
            echo "hint: apt-get install openmpi-bin, or BUNDLE_MPI=0 to bundle without mpirun" >&2
            exit 1
        }
        progs+=("${od[bindir]}/$p")
        note "libexec/openmpi/$p <- ${od[bindir]}/$p"
    done
    elf libexec/openmpi '$ORIGIN/../../lib' "${progs[@]}"
    # its MCA components, which the programs and libmpi dlopen from pkglibdir
    comp=lib/${od[pkglibdir]##*/}
    components "$comp" "${od[pkglibdir]}"/*.so
    [ "$ncomp" -gt 0 ] || { echo "bundle: no Open MPI components in ${od[pkglibdir]}" >&2; exit 1; }
    # OPAL_PREFIX alone derives pkglibdir from the configured libdir: where that is not
    # OUT/lib (Debian: \${prefix}/lib/x86_64-linux-gnu/openmpi/lib), a symlink there
    if [ "${od[libdir]#"${od[prefix]}"/}" != "${od[libdir]}" ] && [ "${od[libdir]#"${od[prefix]}"/}" != lib ] &&
        [ "${od[pkglibdir]%/*}" = "${od[libdir]}" ]; then
        link=${od[pkglibdir]#"${od[prefix]}"/}
        mkdir -p "$tmp/${link%/*}"
        ln -s "$(realpath -m --relative-to="$tmp/${link%/*}" "$tmp/$comp")" "$tmp/$link"
        note "$link -> $comp (where OPAL_PREFIX alone looks for the components)"
    fi
    # help texts and data (pkgdatadir), default parameters and hostfile (sysconfdir)
    data=share/${od[pkgdatadir]##*/}
    mkdir -p "$tmp/$data" "$tmp/etc/openmpi"
    cp -pR "${od[pkgdatadir]}/." "$tmp/$data/"
    note "$data/ <- ${od[pkgdatadir]}/ ($(find "$tmp/$data" -type f | wc -l) files)"
    for f in "${od[sysconfdir]}"/*; do
        [ -f "$f" ] || continue
        cp -p "$f" "$tmp/etc/openmpi/"
        note "etc/openmpi/${f##*/} <- $f"
    done
    ompi_summary=", Open MPI $(ompi_info --version | sed -n '1s/^Open MPI v//p') ($ncomp components)"

    # PMIx, when Open MPI uses an external one (libpmix): its components sit in
    # \$libdir/pmix, its help texts in \$prefix/share/pmix
    libpmix=$(printf '%s\n' "${!seen[@]}" | grep -m1 '^libpmix\.so' || true)
    pmix_env=""
    if [ -n "$libpmix" ]; then
        pl=${seen[$libpmix]%/*}
        pp=${pl%/*}
        components lib/pmix "$pl"/pmix/*.so
        npc=$ncomp
        for d in "$pp/share/pmix" /usr/share/pmix; do
            [ -d "$d" ] || continue
            mkdir -p "$tmp/share/pmix"
            cp -pR "$d/." "$tmp/share/pmix/"
            note "share/pmix/ <- $d/ ($(find "$tmp/share/pmix" -type f | wc -l) files)"
            break
        done
        mkdir -p "$tmp/etc/pmix"
        for f in "$pp/share/pmix-mca-params.conf" "$pp/etc/pmix-mca-params.conf" /etc/pmix-mca-params.conf; do
            [ -f "$f" ] || continue
            # its component path names the build machine's; env.sh sets the bundle's
            sed 's|^\([[:space:]]*mca_base_component_path[[:space:]]*=.*\)|# bundle.sh: env.sh sets this (PMIX_MCA_mca_base_component_path): \1|' \
                "$f" > "$tmp/etc/pmix/pmix-mca-params.conf"
            note "etc/pmix/pmix-mca-params.conf <- $f (component path left to env.sh)"
            break
        done
        ompi_summary+=", PMIx ($npc components)"
        pmix_env='
# PMIx (its configured paths are absolute, so each is set; PMIX_INSTALL_PREFIX is
# the prefix variable of PMIx 3)
export PMIX_PREFIX="$TERAREC_BUNDLE" PMIX_INSTALL_PREFIX="$TERAREC_BUNDLE" PMIX_EXEC_PREFIX="$TERAREC_BUNDLE"
export PMIX_LIBDIR="$TERAREC_BUNDLE/lib" PMIX_PKGLIBDIR="$TERAREC_BUNDLE/lib/pmix"
export PMIX_DATAROOTDIR="$TERAREC_BUNDLE/share" PMIX_DATADIR="$TERAREC_BUNDLE/share"
export PMIX_PKGDATADIR="$TERAREC_BUNDLE/share/pmix" PMIX_SYSCONFDIR="$TERAREC_BUNDLE/etc/pmix"
export PMIX_MCA_mca_base_component_path="$TERAREC_BUNDLE/lib/pmix"'
    fi

    # hwloc's plugins (PCI devices for locality), from the directory it was built to
    # look in; HWLOC_PLUGINS_PATH points the bundle's libhwloc at its own
    libhwloc=$(printf '%s\n' "${!seen[@]}" | grep -m1 '^libhwloc\.so' || true)
    hwloc_env=""
    if [ -n "$libhwloc" ] && [ -d "${seen[$libhwloc]%/*}/hwloc" ]; then
        components lib/hwloc "${seen[$libhwloc]%/*}"/hwloc/hwloc_{pci,opencl}.so
        hwloc_env='
export HWLOC_PLUGINS_PATH="$TERAREC_BUNDLE/lib/hwloc"'
    fi

    cat > "$tmp/env.sh" <<EOF
# env.sh (written by tools/bundle.sh): source it from bash or zsh to run from this
# bundle wherever it lies: Open MPI and PMIx relocated into it, its bin/ first in
# PATH. bin/mpirun and bin/orted source it themselves.
if [ -n "\${BASH_VERSION:-}" ]; then
    TERAREC_BUNDLE=\${BASH_SOURCE[0]}
elif [ -n "\${ZSH_VERSION:-}" ]; then
    eval 'TERAREC_BUNDLE=\${(%):-%x}'
else
    echo "env.sh: cannot tell where this bundle lies from this shell" >&2
    echo "hint: source it from bash or zsh (bash -c '. BUNDLE/env.sh && ...')" >&2
    return 1 2>/dev/null || exit 1
fi
TERAREC_BUNDLE=\$(cd "\$(dirname "\$TERAREC_BUNDLE")" && pwd -P)
export TERAREC_BUNDLE
# Open MPI (OPAL_PREFIX; sysconfdir is absolute in Debian's build, the others are set
# so that another layout of the build machine's Open MPI relocates too)
export OPAL_PREFIX="\$TERAREC_BUNDLE" OPAL_EXEC_PREFIX="\$TERAREC_BUNDLE"
export OPAL_BINDIR="\$TERAREC_BUNDLE/bin" OPAL_LIBDIR="\$TERAREC_BUNDLE/lib"
export OPAL_DATAROOTDIR="\$TERAREC_BUNDLE/share" OPAL_DATADIR="\$TERAREC_BUNDLE/share"
export OPAL_PKGLIBDIR="\$TERAREC_BUNDLE/$comp" OPAL_PKGDATADIR="\$TERAREC_BUNDLE/$data"
export OPAL_SYSCONFDIR="\$TERAREC_BUNDLE/etc/openmpi"$pmix_env$hwloc_env
case ":\$PATH:" in
*":\$TERAREC_BUNDLE/bin:"*) ;;
*) export PATH="\$TERAREC_BUNDLE/bin:\$PATH" ;;
esac
EOF
    note "env.sh: OPAL_PREFIX, PMIX_PREFIX and the rest, computed from where it lies"
    # bin/NAME runs libexec/openmpi/REAL with argv[0] NAME in bin/: orterun then takes
    # the bundle as its --prefix, so orted on other nodes is this bin/orted too
    for w in mpirun:orterun mpiexec:orterun orterun:orterun orted:orted ompi_info:ompi_info; do
        name=${w%%:*} prog=${w#*:}
        cat > "$tmp/bin/$name" <<EOF
#!/usr/bin/env bash
# $name from this bundle (written by tools/bundle.sh): Open MPI and PMIx relocated
# here by env.sh, wherever the bundle lies and from any working directory
set -euo pipefail
here=\$(dirname "\$(readlink -f "\${BASH_SOURCE[0]}")")
. "\$here/../env.sh"
exec -a "\$TERAREC_BUNDLE/bin/$name" "\$TERAREC_BUNDLE/libexec/openmpi/$prog" "\$@"
EOF
        chmod 755 "$tmp/bin/$name"
        note "bin/$name: script, runs libexec/openmpi/$prog with env.sh's variables"
    done
elif [ -n "$libmpi" ]; then
    note "BUNDLE_MPI=0: no mpirun, Open MPI components or PMIx components"
fi

# the libraries find each other beside themselves
if [ ${#newlibs[@]} -gt 0 ]; then
    chmod u+w "${newlibs[@]}"
    patchelf --set-rpath '$ORIGIN' "${newlibs[@]}"
fi
rm -rf "$out"
mv "$tmp" "$out"
trap - EXIT
echo "bundle: $out: $nbin binaries, $(find "$out/lib" -maxdepth 1 -name '*.so*' -type f | wc -l) libraries$ompi_summary, $(du -sh "$out" | cut -f1)"
