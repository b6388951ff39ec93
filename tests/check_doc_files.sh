#!/bin/sh
# A document that shows a repository file shows it as it is: after each line
#   <!-- file: PATH -->
# in DOC, the next fenced block (``` ... ```) must equal the file PATH (relative to SOURCE_DIR),
# line for line. Exit 0 when all agree, 1 with a diff for each that does not, or when DOC names
# no file at all (the markers were lost).
#   check_doc_files.sh SOURCE_DIR DOC
set -eu
source=$1 doc=$2
cd "$source"
files=$(sed -n 's/^<!-- file: \(.*\) -->$/\1/p' "$doc")
[ -n "$files" ] || { echo "$doc: no '<!-- file: PATH -->' marker" >&2; exit 1; }
status=0
for file in $files; do
  # The lines between the opening fence after the marker and the closing fence.
  if ! awk -v marker="<!-- file: $file -->" '
      $0 == marker { state = 1; next }
      state == 1 && /^```/ { state = 2; next }
      state == 2 && /^```$/ { exit }
      state == 2 { print }' "$doc" | diff -u "$file" - ; then
    echo "$doc: the block after '<!-- file: $file -->' differs from $file (diff above: - file, + doc)" >&2
    status=1
  fi
done
exit $status
