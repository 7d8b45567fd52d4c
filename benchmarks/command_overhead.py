"""What a command trial costs beyond the script itself, measured side by side.

The same script (``examples/command_mode/train.py``, a torch MLP on digits, 2 epochs) is
timed, interleaved, five ways: by hand (``subprocess.run``); under hpsearch's process
layer alone (``run_command``: the supervisor, line streaming, the log); as
``hpsearch trial`` (the CLI, the space, no Ray); and as trials of a one-worker sweep on
the local Ray instance (a trial's ``ended_at - started_at``, from Tune's start of the trial to its end, and
the sweep's fixed cost beyond its trials). It also times a stop: from Tune's stop (an
exception out of the report callback) to the command's whole tree being gone.

    .venv/bin/python benchmarks/command_overhead.py --reps 5
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "command_mode"
ARGS = ["--lr=0.05", "--epochs=2"]
#: What a trial's command gets too (OMP_NUM_THREADS = cpus_per_worker): the same work.
ENV = {**os.environ, "OMP_NUM_THREADS": "1"}

SPACE = """\
    name: overhead
    trainable:
      command: python {script} --lr={{lr}} --epochs={{max_t}} --out_dir={{trial_dir}}
    objective: {{metric: val_loss, mode: min}}
    params: {{lr: {{type: float, low: 0.04, high: 0.06}}}}
    scheduler: {{type: fifo, max_t: 2}}
    trials: {{num: {n}, max_concurrent: 1}}
"""


def by_hand(out: str) -> float:
    t = time.perf_counter()
    subprocess.run([sys.executable, str(EXAMPLE / "train.py"), *ARGS, f"--out_dir={out}"],
                   check=True, capture_output=True, env=ENV)
    return time.perf_counter() - t


def under_run_command(out: str) -> float:
    from hpsearch.command.process import Launch, run_command

    t = time.perf_counter()
    finished = run_command(Launch([sys.executable, str(EXAMPLE / "train.py"), *ARGS,
                                   f"--out_dir={out}"], cwd=out, log=f"{out}/output.log",
                                  env={"OMP_NUM_THREADS": "1"}),
                           lambda line: None)
    assert finished.code == 0
    return time.perf_counter() - t


def as_hpsearch_trial(space: Path) -> float:
    t = time.perf_counter()
    subprocess.run([sys.executable, "-m", "hpsearch", "trial", str(space), "--set", "lr=0.05"],
                   check=True, capture_output=True)
    return time.perf_counter() - t


def stop_latency(out: str) -> float:
    """Seconds from the stop to the tree gone, for a script that prints forever."""
    from hpsearch.command.process import Launch, run_command

    class Stop(Exception):
        pass

    script = Path(out) / "forever.py"
    script.write_text("import time\nwhile True:\n    print('val_loss=1', flush=True)\n"
                      "    time.sleep(0.05)\n")
    marks: list[float] = []

    def on_line(line: str) -> None:
        marks.append(time.perf_counter())
        if len(marks) == 5:
            raise Stop

    try:
        run_command(Launch([sys.executable, str(script)], cwd=out), on_line)
    except Stop:
        pass
    return time.perf_counter() - marks[-1]


def sweep(space: Path, storage: str) -> tuple[float, list[float]]:
    import hpsearch

    t = time.perf_counter()
    subprocess.run([sys.executable, "-m", "hpsearch", "run", str(space), "--storage", storage],
                   check=True, capture_output=True)
    total = time.perf_counter() - t
    trials = hpsearch.read_trials(Path(storage) / "overhead")
    spans = (trials.ended_at - trials.started_at).dt.total_seconds()
    return total, list(spans)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        space = Path(tmp) / "space.yaml"
        space.write_text(textwrap.dedent(SPACE.format(script=EXAMPLE / "train.py", n=args.reps)))
        times: dict[str, list[float]] = {"by hand": [], "run_command": [], "hpsearch trial": [],
                                         "stop": []}
        for i in range(args.reps):
            out = tempfile.mkdtemp(dir=tmp)
            times["by hand"].append(by_hand(out))
            times["run_command"].append(under_run_command(out))
            times["hpsearch trial"].append(as_hpsearch_trial(space))
            times["stop"].append(stop_latency(out))
        total, walls = sweep(space, f"{tmp}/runs")
        hand = statistics.median(times["by hand"])
        print("| way | median s | vs by hand | beyond the script, s |")
        print("| --- | --- | --- | --- |")
        for name in ("by hand", "run_command", "hpsearch trial"):
            m = statistics.median(times[name])
            print(f"| {name} | {m:.2f} | {m / hand:.2f}x | {m - hand:+.2f} |")
        w = statistics.median(walls)
        print(f"| sweep trial (start to end, {len(walls)} trials) | {w:.2f} | {w / hand:.2f}x | "
              f"{w - hand:+.2f} |")
        print(f"| sweep of {len(walls)} trials, in all | {total:.2f} | | fixed cost "
              f"{total - sum(walls):.2f} s beyond its trials |")
        print(f"| stop: tree gone after Tune's stop | {statistics.median(times['stop']):.3f} | | |")


if __name__ == "__main__":
    main()
