"""LEAF's Shakespeare next-character model (Caldas et al. 2018): an 8-dimensional embedding of the
80-character vocabulary, a 2-layer LSTM with 256 units, and a linear layer on the last step's output
giving the next character's logits (accuracy: next-character top-1)."""
from __future__ import annotations

from torch import nn


class CharLSTM(nn.Module):
    """Input: int64 token ids ``(N, T)`` over ``vocab`` characters; output: ``(N, vocab)`` logits."""

    def __init__(self, vocab: int = 80, embed: int = 8, hidden: int = 256, layers: int = 2):
        super().__init__()
        self.embed = nn.Embedding(vocab, embed)
        self.lstm = nn.LSTM(embed, hidden, layers, batch_first=True)
        self.fc = nn.Linear(hidden, vocab)

    def forward(self, x):
        out, _ = self.lstm(self.embed(x))
        return self.fc(out[:, -1])
