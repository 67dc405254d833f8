#!/usr/bin/env bash
# `cmake --install` into a temporary prefix, then a program built against the installed headers
# and library through pkg-config must run and prune correctly. Usage: install_test.sh BUILD_DIR
set -u
B=$1
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
fail() { echo "FAIL: $*"; echo "0 passed, 1 failed"; exit 1; }
cmake --install "$B" --prefix "$T/prefix" >/dev/null || fail "cmake --install"
export PKG_CONFIG_PATH=$T/prefix/lib/pkgconfig
flags=$(pkg-config --cflags --libs sdgp) || fail "pkg-config sdgp"
cat > "$T/use.c" <<'C'
#include <sdgp/prune.h>
#include <stdio.h>
int main(void) {
    float x[8] = {1, -4, 2, 3, 0.5f, 9, -1, 2}, y[8];
    sdgp_prune_cfg c = sdgp_prune_cfg_make(SDGP_PRUNE_MAGNITUDE, 2, 4);
    sdgp_error e;
    if (sdgp_prune(&c, x, 1, 2, 4, y, NULL, &e) != SDGP_OK) return 1;
    for (int i = 0; i < 8; i++) printf("%g ", y[i]);
    return 0;
}
C
# shellcheck disable=SC2086
gcc "$T/use.c" $flags -Wl,-rpath,"$T/prefix/lib" -o "$T/use" || fail "compile against the installed library"
out=$("$T/use") || fail "run"
[ "$out" = "0 -4 0 3 0 9 0 2 " ] || fail "magnitude 2:4 through the installed library gave '$out'"
echo "1 passed, 0 failed"
