"""A compiled design: the planned graph, its placement and project, plus the bit-exact emulator."""

from __future__ import annotations

import importlib
import json
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np

from . import design_schema, integrity
from .atomic import save_directory, write_files
from .config import Config, parse_config
from .devices import Device, get_device
from .errors import AieflowError, ConfigError
from .graph_io import (
    graph_arrays,
    graph_from_json,
    graph_to_json,
    json_default,
    read_weights,
    write_weights,
)
from .inputs import mask_keep, real_array
from .ir import Graph, Node, Tensor
from .numerics import fast, fixed
from .numerics.requant import affine_dequantize, affine_quantize
from .numerics.types import AffineType, FixedType, FloatType, NumericType
from .ops.registry import family
from .passes.place import Placement
from .perf.system import attach as system_attach

FORMAT = "aieflow-design"
FORMAT_VERSION = 1
DEFAULT_CHUNK = 65536  # samples per emulator chunk: bounds memory for any input size


@dataclass
class Design:
    graph: Graph
    device: Device
    config: Config
    placement: Placement
    source: str = ""
    files: dict[str, str] = field(default_factory=dict)
    timings: tuple[tuple[str, float], ...] = ()
    exploration: Any = None  # passes.search.Exploration when the config had a target

    # ------------------------------------------------------------------ numerics

    @property
    def input_tensor(self) -> Tensor:
        return self.graph.tensors[self.graph.inputs[0]]

    @property
    def output_tensor(self) -> Tensor:
        return self.graph.tensors[self.graph.outputs[0]]

    @property
    def input_type(self) -> NumericType:
        return self.input_tensor.dtype

    @property
    def output_type(self) -> NumericType:
        return self.output_tensor.dtype

    def _check_input(self, x: Any) -> np.ndarray:
        x = real_array(x)
        shape = self.input_tensor.shape
        if x.shape == tuple(shape):
            x = x[None]
        if x.shape[1:] != tuple(shape):
            raise ConfigError(
                f"input has shape {x.shape}; the design expects (N, {', '.join(map(str, shape))})"
            )
        return x

    def quantise_input(self, x: Any) -> np.ndarray:
        """Float samples -> what the graph input carries (codes, or float32 / bf16 / fp16 values)."""
        x = self._check_input(x)
        if not isinstance(self.input_type, FloatType) and np.issubdtype(x.dtype, np.floating) and np.isnan(x).any():
            raise ConfigError("input contains NaN")
        return self._quantise_checked(x)

    def _quantise_checked(self, x: np.ndarray, float_codes: bool = False) -> np.ndarray:
        """:meth:`quantise_input` of a checked input; ``float_codes``: affine codes as float32 (what
        the emulator's float paths take without a conversion; ``predict`` uses them)."""
        t = self.input_type
        if isinstance(t, FloatType):
            x32 = x.astype(np.float32)
            return fixed.round_float(x32, t.name)
        if isinstance(t, AffineType):
            return affine_quantize(x, t, float_codes=float_codes)
        codes = fast.quantize_float(x, t)
        return codes if codes is not None else fixed.quantize(x.astype(np.float64), t)

    def dequantise_output(self, y: np.ndarray) -> np.ndarray:
        t = self.output_type
        if isinstance(t, FloatType):
            return y.astype(np.float32)
        if isinstance(t, AffineType):
            return affine_dequantize(y, t)
        return fixed.to_real(y, t)

    def run(self, xq: np.ndarray, mask: np.ndarray | None = None) -> np.ndarray:
        """Emulate the design on graph-input codes (and a run-time key padding mask's keep bytes,
        :meth:`quantise_mask`); returns graph-output codes (integer-exact)."""
        y = self.trace(xq, keep=False, mask=mask)[self.graph.outputs[0]]
        return y.astype(np.int64) if isinstance(self.output_type, FixedType | AffineType) else y

    @property
    def mask_shape(self) -> tuple[int, ...] | None:
        """The per-sample shape ``(T_k,)`` of the run-time key padding mask (the graph's second input:
        docs/attention.md), or None for a model with one input."""
        return tuple(self.graph.tensors[self.graph.inputs[1]].shape) if len(self.graph.inputs) > 1 else None

    def quantise_mask(self, mask: Any, samples: int) -> np.ndarray | None:
        """A key padding mask in PyTorch's forms (boolean, True = padding; or float 0 / -inf), ``[samples,
        T_k]``, as the keep bytes the design reads (uint8, 1 = kept); None for a model without one."""
        if self.mask_shape is None:
            if mask is not None:
                raise ConfigError("a mask was given, but the model takes one input (no run-time key padding mask)",
                                  hint="leave mask out")
            return None
        if mask is None:
            raise ConfigError(f"the model takes a run-time key padding mask ('{self.graph.inputs[1]}', one row of "
                              f"{self.mask_shape[0]} keys per sample)", hint="pass predict(x, mask=...): boolean, "
                              "True = padding (docs/attention.md)")
        return mask_keep(mask, samples, self.mask_shape[0])

    def trace(self, xq: np.ndarray, keep: bool = True, mask: np.ndarray | None = None) -> dict[str, np.ndarray]:
        """Emulated value of every tensor (``keep=False``: only the graph output survives); ``mask``: the
        keep bytes of a run-time key padding mask (:meth:`quantise_mask`), every key kept when None."""
        values = {self.graph.inputs[0]: xq}
        for t in self.graph.inputs[1:]:
            shape = (np.shape(xq)[0], *self.graph.tensors[t].shape)
            values[t] = np.ones(shape, np.uint8) if mask is None else np.asarray(mask, np.uint8).reshape(shape)
        # a tensor may feed several nodes (fan-out): free it after its last reader only
        last_use = {t: i for i, node in enumerate(self.graph.nodes) for t in node.inputs}
        for i, node in enumerate(self.graph.nodes):
            values[node.outputs[0]] = family(node.op, node.name).emulate(node, *(values[t] for t in node.inputs))
            if not keep:
                for t in set(node.inputs):
                    if last_use[t] == i and t not in self.graph.outputs:
                        del values[t]
        return values

    def verify(self, x: Any | None = None, samples: int = 1000, seed: int = 0, **kwargs: Any):
        """Build the project's own C++ for x86 against the open shim, run it and compare every
        output bit-exactly with :meth:`predict` (see :func:`aieflow.verify.verify`)."""
        from .verify import verify

        return verify(self, x, samples=samples, seed=seed, **kwargs)

    def _chunks(self, x: np.ndarray, chunk: int) -> Iterator[np.ndarray]:
        for i in range(0, x.shape[0], chunk):
            yield x[i : i + chunk]

    def predict(self, x: Any, raw: bool = False, chunk: int = DEFAULT_CHUNK, mask: Any = None) -> np.ndarray:
        """Bit-exact emulation: quantise at the input, integer-exact layers, dequantise at the output.

        ``mask``: a model with a run-time key padding mask (forward(x, mask)) takes it here, ``[N, T_k]``
        in PyTorch's forms (boolean, True = padding; or float 0 / -inf); other models take none.

        Real values come back as float32, like the float model's own outputs (every int8 / int16 /
        fp32 / bf16 output is a float32 exactly), or as float64 for an output type wider than 24
        bits, which float32 would round (``numerics.fixed.to_real``).  ``raw=True`` returns the
        output codes (int64; fp32 / bf16 outputs: their float32 values) instead.
        """
        x = self._check_input(x)
        if np.issubdtype(x.dtype, np.floating) and np.isnan(x).any():
            raise ConfigError("input contains NaN")
        keep = self.quantise_mask(mask, x.shape[0])
        outs = []
        for i, part in zip(range(0, x.shape[0], max(1, chunk)), self._chunks(x, max(1, chunk)), strict=True):
            m = None if keep is None else keep[i:i + part.shape[0]]
            if raw:
                outs.append(self.run(self._quantise_checked(part), mask=m))
            else:  # codes stay in the emulator's float carriers up to the dequantisation
                y = self.trace(self._quantise_checked(part, float_codes=True), keep=False,
                               mask=m)[self.graph.outputs[0]]
                outs.append(self.dequantise_output(y))
        if not outs:
            codes = np.zeros((0, *self.output_tensor.shape), dtype=np.int64)
            return codes if raw else self.dequantise_output(codes)
        return outs[0] if len(outs) == 1 else np.concatenate(outs, axis=0)

    @property
    def replicas(self) -> int:
        """Copies of the design on the array (each runs its own batches)."""
        return len(self.placement.replicas)

    def example_batch(self, x: Any | None, batches: int | None = 2) -> np.ndarray:
        """Inputs written to the project's PLIO files: the user's, else seeded random in range;
        ``batches`` graph iterations' worth (each feeds every replica one batch), or with
        ``batches=None`` every sample of ``x``, zero-padded to whole graph iterations."""
        batch = self.config.batch * self.replicas
        if x is not None:
            x = self._check_input(x)
            if batches is None:
                n = max(1, -(-x.shape[0] // batch)) * batch
            else:
                n = min(x.shape[0], batches * batch)
                n = max(batch, n - n % batch)
            if x.shape[0] < n:
                x = np.concatenate([x, np.zeros((n - x.shape[0], *x.shape[1:]), dtype=x.dtype)])
            return x[:n]
        rng = np.random.default_rng(0)
        shape = ((batches or 2) * batch, *self.input_tensor.shape)
        t = self.input_type
        if isinstance(t, FixedType):
            return rng.integers(t.min_code, t.max_code + 1, size=shape) * t.scale
        if isinstance(t, AffineType):
            return affine_dequantize(rng.integers(t.min_code, t.max_code + 1, size=shape), t)
        return rng.standard_normal(shape).astype(np.float32)

    # ------------------------------------------------------------------ performance

    def estimate(self):
        """Modelled latency, interval, throughput and per-stage utilisation (``aieflow.perf``)."""
        return self._performance

    @cached_property
    def _performance(self):
        from .perf import estimate

        return estimate(self)

    # ------------------------------------------------------------------ reports

    def layers(self) -> list[Node]:
        return [n for n in self.graph.nodes if n.plan is not None]

    def resources(self) -> dict[str, Any]:
        layers = self.layers()
        k = self.replicas
        tiles = sum(n.plan.tiles for n in layers) * k
        lenders = sum(n.plan.footprint - n.plan.tiles for n in layers) * k
        memtile_links = sum(1 for n in layers if n.plan.link == "memtile") * k
        mt_bytes = 0
        for n in layers:
            if n.plan.link == "memtile":
                width = n.plan.cas_len * n.plan.k_slice
                mt_bytes = max(mt_bytes, 2 * width * n.plan.batch_pad * n.types.input.container_bits // 8)
        per_tile = {n.name: n.plan.memory.total for n in layers}
        first, last = layers[0], layers[-1]
        return {
            "compute_tiles": tiles,
            "compute_tiles_available": self.device.compute_tiles,
            # tiles whose data memory holds another tile's buffers (ops/dense.py memory_homes): no kernel
            "lender_tiles": lenders,
            "memory_tiles": memtile_links,
            "memory_tile_bytes_max": mt_bytes,
            "plio_in": first.plan.cas_len * k,
            "plio_out": last.plan.cas_num * k,
            "replicas": k,
            "bytes_per_tile": per_tile,
            "bytes_per_tile_max": max(per_tile.values()),
            "tile_memory_bytes": self.device.generation.data_memory_bytes,
        }

    def summary(self) -> str:
        from .report import text_summary

        return text_summary(self)

    def report(self) -> str:
        """The summary holds the per-stage table already."""
        return self.summary()

    def report_html(self, path: str | os.PathLike | None = None, data: Any = None, verify: Any = None) -> str:
        """The self-contained HTML report (``aieflow.html_report.report_html``), written to ``path`` if given."""
        from .html_report import report_html

        return report_html(self, path, data=data, verify=verify)

    def placement_svg(self) -> str:
        from .placement_svg import design_svg

        return design_svg(self)

    # ------------------------------------------------------------------ persistence

    def to_json(self) -> dict[str, Any]:
        layers = {}
        for n in self.layers():
            fam = family(n.op)
            r = self.placement.rect(n.name)
            layers[n.name] = {
                "op": n.op,
                "activation": n.attrs.get("activation"),
                "types": fam.types_to_json(n.types),
                "plan": fam.plan_to_json(n.plan),
                "placement": {"column": r.column, "row": r.row, "width": r.width, "height": r.height}
                | ({"period": r.period, "offset": r.offset} if r.period != 1 else {}),
            }
        return {
            **design_schema.header(FORMAT, FORMAT_VERSION, "chain"),
            "device": {"key": self.device.key, **self.device.describe()},
            "source": self.source,
            "config": self.config.to_json(),
            "input": {"tensor": self.graph.inputs[0], "shape": list(self.input_tensor.shape), "type": self.input_type.to_string()},
            "output": {"tensor": self.graph.outputs[0], "shape": list(self.output_tensor.shape), "type": self.output_type.to_string()},
            "layers": layers,
            "placement": self.placement.to_json(),
            "resources": self.resources(),
            "performance": system_attach(design_schema.performance_json(self.estimate()), self, "chain"),
            **({"exploration": self.exploration.to_json()} if self.exploration is not None else {}),
            "graph": graph_to_json(self.graph, plans=True),
            "project_files": sorted(self.files),
        }

    def save(self, out_dir: str | os.PathLike, force: bool = False) -> Path:
        """Write ``design.json``, ``weights.npz`` and ``project/`` atomically.

        Everything goes to a temporary sibling directory first and is moved into place at the end,
        so an error never leaves a half-written design; an existing directory is replaced only
        with ``force``.
        """
        def write(tmp: Path) -> None:
            (tmp / "design.json").write_text(json.dumps(self.to_json(), indent=2, default=json_default) + "\n")
            write_weights(tmp / "weights.npz", graph_arrays(self.graph))
            write_files(tmp / "project", self.files)

        return save_directory(out_dir, force, write)


# design.json "format" -> the module whose ``load`` reads that design kind (the Dense chain's own
# format is read below)
LOADERS: dict[str, str] = {
    "aieflow-recurrent-design": ".recurrent.design",  # GRU / LSTM
    "aieflow-streamed-dense": ".gemm.dense_design",  # one Dense layer with weights streamed from DDR
    "aieflow-segmented": ".gemm.segmented",  # resident and streamed segments joined through DDR
    "aieflow-cnn": ".cnn.design",  # convolutional networks
    "aieflow-dag": ".dag.design",  # fan-out, residual Add, LayerNorm, views (MLP-Mixer) on AIE-ML
    "aieflow-gemm": ".gemm.design",  # one large C = A B (aieflow.gemm)
}


def load(path: str | os.PathLike, check: bool = True) -> Design:
    """Load a design written by :meth:`Design.save` (emulation needs no model file).  The files
    must be the ones the save wrote (``integrity.check``); ``check=False`` skips the hash
    comparison (symbolic links are refused either way)."""
    d = Path(path)
    meta = integrity.read_design_json(d)
    integrity.check(d, meta, verify=check)
    other = LOADERS.get(meta.get("format", ""))
    if other is not None:  # another design kind: its module's own ``load``
        module = importlib.import_module(other, __package__)
        if check:
            return module.load(d)  # type: ignore[no-any-return]
        with integrity.skipped():
            return module.load(d)  # type: ignore[no-any-return]
    try:
        weights = read_weights(d / "weights.npz")
    except FileNotFoundError as e:
        raise AieflowError(f"'{d}' is not an aieflow design directory: {e.filename} is missing") from None
    except (ValueError, OSError) as e:
        raise AieflowError(f"cannot read design in '{d}': {e}") from None
    if meta.get("format") != FORMAT or meta.get("version") != FORMAT_VERSION:
        raise AieflowError(
            f"'{d}/design.json' is format {meta.get('format')!r} version {meta.get('version')!r}; "
            f"this aieflow reads {FORMAT!r} version {FORMAT_VERSION}"
        )
    graph = graph_from_json(meta["graph"], weights)
    device = get_device(meta["device"]["key"])
    placement = Placement.from_json(meta["placement"], graph, snake=device.generation.cascade_serpentine)
    files = integrity.read_project(d, meta)
    from .passes.search import Exploration

    exploration = Exploration.from_json(meta["exploration"], meta["config"]["batch"]) if "exploration" in meta else None
    return Design(
        graph, device, parse_config(meta["config"]), placement, meta.get("source", ""),
        files, exploration=exploration,
    )
