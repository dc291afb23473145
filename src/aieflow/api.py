"""The Python entry point: ``aieflow.compile(model, device=..., ...) -> Design``."""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any

from .config import Config, parse_config
from .design import Design
from .devices import get_device
from .emulation import Emulation
from .errors import ConfigError, ModelError, PlanError
from .inputs import real_array
from .kinds import is_cnn, is_dag, is_recurrent, wants_streamed
from .numerics.types import AffineType
from .ops.registry import require_mapping
from .options import precision_allows, refuse_precision, refuse_unsupported
from .passes.posts import choose, explores_both, fixed_mapping, merged
from .pipeline import PIPELINE, State, _search, front_end, run_pipeline
from .progress import Stages, compile_stages

log = logging.getLogger(__name__)


def compile(  # noqa: A001 - the public name the issue asks for
    model: Any,
    device: str = "vek280",
    example_input: Any = None,
    config: Mapping[str, Any] | Config | None = None,
    calibration: Any = None,
    progress: Callable[[str], None] | None = None,
) -> Design:
    """Compile ``model`` (an ONNX path / ModelProto, or a torch ``nn.Module``) for ``device``.

    ``calibration`` (float samples, shape (N, *input)) drives post-training quantisation; when it
    is absent the example input is used.  QDQ ONNX models carry their own types.  ``progress`` is
    called with each stage's name as it starts; the stages are also logged (``aieflow`` loggers,
    debug level) and, on the command line, shown as a bar.
    """
    with compile_stages(progress, len(PIPELINE)) as stages:
        return _compile(_state(model, device, example_input, config, calibration), stages)


def _refuse_runtime_mask(graph) -> None:
    """A run-time key padding mask (the graph's second input) maps on the DAG path only (its own
    PLIO to the softmax and masked mean kernels: dag/emit.py); every other kind refuses it by name."""
    if len(graph.inputs) > 1 and not is_dag(graph):
        raise PlanError(f"the model takes a run-time key padding mask ('{graph.inputs[1]}', its second input); "
                        "aieflow maps it on the DAG (attention) path only, and this model is not a DAG design",
                        hint="emulate with aieflow.emulate(model, ...).predict(x, mask=...); see docs/attention.md")


def _compile(state: State, stages: Stages) -> Design:
    model = state.model
    state = front_end(state, stages)
    graph = state.graph
    _refuse_runtime_mask(graph)
    # GRU / LSTM: their own row-wise stream mapping (aieflow.recurrent, docs/recurrent.md)
    if is_recurrent(graph):
        from .recurrent.design import compile_recurrent

        _kind(stages, "recurrent", 2, graph, state.config)
        refuse_unsupported(state.config, "recurrent")
        refuse_affine(graph, "recurrent")
        return compile_recurrent(model, example_input=state.example_input, front=_emulation(state), progress=stages)  # type: ignore[return-value]
    # Convolutional networks: their own mapping (aieflow.cnn, docs/conv.md)
    if is_cnn(graph):
        from .cnn.api import compile_cnn

        _kind(stages, "cnn", 3, graph, state.config)
        refuse_unsupported(state.config, "cnn")  # float scales: the stream mapping (ops/conv.py, ops/pool.py)
        return compile_cnn(state, stages)
    # Graphs beyond chains (fan-out, residual Add, LayerNorm, Transpose views): aieflow.dag, docs/dag.md
    if is_dag(graph):
        from .dag.api import compile_dag

        _kind(stages, "dag", 3, graph, state.config)
        _refuse_fused(state.config)
        refuse_affine(graph, "DAG")
        return compile_dag(state, stages)  # type: ignore[return-value]
    if state.config.searched:
        # The search treats a layer it cannot plan as one that does not fit ("no plan can be
        # placed"); name a layer that has no AI Engine mapping at all instead.
        require_mapping(graph)
    # Dense weights that do not fit on chip stream from DDR through a GEMM design (aieflow.gemm.dense):
    # forced by `weights: streamed`, or chosen when a layer's resident plan fails (`weights: auto`).
    if wants_streamed(state.config):
        from .gemm.dense_design import compile_streamed

        _kind(stages, "streamed", None, graph, state.config)
        refuse_affine(graph, "streamed-weight")
        return compile_streamed(state, stages)
    front = state
    # an activation / softmax after a Dense layer: in its kernel (the chain) or its own (the DAG
    # mapping), as the config says or the target ranks them (passes/posts.py)
    choice = choose(state, stages)
    if choice.mapping == "standalone":
        from .dag.api import compile_dag

        _kind(stages, "dag", 3, graph, state.config)
        refuse_affine(graph, "DAG")
        return compile_dag(state, stages, found=choice.dag)  # type: ignore[return-value]
    state = choice.chain or state
    _kind(stages, "chain", len(PIPELINE) - len(state.done), graph, state.config)
    try:
        state = run_pipeline(state, stages)
    except PlanError as e:
        from .gemm.dense_design import compile_streamed

        log.info("the resident chain does not fit (%s); trying streamed weights", e.message)
        if any(isinstance(t.dtype, AffineType) for t in graph.tensors.values()) or not precision_allows(state.config, "streamed"):
            raise  # no streamed fallback for this model: the layer that does not fit is the error
        _kind(stages, "streamed", None, graph, state.config)
        streamed = compile_streamed(front, stages, failure=e)
        if streamed is None:
            raise
        return streamed
    return Design(
        state.graph, state.device, state.config, state.placement, state.source, dict(state.files), state.timings,
        state.exploration,
    )


def _refuse_fused(config: Config) -> None:
    if config.posts == "fused":
        raise ConfigError("config option 'posts: fused' applies to chains of Dense layers; this graph (fan-out, "
                          "residual Add, LayerNorm, views) maps through the DAG path, where every activation and "
                          "softmax is its own kernel", hint="leave posts out (or write posts: standalone)")


def refuse_affine(graph, kind: str) -> None:
    """Float-scale (affine) quantisation maps onto the Dense chain's and the CNN stream mapping's
    requantising kernels only."""
    for t in graph.tensors.values():
        if isinstance(t.dtype, AffineType):
            raise ModelError(
                f"tensor '{t.name}' is quantised with a float scale / zero point ({t.dtype}); aieflow maps such "
                f"models as Dense chains (Gemm / MatMul layers, ReLU) and CNNs (Conv + ReLU, max / average "
                f"pooling, a Flatten + Dense head) only, not as a {kind} design",
                hint="quantise with power-of-two scales (aieflow's own PTQ: precision + calibration data) for this "
                "model, or give onnxruntime quantize_static an MLP or a chain CNN")


def _kind(stages: Stages, kind: str, left: int | None, graph, config: Config) -> None:
    """The design kind is known after the front end: the bar's total and the log say which; a
    precision the kind is not built for is refused here (options.refuse_precision)."""
    refuse_precision(config, kind)
    log.info("%s: %d nodes after import and fusion, compiled as a %s design", graph.name, len(graph.nodes), kind)
    stages.total(None if left is None else stages.started + left, kind)


def explore(
    model: Any,
    device: str = "vek280",
    example_input: Any = None,
    config: Mapping[str, Any] | Config | None = None,
    calibration: Any = None,
):
    """The Pareto front (tiles, latency, interval) of the plans the search considers for
    ``model`` and the one ``compile`` builds for the same config (the target's pick; without a
    target, the planner's own design).  Every point's figures are the estimate of the design it
    compiles to (issue 17: one cost model for explore and compile)."""
    state = front_end(_state(model, device, example_input, config, calibration))
    _refuse_runtime_mask(state.graph)
    graph = state.graph
    if is_recurrent(graph):  # GRU / LSTM: the front of the recurrent mappings (docs/recurrent.md)
        from .recurrent.design import explore_recurrent

        refuse_unsupported(state.config, "recurrent")
        return _explored(explore_recurrent(model, front=_emulation(state)))
    if is_cnn(graph):  # the stream mappings the CNN search chooses among (cnn/directives.py)
        from .cnn.directives import explore_stream
        from .cnn.stages import lower

        refuse_unsupported(state.config, "cnn")
        stages = lower(graph)
        ex = explore_stream(state.device, stages, state.config)
        return _explored(replace(ex, kind="cnn", config_names=tuple(
            (s.name, *s.aliases) for s in stages if s.kind == "conv")))
    dense = tuple((n.name, *n.aliases) for n in graph.nodes if n.op == "dense")
    if is_dag(graph):  # the DAG search chooses the batch (dag/search.py)
        from .dag.search import explore_dag

        _refuse_fused(state.config)
        refuse_precision(state.config, "dag")
        return _explored(replace(explore_dag(graph, state.device, state.config), kind="dag", config_names=dense))
    require_mapping(graph)
    mapping = fixed_mapping(graph, state.device, state.config)
    if mapping == "standalone":
        from .dag.search import explore_dag

        refuse_precision(state.config, "dag")
        return _explored(replace(explore_dag(graph, state.device, state.config), kind="dag", config_names=dense))
    if wants_streamed(state.config):
        raise ConfigError("explore lists resident designs; streamed_dense / segmented designs (a layer's "
                          "'weights: streamed') are not explored",
                          hint="compile with weights: streamed, or explore without it")
    chain = dag = failure = None
    try:
        chain = _search(state, force=True).exploration
    except PlanError as e:
        failure = e
    if explores_both(graph, state.device, state.config):  # fused (the chain's) and standalone (the DAG's) points
        from .dag.search import explore_dag

        try:
            dag = explore_dag(graph, state.device, state.config)
        except PlanError:
            dag = None  # no DAG design meets the target
    if chain is None and (dag is None or mapping == "fused"):
        if failure.layer is None:  # about the target, not a layer that does not fit
            raise failure
        raise PlanError(failure.message, layer=failure.layer, hint=(failure.hint + "; " if failure.hint else "")
                        + "explore lists resident designs only; compile streams such a layer's weights from DDR "
                        "(weights: auto)") from None
    ex = chain if dag is None else merged(chain, dag, state.config, mapping)
    return _explored(replace(ex, kind="chain", config_names=dense))


def _explored(ex):
    log.info("explored a %s model: %d points on the Pareto front (%d candidates costed); the target '%s' picks "
             "%d tiles, latency %.0f ns", ex.kind, len(ex.front), ex.candidates, ex.target.to_string(), ex.chosen.tiles,
             ex.chosen.latency_ns)
    return ex


def emulate(
    model: Any,
    device: str = "vek280",
    example_input: Any = None,
    config: Mapping[str, Any] | Config | None = None,
    calibration: Any = None,
) -> Emulation:
    """Import and quantise ``model`` like :func:`compile`, without mapping it to the AI Engine.

    For models with layers the mapping does not cover yet (GRU, LSTM, convolutions, pooling):
    ``emulate(...).predict(x)`` is the same bit-exact emulation a compiled design's ``predict`` runs.
    """
    return _emulation(front_end(_state(model, device, example_input, config, calibration)))


def _emulation(state: State) -> Emulation:
    return Emulation(state.graph, state.device, state.config, state.source)


def _state(model: Any, device: str, example_input: Any, config: Any, calibration: Any) -> State:
    mask = None
    if isinstance(calibration, tuple) and len(calibration) == 2:
        # (samples, key padding masks): a model with a run-time key padding mask (docs/attention.md)
        calibration, mask = calibration
    return State(
        model=model,
        device=get_device(device),
        config=parse_config(config),
        example_input=None if example_input is None else _samples(example_input, "example input"),
        calibration=None if calibration is None else _samples(calibration, "calibration data"),
        calibration_mask=mask,
    )


def _samples(x: Any, what: str) -> Any:
    """``x`` as a real array with at least one value: an empty one calibrates nothing (and gave
    the import a batch of 0)."""
    arr = real_array(x, what)
    if arr.size == 0:
        raise ConfigError(f"{what} has no values (shape {arr.shape})", hint="pass at least one sample")
    return arr

