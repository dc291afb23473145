"""Attention at import, shared by the PyTorch and ONNX frontends: the graph rewrites that turn what
exporters and hand-written code produce into the op families the mappings know.

* :func:`fold_transposes`: a transpose of the last two axes that only a matmul's second operand
  reads becomes the matmul's ``transpose_b`` (``Q K^T`` reads ``K`` as it is, ``[T, d]``).
* :func:`fold_scales`: a ``scale`` node (``x * c`` or ``x / c`` by a scalar constant, emitted by
  the frontends) moves back to the Dense layer that computes its operand, through views (reshape,
  transpose, slice) and through a matmul's first operand (``(Q K^T) c = (c Q) K^T``), every tensor on
  the way read by that path alone; the Dense layer's weights and bias (and a bias add) are
  multiplied by ``c``.  This is where the ``1 / sqrt(d)`` of attention goes: into the Q projection.
  A scale with no such Dense layer is refused, naming the node.
* :func:`scales_to_queries`: a ``scale`` read (through views) as a matmul's second operand moves to
  its first, ``a (c b) = (c a) b``, merged with a scale already there: the exporters' ``d^(-1/4)`` on
  ``K^T`` joins the one on ``Q``, so the whole ``1 / sqrt(d)`` folds into the Q projection, where the
  torch import of ``nn.MultiheadAttention`` puts it.
* :func:`split_heads`: a batched matmul / softmax over heads, ``[H, T, d]`` per sample, made from a
  ``[T, H d]`` tensor by ``reshape [T, H, d]`` + ``transpose (1, 0, 2)``, becomes one 2-D op per
  head on feature slices ``[:, h d:(h + 1) d]``, and the heads' ``transpose (1, 0, 2)`` + ``reshape
  [T, H d]`` back becomes a feature concat: the DAG mapping's slices and concats realise them in
  the memory tiles' tilings.  One head (an export of ``nn.MultiheadAttention`` with ``num_heads=1``:
  ``reshape [T, 1, d]``, and a plain reshape back) is the tensor itself: no slice, no concat.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..errors import UnsupportedOpError
from ..ir import Node, frozen_map


def _producers(nodes: list[Node]) -> dict[str, int]:
    return {t: i for i, n in enumerate(nodes) for t in n.outputs}


def _readers(nodes: list[Node], outputs) -> dict[str, int]:
    out: dict[str, int] = {t: 1 for t in outputs}
    for n in nodes:
        for t in n.inputs:
            out[t] = out.get(t, 0) + 1
    return out


def _rename_input(nodes: list[Node], old: str, new: str) -> list[Node]:
    return [n.evolve(inputs=tuple(new if t == old else t for t in n.inputs)) if old in n.inputs else n for n in nodes]


def _swaps_last_two(perm) -> bool:
    r = len(perm)
    return r >= 2 and tuple(perm) == (*range(r - 2), r - 1, r - 2)


def fold_transposes(nodes: list[Node], outputs) -> list[Node]:
    nodes = list(nodes)
    changed = True
    while changed:
        changed = False
        prod, readers = _producers(nodes), _readers(nodes, outputs)
        for i, n in enumerate(nodes):
            if n.op != "matmul":
                continue
            j = prod.get(n.inputs[1])
            if j is None or nodes[j].op != "transpose" or readers[n.inputs[1]] != 1:
                continue
            if not _swaps_last_two(tuple(int(v) for v in nodes[j].attrs["perm"])):
                continue
            tb = not bool(n.attrs.get("transpose_b", False))
            nodes[i] = n.evolve(inputs=(n.inputs[0], nodes[j].inputs[0]),
                                attrs=frozen_map({**n.attrs, "transpose_b": tb}))
            del nodes[j]
            changed = True
            break
    return nodes


_THROUGH = ("reshape", "transpose", "slice")


def fold_scales(nodes: list[Node], outputs) -> list[Node]:
    nodes = list(nodes)
    while True:
        k = next((i for i, n in enumerate(nodes) if n.op == "scale"), None)
        if k is None:
            return nodes
        s = nodes[k]
        factor = float(s.attrs["factor"])
        prod, readers = _producers(nodes), _readers(nodes, outputs)
        t = s.inputs[0]
        chain: list[int] = []
        path = []
        while True:
            j = prod.get(t)
            if j is None or readers.get(t, 0) != 1:
                why = "the graph input" if j is None else f"'{t}', which other layers read too"
                raise UnsupportedOpError(
                    f"'{s.name}' multiplies by the constant {factor:g}, and the path back to a Dense layer that could "
                    f"absorb it reaches {why}", hint="aieflow folds a scalar scale into the Dense (Linear / Gemm / "
                    "MatMul) layer that computes its operand, through views and a matmul's first operand (Q in "
                    "Q K^T); scale the projection's weights instead")
            p = nodes[j]
            path.append(p.name)
            if p.op == "bias_add":
                chain.append(j)
                t = p.inputs[0]
            elif p.op == "dense":
                chain.append(j)
                break
            elif p.op in _THROUGH or p.op == "matmul":
                t = p.inputs[0]
            else:
                raise UnsupportedOpError(
                    f"'{s.name}' multiplies by the constant {factor:g} the output of '{p.name}' ({p.op}), which "
                    "cannot absorb it", hint="aieflow folds a scalar scale into the Dense layer that computes its "
                    "operand (through views and a matmul's first operand); scale the projection's weights instead")
        for j in chain:
            n = nodes[j]
            params = {key: (np.asarray(v, dtype=np.float64) * factor).astype(np.asarray(v).dtype)
                      for key, v in n.params.items()}
            nodes[j] = n.evolve(params=frozen_map(params))
        out = s.outputs[0]
        del nodes[k]
        nodes = _rename_input(nodes, out, s.inputs[0])
        if out in outputs:
            raise UnsupportedOpError(f"'{s.name}' scales the graph output", hint="scale the last layer's weights")


@dataclass
class _Heads:
    """A per-sample tensor ``[H, T, d]`` held as H 2-D tensors ``[T, d]``."""

    parts: list[str]


def scales_to_queries(nodes: list[Node], shapes: dict[str, tuple[int, ...]], outputs) -> list[Node]:
    """See the module docstring; a scale read by anything else is left to :func:`fold_scales`."""
    nodes = list(nodes)
    used = {n.name for n in nodes} | set(shapes)

    def fresh(base: str) -> str:
        name, k = base, 1
        while name in used:
            name = f"{base}_{k}"
            k += 1
        used.add(name)
        return name

    changed = True
    while changed:
        changed = False
        prod, readers = _producers(nodes), _readers(nodes, outputs)
        for k, s in enumerate(nodes):
            if s.op != "scale" or readers.get(s.outputs[0], 0) != 1:
                continue
            t = s.outputs[0]
            while True:  # forward through views read once, to the one reader
                user = next(n for n in nodes if t in n.inputs)
                if user.op in _THROUGH and readers.get(user.outputs[0], 0) == 1:
                    t = user.outputs[0]
                    continue
                break
            if user.op != "matmul" or user.inputs[1] != t or user.inputs[0] == t:
                continue
            factor = float(s.attrs["factor"])
            a = user.inputs[0]
            j = prod.get(a)
            i = nodes.index(user)
            if j is not None and nodes[j].op == "scale" and readers.get(a, 0) == 1:
                q = nodes[j]
                nodes[j] = q.evolve(attrs=frozen_map({**q.attrs, "factor": float(q.attrs["factor"]) * factor}))
            else:
                y = fresh(f"{a}_scaled")
                shapes[y] = shapes[a]
                nodes[i] = user.evolve(inputs=(y, *user.inputs[1:]))
                nodes.insert(i, Node(fresh(f"{s.name}_q"), "scale", (a,), (y,), frozen_map({"factor": factor}),
                                     aliases=(*s.aliases, s.name)))
            del nodes[k]
            nodes = _rename_input(nodes, s.outputs[0], s.inputs[0])
            changed = True
            break
    return nodes


def split_heads(nodes: list[Node], shapes: dict[str, tuple[int, ...]], outputs) -> list[Node]:
    """See the module docstring; graphs without 3-D matmuls are returned unchanged."""
    if not any(n.op == "matmul" and len(shapes[n.outputs[0]]) == 3 for n in nodes):
        return list(nodes)
    prod = _producers(nodes)
    heads: dict[str, _Heads] = {}
    pending: dict[str, tuple[str, ...]] = {}  # [T, H, d] tensor -> its heads' [T, d] parts (before the reshape)
    out: list[Node] = []
    used = {n.name for n in nodes}

    def fresh(base: str) -> str:
        name, k = base, 1
        while name in used or name in shapes:
            name = f"{base}_{k}"
            k += 1
        used.add(name)
        return name

    def refuse(n: Node, why: str):
        raise UnsupportedOpError(f"'{n.name}' ({n.op}) {why}", hint="aieflow splits attention heads made by "
                                 "reshape [T, H, d] + transpose(1, 2) of a [T, H d] tensor, batched matmul / softmax "
                                 "/ scale over them, and the transpose + reshape back to [T, H d]")

    skip: set[int] = set()
    alias: dict[str, str] = {}  # one head's [1, T, d] reshaped back to [T, d]: the head's own tensor
    for i, n in enumerate(nodes):
        if i in skip:
            continue
        if any(x in alias for x in n.inputs):
            n = n.evolve(inputs=tuple(alias.get(x, x) for x in n.inputs))
        ins = n.inputs
        if n.op == "reshape" and len(shapes[ins[0]]) == 2 and len(shapes[n.outputs[0]]) == 3:
            # [T, D] -> [T, H, d]: a head split if a transpose (1, 0, 2) follows it
            users = [(j, m) for j, m in enumerate(nodes) if n.outputs[0] in m.inputs]
            t, big = shapes[ins[0]]
            tt, h, d = shapes[n.outputs[0]]
            # [H, T, d] (perm (1, 0, 2)), or [H, d, T] (perm (1, 2, 0): K^T as an exporter writes it)
            perms = ((1, 0, 2), (1, 2, 0))
            if (len(users) == 1 and users[0][1].op == "transpose"
                    and tuple(int(v) for v in users[0][1].attrs["perm"]) in perms and tt == t and h * d == big):
                j, tr = users[0]
                flip = tuple(int(v) for v in tr.attrs["perm"]) == (1, 2, 0)
                parts = []
                for k in range(h):
                    y = ins[0]  # one head (an export of nn.MultiheadAttention with num_heads=1): the whole tensor
                    if h > 1:
                        y = fresh(f"{tr.outputs[0]}_h{k}")
                        shapes[y] = (t, d)
                        out.append(Node(fresh(f"{tr.name}_h{k}"), "slice", (ins[0],), (y,),
                                        frozen_map({"axis": 1, "start": k * d, "stop": (k + 1) * d})))
                    if flip:
                        z = fresh(f"{tr.outputs[0]}_h{k}_t")
                        shapes[z] = (d, t)
                        out.append(Node(fresh(f"{tr.name}_h{k}_t"), "transpose", (y,), (z,),
                                        frozen_map({"perm": (1, 0)})))
                        y = z
                    parts.append(y)
                heads[tr.outputs[0]] = _Heads(parts)
                skip.add(j)
                continue
        if any(x in heads for x in ins):
            hs = [heads.get(x) for x in ins]
            if (n.op == "reshape" and len(hs[0].parts) == 1 and n.outputs[0] not in outputs
                    and tuple(shapes[n.outputs[0]]) == tuple(shapes[hs[0].parts[0]])):
                alias[n.outputs[0]] = hs[0].parts[0]  # one head merged back (the exporter writes no transpose)
                continue
            if n.op == "transpose" and tuple(n.attrs["perm"]) == (1, 0, 2) and len(ins) == 1:
                pending[n.outputs[0]] = tuple(hs[0].parts)  # [H, T, d] -> [T, H, d]: merged by the reshape
                continue
            if n.op == "transpose" and tuple(n.attrs["perm"]) == (0, 2, 1):
                parts = []
                for k, x in enumerate(hs[0].parts):
                    y = fresh(f"{n.outputs[0]}_h{k}")
                    shapes[y] = tuple(reversed(shapes[x]))
                    out.append(Node(fresh(f"{n.name}_h{k}"), "transpose", (x,), (y,), frozen_map({"perm": (1, 0)})))
                    parts.append(y)
                heads[n.outputs[0]] = _Heads(parts)
                continue
            if n.op == "softmax" and len(ins) == 2 and hs[0] is not None and hs[1] is None:
                # a run-time key padding mask (the graph's second input): read whole by every head
                parts = []
                for k, x in enumerate(hs[0].parts):
                    y = fresh(f"{n.outputs[0]}_h{k}")
                    shapes[y] = tuple(shapes[n.outputs[0]][1:])
                    out.append(n.evolve(name=fresh(f"{n.name}_h{k}"), inputs=(x, ins[1]), outputs=(y,)))
                    parts.append(y)
                heads[n.outputs[0]] = _Heads(parts)
                continue
            if n.op in ("matmul", "softmax", "scale", "activation"):
                if any(h is None for h in hs):
                    refuse(n, "mixes a tensor split into heads with one that is not")
                count = {len(h.parts) for h in hs}
                if len(count) != 1:
                    refuse(n, "combines tensors with different numbers of heads")
                parts = []
                for k in range(count.pop()):
                    xs = tuple(h.parts[k] for h in hs)
                    y = fresh(f"{n.outputs[0]}_h{k}")
                    shapes[y] = tuple(shapes[n.outputs[0]][1:])
                    out.append(n.evolve(name=fresh(f"{n.name}_h{k}"), inputs=xs, outputs=(y,)))
                    parts.append(y)
                heads[n.outputs[0]] = _Heads(parts)
                continue
            refuse(n, "reads a tensor split into attention heads")
        if any(x in pending for x in ins):
            x = ins[0]
            if n.op == "reshape" and len(shapes[n.outputs[0]]) == 2 and len(ins) == 1:
                out.append(Node(n.name, "concat", pending[x], n.outputs, frozen_map({"axis": 1}), aliases=n.aliases))
                continue
            refuse(n, "reads the heads transposed back but does not reshape them to [T, H d]")
        out.append(n)
    del prod
    for t in outputs:
        if t in heads or t in pending:
            raise UnsupportedOpError(f"the graph output '{t}' is still split into attention heads",
                                     hint="merge the heads (transpose(1, 2) + reshape to [T, H d]) before the output")
    return out


def split_sliced_dense(nodes: list[Node], shapes: dict[str, tuple[int, ...]], outputs,
                       only: set[str] | None = None) -> tuple[list[Node], set[str]]:
    """A Dense layer (and its bias add) read only by feature slices, as ``nn.MultiheadAttention``'s
    packed ``in_proj`` (``[T, 3 E]`` cut into Q, K, V) is exported, becomes one Dense layer (+ bias add)
    per slice holding that slice's weight columns and bias entries: each projection then has one
    reader, and a scale after it can fold into it (``fold_scales``).  ``only``: the names of the Dense
    layers that may be cut (None: any).  Returns the nodes and the names of the Dense layers made."""
    nodes = list(nodes)
    made: set[str] = set()
    changed = True
    while changed:
        changed = False
        prod, readers = _producers(nodes), _readers(nodes, outputs)
        for i, d in enumerate(nodes):
            if d.op != "dense" or (only is not None and d.name not in only):
                continue
            chain = [i]
            t = d.outputs[0]
            users = [j for j, n in enumerate(nodes) if t in n.inputs]
            if len(users) == 1 and nodes[users[0]].op == "bias_add" and readers[t] == 1:
                chain.append(users[0])
                t = nodes[users[0]].outputs[0]
                users = [j for j, n in enumerate(nodes) if t in n.inputs]
            last = len(shapes[t]) - 1
            if (t in outputs or len(users) < 2 or readers[t] != len(users)
                    or any(nodes[j].op != "slice" or int(nodes[j].attrs["axis"]) % (last + 1) != last for j in users)):
                continue
            new: list[Node] = []
            for j in users:
                sl = nodes[j]
                lo, hi = int(sl.attrs["start"]), int(sl.attrs["stop"])
                x = d.inputs[0]
                for k in chain:
                    n = nodes[k]
                    cut = {key: np.ascontiguousarray(np.asarray(v)[..., lo:hi]) for key, v in n.params.items()}
                    attrs = dict(n.attrs)
                    if n.op == "dense":
                        attrs["out_features"] = hi - lo
                    y = sl.outputs[0] if k == chain[-1] else f"{n.outputs[0]}_f{lo}"
                    shapes[y] = (*shapes[n.outputs[0]][:-1], hi - lo)
                    new.append(n.evolve(name=f"{n.name}_f{lo}", inputs=(x, *n.inputs[1:]), outputs=(y,),
                                        attrs=frozen_map(attrs), params=frozen_map(cut)))
                    if n.op == "dense":
                        made.add(new[-1].name)
                    x = y
            drop = set(chain) | set(users)
            nodes = [n for j, n in enumerate(nodes[:i]) if j not in drop] + new + [
                n for j, n in enumerate(nodes[i:], start=i) if j not in drop]
            del prod
            changed = True
            break
    return nodes, made


def prepare(nodes: list[Node], shapes: dict[str, tuple[int, ...]], outputs) -> list[Node]:
    """Every attention rewrite, in order (a no-op for graphs without matmuls or scales).  A packed
    projection cut into Q, K and V (an ONNX export of ``nn.MultiheadAttention``) is cut again per head
    once :func:`split_heads` has sliced the heads out of it, as the torch import's per-head slices of
    its Q / K / V projections are cut at the start: both imports give one Dense layer per role and
    head.  A Dense layer the model writes itself (hand-written attention) keeps its per-head slices."""
    if not any(n.op in ("matmul", "scale") for n in nodes):
        return list(nodes)
    nodes, packed = split_sliced_dense(list(nodes), shapes, outputs)
    nodes = scales_to_queries(nodes, shapes, outputs)
    nodes = fold_transposes(nodes, outputs)
    nodes = fold_scales(nodes, outputs)
    nodes = split_heads(nodes, shapes, outputs)
    if packed:
        nodes, _ = split_sliced_dense(nodes, shapes, outputs, only=packed)
    return fold_transposes(nodes, outputs)
