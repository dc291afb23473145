"""What an op family provides to the pipeline.

Each family module (``dense.py``, ``views.py``, ...) owns its reference numerics, quantiser,
planner, packer and templates, and exports one :class:`OpFamily`.  The registry in
``registry.py`` is a plain dictionary of them: adding an op family means writing its module and
adding one line there (see docs/ARCHITECTURE.md).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from ..config import Config, LayerConfig
    from ..devices import Device
    from ..ir import Graph, Node, QuantHints
    from ..numerics.types import NumericType


@dataclass(frozen=True)
class QuantContext:
    """Everything a family's quantiser may look at."""

    device: Device
    config: Config
    layer: LayerConfig
    hints: QuantHints
    input_types: tuple[NumericType, ...]
    calibration: Mapping[str, np.ndarray]  # tensor name -> float activations on calibration data


@dataclass(frozen=True)
class PlanContext:
    """Everything a family's planner may look at.

    ``input_layout`` is the layout the producer of this node's input already committed to (AIE1
    links layers with direct buffers, so the consumer must read what the producer writes).
    """

    device: Device
    config: Config
    layer: LayerConfig
    graph: Graph
    input_layout: Any = None
    min_cas_num: int = 1  # raised by the plan pass when a consumer cannot read this layer's slices
    post: Any = None  # the activation / softmax fused into this layer's last tiles (ops/post.py)
    # The Dense chain's plan pass: a fixed rectangle may keep buffers in neighbouring tiles' data
    # memories (ops/dense.py memory_homes); the placer reserves those tiles.  Other callers (the
    # search, the DAG planner, the streamed-weights check) plan within each tile's own memory.
    neighbour_memory: bool = False


@dataclass(frozen=True)
class OpFamily:
    name: str
    float_forward: Callable[[Node, np.ndarray], np.ndarray]
    emulate: Callable[[Node, np.ndarray], np.ndarray]
    quantise: Callable[[Node, QuantContext], Node] | None = None
    plan: Callable[[Node, PlanContext], Node] | None = None
    # Family-specific (de)serialisation of Node.types / Node.plan for design.json.
    types_to_json: Callable[[Any], dict] | None = None
    types_from_json: Callable[[dict], Any] | None = None
    plan_to_json: Callable[[Any], dict] | None = None
    plan_from_json: Callable[[dict], Any] | None = None
    is_view: bool = False  # reinterprets memory only: no kernel, no tiles
    fused_only: bool = False  # must be folded into a neighbour by the fuse pass


# Op families the Dense-chain planner does not map: each compiles through its own path when the
# model takes that path (``api.compile``'s dispatch), so reaching the chain planner means it did not.
_RECURRENT = "the recurrent mapping, for models whose GRU / LSTM layers come first, then Dense layers (docs/recurrent.md)"
_CNN = "the CNN mapping, for models with a convolution (docs/conv.md)"
_DAG = "the DAG mapping, on AIE-ML / AIE-MLv2 devices (vek280, vek385; docs/dag.md)"
_OWN_PATH = {
    "gru": ("GRU", _RECURRENT),
    "lstm": ("LSTM", _RECURRENT),
    "conv2d": ("Conv2D", _CNN),
    "pixel_shuffle": ("PixelShuffle", _CNN),
    "maxpool": ("MaxPool", _CNN),
    "avgpool": ("AvgPool", _CNN),
    "add": ("Add", _DAG),
    "layernorm": ("LayerNorm", _DAG),
    "activation": ("Activation", _DAG),
    "softmax": ("Softmax", _DAG),
}


def keeps_input_type(node, ctx: QuantContext):
    """The ``quantise`` of an op that moves or copies values without changing them: the output
    keeps its (first) input's type."""
    return node.evolve(types=ctx.input_types[0])


def one_type_family(name: str, forward: Callable, emulate: Callable | None = None,
                    quantise: Callable = keeps_input_type, plan: Callable | None = None,
                    is_view: bool = False) -> OpFamily:
    """An op family whose layer carries one numeric type (pooling, shuffles, copies, views):
    design.json holds it as ``{"type": ...}``."""
    from ..numerics.types import parse_type

    return OpFamily(name=name, float_forward=forward, emulate=emulate or forward, quantise=quantise, plan=plan,
                    types_to_json=lambda t: {"type": t.to_string()}, types_from_json=lambda d: parse_type(d["type"]),
                    is_view=is_view)


def not_mapped(node, ctx: PlanContext):
    """The ``plan`` of a family the chain planner does not map: a clear error naming the layer and
    the path that does map it."""
    from ..errors import PlanError

    name, path = _OWN_PATH.get(node.op, (node.op, None))
    raise PlanError(
        f"{name} layers have no kernel in a chain of Dense layers" + (f"; {path} maps them" if path else ""),
        layer=node.name,
        hint="shape the model as that mapping requires, or use aieflow.emulate(model, ...) for bit-exact "
        "predictions of this model",
    )


def require_shift(
    gen, shift: int, what: str, *, why: str, upshift: bool, layer: str, hint: str, error: type
) -> None:
    """Refuse a shift the AI Engine cannot apply: an SRS right shift outside 0..``srs_shift_max``
    or an upshift into the accumulator outside 0..``ups_shift_max`` (the device catalog's limits).

    ``error`` is the class that blames the right party: ConfigError for a type the config gave,
    ModelError for one the model carries (QDQ), PlanError for one calibration chose."""
    limit = gen.ups_shift_max if upshift else gen.srs_shift_max
    if not 0 <= shift <= limit:
        op = "upshift into the accumulator (from_vector)" if upshift else "shift-round-saturate (SRS)"
        raise error(f"{what} {shift} is outside the 0..{limit} the {gen.name} {op} applies ({why})",
                    layer=layer, hint=hint)
