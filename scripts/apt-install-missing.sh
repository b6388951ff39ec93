#!/usr/bin/env bash
# apt-install-missing.sh TAG PACKAGE...: installs those of Debian's PACKAGEs that are not
# installed yet (apt-get update first), and does nothing, needing no network, when all are.
# TAG starts each line it prints. Shared by scripts/install-deps.sh and bench/install-bench-deps.sh.
set -euo pipefail
tag=$1
shift
packages=("$@")

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "$tag: all ${#packages[@]} packages present"
  exit 0
fi

SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
echo "$tag: installing ${missing[*]}"
$SUDO apt-get update
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y --no-install-recommends "${missing[@]}"
