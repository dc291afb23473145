"""Regenerates the Keras recurrent models exported by tf2onnx that tests/test_keras_onnx.py imports.

Not run by the tests (they need neither TensorFlow nor tf2onnx): run it in a separate environment,

    python -m venv /tmp/tfvenv && /tmp/tfvenv/bin/pip install tensorflow-cpu tf2onnx
    /tmp/tfvenv/bin/python tests/data/keras/make_keras_onnx.py

It writes, per model, ``<name>.onnx`` (tf2onnx's export, opset 17) and ``<name>.npz`` (``x``: the
inputs, ``y``: Keras' own ``predict`` of them, float32; ``versions``).  The files in the repository
were made with tensorflow-cpu 2.21.0, keras 3.15.1 and tf2onnx 1.17.0.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import tensorflow as tf
import tf2onnx

HERE = Path(__file__).resolve().parent
STEPS, FEATURES = 12, 6

MODELS = {
    # name: (layer, units, keyword arguments, dense head)
    "keras_gru": ("GRU", 16, {}, 1),  # reset_after=True (Keras' default): ONNX linear_before_reset=1
    "keras_gru_reset_before": ("GRU", 16, {"reset_after": False}, 1),
    "keras_lstm": ("LSTM", 16, {}, 1),
    "keras_gru_sequences": ("GRU", 8, {"return_sequences": True}, 0),
    "keras_lstm_sequences": ("LSTM", 8, {"return_sequences": True}, 0),
}


def build(layer: str, units: int, kwargs: dict, head: int) -> tf.keras.Model:
    inputs = tf.keras.Input((STEPS, FEATURES), name="x")
    y = getattr(tf.keras.layers, layer)(units, name="rnn", **kwargs)(inputs)
    if head:
        y = tf.keras.layers.Dense(head, name="fc")(y)
    return tf.keras.Model(inputs, y)


def main() -> None:
    rng = np.random.default_rng(0)
    versions = f"tensorflow {tf.__version__}, keras {tf.keras.__version__}, tf2onnx {tf2onnx.__version__}"
    for i, (name, spec) in enumerate(MODELS.items()):
        tf.keras.utils.set_random_seed(i)
        model = build(*spec)
        # non-zero biases, so a wrong bias layout shows (Keras initialises them to zero)
        for w in model.weights:
            if "bias" in w.name:
                w.assign(rng.normal(0.0, 0.3, w.shape).astype(np.float32))
        x = rng.standard_normal((32, STEPS, FEATURES)).astype(np.float32)
        y = model.predict(x, verbose=0)
        spec_in = (tf.TensorSpec((None, STEPS, FEATURES), tf.float32, name="x"),)
        proto, _ = tf2onnx.convert.from_keras(model, input_signature=spec_in, opset=17)
        (HERE / f"{name}.onnx").write_bytes(proto.SerializeToString())
        np.savez(HERE / f"{name}.npz", x=x, y=y.astype(np.float32), versions=versions)
        ops = sorted({n.op_type for n in proto.graph.node})
        print(f"{name}: {y.shape}, ops {ops}")


if __name__ == "__main__":
    main()
