#!/bin/sh
# The installed library as an outside project sees it (CTest `install_example`, docs/library.md):
#  1. `cmake --install` this build tree (already built: nothing is compiled again) into a fresh
#     prefix;
#  2. configure and build examples/optimize_with_library against that prefix: find_package(fusectl)
#     must find it there, and fusectl::passes must bring everything the program needs;
#  3. run it on testdata/models/resnet_mini.onnx: exit 0 and an output file;
#  4. the installed `fusectl dump` loads the output, and -O3 fused Convs in it;
#  5. onnx's full checker accepts the output, and ONNX Runtime runs it and gives the original's
#     outputs (tests/test_install_example.cpp, through fusectl_tests).
# Without node or onnxruntime-node (FUSECTL_NODE, FUSECTL_ORT_DIR) everything but the ONNX Runtime
# run is checked, and then the test reports itself skipped (exit 77) saying what was left out.
#
#   install_example.sh CMAKE BUILD_DIR SOURCE_DIR FUSECTL_TESTS [-DVAR=VALUE for the example]...
set -eu
cmake=$1 build=$2 source=$3 tests=$4
shift 4
work=$(mktemp -d "${TMPDIR:-/tmp}/fusectl-install-example-XXXXXX")
trap 'rm -rf "$work"' EXIT

# Runs a step with its output in a log that is printed only when the step fails.
step() {
  what=$1
  shift
  echo "-- $what"
  if ! "$@" >"$work/step.log" 2>&1; then
    cat "$work/step.log"
    echo "install_example: failed: $what" >&2
    exit 1
  fi
}

prefix=$work/prefix
step "cmake --install into $prefix" "$cmake" --install "$build" --prefix "$prefix"

step "configure the example against the prefix" \
  "$cmake" -S "$source/examples/optimize_with_library" -B "$work/example" \
  -DCMAKE_PREFIX_PATH="$prefix" "$@"
# The package found must be the installed one, not a build tree or a system copy.
found=$(sed -n 's/^fusectl_DIR:PATH=//p' "$work/example/CMakeCache.txt")
case $found in
  "$prefix"/*) ;;
  *) echo "install_example: the example found fusectl in '$found', not under $prefix" >&2; exit 1 ;;
esac
step "build the example" "$cmake" --build "$work/example" -j 2

original=$source/testdata/models/resnet_mini.onnx
output=$work/resnet_mini.opt.onnx
step "optimize_with_library resnet_mini.onnx" "$work/example/optimize_with_library" "$original" "$output"
cat "$work/step.log"
[ -s "$output" ] || { echo "install_example: no output file $output" >&2; exit 1; }

step "installed fusectl dump loads the output" "$prefix/bin/fusectl" dump "$output" --summary
grep -q FusedConv "$work/step.log" || {
  cat "$work/step.log"
  echo "install_example: no FusedConv in the output: -O3 did not run" >&2
  exit 1
}

export FUSECTL_EXAMPLE_ORIGINAL="$original" FUSECTL_EXAMPLE_OUTPUT="$output"
step "onnx full checker" "$tests" --warn NoTests "[install_example_checker]"

node=${FUSECTL_NODE:-node}
if ! command -v "$node" >/dev/null 2>&1 || \
   [ ! -d "${FUSECTL_ORT_DIR:-}/node_modules/onnxruntime-node" ]; then
  echo "skipped: the ONNX Runtime check (node '$node', onnxruntime-node not in" \
       "FUSECTL_ORT_DIR='${FUSECTL_ORT_DIR:-}'; scripts/install-ort.sh); the rest passed"
  exit 77
fi
export FUSECTL_NODE="$node"
step "ONNX Runtime: the output gives the original's outputs" \
  "$tests" --warn NoTests "[install_example_ort]"
cat "$work/step.log"
