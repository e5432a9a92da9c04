#!/bin/bash
# spotplane node bootstrap for GCP (GCE startup-script metadata), rendered per launch by clusters/bootstrap.py.
# This file holds what only GCP does: where its metadata server is, how a token in SSM is read
# and how the VM learns its name (instance/name, step 2). The steps every cloud shares come
# from clusters/bootstrap-common.sh, rendered in below.
set -Eeuo pipefail  # -E: the ERR trap names the failing line inside functions (the hook) too

CLOUD=gcp
METADATA=${SPOTPLANE_METADATA_URL:-http://metadata.google.internal}
read_ssm() {  # the SSM parameter named $1, decrypted
    aws ssm get-parameter --with-decryption --name "$1" \
        --query Parameter.Value --output text
}

@@{common_setup}

# -- 2. who am I (instance/name) -------------------------------------------------------------
INSTANCE_ID=$(curl -fsS -m 5 -H 'Metadata-Flavor: Google' \
    "$METADATA/computeMetadata/v1/instance/name")
@@{common_join}
