"""Exact percentiles past memory: values spilled to a file and selected digit by
digit give numpy's percentile to the bit, whatever the (finite) values and the bound."""
import numpy as np
import pytest

from traces.percentiles import Percentiles

QS = (0, 1, 33.3, 50, 90, 99, 99.9, 100)


def values(kind: str, n: int, rng) -> np.ndarray:
    if kind == "normal":
        return rng.normal(size=n)
    if kind == "few":  # step costs of a constant model: long runs of equal values
        return rng.integers(0, 4, size=n) * 0.016
    if kind == "gaps":
        return np.diff(np.cumsum(rng.exponential(0.01, size=n + 1)))
    return rng.choice([0.0, 5e-324, -1e300, 3.5, 1.7e308], size=n)  # "edges"


@pytest.mark.parametrize("kind", ["normal", "few", "gaps", "edges"])
@pytest.mark.parametrize("bound", [3, 100, 1 << 22])
def test_percentiles_are_numpys_whether_kept_or_spilled(kind, bound):
    rng = np.random.default_rng(bound)
    for n in (1, 2, 3, 10, 999, 3000):
        v = values(kind, n, rng)
        with Percentiles(in_memory=bound) as p:
            for i, part in enumerate(np.array_split(v, 4)):
                if i % 2:
                    p.extend(part)
                else:
                    for x in part:
                        p.add(float(x))
            assert len(p) == n
            assert (p._file is not None) == (n >= bound)
            got = p.percentiles(QS)
        want = [float(x) for x in np.percentile(v, QS)]
        assert [np.float64(g).tobytes() for g in got] == [np.float64(w).tobytes() for w in want]


def test_no_values_have_no_percentiles():
    with Percentiles(in_memory=2) as p:
        assert p.percentiles((50, 99)) == [None, None]


def test_closing_removes_the_file():
    p = Percentiles(in_memory=4)
    p.extend(np.arange(10.0))
    spilled = p._file
    assert spilled is not None and not spilled.closed
    p.close()
    assert spilled.closed and p._file is None
