#!/usr/bin/env bash
# Builds the libFuzzer targets into fuzz/build/ (or $1): each target is compiled together with
# the library sources it exercises (not the CMake library), with ASan + UBSan.
# Needs clang with libFuzzer and OpenMP (Debian: clang, libomp-dev) and zlib.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
out=${1:-$here/build}
mkdir -p "$out"
cc=${CC_FUZZ:-clang}
flags=(-g -O1 -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined -std=gnu11
       -Wall -Wextra -I"$root/include" -I"$root/src")
data=("$root"/src/data/idx.c "$root"/src/data/file.c "$root"/src/data/cifar.c "$root"/src/data/dataset.c
      "$root"/src/data/augment.c "$root"/src/core/status.c)
io=("$root"/src/io/safetensors_read.c "$root"/src/io/safetensors_write.c "$root"/src/core/status.c)

"$cc" "${flags[@]}" -fopenmp "$here/fuzz_idx.c" "${data[@]}" -lz -o "$out/fuzz_idx"
"$cc" "${flags[@]}" -fopenmp "$here/fuzz_cifar.c" "${data[@]}" -lz -o "$out/fuzz_cifar"
"$cc" "${flags[@]}" "$here/fuzz_safetensors.c" "${io[@]}" -lz -o "$out/fuzz_safetensors"
# fuzz_config needs the whole library (the config table names pruning functions, ISAs, models):
# every library source compiled with clang and the sanitizers, ISA files with their flags.
mkdir -p "$out/lib"
objs=()
for src in $(find "$root/src" -name '*.c' -not -path '*/cli/*' | sort); do
    isa=()
    case "$src" in
        *_avx512.c) isa=(-mavx512f -mavx512bw -mavx512vl -mavx512dq -mavx2 -mfma -mbmi2) ;;
        *_avx2.c) isa=(-mavx2 -mfma -mbmi2) ;;
    esac
    obj="$out/lib/$(echo "${src#$root/src/}" | tr '/' '_').o"
    if [ ! -f "$obj" ] || [ "$src" -nt "$obj" ]; then
        # -Wno-pass-failed: at -O1 clang does not vectorize, so every `omp simd` loop would warn.
        "$cc" -g -O1 -Wno-pass-failed -fsanitize=fuzzer-no-link,address,undefined -std=gnu11 -fopenmp "${isa[@]}" \
            -I"$root/include" -I"$root/src" -DSDGP_VERSION_STRING='"fuzz"' -c "$src" -o "$obj"
    fi
    objs+=("$obj")
done
"$cc" "${flags[@]}" -fopenmp "$here/fuzz_config.c" "${objs[@]}" -ldnnl -lz -lm -o "$out/fuzz_config"
echo "built fuzz_idx fuzz_cifar fuzz_safetensors fuzz_config in $out"
