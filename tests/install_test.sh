#!/usr/bin/env bash
# `cmake --install` into a temporary prefix: every public header is installed and compiles on its
# own, and a program built against the installed headers and library through pkg-config must run,
# prune correctly and get the sparse kernel's (sdgp/sparse.h) product equal to the naive loop's
# (sdgp/conv.h). Usage: install_test.sh BUILD_DIR
set -u
B=$1
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
fail() { echo "FAIL: $*"; echo "0 passed, 1 failed"; exit 1; }
cmake --install "$B" --prefix "$T/prefix" >/dev/null || fail "cmake --install"
export PKG_CONFIG_PATH=$T/prefix/lib/pkgconfig
flags=$(pkg-config --cflags --libs sdgp) || fail "pkg-config sdgp"
# The installed headers are the source tree's, and each one is self-contained (includes what it uses).
src_inc=$(cd "$(dirname "$0")/../include/sdgp" && ls ./*.h | sort)
inst_inc=$(cd "$T/prefix/include/sdgp" && ls ./*.h | sort) || fail "no headers installed"
[ "$src_inc" = "$inst_inc" ] || fail "installed headers differ from include/sdgp: $(echo $inst_inc) vs $(echo $src_inc)"
for h in $inst_inc; do
    h=${h#./}
    printf '#include <sdgp/%s>\n' "$h" > "$T/one.c"
    # shellcheck disable=SC2086
    gcc -std=c11 -Wall -Wextra -Werror -fsyntax-only $(pkg-config --cflags sdgp) "$T/one.c" \
        || fail "installed sdgp/$h does not compile on its own"
done
cat > "$T/use.c" <<'C'
#include <math.h>
#include <sdgp/conv.h>
#include <sdgp/prune.h>
#include <sdgp/sparse.h>
#include <stdio.h>
int main(void) {
    float x[8] = {1, -4, 2, 3, 0.5f, 9, -1, 2}, y[8];
    sdgp_prune_cfg c = sdgp_prune_cfg_make(SDGP_PRUNE_MAGNITUDE, 2, 4);
    sdgp_error e;
    if (sdgp_prune(&c, x, 1, 2, 4, y, NULL, &e) != SDGP_OK) return 1;
    for (int i = 0; i < 8; i++) printf("%g ", y[i]);
    /* 2:4 sparse backward-data of a 3x3 pad-1 conv (1 x 5 x 5 x 4 -> 8 channels) against the
     * naive loop on the same pruned gradient. */
    enum { H = 5, W = 5, CI = 4, CO = 8 };
    static float w[CO * CI * 9], dO[H * W * CO], dOp[H * W * CO], dD[H * W * CI], ref[H * W * CI];
    for (int i = 0; i < CO * CI * 9; i++) w[i] = (float)((i * 37) % 17) / 17.0f - 0.5f;
    for (int i = 0; i < H * W * CO; i++) dO[i] = (float)((i * 53) % 23) / 23.0f - 0.5f;
    sdgp_conv_geom g;
    sdgp_nm_tensor nm = {0};
    sdgp_sparse_bwd *p = NULL;
    if (sdgp_conv_geom_init(&g, 1, H, W, CI, CO, 3, 3, 1, 1, &e) != SDGP_OK ||
        sdgp_nm_alloc(&nm, SDGP_AXIS_CHANNEL, 2, 4, H * W, CO, &e) != SDGP_OK ||
        sdgp_prune(&c, dO, 1, H * W, CO, dOp, &nm, &e) != SDGP_OK ||
        sdgp_sparse_bwd_create(&p, &g, 2, 4, SDGP_ISA_AUTO, 1, &e) != SDGP_OK ||
        sdgp_sparse_bwd_pack(p, w, &e) != SDGP_OK || sdgp_sparse_bwd_data(p, dD, &nm, &e) != SDGP_OK) {
        printf("error: %s\n", e.msg);
        return 1;
    }
    sdgp_conv_backward_data_naive(ref, dOp, w, &g);
    double worst = 0;
    for (int i = 0; i < H * W * CI; i++) worst = fmax(worst, fabs((double)dD[i] - ref[i]));
    printf("%s", worst < 1e-5 ? "sparse=naive" : "sparse!=naive");
    sdgp_sparse_bwd_destroy(p);
    sdgp_nm_free(&nm);
    return 0;
}
C
# shellcheck disable=SC2086
gcc -std=c11 -Wall -Wextra -Werror "$T/use.c" $flags -lm -Wl,-rpath,"$T/prefix/lib" -o "$T/use" \
    || fail "compile against the installed library"
out=$("$T/use") || fail "run: $out"
[ "$out" = "0 -4 0 3 0 9 0 2 sparse=naive" ] || fail "through the installed library: '$out'"
echo "1 passed, 0 failed"
