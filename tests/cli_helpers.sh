# Sourced by the shell tests of the qforge command: a temporary folder removed
# on exit ($tmp), pass/fail counting ($fails), and expect, which checks a
# command's exit status and its one-line error.
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fails=0
pass() { echo "ok   $1"; }
fail() { echo "FAIL $1"; fails=$((fails + 1)); }

# expect STATUS PATTERN DESCRIPTION -- CMD...: exit status and a stderr line matching PATTERN
expect() {
  want=$1 pat=$2 what=$3
  shift 4
  "$@" > "$tmp/out" 2> "$tmp/err"
  got=$?
  lines=$(wc -l < "$tmp/err")
  if [ "$got" = "$want" ] && grep -q -- "$pat" "$tmp/err" && [ "$lines" -le 2 ]; then pass "$what"
  else fail "$what (exit $got, want $want; stderr: $(head -c 300 "$tmp/err"))"; fi
}
