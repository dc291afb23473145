"""A compact or grid recurrent layer behind a Conv1d front end, as modelled (issue 17): the
Conv1d 5 -> 8 -> 6 -> GRU 7 int16 case of ``tests/test_recurrent_mapped.py`` (one definition: the
test's ``_conv_gru``), compiled row-wise for each device, then its layer costed as a compact tile
and as grids of 2 and 3 chains (``plan.build_compact`` / ``build_grid``: not generated behind a
front end, so built directly).  Per mapping: the design estimate (``model.estimate_recurrent``,
the stage graph of the mapped graph) and the search's point (``select.mapping_point``, what
``explore`` ranks), interval and sequence latency in ns, and the bound.

    python benchmarks/recurrent_front_compact.py [--markdown]

Deterministic (a model, no timing); needs torch and pytest (the test module holds the model).
"""

from __future__ import annotations

import argparse
import importlib.util
from pathlib import Path


def _case():
    path = Path(__file__).resolve().parents[1] / "tests" / "test_recurrent_mapped.py"
    spec = importlib.util.spec_from_file_location("recurrent_mapped_cases", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod._conv_gru


def rows() -> list[tuple[str, str, float, float, float, float, str]]:
    from aieflow.recurrent.model import estimate_recurrent
    from aieflow.recurrent.plan import build_compact, build_grid
    from aieflow.recurrent.select import mapping_point

    conv_gru, out = _case(), []
    for device in ("vck190", "vek280", "vek385"):
        d = conv_gru(device)
        dims, dev = d.mappings[0].dims, d.device
        e = d.estimate()
        out.append(
            (
                dev.board,
                "row-wise (compiled)",
                e.interval_ns,
                e.sequence_latency_ns,
                e.interval_ns,
                e.sequence_latency_ns,
                e.bound,
            )
        )
        for name, m in (
            ("compact", build_compact(dims, dev)),
            ("grid, 2 chains", build_grid(dims, dev, 2)),
            ("grid, 3 chains", build_grid(dims, dev, 3)),
        ):
            e, p = estimate_recurrent(m, dev), mapping_point(m, dev)
            out.append(
                (
                    dev.board,
                    name,
                    e.interval_ns,
                    e.sequence_latency_ns,
                    p.interval_ns,
                    p.latency_ns,
                    e.bound,
                )
            )
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--markdown", action="store_true", help="a markdown table")
    args = ap.parse_args()
    head = (
        "device",
        "mapping",
        "interval ns",
        "sequence ns",
        "point interval ns",
        "point latency ns",
        "bound",
    )
    table = [
        head,
        *(
            (b, n, f"{i:,.1f}", f"{s:,.1f}", f"{pi:,.1f}", f"{pl:,.1f}", bd)
            for b, n, i, s, pi, pl, bd in rows()
        ),
    ]
    if args.markdown:
        print("| " + " | ".join(head) + " |\n|" + " --- |" * len(head))
        print("\n".join("| " + " | ".join(r) + " |" for r in table[1:]))
    else:
        width = [max(len(r[c]) for r in table) for c in range(len(head))]
        print(
            "\n".join("  ".join(x.ljust(w) for x, w in zip(r, width, strict=True)) for r in table)
        )


if __name__ == "__main__":
    main()
