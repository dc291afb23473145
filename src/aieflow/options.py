"""Which top-level config options each design kind takes: an option works for a kind or is refused
by name, never silently ignored (issue 17, item 7).

``refuse_unsupported`` runs in ``api.compile`` / ``api.explore`` once the kind is known, on the keys
the user wrote (``Config.given``); saved designs' configs are not checked again on load.
"""

from __future__ import annotations

from .config import Config
from .errors import ConfigError

_POSTS = ("it places an activation / softmax after a chain's Dense layer (in its kernel or its own); this kind "
          "maps its activations itself; leave posts out")
# kind -> option -> why it does not apply and what to do instead
UNSUPPORTED: dict[str, dict[str, str]] = {
    "cnn": {
        "batch": "a CNN design runs one frame per graph iteration on each replica; leave batch out "
                 "(copies of the design: cnn.replicas)",
        "replicas": "CNN designs take their copies from cnn.replicas; write cnn: {replicas: N}",
        "posts": _POSTS,
    },
    "recurrent": {
        "batch": "a recurrent design streams one sequence at a time through its step loop; leave batch out",
        "replicas": "copies of a recurrent design are not generated; leave replicas out",
        "posts": _POSTS,
    },
    "streamed_dense": {
        "target": "a streamed Dense layer is one GEMM design whose blocks the GEMM model picks; nothing is "
                  "left to search; leave target out",
        "replicas": "copies of a streamed Dense design are not generated; leave replicas out",
        "posts": _POSTS,
    },
}
# kind -> why a searched batch (``batch: auto`` or a list) does not apply; a fixed batch does
SEARCHED_BATCH_UNSUPPORTED: dict[str, str] = {
    "streamed_dense": "the batch of a streamed Dense design is not searched; give one batch (e.g. batch: 8)",
}

# precision -> the design kinds built for it and what it is; every other kind refuses it by name
# (refuse_precision).  fp16 (AIE-MLv2's float16): the resident Dense chain, ReLU fused (docs/numerics.md).
PRECISION_KINDS: dict[str, tuple[tuple[str, ...], str]] = {
    "fp16": (("chain",), "IEEE float16 (AIE-MLv2) is built for chains of Dense layers (+ ReLU) with resident weights"),
}


def used_precisions(config: Config) -> set[str]:
    """The config's default precision and every layer's own."""
    return {config.precision} | {lc.precision for lc in config.layers.values() if lc.precision}


def refuse_precision(config: Config, kind: str) -> None:
    """A ConfigError naming a precision the config uses that ``kind`` designs are not built for."""
    for precision in sorted(used_precisions(config)):
        kinds, what = PRECISION_KINDS.get(precision, (None, ""))
        if kinds is not None and kind not in kinds:
            raise ConfigError(f"precision {precision} does not apply to {kind} designs: {what}",
                              hint="use precision bf16 (AIE-ML / AIE-MLv2) or an integer precision for this model")


def precision_allows(config: Config, kind: str) -> bool:
    """Whether every precision the config uses is built for ``kind`` designs (:func:`refuse_precision`)."""
    return all(PRECISION_KINDS.get(p, (None, ""))[0] is None or kind in PRECISION_KINDS[p][0] for p in used_precisions(config))


def refuse_unsupported(config: Config, kind: str) -> None:
    """A ConfigError naming the first option the user gave that ``kind`` does not take."""
    for key, why in UNSUPPORTED.get(kind, {}).items():
        if key in config.given:
            raise ConfigError(f"config option '{key}' does not apply to {kind} designs: {why}")
    if kind in SEARCHED_BATCH_UNSUPPORTED and config.batch_search is not None:
        raise ConfigError(f"config option 'batch' ({config.to_json()['batch']}) does not apply to {kind} designs: "
                          f"{SEARCHED_BATCH_UNSUPPORTED[kind]}")
