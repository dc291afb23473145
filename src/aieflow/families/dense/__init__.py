"""The Dense family's variants: ``resident_cascade`` (weights resident in the cascade's tiles)."""
