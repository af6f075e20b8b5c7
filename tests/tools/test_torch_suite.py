"""tools/torch_dataloader_suite.py: the shim makes the test module's DataLoader DataLoaderX (workers included),
excluded tests are deselected, and a test passing with torch's DataLoader but not with DataLoaderX fails the run;
then PyTorch's own test_dataloader.py run that way, where FASTDATA_TORCH_SUITE names it."""

import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tools"))
import torch_dataloader_suite as suite  # noqa: E402

FAKE_SUITE = """
import os
import unittest

import torch
from torch.utils.data import DataLoader, TensorDataset

FASTDATA = os.environ["FASTDATA_TORCH_SUITE_LOADER"] == "fastdata"


def _loader_name(_):
    from torch.utils.data import DataLoader
    return DataLoader.__name__


class TestDataLoader(unittest.TestCase):
    def test_sequential(self):
        batches = [b[0].tolist() for b in DataLoader(TensorDataset(torch.arange(4)), batch_size=2)]
        self.assertEqual(batches, [[0, 1], [2, 3]])

    def test_the_shim_reaches_the_module_and_spawned_workers(self):
        self.assertEqual(DataLoader.__name__, "DataLoaderX" if FASTDATA else "DataLoader")
        loader = DataLoader(list(range(2)), batch_size=1, num_workers=1, multiprocessing_context="spawn",
                            collate_fn=_loader_name)
        self.assertEqual(list(loader), ["DataLoaderX" if FASTDATA else "DataLoader"] * 2)

    def test_default_persistent_workers(self):
        self.assertFalse(DataLoader(TensorDataset(torch.arange(4)), num_workers=1).persistent_workers)

    def test_reads_the_exact_type(self):
        self.assertIs(type(DataLoader(TensorDataset(torch.arange(4)))), torch.utils.data.dataloader.DataLoader)
"""


def test_runner_compares_the_two_loaders(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(
        suite,
        "EXCLUDED",
        {
            "TestDataLoader::test_default_persistent_workers": (
                "DataLoaderX defaults persistent_workers to num_workers > 0"
            )
        },
    )
    test_file = tmp_path / "test_dataloader.py"
    test_file.write_text(FAKE_SUITE)
    code = suite.main([str(test_file), "--out", str(tmp_path / "reports")])
    out = capsys.readouterr().out
    assert "   torch: 3 passed, 0 failed, 0 skipped" in out  # the excluded test is deselected for both
    assert "fastdata: 2 passed, 1 failed, 0 skipped" in out  # test_default_persistent_workers deselected
    assert "passed with torch's DataLoader but not with DataLoaderX: 1" in out
    assert "TestDataLoader::test_reads_the_exact_type: failed" in out and code == 1


#: PyTorch's own test/test_dataloader.py, supplied by the developer (tests/vendor/torch/README.md names the commit and
#: checksum): its code is not committed here, so the test exists only where the file is given.
TORCH_SUITE = os.environ.get("FASTDATA_TORCH_SUITE")

if TORCH_SUITE:

    @pytest.mark.slow
    def test_pytorchs_own_dataloader_tests_pass_under_dataloaderx(tmp_path, capsys):
        """PyTorch's test_dataloader.py (``FASTDATA_TORCH_SUITE``), run with torch's DataLoader and with DataLoaderX:
        every test that passes with the first passes with the second."""
        code = suite.main([TORCH_SUITE, "--out", str(tmp_path), "--timeout", "900"])
        out = capsys.readouterr().out
        assert code == 0, out[-6000:]
        assert "passed with torch's DataLoader but not with DataLoaderX: 0" in out
