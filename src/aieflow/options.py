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


def refuse_unsupported(config: Config, kind: str) -> None:
    """A ConfigError naming the first option the user gave that ``kind`` does not take."""
    for key, why in UNSUPPORTED.get(kind, {}).items():
        if key in config.given:
            raise ConfigError(f"config option '{key}' does not apply to {kind} designs: {why}")
    if kind in SEARCHED_BATCH_UNSUPPORTED and config.batch_search is not None:
        raise ConfigError(f"config option 'batch' ({config.to_json()['batch']}) does not apply to {kind} designs: "
                          f"{SEARCHED_BATCH_UNSUPPORTED[kind]}")
