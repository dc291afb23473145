"""A run-time key padding mask over 17 keys (a ViT's 16 patches + the class token; issue 19): its keep
rows are not whole 32-bit words, so they travel padded to 20 bytes (dag/plan.mask_pitch) on the mask
PLIO and its memory-tile links, as dag/plan.row_pitches pads the 17-token score rows: no link steps a
part of a word (the link checker), the kernels read the rows at the pitch, and the design runs on x86
bit for bit against the emulation with random paddings (a fully padded sample, one keeping one key)."""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

import aieflow
from aieflow.dag.plan import mask_layout, mask_pitch

T, E = 17, 16


class Mha(nn.Module):
    def __init__(self):
        super().__init__()
        self.att = nn.MultiheadAttention(E, 2, batch_first=True)
        self.fc = nn.Linear(E, 4)

    def forward(self, x, mask):
        return self.fc(self.att(x, x, x, key_padding_mask=mask, need_weights=False)[0])


def test_17_key_mask_rows_travel_in_whole_words_and_verify_bit_exact_on_x86():
    torch.manual_seed(17)
    rng = np.random.default_rng(17)
    x = rng.standard_normal((32, T, E)).astype(np.float32)
    pad = rng.random((32, T)) < rng.uniform(0.1, 0.9, (32, 1))
    pad[0] = True  # every key padded
    pad[1] = True
    pad[1, 16] = False  # one key kept: the last, in the row's last partial word
    m = Mha().eval()
    d = aieflow.compile(m, device="vek280", example_input=x[:1], calibration=(x, pad),
                        config={"precision": "int8", "batch": 8})
    assert mask_pitch(d.graph) == 20
    problems = [str(p) for link in d.plan.links for p in link.word_problems()]
    assert problems == []  # unpadded, the checker reports the mask links' 17-byte runs
    assert d.files["src/layers.h"].count("static constexpr unsigned MP = 20;") == 2  # both heads' softmaxes
    # the example mask file: 20 keep bytes per sample, the last 3 zero
    rows = mask_layout(d.graph, np.ones((2, T), dtype=np.uint8))
    assert rows.shape == (2, 20) and rows[:, :T].all() and not rows[:, T:].any()
    with torch.enable_grad():
        ref = m(torch.from_numpy(x[2:]), torch.from_numpy(pad[2:])).detach().numpy()
    assert np.abs(d.predict(x[2:], mask=pad[2:]) - ref).max() <= 0.1 * np.abs(ref).max()
    v = d.verify(x[:16], mask=pad[:16])
    assert v.ok, v.verdict()
