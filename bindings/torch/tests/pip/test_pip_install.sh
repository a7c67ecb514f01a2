#!/usr/bin/env bash
# pip install --no-build-isolation ./bindings/torch into a fresh virtual environment that sees the
# torch of TORCH_PYTHON (a scripts/torch.sh environment: nothing is downloaded), then a 2-process
# job that calls init_process_group("distcomm") without importing distcomm_torch: torch loads it
# through the package's entry points (torch.distributed.backends from torch 2.14, torch.backends
# before). Fails if the install fails, if the job fails, or if "distcomm" was not what ran.
#
# usage: test_pip_install.sh TORCH_PYTHON SOURCE_DIR WORK_DIR
set -euo pipefail
[[ $# == 3 ]] || { echo "usage: $0 TORCH_PYTHON SOURCE_DIR WORK_DIR" >&2; exit 2; }
torch_python="$1" source_dir="$2" work="$3"
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"

base="$("$torch_python" -c 'import sys; print(sys.base_prefix)')/bin/python3"
site="$("$torch_python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
rm -rf "$work/venv"
mkdir -p "$work"
"$base" -m venv "$work/venv"
venv_site="$("$work/venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
# torch and scikit-build-core from the torch environment, seen from the fresh one.
echo "$site" >"$venv_site/torch-environment.pth"

# The build: what the binding links, with the transports its job uses (shm on one host, gloo),
# unoptimised: this checks the package, not the code's speed (the whole test: 86 s at -O0 against
# 155-175 s at -O2 on the 2-core VM, 2026-12-02).
"$work/venv/bin/pip" install --no-build-isolation --no-deps --disable-pip-version-check -q \
  --config-settings "build-dir=$work/build" \
  --config-settings cmake.build-type=Debug \
  --config-settings cmake.define.CMAKE_CXX_FLAGS_DEBUG=-O0 \
  --config-settings cmake.define.DISTCOMM_WITH_MPI=OFF \
  --config-settings cmake.define.DISTCOMM_WITH_UCX=OFF "$source_dir/bindings/torch"
"$work/venv/bin/pip" show distcomm-torch | sed -n '1,2p'

# The job, from a folder where no distcomm_torch lies, with torch's own launcher.
cd "$work"
env -u PYTHONPATH $(env | sed -n 's/^\(DISTCOMM_[A-Z0-9_]*\)=.*/-u \1/p') \
  "$work/venv/bin/python" -m torch.distributed.run --standalone --nproc-per-node 2 \
  "$here/pip_job.py"
