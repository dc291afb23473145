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
  output's (the buffers and links after the layer keep their sizes);
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


def is_fused_post(graph: Graph, node: Node) -> bool:
    """Whether ``node`` runs in the last tiles of the Dense layer that writes its input."""
    if node.op not in POST_OPS or len(node.inputs) != 1:
        return False
    producer = graph.producer(node.inputs[0])
    if producer is None or producer.op != "dense" or node.inputs[0] in graph.outputs:
        return False
    if [n.name for n in graph.consumers(node.inputs[0])] != [node.name]:
        return False
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


def post_kind(post: Node | None) -> str:
    """The plan's record of a fused post: "" (none), "table", "interp" (a 16-bit interpolated
    activation), "softmax"."""
    if post is None:
        return ""
    if post.op == "softmax":
        return "softmax"
    return "interp" if post.types.segment_bits else "table"


def post_constants(post: Node) -> dict:
    """The ``activation_fixed.h`` constants of a fused post (as the CNN's post layer and the DAG's
    standalone kernels take them): op (1 activation, 2 softmax), the table, its segment bits,
    the softmax index shift, the input's smallest code, the output's code range and fraction."""
    t = post.types
    table = post.params["table"]
    if post.op == "softmax":
        return {"op": 2, "seg": 0, "sd": t.index_shift, "fo": t.output.frac, "min": 0, "lo": 0,
                "hi": t.output.max_code, "size": int(table.size), "table": table, "ty": t.output,
                "text": f"softmax {t.input} -> {t.output}"}
    seg = t.segment_bits
    return {"op": 1, "seg": seg, "sd": 0, "fo": t.output.frac, "min": t.input.min_code, "lo": t.output.min_code,
            "hi": t.output.max_code, "size": int(table.size), "table": table, "ty": t.output,
            "text": f"{post.attrs['function']} ({t.variant}) {t.input} -> {t.output}"
                    + (f", {seg}-bit segments" if seg else "")}


def written(graph: Graph, dense: Node) -> tuple[str, object]:
    """The tensor a Dense layer's kernels write and its type: the fused post's output, or the
    layer's own."""
    post = fused_post(graph, dense)
    node = post if post is not None else dense
    return node.outputs[0], node.types.output
