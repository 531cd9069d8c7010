"""Codec options checked against numpy computations of the papers'
formulas: TernGrad's gradient clipping (Wen et al. 2017, section 3.3; the
reference's clip_gradients_by_stddev) and QSGD with any number of levels
(Alistarh et al. 2017, section 3.1)."""
import struct

import numpy as np
import pytest

import rumor


def _vector(n=256, seed=3):
    """Gaussian values with a few outliers well past 2.5 sigma."""
    x = np.random.default_rng(seed).normal(0.1, 1.0, n).astype(np.float32)
    x[[5, 77, n - 56]] = [9.0, -12.0, 7.5]
    return x


def _mean_decoded(codec, x, draws):
    acc = np.zeros(x.shape, np.float64)
    for t in range(draws):
        acc += codec.decode(codec.encode(x, seed=9, counter=t), like=x)
    return acc / draws


def test_terngrad_clip__scaler_and_expectation__match_numpy():
    x = _vector()
    sigma = x.astype(np.float64).std()  # population, about the mean
    clipped = np.clip(x, -2.5 * sigma, 2.5 * sigma)
    c = rumor.Codec("terngrad:bucket=256,clip=2.5")
    payload = c.encode(x, seed=9, counter=0)
    (scaler,) = struct.unpack_from("<f", payload, 12)
    assert scaler == pytest.approx(np.abs(clipped).max(), rel=1e-6)
    assert scaler == pytest.approx(2.5 * sigma, rel=1e-6)
    one = c.decode(payload, like=x)
    assert set(np.unique(np.abs(one))) <= {0.0, np.float32(scaler)}
    draws = 3000
    mean = _mean_decoded(c, x, draws)
    # each value is scaler * Bernoulli(|v| / scaler): std <= scaler / 2
    tol = 5 * scaler / 2 / np.sqrt(draws)
    assert np.max(np.abs(mean - clipped)) < tol
    # and biased for x where it was clipped (the point of the option)
    assert abs(mean[77] - x[77]) > 5


def test_terngrad_clip__off__default_bytes():
    x = _vector()
    plain = rumor.Codec("terngrad:bucket=64")
    off = rumor.Codec("terngrad:bucket=64,clip=0")
    assert off.spec == "terngrad:bucket=64"
    assert plain.encode(x, 1, 2) == off.encode(x, 1, 2)
    assert plain.encode(x, 1, 2) != rumor.Codec(
        "terngrad:bucket=64,clip=2.5").encode(x, 1, 2)


@pytest.mark.parametrize("levels", [1, 2, 4, 16])
def test_qsgd_levels__expectation_and_grid__match_numpy(levels):
    x = _vector(n=128)
    c = rumor.Codec(f"qsgd:levels={levels},bucket=128,code=elias")
    norm = np.sqrt(np.sum(x.astype(np.float64) ** 2))
    one = c.decode(c.encode(x, seed=9, counter=0), like=x)
    # every value on the grid {-s..s} norm / s, within one level of x
    lv = np.abs(one) / (norm / levels)
    assert np.allclose(lv, np.round(lv), atol=1e-4)
    assert np.all(np.abs(one - x) <= norm / levels * (1 + 1e-5))
    draws = 3000
    mean = _mean_decoded(c, x, draws)
    tol = 5 * (norm / levels) / 2 / np.sqrt(draws)
    assert np.max(np.abs(mean - x)) < tol
