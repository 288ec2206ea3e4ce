#!/usr/bin/env bash
# benchmarks/gpu_e2e.sh on a lent GPU machine: one with python3 and a CUDA torch but none of the
# server's packages and no network (../shared/INFRA.md, "A GPU machine").
#   benchmarks/gpu_lent.sh --download .gpuwheels   # here: the cp312 wheels it needs (~52 MB)
#   benchmarks/gpu_lent.sh .gpuwheels              # there, carrying .gpuwheels: installs them,
#                                                  # runs, leaves gpu.json and the log in $OUT
#   benchmarks/gpu_lent.sh .gpuwheels --only service   # the rest goes to gpu_e2e.sh
set -euo pipefail
cd "$(dirname "$0")/.."

if [ "${1:-}" = "--download" ]; then
    # What the embedded service, the trainer and the CUDA tests import; torch and numpy are
    # the machine's own (a CUDA build), so they are left out.
    python3 -m pip download -q --only-binary=:all: --python-version 3.12 --implementation cp \
        --abi cp312 --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
        --platform manylinux2014_x86_64 --platform any -d "$2" \
        'pydantic>=2.6,<3' 'httpx>=0.27' 'pyyaml>=6' 'fastapi>=0.110' 'uvicorn[standard]>=0.29' \
        'sqlalchemy>=2.0.30,<2.1' 'alembic>=1.13' 'psycopg[binary]>=3.1' 'celery[redis]>=5.3,<6' \
        'redis>=5' 'boto3>=1.34' 'kubernetes==36.0.3' 'pydantic-settings>=2.2' \
        'prometheus-client>=0.20' 'swagger-ui-bundle-v2>=5.17,<6' 'pytest>=8,<9' \
        'pytest-timeout>=2.3' 'pytest-asyncio>=0.23'
    exit 0
fi

wheels="$(realpath "${1:?usage: benchmarks/gpu_lent.sh WHEEL_DIR | --download WHEEL_DIR}")"
shift
out="${OUT:-$PWD/gpu-out}"
mkdir -p "$out"
python3 -m pip install -q --no-index --no-deps --break-system-packages "$wheels"/*.whl 2>/dev/null \
    || python3 -m pip install -q --no-index --no-deps "$wheels"/*.whl
# The service runs its trainers as other uids: the code goes where they can read it (not under
# /root), and on the interpreter's path for every uid.
dest=/srv/gpujobs
rm -rf "$dest" && mkdir -p "$dest"
tar --exclude=./.gpuwheels --exclude=./.git -cf - . | tar -xf - -C "$dest"
chmod -R a+rX "$dest"
echo "$dest" >"$(python3 -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')/gpujobs-lent.pth"
nvidia-smi >"$out/nvidia-smi.txt" 2>&1 || true
cd "$dest"
status=0
PYTHON=python3 benchmarks/gpu_e2e.sh --out "$out/gpu.json" "$@" >"$out/gpu_e2e.log" 2>&1 || status=$?
tail -c 6000 "$out/gpu_e2e.log"
exit "$status"
