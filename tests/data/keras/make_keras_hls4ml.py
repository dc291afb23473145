"""Regenerates the saved Keras models that tests/test_from_hls4ml_keras.py converts with hls4ml's
Keras converter and compiles with ``aieflow.from_hls4ml`` (issue 18, hls4ml models from Keras).

Not run by the tests (they need no TensorFlow: they load the ``.keras`` files with Keras 3 on its
PyTorch backend). Run it in a separate environment,

    python3.11 -m venv /tmp/tfvenv && /tmp/tfvenv/bin/pip install tensorflow-cpu==2.21.0
    /tmp/tfvenv/bin/python tests/data/keras/make_keras_hls4ml.py [NAME ...]

or on any Keras 3 backend (``KERAS_BACKEND=torch python tests/data/keras/make_keras_hls4ml.py
hls4ml_conv1d``); names select the models to write (all by default).

Each model is built with fixed seeds and trained for a few steps on synthetic data (so the biases
are not their initial zeros), then saved in Keras' native format (``<name>.keras``). It writes, per
model, ``<name>.npz``: ``x`` (test inputs), ``y`` (Keras' own ``predict`` of them with TensorFlow,
float32: the float reference) and ``versions``. The MLP, CNN and GRU files in the repository were
made with tensorflow-cpu 2.21.0 and keras 3.15.1, the Conv1D one with keras 3.15.1 on torch 2.13.0
(no TensorFlow at hand).

* ``hls4ml_mlp``: 16 -> 32 (ReLU) -> 16 (ReLU) -> 5, the usual jet-tagging MLP shape.
* ``hls4ml_cnn``: an 8 x 8 x 3 image, Conv2D(4, 3, same, ReLU), Conv2D(6, 3, stride 2, ReLU),
  Flatten, Dense(5): a small channels-last classifier (logits).
* ``hls4ml_gru``: 6 steps x 4 features, GRU(8) (reset_after, tanh / sigmoid), Dense(3).
* ``hls4ml_conv1d``: 16 steps x 3 channels, Conv1D(4, 3, same, ReLU), Conv1D(6, 3, stride 2,
  ReLU), Flatten, Dense(5).
"""

from __future__ import annotations

import sys
from pathlib import Path

import keras
import numpy as np

HERE = Path(__file__).resolve().parent
L = keras.layers


def mlp() -> keras.Model:
    return keras.Sequential([keras.Input((16,), name="x"), L.Dense(32, activation="relu", name="fc1"),
                             L.Dense(16, activation="relu", name="fc2"), L.Dense(5, name="fc3")], name="mlp")


def cnn() -> keras.Model:
    return keras.Sequential([keras.Input((8, 8, 3), name="x"),
                             L.Conv2D(4, 3, padding="same", activation="relu", name="conv1"),
                             L.Conv2D(6, 3, strides=2, activation="relu", name="conv2"),
                             L.Flatten(name="flatten"), L.Dense(5, name="fc")], name="cnn")


def gru() -> keras.Model:
    return keras.Sequential([keras.Input((6, 4), name="x"), L.GRU(8, name="gru"), L.Dense(3, name="fc")], name="gru")


def conv1d() -> keras.Model:
    return keras.Sequential([keras.Input((16, 3), name="x"),
                             L.Conv1D(4, 3, padding="same", activation="relu", name="conv1"),
                             L.Conv1D(6, 3, strides=2, activation="relu", name="conv2"),
                             L.Flatten(name="flatten"), L.Dense(5, name="fc")], name="conv1d")


def _backend_version() -> str:
    backend = keras.backend.backend()
    module = __import__(backend)
    return f"{backend} {module.__version__}, keras {keras.__version__}"


def main(names: list[str]) -> None:
    versions = _backend_version()
    for seed, (name, build, shape, n_out) in enumerate((("hls4ml_mlp", mlp, (16,), 5),
                                                         ("hls4ml_cnn", cnn, (8, 8, 3), 5),
                                                         ("hls4ml_gru", gru, (6, 4), 3),
                                                         ("hls4ml_conv1d", conv1d, (16, 3), 5))):
        if names and name not in names:
            continue
        keras.utils.set_random_seed(100 + seed)
        model = build()
        model.compile(optimizer=keras.optimizers.Adam(0.01), loss="mse")
        rng = np.random.default_rng(seed)
        x_train = rng.normal(size=(256, *shape)).astype(np.float32)
        y_train = rng.normal(size=(256, n_out)).astype(np.float32)
        model.fit(x_train, y_train, epochs=3, batch_size=32, verbose=0)
        model.save(HERE / f"{name}.keras")
        x = (rng.normal(size=(64, *shape)) * 1.5).astype(np.float32)
        y = model.predict(x, verbose=0).astype(np.float32)
        np.savez_compressed(HERE / f"{name}.npz", x=x, y=y, versions=np.array(versions))
        print(name, x.shape, y.shape, versions)


if __name__ == "__main__":
    main(sys.argv[1:])
