"""ViT-style image blocks on the DAG path (issue 19): the patch embedding, the class token and
class-token pooling, rewritten after import (both frontends) into what the DAG mapping runs.

* **Patch embedding.**  A ``conv2d`` that reads the model input with ``stride == kernel``, no
  padding, no groups or dilation and a kernel that tiles the image is a Dense over patches: it
  becomes a ``patches`` view of the input (``ops/views.py``: ``[C, H, W]`` as ``P`` rows of
  ``C kh kw`` features, the Conv2d weight's ``(c, ki, kj)`` order) followed by a ``dense``
  ``C kh kw -> E`` (the weight ``[E, C, kh, kw]`` reshaped), then a transpose and reshape back to the
  convolution's ``[E, H / kh, W / kw]``.  A reshape / permute chain that the model itself writes to
  cut the image into patches (``x.reshape(C, h, kh, w, kw).permute(...)``) becomes the same view when
  its element order is the patch order up to a permutation of the features that every reader folds
  (a Dense: its weight rows are permuted, as ``channels_last.permuted_rows`` does).  The rewrite
  of a convolution is kept only where the model reads its output as tokens (the views back to its
  image fold away, next item); a convolution whose image a CNN reads stays a ``conv2d``.  The DAG path
  reads a leading ``patches`` view as the input PLIO's layout: the host writes the image in patch
  order (``dag/plan.host_layout``), no kernel gathers it.
* **View chains.**  Consecutive reshapes / transposes that give their source back disappear (the
  convolution's ``[E, h, w]`` read by ``flatten(2).transpose(1, 2)`` is the Dense's ``[P, E]`` itself).
* **Class token.**  ``prepend_const`` (``ops/prepend_const.py``, ``torch.cat([cls.expand(B, -1, -1),
  x], 1)``) right after such a patch Dense (or any Dense whose input is the ``patches`` view): the
  view gets ``k`` leading zero rows (``lead``), so the Dense writes its bias ``b`` there, and the
  constant ``C - b`` is added to those rows by an ``add_const`` (merged into the positional add
  that follows, if one does: ``pos[:k] + C - b``).  In float ``b + (pos_0 + C - b)`` equals
  ``C + pos_0`` up to float32 rounding; in integers the emulation is the Dense's and the add's own.
* **Class-token pooling** (``x[:, i]`` on ``[B, T, E]``, :func:`token_select_nodes`): a ``slice``
  of row ``i`` (``[1, E]``) and a reshape to ``[E]``; the DAG path reads that row of every sample
  straight from the producer's memory-tile buffer (``dag/plan.Operand.row``: runs of ``E``
  features, one per sample), no kernel and no tile.
"""

from __future__ import annotations

import numpy as np

from ..errors import UnsupportedOpError
from ..ir import Graph, ImportedModel, Node, Tensor, frozen_map
from ..ops.views import patch_index

VIEW_OPS = ("reshape", "transpose")

# ONNX ops the importer evaluates when every input is a constant: what the exporters write for a
# class token's ``cls.expand(x.shape[0], -1, -1)`` (the batch is the export's, a constant), and a
# constant key padding mask's ``Cast`` / ``Not`` (a registered bool buffer, the TorchScript export).
ONNX_CONSTANT_OPS = ("ConstantOfShape", "Equal", "Where", "Expand", "Cast", "Not")


def onnx_constant(node, ins: list, name: str) -> np.ndarray:
    """The value of ``node`` (one of :data:`ONNX_CONSTANT_OPS`, ONNX semantics) on constant inputs."""
    import onnx

    op = node.op_type
    if op == "ConstantOfShape":
        attr = next((a for a in node.attribute if a.name == "value"), None)
        fill = onnx.numpy_helper.to_array(attr.t).reshape(-1) if attr is not None else np.zeros(1, np.float32)
        return np.full(tuple(int(d) for d in np.asarray(ins[0]).reshape(-1)), fill[0], dtype=fill.dtype)
    if op == "Equal":
        return np.equal(ins[0], ins[1])
    if op == "Where":
        return np.where(ins[0], ins[1], ins[2])
    if op == "Not":
        return np.logical_not(ins[0])
    if op == "Cast":
        to = next(a.i for a in node.attribute if a.name == "to")
        return np.asarray(ins[0]).astype(onnx.helper.tensor_dtype_to_np_dtype(to))
    shape = tuple(int(d) for d in np.asarray(ins[1]).reshape(-1))  # Expand: bidirectional broadcast
    try:
        return np.array(np.broadcast_to(ins[0], np.broadcast_shapes(np.shape(ins[0]), shape)))
    except ValueError:
        raise UnsupportedOpError(f"node '{name}' (Expand) broadcasts a constant of shape {np.shape(ins[0])} to {shape}, "
                                 "which ONNX does not allow") from None


def token_select_nodes(name: str, x: str, y: str, shape: tuple[int, ...], index: int,
                       unique) -> tuple[list[Node], dict[str, tuple[int, ...]]]:
    """The nodes computing ``y = x[index]`` (one token of a per-sample ``[T, E]``, see the module
    docstring) and the per-sample shapes of the tensors they write."""
    if len(shape) != 2:
        raise UnsupportedOpError(f"'{name}' selects a token of per-sample shape {shape}; aieflow maps x[:, i] of "
                                 "[B, T, E] (class-token pooling)")
    t, e = shape
    i = index + t if index < 0 else index
    if not 0 <= i < t:
        raise UnsupportedOpError(f"'{name}' selects token {index} of {t}", layer=name)
    row = f"{y}__row"
    nodes = [
        Node(name=unique(name), op="slice", inputs=(x,), outputs=(row,),
             attrs=frozen_map({"axis": 0, "start": i, "stop": i + 1})),
        Node(name=unique(f"{name}_flat"), op="reshape", inputs=(row,), outputs=(y,), attrs=frozen_map({"shape": (e,)})),
    ]
    return nodes, {row: (1, e), y: (e,)}


# ----------------------------------------------------------------------------- the pass


class _Rewrite:
    def __init__(self, graph: Graph):
        self.nodes = list(graph.nodes)
        self.shapes = {k: tuple(t.shape) for k, t in graph.tensors.items()}
        self.inputs, self.outputs = graph.inputs, graph.outputs
        self.names = {n.name for n in self.nodes}

    def unique(self, base: str) -> str:
        name, k = base, 1
        while name in self.names:
            name, k = f"{base}_{k}", k + 1
        self.names.add(name)
        return name

    def readers(self, t: str) -> list[Node]:
        return [n for n in self.nodes if t in n.inputs]

    def producer(self, t: str) -> Node | None:
        return next((n for n in self.nodes if t in n.outputs), None)

    def rename(self, old: str, new: str) -> None:
        self.nodes = [n.evolve(inputs=tuple(new if t == old else t for t in n.inputs)) for n in self.nodes]
        self.outputs = tuple(new if t == old else t for t in self.outputs)

    def replace(self, old: Node, new: list[Node]) -> None:
        i = self.nodes.index(old)
        self.nodes[i:i + 1] = new

    # -- patch embedding -----------------------------------------------------------------------

    def patch_convs(self) -> set[str]:
        """The rewrite of every patch-embedding convolution; the names of the views back to its image."""
        back: set[str] = set()
        for node in list(self.nodes):
            if node.op != "conv2d" or node.inputs[0] not in self.inputs:
                continue
            a = node.attrs
            c, h, w = self.shapes[node.inputs[0]]
            kh, kw = (int(k) for k in a["kernel"])
            if (tuple(a["stride"]) != (kh, kw) or any(int(p) for p in a["padding"]) or a.get("groups", 1) != 1
                    or a.get("dilation", (1, 1)) != (1, 1) or h % kh or w % kw or a.get("activation")):
                continue  # an ordinary convolution: the CNN mapping's
            wt = np.asarray(node.params["weight"], dtype=np.float32)
            e, p, f = wt.shape[0], (h // kh) * (w // kw), c * kh * kw
            y = node.outputs[0]
            xp, yd, yt = f"{y}__patches", f"{y}__tokens", f"{y}__channels"
            params = {"weight": np.ascontiguousarray(wt.reshape(e, f).T)}
            if "bias" in node.params:
                params["bias"] = np.asarray(node.params["bias"], dtype=np.float32)
            views = [Node(self.unique(f"{node.name}_t"), "transpose", (yd,), (yt,), {"perm": (1, 0)}),
                     Node(self.unique(f"{node.name}_image"), "reshape", (yt,), (y,), {"shape": self.shapes[y]})]
            self.replace(node, [
                Node(self.unique(f"{node.name}_patches"), "patches", node.inputs, (xp,), {"kernel": (kh, kw), "lead": 0}),
                Node(node.name, "dense", (xp,), (yd,), {"in_features": f, "out_features": e, "activation": None},
                     params, aliases=node.aliases),
                *views,
            ])
            back |= {v.name for v in views}
            self.shapes.update({xp: (p, f), yd: (p, e), yt: (e, p)})
        return back

    def chain_index(self, node: Node) -> tuple[str, np.ndarray]:
        """The source tensor of the view chain ending at ``node`` (single-reader views) and where
        each element of ``node``'s output comes from in the source's flat sample."""
        t = node.inputs[0]
        prev = self.producer(t)
        if prev is not None and prev.op in VIEW_OPS and len(self.readers(t)) == 1 and t not in self.outputs:
            src, ids = self.chain_index(prev)
        else:
            src, ids = t, np.arange(int(np.prod(self.shapes[t]))).reshape(self.shapes[t])
        if node.op == "transpose":
            ids = np.transpose(ids, tuple(int(p) for p in node.attrs["perm"]))
        return src, ids.reshape(self.shapes[node.outputs[0]])

    def fold_views(self) -> None:
        """View chains that compose to a reshape become one (see the module docstring); a chain read
        only by Dense layers that cuts the model input into patches becomes a ``patches`` view."""
        changed = True
        while changed:
            changed = False
            for node in self.nodes:
                if node.op not in VIEW_OPS:
                    continue
                y = node.outputs[0]
                if any(r.op in VIEW_OPS for r in self.readers(y)) and y not in self.outputs:
                    continue  # fold from the chain's end
                src, ids = self.chain_index(node)
                flat = np.array_equal(ids.reshape(-1), np.arange(ids.size))
                if flat and self.shapes[src] == self.shapes[y] and y not in self.outputs:
                    self.drop_chain(node, src)
                    self.rename(y, src)
                    changed = True
                    break
                if src in self.inputs and self.patchify(node, src, ids):
                    changed = True
                    break

    def drop_chain(self, last: Node, src: str, keep_last: bool = False) -> None:
        chain, n = [], last
        while True:
            chain.append(n)
            if n.inputs[0] == src:
                break
            n = self.producer(n.inputs[0])
        for n in chain[1:]:
            self.nodes.remove(n)
            self.shapes.pop(n.outputs[0], None)
        if keep_last:
            i = self.nodes.index(last)
            self.nodes[i] = Node(last.name, "reshape", (src,), last.outputs, {"shape": self.shapes[last.outputs[0]]},
                                 aliases=last.aliases)
        else:
            self.nodes.remove(last)

    def patchify(self, last: Node, src: str, ids: np.ndarray) -> bool:
        """A chain from the model input ``[C, H, W]`` to ``[P, F]`` that cuts it into patches, read
        only by Dense layers: a ``patches`` view, the readers' weight rows permuted."""
        shape, y = self.shapes[src], last.outputs[0]
        readers = self.readers(y)
        if len(shape) != 3 or ids.ndim != 2 or not readers or any(r.op != "dense" for r in readers) or y in self.outputs:
            return False
        c, h, w = shape
        for kh in range(1, h + 1):
            if h % kh or ids.shape[1] % (c * kh) or w % (ids.shape[1] // (c * kh)):
                continue
            kw = ids.shape[1] // (c * kh)
            ref = patch_index(shape, (kh, kw))
            if ref.shape != ids.shape:
                continue
            # feature j of every row is the reference's feature q[j] of that row
            pos = np.argsort(ref[0])
            q = pos[np.searchsorted(ref[0], ids[0], sorter=pos)] if np.isin(ids[0], ref[0]).all() else None
            if q is None or not np.array_equal(ids, ref[:, q]):
                continue
            self.drop_chain(last, src, keep_last=True)
            i = next(k for k, n in enumerate(self.nodes) if n.outputs == (y,))
            self.nodes[i] = Node(self.nodes[i].name, "patches", (src,), (y,), {"kernel": (kh, kw), "lead": 0},
                                 aliases=self.nodes[i].aliases)
            for r in readers:  # x[q] @ W == x @ W' with W'[q[j]] = W[j]
                wt = np.asarray(r.params["weight"])
                wp = np.empty_like(wt)
                wp[q] = wt
                self.replace(r, [r.evolve(params=dict(r.params, weight=wp))])
            return True
        return False

    # -- class token ---------------------------------------------------------------------------

    def class_tokens(self) -> None:
        for node in list(self.nodes):
            if node.op != "prepend_const":
                continue
            dense = self.producer(node.inputs[0])
            view = self.producer(dense.inputs[0]) if dense is not None and dense.op == "dense" else None
            if (view is None or view.op != "patches" or int(view.attrs["lead"]) or len(self.readers(view.outputs[0])) != 1
                    or len(self.readers(dense.outputs[0])) != 1 or dense.outputs[0] in self.outputs):
                continue  # left as is: the DAG path refuses it by name (ops/prepend_const.py)
            cls = np.asarray(node.params["constant"], dtype=np.float32)
            k = cls.shape[0]
            b = np.asarray(dense.params.get("bias", np.zeros(cls.shape[1])), dtype=np.float32)
            rows = self.shapes[dense.outputs[0]][0] + k
            const = np.zeros((rows, cls.shape[1]), dtype=np.float32)
            const[:k] = cls - b
            xv, y = view.outputs[0], node.outputs[0]
            self.replace(view, [view.evolve(attrs=dict(view.attrs, lead=k))])
            self.shapes[xv] = (self.shapes[xv][0] + k, self.shapes[xv][1])
            self.shapes[dense.outputs[0]] = (rows, cls.shape[1])
            after = self.readers(y)
            if len(after) == 1 and after[0].op == "add_const" and y not in self.outputs:
                pos = after[0]
                self.nodes.remove(node)
                self.replace(pos, [pos.evolve(inputs=(dense.outputs[0],),
                                              params=dict(pos.params, constant=np.asarray(pos.params["constant"], dtype=np.float32) + const),
                                              aliases=(*pos.aliases, node.name))])
                self.shapes.pop(y, None)
            else:
                self.replace(node, [Node(node.name, "add_const", (dense.outputs[0],), (y,), {}, {"constant": const},
                                         aliases=node.aliases)])

    def graph(self, old: Graph) -> Graph:
        read = {t for n in self.nodes for t in n.inputs} | set(self.outputs) | set(self.inputs)
        written = {t for n in self.nodes for t in n.outputs}
        tensors = {t: Tensor(t, s) for t, s in self.shapes.items() if t in read | written}
        g = Graph(tuple(self.nodes), tensors, self.inputs, self.outputs, old.name)
        g.validate()
        return g


def rewrite(imported: ImportedModel) -> ImportedModel:
    """The pass (module docstring); a graph with none of these patterns comes back unchanged."""
    g = imported.graph
    ops = {n.op for n in g.nodes}
    if not ({"conv2d", "prepend_const"} & ops or ops & set(VIEW_OPS) and any(t in g.inputs for n in g.nodes for t in n.inputs
                                                                          if n.op in VIEW_OPS)):
        return imported
    r = _Rewrite(g)
    back = r.patch_convs()
    r.fold_views()
    if any(n.name in back for n in r.nodes):  # a convolution's output read as an image: the CNN mapping's
        r = _Rewrite(g)
        r.fold_views()
    r.class_tokens()
    if [n.op for n in r.nodes] == [n.op for n in g.nodes]:
        return imported
    from dataclasses import replace

    return replace(imported, graph=r.graph(g))
