#!/usr/bin/env bash
# The quickstart with a driver SIGKILL and resume, on the lowest and the highest Ray and
# Optuna versions pyproject.toml declares: one virtualenv per pair (made once, under
# $RAY_RANGE_VENVS, default a temporary folder), hpsearch installed from this checkout.
# Not run by CI (it downloads Ray); run it before widening or narrowing the range:
#
#   tests/e2e/ray_range.sh                  # lowest, then highest
#   tests/e2e/ray_range.sh 2.58.1 4.5.0     # one pair of your own
set -euo pipefail
cd "$(dirname "$0")/../.."
root=${RAY_RANGE_VENVS:-$(mktemp -d)}
if (($# == 2)); then pairs=("$1 $2"); else pairs=("2.55.1 4.0.0" "2.60.0 5.1.0"); fi
status=0
for pair in "${pairs[@]}"; do
  read -r ray optuna <<<"$pair"
  venv="$root/ray-$ray-optuna-$optuna"
  if [ ! -x "$venv/bin/python" ]; then
    python3 -m venv "$venv"
    "$venv/bin/pip" install -q torch==2.13.0
    "$venv/bin/pip" install -q "ray[default,tune,train]==$ray" "optuna==$optuna" -e .
  fi
  work=$(mktemp -d)
  echo "== Ray $ray, Optuna $optuna ($venv)"
  if ! (cd "$work" && "$venv/bin/python" "$OLDPWD/tests/e2e/kill_and_resume.py" "$work"); then
    status=1
  fi
done
exit $status
