"""pandas in, labels out: hurst(), autocorrelation() and pattern_conformity() take a
Series (one series) or a DataFrame (a batch of its columns), give the NumPy results of
the same values, keep the column names as `labels`, and refuse NaN gaps and unevenly
spaced timestamps with a ValueError (or take them by an explicit option)."""

import subprocess
import sys

import numpy as np
import pytest

from clphys.timeseries import acrw_numpy, autocorrelation, hurst, pattern_conformity

pd = pytest.importorskip("pandas")

T = 3_000


def frame():
    rng = np.random.default_rng(11)
    walks = 100.0 + np.cumsum(rng.standard_normal((T, 3)), axis=0)
    index = pd.date_range("2020-01-01", periods=T, freq="D")
    return pd.DataFrame(walks, index=index, columns=["DAX", "SMI", "CAC"])


def test_series_and_frame_give_the_numpy_results_with_labels(device):
    df = frame()
    walks = df.to_numpy().T.copy()
    h = hurst(df["SMI"], 20, device=device)
    assert h.labels == ("SMI",)
    np.testing.assert_array_equal(h.S, hurst(walks[1], 20, device=device).S)
    hb = hurst(df, 20, q=[1, 2], device=device)
    assert hb.labels == ("DAX", "SMI", "CAC") and hb.S.shape == (3, 2, 20)
    np.testing.assert_array_equal(hb.S, hurst(walks, 20, q=[1, 2], device=device).S)
    r = df.diff().iloc[1:]
    a = autocorrelation(r, 15, device=device)
    assert a.labels == ("DAX", "SMI", "CAC") and a.rho.shape == (3, 16)
    np.testing.assert_array_equal(a.rho, autocorrelation(np.diff(walks, axis=1), 15,
                                                         device=device).rho)
    assert hurst(walks[0], 20, device=device).labels is None


def test_pattern_conformity_takes_a_frame(device):
    p = acrw_numpy(600, 0.044, seed=3)
    df = pd.DataFrame({"a": p, "b": p[::-1].copy()})
    r = pattern_conformity(df, 4, 3, 10.0, 100, device=device)
    assert r.labels == ("a", "b")
    want = pattern_conformity(np.stack([p, p[::-1]]), 4, 3, 10.0, 100, device=device)
    np.testing.assert_array_equal(r.Xi, want.Xi)
    one = pattern_conformity(df["a"], 4, 3, 10.0, 100, device=device)
    assert one.labels == ("a",) and one.Xi.shape == (3, 4)


@pytest.mark.parametrize("fn, args", [(hurst, (10,)), (autocorrelation, (10,)),
                                      (pattern_conformity, (3, 2, 10.0, 50))])
def test_nan_gaps_and_uneven_timestamps_are_refused(fn, args):
    df = frame().iloc[:400]
    gap = df.copy()
    gap.iloc[123, 1] = np.nan
    with pytest.raises(ValueError, match=r"\['SMI'\] has 1 NaN value.*2020-05-03"):
        fn(gap, *args, device="no-such-device")
    uneven = df.drop(df.index[[5, 6, 200]])
    with pytest.raises(ValueError, match="not evenly spaced"):
        fn(uneven["DAX"], *args, device="no-such-device")


def test_explicit_options_take_gaps_and_trading_days(device):
    df = frame().iloc[:1000]
    uneven = df.drop(df.index[[5, 6, 200]])
    got = hurst(uneven, 10, device=device, spacing="ignore")
    np.testing.assert_array_equal(got.S, hurst(uneven.to_numpy().T.copy(), 10,
                                               device=device).S)
    gap = df["CAC"].copy()
    gap.iloc[[10, 500]] = np.nan
    got = autocorrelation(gap.diff().iloc[1:], 10, device=device, nan="drop")
    want = autocorrelation(gap.diff().iloc[1:].dropna().to_numpy(), 10, device=device)
    np.testing.assert_array_equal(got.rho, want.rho)


def test_pandas_is_not_imported_for_numpy_input():
    code = ("import sys, numpy as np; from clphys.timeseries import _common; "
            "_common.labelled(np.arange(5.0)); print('pandas' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True)
    assert out.stdout.strip() == "False"
