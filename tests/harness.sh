# The checks of the shell tests (cli, crash, sweep, report): source it after `set -u`. It gives a
# temporary directory $T (removed on exit), the counts, and
#   ok / bad WHY                    count a check (bad prints WHY)
#   expect CODE PATTERN -- CMD...   exit code CODE and PATTERN (grep -E) in stdout+stderr
#   is_png FILE                     FILE starts with the PNG signature
#   finish                          prints the counts; its status is non-zero when a check failed
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
pass=0 fail=0
ok() { pass=$((pass + 1)); }
bad() { fail=$((fail + 1)); echo "FAIL: $*"; }
expect() {
  local code=$1 pattern=$2; shift 3
  local out rc
  out=$("$@" 2>&1); rc=$?
  if [ "$rc" -eq "$code" ] && grep -qE -- "$pattern" <<<"$out"; then ok; else
    bad "$* -> exit $rc (want $code), output must match '$pattern':"
    echo "$out" | tail -5 | sed 's/^/    /'
  fi
}
is_png() { [ "$(head -c 8 "$1" 2>/dev/null | od -An -tx1 | tr -d ' \n')" = "89504e470d0a1a0a" ]; }
finish() { echo "$pass passed, $fail failed"; [ "$fail" -eq 0 ]; }
