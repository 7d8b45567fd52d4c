import pytest


@pytest.fixture(autouse=True)
def _one_thread(one_torch_thread):
    yield


def comparable(reports):
    """Reports without the fields that depend on wall-clock time or on where files went."""
    return [{k: v for k, v in r.items() if k not in ("samples_per_s", "checkpoint", "first_step_at")} for r in reports]
