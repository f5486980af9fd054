"""Sphinx configuration: the documentation site of clphys (docs/index.md says why Sphinx).

Build: pip install ".[docs]" && sphinx-build -W -b html docs docs/_build/html
"""
import logging
import os
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("MPLBACKEND", "Agg")
logging.getLogger("pyopencl").setLevel(logging.WARNING)     # not a line per kernel build

project = "clphys"
author = "the clphys authors"
copyright = "2026, the clphys authors"
try:
    from clphys import __version__ as release
except ImportError:          # the docs build needs no device to import clphys
    release = "unknown"
version = release

extensions = [
    "myst_parser",
    "numpydoc",
    "sphinx.ext.autodoc",
    "sphinx.ext.autosummary",
    "sphinx.ext.mathjax",
    "sphinx_gallery.gen_gallery",
]
source_suffix = {".rst": "restructuredtext", ".md": "markdown"}
root_doc = "index"
templates_path = ["_templates"]
exclude_patterns = ["_build", "_templates", "examples/README.txt", "auto_examples/*.ipynb", "auto_examples/*.py",
                    "auto_examples/*.zip", "auto_examples/*.md5", "auto_examples/*.codeobj.json"]
myst_enable_extensions = ["dollarmath"]
myst_heading_anchors = 3
suppress_warnings = ["myst.xref_missing"]

autosummary_generate = True
autosummary_ignore_module_all = False      # document exactly each module's __all__
autodoc_default_options = {"members": True, "inherited-members": False}
numpydoc_show_class_members = False
numpydoc_class_members_toctree = False

sphinx_gallery_conf = {
    "examples_dirs": "examples",
    "gallery_dirs": "auto_examples",
    # Only the tutorials (plot_*.py) run at build time, each sized for seconds on a CPU.
    "filename_pattern": r"/plot_",
    "download_all_examples": False,
    "remove_config_comments": True,
    "within_subsection_order": "FileNameSortKey",
}

html_theme = "furo"
html_title = f"clphys {release}"


# The library's docstrings are numpydoc sections of plain text: |x| is an absolute value and
# a*b a product, not reStructuredText substitutions or emphasis. Escape both outside
# backquotes (bullets "* " at the start of a line stay bullets), before numpydoc parses them.
_QUOTED = re.compile(r"(``.*?``|`[^`]*`)")


def _plain(line):
    bullet = re.match(r"\s*\* ", line)
    head, rest = (line[:bullet.end()], line[bullet.end():]) if bullet else ("", line)
    parts = _QUOTED.split(rest)
    for i in range(0, len(parts), 2):       # the text outside backquotes
        parts[i] = parts[i].replace("|", r"\|").replace("*", r"\*")
    return head + "".join(parts)


def _escape_plain_text(app, what, name, obj, options, lines):
    lines[:] = [_plain(line) for line in lines]


def setup(app):
    app.connect("autodoc-process-docstring", _escape_plain_text, priority=100)
