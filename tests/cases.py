"""Shared test parameters."""

# Every (device, precision) pair the compiler supports: templates, plans and C++ are checked on all.
GENERATION_PRECISIONS = [
    ("vck190", "int8"),
    ("vck190", "int16"),
    ("vck190", "a16w8"),
    ("vck190", "fp32"),
    ("vek280", "int8"),
    ("vek280", "int16"),
    ("vek280", "a16w8"),
    ("vek280", "bf16"),
    ("vek385", "int8"),
    ("vek385", "int16"),
    ("vek385", "bf16"),
]
