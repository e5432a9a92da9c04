#!/bin/bash
# spotplane node bootstrap for AWS (EC2 user_data), rendered per launch by clusters/bootstrap.py.
# This file holds what only AWS does: where its instance metadata service is, how a token in SSM
# is read (in this instance's region) and how the instance learns its id (IMDSv2, step 2). The
# steps every cloud shares come from clusters/bootstrap-common.sh, rendered in below.
set -Eeuo pipefail  # -E: the ERR trap names the failing line inside functions (the hook) too

CLOUD=aws
METADATA=${SPOTPLANE_METADATA_URL:-http://169.254.169.254}
read_ssm() {  # the SSM parameter named $1, decrypted, in this instance's region
    aws ssm get-parameter --region "$(imds placement/region)" --with-decryption \
        --name "$1" --query Parameter.Value --output text
}

@@{common_setup}

# -- 2. who am I (IMDSv2) --------------------------------------------------------------------
IMDS_TOKEN=$(curl -fsS -m 5 -X PUT "$METADATA/latest/api/token" \
    -H 'X-aws-ec2-metadata-token-ttl-seconds: 21600')
imds() { curl -fsS -m 5 -H "X-aws-ec2-metadata-token: $IMDS_TOKEN" "$METADATA/latest/meta-data/$1"; }
INSTANCE_ID=$(imds instance-id)
@@{common_join}
