#!/usr/bin/env bash
# Installs what bench/export_profile_models.py needs from Debian's archive:
# torch, torchvision and torchaudio (bench/export_torchaudio_sweep.py) to build the models, onnx to check them, numpy for the
# seeded inputs. Idempotent: apt-get runs only when a package is missing, so a
# second call costs a dpkg query and nothing else.
#
# The exporter must run with the Debian interpreter (/usr/bin/python3), which is
# the one these packages install into; a pyenv or venv python3 will not see them.
set -euo pipefail

packages=(python3-torch python3-torchvision python3-torchaudio python3-onnx python3-numpy)

bash "$(dirname "${BASH_SOURCE[0]}")/../scripts/apt-install-missing.sh" install-bench-deps "${packages[@]}"

/usr/bin/python3 -c 'import torch, torchvision, torchaudio, onnx, numpy; print("install-bench-deps: torch", torch.__version__, "torchvision", torchvision.__version__, "torchaudio", torchaudio.__version__, "onnx", onnx.__version__)'
