"""No cloud SDK is imported by ``import fastdata``, nor by opening a local dataset; only a remote one loads it."""

import subprocess
import sys

SDKS = ("boto3", "botocore", "s3fs", "gcsfs", "fsspec", "obstore", "urllib3")


def _loaded_after(code: str) -> list[str]:
    probe = f"{code}; import sys; print(sorted(m for m in sys.modules if m.split('.')[0] in {SDKS!r}))"
    return eval(subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout)


def test_local_datasets_load_no_cloud_sdk(packed):
    root, _ = packed
    assert _loaded_after(f"import fastdata; ds = fastdata.ShardDataset({str(root)!r}); ds.read(0)") == []


def test_a_url_loads_only_its_own_client():
    loaded = _loaded_after("from fastdata.storage import get_store; get_store('s3://b/x').client()")
    assert "boto3" in loaded and not {"s3fs", "gcsfs", "obstore", "fsspec"} & {m.split(".")[0] for m in loaded}
