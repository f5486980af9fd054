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


def test_version_has_one_home():
    """pyproject.toml takes the version from clphys/_version.py, which the package exports."""
    import clphys
    from clphys import _version
    pyproject = ROOT / "pyproject.toml"
    if pyproject.exists():
        text = pyproject.read_text()
        assert 'dynamic = ["version"]' in text
        assert 'version = {attr = "clphys._version.__version__"}' in text
        assert not re.search(r"^version\s*=\s*\"", text, re.M), "a second, literal version in pyproject.toml"
    assert clphys.__version__ == _version.__version__
    assert re.fullmatch(r"\d+\.\d+\.\d+(\.dev\d+|rc\d+)?", clphys.__version__)


def test_py_typed_is_shipped():
    """The PEP 561 marker exists and is package data (the wheel check in .ci/run looks for it)."""
    import clphys
    assert (Path(clphys.__file__).parent / "py.typed").is_file()
    pyproject = ROOT / "pyproject.toml"
    if pyproject.exists():
        assert re.search(r'^clphys = \["py\.typed"\]', pyproject.read_text(), re.M)
