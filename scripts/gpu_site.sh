# Sourced by the GPU scripts, from the repository root on the device machine: the carried wheels (.whl/, made here by
# scripts/device_wheels.sh; `carry: [".whl"]`, and `.whl-store` for the scripts that start an object store) installed
# into /tmp/site, since that machine has torch but not these and reaches no package index. botocore comes as botocore-s3.tgz (its S3 and STS models only: the carry holds
# 64 MiB); boto3 without it breaks diffusers' import (accelerate imports boto3 when it is there: a run's workers then
# fail at their start), so it is unpacked wherever .whl has it.
mkdir -p /tmp/site
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
  $(compgen -G '.whl-store/*.whl' || true)
if [[ -f .whl/botocore-s3.tgz ]]; then tar xzf .whl/botocore-s3.tgz -C /tmp/site; fi
