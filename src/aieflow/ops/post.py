"""Activations and softmax fused into the Dense kernel before them (the Dense family's ``post``
parameter).

An ``activation`` or ``softmax`` node whose input is written by a Dense layer that nothing else
reads runs in that layer's last cascade tiles: the tile stores its SRS codes into a scratch
buffer, then applies ``templates/kernels/activation_fixed.h`` (the same table / interpolation /
integer softmax as the standalone kernels, so the fused and the standalone results are the
emulator's ``ops/activation.py`` codes alike) and writes the output buffer.  No tile, memory-tile
hop or PLIO is added, which is what lets a Dense chain with a softmax head map on AIE1 (no memory
tiles) and saves the round trip through a memory tile on AIE-ML.

The graph keeps both nodes (``predict`` and ``trace`` are unchanged); the mapping treats the pair
as one kernel.  Fusable when:

- the activation / softmax types are fixed point and its output container is as wide as the Dense
  output's (the buffers and links after the layer keep their sizes), or both are fp32 and the
  activation has an fp32 kernel definition (``ops/activation.py`` ``FP32_FUNCTIONS``, softmax
  ``softmax_f32``: ``templates/cnn/cnn_float_post.h``, the CNN post layer's header, bit for bit
  the emulator's float32 operations); an fp32 GELU has no kernel and is refused by name
  (:func:`refuse_unmapped_float`);
- a softmax's Dense has one cascade row (``cas_num = 1``), so one tile holds every output of a
  sample (the plan forces it and refuses a config that asks for more rows).

This module imports nothing heavy: ``aieflow.kinds`` calls it to decide between the chain and the
DAG mapping.
"""

from __future__ import annotations

from ..ir import Graph, Node

POST_OPS = ("activation", "softmax")


def _fixed(t) -> bool:
    return t is not None and not getattr(t, "is_float", True) and hasattr(t.output, "frac")


def _fp32(t) -> bool:
    return t is not None and getattr(t, "is_float", False) and getattr(t.output, "name", "") == "fp32"


def _fp32_kernel(node: Node) -> bool:
    """An fp32 activation / softmax with a kernel definition (cnn_float_post.h)."""
    from .activation import FP32_FUNCTIONS

    return _fp32(node.types) and (node.op == "softmax" or node.attrs.get("function") in FP32_FUNCTIONS)


def is_fused_post(graph: Graph, node: Node) -> bool:
    """Whether ``node`` runs in the last tiles of the Dense layer that writes its input."""
    if node.op not in POST_OPS or len(node.inputs) != 1:
        return False
    producer = graph.producer(node.inputs[0])
    if producer is None or producer.op != "dense" or node.inputs[0] in graph.outputs:
        return False
    if [n.name for n in graph.consumers(node.inputs[0])] != [node.name]:
        return False
    if _fp32(producer.types) and _fp32_kernel(node):
        return True
    if not (_fixed(node.types) and _fixed(producer.types)):
        return False
    if getattr(node.types, "variant", "") in ("integer", "polynomial"):  # per-element forms: the DAG kernels only
        return False
    return node.types.output.container_bits == producer.types.output.container_bits


def fused_post(graph: Graph | None, dense: Node) -> Node | None:
    """The activation / softmax fused into ``dense`` (None: its kernel writes its own output)."""
    if graph is None or dense.op != "dense":
        return None
    users = graph.consumers(dense.outputs[0])
    if len(users) == 1 and is_fused_post(graph, users[0]):
        return users[0]
    return None


def refuse_unmapped_float(graph: Graph) -> None:
    """An fp32 activation that no kernel computes (GELU; ``FP32_FUNCTIONS`` lists those with one),
    refused by name before the DAG mapping would look for a standalone kernel fp32 does not have."""
    from ..errors import PlanError
    from .activation import FP32_FUNCTIONS

    for node in graph.nodes:
        if node.op == "activation" and _fp32(node.types) and not _fp32_kernel(node):
            raise PlanError(
                f"{node.attrs['function']} in fp32 has no kernel (fused into a Dense layer or standalone); fp32 "
                f"kernels: {', '.join(FP32_FUNCTIONS)}, softmax", layer=node.name,
                hint="use precision int8 / int16, or bf16 on vek280 / vek385")


def post_kind(post: Node | None) -> str:
    """The plan's record of a fused post: "" (none), "table", "interp" (a 16-bit interpolated
    activation), "softmax", "fp32:<function>" (an fp32 activation), "fp32:softmax"."""
    if post is None:
        return ""
    if _fp32(post.types):
        return "fp32:" + (post.attrs["function"] if post.op == "activation" else "softmax")
    if post.op == "softmax":
        return "softmax"
    return "interp" if post.types.segment_bits else "table"


def post_constants(post: Node) -> dict:
    """The ``activation_fixed.h`` constants of a fused post (as the CNN's post layer and the DAG's
    standalone kernels take them): op (1 activation, 2 softmax), the table, its segment bits,
    the softmax index shift, the input's smallest code, the output's code range and fraction; an
    fp32 one (``float`` 1) its function's index in ``FP32_FUNCTIONS`` and constants (A, B)
    (``cnn_float_post.h``, as the CNN's post layer) and a neutral table."""
    t = post.types
    if _fp32(t):
        import numpy as np

        from .activation import FP32_FUNCTIONS, fp32_params

        act = post.op == "activation"
        fn = post.attrs["function"] if act else "softmax"
        a, b = fp32_params(fn, post.attrs) if act else (0.0, 0.0)
        return {"op": 1 if act else 2, "float": 1, "fn": FP32_FUNCTIONS.index(fn) if act else 0, "a": a, "b": b,
                "seg": 0, "sd": 0, "fo": 0, "min": 0, "lo": 0, "hi": 0, "size": 1,
                "table": np.zeros(1, dtype=np.int32), "ty": t.output,
                "text": f"{fn} fp32 (cnn_float_post.h: ops/activation.py {'apply_f32' if act else 'softmax_f32'})"}
    table = post.params["table"]
    if post.op == "softmax":
        return {"op": 2, "float": 0, "fn": 0, "a": 0.0, "b": 0.0, "seg": 0, "sd": t.index_shift, "fo": t.output.frac, "min": 0, "lo": 0,
                "hi": t.output.max_code, "size": int(table.size), "table": table, "ty": t.output,
                "text": f"softmax {t.input} -> {t.output}"}
    seg = t.segment_bits
    return {"op": 1, "float": 0, "fn": 0, "a": 0.0, "b": 0.0, "seg": seg, "sd": 0, "fo": t.output.frac, "min": t.input.min_code, "lo": t.output.min_code,
            "hi": t.output.max_code, "size": int(table.size), "table": table, "ty": t.output,
            "text": f"{post.attrs['function']} ({t.variant}) {t.input} -> {t.output}"
                    + (f", {seg}-bit segments" if seg else "")}


def written(graph: Graph, dense: Node) -> tuple[str, object]:
    """The tensor a Dense layer's kernels write and its type: the fused post's output, or the
    layer's own."""
    post = fused_post(graph, dense)
    node = post if post is not None else dense
    return node.outputs[0], node.types.output
