"""``hpsearch submit``: a sweep as a Ray Job on the cluster, the way nightly runs need it.

A Ray Job's driver runs on the head node and survives the laptop that submitted it. Three
things ``ray job submit --working-dir .`` gets wrong for hpsearch are handled here:

* **The installed hpsearch runs, not an uploaded copy.** The working directory is uploaded
  for the user's own trainables, but without an ``hpsearch/`` package in it, which would
  come first on the job's ``PYTHONPATH`` and shadow the version installed on the cluster.
* **The git state is recorded.** The upload has no ``.git``; the commit and dirty flag of
  the local checkout travel as ``HPSEARCH_GIT_COMMIT`` / ``HPSEARCH_GIT_DIRTY`` and the
  manifest records them.
* **A double cron fire runs once.** The submission id is deterministic,
  ``<sweep name>-<date>``; a second submission of the same id is refused by Ray, and this
  reports that the job exists instead of failing.

``hpsearch submit --resume NAME`` submits ``hpsearch resume NAME`` the same way: after the
whole cluster went down (a power cut), the sweep continues as a Ray Job again, under the
id ``<name>-resume-<date>``.
"""

from __future__ import annotations

import os
import shlex
import time
from datetime import datetime
from pathlib import Path
from typing import Any

from hpsearch.errors import ClusterError, InvalidArgumentError

__all__ = ["job_address", "submission_id", "submit_resume", "submit_sweep"]

#: Never uploaded: version control, virtual environments, sweeps, and hpsearch itself.
EXCLUDES = (".git", ".venv", "venv", "__pycache__", "*.pyc", "runs/", "/hpsearch/",
            "*.egg-info/")


#: How long a submission waits for a just-started cluster's job agent.
AGENT_WAIT_S = 60.0


def job_address(address: str | None) -> str:
    """The Ray Jobs API address: ``--address``, else ``RAY_API_SERVER_ADDRESS`` /
    ``RAY_ADDRESS``; ``HOST`` or ``HOST:8265`` become ``http://HOST:8265``."""
    address = address or os.environ.get("RAY_API_SERVER_ADDRESS") or os.environ.get(
        "RAY_ADDRESS")
    if address == "local":  # a local instance has no jobs API to submit to
        address = None
    if not address:
        raise InvalidArgumentError(
            "no cluster to submit to: pass --address http://HEAD:8265 or set "
            "RAY_API_SERVER_ADDRESS (docs/cluster.md)")
    if "://" not in address:
        host, _, port = address.partition(":")
        address = f"http://{host}:{port if port and port != '6379' else '8265'}"
    return address


def submission_id(name: str, now: datetime | None = None) -> str:
    """``<name>-<YYYY-MM-DD>``: the same sweep submitted twice on one day is one job."""
    return f"{name}-{(now or datetime.now()).strftime('%Y-%m-%d')}"


def submit_sweep(space: str, run_args: list[str], *, name: str, address: str | None,
                 working_dir: str = ".", sub_id: str | None = None) -> dict[str, Any]:
    """Submit ``hpsearch run SPACE RUN_ARGS...`` as a Ray Job. Returns ``{"submission_id",
    "address", "existed", "status", "logs", "entrypoint"}``; a job already submitted under
    the same id is not submitted again.

    Raises:
        InvalidArgumentError: The space file is not inside the working directory.
        ClusterError: The Jobs API cannot be reached, or refuses the token.
    """
    root = Path(working_dir).resolve()
    space_path = Path(space).resolve()
    if root not in space_path.parents:
        raise InvalidArgumentError(
            f"{space} is not inside the working directory {root}, which is what the job "
            "receives; run `hpsearch submit` from the directory that holds it")
    return _submit(["hpsearch", "run", str(space_path.relative_to(root)), *run_args],
                   root=root, address=address, sub_id=sub_id or submission_id(name))


def submit_resume(name: str, resume_args: list[str], *, address: str | None,
                  working_dir: str = ".", sub_id: str | None = None) -> dict[str, Any]:
    """Submit ``hpsearch resume NAME RESUME_ARGS...`` as a Ray Job, under the id
    ``<name>-resume-<date>`` unless ``sub_id`` is given; otherwise as
    :func:`submit_sweep`. The working directory is uploaded for the user's trainables.

    Raises:
        ClusterError: The Jobs API cannot be reached, or refuses the token.
    """
    return _submit(["hpsearch", "resume", name, *resume_args],
                   root=Path(working_dir).resolve(), address=address,
                   sub_id=sub_id or submission_id(f"{name}-resume"))


def _submit(command: list[str], *, root: Path, address: str | None,
            sub_id: str) -> dict[str, Any]:
    from hpsearch.store.manifest import git_state

    address = job_address(address)
    git = git_state(root) or {}
    env = {"HPSEARCH_GIT_COMMIT": git.get("commit") or "",
           "HPSEARCH_GIT_DIRTY": "1" if git.get("dirty") else "0"}
    if os.environ.get("HPSEARCH_TENSORBOARD"):  # the driver runs on the head: take it along
        env["HPSEARCH_TENSORBOARD"] = os.environ["HPSEARCH_TENSORBOARD"]
    entrypoint = shlex.join(command)
    client = _client(address)
    existing = _status(client, sub_id)
    if existing is None:
        deadline = time.monotonic() + AGENT_WAIT_S
        while True:
            try:
                client.submit_job(entrypoint=entrypoint, submission_id=sub_id,
                                  runtime_env={"working_dir": str(root), "excludes": list(EXCLUDES),
                                               "env_vars": env})
            except RuntimeError as exc:
                if "already exists" in str(exc):
                    existing = _status(client, sub_id)
                elif "No available agent" in str(exc) and time.monotonic() < deadline:
                    # A cluster just started: its job agent registers a few seconds after
                    # the dashboard answers, and Ray says to try again later.
                    time.sleep(1.0)
                    continue
                else:
                    raise ClusterError(f"the cluster at {address} refused the job: "
                                       f"{_last_line(exc)}") from None
            break
    logs = f"ray job logs --address {address} --follow {sub_id}"
    return {"submission_id": sub_id, "address": address, "existed": existing is not None,
            "status": existing or "PENDING", "logs": logs, "entrypoint": entrypoint}


def _client(address: str) -> Any:
    from ray.job_submission import JobSubmissionClient

    try:
        return JobSubmissionClient(address)
    except Exception as exc:  # noqa: BLE001 - connection and auth failures, one line
        from hpsearch.driver.cluster.connect import explain_connection_error

        raise ClusterError(explain_connection_error(address, exc, jobs_api=True)) from None


def _status(client: Any, sub_id: str) -> str | None:
    try:
        return str(client.get_job_status(sub_id).value)
    except RuntimeError:  # no such job
        return None


def _last_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[-1] if text else type(exc).__name__
