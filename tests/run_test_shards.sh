#!/usr/bin/env bash
# Runs the Catch2 test binary's tests in a few processes ("shards") instead of one process per
# test as CTest does, JOBS at a time; prints one line per shard and, for a shard that failed,
# its whole output; exits 1 when any shard failed.
#
#   tests/run_test_shards.sh TEST_BINARY JOBS [EXCLUDE_REGEX]
#
# Why: under ASan+UBSan each test process costs about 0.25 s to start and to check for leaks at
# exit, mostly page faults of shadow memory, and on a small virtual machine two such processes
# do not overlap: some 170 s of CI's sanitizer stage went to starting ~690 processes
# (docs/hardening.md). The tests named in tests/test_costs.txt, the long ones, each keep a
# process of their own and start first; the rest are dealt round-robin into 2*JOBS shards.
# EXCLUDE_REGEX (grep -E) leaves out the tests whose names match it. Run from the source root
# (the tests read testdata/ relative to it, as CTest's WORKING_DIRECTORY does).
set -uo pipefail

if [ $# -lt 2 ]; then
  echo "usage: $0 TEST_BINARY JOBS [EXCLUDE_REGEX]" >&2
  exit 2
fi
binary=$1
jobs=$2
exclude=${3:-}
here=$(cd "$(dirname "$0")" && pwd)
costs_file="$here/test_costs.txt"
# A shard that runs longer than this has hung: CTest's per-test limit is 600 s, and a shard
# holds several minutes of tests.
shard_timeout=${FUSECTL_SHARD_TIMEOUT:-2400}

[ -x "$binary" ] || { echo "$0: $binary: not an executable test binary" >&2; exit 2; }
work=$(mktemp -d "${TMPDIR:-/tmp}/fusectl-shards.XXXXXX")
trap 'rm -rf "$work"' EXIT

# Catch2 v2 exits with the number of tests it listed: an empty list is the failure.
"$binary" --list-test-names-only > "$work/all"
if ! grep -q . "$work/all"; then
  echo "$0: $binary --list-test-names-only listed no test" >&2
  exit 2
fi
# Catch2 v2 lists one name per line, indented when it wraps a long one: names here are kept
# short enough not to wrap, which this checks.
if grep -q '^ ' "$work/all"; then
  echo "$0: a test name wrapped in $binary's list (shorten it): $(grep -m1 -B1 '^ ' "$work/all" | head -1)" >&2
  exit 2
fi
sed -i '/^$/d' "$work/all"
if [ -n "$exclude" ]; then
  grep -Ev -- "$exclude" "$work/all" > "$work/selected" || true
else
  cp "$work/all" "$work/selected"
fi

# A name as a line of Catch2's -f file: the file's lines are test specs, so the characters the
# spec parser reads specially are escaped with a backslash.
escape() { sed -e 's/[][\\*,~"]/\\&/g'; }

# The long tests: the first substring of test_costs.txt that a name holds gives its cost.
: > "$work/long"
if [ -f "$costs_file" ]; then
  while IFS=$'\t' read -r needle cost; do
    case $needle in ''|'#'*) continue ;; esac
    while IFS= read -r name; do
      grep -qxF -- "$name" "$work/long.names" 2>/dev/null && continue
      printf '%s\t%s\n' "$cost" "$name" >> "$work/long"
      printf '%s\n' "$name" >> "$work/long.names"
    done < <(grep -F -- "$needle" "$work/selected")
  done < "$costs_file"
fi
touch "$work/long.names"
grep -vxF -f "$work/long.names" "$work/selected" > "$work/short" || true

# Jobs, longest first: each long test alone, then the short ones in round-robin shards.
n=0
# Each job's names as listed (NAME.names) and as Catch2's -f file (NAME).
sort -t $'\t' -k1,1nr "$work/long" | while IFS=$'\t' read -r _ name; do
  n=$((n + 1))
  printf '%s\n' "$name" > "$work/job.long$(printf %03d $n).names"
done
shards=$((2 * jobs))
awk -v n="$shards" -v dir="$work" '{ print > sprintf("%s/job.short%03d.names", dir, NR % n) }' \
  "$work/short"
for names in "$work"/job.*.names; do
  [ -e "$names" ] && escape < "$names" > "${names%.names}"
done

run_job() {
  local list=$1 log=$1.log start=$SECONDS rc
  timeout --signal=KILL "$shard_timeout" "$binary" -f "$list" --durations yes > "$log" 2>&1
  rc=$?
  local count
  count=$(wc -l < "$list")
  local label
  label=$(basename "$list")
  if [ "$rc" -eq 0 ]; then
    printf 'shard %s: %d test(s) passed in %d s\n' "$label" "$count" $((SECONDS - start))
  else
    [ "$rc" -eq 137 ] && echo "shard $label: killed after ${shard_timeout} s (FUSECTL_SHARD_TIMEOUT)" >> "$log"
    printf 'shard %s: FAILED (exit %d) in %d s; its tests and output:\n' "$label" "$rc" $((SECONDS - start))
    sed 's/^/  test: /' "$list.names"
    cat "$log"
    # --durations prints each test as it ends. A sanitizer report ends the process at once:
    # the first test without its line is where it happened. A signal Catch2 catches (abort)
    # still gets its line, with "due to a fatal error condition" above it.
    local name last=""
    while IFS= read -r name; do
      if ! grep -qF -- " s: $name" "$log"; then
        printf 'shard %s: the process ended before "%s" finished (last finished: "%s")\n' \
          "$label" "$name" "$last"
        break
      fi
      last=$name
    done < "$list.names"
    touch "$list.failed"
  fi
}
export -f run_job
export binary shard_timeout

total=$(wc -l < "$work/selected")
jobs_list=$(ls "$work"/job.long* "$work"/job.short* 2>/dev/null | grep -Ev '\.(log|names)$')
echo "$total of $(wc -l < "$work/all") tests in $(printf '%s\n' "$jobs_list" | grep -c .) processes, $jobs at a time"
start=$SECONDS
printf '%s\n' "$jobs_list" | xargs -P "$jobs" -I{} bash -c 'run_job "$1"' _ {}
failed=$(ls "$work"/*.failed 2>/dev/null | wc -l)
# Each test's duration, slowest first, for the next update of test_costs.txt.
cat "$work"/job.*.log 2>/dev/null | grep -E '^[0-9]+\.[0-9]+ s: ' | sort -t' ' -k1,1gr | head -15 |
  sed 's/^/slowest: /'
if [ "$failed" -ne 0 ]; then
  echo "$failed of the shards FAILED ($((SECONDS - start)) s)"
  exit 1
fi
echo "all $total tests passed ($((SECONDS - start)) s)"
