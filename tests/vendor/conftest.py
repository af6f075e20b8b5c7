"""Vendored third-party test files are run by their own tools in a scratch folder, never collected with ours."""

collect_ignore_glob = ["torch/test_dataloader.py"]
