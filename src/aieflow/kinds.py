"""Which mapping compiles a graph: the tests ``aieflow.compile`` dispatches on, kept apart from the
mappings themselves so that deciding costs no import of the ones a model does not use."""

from __future__ import annotations

from typing import Any

from .ir import Graph

CNN_OPS = ("conv2d",)
DAG_OPS = ("add", "add_const", "layernorm", "transpose", "concat", "slice", "activation", "softmax", "matmul", "patches", "prepend_const",
           "masked_mean", "scale_shift")


def is_recurrent(graph: Graph) -> bool:
    """Whether the (front end's) graph has a GRU / LSTM layer (then aieflow.recurrent maps it)."""
    return any(n.op in ("gru", "lstm") for n in graph.nodes)


def is_cnn(graph: Graph) -> bool:
    """Whether the (front end's) graph has a convolution (then the CNN mapping compiles it)."""
    return any(n.op in CNN_OPS for n in graph.nodes)


def is_dag(graph: Graph) -> bool:
    """Whether the (front end's) graph is not a chain of Dense layers: it has an Add, LayerNorm,
    standalone activation or softmax, or data-movement view, or a tensor that feeds several nodes
    (then the DAG mapping compiles it).  An activation or softmax that runs in the Dense kernel
    before it (``ops/post.py``) keeps a chain a chain."""
    from .ops.post import is_fused_post

    if any(n.op in DAG_OPS and not is_fused_post(graph, n) for n in graph.nodes):
        return True
    readers: dict[str, int] = {}
    for n in graph.nodes:
        for t in n.inputs:
            readers[t] = readers.get(t, 0) + 1
    return any(v > 1 for v in readers.values())


def wants_streamed(config: Any) -> bool:
    """Whether the config asks for streamed weights on some layer (then the resident pipeline is
    not tried)."""
    return any(getattr(lc, "weights", "auto") == "streamed" for lc in config.layers.values())
