#!/usr/bin/env bash
# End to end, as a new user: `ray up` of the shipped cluster.yaml against this machine over
# SSH, a sweep submitted with `hpsearch submit`, its tables checked, then `ray down`.
#
#   sudo -E tests/e2e/ray_up_ssh.sh          # from the repository root, in hpsearch's venv
#
# Not run by CI (it needs root and an SSH server). What it does, in order:
#
# 1. The "server": an SSH user (hpsearch-e2e) and an sshd of its own on 127.0.0.1, on a
#    non-standard port (E2E_SSH_PORT, default 2222), started here and stopped at the end.
#    Needs openssh-server, rsync and netcat (docs/cluster.md: rsync on both ends, nc for
#    the port). The user's Ray gets a temp dir of its own (RAY_TMPDIR in its ~/.bashrc),
#    as /tmp/ray here belongs to root. The node's ~/hpsearch-venv is pre-seeded from this venv's packages (a
#    .pth file): `pip install torch --index-url ...` then finds torch installed and
#    downloads nothing (this machine cannot reach the torch index). `pip install
#    --upgrade pip` and the build of hpsearch still fetch a few small packages. Everything else in
#    setup_commands runs as shipped (`pip install ~/hpsearch` builds and installs it).
# 2. The "laptop": a fresh clone of this repository's HEAD, a HOME of its own with an SSH
#    key and the token created as docs/cluster.md says (umask 077).
# 3. cluster.yaml with only the edits docs/cluster.md lists: the head's address (here
#    127.0.0.1) in head_ip and head_start_ray_commands, no workers, ssh_user and
#    ssh_private_key (an absolute path: ssh reads `~` as the passwd home, not $HOME),
#    ssh_proxy_command for the port, and the torch index URL (CPU here). The shared
#    storage stays /mnt/shared: the script bind-mounts a folder there (and unmounts it).
# 4. ray up; hpsearch submit of search_spaces/quickstart.yaml (2 trials); the job's status,
#    the sweep's tables, manifest (git commit) and the Optuna study; token refusal on the
#    job API and the metrics port answering without it (as the docs say); ray down; no
#    process of the SSH user left.
#
# Prints the time each step took. Exit status 0 when every check passed.
set -euo pipefail

PORT=${E2E_SSH_PORT:-2222}
USER_NAME=${E2E_SSH_USER:-hpsearch-e2e}
REPO=$(git rev-parse --show-toplevel)
PY=$(command -v python)
WORK=$(mktemp -d -t hpsearch-e2e.XXXXXX)   # short: Ray's socket paths have a length limit
LAPTOP_HOME=$WORK/home
PROJECT=$WORK/hpsearch
SHARED=/mnt/shared   # the shipped cluster.yaml's; an NFS mount on a real cluster
STORAGE=$SHARED/hpsearch-runs
T0=$(date +%s)
step() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
fail() { echo "FAIL: $*" >&2; exit 1; }

[ "$(id -u)" = 0 ] || fail "run as root (it creates an SSH user and starts an sshd)"
for tool in sshd rsync nc ssh-keygen; do
    command -v "$tool" >/dev/null || fail "$tool is missing (apt-get install -y openssh-server rsync netcat-openbsd)"
done
mountpoint -q "$SHARED" && fail "$SHARED is mounted already; this script mounts its own there"

SSHD_PID=""
cleanup() {
    set +e
    if [ -f "$PROJECT/cluster.yaml" ] && [ -z "${DOWN_DONE:-}" ]; then
        (cd "$PROJECT" && HOME=$LAPTOP_HOME ray down -y cluster.yaml >/dev/null 2>&1)
    fi
    [ -n "$SSHD_PID" ] && kill "$SSHD_PID"
    pkill -KILL -u "$USER_NAME" 2>/dev/null   # only the SSH user's processes
    sleep 1
    userdel -r "$USER_NAME" 2>/dev/null
    [ -n "${MOUNTED:-}" ] && umount "$SHARED" && rmdir "$SHARED" 2>/dev/null
    rm -rf "$WORK" "${NODE_TMP:-}"
}
trap cleanup EXIT

# 1. The server.
step "server: user $USER_NAME, sshd on 127.0.0.1:$PORT, $SHARED (a bind mount)"
mkdir -p "$WORK/shared" "$SHARED"
chmod 1777 "$WORK/shared"
mount --bind "$WORK/shared" "$SHARED"
MOUNTED=1
id "$USER_NAME" >/dev/null 2>&1 || useradd -m -s /bin/bash "$USER_NAME"
usermod -p "*" "$USER_NAME"   # no password, but not locked: sshd (without PAM) refuses locked accounts
NODE_HOME=$(getent passwd "$USER_NAME" | cut -d: -f6)
mkdir -p "$LAPTOP_HOME/.ssh" "$WORK/sshd"
chmod 700 "$LAPTOP_HOME/.ssh"
ssh-keygen -q -t ed25519 -N '' -f "$LAPTOP_HOME/.ssh/id_ed25519"
ssh-keygen -q -t ed25519 -N '' -f "$WORK/sshd/host_key"
install -d -m 700 -o "$USER_NAME" -g "$USER_NAME" "$NODE_HOME/.ssh"
install -m 600 -o "$USER_NAME" -g "$USER_NAME" "$LAPTOP_HOME/.ssh/id_ed25519.pub" \
    "$NODE_HOME/.ssh/authorized_keys"
mkdir -p /run/sshd
"$(command -v sshd)" -f /dev/null -h "$WORK/sshd/host_key" -p "$PORT" \
    -o ListenAddress=127.0.0.1 -o PasswordAuthentication=no -o UsePAM=no \
    -o PidFile="$WORK/sshd/pid" -o AllowUsers="$USER_NAME" -o StrictModes=yes
for _ in $(seq 50); do [ -s "$WORK/sshd/pid" ] && break; sleep 0.1; done
SSHD_PID=$(cat "$WORK/sshd/pid")
# Ray's default temp dir, /tmp/ray, belongs to whoever ran Ray here first (root, on this
# machine); a server of one's own has no such problem. The user's Ray gets its own.
NODE_TMP=${TMPDIR:-/tmp}/hse2e-ray-$$
install -d -m 700 -o "$USER_NAME" -g "$USER_NAME" "$NODE_TMP"
sed -i "1i export RAY_TMPDIR=$NODE_TMP" "$NODE_HOME/.bashrc"
SITE=$("$PY" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
# The venv's own old setuptools would hide the seeded one torch requires (pip would then
# go to the torch index for it).
su - "$USER_NAME" -c "python3 -m venv ~/hpsearch-venv && \
    ~/hpsearch-venv/bin/pip uninstall -qy setuptools && \
    echo '$SITE' > \$(~/hpsearch-venv/bin/python -c 'import sysconfig; print(sysconfig.get_paths()[\"purelib\"])')/e2e-seed.pth && \
    printf '#!%s\nfrom ray.scripts.scripts import main\nmain()\n' ~/hpsearch-venv/bin/python > ~/hpsearch-venv/bin/ray && \
    chmod +x ~/hpsearch-venv/bin/ray"

# 2. The laptop.
step "laptop: clone of HEAD, token under umask 077"
git clone -q --branch "$(git -C "$REPO" rev-parse --abbrev-ref HEAD)" "$REPO" "$PROJECT"
export HOME=$LAPTOP_HOME
(umask 077 && mkdir -p ~/.ray && ray get-auth-token --generate >/dev/null)
[ "$(stat -c %a ~/.ray/auth_token)" = 600 ] || fail "token is not 0600"
ssh -o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null -o LogLevel=ERROR \
    -o ProxyCommand="nc %h $PORT" -i ~/.ssh/id_ed25519 "$USER_NAME@127.0.0.1" true \
    || fail "cannot ssh to $USER_NAME@127.0.0.1 through port $PORT"

# 3. The documented edits, and nothing else (`git diff` shows them).
cd "$PROJECT"
sed -i -e 's/192\.0\.2\.10/127.0.0.1/g' \
    -e 's/^  worker_ips: .*/  worker_ips: []/' \
    -e "s/^  ssh_user: .*/  ssh_user: $USER_NAME/" \
    -e "s#^  ssh_private_key: .*#  ssh_private_key: $LAPTOP_HOME/.ssh/id_ed25519#" \
    -e "s/^  # ssh_proxy_command: nc %h 2222/  ssh_proxy_command: nc %h $PORT/" \
    -e 's#download.pytorch.org/whl/cu[0-9]*#download.pytorch.org/whl/cpu#' cluster.yaml
git --no-pager diff --stat
grep -q "ssh_proxy_command: nc %h $PORT" cluster.yaml || fail "no ssh_proxy_command line to uncomment"

step "ray up"
UP0=$(date +%s)
ray up -y cluster.yaml --no-config-cache > "$WORK/ray-up.log" 2>&1 \
    || { tail -40 "$WORK/ray-up.log"; fail "ray up"; }
UP_S=$(( $(date +%s) - UP0 ))
step "ray up took $UP_S s"

export RAY_AUTH_MODE=token RAY_API_SERVER_ADDRESS=http://127.0.0.1:8265
step "hpsearch submit"
SUB0=$(date +%s)
"$PY" -m hpsearch submit search_spaces/quickstart.yaml --storage "$STORAGE" --trials 2 \
    --set scheduler.max_t=2 | tee "$WORK/submit.out"
JOB=$(sed -n 's/^submitted job \([^ ]*\) .*/\1/p' "$WORK/submit.out")
[ -n "$JOB" ] || fail "no job id in the submit output"
STATUS=$("$PY" - "$RAY_API_SERVER_ADDRESS" "$JOB" <<'EOF'
import sys, time
from ray.job_submission import JobSubmissionClient
client = JobSubmissionClient(sys.argv[1])
deadline = time.monotonic() + 600
while time.monotonic() < deadline:
    status = str(client.get_job_status(sys.argv[2]).value)
    if status in ("SUCCEEDED", "FAILED", "STOPPED"):
        break
    time.sleep(2)
print(status)
EOF
)
ray job logs --address "$RAY_API_SERVER_ADDRESS" "$JOB" > "$WORK/job.log" 2>&1 || true
[ "$STATUS" = SUCCEEDED ] || { tail -40 "$WORK/job.log"; fail "job $JOB ended $STATUS"; }
SWEEP_S=$(( $(date +%s) - SUB0 ))
step "job $JOB SUCCEEDED after $SWEEP_S s"

step "checks"
COMMIT=$(git rev-parse HEAD)
"$PY" - "$STORAGE/quickstart" "$COMMIT" <<'EOF'
import json, sys
import hpsearch
sweep, commit = sys.argv[1], sys.argv[2]
trials = hpsearch.read_trials(sweep)
assert len(trials) == 2 and trials.trial_id.is_unique, trials
assert set(trials.status) <= {"completed", "stopped_by_asha"}, trials.status
assert len(hpsearch.read_history(sweep)) >= 2
manifest = json.load(open(f"{sweep}/manifest.json"))
assert manifest["status"] == "finished", manifest["status"]
assert manifest["git"]["commit"] == commit, manifest["git"]
print(f"tables ok: {len(trials)} trials, statuses {sorted(set(trials.status))}, "
      f"git {commit[:10]}")
EOF
"$PY" -m hpsearch ls --storage "$STORAGE"
code=$(curl -s -o /dev/null -w '%{http_code}' http://127.0.0.1:8265/api/jobs/)
[ "$code" = 401 ] || [ "$code" = 403 ] || fail "the job API answered $code without the token"
echo "job API without the token: HTTP $code"
if [ "$(curl -s -o /dev/null -w '%{http_code}' http://127.0.0.1:8090/metrics)" = 200 ]; then
    echo "metrics port 8090 without the token: answers (as docs/cluster.md says; firewall it)"
else
    fail "the metrics port 8090 did not answer; docs/cluster.md says it does"
fi

echo "listening sockets of the cluster's processes (address:port process):"
sockets=$(ss -ltnpH 2>/dev/null || true)
for pid in $(pgrep -u "$USER_NAME"); do
    grep "pid=$pid," <<<"$sockets" | awk '{print $4, $6}' | sed 's/users:((("\([^"]*\)".*/\1/' || true
done | sort -u

step "ray down"
DOWN0=$(date +%s)
ray down -y cluster.yaml > "$WORK/ray-down.log" 2>&1 || { tail -20 "$WORK/ray-down.log"; fail "ray down"; }
DOWN_DONE=1
DOWN_S=$(( $(date +%s) - DOWN0 ))
sleep 2
left=$(pgrep -u "$USER_NAME" -a -f 'raylet|gcs_server|ray::|dashboard' || true)
[ -z "$left" ] || fail "ray down left: $left"
step "done: ray up ${UP_S} s, sweep ${SWEEP_S} s, ray down ${DOWN_S} s, total $(( $(date +%s) - T0 )) s"
