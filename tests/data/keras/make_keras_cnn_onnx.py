"""Regenerates the Keras convolutional models exported by tf2onnx that tests/test_keras_tf2onnx.py
and benchmarks/keras_cnn.py import (issue 25).

Not run by the tests (they need neither TensorFlow nor tf2onnx): run it in a separate environment,

    python3.11 -m venv /tmp/tfvenv && /tmp/tfvenv/bin/pip install tensorflow-cpu==2.21.0 tf2onnx==1.17.0
    /tmp/tfvenv/bin/python tests/data/keras/make_keras_cnn_onnx.py

Each model is built with fixed seeds and trained for a few steps on synthetic data (so BatchNorm's
moving statistics and the biases are not their initial values), then exported with
``tf2onnx.convert.from_keras`` (opset 17, channels last as Keras holds it: tf2onnx puts Transpose
nodes around the convolutions and a Reshape before the Dense for ``Flatten``).  It writes, per model,
``<name>.onnx`` and ``<name>.npz`` (``x``: test inputs, ``y``: Keras' own ``predict`` of them, float32,
the oracle; ``versions``).  The files in the repository were made with tensorflow-cpu 2.21.0, keras
3.15.1 and tf2onnx 1.17.0.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import tensorflow as tf
import tf2onnx

HERE = Path(__file__).resolve().parent
L = tf.keras.layers


def conv1d() -> tf.keras.Model:
    """(a) a Conv1D classifier: 64 steps x 3 features."""
    x = tf.keras.Input((64, 3), name="x")
    y = L.Conv1D(8, 5, activation="relu", name="conv1")(x)
    y = L.MaxPooling1D(2, name="pool1")(y)
    y = L.Conv1D(8, 3, activation="relu", name="conv2")(y)
    y = L.MaxPooling1D(2, name="pool2")(y)
    y = L.Flatten(name="flatten")(y)
    y = L.Dense(5, activation="softmax", name="fc")(y)
    return tf.keras.Model(x, y)


def conv2d_bn_selu() -> tf.keras.Model:
    """(b) Conv2D + BatchNormalization + Selu + MaxPooling2D, two blocks, on 16 x 16 x 1."""
    x = tf.keras.Input((16, 16, 1), name="x")
    y = x
    for k, filters in enumerate((8, 16), start=1):
        y = L.Conv2D(filters, 3, padding="same", name=f"conv{k}")(y)
        y = L.BatchNormalization(name=f"bn{k}")(y)
        y = L.Activation("selu", name=f"selu{k}")(y)
        y = L.MaxPooling2D(2, name=f"pool{k}")(y)
    y = L.Flatten(name="flatten")(y)
    y = L.Dense(10, activation="softmax", name="fc")(y)
    return tf.keras.Model(x, y)


def separable() -> tf.keras.Model:
    """(c) SeparableConv2D blocks on 16 x 16 x 3."""
    x = tf.keras.Input((16, 16, 3), name="x")
    y = L.SeparableConv2D(8, 3, padding="same", activation="relu", name="sep1")(x)
    y = L.MaxPooling2D(2, name="pool1")(y)
    y = L.SeparableConv2D(16, 3, activation="relu", name="sep2")(y)
    y = L.Flatten(name="flatten")(y)
    y = L.Dense(4, activation="softmax", name="fc")(y)
    return tf.keras.Model(x, y)


MODELS = {"keras_conv1d": conv1d, "keras_conv2d_bn_selu": conv2d_bn_selu, "keras_separable": separable}


def main() -> None:
    versions = f"tensorflow {tf.__version__}, keras {tf.keras.__version__}, tf2onnx {tf2onnx.__version__}"
    for i, (name, build) in enumerate(MODELS.items()):
        tf.keras.utils.set_random_seed(100 + i)
        rng = np.random.default_rng(100 + i)
        model = build()
        shape = tuple(model.input.shape[1:])
        classes = int(model.output.shape[-1])
        # synthetic data with a learnable label (the sign pattern of a few input means), a few steps
        xs = rng.normal(0.5, 1.0, (256, *shape)).astype(np.float32)
        labels = (xs.reshape(256, -1)[:, :classes * 7].reshape(256, classes, 7).mean(-1)).argmax(-1)
        model.compile(optimizer=tf.keras.optimizers.Adam(0.01), loss="sparse_categorical_crossentropy")
        model.fit(xs, labels, batch_size=32, epochs=2, verbose=0)
        x = rng.normal(0.5, 1.0, (16, *shape)).astype(np.float32)
        y = model.predict(x, verbose=0)
        spec_in = (tf.TensorSpec((None, *shape), tf.float32, name="x"),)
        proto, _ = tf2onnx.convert.from_keras(model, input_signature=spec_in, opset=17)
        (HERE / f"{name}.onnx").write_bytes(proto.SerializeToString())
        np.savez(HERE / f"{name}.npz", x=x, y=y.astype(np.float32), versions=versions)
        ops = sorted({n.op_type for n in proto.graph.node})
        print(f"{name}: {shape} -> {y.shape}, {proto.ByteSize()} bytes, ops {ops}")


if __name__ == "__main__":
    main()
