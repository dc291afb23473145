"""Softmax and GELU variants (issue 19): ``activations: {softmax: table | integer, gelu: table |
polynomial}``.  The integer softmax (I-BERT's integer exp) and the polynomial GELU (I-BERT's i-GELU)
against independent references written here from the paper's constants (Kim et al., I-BERT,
arXiv:2101.01321: exp(p) ~ 0.3585 (p + 1.353)^2 + 0.344 on (-ln 2, 0]; erf(v) ~ sgn(v) (-0.2888
(min(|v|, 1.769) - 1.769)^2 + 1)) in plain Python integers (floor division where the code
multiplies by a reciprocal), on random codes, extreme logits and ties; their error against float;
the config refusing unknown variants by name; a DAG design with both variants running bit for bit
on x86 (VEK280 int8, VEK385 int16)."""

from __future__ import annotations

import math
import random

import numpy as np
import pytest
import torch
from torch import nn

import aieflow
from aieflow.errors import AieflowError
from aieflow.numerics.types import FixedType
from aieflow.ops import activation as act

P = 14  # the integer forms' grid 2^-14


def _ref_iexp(d: int, frac: int) -> int:
    """e = round(2^15 exp(-d 2^-frac)) the I-BERT way, plain integers, floor division by ln 2."""
    l2 = round(math.log(2) * 2**P)
    big = d << (P - frac) if frac <= P else d >> (frac - P)
    z = big // l2
    if z >= 30:
        return 0
    p = big - z * l2  # exp(-big) = 2^-z exp(-p), p in [0, ln 2)
    b, c, a = round(1.353 * 2**P), round(0.344 / 0.3585 * 2 ** (2 * P)), round(0.3585 * 2**15)
    num = a * ((b - p) ** 2 + c)
    return (num + 2 ** (27 + z)) >> (28 + z)


def _ref_softmax(row: list[int], frac: int, fo: int, hi: int, table: bool) -> list[int]:
    m = max(row)
    if table:  # the exp table variant: E[min((m - x) >> SD, n - 1)], E rounded half to even
        sd = max(0, frac - 8)
        span = (1 << 16) - 1

        def entry(k):
            t = (k << sd) + ((1 << (sd - 1)) if sd else 0)
            v = math.exp(-t / 2**frac) * 2**15
            return round(v)  # Python's round: half to even

        es = [entry(min((m - x) >> sd, span >> sd)) for x in row]
    else:
        es = [_ref_iexp(m - x, frac) for x in row]
    s = sum(es)
    inv = (2**46 + s // 2) // s
    return [min(hi, (e * inv + 2 ** (45 - fo)) >> (46 - fo)) for e in es]


def _ref_igelu(x: int, frac: int, fo: int, lo: int, hi: int) -> int:
    c1, bc, a = round(2**16 / math.sqrt(2)), round(1.769 * 2**P), round(-0.2888 * 2**16)
    s = frac + 2
    v = (abs(x) * c1 + 2 ** (s - 1)) >> s if s > 0 else abs(x) * c1 * 2 ** (-s)
    w = min(v, bc) - bc
    lm = 2 ** (2 * P) + ((a * w * w) >> 16)
    sgn = (x > 0) - (x < 0)
    t = frac + 2 * P + 1 - fo
    y = (x * (2 ** (2 * P) + sgn * lm) + 2 ** (t - 1)) >> t
    return max(lo, min(hi, y))


def _rows(rng: random.Random, tx: FixedType, n: int, count: int) -> list[list[int]]:
    rows = [[rng.randint(tx.min_code, tx.max_code) for _ in range(n)] for _ in range(count)]
    rows += [[rng.choice((tx.min_code, tx.max_code)) for _ in range(n)] for _ in range(count // 4)]  # extremes
    rows += [[v] * n for v in (tx.min_code, 0, tx.max_code)]  # ties
    rows += [[tx.max_code, tx.max_code] + [tx.min_code] * (n - 2)]  # a tie at the top, the rest far below
    return rows


@pytest.mark.parametrize("width,frac,fo", [(8, 4, 7), (8, 0, 7), (8, 7, 6), (16, 10, 15), (16, 13, 15), (16, 20, 12)])
def test_integer_softmax_matches_an_independent_integer_reference(width, frac, fo):
    tx, out = FixedType(width, frac), FixedType(width, fo)
    rng = random.Random(width * 100 + frac)
    rows = _rows(rng, tx, 16, 60)
    got = act.softmax_codes(np.array(rows), act.iexp_constants(), 0, out, iexp_up=act.iexp_up(frac))
    want = [_ref_softmax(r, frac, fo, out.max_code, table=False) for r in rows]
    assert got.tolist() == want
    # every d of an int16 difference: the integer exp itself
    d = np.arange(0, 1 << width)
    assert act.iexp_codes(d, act.iexp_up(frac), act.iexp_constants()).tolist() == [_ref_iexp(int(v), frac) for v in d]


@pytest.mark.parametrize("width,frac", [(8, 4), (16, 10)])
def test_table_softmax_still_matches_its_reference(width, frac):
    tx, out = FixedType(width, frac), FixedType(width, width - 1)
    rows = _rows(random.Random(frac), tx, 16, 40)
    table, sd = act.exp_table(tx)
    got = act.softmax_codes(np.array(rows), table, sd, out)
    assert got.tolist() == [_ref_softmax(r, frac, width - 1, out.max_code, table=True) for r in rows]


def test_integer_exp_error_is_within_the_polynomial_bound():
    """I-BERT's polynomial is within 0.0022 of exp on (-ln 2, 0] (relative 0.31 %); scaled by 2^-z,
    plus half an LSB of the 2^-15 grid, plus the 2^-14 input grid's rounding of ln 2 (< z 2^-15)."""
    for frac in (4, 10, 14):
        d = np.arange(0, 1 << 16)
        e = act.iexp_codes(d, act.iexp_up(frac), act.iexp_constants()) / 2**15
        x = d / 2**frac
        z = np.floor(x / math.log(2))
        bound = 0.0022 * 2.0**-z + 2.0**-16 + z * 2.0**-15 * np.exp(-x)
        assert np.all(np.abs(e - np.exp(-x)) <= bound)


@pytest.mark.parametrize("width,frac,fo", [(8, 4, 4), (8, 2, 5), (8, 6, 3), (16, 11, 11), (16, 8, 12)])
def test_polynomial_gelu_matches_an_independent_integer_reference(width, frac, fo):
    tx, out = FixedType(width, frac), FixedType(width, fo)
    if width == 8:
        codes = list(range(tx.min_code, tx.max_code + 1))
    else:
        rng = random.Random(frac)
        codes = [tx.min_code, tx.min_code + 1, -1, 0, 1, tx.max_code] + [rng.randint(tx.min_code, tx.max_code)
                                                                         for _ in range(4000)]
    got = act.igelu_codes(np.array(codes), tx, out, act.igelu_constants())
    assert got.tolist() == [_ref_igelu(c, frac, fo, out.min_code, out.max_code) for c in codes]


def test_polynomial_gelu_error_is_within_ibert_bound():
    """I-BERT's i-GELU is within 0.0182 of GELU (erf form); plus half an output LSB and the 2^-14
    argument grid."""
    tx, out = FixedType(16, 11), FixedType(16, 11)
    x = np.arange(tx.min_code, tx.max_code + 1)
    y = act.igelu_codes(x, tx, out, act.igelu_constants()) / 2**11
    ref = np.array([v / 2 * (1 + math.erf(v / math.sqrt(2))) for v in (x / 2**11).tolist()])
    assert np.abs(y - ref).max() <= 0.0182 + 2**-12 + 1e-4


def test_unknown_variants_are_refused_by_name():
    from aieflow.config import parse_config

    with pytest.raises(AieflowError, match=r"activations.softmax: unknown variant 'exp2'.*table, integer"):
        parse_config({"activations": {"softmax": "exp2"}})
    with pytest.raises(AieflowError, match=r"activations.gelu: unknown variant 'cubic'.*table, polynomial"):
        parse_config({"layers": {"x": {"activations": {"gelu": "cubic"}}}})
    with pytest.raises(AieflowError, match=r"unknown function 'relu'.*softmax, gelu"):
        parse_config({"activations": {"relu": "table"}})
    c = parse_config({"activations": {"softmax": "integer", "gelu": "polynomial"}})
    assert parse_config(c.to_json()).activations == c.activations  # round trip


class Mlp(nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.b = nn.Linear(16, 32), nn.Linear(32, 16)

    def forward(self, x):
        return torch.softmax(self.b(nn.functional.gelu(self.a(x))), dim=-1)


def _data(n: int, seed: int) -> np.ndarray:
    return (np.random.default_rng(seed).standard_normal((n, 16)) * 2.0).astype(np.float32)


def test_integer_variants_are_refused_for_float_precisions():
    x = _data(16, 1)
    for acts, what in (({"softmax": "integer"}, "activations.softmax: integer"),
                       ({"gelu": "polynomial"}, "activations.gelu: polynomial")):
        with pytest.raises(AieflowError, match=what):
            aieflow.compile(Mlp().eval(), device="vek280", example_input=x[:8], calibration=x,
                            config={"precision": "bf16", "activations": acts})


@pytest.mark.parametrize("device,precision,tol", [("vek280", "int8", 0.03), ("vek385", "int16", 0.01)])
def test_variants_compile_predict_and_run_bit_exact_on_x86(device, precision, tol):
    torch.manual_seed(19)
    m = Mlp().eval()
    x = _data(64, 19)
    d = aieflow.compile(m, device=device, example_input=x[:16], calibration=x,
                        config={"precision": precision, "batch": 16,
                                "activations": {"softmax": "integer", "gelu": "polynomial"}})
    assert type(d).__name__ == "DagDesign"  # the softmax is not fused into the Dense (per-element forms: DAG only)
    variants = {n.op: n.types.variant for n in d.graph.nodes if n.op in ("activation", "softmax")}
    assert variants == {"activation": "polynomial", "softmax": "integer"}
    (name,) = [p for p in d.files if p.endswith("layers.h")]
    text = d.files[name]
    assert "static constexpr bool POLY = true;" in text and "static constexpr bool IEXP = true;" in text
    ref = m(torch.from_numpy(x)).detach().numpy()
    assert np.abs(d.predict(x) - ref).max() < tol
    v = d.verify(samples=16)  # the verify's edge rows, then random codes
    assert v.ok, v.verdict()
    v = d.verify(np.concatenate([x[:8] * 8.0, -x[8:16] * 8.0]))  # saturating inputs, both signs
    assert v.ok, v.verdict()
