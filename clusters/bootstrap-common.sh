# The steps every cloud's node bootstrap shares, rendered by clusters/bootstrap.py into the
# cloud's own file (clusters/aws/bootstrap.sh, clusters/gcp/startup.sh), which sets CLOUD,
# METADATA and read_ssm first and fills in step 2 where this file says so.
# The values assigned below are filled in, shell-quoted, at launch; the rest runs as written.
#
#   1. write the report credential and the preemption watcher (clusters/nodewatch.py)
#   2. read this instance's id from the cloud's metadata server (the cloud's own part)
#   3. run the operator's hook: mounts, drivers (the fleet option boot_hook, and any
#      executable /etc/spotplane/boot.d/*.sh the image carries)
#   4. check the pinned Ray (install it when missing or another version)
#   5. read the workload cluster's Ray token from its token_ref (never the admin token)
#   6. ray start into the region's workload cluster with spotplane_node:<instance id>,
#      the market, the accelerator and its GPU count
#   7. start the preemption watcher, which reports the notice to the API
# Any failure reports "bootstrap failed" with the last lines of this log, then exits non-zero.
# ROLE=head (spotplane clusters add --launch) starts the cluster's head in step 6 instead:
# ray start --head with the token of step 5 and the dashboard on; no watcher, no report (the
# operator's command waits for the head and shows this log's tail when it does not answer).

CLUSTER_NAME=@@{cluster_name}
GCS_ADDRESS=@@{gcs_address}
TOKEN_REF=@@{token_ref}
API_URL=@@{api_url}
NODE_CREDENTIAL=@@{node_credential}
INSTANCE_TYPE=@@{instance_type}
ACCELERATOR=@@{accelerator}
GPU_COUNT=@@{gpu_count}
MARKET=@@{market}
RAY_VERSION=@@{ray_version}
ROLE=@@{role}
RAY_PORT=@@{ray_port}
DASHBOARD_PORT=@@{dashboard_port}
PYTHON=${SPOTPLANE_PYTHON:-python3}
STATE_ROOT=${SPOTPLANE_STATE_DIR:-/var/lib/spotplane}
INSTANCE_ID=""

mkdir -p "$STATE_ROOT"
BOOT_DIR=$(mktemp -d "$STATE_ROOT/boot.XXXXXX")
chmod 700 "$BOOT_DIR"
LOG="$BOOT_DIR/bootstrap.log"
exec > >(tee -a "$LOG") 2>&1

# -- 1. the credential and the watcher -------------------------------------------------------
(umask 077; printf '%s\n' "$NODE_CREDENTIAL" > "$BOOT_DIR/credential")
cat > "$BOOT_DIR/nodewatch.py" <<'SPOTPLANE_NODEWATCH'
@@{nodewatch}
SPOTPLANE_NODEWATCH

FAILED_AT=""
report_failure() {
    local rc=$1
    if [ "$rc" -eq 0 ]; then return 0; fi
    echo "bootstrap failed: exit $rc${FAILED_AT:+ at $FAILED_AT}"
    if [ "$ROLE" = head ]; then return 0; fi  # a head is no fleet node: nothing to report
    sleep 1  # the log's tee catches up before its tail is sent
    if command -v "$PYTHON" >/dev/null 2>&1; then
        "$PYTHON" "$BOOT_DIR/nodewatch.py" fail --cloud "$CLOUD" --metadata "$METADATA" \
            --api "$API_URL" --credential-file "$BOOT_DIR/credential" --log "$LOG" \
            --instance-id "$INSTANCE_ID" || true
    else
        curl -fsS -m 10 -X POST -H "Authorization: Bearer $NODE_CREDENTIAL" \
            -H 'Content-Type: application/json' \
            -d '{"reason": "bootstrap failed", "log_tail": "no python on the image"}' \
            "$API_URL/v1/nodes/$INSTANCE_ID/boot-failure" || true
    fi
}
trap 'FAILED_AT="line $LINENO: $BASH_COMMAND"' ERR
trap 'report_failure $?' EXIT

# -- 2. who am I: the cloud's own part sets INSTANCE_ID --------------------------------------
echo "spotplane: $INSTANCE_ID ($INSTANCE_TYPE, $GPU_COUNT x ${ACCELERATOR:-no GPU}, $MARKET) joins $CLUSTER_NAME"
NODE_DIR="$STATE_ROOT/$INSTANCE_ID"
mkdir -p "$NODE_DIR" && chmod 700 "$NODE_DIR"

# -- 3. the operator's hook: mounts, drivers (it adds to this script, never replaces it) ------
operator_hook() {
@@{boot_hook}
}
operator_hook
for hook in /etc/spotplane/boot.d/*.sh; do
    if [ -x "$hook" ]; then "$hook"; fi
done

# -- 4. the pinned Ray -----------------------------------------------------------------------
HAVE_RAY=$("$PYTHON" -c 'import ray; print(ray.__version__)' 2>/dev/null || true)
if [ "$HAVE_RAY" != "$RAY_VERSION" ]; then
    echo "spotplane: Ray ${HAVE_RAY:-missing}, installing ray[default]==$RAY_VERSION"
    "$PYTHON" -m pip install --quiet "ray[default]==$RAY_VERSION"
fi

# -- 5. the workload cluster's token ---------------------------------------------------------
read_token() {
    case "$TOKEN_REF" in
        file:*) cat "${TOKEN_REF#file:}" ;;
        ssm:*) read_ssm "${TOKEN_REF#ssm:}" ;;
        gcpsecret:*) gcloud secrets versions access latest --secret="${TOKEN_REF#gcpsecret:}" ;;
        *) echo "unknown token_ref scheme: $TOKEN_REF" >&2; return 1 ;;
    esac
}
(umask 077; read_token > "$NODE_DIR/ray_token")
test -s "$NODE_DIR/ray_token"

# -- 6. join the workload cluster (or, as its head, start it) --------------------------------
export RAY_AUTH_MODE=token RAY_AUTH_TOKEN_PATH="$NODE_DIR/ray_token"
if [ "$ROLE" = head ]; then
    "$PYTHON" -m ray.scripts.scripts start --head --port="$RAY_PORT" --num-gpus=0 \
        --resources="{\"spotplane_head:$INSTANCE_ID\": 1}" --include-dashboard=true \
        --dashboard-host=0.0.0.0 --dashboard-port="$DASHBOARD_PORT" --disable-usage-stats
    echo "spotplane: $INSTANCE_ID is the head of $CLUSTER_NAME (port $RAY_PORT)"
    exit 0
fi
RESOURCES="{\"spotplane_node:$INSTANCE_ID\": 1, \"$MARKET\": 1"
if [ "$GPU_COUNT" -gt 0 ] && [ -n "$ACCELERATOR" ]; then
    RESOURCES="$RESOURCES, \"$ACCELERATOR\": $GPU_COUNT"
fi
RESOURCES="$RESOURCES}"
"$PYTHON" -m ray.scripts.scripts start --address="$GCS_ADDRESS" --num-gpus="$GPU_COUNT" \
    --resources="$RESOURCES" --disable-usage-stats

# -- 7. the preemption watcher ---------------------------------------------------------------
cp "$BOOT_DIR/credential" "$BOOT_DIR/nodewatch.py" "$NODE_DIR/"
setsid nohup "$PYTHON" "$NODE_DIR/nodewatch.py" watch --cloud "$CLOUD" --metadata "$METADATA" \
    --api "$API_URL" --credential-file "$NODE_DIR/credential" \
    > "$NODE_DIR/nodewatch.log" 2>&1 < /dev/null &
echo "spotplane: $INSTANCE_ID joined $CLUSTER_NAME"
