"""Every example in README.md and docs/*.md runs, prints no unexplained warning, and
prints the numbers its text claims.

What runs: every fenced ```python block (the blocks of one file in order, in one
namespace, in a temporary folder), and in every ```bash / ```sh / ```console block the
commands that call ``clphys`` or ``python`` (``clphys`` as ``python -m clphys``; other
commands such as mkdir or bash set a machine up and are not examples of clphys). Fences
without a language (command synopses with ``[--options]``) are text.

GPU-sized examples: a comment ``# gpu-size: OLD -> NEW[; OLD -> NEW ...]`` in a block
replaces each OLD by NEW in that block before it runs on a CPU, so the code that runs is
the code on the page with smaller sizes (each OLD must occur in the block). With
``CLPHYS_DOCS_FULL_SIZE=1`` (on a GPU) the blocks run as written.

A command is skipped only when it matches EXEMPT (each with its reason); numbers are
checked by CHECKS, keyed by (file, a line of the block).
"""
import contextlib
import io
import os
import pathlib
import re
import shlex
import subprocess
import sys
import warnings

import numpy as np
import pytest

import clphys

ROOT = pathlib.Path(__file__).resolve().parents[1]
FILES = ["README.md"] + sorted(p.relative_to(ROOT).as_posix() for p in (ROOT / "docs").glob("*.md"))
FENCE = re.compile(r"^```([A-Za-z]*)[^\n]*\n(.*?)^```[ \t]*$", re.DOTALL | re.MULTILINE)
SHELL = {"bash", "sh", "console", "shell"}
GPU_SIZE = re.compile(r"#\s*gpu-size:\s*(.+)$", re.MULTILINE)
FULL_SIZE = os.environ.get("CLPHYS_DOCS_FULL_SIZE") == "1"

# Shell commands that are not run: (regular expression on the command, reason).
EXEMPT = [
    (r"^pip |^python3? -m venv|^\. |^module |^env MPICC|^export |^D=|^chmod",
     "installation and environment set-up, done by CI itself (.ci/run)"),
    (r"^pytest", "the test suite itself"),
    (r"mpiexec|mpirun|srun|mpi4py", "MPI launches: tests/test_mpi_*.py run them on PoCL"),
    (r"benchmarks/bench_", ("benchmarks measure speed for minutes (GPU-sized, or --quick on a CPU); "
                            "tests/test_benchmark_results.py checks their recorded figures")),
    (r"^python3? -c \"import glob, zipfile", "unpacks a downloaded MPICH wheel (no network here)"),
    (r"libintelocl", "registers Intel's CPU runtime with the ICD loader (machine set-up)"),
    (r"record_portability_hashes", "maintainers' commands that rewrite tests/portability_hashes.json"),
]

# Warnings an example may print because its text explains them: (file, message regex).
EXPLAINED_WARNINGS = []


def _blocks(name):
    text = (ROOT / name).read_text()
    return [(m.group(1).lower(), m.group(2), text.count("\n", 0, m.start()) + 1)
            for m in FENCE.finditer(text)]


def shrink(code):
    """Apply the block's ``# gpu-size:`` rules (unless CLPHYS_DOCS_FULL_SIZE=1)."""
    lines = code.splitlines(keepends=True)
    is_rule = [bool(GPU_SIZE.search(line)) for line in lines]
    rules = [r.split("->") for line in lines for m in GPU_SIZE.finditer(line)
             for r in m.group(1).split(";")]
    for rule in rules:
        assert len(rule) == 2, f"a gpu-size rule is OLD -> NEW, got {'->'.join(rule)!r}"
        old = rule[0].strip()
        assert any(old in line for line, r in zip(lines, is_rule) if not r), \
            f"gpu-size: {old!r} does not occur in the block"
    if FULL_SIZE:
        return code
    for old, new in rules:
        lines = [line if r else line.replace(old.strip(), new.strip()) for line, r in zip(lines, is_rule)]
    return "".join(lines)


def shell_commands(code, lang):
    """The commands of a shell block: lines (continuations joined), split at ``&&``."""
    lines = []
    for line in code.replace("\\\n", " ").splitlines():
        if lang == "console":
            if not line.startswith("$ "):
                continue
            line = line[2:]
        line = re.sub(r"(^|\s)#.*$", "", line).strip()
        lines += [part.strip() for part in line.split("&&") if part.strip()]
    return lines


def exemption(command):
    for pattern, reason in EXEMPT:
        if re.search(pattern, command):
            return reason
    return None


def calls_clphys_or_python(command):
    words = [w for w in shlex.split(command) if not re.match(r"^[A-Z_]+=", w)]
    return bool(words) and words[0] in ("clphys", "python", "python3")


def run_shell(command, cwd):
    words = shlex.split(command)
    # the clphys this test imported (the checkout, or the installed package in CI)
    here = str(pathlib.Path(clphys.__file__).resolve().parents[1])
    env = dict(os.environ, MPLBACKEND="Agg", PYTHONPATH=os.pathsep.join(
        [here] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]))
    while words and re.match(r"^[A-Z_]+=", words[0]):
        key, value = words.pop(0).split("=", 1)
        env[key] = value
    if words[0] == "clphys":
        words = [sys.executable, "-m", "clphys"] + words[1:]
    elif words[0] in ("python", "python3"):
        words = [sys.executable] + words[1:]
    else:
        raise AssertionError(f"a shell example runs neither clphys nor python: {command!r}")
    proc = subprocess.run(words, cwd=cwd, env=env, capture_output=True, text=True, timeout=600, check=False)
    assert proc.returncode == 0, f"{command!r} exited {proc.returncode}:\n{proc.stdout}\n{proc.stderr}"
    return proc.stdout, proc.stderr


def _within(value, error, exact, sigmas=4.0):
    assert abs(value - exact) <= sigmas * error, f"{value} +- {error} is not {exact} within {sigmas} sigma"


# -- the numbers the text claims, per (file, block index) ------------------------------


def check_ising_sample(s, L, T):
    from clphys.exact import finite_lattice, onsager_magnetization
    exact = finite_lattice(L, T)
    _within(*s.mean_energy(), exact.energy)
    _within(*s.specific_heat(), exact.specific_heat)
    if T < 2.2:           # ordered and far from Tc: |M|/N of a large torus is Onsager's m(T)
        _within(*s.abs_magnetization(), onsager_magnetization(T))


def check_muca(res, L):
    from clphys.exact import density_of_states
    E, ln_g = density_of_states(L)
    assert np.array_equal(res.energies, E)
    assert np.all(np.abs(res.ln_g - ln_g) <= 4 * res.ln_g_err), "ln g off the exact one by > 4 errors"


NUMBER = re.compile(r"(-?\d+\.?\d*)\((\d+)\)\s+exact\s+(-?\d+\.\d+)")


def check_cli_exact(ns, out):
    """Every `value(error) ... exact X` the command prints holds within 4 errors."""
    found = NUMBER.findall(out)
    assert found, f"no value compared with an exact one in:\n{out}"
    for value, error, exact in found:
        decimals = len(value.split(".")[1]) if "." in value else 0
        _within(float(value), int(error) * 10.0 ** -decimals, float(exact))


def check_readme_api(ns, out):
    check_ising_sample(ns["s"], ns["lat"].shape[0], 2.0)
    check_muca(ns["res"], 8)


def check_ising_quick_start(ns, out):
    check_ising_sample(ns["s"], ns["lat"].shape[0], 2.0)
    u4, _ = ns["s"].binder()
    assert abs(u4 - 2 / 3) < 1e-4, u4          # ordered: 2/3 up to fluctuations of O(1/N)


def check_ising_table(ns, out):
    from clphys.exact import finite_lattice
    from clphys.stats import jackknife
    R, L, s = ns["R"], ns["L"], ns["s"]
    for i, T in enumerate(ns["temps"]):
        mean, err = jackknife(s.energy[i * R:(i + 1) * R].mean(axis=1), n_blocks=R)
        _within(mean, err, finite_lattice(L, T).energy)


def check_muca_quick_start(ns, out):
    check_muca(ns["res"], 8)
    check_muca(ns["res8"], 8 if FULL_SIZE else 4)
    from clphys.exact import finite_lattice
    c = ns["c"]
    exact = finite_lattice(8, c.T)
    assert np.all(np.abs(c.energy - exact.energy) <= 5 * c.energy_err)
    assert np.all(np.abs(c.specific_heat - exact.specific_heat) <= 5 * c.specific_heat_err)


def check_timeseries_tour(ns, out):
    from clphys.exact import acrw_increment_autocorrelation
    r = ns["r"]
    _within(r.rho[1], r.rho_err[1], acrw_increment_autocorrelation(0.044, 1))
    assert abs(r.rho[1] - -0.425) < 0.01
    assert ns["a"].method == "fft"
    assert ns["m"].S.shape[1:] == (3, 1024)


def check_dfa(ns, out):
    r = ns["r"]
    assert abs(r.H - 0.711) < 0.0005 and abs(r.H_err - 0.017) < 0.0005   # the text's numbers
    _within(r.H, r.H_err, 0.7)
    assert ns["b"].H.shape == (64,)


def check_dfa_pandas(ns, out):
    assert ns["r"].labels == ("DAX", "SMI", "CAC", "FTSE")


# (file, a line that occurs in exactly one runnable block of it): the check of that block
CHECKS = {
    ("README.md", 'pip install ".[pocl]" && clphys ising'): check_cli_exact,
    ("README.md", "lat = ising.Ising2D(4096"): check_readme_api,
    ("docs/ising.md", "s = lat.sample(5000, every=2)"): check_ising_quick_start,
    ("docs/ising.md", "temps, R, L = [1.8, 2.0, 2.269, 2.5, 3.0], 64, 32"): check_ising_table,
    ("docs/muca.md", "sim = muca.Multicanonical(32"): check_muca_quick_start,
    ("docs/timeseries.md", "r = autocorrelation(np.diff(p), max_lag=20)"): check_timeseries_tour,
    ("docs/timeseries.md", "x = fgn_davies_harte(2**16, 0.7, seed=3)"): check_dfa,
    ("docs/timeseries.md", "r = dfa(np.log(prices).diff().dropna())"): check_dfa_pandas,
}


def _check_of(name, code):
    found = [check for (file, marker), check in CHECKS.items() if file == name and marker in code]
    return found[0] if found else None


def _run_python(code, ns, name, line):
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(code, f"{name}:{line}", "exec"), ns)      # noqa: S102 - the docs' own examples
    return out.getvalue()


def _unexplained(name, caught):
    allowed = [re.compile(p) for f, p in EXPLAINED_WARNINGS if f == name]
    return [f"{w.category.__name__}: {w.message}" for w in caught
            if not any(p.search(str(w.message)) for p in allowed)]


def _run_block(name, lang, code, line, ns, cwd, check):
    """Run one block (check: its CHECKS entry or None); returns how many commands or blocks ran."""
    if lang == "python":
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            out = _run_python(code, ns, name, line)
        bad = _unexplained(name, caught)
        assert not bad, f"{name}:{line} warns without the text saying why:\n" + "\n".join(bad)
        if check:
            check(ns, out)
        return 1
    ran, outs = 0, []
    for command in shell_commands(code, lang):
        if not calls_clphys_or_python(command) or exemption(command):
            continue
        out, err = run_shell(command, cwd)
        bad = [w for w in (out + err).splitlines() if re.match(r"\s*\w*warning\b", w, re.IGNORECASE)
               and not any(re.search(p, w) for f, p in EXPLAINED_WARNINGS if f == name)]
        assert not bad, f"{name}:{line} {command!r} warns:\n" + "\n".join(bad)
        outs.append(out)
        ran += 1
    if check:
        check(None, "\n".join(outs))
    return ran


@pytest.mark.slow
@pytest.mark.parametrize("name", FILES)
def test_examples(name, tmp_path, monkeypatch):
    """The blocks of one file in order; a failing block is reported and the others still run."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MPLBACKEND", "Agg")
    ns = {"__name__": "__docs__"}
    ran, failures = 0, []
    for lang, code, line in _blocks(name):
        if lang != "python" and lang not in SHELL:
            continue
        try:
            ran += _run_block(name, lang, shrink(code), line, ns, tmp_path, _check_of(name, code))
        except Exception as exc:          # noqa: BLE001 - every block's failure is reported
            failures.append(f"{name}:{line}: {type(exc).__name__}: {exc}")
    assert not failures, "\n\n".join(failures)
    if ran == 0:
        pytest.skip(f"{name}: every block is text or exempt")


def test_checks_and_rules_name_runnable_blocks():
    """A check or a gpu-size rule that no longer matches its block fails here, not silently."""
    for name, marker in CHECKS:
        holders = [lang for lang, code, _ in _blocks(name) if marker in code]
        assert len(holders) == 1 and holders[0] in SHELL | {"python"}, (name, marker, holders)
    for name in FILES:
        for _, code, _ in _blocks(name):
            shrink(code)
