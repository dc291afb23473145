"""The run-time key padding mask tests' shared pieces: a one-block attention model with a
``key_padding_mask`` input, and the masked integer softmax row written out in Python ints (the
independent reference of docs/attention.md's fixed-point softmax: it imports nothing from aieflow)."""

from __future__ import annotations

import math

from torch import nn


class Mha(nn.Module):
    """Self-attention over ``tokens`` tokens of ``embed`` features, ``heads`` heads (two), a Linear(embed, 4)
    head; ``mask`` (True = padded key) is the forward's second input; ``causal`` adds a constant
    causal mask beside it."""

    def __init__(self, tokens: int, embed: int = 16, causal: bool = False, heads: int = 2):
        super().__init__()
        self.att = nn.MultiheadAttention(embed, heads, batch_first=True)
        self.fc = nn.Linear(embed, 4)
        causal_mask = nn.Transformer.generate_square_subsequent_mask(tokens) if causal else None
        self.register_buffer("causal", causal_mask)

    def forward(self, x, mask):
        return self.fc(
            self.att(x, x, x, key_padding_mask=mask, attn_mask=self.causal, need_weights=False)[0]
        )


def exp_table(width, frac):
    """E[k] = round_half_even(exp(-t_k 2^-frac) 2^15), t_k the bucket's midpoint when SD > 0; ends at
    its first zero (docs/attention.md), in Python floats and ints."""
    sd = max(0, frac - 8)
    out = []
    for k in range((((1 << width) - 1) >> sd) + 1):
        t = (k << sd) + ((1 << (sd - 1)) if sd else 0)
        out.append(round(math.exp(-t / 2**frac) * 2**15))
        if out[-1] == 0:
            break
    return out, sd


def ref_row(row, keep, table, sd, frac_out, hi):
    """One softmax row over the kept keys (a dropped key's output 0, a fully padded row all 0)."""
    kept = [int(v) for v, ok in zip(row, keep, strict=True) if ok]
    if not kept:
        return [0] * len(row)
    m = max(kept)
    e = [
        table[min((m - int(v)) >> sd, len(table) - 1)] if ok else 0
        for v, ok in zip(row, keep, strict=True)
    ]
    s = sum(e)
    inv = ((1 << 46) + s // 2) // s
    return [min(hi, (v * inv + (1 << (45 - frac_out))) >> (46 - frac_out)) for v in e]
