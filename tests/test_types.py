"""Tests of numeric type parsing and printing (aieflow.numerics.types)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from aieflow.errors import ConfigError
from aieflow.numerics.types import FixedType, FloatType, Rounding, Saturation, parse_type


@settings(max_examples=300, deadline=None)
@given(
    st.integers(1, 80),
    st.integers(-100, 100),
    st.booleans(),
    st.sampled_from(list(Rounding)),
    st.sampled_from(list(Saturation)),
)
def test_fixed_round_trip(width, frac, signed, rounding, saturation):
    t = FixedType(width, frac, signed, rounding, saturation)
    text = t.to_string()
    assert text.startswith("fixed<" if signed else "ufixed<")
    assert parse_type(text) == t
    assert str(t) == text
    # case and spacing are not significant
    assert parse_type(" " + text.lower().replace(",", " , ") + " ") == t


@pytest.mark.parametrize("rounding", list(Rounding))
@pytest.mark.parametrize("saturation", list(Saturation))
def test_every_mode_combination_round_trips(rounding, saturation):
    for signed in (True, False):
        t = FixedType(16, 6, signed, rounding, saturation)
        assert parse_type(t.to_string()) == t


def test_parse_examples():
    assert parse_type("fixed<16,6,RND_CONV,SAT>") == FixedType(
        16, 10, True, Rounding.CONV_EVEN, Saturation.SATURATE
    )
    assert parse_type("ap_fixed<8,3>") == FixedType(8, 5, True, Rounding.FLOOR, Saturation.WRAP)
    assert parse_type("ap_ufixed<8,0,RND,SAT_SYM>") == FixedType(
        8, 8, False, Rounding.POS_INF, Saturation.SYMMETRIC
    )
    assert parse_type("ufixed<8,10>").frac == -2
    assert parse_type("ap_fixed<16,6,RND_CONV,SAT,0>") == parse_type("fixed<16,6,RND_CONV,SAT>")
    assert parse_type("ap_int<12>") == FixedType(12, 0, True, Rounding.FLOOR, Saturation.WRAP)
    assert parse_type("uint<5>") == FixedType(5, 0, False, Rounding.FLOOR, Saturation.WRAP)
    assert parse_type("ap_uint<5>").signed is False
    assert parse_type("int8") == FixedType(8, 0, True)
    assert parse_type("uint16") == FixedType(16, 0, False)
    assert parse_type("fp32") == FloatType("fp32") == parse_type("float32") == parse_type("float")
    assert parse_type("bf16") == FloatType("bf16") == parse_type("bfloat16")
    names = {
        "TRN": Rounding.FLOOR, "TRN_ZERO": Rounding.SYM_FLOOR, "RND": Rounding.POS_INF,
        "RND_ZERO": Rounding.SYM_ZERO, "RND_INF": Rounding.SYM_INF,
        "RND_MIN_INF": Rounding.NEG_INF, "RND_CONV": Rounding.CONV_EVEN, "CEIL": Rounding.CEIL,
        "SYM_CEIL": Rounding.SYM_CEIL, "CONV_ODD": Rounding.CONV_ODD,
    }  # fmt: skip
    for name, mode in names.items():
        assert parse_type(f"fixed<8,4,{name}>").rounding is mode
        assert parse_type(f"ap_fixed<8,4,AP_{name}>").rounding is mode  # hls4ml's spelling


def test_hls4ml_spells_the_modes_with_ap():
    assert parse_type("ap_fixed<16,6,AP_RND_CONV,AP_SAT>") == parse_type("fixed<16,6,RND_CONV,SAT>")
    assert parse_type("ap_ufixed<8,0,AP_RND,AP_SAT_SYM>") == FixedType(8, 8, False, Rounding.POS_INF,
                                                                       Saturation.SYMMETRIC)
    with pytest.raises(ConfigError, match="SAT_ZERO .* no AI Engine equivalent"):
        parse_type("ap_fixed<8,3,AP_RND,AP_SAT_ZERO>")
    with pytest.raises(ConfigError, match="unknown rounding 'AP_FOO'"):
        parse_type("ap_fixed<8,3,AP_FOO>")


def test_type_properties():
    t = FixedType(16, 10)
    assert (t.int_bits, t.min_code, t.max_code, t.scale) == (6, -32768, 32767, 2.0**-10)
    u = FixedType(8, 0, False)
    assert (u.min_code, u.max_code, u.c_type) == (0, 255, "uint8")
    assert FixedType(1, 0).min_code == -1 and FixedType(1, 0).max_code == 0
    assert [FixedType(w, 0).container_bits for w in (1, 8, 9, 16, 17, 32, 33, 64, 65)] == [
        8, 8, 16, 16, 32, 32, 64, 64, 128,
    ]  # fmt: skip
    assert FixedType(48, 0).c_type == "int64"
    assert t.with_modes(Rounding.CEIL, Saturation.WRAP) == FixedType(
        16, 10, True, Rounding.CEIL, Saturation.WRAP
    )
    assert FloatType("bf16").container_bits == 16 and FloatType("fp32").c_type == "float"


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ("fixed<16,6,RND,SAT_ZERO>", "SAT_ZERO in .* has no AI Engine equivalent"),
        ("fixed<16,6,RND_FOO>", "unknown rounding 'RND_FOO'"),
        ("fixed<16,6,RND,CLAMP>", "unknown overflow 'CLAMP'"),
        ("fixed<16>", "expected <width,integer_bits"),
        ("fixed<a,b>", "expected <width,integer_bits"),
        ("fixed<16,6.5>", "expected <width,integer_bits"),
        ("fixed<16,6,RND,SAT,0,1>", "expected <width,integer_bits"),
        ("ap_int<8,2>", "expected <width,integer_bits"),
        ("fixed16", "cannot parse numeric type"),
        ("fixed<16,6", "cannot parse numeric type"),
        ("float8", "cannot parse numeric type"),
        ("int7", "cannot parse numeric type"),
        ("", "cannot parse numeric type"),
        ("fixed<16,,6>", "empty field"),
        ("fixed<16,6,>", "empty field"),
        ("fixed<16,6,,SAT>", "empty field"),
        ("fixed<16,6,RND,SAT,3>", "saturation-bits field '3'"),
        ("fixed<16,6,RND,SAT,x>", "saturation-bits field 'x'"),
        ("fixed<0,0>", "width 0 is outside"),
        ("fixed<81,1>", "width 81 is outside"),
        ("int<-4>", "width -4 is outside"),
    ],
)
def test_parse_errors(text, match):
    with pytest.raises(ConfigError, match=match):
        parse_type(text)


def test_non_string_and_bad_float_name():
    with pytest.raises(ConfigError, match="must be a string"):
        parse_type(16)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="unknown float type"):
        FloatType("fp8")


def test_float16_parses_as_fp16():
    # AIE-MLv2's float16 (UG1529 "Basic Types"): 16-bit storage, the AIE API's scalar name
    for text in ("fp16", "float16"):
        t = parse_type(text)
        assert t == FloatType("fp16") and (t.container_bits, t.c_type, t.to_string()) == (16, "float16", "fp16")
