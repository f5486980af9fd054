"""The packaging metadata lists every subpackage and kernel folder (the explicit list in
pyproject.toml is needed for the cl_kernels mapping)."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_pyproject_lists_every_subpackage():
    pyproject = ROOT / "pyproject.toml"
    if not pyproject.exists():          # running against an installed wheel only
        return
    listed = set(re.search(r"packages = \[(.*?)\]", pyproject.read_text(), re.S).group(1)
                 .replace('"', "").replace("\n", "").replace(" ", "").split(","))
    found = {".".join(p.parent.relative_to(ROOT).parts) for p in (ROOT / "clphys").rglob("__init__.py")}
    kernels = {"clphys.cl_kernels"} | {"clphys.cl_kernels." + d.name
                                       for d in (ROOT / "cl_kernels").iterdir() if d.is_dir()}
    assert found | kernels == listed
