import pytest
import torch


@pytest.fixture(autouse=True)
def _one_thread():
    # Reports must be bit-for-bit repeatable and tests share 2 cores with other work.
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def comparable(reports):
    """Reports without the fields that depend on wall-clock time or on where files went."""
    return [{k: v for k, v in r.items() if k not in ("samples_per_s", "checkpoint")} for r in reports]
