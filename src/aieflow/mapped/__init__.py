"""The mapped graph: kernels on tiles, shared buffers, PLIOs and the links that move data between
them (docs/ARCHITECTURE.md, "Direction: one compiler").  ``ir`` holds the types, ``adf`` writes the
ADF graph from them."""

from .ir import Cost, Kernel, Link, MappedGraph, Plio, Port, SharedBuffer

__all__ = ["Cost", "Kernel", "Link", "MappedGraph", "Plio", "Port", "SharedBuffer"]
