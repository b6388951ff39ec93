#!/bin/sh
# The arrows between the libraries that must never exist (docs/architecture.md), checked on the
# sources by what they include and call (CTest `architecture_arrows`):
#  - the IR knows no kernel and no pass: libgraph includes nothing of libkernels or libpasses;
#  - kernels never rewrite graphs: libkernels includes nothing of libpasses and calls none of
#    Graph's mutators;
#  - passes use kernels only to fold constants: in libpasses only the constant-folding files
#    (named *constant*) include libkernels' headers;
#  - the libraries know no CLI: none includes CLI11 or an apps/ header, or exits the process.
# Exit 0 when every rule holds, 1 naming each line that breaks one.
#   check_architecture.sh SOURCE_DIR
set -u
cd "$1"
status=0

# forbid DESCRIPTION REGEX PATH... : every line of PATH matching REGEX breaks the rule.
forbid() {
  rule=$1 regex=$2
  shift 2
  found=$(grep -rnE "$regex" "$@" --include='*.h' --include='*.cpp' --include='*.cu' \
          --include='*.def' 2>/dev/null)
  if [ -n "$found" ]; then
    printf '%s\n%s\n\n' "architecture: $rule:" "$found" >&2
    status=1
  fi
}

forbid "the IR (libgraph) includes a kernel or pass header" \
  '#include "fusectl/(kernels|passes)/' libgraph
forbid "libkernels includes a pass header" '#include "fusectl/passes/' libkernels
forbid "libkernels edits a graph (kernels never rewrite graphs)" \
  '\b(createNode|createNodeAfter|eraseNode|eraseNodeAndDeadProducers|eraseDeadNodes|setNodeInput|setOpType|replaceAllUsesWith|renameValue|renameNode|moveBefore|moveAfter|addInitializer|removeInitializer)\(' \
  libkernels
kernel_users=$(grep -rlE '#include "fusectl/kernels/' libpasses | grep -vE '/[^/]*constant[^/]*$')
if [ -n "$kernel_users" ]; then
  printf '%s\n%s\n\n' "architecture: libpasses uses libkernels outside constant folding (*constant*):" \
    "$kernel_users" >&2
  status=1
fi
forbid "a library uses the CLI (CLI11, apps/ headers, process exit)" \
  '#include [<"](CLI/|commands\.h)|\bCLI::|\b(std::)?(exit|_Exit|quick_exit)\(' \
  libgraph libkernels libpasses

[ $status -eq 0 ] && echo "architecture: every forbidden arrow is absent"
exit $status
