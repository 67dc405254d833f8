#!/usr/bin/env bash
# The shared library's export list is exactly the public API: every function and extern object
# declared in include/sdgp/*.h carries SDGP_API, libsdgp.so exports each of them, and it exports
# nothing else (the library is built with hidden visibility; see include/sdgp/export.h).
# Usage: symbols_test.sh LIBSDGP_SO INCLUDE_DIR
set -u
so=$1
inc=$2
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
fail() { echo "FAIL: $*"; echo "0 passed, 1 failed"; exit 1; }
[ -f "$so" ] || fail "no shared library at $so"
command -v nm >/dev/null || fail "nm not found"

# Declarations at file scope of the public headers, one per line as "API|NOAPI name". Comments,
# preprocessor lines and the C++ guards are removed first; a top-level statement (up to a ';'
# outside braces and parentheses) declares a function when it has a parameter list, an object
# when it starts with "extern"; typedefs and type definitions declare no symbol.
perl -e '
    for my $f (@ARGV) {
        next if $f =~ m{/export\.h$};
        local $/; open(my $h, "<", $f) or die "$f: $!"; my $s = <$h>; close $h;
        $s =~ s{/\*.*?\*/}{ }gs;
        $s =~ s{//[^\n]*}{}g;
        $s =~ s{\\\n}{ }g;
        $s =~ s{^[ \t]*#[ \t]*ifdef[ \t]+__cplusplus\b.*?^[ \t]*#[ \t]*endif[^\n]*}{}gms;
        $s =~ s{^[ \t]*#[^\n]*}{}gm;
        my ($depth, $cur) = (0, "");
        for my $c (split //, $s) {
            $depth++ if $c eq "{" || $c eq "(";
            $depth-- if $c eq "}" || $c eq ")";
            if ($c eq ";" && $depth == 0) {
                (my $st = $cur) =~ s/\s+/ /g; $st =~ s/^ //; $cur = "";
                next if $st =~ /^typedef\b/ || $st eq "";
                my $name;
                if ($st =~ /^([^(]*?)([A-Za-z_]\w*)\s*\(/ && $1 !~ /^(struct|union|enum)\b[^(]*\{/) {
                    $name = $2;
                } elsif ($st =~ /^extern\b/ && $st =~ /([A-Za-z_]\w*)\s*(\[[^\]]*\]\s*)*$/) {
                    $name = $1;
                } else {
                    next;    # a struct/enum definition without typedef
                }
                printf "%s %s %s\n", ($st =~ /\bSDGP_API\b/ ? "API" : "NOAPI"), $name, $f;
            } else {
                $cur .= $c;
            }
        }
    }' "$inc"/sdgp/*.h > "$T/decls" || fail "could not read the headers in $inc/sdgp"

awk '$1 == "API" { print $2 }' "$T/decls" | sort -u > "$T/api"
[ -s "$T/api" ] || fail "no SDGP_API declaration found in $inc/sdgp/*.h (the parser is broken)"
# Symbols defined by libsdgp.so in its dynamic table. Names reserved to the implementation
# (leading "__" or "_" + capital: compiler and sanitizer runtime support) are not the API.
nm -D --defined-only "$so" | awk 'NF >= 3 { print $3 }' | sed 's/@.*//' \
    | grep -v -E '^(__|_[A-Z])' | sort -u > "$T/exported"
[ -s "$T/exported" ] || fail "nm -D found no defined symbols in $so"

bad=0
noapi=$(awk '$1 == "NOAPI" { print $2 " (" $3 ")" }' "$T/decls")
if [ -n "$noapi" ]; then
    echo "declared in a public header without SDGP_API (hidden, so not callable from libsdgp.so):"
    echo "$noapi" | sed 's/^/  /'
    bad=1
fi
extra=$(comm -13 "$T/api" "$T/exported")
if [ -n "$extra" ]; then
    echo "exported by $so but not declared SDGP_API in include/sdgp/*.h:"
    echo "$extra" | sed 's/^/  /'
    bad=1
fi
missing=$(comm -23 "$T/api" "$T/exported")
if [ -n "$missing" ]; then
    echo "declared SDGP_API but not exported by $so:"
    echo "$missing" | sed 's/^/  /'
    bad=1
fi
notprefixed=$(grep -v '^sdgp_' "$T/api")
if [ -n "$notprefixed" ]; then
    echo "public symbols outside the sdgp_ namespace:"
    echo "$notprefixed" | sed 's/^/  /'
    bad=1
fi
[ $bad -eq 0 ] || fail "the export list of $so is not the public API"
echo "$(wc -l < "$T/api") public symbols, all exported, nothing else"
echo "1 passed, 0 failed"
