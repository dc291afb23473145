"""Choose parallelism, tiling and data layout for every layer, in graph order.

On AIE1 a layer reads its producer's buffers directly, so each consumer's plan depends on its
producer's; on AIE-ML a memory tile re-tiles between layers and the plans are independent except
for the panel width the memory tile delivers.
"""

from __future__ import annotations

from dataclasses import replace

from ..config import Config
from ..devices import Device
from ..errors import PlanError, UnsupportedOpError
from ..ir import Graph, Node
from ..ops.base import PlanContext
from ..ops.dense import DenseLayout, with_out_panel
from ..ops.post import fused_post, is_fused_post
from ..ops.registry import family
from .transport import check_direct_link, check_link, direct_link_possible, memtile_link


def _passes_through(graph: Graph, node: Node) -> bool:
    """A view (no kernel) or an activation / softmax fused into the Dense before it."""
    return family(node.op).is_view or is_fused_post(graph, node)


def _dense_producer(graph: Graph, by_name: dict[str, Node], tensor: str) -> Node | None:
    """The dense node whose output reaches ``tensor`` through views and fused posts only."""
    node = graph.producer(tensor)
    while node is not None and _passes_through(graph, node):
        node = graph.producer(node.inputs[0])
    return by_name.get(node.name) if node is not None else None


def plan(graph: Graph, device: Device, config: Config) -> Graph:
    min_rows: dict[str, int] = {}
    while True:
        try:
            planned = _plan_layers(graph, device, config, min_rows)
            break
        except PlanError as e:
            # On AIE1 a consumer must read its producer's slices as they are; when they are too
            # big for it, give the producer more rows (smaller slices) and plan again.
            producer = _widenable_producer(graph, device, config, e.layer, min_rows)
            if producer is None:
                raise
            min_rows[producer.name] = producer.plan.cas_num + 1
    return _finish(graph, device, planned)


def _widenable_producer(graph, device, config, layer, min_rows):
    if device.memory_tile_rows or layer is None:
        return None
    try:
        node = graph.node(layer)
    except KeyError:
        return None
    planned = _plan_layers(graph, device, config, min_rows, stop_before=node.name)
    producer = _dense_producer(graph, planned, node.inputs[0])
    if producer is None or config.layer(producer.name, *producer.aliases).cas_num is not None:
        return None
    if producer.plan.cas_num >= min(device.rows, -(-producer.plan.out_features // producer.plan.mmul[2])):
        return None
    return producer


def _plan_layers(graph, device, config, min_rows, stop_before=None) -> dict[str, Node]:
    planned: dict[str, Node] = {}
    for node in graph.nodes:
        if node.name == stop_before:
            break
        fam = family(node.op, node.name)
        if fam.plan is None or is_fused_post(graph, node):
            planned[node.name] = node
            continue
        consumers = [n for n in graph.consumers(node.outputs[0])]
        if len(consumers) > 1:
            raise UnsupportedOpError(
                f"output feeds {len(consumers)} layers ({', '.join(c.name for c in consumers)}); "
                "fan-out is not supported yet",
                layer=node.name,
            )
        producer = _dense_producer(graph, planned, node.inputs[0])
        layout: DenseLayout | None = producer.plan.output_layout if producer is not None else None
        ctx = PlanContext(device, config, config.layer(node.name, *node.aliases), graph, layout, min_rows.get(node.name, 1),
                          fused_post(graph, node), neighbour_memory=True)
        planned[node.name] = fam.plan(node, ctx)
    return planned


def _finish(graph: Graph, device: Device, planned: dict[str, Node]) -> Graph:
    # Output panel widths: what each consumer reads (AIE1 direct buffers), the mmul N when a
    # memory tile re-tiles (AIE-ML), the mmul N for the graph output PLIOs.
    nodes = []
    direct: set[str] = set()  # AIE-ML consumers whose producer writes their input buffers directly
    for node in graph.nodes:
        n = planned[node.name]
        if n.plan is not None:
            if n.name in direct:
                n = n.evolve(plan=replace(n.plan, link="buffer"))
            consumer = _next_dense(graph, planned, n)
            if consumer is None:
                # mmul-N panels: each output block is one vector store (the output PLIO files and
                # verify read the same panel layout)
                n = with_out_panel(n, n.plan.mmul[2])
            elif device.memory_tile_rows == 0:
                n = with_out_panel(n, consumer.plan.in_panel)
            elif direct_link_possible(n, consumer) and len(graph.consumers(n.outputs[0])) == 1:
                # the layouts already agree: skip the memory tile (the producer writes K panels)
                n = with_out_panel(n, consumer.plan.in_panel)
                direct.add(consumer.name)
            else:
                n = with_out_panel(n, n.plan.mmul[2])
        nodes.append(n)
    if device.memory_tile_rows:
        # every memory-tile link must move exactly what both plans declare before anything is
        # placed or emitted (the memory tiles' limits are the check pass's, on the mapped graph)
        by_name = {n.name: n for n in nodes}
        for n in nodes:
            consumer = _next_dense(graph, by_name, n) if n.plan is not None else None
            if consumer is not None and consumer.plan.link == "buffer":
                check_direct_link(n, consumer)
            elif consumer is not None:
                check_link(memtile_link(n, consumer, device.memtile_channels), n, consumer)
    total = sum(n.plan.footprint for n in nodes if n.plan is not None)
    if total > device.compute_tiles:
        lent = total - sum(n.plan.tiles for n in nodes if n.plan is not None)
        raise PlanError(
            f"the design needs {total} compute tiles" + (f" ({lent} of them lending their data memory)" if lent else "")
            + f" but {device.board} has {device.compute_tiles}",
            hint="use a smaller batch or a narrower precision, or choose a larger device",
        )
    return graph.with_nodes(nodes)


def _next_dense(graph: Graph, planned: dict[str, Node], node: Node) -> Node | None:
    tensor = node.outputs[0]
    while True:
        users = graph.consumers(tensor)
        if not users:
            return None
        user = users[0]
        if _passes_through(graph, user):
            tensor = user.outputs[0]
            continue
        return planned.get(user.name)
