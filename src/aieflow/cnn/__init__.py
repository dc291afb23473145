"""Convolutional networks on the AI Engine: lowering, mappings (the ESPCN thesis's im2col + PL
design and aieflow's own on-array design), performance model, project emission, x86 verification
and the :class:`CnnDesign` object ``aieflow.compile`` returns for graphs with convolutions."""

from .design import CnnDesign

__all__ = ["CnnDesign"]
