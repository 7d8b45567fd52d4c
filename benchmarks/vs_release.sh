#!/usr/bin/env bash
# A 2-worker ASHA sweep, timed as a user would time it, with this checkout and with an
# earlier release side by side (issue 13's acceptance check).
#
#   bash benchmarks/vs_release.sh [REF] [ROUNDS]
#
# REF (default c441609, the release before issue 13) is checked out into a temporary git
# worktree and run with this checkout's virtual environment (same Ray, torch and Optuna),
# so the two sides differ only in hpsearch's code. Each round runs the same sweep with
# both, alternating which goes first, so a change in the machine's load hits both sides:
# search_spaces/charlm.yaml (2 DDP workers per trial over gloo, one trial at a time on
# 2 cores) cut to 8 trials and max_t 3, so ASHA stops most trials after their first epoch,
# the case where a trial's start-up matters most. Wall is `hpsearch run` from the shell
# to its exit, Ray's start included.
set -euo pipefail
ref=${1:-c441609}
rounds=${2:-1}
here=$(cd "$(dirname "$0")/.." && pwd)
py="$here/.venv/bin/python"
work=$(mktemp -d)
trap 'git -C "$here" worktree remove --force "$work/release" >/dev/null 2>&1 || true; rm -rf "$work"' EXIT
git -C "$here" worktree add --detach "$work/release" "$ref" >/dev/null 2>&1

sweep() {  # sweep KEY LABEL TREE ROUND -> prints one table row
    local side=$1 label=$2 tree=$3 round=$4 start end
    start=$(date +%s.%N)
    (cd "$work" && PYTHONPATH="$tree" "$py" -m hpsearch run "$here/search_spaces/charlm.yaml" \
        --trials 8 --set scheduler.max_t=3 --storage "$work/runs-$side" --name "r$round" \
        >"$work/$side-$round.log" 2>&1) || { echo "$side failed:"; tail -20 "$work/$side-$round.log"; exit 1; }
    end=$(date +%s.%N)
    # The trial table says how the sweep went: trials, epochs trained, median start-up.
    "$py" - "$work/runs-$side/r$round" "$label" "$start" "$end" <<'EOF'
import sys
import pandas as pd
path, side, wall = sys.argv[1], sys.argv[2], float(sys.argv[4]) - float(sys.argv[3])
t = pd.read_parquet(f"{path}/trials.parquet")
startup = f"{t.startup_s.median():.2f}" if "startup_s" in t else "-"
print(f"| {side} | {wall:.1f} | {len(t)} | {int(t.epochs.fillna(0).sum())} | "
      f"{(t.status == "stopped_by_asha").sum()} | {startup} | {t.best_value.min():.4f} |")
EOF
}

echo "| side | wall s | trials | epochs trained | stopped by ASHA | median startup_s | best val_loss |"
echo "| --- | --- | --- | --- | --- | --- | --- |"
for round in $(seq 1 "$rounds"); do
    if (( round % 2 )); then
        sweep release "release $ref" "$work/release" "$round"
        sweep current "this checkout" "$here" "$round"
    else
        sweep current "this checkout" "$here" "$round"
        sweep release "release $ref" "$work/release" "$round"
    fi
done
