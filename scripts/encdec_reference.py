"""PyTorch's own encoder–decoder (``torch.nn.Transformer``, pre-LN, GELU) on ``task=add``, trained as
ablate trains (AdamW, warm-up then cosine, clipping 1.0) under two initialisations: PyTorch's defaults
and GPT-2's N(0, 0.02) (ablate's ``init=normal``). It prints the teacher-forced validation loss, to
set beside ablate's own encoder–decoder (which computes the same function with the same weights:
tests/test_seq2seq.py) under ``init=default`` and ``init=normal``:

    .venv/bin/python scripts/encdec_reference.py [--steps 1500]
    .venv/bin/ablate -m task=add model.arch=encoder_decoder init=default,normal
"""

from __future__ import annotations

import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F

from ablate.data.base import IGNORE
from ablate.data.seq2seq import Add
from ablate.optim import warmup_cosine


class Reference(nn.Module):
    def __init__(self, vocab: int, d: int, source: int, length: int) -> None:
        super().__init__()
        self.source = source
        self.tok, self.enc_pos, self.dec_pos = nn.Embedding(vocab, d), nn.Embedding(length, d), nn.Embedding(length, d)
        self.transformer = nn.Transformer(d, 4, 2, 2, 4 * d, 0.0, activation="gelu", batch_first=True, norm_first=True)
        self.head = nn.Linear(d, vocab)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        src, tgt = tokens[:, :self.source], tokens[:, self.source:]
        mask = nn.Transformer.generate_square_subsequent_mask(tgt.shape[1])
        out = self.transformer(self.tok(src) + self.enc_pos.weight[:src.shape[1]],
                               self.tok(tgt) + self.dec_pos.weight[:tgt.shape[1]], tgt_mask=mask, tgt_is_causal=True)
        return self.head(out)


def validation_loss(init: str, steps: int, lr: float = 3e-3) -> float:
    torch.manual_seed(0)
    task = Add(seq_len=16, batch_size=64)
    S = task.source_len(16)
    model = Reference(task.vocab_size, 64, S - 1, 16)
    if init == "normal":  # GPT-2's: every matrix N(0, 0.02), biases 0 (ablate's init=normal)
        for name, w in model.named_parameters():
            if w.dim() > 1:
                nn.init.normal_(w, 0.0, 0.02)
            elif name.endswith("bias"):
                nn.init.zeros_(w)
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.01, betas=(0.9, 0.98))
    batches = task.train_batches(0)
    for step in range(steps):
        for group in optimizer.param_groups:
            group["lr"] = lr * warmup_cosine(step, max(1, steps // 10), steps, 0.1)
        tokens, targets = next(batches)
        loss = F.cross_entropy(model(tokens).flatten(0, 1), targets[:, S - 1:].flatten(), ignore_index=IGNORE)
        optimizer.zero_grad()
        loss.backward()
        nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
    with torch.no_grad():
        model.eval()
        losses = [F.cross_entropy(model(t).flatten(0, 1), y[:, S - 1:].flatten(), ignore_index=IGNORE)
                  for t, y in task.eval_batches(16, "validation")]
    return float(torch.stack(losses).mean())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=1500)
    args = parser.parse_args()
    torch.set_num_threads(1)
    for init in ("default", "normal"):
        print(f"torch.nn.Transformer, init={init}: validation loss {validation_loss(init, args.steps):.3g} "
              f"after {args.steps} steps", flush=True)


if __name__ == "__main__":
    main()
