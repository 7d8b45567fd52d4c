"""The TensorBoard tracker, driven directly with hand-made trial and history rows, its event
files read back with TensorBoard's own reader (no Ray: the sweep's end-to-end test is
elsewhere)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

pytest.importorskip("tensorboard")
pytest.importorskip("torch")

from tensorboard.backend.event_processing.event_accumulator import (  # noqa: E402
    EventAccumulator)
from tensorboard.backend.event_processing.event_file_loader import (  # noqa: E402
    EventFileLoader)
from tensorboard.plugins.hparams import metadata as hp_metadata  # noqa: E402
from tensorboard.plugins.hparams.api_pb2 import Status  # noqa: E402

from hpsearch.track.base import SweepFacts, TrackError  # noqa: E402
from hpsearch.track.tensorboard_events import STATE_FILE, TensorBoardTracker  # noqa: E402

FACTS = SweepFacts(name="tb", path="", params=("lr", "opt", "layers"),
                   objectives=(("val_loss", "min"),))
PARAMS = {"t1": {"lr": 0.01, "opt": "adam", "layers": 2},
          "t2": {"lr": 0.1, "opt": "sgd", "layers": 3}}
STEPS = 6


def trial_row(trial_id: str, status: str = "running", error: str | None = None) -> dict:
    return {"trial_id": trial_id, **PARAMS[trial_id], "status": status, "error": error,
            "optuna_trial": int(trial_id[1:]) - 1, "started_at": 1.7e9,
            "ended_at": 1.7e9 + 60 if status != "running" else None,
            "final_value": None, "best_value": None}


def history(trial_id: str, steps: int = STEPS) -> list[dict]:
    """Each step: a ``log_every`` training row, then the evaluated report."""
    scale = 1.0 if trial_id == "t1" else 2.0
    rows = []
    for step in range(1, steps + 1):
        rows.append({"trial_id": trial_id, "step": step, "epoch": None,
                     "time_total_s": step - 0.5, "evaluated": False,
                     "train_loss": scale * 3.0 / step})
        rows.append({"trial_id": trial_id, "step": step, "epoch": step,
                     "time_total_s": float(step), "evaluated": True,
                     "val_loss": scale / step})
    return rows


def both_histories(steps: int = STEPS) -> list[dict]:
    one, two = history("t1", steps), history("t2", steps)
    return [row for pair in zip(one, two) for row in pair]  # interleaved, as a sweep's


def accumulator(logdir: Path, trial_id: str) -> EventAccumulator:
    acc = EventAccumulator(str(logdir / trial_id), size_guidance={"scalars": 0, "tensors": 0})
    acc.Reload()
    return acc


def scalars(logdir: Path, trial_id: str, tag: str) -> list[tuple[int, float]]:
    return [(e.step, e.value) for e in accumulator(logdir, trial_id).Scalars(tag)]


def events(logdir: Path) -> list:
    """Every event of every event file under ``logdir``."""
    return [event for path in sorted(logdir.rglob("*tfevents*"))
            for event in EventFileLoader(str(path)).Load()]


def tag_count(logdir: Path, trial_id: str, tag: str) -> int:
    return sum(1 for event in events(logdir / trial_id) for value in event.summary.value
               if value.tag == tag)


def hparams_content(logdir: Path, trial_id: str) -> dict[str, bytes]:
    return accumulator(logdir, trial_id).PluginTagToContent(hp_metadata.PLUGIN_NAME)


def test_scalars_per_trial_at_their_steps(tmp_path):
    rows = both_histories()
    assert (rows[0]["trial_id"], rows[0]["evaluated"]) == ("t1", False)
    rows[0]["time_total_s"] = float("nan")
    tracker = TensorBoardTracker(tmp_path)
    tracker.sync(FACTS, [trial_row("t1"), trial_row("t2")], rows)
    tracker.release()

    assert sorted(p.name for p in tmp_path.iterdir()) == ["t1", "t2"]
    # placed in time by the trial's start and its time_total_s (now, when it has none)
    assert [e.wall_time for e in accumulator(tmp_path, "t2").Scalars("val_loss")] == [
        pytest.approx(1.7e9 + s, rel=0, abs=0.01) for s in range(1, STEPS + 1)]
    assert math.isfinite(accumulator(tmp_path, "t1").Scalars("train_loss")[0].wall_time)
    for trial_id, scale in (("t1", 1.0), ("t2", 2.0)):
        assert scalars(tmp_path, trial_id, "val_loss") == [
            (s, pytest.approx(scale / s)) for s in range(1, STEPS + 1)]
        assert scalars(tmp_path, trial_id, "train_loss") == [
            (s, pytest.approx(scale * 3.0 / s)) for s in range(1, STEPS + 1)]
        assert [s for s, _ in scalars(tmp_path, trial_id, "epoch")] == list(range(1, STEPS + 1))
        tags = set(accumulator(tmp_path, trial_id).Tags()["scalars"])
        assert tags == {"val_loss", "train_loss", "epoch", "time_total_s"}  # no step, no flag


def test_hparams_lists_the_trial_by_its_params_and_the_objective(tmp_path):
    tracker = TensorBoardTracker(tmp_path)
    tracker.sync(FACTS, [trial_row("t1"), trial_row("t2")], both_histories())
    tracker.release()

    for trial_id, params in PARAMS.items():
        content = hparams_content(tmp_path, trial_id)
        start = hp_metadata.parse_session_start_info_plugin_data(
            content[hp_metadata.SESSION_START_INFO_TAG])
        assert start.hparams["lr"].number_value == pytest.approx(params["lr"])
        assert start.hparams["opt"].string_value == params["opt"]
        assert start.hparams["layers"].number_value == params["layers"]
        assert start.start_time_secs == pytest.approx(1.7e9)
        experiment = hp_metadata.parse_experiment_plugin_data(
            content[hp_metadata.EXPERIMENT_TAG])
        assert [m.name.tag for m in experiment.metric_infos] == ["val_loss"]
        assert sorted(h.name for h in experiment.hparam_infos) == ["layers", "lr", "opt"]
        # the declared metric is a scalar of the trial's own folder, so the HParams tab
        # shows its last value
        assert scalars(tmp_path, trial_id, "val_loss")[-1][0] == STEPS
        assert hp_metadata.SESSION_END_INFO_TAG not in content  # still running


def test_the_hparams_tab_lists_each_trial_by_its_params_and_last_objective(tmp_path):
    """What TensorBoard's HParams tab asks its backend (ListSessionGroups), answered by
    TensorBoard's own plugin code over the folders."""
    from tensorboard import context
    from tensorboard.backend.event_processing import data_provider
    from tensorboard.backend.event_processing import plugin_event_multiplexer as pem
    from tensorboard.plugins import base_plugin
    from tensorboard.plugins.hparams import api_pb2, backend_context, list_session_groups

    tracker = TensorBoardTracker(tmp_path)
    tracker.sync(FACTS, [trial_row("t1", "completed"), trial_row("t2")], both_histories())
    tracker.release()

    multiplexer = pem.EventMultiplexer()
    multiplexer.AddRunsFromDirectory(str(tmp_path))
    multiplexer.Reload()
    provider = data_provider.MultiplexerDataProvider(multiplexer, str(tmp_path))
    backend = backend_context.Context(base_plugin.TBContext(data_provider=provider,
                                                            logdir=str(tmp_path)))
    request = api_pb2.ListSessionGroupsRequest(
        start_index=0, slice_size=10, allowed_statuses=list(api_pb2.Status.values()),
        col_params=[api_pb2.ColParams(hparam=name) for name in FACTS.params]
        + [api_pb2.ColParams(metric=api_pb2.MetricName(tag="val_loss"))])
    answer = list_session_groups.Handler(context.RequestContext(), backend, "", request).run()

    groups = {group.name: group for group in answer.session_groups}
    assert sorted(groups) == ["t1", "t2"]  # one session per trial, in its own folder
    for trial_id, scale in (("t1", 1.0), ("t2", 2.0)):
        group = groups[trial_id]
        assert group.hparams["opt"].string_value == PARAMS[trial_id]["opt"]
        assert group.hparams["lr"].number_value == pytest.approx(PARAMS[trial_id]["lr"])
        [metric] = group.metric_values
        assert (metric.name.tag, metric.training_step) == ("val_loss", STEPS)
        assert metric.value == pytest.approx(scale / STEPS)
    assert [api_pb2.Status.Name(s.status) for s in groups["t1"].sessions] == ["STATUS_SUCCESS"]
    assert [api_pb2.Status.Name(s.status) for s in groups["t2"].sessions] == ["STATUS_UNKNOWN"]


@pytest.mark.parametrize("status, error, expected", [
    ("completed", None, "STATUS_SUCCESS"),
    ("failed", "RuntimeError: CUDA out of memory", "STATUS_FAILURE"),
    ("stopped_by_asha", None, "STATUS_UNKNOWN"),
])
@pytest.mark.parametrize("live", [True, False], ids=["ended", "sync"])
def test_ended_trial_gets_a_session_end_with_its_status(tmp_path, status, error, expected,
                                                        live):
    tracker = TensorBoardTracker(tmp_path)
    if live:
        tracker.sync(FACTS, [], [])
        tracker.started("t1", trial_row("t1"))
        tracker.reported("t1", history("t1"))
        tracker.ended("t1", trial_row("t1", status))
        if error:  # the record tells the end again once the error's line is known
            tracker.ended("t1", trial_row("t1", status, error))
    else:
        tracker.sync(FACTS, [trial_row("t1", status, error)], history("t1"))
    tracker.release()

    content = hparams_content(tmp_path, "t1")
    end = hp_metadata.parse_session_end_info_plugin_data(
        content[hp_metadata.SESSION_END_INFO_TAG])
    assert Status.Name(end.status) == expected
    assert end.end_time_secs == pytest.approx(1.7e9 + 60)
    assert tag_count(tmp_path, "t1", hp_metadata.SESSION_END_INFO_TAG) == 1
    texts = accumulator(tmp_path, "t1").Tensors("hpsearch/status/text_summary")
    assert [t.tensor_proto.string_val[0].decode() for t in texts] == [status]
    acc = accumulator(tmp_path, "t1")
    if error:
        [text] = acc.Tensors("hpsearch/error/text_summary")
        assert text.tensor_proto.string_val[0].decode() == error
    else:
        assert "hpsearch/error/text_summary" not in acc.Tags()["tensors"]


def test_a_second_sync_adds_nothing(tmp_path):
    trials = [trial_row("t1", "completed"), trial_row("t2", "failed", "boom")]
    TensorBoardTracker(tmp_path).sync(FACTS, trials, both_histories())
    first = events(tmp_path)
    files = sorted(tmp_path.rglob("*"))
    for _ in range(2):  # again in the same tracker's life, and in a new one's (an export)
        tracker = TensorBoardTracker(tmp_path)
        tracker.sync(FACTS, trials, both_histories())
        tracker.sync(FACTS, trials, both_histories())
        tracker.release()
    assert len(events(tmp_path)) == len(first)
    assert sorted(tmp_path.rglob("*")) == files


def test_a_folder_an_earlier_hpsearch_counted_is_continued_not_written_again(tmp_path):
    """A state file written before the marks holds only ``rows`` (how many history rows
    the folder has): a sync writes the rows past that count."""
    half = STEPS // 2
    tracker = TensorBoardTracker(tmp_path)
    tracker.sync(FACTS, [trial_row("t1")], history("t1", half))
    tracker.release()
    state_file = tmp_path / "t1" / STATE_FILE
    state = json.loads(state_file.read_text())
    state_file.write_text(json.dumps({k: v for k, v in state.items()
                                      if k not in ("last_step", "last_log_step")}))
    resumed = TensorBoardTracker(tmp_path)
    resumed.sync(FACTS, [trial_row("t1")], history("t1"))
    resumed.release()
    assert [s for s, _ in scalars(tmp_path, "t1", "val_loss")] == list(range(1, STEPS + 1))
    assert json.loads(state_file.read_text())["last_step"] == STEPS


def test_a_resumed_sweep_writes_each_step_once(tmp_path):
    """The resume's history is not the one the killed driver wrote from: here its tables
    lost t1's first training row. Each step still goes out once, with no gap."""
    half = STEPS // 2
    tracker = TensorBoardTracker(tmp_path)
    tracker.sync(FACTS, [trial_row("t1"), trial_row("t2")], both_histories(half))
    tracker.release()  # the driver is gone; both trials were running

    resumed = TensorBoardTracker(tmp_path)
    resumed.sync(FACTS, [trial_row("t1", "completed"), trial_row("t2")],
                 both_histories(STEPS)[1:])
    resumed.started("t2", trial_row("t2"))
    resumed.reported("t2", history("t2", STEPS + 1)[-2:])
    resumed.release()

    for trial_id, steps in (("t1", STEPS), ("t2", STEPS + 1)):
        for tag in ("val_loss", "train_loss"):
            assert [s for s, _ in scalars(tmp_path, trial_id, tag)] == list(range(1, steps + 1))
    for trial_id in PARAMS:
        assert tag_count(tmp_path, trial_id, hp_metadata.SESSION_START_INFO_TAG) == 1
        assert tag_count(tmp_path, trial_id, hp_metadata.EXPERIMENT_TAG) == 1
    assert tag_count(tmp_path, "t1", hp_metadata.SESSION_END_INFO_TAG) == 1
    state = json.loads((tmp_path / "t2" / STATE_FILE).read_text())
    assert (state["rows"], state["last_step"], state["last_log_step"]) == (
        2 * (STEPS + 1), STEPS + 1, STEPS + 1)


def test_curves_grow_live_and_an_export_after_adds_nothing(tmp_path):
    tracker = TensorBoardTracker(tmp_path)
    tracker.sync(FACTS, [], [])
    tracker.started("t1", trial_row("t1"))
    rows = history("t1")
    for step in range(1, STEPS + 1):
        tracker.reported("t1", rows[2 * step - 2:2 * step])
        # readable before the writer is closed: each report is flushed
        assert [s for s, _ in scalars(tmp_path, "t1", "val_loss")] == list(range(1, step + 1))
    # a report of many logged training rows (the writer's thread writes them one by one)
    many = [{"trial_id": "t1", "step": STEPS + i, "evaluated": False, "train_loss": 0.1}
            for i in range(1, 1001)]
    tracker.reported("t1", many)
    assert len(scalars(tmp_path, "t1", "train_loss")) == STEPS + len(many)
    rows += many
    tracker.ended("t1", trial_row("t1", "completed"))
    tracker.closed("finished", FACTS, None, [])
    tracker.release()
    written = len(events(tmp_path))

    export = TensorBoardTracker(tmp_path)
    export.sync(FACTS, [trial_row("t1", "completed")], rows)
    export.release()
    assert len(events(tmp_path)) == written


def test_check_says_what_is_in_the_way_in_one_line(tmp_path):
    (tmp_path / "runs").write_text("not a folder")
    with pytest.raises(TrackError) as caught:
        TensorBoardTracker(tmp_path / "runs" / "sweep" / "tensorboard").check()
    assert "is a file, not a folder" in str(caught.value)
    assert "\n" not in str(caught.value)

    fine = TensorBoardTracker(tmp_path / "new" / "tensorboard")
    fine.check()
    assert not (tmp_path / "new").exists()  # checking creates nothing


def test_an_unreadable_state_file_is_one_line_and_left_alone(tmp_path):
    (tmp_path / "t1").mkdir()
    (tmp_path / "t1" / STATE_FILE).write_text("{not json")
    with pytest.raises(TrackError) as caught:
        TensorBoardTracker(tmp_path).sync(FACTS, [trial_row("t1")], history("t1"))
    assert STATE_FILE in str(caught.value) and "\n" not in str(caught.value)
    assert (tmp_path / "t1" / STATE_FILE).read_text() == "{not json"
    assert events(tmp_path) == []


def test_a_trial_run_again_after_its_end_continues_in_one_more_file(tmp_path):
    """Tune retries a failed trial: its curve goes on, and its writer is not reopened
    for each report (one event file per run of the trial)."""
    rows = history("t1")
    tracker = TensorBoardTracker(tmp_path)
    tracker.sync(FACTS, [], [])
    tracker.started("t1", trial_row("t1"))
    tracker.reported("t1", rows[:4])
    tracker.ended("t1", trial_row("t1", "failed", "boom"))
    tracker.started("t1", trial_row("t1"))
    for i in range(4, len(rows), 2):
        tracker.reported("t1", rows[i:i + 2])
    tracker.ended("t1", trial_row("t1", "completed"))
    tracker.release()

    assert [s for s, _ in scalars(tmp_path, "t1", "val_loss")] == list(range(1, STEPS + 1))
    assert len(list((tmp_path / "t1").glob("*tfevents*"))) == 2
    texts = accumulator(tmp_path, "t1").Tensors("hpsearch/status/text_summary")
    assert [t.tensor_proto.string_val[0].decode() for t in texts] == ["failed", "completed"]
    assert tag_count(tmp_path, "t1", hp_metadata.SESSION_END_INFO_TAG) == 1


def test_params_read_back_from_a_table_are_hparams_of_their_type(tmp_path):
    """An export's trial rows come from Parquet: numpy numbers, and NaN where a
    conditional parameter does not apply."""
    np = pytest.importorskip("numpy")
    facts = SweepFacts(name="tb", path="", params=("lr", "layers", "wide", "momentum"),
                       objectives=(("val_loss", "min"),))
    row = {**trial_row("t1", "completed"), "lr": np.float64(0.01), "layers": np.int64(2),
           "wide": np.bool_(True), "momentum": np.float64("nan")}
    tracker = TensorBoardTracker(tmp_path)
    tracker.sync(facts, [row], history("t1"))
    tracker.release()

    start = hp_metadata.parse_session_start_info_plugin_data(
        hparams_content(tmp_path, "t1")[hp_metadata.SESSION_START_INFO_TAG])
    assert sorted(start.hparams) == ["layers", "lr", "wide"]
    assert start.hparams["layers"].WhichOneof("kind") == "number_value"
    assert start.hparams["layers"].number_value == 2
    assert start.hparams["lr"].number_value == pytest.approx(0.01)
    assert start.hparams["wide"].number_value == 1  # torch's hparams() writes bools as numbers


# the writer's thread dies of the missing file: that is the case under test
@pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")
def test_a_dead_event_writer_is_replaced_when_the_call_is_made_again(tmp_path):
    """The trial's folder vanishes under its open writer (as a full disk kills the
    writer's thread): the report fails with an OSError, which the pump makes again; the
    second call writes the report into a new event file, and later reports follow it."""
    import shutil

    rows = history("t1")
    tracker = TensorBoardTracker(tmp_path)
    tracker.sync(FACTS, [], [])
    tracker.started("t1", trial_row("t1"))
    tracker.reported("t1", rows[:2])
    shutil.rmtree(tmp_path / "t1")
    with pytest.raises(OSError) as caught:
        tracker.reported("t1", rows[2:4])
    assert tracker.transient(caught.value)
    tracker.reported("t1", rows[2:4])  # the pump's second try
    tracker.reported("t1", rows[4:6])
    tracker.release()

    assert [s for s, _ in scalars(tmp_path, "t1", "val_loss")] == [2, 3]
    assert [s for s, _ in scalars(tmp_path, "t1", "train_loss")] == [2, 3]
