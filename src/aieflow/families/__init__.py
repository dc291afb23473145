"""Op families' variants (docs/ARCHITECTURE.md "Direction: one compiler"): how each lowers a planned
node into the mapped graph and emits its kernels.  ``dense/resident_cascade`` is the first."""
